"""KE parser (spec §5) and metrics (§6) on every case of answers.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.benchmarks.ke import KE, KESettings
from evalkit.benchmarks.ke.metrics import item_scores, macro_means, stat_plan
from evalkit.benchmarks.ke.parser import parse_answer
from evalkit.benchmarks.ke.prompts import ANSWER_PREFIX
from tests.conftest import SHARED_DIR



def _cases() -> list[dict]:
    """answers.jsonl, read at collection time (parametrization needs it before fixtures)."""
    path = SHARED_DIR / "data" / "ke" / "answers.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CASES = _cases()


@pytest.fixture(scope="module")
def bench(shared_data_dir: Path) -> KE:
    d = shared_data_dir / "ke"
    return KE(KESettings(pilot_path=d / "pilot.jsonl", icl_path=d / "icl_examples.jsonl"))


@pytest.fixture(scope="module")
def samples(bench: KE) -> dict:
    return {s.id: s for s in bench.load()}


def test_answers_file_has_27_cases_over_the_12_graded_samples(samples: dict) -> None:
    assert len(CASES) == 27
    assert {c["sample_id"] for c in CASES} == set(samples)


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_parser_and_metrics(case: dict, samples: dict) -> None:
    sample = samples[case["sample_id"]]
    step_ids = [s["step_id"] for s in sample.data["trajectory_steps"]]
    result = parse_answer(case["raw"], case["mode"], step_ids)
    expect = case["expect"]
    if expect.get("failed"):
        assert result.failed and result.pred == []
        return
    assert not result.failed
    assert result.pred == expect["pred"]
    got = item_scores(result.pred, sample.data["gold_step_ids"])
    for k in ("precision", "recall", "f1", "f05"):
        assert got[k] == pytest.approx(expect[k], abs=1e-5), k


@pytest.mark.parametrize("case", [c for c in CASES if not c["expect"].get("failed")], ids=lambda c: c["case"])
def test_benchmark_score_of_engine_output(case: dict, bench: KE, samples: dict) -> None:
    """What the engine hands to score(): chat text as is; completion = prefix + continuation."""
    output = case["raw"] if case["mode"] == "chat" else ANSWER_PREFIX + case["raw"]
    scored = bench.score(samples[case["sample_id"]], output)
    assert scored.parsed == case["expect"]["pred"]
    for k in ("precision", "recall", "f1", "f05"):
        assert scored.scores[k] == pytest.approx(case["expect"][k], abs=1e-5), k


def test_unknown_ids_are_reported(samples: dict) -> None:
    sample = samples["code_ke_d8f1b2a7"]
    result = parse_answer("step_000, step_012, step_12", "chat", [s["step_id"] for s in sample.data["trajectory_steps"]])
    assert result.pred == ["step_000", "step_012"]
    assert result.unknown_ids == ["step_012"]


def test_chat_never_reattaches_leading_digits() -> None:
    assert parse_answer("3 steps matter: step_001", "chat", ["step_000", "step_001", "step_003"]).pred == ["step_001"]
    assert parse_answer("3 steps matter: step_001", "completion", ["step_000", "step_001", "step_003"]).pred == [
        "step_003", "step_001"]  # fmt: skip


def test_none_is_a_failure_and_bad_mode_raises() -> None:
    assert parse_answer(None, "chat", ["step_000"]).failed
    with pytest.raises(ValueError):
        parse_answer("step_000", "text", ["step_000"])


def test_worked_example_hy3() -> None:
    s = item_scores(["step_000", "step_003", "step_004", "step_005", "step_008", "step_009"],
                    ["step_000", "step_004", "step_005"])  # fmt: skip
    assert s == pytest.approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "f05": 0.625 / 1.125})


def test_empty_prediction_scores_zero_and_empty_gold_raises() -> None:
    assert item_scores([], ["step_001", "step_002"]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "f05": 0.0}
    with pytest.raises(ValueError):
        item_scores(["step_001"], [])


def test_macro_mean_is_per_item_not_pooled() -> None:
    a = item_scores(["step_000"], ["step_000", "step_001"])  # p=1, r=.5
    b = item_scores(["step_000", "step_001", "step_002", "step_003"], ["step_000", "step_009"])  # p=.25, r=.5
    m = macro_means([a, b])
    assert m["f1_macro"] == pytest.approx((a["f1"] + b["f1"]) / 2)
    assert m["f05_macro"] == pytest.approx((a["f05"] + b["f05"]) / 2)
    p, r = m["precision_macro"], m["recall_macro"]
    assert m["f05_macro"] != pytest.approx(1.25 * p * r / (0.25 * p + r))
    by = stat_plan([[("a", "easy", a), ("b", "hard", b)]]).point()
    assert by["f1_macro/easy"] == pytest.approx(a["f1"]) and by["f1_macro/hard"] == pytest.approx(b["f1"])


def test_blank_output_is_never_scored_zero(bench: KE, samples: dict) -> None:
    scored = bench.score(samples["code_ke_834b34a9"], "  \n")
    assert scored.scores == {} and scored.status == "format_error"
