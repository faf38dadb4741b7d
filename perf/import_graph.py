"""Size of evalkit's import graph, and which modules read the whole run's config (issue 34 item 6).

    python perf/import_graph.py [--src src] [--list]

Reads the sources with ``ast`` (nothing is imported or run) and prints two lines:

- ``import graph: M modules and packages, A arrows``: the nodes are evalkit's top-level modules
  plus its subpackages taken whole (``evalkit.engine`` stands for everything below it), as the
  issue counts them; an arrow is one node importing another (function-local imports count, a
  package's imports of itself do not).
- ``config readers: R modules (I import EvalConfig)``: the source files (``engine/run.py``, not
  ``engine``) that import ``EvalConfig``, or annotate with it, or read one of its top-level fields
  (``model``, ``run``, ``tracking``, ... as ``EvalConfig`` declares them in ``config.py``) off a
  name or attribute called ``cfg`` (``cfg.run``, ``plan.cfg.model``; a ``cfg`` parameter annotated
  ``DictConfig`` is a composed config, not yet an ``EvalConfig``, and is not counted). A typed spec built from the
  config (``evalkit.engine.specs``) is not a reader; the design allows compose, job, the spec
  builder and config itself (issue 34 item 4: at most 4).

``--list`` adds the readers' names. The figures are counts, not times: the same tree always prints
the same numbers.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def modules(src: Path) -> dict[str, Path]:
    """Dotted name → file of every module under ``src/evalkit`` (a package by its ``__init__``)."""
    out = {}
    for path in sorted((src / "evalkit").rglob("*.py")):
        name = ".".join(path.relative_to(src).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imported(name: str, path: Path, tree: ast.Module, known: dict[str, Path]) -> set[str]:
    """The evalkit modules ``name`` imports (the longest known prefix of each imported name)."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for n in names:
            while n and n not in known:
                n = n.rsplit(".", 1)[0] if "." in n else ""
            if n.startswith("evalkit") and n != name:
                out.add(n)
    return out


def node_of(name: str) -> str:
    """The graph node of a module: ``evalkit.X`` for a top-level module, the subpackage otherwise."""
    return ".".join(name.split(".")[:2])


def config_fields(src: Path) -> set[str]:
    """The top-level fields ``EvalConfig`` declares in ``config.py`` (``model``, ``run``, ...)."""
    tree = ast.parse((src / "evalkit" / "config.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EvalConfig":
            return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    raise SystemExit("config.py declares no EvalConfig")


def _is_cfg(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "cfg") or (isinstance(node, ast.Attribute) and node.attr == "cfg")


def _composed(tree: ast.Module) -> set[int]:
    """The ids of the ``cfg`` names inside functions whose ``cfg`` parameter is annotated
    ``DictConfig``: a composed (Hydra) config, before validation — not ``EvalConfig``."""
    out: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            if any(a.arg == "cfg" and a.annotation is not None and "DictConfig" in ast.unparse(a.annotation) for a in args):
                out.update(id(n) for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == "cfg")
    return out


def reads_config(tree: ast.Module, fields: set[str]) -> tuple[bool, bool]:
    """(reads the config at all, imports ``EvalConfig``) of one module's tree."""
    imports = any(isinstance(n, ast.ImportFrom) and any(a.name == "EvalConfig" for a in n.names) for n in ast.walk(tree))
    annotated = any(isinstance(n, ast.Name) and n.id == "EvalConfig" for n in ast.walk(tree))
    composed = _composed(tree)
    attrs = any(isinstance(n, ast.Attribute) and n.attr in fields and _is_cfg(n.value) and id(n.value) not in composed
                for n in ast.walk(tree))  # fmt: skip
    return imports or annotated or attrs, imports


def scan(src: Path) -> dict[str, object]:
    """``{"nodes", "arrows", "readers", "importers"}`` of the tree under ``src``: counts, and the
    reading modules' names (sorted)."""
    known = modules(src)
    fields = config_fields(src)
    arrows: set[tuple[str, str]] = set()
    readers, importers = [], []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target in imported(name, path, tree, known):
            a, b = node_of(name), node_of(target)
            if a != b and "evalkit" not in (a, b):
                arrows.add((a, b))
        reads, imports = reads_config(tree, fields)
        if reads:
            readers.append(name)
        if imports:
            importers.append(name)
    nodes = {node_of(n) for n in known if n != "evalkit"}
    return {"nodes": len(nodes), "arrows": len(arrows), "readers": sorted(readers), "importers": sorted(importers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent / "src")
    parser.add_argument("--list", action="store_true", help="name the modules that read the config")
    args = parser.parse_args()
    out = scan(args.src)
    print(f"import graph: {out['nodes']} modules and packages, {out['arrows']} arrows")
    print(f"config readers: {len(out['readers'])} modules ({len(out['importers'])} import EvalConfig)")
    if args.list:
        for name in out["readers"]:
            print(f"  {name}{' (imports EvalConfig)' if name in out['importers'] else ''}")


if __name__ == "__main__":
    main()
