"""The scripted reference for the agent categories (spec §6.3).

The agent replays the milestones (first alternative), one message per turn, each stripped,
with apostrophes between two letters escaped and the corrections of ``corrections.json``
applied; afterwards it says ``finish conversation``. The scripted user returns the
instruction first and ``finish conversation`` whenever it is addressed.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from evalkit.types import Completion, Request

FINISH = "finish conversation"


@lru_cache(maxsize=1)
def corrections() -> list[dict[str, Any]]:
    text = resources.files("evalkit.benchmarks.acebench.agent").joinpath("corrections.json").read_text(encoding="utf-8")
    return json.loads(text)["corrections"]


def escape_apostrophes(text: str) -> str:
    """Escape every ``'`` that sits between two letters (``Domino's`` -> ``Domino\\'s``)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "'" and 0 < i < len(text) - 1 and text[i - 1].isalpha() and text[i + 1].isalpha():
            out.append("\\'")
        else:
            out.append(ch)
    return "".join(out)


def apply_ops(milestones: list[str], ops: list[dict[str, Any]]) -> list[str]:
    result = list(milestones)
    for op in ops:
        if "replace" in op:
            old, new = op["replace"]
            result = [m.replace(old, new) for m in result]
        elif "replace_milestone" in op:
            old, new = op["replace_milestone"]
            result = [new if m == old else m for m in result]
        elif "insert_before" in op:
            index = next((k for k, m in enumerate(result) if m.startswith(op["insert_before"])), None)
            if index is not None:
                result.insert(index, op["call"])
        elif "prepend" in op:
            result.insert(0, op["prepend"])
        else:
            raise ValueError(f"unknown correction op {op}")
    return result


def reference_script(language: str, record_id: str, milestones: Any) -> list[str]:
    """The agent messages the reference sends for one record."""
    if isinstance(milestones, list) and milestones and isinstance(milestones[0], list):
        milestones = milestones[0]
    script = [str(m).strip() for m in (milestones or [])]
    for entry in corrections():
        if entry["language"] == language and record_id in entry["ids"]:
            script = apply_ops(script, entry["ops"])
    return [escape_apostrophes(m) for m in script]


class ScriptedAgent:
    """Replays a fixed list of messages, then says ``finish conversation``."""

    model_id = "reference-agent"

    def __init__(self, script: list[str]):
        self.script = list(script)
        self.calls = 0

    async def generate(self, request: Request) -> Completion:
        text = self.script[self.calls] if self.calls < len(self.script) else FINISH
        self.calls += 1
        return Completion(text=text)


class ScriptedUser:
    """Returns the instruction on its first call and ``finish conversation`` afterwards."""

    model_id = "reference-user"

    def __init__(self, instruction: str):
        self.instruction = instruction
        self.calls = 0

    async def generate(self, request: Request) -> Completion:
        text = self.instruction if self.calls == 0 else FINISH
        self.calls += 1
        return Completion(text=text)
