"""End-state checker and process accuracy of the agent categories (spec §4.4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.benchmarks.bounds import short_str


@dataclass
class EndStateVerdict:
    passed: bool
    detail: str | None = None


def _class_errors(name: str, model_attrs: Any, expected_attrs: Any) -> list[str]:
    """Compare one class: iterate the model's attributes; dict values compare the expected
    keys only (extra model keys are ignored); anything else must be equal. The model's
    values are quoted cut (:func:`evalkit.benchmarks.bounds.short_str`)."""
    errors: list[str] = []
    if not isinstance(model_attrs, dict):
        return [f"class({name}) has no attribute mapping"]
    expected_attrs = expected_attrs if isinstance(expected_attrs, dict) else {}
    for attr, model_value in model_attrs.items():
        if attr not in expected_attrs:
            errors.append(f"class({name}) attributes({attr}) missing in possible_answer.")
            continue
        expected = expected_attrs[attr]
        if isinstance(expected, dict):
            for key, value in expected.items():
                try:
                    present = key in model_value
                    equal = present and value == model_value[key]
                except Exception:  # noqa: BLE001 - model value of another shape
                    present = equal = False
                if not present:
                    errors.append(f"class({name}) attributes({attr}) wrong, [expected: {expected}, real: {short_str(model_value)}]")
                elif not equal:
                    errors.append(f"class({name}) attributes({attr}.{key}) wrong, [expected: {value}, real: {short_str(model_value[key])}]")
        elif expected != model_value:
            errors.append(f"class({name}) attributes({attr}) wrong, [expected: {expected}, real: {short_str(model_value)}]")
    return errors


def check_end_state(model_state: Any, expected: Any) -> EndStateVerdict:
    """Upstream ``agent_eval`` for one record.

    1. the number of expected and model class entries must match ("wrong number of class");
    2. each expected entry is compared with the first model entry with the same class name;
       an expected class with no such model entry reuses the previous verdict (initially
       pass), i.e. a misspelled expected class is skipped;
    3. the record passes if no comparison failed.
    """
    expected_list = expected if isinstance(expected, list) else [expected]
    model_list = model_state if isinstance(model_state, list) else []
    if len(expected_list) != len(model_list):
        return EndStateVerdict(False, f"wrong number of class: expected {len(expected_list)}, got {len(model_list)}")
    verdict_ok, verdict_errors = True, []
    first_error: str | None = None
    passed = True
    for entry in expected_list:
        keys = set(entry.keys()) if isinstance(entry, dict) else set()
        match = next((m for m in model_list if isinstance(m, dict) and set(m.keys()) == keys), None)
        if match:
            name = next(iter(entry))
            verdict_errors = _class_errors(name, next(iter(match.values())), next(iter(entry.values())))
            verdict_ok = not verdict_errors
        if not verdict_ok:
            passed = False
            if first_error is None:
                first_error = verdict_errors[0] if verdict_errors else "class attributes wrong"
    return EndStateVerdict(passed, first_error)


def _sequence_score(trace: list[Any], milestones: list[Any]) -> float:
    if not milestones:
        return 1.0
    hits, cursor = 0, 0
    for stone in milestones:
        while cursor < len(trace):
            matched = str(trace[cursor]).strip() == str(stone).strip()
            cursor += 1
            if matched:
                hits += 1
                break
    return round(hits / len(milestones), 3)


def process_accuracy(trace: Any, milestones: Any, end_state_passed: bool = False) -> float:
    """Milestone process accuracy (§4.4): 1.0 when the end state passed; otherwise the share
    of milestones found in order in the trace (raw stripped strings, the cursor never
    rewinds), rounded to 3; with alternatives (a list of lists) the maximum."""
    if end_state_passed:
        return 1.0
    trace = list(trace) if isinstance(trace, list) else []
    if not isinstance(milestones, list) or not milestones:
        return 1.0
    if isinstance(milestones[0], list):
        return max(_sequence_score(trace, alt if isinstance(alt, list) else [alt]) for alt in milestones)
    return _sequence_score(trace, milestones)
