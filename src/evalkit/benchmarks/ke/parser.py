"""The KE answer parser, rules R1–R7 of spec §5 (version ``ke-parser-v1``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

PARSER_VERSION = "ke-parser-v1"

_LEADING_DIGIT = re.compile(r"^[ \t]*[0-9]")
_ECHO = re.compile(r"(?m)^[ \t]*(?:Task:|Trajectory Steps:|Now identify which steps)")
_STEP_ID = re.compile(r"(?i)(?<![A-Za-z0-9])step\\?_([0-9]+)", re.ASCII)
_CANON = re.compile(r"step_([0-9]+)", re.ASCII)

MODES = ("chat", "completion")
#: most distinct step ids an answer may name (issue 17: hostile outputs). Real trajectories
#: reach 274 steps (spec §2.2; the pilot's longest has 23), so an answer naming more
#: distinct ids than 36 times that is no selection of steps; its reading stops there and
#: it scores 0 (its exact F1 would be below 2 * 274 / (10,000 + 274) = 0.053). Ids are kept
#: as written (an unknown id keeps all its digits, R6): their total length is at most the
#: answer's, and the record is bounded by ``evalkit.benchmarks.bounds``.
MAX_PRED_IDS = 10_000


@dataclass
class ParseResult:
    """The parser's verdict on one raw output.

    ``failed``: R1 (``None``/blank output; the item is not scored). ``pred``: canonical ids
    in order of first appearance (R6/R7). ``unknown_ids``: the ids of ``pred`` that name no
    step of the trajectory (they count as false positives). ``over_limit``: the answer
    names more than ``max_ids`` distinct ids; ``pred`` holds the first ``max_ids``.
    """

    failed: bool
    pred: list[str] = field(default_factory=list)
    unknown_ids: list[str] = field(default_factory=list)
    over_limit: bool = False


def step_index(step_ids: Iterable[str]) -> dict[int, str]:
    """``{integer value: step id}`` of a trajectory's ids (``step_004`` → ``{4: "step_004"}``).

    Raises:
        ValueError: an id not of the form ``step_<digits>`` (the loader rejects those first).
    """
    out: dict[int, str] = {}
    for sid in step_ids:
        m = _CANON.fullmatch(sid)
        if m is None:
            raise ValueError(f"not a step id: {sid!r}")
        out[int(m.group(1))] = sid
    return out


def visible_text(raw: str, mode: str) -> str:
    """R2–R4: the text ids are read from (re-attached, think blocks dropped, echo cut).

    ``mode``: ``chat`` or ``completion`` (§5 R2: only completion re-attaches ``step_``).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    text = raw
    if mode == "completion" and _LEADING_DIGIT.match(raw):  # R2
        text = "step_" + raw.lstrip(" \t")
    if "</think>" in text:  # R3
        text = text.rsplit("</think>", 1)[1]
    elif "<think>" in text:
        text = text.split("<think>", 1)[0]
    m = _ECHO.search(text)  # R4
    if m is not None:
        text = text[: m.start()]
    return text


def parse_answer(
    raw: str | None, mode: str, step_ids: Iterable[str] | dict[int, str], max_ids: int = MAX_PRED_IDS
) -> ParseResult:
    """Parse one raw model output (spec §5, R1–R7).

    Args:
        raw: the text content returned (the bare continuation in completion mode), or None.
        mode: ``chat`` | ``completion``.
        step_ids: the sample's step ids (or a prebuilt :func:`step_index`).
        max_ids: reading stops at the first id beyond this many distinct ones
            (``over_limit``; :data:`MAX_PRED_IDS`).

    Returns:
        ``ParseResult(failed=True)`` for ``None``/blank text (R1); otherwise the canonical
        predicted ids (R5 extraction, R6 canonicalisation — unknown integers become
        ``step_%03d`` false positives — and R7 first-occurrence de-duplication).

    Raises:
        ValueError: an unknown ``mode``.
    """
    if raw is None or not raw.strip():
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        return ParseResult(failed=True)
    index = step_ids if isinstance(step_ids, dict) else step_index(step_ids)
    text = visible_text(raw, mode)
    pred: list[str] = []
    unknown: list[str] = []
    seen: set[str] = set()
    for m in _STEP_ID.finditer(text):  # R5
        digits = m.group(1).lstrip("0") or "0"
        try:
            sid = index.get(int(digits))  # R6
        except ValueError:  # more digits than int() converts: no step has that number
            sid = None
        if sid is None:
            sid = "step_" + digits.zfill(3)  # == "step_%03d" % n, without int <-> str limits
            if sid in seen:
                continue
            if len(pred) >= max_ids:
                return ParseResult(failed=False, pred=pred, unknown_ids=unknown, over_limit=True)
            unknown.append(sid)
        elif sid in seen:  # R7
            continue
        elif len(pred) >= max_ids:
            return ParseResult(failed=False, pred=pred, unknown_ids=unknown, over_limit=True)
        seen.add(sid)
        pred.append(sid)
    return ParseResult(failed=False, pred=pred, unknown_ids=unknown)
