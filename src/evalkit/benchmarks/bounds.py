"""Bounds on what a scorer hands back, whatever the model wrote (issue 17: hostile outputs).

A scorer reads text written by the model under evaluation, which may be adversarial. Each
benchmark bounds its own parsing (see the ``MAX_*`` constants of the SOBHard readers, the
ACEBench decoder and the KE parser); this module holds the rules every benchmark's
``score()`` applies on the way out, so that one record of the journal stays small and
``score()`` never raises:

- :func:`safe_score` runs the scoring and turns any exception (``RecursionError``
  included) into a zero with ``detail="internal scoring error: ..."``, and a
  ``MemoryError`` into a zero with status ``scorer_limit`` (the engine scores each answer
  under a memory bound, ``benchmark.score_memory_mb``: running out of it is hitting that
  limit, not a verdict on the answer);
- :func:`bound_detail`: a ``detail`` is at most :data:`DETAIL_MAX_CHARS` characters;
- :func:`bound_parsed`: a ``parsed`` value whose JSON text (as the journal writes it:
  ``ensure_ascii=False``, UTF-8) is over :data:`PARSED_MAX_BYTES` is replaced by a marker
  ``{"truncated": true, "bytes": N, "sha256": H}``;
- :func:`short_repr`: model values quoted in a message are cut with :mod:`reprlib`.

Reasons for the numbers: scoring every reference, baseline and fixture answer of the
shared data, the largest ``parsed`` serialises to 11,080 bytes (SOBHard), 1,858 bytes
(ACEBench) and 276 bytes (KE), and the longest ``detail`` has 885 characters (SOBHard);
256 KiB and 2,000 characters are far above both, and keep a 10,000-sample journal under
about 2.7 GB even if every record were at the bounds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import reprlib
from dataclasses import replace
from typing import Any, Callable

from evalkit.types import SampleScore

#: the longest ``detail`` a SampleScore carries (characters)
DETAIL_MAX_CHARS = 2000
#: the largest ``parsed`` value kept as it is (bytes of its UTF-8 JSON text)
PARSED_MAX_BYTES = 256 * 1024
#: a ``parsed`` value whose expanded size (see :func:`expanded_size`) is over this is not
#: serialised at all: its marker has ``bytes`` and ``sha256`` null
MEASURE_MAX_UNITS = 16 * 2**20

_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlong = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = _REPR.maxarray = 8
_REPR.maxdict = 8
_REPR.maxlevel = 4


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to at most ``limit`` characters: long strings, numbers, lists
    and dicts abbreviated with ``...`` (:class:`reprlib.Repr`, at most 8 items per level,
    4 levels), so a message never renders a structure of unbounded size."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr raises
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_str(value: Any, limit: int = 200) -> str:
    """``str(value)`` for a string of at most ``limit`` characters, the string cut
    otherwise, :func:`short_repr` for anything else (whose ``str`` is its ``repr``)."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    return short_repr(value, limit)


def bound_detail(detail: str | None, limit: int = DETAIL_MAX_CHARS) -> str | None:
    """``detail`` cut to ``limit`` characters; the cut ends with ``… [+N chars]``."""
    if detail is None:
        return None
    detail = detail if isinstance(detail, str) else str(detail)
    if len(detail) <= limit:
        return detail
    tail = f"… [+{len(detail) - limit} chars]"
    return detail[: max(0, limit - len(tail))] + tail


def expanded_size(value: Any, limit: int = MEASURE_MAX_UNITS) -> int | None:
    """The size of ``value`` written out in full, in units: one per container, per key
    and per scalar, plus the length of every string and bytes, plus a third of an int's
    bit length (about its decimal digits). A list holding the same object n times counts
    it n times (that is what its JSON text holds), but each distinct object is visited
    once, so the walk costs the number of distinct objects, not the expanded size.

    Returns ``None`` when the size is over ``limit`` or the value contains itself.
    """
    memo: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, done = stack.pop()
        if isinstance(node, (dict, list, tuple, set, frozenset)):
            key = id(node)
            if done:
                active.discard(key)
                children = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
                total = 1
                for child in children:
                    total += memo[id(child)] if isinstance(child, (dict, list, tuple, set, frozenset)) else _scalar_size(child)
                    if total > limit:
                        return None
                memo[key] = total
                continue
            if key in memo:
                continue
            if key in active:
                return None  # the value contains itself
            active.add(key)
            stack.append((node, True))
            children = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
            stack.extend((child, False) for child in children if isinstance(child, (dict, list, tuple, set, frozenset)))
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return memo[id(value)]
    size = _scalar_size(value)
    return size if size <= limit else None


