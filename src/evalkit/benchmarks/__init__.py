"""Benchmark registry: importing this package registers every built-in benchmark.

A benchmark from outside evalkit registers without editing evalkit, in one of two ways:

* an **entry point** of the group :data:`ENTRY_POINT_GROUP` (``evalkit.benchmarks``) in the
  user's package metadata, named by the benchmark's name and pointing at its class (or at a
  module whose import registers it): ``[project.entry-points."evalkit.benchmarks"]
  wordcount = "wordcount_bench:WordCount"``; found by name when first looked up;
* **``benchmark.module=pkg.mod``**: a module imported before the lookup (its import registers
  the class with :func:`~evalkit.benchmarks.base.register`), for a run started on the
  command line. A run directory never makes evalkit import a module (``rescore``,
  ``compare`` and ``track`` read untrusted directories): they find a benchmark that is
  built in or has an entry point.

Either way the code is imported from the environment evalkit runs in (the Ray workers and
the scoring processes share it); its YAML lives in the user's config directory
(``EVALKIT_CONFIG_DIR``, on Hydra's search path: :mod:`evalkit.compose`).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from evalkit.benchmarks import acebench, ke, sobhard  # noqa: F401  (each registers itself)
from evalkit.benchmarks.base import _REGISTRY, Benchmark, register
from evalkit.benchmarks.task import TaskBenchmark
from evalkit.errors import ConfigError

#: the entry point group of benchmarks from other packages
ENTRY_POINT_GROUP = "evalkit.benchmarks"
#: ``benchmark.kind`` → the benchmark class of every config of that kind (``name`` is then
#: the config's own: a YAML task is named by its file)
KINDS: dict[str, type[Benchmark]] = {"task": TaskBenchmark}


def import_module(module: str) -> None:
    """Import ``module`` (``benchmark.module``), which registers its benchmark.

    Raises:
        ConfigError: the module cannot be imported (one line naming it and why).
    """
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module's: one line
        raise ConfigError(f"benchmark.module: cannot import {module!r} ({type(exc).__name__}: {exc})") from None


def _from_entry_point(name: str) -> None:
    """Load the entry point ``name`` of :data:`ENTRY_POINT_GROUP`, if there is one: a
    :class:`Benchmark` subclass is registered; a module registers itself on import.

    Raises:
        ConfigError: the entry point cannot be loaded, or names no benchmark ``name``.
    """
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            target = ep.load()
        except Exception as exc:  # noqa: BLE001 - the user's package: one line
            raise ConfigError(f"benchmark {name}: entry point {ep.value!r} cannot be loaded ({type(exc).__name__}: {exc})") from None
        if isinstance(target, type) and issubclass(target, Benchmark) and name not in _REGISTRY:
            register(target)
        if name not in _REGISTRY:
            raise ConfigError(f"benchmark {name}: entry point {ep.value!r} registers no benchmark named {name!r}")
        return


def get_benchmark_class(name: str, module: str | None = None, kind: str | None = None) -> type[Benchmark]:
    """The benchmark class of a config: of its ``kind`` (``benchmark.kind``: ``task``), else
    the one registered as ``name`` — built in, imported with ``module``
    (``benchmark.module``), or found through an entry point (see the module docstring).

    Raises:
        KeyError: no such benchmark (or kind), with the known names.
        ConfigError: ``module`` or the entry point cannot be imported.
    """
    if kind is not None:
        if kind not in KINDS:
            raise KeyError(f"unknown benchmark kind {kind!r}; known: {', '.join(sorted(KINDS))}")
        return KINDS[kind]
    if module and name not in _REGISTRY:
        import_module(module)
    if name not in _REGISTRY:
        _from_entry_point(name)
    if name not in _REGISTRY:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(known_benchmarks())}")
    return _REGISTRY[name]


def entry_point_names() -> list[str]:
    """Names of the benchmarks installed through entry points (:data:`ENTRY_POINT_GROUP`),
    sorted; none is imported."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def known_benchmarks() -> list[str]:
    """Names of the registered benchmarks and of the entry points, sorted."""
    return sorted(set(_REGISTRY) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
