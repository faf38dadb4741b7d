"""The operations the family constraints replay or verify (spec §7.2, §8.1–§8.4).

Paths, patch replay, the diff of two versions and its application, the record join,
template rendering, JSON Schema inference and keyword collection, and the property each
transform rule promises. Each function raises :class:`OperationError` (or a plain
exception) on input it cannot handle; constraint checks turn that into a failure.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from typing import Any, Iterator

from evalkit.benchmarks.sobhard.compare import canonical, is_number, scalars, value_text

_INDEX_RE = re.compile(r"\[(\d+)\]")
_NAME_RE = re.compile(r"[^.\[\]]+")


class OperationError(ValueError):
    """A replayed operation failed (bad path, wrong container, index out of range)."""


# ---- paths (§7.2) ---------------------------------------------------------------------
def parse_path(path: str) -> list[str | int]:
    """``a.b[0].c`` → ``['a', 'b', 0, 'c']``; ``[2].x`` → ``[2, 'x']``; ``""`` → ``[]``.

    A step is ``[digits]`` or a run of characters other than ``.``, ``[``, ``]``; names
    after the first step are preceded by ``.``.

    Raises:
        OperationError: text that is not a path (empty step, stray bracket).
    """
    steps: list[str | int] = []
    pos, n = 0, len(path)
    while pos < n:
        if path[pos] == "[":
            m = _INDEX_RE.match(path, pos)
            if not m:
                raise OperationError(f"bad path {path!r} at {pos}")
            steps.append(int(m.group(1)))
        else:
            if steps:
                if path[pos] != ".":
                    raise OperationError(f"bad path {path!r} at {pos}")
                pos += 1
            m = _NAME_RE.match(path, pos)
            if not m:
                raise OperationError(f"bad path {path!r} at {pos}")
            steps.append(m.group(0))
        pos = m.end()
    return steps


def get_path(doc: Any, steps: list[str | int]) -> Any:
    """Value at ``steps``; raises ``KeyError`` / ``IndexError`` / ``TypeError`` if absent."""
    cur = doc
    for step in steps:
        if isinstance(step, int):
            if not isinstance(cur, list):
                raise TypeError(f"index [{step}] into {type(cur).__name__}")
            if step >= len(cur):
                raise IndexError(step)
            cur = cur[step]
        else:
            if not isinstance(cur, dict):
                raise TypeError(f"key {step!r} into {type(cur).__name__}")
            cur = cur[step]
    return cur


def _parent(doc: Any, path: str) -> tuple[Any, str | int]:
    steps = parse_path(path)
    if not steps:
        raise OperationError("empty path")
    try:
        parent = get_path(doc, steps[:-1])
    except (KeyError, IndexError, TypeError) as exc:
        raise OperationError(f"{path}: parent not found ({exc!r})") from None
    return parent, steps[-1]


def op_set(doc: Any, path: str, value: Any) -> Any:
    if path == "":
        return copy.deepcopy(value)
    parent, last = _parent(doc, path)
    if isinstance(last, int):
        if not isinstance(parent, list) or last >= len(parent):
            raise OperationError(f"set {path}: no list element [{last}]")
        parent[last] = copy.deepcopy(value)
    else:
        if not isinstance(parent, dict):
            raise OperationError(f"set {path}: parent is not an object")
        parent[last] = copy.deepcopy(value)
    return doc


def op_delete(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(last, int):
        if not isinstance(parent, list) or last >= len(parent):
            raise OperationError(f"delete {path}: no list element [{last}]")
        del parent[last]
    else:
        if not isinstance(parent, dict) or last not in parent:
            raise OperationError(f"delete {path}: no key {last!r}")
        del parent[last]
    return doc


def op_insert(doc: Any, path: str, value: Any) -> Any:
    parent, last = _parent(doc, path)
    if not isinstance(parent, list) or not isinstance(last, int):
        raise OperationError(f"insert {path}: the parent must be a list and the last step an index")
    if last > len(parent):
        raise OperationError(f"insert {path}: index {last} beyond length {len(parent)}")
    parent.insert(last, copy.deepcopy(value))
    return doc


def replay_patch(source: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply ``ops`` (``{op: set|delete|insert, path, value?}``) in order to a deep copy of
    ``source``; list indices address the current state (§8.3). Raises OperationError."""
    doc = copy.deepcopy(source)
    for op in ops:
        kind = op.get("op")
        if kind == "set":
            doc = op_set(doc, op["path"], op.get("value"))
        elif kind == "delete":
            doc = op_delete(doc, op["path"])
        elif kind == "insert":
            doc = op_insert(doc, op["path"], op.get("value"))
        else:
            raise OperationError(f"unknown patch operation {kind!r}")
    return doc


