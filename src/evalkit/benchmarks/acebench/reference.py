"""Gold replay: the ground truth rendered as a model would write it (spec §6.1, §6.2)."""

from __future__ import annotations

from typing import Any

from evalkit.benchmarks.acebench.checker import (
    ERROR_PARAM_MARKER,
    INCOMPLETE_MARKER,
    canonical_name,
    score_normal,
)


def render_literal(value: Any) -> str:
    """Python literal text of a JSON value; whitespace inside strings is escaped.

    Escaping (``' '`` -> ``\\x20``; other whitespace is escaped by ``repr`` already) keeps the
    official whitespace deletion (spec §3.1 step 2) from altering string values.
    """
    if isinstance(value, str):
        return repr(value).replace(" ", "\\x20")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{render_literal(k)}: {render_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render_literal(v) for v in value) + "]"
    return repr(value)


def render_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """``[Name(k=v, ...), ...]`` for ``(name, args)`` pairs."""
    parts = [f"{name}(" + ", ".join(f"{k}={render_literal(v)}" for k, v in args.items()) + ")" for name, args in calls]
    return "[" + ", ".join(parts) + "]"


def _schema_for(functions: list[dict[str, Any]], key: str) -> dict[str, Any]:
    for f in functions:
        if isinstance(f, dict) and isinstance(f.get("name"), str) and f["name"] in key:
            return f
    return {}


def _droppable(spec: dict[str, Any], value: Any) -> bool:
    """Optional parameters a lighter rendering leaves out: empty containers, itemless non-object arrays."""
    if value in ([], {}):
        return True
    items = spec.get("items") if isinstance(spec, dict) else None
    itemless = not (isinstance(items, dict) and "type" in items)
    return (
        isinstance(spec, dict)
        and spec.get("type") == "array"
        and itemless
        and isinstance(value, list)
        and not any(isinstance(v, dict) for v in value)
    )


def _renderings(functions: list[dict[str, Any]], candidate: dict[str, Any]) -> list[str]:
    """Full, without droppable optional parameters, required parameters only (spec §6.1)."""
    levels: list[list[tuple[str, dict[str, Any]]]] = [[], [], []]
    for key, args in candidate.items():
        name = canonical_name(key)
        args = args if isinstance(args, dict) else {}
        params = _schema_for(functions, key).get("parameters") or {}
        props = params.get("properties") or {}
        required = params.get("required") or []
        levels[0].append((name, dict(args)))
        levels[1].append(
            (name, {k: v for k, v in args.items() if k in required or not _droppable(props.get(k, {}), v)})
        )
        levels[2].append((name, {k: v for k, v in args.items() if k in required}))
    out: list[str] = []
    for calls in levels:
        text = render_calls(calls)
        if text not in out:
            out.append(text)
    return out


def normal_reference(functions: list[dict[str, Any]], ground_truth: Any) -> str:
    """The first rendering of the first candidate that passes the checker (else the full one)."""
    candidates = ground_truth if isinstance(ground_truth, list) else [ground_truth]
    fallback = None
    for candidate in candidates:
        if not isinstance(candidate, dict):
            continue
        for text in _renderings(functions, candidate):
            fallback = fallback or text
            if score_normal(functions, text, ground_truth)[0].passed:
                return text
    return fallback or "[]"


def special_reference(category: str, ground_truth: Any) -> str:
    """Minimal diagnostic answer holding the marker phrase and the verbatim names/values (§6.2)."""
    if "incomplete" in category and isinstance(ground_truth, dict):
        parts = [f"{INCOMPLETE_MARKER} ({', '.join(map(str, names))}) for the api ({api})" for api, names in ground_truth.items()]
        return "[" + ", ".join(f'"{p}"' for p in parts) + "]"
    if "error" in category and isinstance(ground_truth, dict):
        parts = [f"{ERROR_PARAM_MARKER} ({', '.join(map(str, values))}) for the parameters ({param})" for param, values in ground_truth.items()]
        return "[" + ", ".join(f'"{p}."' for p in parts) + "]"
    return f'["{ground_truth}"]' if isinstance(ground_truth, str) else str(ground_truth)
