"""What is there, and what can be set: ``python -m evalkit list`` and ``python -m evalkit show``.

    python -m evalkit list benchmarks|models|judges|suites
    python -m evalkit show benchmark=NAME        every benchmark.* knob: type, default, doc
    python -m evalkit show model=NAME            every model.* knob, with the config's values

``list`` names what evalkit ships (``conf/``, ``suites/``), what the user's config
directories add (``EVALKIT_CONFIG_DIR``) and the benchmarks installed through entry points,
each with one line of description: the first comment line of its YAML, or the first line of
the benchmark class's docstring. ``show`` reads the knobs from the pydantic models that
validate them (a benchmark's ``settings_model``, :class:`evalkit.config.ModelConfig`), their
docs from the field's description, its ``#:`` comment, or the class docstring's ````name````
entry. Config files are read as data through :mod:`evalkit.untrusted` (nothing in them runs).

Exit codes: 0 listed or shown; 2 an unknown word, option or name (one line).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel

from evalkit.benchmarks import entry_point_names, get_benchmark_class
from evalkit.compose import CONF_DIR, CONFIG_DIR_ENV, config_dirs, option_file
from evalkit.config import ModelConfig
from evalkit.errors import ConfigError, EvalkitError, printable
from evalkit.untrusted import MAX_YAML_BYTES, load_yaml, read_bytes

REPO_SUITES = CONF_DIR.parent / "suites"
KINDS = ("benchmarks", "models", "judges", "suites")
USAGE = ("usage: python -m evalkit list benchmarks|models|judges|suites | "
         "python -m evalkit show benchmark=NAME | python -m evalkit show model=NAME")  # fmt: skip
#: model configs that are not models to evaluate or to judge with (offline baselines)
_BASELINE_PREFIX = "baseline_"


def _first_comment(path: Path) -> str:
    """The first sentence of the comment block a YAML file opens with (``""`` when none), at
    most 160 characters."""
    try:
        text = read_bytes(path, MAX_YAML_BYTES, what="a YAML file", error=ConfigError).decode("utf-8", "replace")
    except ConfigError:
        return "(unreadable)"
    words = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if not line.lstrip("#").strip().startswith("@"):
            words.append(line.lstrip("#").strip())
    block = " ".join(w for w in words if w)
    end = re.search(r"\.(\s|$)", block)
    sentence = block[: end.start() + 1] if end else block
    return sentence if len(sentence) <= 160 else sentence[:159] + "…"


def _options(folder: str) -> Iterator[tuple[str, str, Path]]:
    """``(name, where, path)`` of each ``<folder>/*.yaml`` of ``conf/`` (``built-in``) and of
    each config directory (its path); a name a directory repeats is shown where Hydra takes
    it from (``conf/`` first)."""
    seen: set[str] = set()
    for where, root in (("built-in", CONF_DIR), *((str(d), d) for d in config_dirs())):
        for path in sorted((root / folder).glob("*.yaml")) if (root / folder).is_dir() else []:
            if path.stem not in seen:
                seen.add(path.stem)
                yield path.stem, where, path


def _rows(kind: str) -> list[tuple[str, str, str]]:
    """``(name, where, description)`` of every item of ``kind`` (one of :data:`KINDS`)."""
    if kind == "benchmarks":
        rows = [(name, where, _first_comment(path)) for name, where, path in _options("benchmark")]
        named = {r[0] for r in rows}
        for name in entry_point_names():
            if name not in named:
                doc = (inspect.getdoc(get_benchmark_class(name)) or "").splitlines()
                rows.append((name, "entry point", doc[0] if doc else ""))
        return rows
    if kind == "suites":
        return [(p.stem, "built-in", _first_comment(p)) for p in sorted(REPO_SUITES.glob("*.yaml"))]
    models = [(name, where, _first_comment(path)) for name, where, path in _options("model")]
    if kind == "judges":
        return [r for r in models if not r[0].startswith(_BASELINE_PREFIX) and r[0] != "replay"]
    return models


def list_items(kind: str) -> str:
    """The text of ``python -m evalkit list <kind>``.

    Raises:
        ConfigError: ``kind`` is not one of :data:`KINDS`."""
    if kind not in KINDS:
        raise ConfigError(f"list {printable(kind, 40)}: not something evalkit lists; list one of: {', '.join(KINDS)}")
    rows = _rows(kind)
    width = max((len(r[0]) for r in rows), default=0)
    lines = [f"{name:<{width}}  {printable(desc, 160)}" + ("" if where == "built-in" else f"  [{where}]")
             for name, where, desc in rows]  # fmt: skip
    head = {
        "benchmarks": "benchmarks (benchmark=NAME; python -m evalkit show benchmark=NAME lists its knobs):",
        "models": "model configs (model=NAME; python -m evalkit show model=NAME lists its knobs):",
        "judges": "model configs that can judge (judge=NAME, a panel judge=[a,b]; model=reference's judge is the gold verdict):",
        "suites": "suites (bash bash/run_suite.sh NAME --model M):",
    }[kind]
    extra = [] if config_dirs() else [f"(a config directory adds its own: {CONFIG_DIR_ENV}=/path/to/dir)"]
    return "\n".join([head, *lines, *extra]) + "\n"


# ---- show ----------------------------------------------------------------------------------
def _type_name(annotation: Any) -> str:
    """A field's type as a reader writes it (``int``, ``str | None``, ``'en' | 'zh'``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _comment_docs(cls: type) -> dict[str, str]:
    """``{field: text}`` of the ``#:`` comments above each field in the source of ``cls``
    and its bases (a subclass's comment wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is BaseModel or not issubclass(klass, BaseModel):
            continue
        try:
            lines, _ = inspect.getsourcelines(klass)
        except (OSError, TypeError):
            continue
        tree = ast.parse(textwrap.dedent("".join(lines)))
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node in body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                above, at = [], node.lineno - 2
                while at >= 0 and lines[at].strip().startswith("#:"):
                    above.insert(0, lines[at].strip()[2:].strip())
                    at -= 1
                if above:
                    docs[node.target.id] = " ".join(above)
    return docs


def _docstring_docs(cls: type) -> dict[str, str]:
    """``{field: text}`` from the ````name````: entries of the docstrings of ``cls`` and its
    bases: the text after the entry, to the next entry or the paragraph's end."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        text = " ".join((klass.__dict__.get("__doc__") or "").split())
        for match in re.finditer(r"(?:^|(?<=[.;]\s))((?:``\w+``(?: / )?)+):\s*(.+?)(?=\s(?:``\w+``(?: / )?)+:|$)", text):
            for name in re.findall(r"``(\w+)``", match.group(1)):
                docs[name] = match.group(2).strip()
    return docs


def _inherited_description(model: type[BaseModel], name: str) -> str:
    """The ``Field`` description of ``name`` in the nearest base of ``model`` that gives one (a
    subclass that narrows a field, ``name: Literal["ke"]``, keeps its base's doc)."""
    for klass in model.__mro__[1:]:
        fields = getattr(klass, "model_fields", None)
        if isinstance(fields, dict) and name in fields and fields[name].description:
            return fields[name].description
    return ""


def knobs(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str]]:
    """``(key, type, default, doc)`` of every field of ``model`` (nested models expanded into
    dotted keys; the items of a list of models as ``key[].field``; a field by its alias,
    the name a config writes), in declaration order. The doc is the field's description
    (its own, else a base's), its ``#:`` comment, or the class docstring's entry."""
    comments, described = _comment_docs(model), _docstring_docs(model)
    rows = []
    for name, info in model.model_fields.items():
        key = f"{prefix}.{info.alias or name}"
        inner = info.annotation
        nested = [a for a in (typing.get_args(inner) or (inner,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if info.is_required():
            default = "(required)"
        elif info.default_factory is not None:
            try:
                default = repr(info.default_factory())  # type: ignore[call-arg]
            except Exception:  # noqa: BLE001 - a factory needing arguments: say so
                default = "(computed)"
        else:
            default = repr(info.default)
        doc = info.description or comments.get(name) or described.get(name) or _inherited_description(model, name)
        rows.append((key, _type_name(inner), default, doc))
        if nested:
            rows += knobs(nested[0], key + ("[]" if typing.get_origin(inner) is list else ""))
    return rows


def _config_of(group: str, name: str) -> tuple[Path, dict[str, Any]]:
    path = option_file(group, name)
    if path is None:
        return Path(f"<entry point {name}>"), {"name": name}
    data = load_yaml(read_bytes(path, MAX_YAML_BYTES, what="a YAML file", error=ConfigError), str(path), ConfigError)
    return path, data if isinstance(data, dict) else {}


def show(arg: str) -> str:
    """The text of ``python -m evalkit show benchmark=NAME`` or ``show model=NAME``.

    Raises:
        ConfigError: not ``benchmark=`` or ``model=``, or no such config (one line, with the
            names there are)."""
    group, _, name = arg.partition("=")
    if group not in ("benchmark", "model") or not name:
        raise ConfigError(f"show {printable(arg, 60)}: {USAGE}")
    known = [r[0] for r in _rows("benchmarks" if group == "benchmark" else "models")]
    if name not in known:
        raise ConfigError(f"{group}={printable(name, 60)}: no such {group}; there are: {', '.join(known)}")
    path, data = _config_of(group, name)
    if group == "benchmark":
        try:
            cls = get_benchmark_class(str(data.get("name", name)), data.get("module"), data.get("kind"))
        except KeyError as exc:
            raise ConfigError(f"benchmark={printable(name, 60)}: {exc.args[0]}") from None
        model: type[BaseModel] = cls.settings_model
    else:
        model = ModelConfig
    rows = knobs(model, group)
    set_here = _flatten(data, group)
    lines = [f"{group}={name}  ({path}; {model.__name__})"]
    for key, kind, default, doc in rows:
        value = f"  [this config: {printable(repr(set_here[key]), 80)}]" if key in set_here else ""
        lines.append(f"  {key}: {kind} = {printable(default, 80)}{value}")
        if doc:
            lines += [f"      {ln}" for ln in textwrap.wrap(doc, 92)[:4]]
    return "\n".join(lines) + "\n"


def _flatten(data: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "defaults":
            continue
        out[f"{prefix}.{key}"] = value
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}.{key}"))
    return out


def main(argv: list[str]) -> int:
    """``python -m evalkit list …`` / ``show …`` (``argv`` without the program name)."""
    try:
        if len(argv) != 2:
            raise ConfigError(USAGE)
        sys.stdout.write(list_items(argv[1]) if argv[0] == "list" else show(argv[1]))
    except EvalkitError as exc:
        print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
        return exc.exit_code
    return 0