def _scalar_size(value: Any) -> int:
    if isinstance(value, (str, bytes, bytearray)):
        return 1 + len(value)
    if isinstance(value, int):
        return 1 + value.bit_length() // 3
    return 1


def _units_within(value: Any, stop: int) -> bool:
    """Whether :func:`expanded_size` of ``value`` is at most ``stop``, walking the value
    as written out (a shared object once per use) and giving up past ``stop``: cheaper
    than :func:`expanded_size` on the trees scorers build, and at most ``stop`` steps on
    anything else (a value that contains itself is never within)."""
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str:
            total += 1 + len(v)
        elif t is dict:
            total += 1
            stack.extend(v)
            stack.extend(v.values())
        elif t is list or t is tuple or t is set or t is frozenset:
            total += 1
            stack.extend(v)
        else:
            total += _scalar_size(v)
        if total > stop:
            return False
    return True


def bound_parsed(value: Any, limit: int = PARSED_MAX_BYTES) -> Any:
    """``value`` itself when its JSON text (``ensure_ascii=False``, ``default=str``, UTF-8,
    as the journal writes it) is at most ``limit`` bytes; else
    ``{"truncated": True, "bytes": N, "sha256": H}``, the length and SHA-256 of that text.

    A value whose expanded size is over :data:`MEASURE_MAX_UNITS` (or that contains
    itself) is never serialised: its marker has ``bytes`` and ``sha256`` ``None``; one that
    does not serialise gets them ``None`` and an ``error``. Cost: one walk of the value
    (stopped early when it is clearly too large) plus one ``json.dumps`` of a value known
    to be small, or of one at most :data:`MEASURE_MAX_UNITS` large.
    """
    if value is None or type(value) in (bool, float) or type(value) is int and _scalar_size(value) < limit:
        return value
    # one unit writes as at least about one byte of JSON, so twice the limit is surely over
    if not _units_within(value, 2 * limit) and expanded_size(value) is None:
        return {"truncated": True, "bytes": None, "sha256": None}
    try:
        data = json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError, RecursionError) as exc:
        return {"truncated": True, "bytes": None, "sha256": None, "error": short_repr(exc)}
    if len(data) <= limit:
        return value
    return {"truncated": True, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def bounded(scored: SampleScore) -> SampleScore:
    """``scored`` with its ``detail`` and ``parsed`` bounded (:func:`bound_detail`,
    :func:`bound_parsed`); the same object when both are already within bounds."""
    detail = bound_detail(scored.detail)
    parsed = bound_parsed(scored.parsed)
    if detail is scored.detail and parsed is scored.parsed:
        return scored
    return replace(scored, detail=detail, parsed=parsed)


def safe_score(
    compute: Callable[[], SampleScore], fallback: dict[str, float], status: str = "ok",
    log: logging.Logger | None = None, what: str = "scoring",
) -> SampleScore:
    """``compute()`` bounded by :func:`bounded`; any exception (``RecursionError``
    included) becomes ``SampleScore(scores=fallback, status=status, detail="internal
    scoring error: <type>: <message>")``, logged with its traceback on ``log`` as
    ``"<what> failed"``; a ``MemoryError`` is status ``scorer_limit`` (the scoring ran out
    of its memory bound). Never raises."""
    try:
        return bounded(compute())
    except MemoryError:
        detail = "scoring ran out of its memory bound (benchmark.score_memory_mb): the answer is not scored beyond 0"
        return SampleScore(scores=dict(fallback), status="scorer_limit", detail=detail)
    except Exception as exc:  # noqa: BLE001 - score() must never raise, whatever the text
        message = f"internal scoring error: {type(exc).__name__}: {short_repr(str(exc), 400)}"
        if log is not None:
            log.exception("%s failed", what)
    return SampleScore(scores=dict(fallback), status=status, detail=message)
