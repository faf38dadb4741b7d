"""Prompt assembly (spec §2) and session replay (spec §3).

The prompt text comes from the data: each row's ``instruction`` template with its four
``inputs`` blocks substituted literally — one pass, substituted text never re-read, so
documents holding ``{``, ``}``, ``${...}`` or ``{{...}}`` stay intact (§2.1, §13.17).
"""

from __future__ import annotations

import re
from typing import Any

from evalkit.benchmarks.sobhard.data import SLOTS, Row

_SLOT_RE = re.compile(r"\{(" + "|".join(SLOTS) + r")\}")


def render(row: Row) -> str:
    """The user message of ``row``: its template with the four blocks substituted (§2.1)."""
    blocks = row.inputs.model_dump()
    return _SLOT_RE.sub(lambda m: blocks[m.group(1)], str(row.instruction))


def user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


def build_messages(row: Row, history: list[Row] | None = None, demos: list[Row] | None = None) -> list[dict[str, Any]]:
    """Chat messages of one graded question (§2.2, §3). No system message.

    ``history``: earlier session turns 1 … k−1 (each replayed as its rendered prompt and its
    fenced reference ``outputs`` verbatim). ``demos``: standalone demonstrations, same
    shape, for non-session rows when enabled. The graded turn is the last user message.
    """
    messages: list[dict[str, Any]] = []
    for earlier in list(demos or []) + list(history or []):
        messages.append(user(render(earlier)))
        messages.append(assistant(earlier.outputs or ""))
    messages.append(user(render(row)))
    return messages
