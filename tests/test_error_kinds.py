"""``error_kind`` is one documented list (``types.ErrorKind``): every kind evalkit writes is
a member, and every member is written somewhere or named as read-only."""

from __future__ import annotations

import ast
from pathlib import Path

from evalkit.types import ErrorKind

SRC = Path(__file__).resolve().parents[1] / "src" / "evalkit"


def _strings(node: ast.AST, constants: dict[str, str]) -> set[str]:
    """The string values an expression can take: literals, conditional branches and
    module-level string constants named in it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(node.body, constants) | _strings(node.orelse, constants)
    if isinstance(node, ast.Name) and node.id in constants:
        return {constants[node.id]}
    if isinstance(node, ast.Attribute) and node.attr in ErrorKind.__members__:
        return {ErrorKind[node.attr].value}
    return set()


def _fails_with_kind(func: ast.AST) -> bool:
    """Whether a function builds ``Failure(kind, ...)`` from a local named ``kind``."""
    return any(isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "Failure" and sub.args
               and isinstance(sub.args[0], ast.Name) and sub.args[0].id == "kind" for sub in ast.walk(func))


def kinds_written() -> dict[str, set[str]]:
    """Every error kind the source writes → the files writing it: first arguments of
    ``Failure(...)``, ``"error_kind": ...`` dict entries, the return values of a function
    named ``error_kind``, and the ``kind = ...`` assignments of a
    function that builds ``Failure(kind, ...)``."""
    constants: dict[str, str] = {}
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(SRC.rglob("*.py"))}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.isupper():
                        constants[target.id] = node.value.value
    found: dict[str, set[str]] = {}

    def add(values: set[str], path: Path) -> None:
        for value in values:
            found.setdefault(value, set()).add(str(path.relative_to(SRC)))

    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Failure" and node.args:
                add(_strings(node.args[0], constants), path)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Failure":
                for kw in node.keywords:
                    if kw.arg == "error_kind":
                        add(_strings(kw.value, constants), path)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value == "error_kind" and value is not None:
                        add(_strings(value, constants), path)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _fails_with_kind(node):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "kind" for t in sub.targets):
                        add(_strings(sub.value, constants), path)
            if isinstance(node, ast.FunctionDef) and node.name == "error_kind":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return) and sub.value is not None:
                        add(_strings(sub.value, constants), path)
    return found


def test_every_error_kind_written_is_a_documented_member():
    written = kinds_written()
    members = {k.value for k in ErrorKind}
    unknown = {kind: files for kind, files in written.items() if kind not in members}
    assert not unknown, f"error kinds written but not in types.ErrorKind: {unknown}"


def test_every_member_is_written_somewhere():
    written = kinds_written()
    # the scan finds real writers: the network kinds come from litellm_client.error_kind
    assert written["rate_limit"] == {"models/litellm_client.py"}
    assert "engine/delivery.py" in written["worker_died"]
    unused = {k.value for k in ErrorKind} - set(written)
    assert not unused, f"types.ErrorKind members nothing writes: {unused}"


def test_members_are_their_plain_strings_in_records():
    import json

    assert json.dumps({"error_kind": ErrorKind.WORKER_DIED}) == '{"error_kind": "worker_died"}'
    assert ErrorKind("budget_exceeded") is ErrorKind.BUDGET_EXCEEDED
    for kind in ErrorKind:
        assert kind.__doc__ is not None
