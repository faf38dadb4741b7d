"""Rule baselines (spec §8): predictions from ``obs_type`` or position only, never labels."""

from __future__ import annotations

from typing import Any, Callable

CONTENT_TYPES = frozenset({"file_read", "search_result", "command_output", "error"})

#: name → rule(steps, k) returning the predicted step ids, in trajectory order
RULES: dict[str, Callable[[list[dict[str, Any]], int], list[str]]] = {
    "file_read": lambda steps, k: [s["step_id"] for s in steps if s["obs_type"] == "file_read"],
    "all_steps": lambda steps, k: [s["step_id"] for s in steps],
    "non_write": lambda steps, k: [s["step_id"] for s in steps if s["obs_type"] != "file_write_confirmation"],
    "content_types": lambda steps, k: [s["step_id"] for s in steps if s["obs_type"] in CONTENT_TYPES],
    "first_k": lambda steps, k: [s["step_id"] for s in steps[:k]],
    "empty": lambda steps, k: [],
}
BASELINES = tuple(RULES)

#: the answer text of a baseline that predicts nothing: non-empty (so it is scored, 0) and id-free
NO_STEPS_TEXT = "No critical steps."


def baseline_prediction(name: str, steps: list[dict[str, Any]], k: int = 3) -> list[str]:
    """The step ids rule ``name`` predicts for a trajectory (``k``: for ``first_k``).

    Raises:
        KeyError: an unknown baseline name.
    """
    return RULES[name](steps, k)


def render_answer(ids: list[str]) -> str:
    """An answer as a chat model would write it: ``step_000, step_004`` (or an id-free sentence)."""
    return ", ".join(ids) if ids else NO_STEPS_TEXT
