"""Properties the transform rules promise, checked on the final answer (spec §8.1 [O]).

``check_program(answer, program)`` verifies every step from the last reshaping step
(``count_by`` or ``melt``: the first occurrence of each, the later of the two) to the end.
Each verifier returns ``None`` when the property holds, else a one-line reason. A rule
without a verifier fails. "Field gone" cases pass: a promise about a field a later rule
removed is no longer observable.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from evalkit.benchmarks.sobhard.compare import canonical, is_number, scalars, value_text

RESHAPERS = ("count_by", "melt")
_FLAT_KEY = re.compile(r"(?:[^.\[\]]+|\[\d+\])(?:\.[^.\[\]]+|\[\d+\])*")
_INT_STRING = re.compile(r"-?[0-9]+")


def _objects(value: Any):
    """Every object at any depth (pre-order)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            yield v
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))


def _sorted_keys(obj: dict[Any, Any]) -> bool:
    keys = [str(k) for k in obj]
    return all(a <= b for a, b in zip(keys, keys[1:]))


def record_lists(answer: Any) -> list[list[Any]]:
    """The record lists of an answer: the answer if it is a list, or every value of an
    object whose every value is a list of objects (a grouped answer)."""
    if isinstance(answer, list):
        return [answer]
    if isinstance(answer, dict) and answer and all(
        isinstance(v, list) and all(isinstance(r, dict) for r in v) for v in answer.values()
    ):
        return list(answer.values())
    return []


def records(answer: Any) -> list[dict[str, Any]]:
    """"Records" of §8.1: the objects of the answer list, or of all lists of a grouped answer."""
    return [r for lst in record_lists(answer) for r in lst if isinstance(r, dict)]


def _sort_keys(answer: Any, params: dict[str, Any]) -> str | None:
    for obj in _objects(answer):
        if not _sorted_keys(obj):
            return f"keys not in code-point order: {[str(k) for k in obj][:6]}"
    return None


def _flatten(answer: Any, params: dict[str, Any]) -> str | None:
    if not isinstance(answer, dict):
        return "not an object"
    for k, v in answer.items():
        if isinstance(v, (dict, list)):
            return f"value of {k!r} is a container"
        if not isinstance(k, str) or not _FLAT_KEY.fullmatch(k):
            return f"key {k!r} is not a path"
    return None


def _unflatten(answer: Any, params: dict[str, Any]) -> str | None:
    for obj in _objects(answer):
        for k in obj:
            if "." in str(k) or "[" in str(k):
                return f"key {k!r} still holds a path"
    return None


def _camel_keys(answer: Any, params: dict[str, Any]) -> str | None:
    for obj in _objects(answer):
        for k in obj:
            if "_" in str(k):
                return f"key {k!r} contains '_'"
    return None


def _satisfies(record: dict[str, Any], field: str, op: str, value: Any, strict: bool) -> bool:
    v = record.get(field)
    if op in ("gt", "lt"):
        if not is_number(v) or not is_number(value):
            return False
        return v > value if op == "gt" else v < value
    if strict:
        from evalkit.benchmarks.sobhard.operations import strict_equal

        equal = (v is None and value is None) or (
            not isinstance(v, (dict, list)) and not isinstance(value, (dict, list)) and strict_equal(v, value)
        ) or (isinstance(v, (dict, list)) and canonical(v) == canonical(value))
    else:
        equal = v == value  # observed: the host language's ==, under which 1 == 1.0 == True
    if op == "eq":
        return equal
    if op == "ne":
        return not equal
    raise ValueError(f"unknown filter op {op!r}")


def _filter_records(answer: Any, params: dict[str, Any]) -> str | None:
    recs = records(answer)
    field = params["field"]
    if not any(field in r for r in recs):
        return None
    for i, r in enumerate(recs):
        if not _satisfies(r, field, params["op"], params.get("value"), False):
            return f"record {i} ({field}={r.get(field)!r}) does not satisfy {params['op']} {params.get('value')!r}"
    return None


def _sort_records(answer: Any, params: dict[str, Any]) -> str | None:
    field, numeric = params["field"], bool(params.get("numeric"))
    for lst in record_lists(answer):
        if any(not isinstance(r, dict) or field not in r for r in lst):
            continue
        keys = [r[field] for r in lst]
        if numeric:
            if not all(is_number(k) for k in keys):
                return f"{field} is not a number in every record"
        else:
            keys = [value_text(k) for k in keys]
        for a, b in zip(keys, keys[1:]):
            if a > b:
                return f"{field}: {a!r} before {b!r}"
    return None


def _group_records(answer: Any, params: dict[str, Any]) -> str | None:
    if not isinstance(answer, dict):
        return "not an object"
    if not _sorted_keys(answer):
        return "group keys not in code-point order"
    field = params["field"]
    for key, value in answer.items():
        if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value):
            return f"group {key!r} is not a non-empty list of objects"
        for r in value:
            if field in r and value_text(r[field]) != str(key):
                return f"record with {field}={r[field]!r} under group {key!r}"
    return None


