"""Benchmark registry: importing this package registers every built-in benchmark."""

from __future__ import annotations

from evalkit.benchmarks import acebench, ke, sobhard  # noqa: F401  (each registers itself)
from evalkit.benchmarks.base import _REGISTRY, Benchmark


def get_benchmark_class(name: str) -> type[Benchmark]:
    """The registered benchmark class; raises ``KeyError`` with the known names."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def known_benchmarks() -> list[str]:
    """Names of the registered benchmarks, sorted."""
    return sorted(_REGISTRY)