# ---- diff and apply_diff (§8.3) -------------------------------------------------------
def strict_equal(a: Any, b: Any) -> bool:
    """Type-strict scalar equality: booleans only equal booleans; int and float compare
    numerically; otherwise same type and equal."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def _path(path: str, step: str | int) -> str:
    if isinstance(step, int):
        return f"{path}[{step}]"
    return f"{path}.{step}" if path else step


def diff_documents(v1: Any, v2: Any) -> dict[str, dict[str, Any]]:
    """``{"added", "removed", "changed"}`` of two versions, each section's keys in
    code-point order, empty sections ``{}``; change entries ``{"было", "стало"}`` (§8.3)."""
    added: dict[str, Any] = {}
    removed: dict[str, Any] = {}
    changed: dict[str, Any] = {}

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in a:
                if k not in b:
                    removed[_path(path, k)] = a[k]
            for k in b:
                if k not in a:
                    added[_path(path, k)] = b[k]
            for k in a:
                if k in b:
                    walk(a[k], b[k], _path(path, k))
            return
        if isinstance(a, list) and isinstance(b, list):
            n = min(len(a), len(b))
            for i in range(n):
                walk(a[i], b[i], _path(path, i))
            for i in range(n, len(a)):
                removed[_path(path, i)] = a[i]
            for i in range(n, len(b)):
                added[_path(path, i)] = b[i]
            return
        scalar = not isinstance(a, (dict, list)) and not isinstance(b, (dict, list))
        if scalar and strict_equal(a, b):
            return
        changed[path] = {"было": a, "стало": b}

    walk(v1, v2, "")
    return {
        "added": {k: added[k] for k in sorted(added)},
        "removed": {k: removed[k] for k in sorted(removed)},
        "changed": {k: changed[k] for k in sorted(changed)},
    }


def _steps_key(path: str) -> tuple:
    return tuple((1, s) if isinstance(s, int) else (0, s) for s in parse_path(path))


def apply_diff(v1: Any, change: dict[str, Any]) -> Any:
    """Apply a change object to a copy of version 1 (§8.3): removals (object keys first,
    then list positions from the highest index down), replacements (``стало``), additions
    (list positions from the lowest index up, then object keys). Raises OperationError."""
    if not isinstance(change, dict):
        raise OperationError("the change object is not an object")
    doc = copy.deepcopy(v1)
    removed = change.get("removed") or {}
    changed = change.get("changed") or {}
    added = change.get("added") or {}
    rm_keys = [p for p in removed if not isinstance(parse_path(p)[-1], int)]
    rm_idx = sorted((p for p in removed if isinstance(parse_path(p)[-1], int)), key=_steps_key, reverse=True)
    for p in rm_keys + rm_idx:
        doc = op_delete(doc, p)
    for p, entry in changed.items():
        if not isinstance(entry, dict) or "стало" not in entry:
            raise OperationError(f"changed[{p!r}] has no 'стало'")
        doc = op_set(doc, p, entry["стало"])
    add_idx = sorted((p for p in added if isinstance(parse_path(p)[-1], int)), key=_steps_key)
    add_keys = [p for p in added if not isinstance(parse_path(p)[-1], int)]
    for p in add_idx:
        doc = op_insert(doc, p, added[p])
    for p in add_keys:
        doc = op_set(doc, p, added[p])
    return doc


# ---- merge (§8.3) ---------------------------------------------------------------------
_MISSING = object()


def _key_of(record: Any, key: str) -> Any:
    if not isinstance(record, dict) or key not in record:
        return _MISSING
    return ("v", canonical(record[key]), type(record[key]).__name__)


def join_records(a: list[Any], b: list[Any], join: dict[str, Any]) -> list[dict[str, Any]]:
    """The record join of two documents (§8.3): pairs on exact equality of ``join.key``;
    a paired record is A's fields plus B's, the ``winner`` side keeping shared names;
    ``order`` A or B walks that side, the other side's unpaired records (``keep`` /
    ``append``) follow at the end."""
    if not isinstance(a, list) or not isinstance(b, list):
        raise OperationError("merge: both documents must be lists of records")
    key, winner = join["key"], join.get("winner", "B")
    keep_a = join.get("unmatched_a", "keep") == "keep"
    append_b = join.get("unmatched_b", "append") == "append"

    def pair(ra: dict[str, Any], rb: dict[str, Any]) -> dict[str, Any]:
        out = dict(ra)
        for k, v in rb.items():
            if k not in out or winner == "B":
                out[k] = v
        return out

    first_a: dict[Any, dict[str, Any]] = {}
    first_b: dict[Any, dict[str, Any]] = {}
    for r in a:
        k = _key_of(r, key)
        if k is not _MISSING:
            first_a.setdefault(k, r)
    for r in b:
        k = _key_of(r, key)
        if k is not _MISSING:
            first_b.setdefault(k, r)
    out: list[dict[str, Any]] = []
    if join.get("order", "A") == "A":
        for r in a:
            k = _key_of(r, key)
            if k is not _MISSING and k in first_b:
                out.append(pair(r, first_b[k]))
            elif keep_a:
                out.append(r)
        if append_b:
            out.extend(r for r in b if (k := _key_of(r, key)) is _MISSING or k not in first_a)
    else:
        for r in b:
            k = _key_of(r, key)
            if k is not _MISSING and k in first_a:
                out.append(pair(first_a[k], r))
            elif append_b:
                out.append(r)
        if keep_a:
            out.extend(r for r in a if (k := _key_of(r, key)) is _MISSING or k not in first_b)
    return copy.deepcopy(out)


# ---- template (§8.3) ------------------------------------------------------------------
def _render_value(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise OperationError("template: a placeholder points at a container")
    if isinstance(value, float):
        return repr(value)
    return value_text(value)


def render_template(template: str, record: Any) -> str:
    """Render one record (§8.3): ``$${`` → literal ``${``; ``${path}`` → the value at
    ``path`` (strings as they are, integers decimal, floats shortest round-trip, booleans
    ``true``/``false``, null ``null``, a missing path ``""``, a container is an error); an
    unclosed ``${`` emits the rest literally."""
    out: list[str] = []
    i, n = 0, len(template)
    while i < n:
        if template.startswith("$${", i):
            out.append("${")
            i += 3
        elif template.startswith("${", i):
            j = template.find("}", i + 2)
            if j < 0:
                out.append(template[i:])
                break
            try:
                value = get_path(record, parse_path(template[i + 2 : j]))
            except (KeyError, IndexError, TypeError, OperationError):
                value = ""
            out.append(_render_value(value))
            i = j + 1
        else:
            k = template.find("$", i + 1)
            k = n if k < 0 else k
            out.append(template[i:k])
            i = k
    return "".join(out)


def template_records(records: Any) -> list[Any]:
    """The records a template is rendered for: a list as is, a single object as one."""
    if isinstance(records, list):
        return records
    if isinstance(records, dict):
        return [records]
    raise OperationError(f"template records must be a list or an object, not {type(records).__name__}")


# ---- schema inference (§8.4) ----------------------------------------------------------
ALLOWED_KEYWORDS = {
    "minimal": frozenset({"type", "properties", "required", "items", "$schema"}),
    "union": frozenset({"type", "properties", "required", "items", "$schema"}),
    "bounds": frozenset({"type", "properties", "required", "items", "$schema", "minItems", "maxItems"}),
    "enum": frozenset({"type", "properties", "required", "items", "$schema", "enum"}),
    "oneOf": frozenset({"type", "properties", "required", "items", "$schema", "oneOf"}),
    "full": frozenset({"type", "properties", "required", "items", "$schema", "minItems", "maxItems", "enum"}),
}


def infer_schema(value: Any, kind: str = "minimal") -> dict[str, Any]:
    """The schema a ``schema_gen`` answer must equal (§8.4)."""
    if kind not in ALLOWED_KEYWORDS:
        raise OperationError(f"unknown schema_kind {kind!r}")
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {k: infer_schema(v, kind) for k, v in value.items()},
            "required": sorted(value),
        }
    if isinstance(value, list):
        out: dict[str, Any] = {"type": "array"}
        if value:
            out["items"] = _items_schema(value, kind)
        if kind in ("bounds", "full"):
            out["minItems"] = len(value)
            out["maxItems"] = len(value)
        return out
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if value is None:
        return {"type": "null"}
    raise OperationError(f"no JSON Schema type for {type(value).__name__}")


def _items_schema(arr: list[Any], kind: str) -> dict[str, Any]:
    all_str = all(isinstance(v, str) for v in arr)
    if kind in ("union", "full"):
        if all(isinstance(v, dict) for v in arr):
            first: dict[str, Any] = {}
            for v in arr:
                for k, x in v.items():
                    first.setdefault(k, x)
            return {
                "type": "object",
                "properties": {k: infer_schema(first[k], kind) for k in sorted(first)},
                "required": sorted(k for k in first if all(k in v for v in arr)),
            }
        out = infer_schema(arr[0], kind)
        if kind == "full" and all_str:
            out["enum"] = sorted(set(arr))
        return out
    if kind == "oneOf":
        seen: dict[str, dict[str, Any]] = {}
        for v in arr:
            s = infer_schema(v, kind)
            seen.setdefault(canonical(s), s)
        if len(seen) == 1:
            return next(iter(seen.values()))
        return {"oneOf": [seen[t] for t in sorted(seen)]}
    out = infer_schema(arr[0], kind)
    if kind == "enum" and all_str:
        out["enum"] = sorted(set(arr))
    return out


def schema_keywords(schema: Any) -> set[str]:
    """Every keyword used in ``schema`` (§8.4): members of ``properties`` are names (their
    values are schemas); the contents of ``required`` and ``enum`` are data."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for x in node:
                walk(x)
            return
        if not isinstance(node, dict):
            return
        for k, v in node.items():
            found.add(str(k))
            if k == "properties" and isinstance(v, dict):
                for sub in v.values():
                    walk(sub)
            elif k in ("required", "enum"):
                continue
            else:
                walk(v)

    walk(schema)
    return found


def required_lists(node: Any) -> Iterator[list[Any]]:
    """Every ``required`` list anywhere in a schema."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "required" and isinstance(v, list):
                yield v
            else:
                yield from required_lists(v)
    elif isinstance(node, list):
        for x in node:
            yield from required_lists(x)


# ---- value multisets and list order (§8.2) --------------------------------------------
def scalar_leaves(value: Any, tolerant: bool = False) -> list[str]:
    """Canonical JSON text of every scalar leaf (keys are not leaves), sorted.
    ``tolerant`` writes finite numbers as floats (5 == 5.0)."""
    out: list[str] = []
    for v in scalars(value):
        if tolerant and is_number(v):
            try:
                out.append(canonical(float(v)))
            except OverflowError:
                out.append(canonical(v))
        else:
            out.append(canonical(v))
    out.sort()
    return out


def leaves_detail(got: list[str], want: list[str]) -> str:
    """Which leaf values occur how often in the answer vs gold (§8.2: never "extra=[] lost=[]")."""
    cg, cw = Counter(got), Counter(want)
    diffs = [(t, cg.get(t, 0), cw.get(t, 0)) for t in sorted(set(cg) | set(cw)) if cg.get(t, 0) != cw.get(t, 0)]
    shown = ", ".join(f"{t[:40]}: {a}× (expected {b}×)" for t, a, b in diffs[:5])
    return f"{len(diffs)} leaf value(s) with different counts: {shown}" + (" …" if len(diffs) > 5 else "")


def reordered_lists(answer: Any, gold: Any, path: str = "") -> list[str]:
    """Paths where a list of the answer is a reordering of the gold list (§8.2)."""
    found: list[str] = []

    def walk(a: Any, g: Any, p: str) -> None:
        if isinstance(a, dict) and isinstance(g, dict):
            if a.keys() == g.keys():
                for k in g:
                    walk(a[k], g[k], _path(p, k) if isinstance(k, str) else _path(p, str(k)))
            return
        if isinstance(a, list) and isinstance(g, list) and len(a) == len(g):
            sa, sg = [canonical(x) for x in a], [canonical(x) for x in g]
            if sa != sg and sorted(sa) == sorted(sg):
                found.append(p)
                return
            for i, (x, y) in enumerate(zip(a, g)):
                walk(x, y, _path(p, i))

    walk(answer, gold, path)
    return found