def _project_fields(answer: Any, params: dict[str, Any]) -> str | None:
    want = set(params["fields"])
    for i, r in enumerate(records(answer)):
        if set(r) != want:
            return f"record {i} has fields {sorted(map(str, r))[:8]}"
    return None


def _numbers_from_strings(answer: Any, params: dict[str, Any]) -> str | None:
    for v in scalars(answer):
        if isinstance(v, str) and _INT_STRING.fullmatch(v):
            return f"string {v!r} should be a number"
    return None


def _drop_empty(answer: Any, params: dict[str, Any]) -> str | None:
    for obj in _objects(answer):
        for k, v in obj.items():
            if v == "" and isinstance(v, str) or (isinstance(v, (list, dict)) and not v):
                return f"entry {k!r} is empty"
    return None


def _dedup_records(answer: Any, params: dict[str, Any]) -> str | None:
    field = params["field"]
    recs = records(answer)
    if not any(field in r for r in recs):
        return None
    seen: set[str] = set()
    for r in recs:
        key = canonical(r.get(field))
        if key in seen:
            return f"{field}={r.get(field)!r} occurs twice"
        seen.add(key)
    return None


def _renumber(answer: Any, params: dict[str, Any]) -> str | None:
    field = params["field"]
    for i, r in enumerate(records(answer), 1):
        v = r.get(field)
        if not is_number(v) or v != i:
            return f"record {i} has {field}={v!r}"
    return None


def _count_by(answer: Any, params: dict[str, Any]) -> str | None:
    if not isinstance(answer, dict):
        return "not an object"
    if not _sorted_keys(answer):
        return "keys not in code-point order"
    for k, v in answer.items():
        if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            return f"count of {k!r} is {v!r}, not a positive integer"
    return None


def _top_n_per_group(answer: Any, params: dict[str, Any]) -> str | None:
    field, n = params["field"], params["n"]
    recs = records(answer)
    if not any(field in r for r in recs):
        return None
    counts: dict[str, int] = {}
    for r in recs:
        key = canonical(r.get(field))
        counts[key] = counts.get(key, 0) + 1
        if counts[key] > n:
            return f"more than {n} records with {field}={r.get(field)!r}"
    return None


def _pivot_levels(answer: Any, params: dict[str, Any]) -> str | None:
    if not isinstance(answer, dict):
        return "not an object"
    if not _sorted_keys(answer):
        return "row keys not in code-point order"
    for k, v in answer.items():
        if not isinstance(v, dict):
            return f"row {k!r} is not an object"
        if not _sorted_keys(v):
            return f"column keys of row {k!r} not in code-point order"
        if any(isinstance(x, (dict, list)) for x in v.values()):
            return f"row {k!r} holds a container value"
    return None


def _melt(answer: Any, params: dict[str, Any]) -> str | None:
    fields = list(params["fields"])
    k = len(fields)
    recs = answer if isinstance(answer, list) else records(answer)
    if k == 0 or len(recs) % k:
        return f"{len(recs)} records, not a multiple of {k}"
    for i, r in enumerate(recs):
        if not isinstance(r, dict) or "metric" not in r or "value" not in r:
            return f"record {i} lacks metric/value"
        if r["metric"] != fields[i % k]:
            return f"record {i} has metric {r['metric']!r}, expected {fields[i % k]!r}"
    return None


VERIFIERS: dict[str, Callable[[Any, dict[str, Any]], str | None]] = {
    "sort_keys": _sort_keys,
    "flatten": _flatten,
    "unflatten": _unflatten,
    "camel_keys": _camel_keys,
    "filter_records": _filter_records,
    "sort_records": _sort_records,
    "group_records": _group_records,
    "project_fields": _project_fields,
    "numbers_from_strings": _numbers_from_strings,
    "drop_empty": _drop_empty,
    "dedup_records": _dedup_records,
    "renumber": _renumber,
    "count_by": _count_by,
    "top_n_per_group": _top_n_per_group,
    "pivot_levels": _pivot_levels,
    "melt": _melt,
}


def observable_steps(program: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps from the last reshaping step to the end (§8.1)."""
    names = [step.get("rule") for step in program]
    starts = [names.index(r) for r in RESHAPERS if r in names]
    return program[max(starts) :] if starts else list(program)


def check_program(answer: Any, program: list[dict[str, Any]]) -> str | None:
    """``None`` when every observable step's property holds, else the first reason."""
    for step in observable_steps(program):
        rule = step.get("rule")
        verifier = VERIFIERS.get(rule)
        if verifier is None:
            return f"rule {rule!r} has no verifier"
        reason = verifier(answer, step.get("params") or {})
        if reason is not None:
            return f"{rule}: {reason}"
    return None
