"""Value comparison (spec §6) and the canonical helpers the constraints share.

``compare(pred, gold, coerce)`` returns every mismatch as a :class:`Mismatch` with a kind
(``structure`` | ``numeric`` | ``string``), a path and a readable detail. Object key
order is ignored; list order matters; booleans are never numbers.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterator

REL_TOL = 1e-6
_STRICT_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?")


@dataclass
class Mismatch:
    kind: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.path or '<root>'}: {self.detail}"


def is_number(value: Any) -> bool:
    """A native number: int or float, never bool (§13.6)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_number(value: Any, grammar: str = "python_float") -> float | int | None:
    """``value`` as a number under coercion: a native number, or a string that reads as one
    after trimming (``python_float`` = whatever ``float()`` accepts [O]; ``strict`` =
    ``[+-]?(d[.d]|.d)([eE][+-]?d)`` [P]); else ``None``."""
    if is_number(value):
        return value
    if isinstance(value, str):
        text = value.strip()
        if grammar == "strict" and not _STRICT_NUMBER.fullmatch(text):
            return None
        try:
            return float(text)
        except ValueError:
            return None
    return None


def numbers_close(a: float | int, b: float | int) -> bool:
    """``a == b``, both NaN, or ``|a − b| ≤ 1e-6 · max(|a|, |b|, 1)`` (§6)."""
    if a == b:
        return True
    try:
        fa, fb = float(a), float(b)
    except OverflowError:
        return False
    if math.isnan(fa) and math.isnan(fb):
        return True
    if math.isnan(fa) or math.isnan(fb) or math.isinf(fa) or math.isinf(fb):
        return False
    return abs(fa - fb) <= REL_TOL * max(abs(fa), abs(fb), 1.0)


def child_path(path: str, step: Any) -> str:
    """Path notation of §7.2: ``a.b[0].c``; a top-level list starts with ``[i]``."""
    if isinstance(step, int):
        return f"{path}[{step}]"
    return f"{path}.{step}" if path else str(step)


def _key_text(keys: Any) -> list[str]:
    return sorted((str(k) for k in keys))  # text sort key: YAML keys may be of mixed types (§13.7)


def string_diff(a: str, b: str, width: int = 30) -> str:
    """Both strings around their first differing character (§6 diagnostics)."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, i - width)
    pa, pb = a[start : i + width], b[start : i + width]
    pre = "…" if start else ""
    return f"differ at char {i}: got {pre}{pa!r} expected {pre}{pb!r}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compare(pred: Any, gold: Any, coerce: bool = False, grammar: str = "python_float", limit: int = 1000) -> list[Mismatch]:
    """All mismatches between ``pred`` and ``gold`` (§6, rules 1–8), at most ``limit``."""
    out: list[Mismatch] = []
    _walk(pred, gold, "", coerce, grammar, out, limit)
    return out


def _walk(p: Any, g: Any, path: str, coerce: bool, grammar: str, out: list[Mismatch], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(p, dict) and isinstance(g, dict):
        if p.keys() != g.keys():
            extra = _key_text(set(p) - set(g))
            missing = _key_text(set(g) - set(p))
            out.append(Mismatch("structure", path, f"keys differ: extra {extra[:5]}, missing {missing[:5]}"))
            return
        for k in g:
            _walk(p[k], g[k], child_path(path, k), coerce, grammar, out, limit)
        return
    if isinstance(p, list) and isinstance(g, list):
        if len(p) != len(g):
            out.append(Mismatch("structure", path, f"list length {len(p)}, expected {len(g)}"))
            return
        for i, (a, b) in enumerate(zip(p, g)):
            _walk(a, b, child_path(path, i), coerce, grammar, out, limit)
        return
    if isinstance(p, (dict, list)) or isinstance(g, (dict, list)):
        out.append(Mismatch("structure", path, f"{type(p).__name__} vs expected {type(g).__name__}"))
        return
    if isinstance(p, bool) or isinstance(g, bool):
        if not (isinstance(p, bool) and isinstance(g, bool) and p == g):
            out.append(Mismatch("structure", path, f"got {_short(p)}, expected {_short(g)}"))
        return
    if p is None or g is None:
        if not (p is None and g is None):
            out.append(Mismatch("structure", path, f"got {_short(p)}, expected {_short(g)}"))
        return
    if is_number(p) and is_number(g):
        if not numbers_close(p, g):
            out.append(Mismatch("numeric", path, f"got {p!r}, expected {g!r}"))
        return
    if coerce:
        a, b = as_number(p, grammar), as_number(g, grammar)
        if a is not None and b is not None:
            if not numbers_close(a, b):
                out.append(Mismatch("numeric", path, f"got {p!r}, expected {g!r}"))
            return
    if isinstance(p, str) and isinstance(g, str):
        if p != g:
            out.append(Mismatch("string", path, string_diff(p, g)))
        return
    if type(p) is type(g) and p == g:  # e.g. two equal YAML dates / TOML datetimes
        return
    out.append(Mismatch("structure", path, f"{type(p).__name__} {_short(p)} vs expected {type(g).__name__} {_short(g)}"))


def _text_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text_keys(v) for v in value]
    return value


def canonical(value: Any) -> str:
    """Canonical JSON text: sorted keys, no spaces, Unicode kept; non-JSON values as text
    (keys of mixed types, possible in YAML, are sorted as text)."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    except TypeError:
        return json.dumps(_text_keys(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def value_text(value: Any) -> str:
    """"Value as text" of group/count keys and sort_records (§8.1 [P]): strings as they are,
    numbers in decimal, booleans ``true``/``false``, null ``null``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def summarize(mismatches: list[Mismatch], n: int = 3) -> str:
    head = "; ".join(str(m) for m in mismatches[:n])
    more = f" (+{len(mismatches) - n} more)" if len(mismatches) > n else ""
    return head + more


def scalars(value: Any) -> Iterator[Any]:
    """Every scalar leaf of a parsed document (dict values and list items, depth first,
    iteratively so deep documents cannot overflow the stack); keys are not leaves."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        else:
            yield v
