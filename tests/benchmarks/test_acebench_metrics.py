"""ACEBench aggregation: dialogues (§4.5), groups and OVERALL (§4.6), pitfalls 12-13."""

from __future__ import annotations

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.categories import NORMAL_CATEGORIES, SPECIAL_CATEGORIES
from evalkit.benchmarks.acebench.metrics import dialogue_scores, group_scores, overall_score, upstream_overall
from evalkit.types import Sample


def test_pitfall_12_multi_turn_scored_per_dialogue(acebench_en):
    assert dialogue_scores([True, True]) == (1.0, 1.0)
    assert dialogue_scores([True, False]) == (0.0, 0.5)
    assert dialogue_scores([True, True, False]) == (0.0, 2 / 3)

    bench, samples = acebench_en.bench, acebench_en.samples
    records = []
    for s in samples:
        ok = s.subset != "normal_multi_turn_user_adjust" or not s.id.endswith("_1")  # fail every step 1
        records.append({"sample_id": s.id, "subset": s.subset, "scores": {"accuracy": 1.0 if ok else 0.0}})
    metrics = bench.aggregate(samples, records)
    # every one of the 50 dialogues has a step 1 -> all dialogues fail
    assert metrics["accuracy/normal_multi_turn_user_adjust"] == 0.0
    adjust = [s for s in samples if s.subset == "normal_multi_turn_user_adjust"]
    dialogues: dict[str, list[str]] = {}
    for s in adjust:
        dialogues.setdefault(s.data["prompt"]["id"].rsplit("_", 1)[0], []).append(s.id)
    assert len(dialogues) == 50
    expected_process = sum((len(v) - 1) / len(v) for v in dialogues.values()) / 50
    assert metrics["process_acc/normal_multi_turn_user_adjust"] == pytest.approx(expected_process)
    assert metrics["accuracy/normal_multi_turn_user_switch"] == 1.0
    assert bench.category_counts(samples, records)["normal_multi_turn_user_adjust"]["dialogues_scored"] == 50


def test_pitfall_13_groups_unweighted_and_overall_weights():
    acc = {c: 1.0 for c in NORMAL_CATEGORIES}
    acc["normal_single_turn_single_function"] = 0.0  # 100 records, but one category of 12
    acc.update({"special_incomplete": 0.5, "special_error_param": 1.0, "special_irrelevant": 0.0})
    groups = group_scores(acc)
    assert groups["NORMAL"] == pytest.approx(11 / 12)
    assert groups["SINGLE_TURN"] == 0.5
    assert groups["ATOM"] == 1.0 and groups["MULTI_TURN"] == 1.0
    assert groups["SPECIAL"] == 0.5
    assert "AGENT" not in groups
    # renormalised over the evaluated groups
    assert overall_score(groups) == pytest.approx((0.578 * 11 / 12 + 0.2676 * 0.5) / (0.578 + 0.2676))
    # with all three groups: weights divided by their sum (1.0001), so a perfect model is 1.0;
    # the leaderboard's rounded figure is kept beside it
    # (gpt-4o-2024-11-20 row of the upstream leaderboard: 0.896)
    full = {"NORMAL": 0.927, "SPECIAL": 0.933, "AGENT": 0.715}
    value = overall_score(full)
    assert value == pytest.approx((0.578 * 0.927 + 0.2676 * 0.933 + 0.1545 * 0.715) / 1.0001) and round(value, 3) == 0.896
    assert upstream_overall(full) == 0.896
    assert overall_score({"NORMAL": 1.0, "SPECIAL": 1.0, "AGENT": 1.0}) == pytest.approx(1.0, abs=1e-12)
    assert upstream_overall({"NORMAL": 1.0, "SPECIAL": 1.0}) is None


def _records(samples: list[Sample], score) -> list[dict]:
    return [{"sample_id": s.id, "subset": s.subset, "scores": {"accuracy": score(s)}} for s in samples]


def test_metric_names_full_precision(acebench_en):
    samples = acebench_en.samples
    # fail exactly one record of normal_similar_api -> 49/50, not rounded
    metrics = acebench_en.bench.aggregate(samples, _records(samples, lambda s: 0.0 if s.id == "en/normal_similar_api_7" else 1.0))
    assert metrics["accuracy/normal_similar_api"] == 0.98
    assert metrics["accuracy/NORMAL"] == pytest.approx((11 + 0.98) / 12)
    assert metrics["overall"] == pytest.approx((0.578 * (11 + 0.98) / 12 + 0.2676) / (0.578 + 0.2676))
    assert set(metrics) == (
        {f"accuracy/{c}" for c in NORMAL_CATEGORIES + SPECIAL_CATEGORIES}
        | {"process_acc/normal_multi_turn_user_adjust", "process_acc/normal_multi_turn_user_switch"}
        | {f"accuracy/{g}" for g in ("ATOM", "SINGLE_TURN", "MULTI_TURN", "NORMAL", "SPECIAL")}
        | {"overall"}
    )


def test_language_all_per_language_names_and_mean_overall(acebench_dir):
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, language="all", subsets=["normal_atom_bool", "special_irrelevant"]))
    samples = bench.load()
    metrics = bench.aggregate(samples, _records(samples, lambda s: 1.0 if s.id.startswith("en/") else 0.0))
    assert metrics["accuracy/en/normal_atom_bool"] == 1.0 and metrics["accuracy/zh/normal_atom_bool"] == 0.0
    assert metrics["overall/en"] == pytest.approx(1.0) and metrics["overall/zh"] == 0.0
    assert metrics["overall"] == pytest.approx(0.5)
    assert "accuracy/normal_atom_bool" not in metrics
    tables = bench.report_tables(metrics)
    titles = [t[0] for t in tables]
    assert "ACEBench categories (en)" in titles and "ACEBench groups (zh)" in titles


def test_partial_records_only_count_scored_samples(acebench_en):
    samples = [s for s in acebench_en.samples if s.subset in ("normal_atom_enum", "normal_multi_turn_user_switch")]
    scored = [s for s in samples if s.id not in ("en/normal_atom_enum_0", "en/normal_multi_turn_user_switch_3_1")]
    metrics = acebench_en.bench.aggregate(samples, _records(scored, lambda s: 1.0))
    assert metrics["accuracy/normal_atom_enum"] == 1.0
    counts = acebench_en.bench.category_counts(samples, _records(scored, lambda s: 1.0))
    assert counts["normal_atom_enum"]["n_scored"] == 49
    assert counts["normal_multi_turn_user_switch"]["dialogues_scored"] == 49  # dialogue 3 left out
    plan = acebench_en.bench.stat_plan(samples, [_records(scored, lambda s: 1.0)])
    assert int(plan.columns["accuracy/normal_multi_turn_user_switch"].mask.sum()) == 49  # the units the metric rests on


def test_report_tables_rows(acebench_en):
    samples = acebench_en.samples
    records = _records(samples, lambda s: 1.0)
    metrics = acebench_en.bench.aggregate(samples, records)
    counts = acebench_en.bench.category_counts(samples, records)
    (title, headers, rows), (gtitle, gheaders, grows) = acebench_en.bench.report_tables(metrics, None, counts)
    assert headers == ["category", "scored", "accuracy", "process_acc"]
    assert rows[0] == ["normal_single_turn_single_function", "100", "1.0000", ""]
    turns = sum(s.subset == "normal_multi_turn_user_adjust" for s in samples)
    assert rows[2] == ["normal_multi_turn_user_adjust", f"{turns} (50 dialogues)", "1.0000", "1.0000"]
    assert [r[0] for r in grows] == ["ATOM", "SINGLE_TURN", "MULTI_TURN", "NORMAL", "SPECIAL", "overall"]


def test_language_all_selection_within_one_language_has_that_languages_headline(acebench_dir):
    """``language=all`` with a selection inside en (``run.limit=10``): the headline is
    en's overall (it used to be missing, printed as ``overall = None``); no zh block."""
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, language="all", subsets=["normal_atom_bool", "special_irrelevant"]))
    samples = [s for s in bench.load() if s.id.startswith("en/")][:10]
    metrics = bench.aggregate(samples, _records(samples, lambda s: 0.0 if s.id == "en/normal_atom_bool_3" else 1.0))
    assert metrics["accuracy/en/normal_atom_bool"] == 0.9
    assert metrics["overall"] == metrics["overall/en"] == pytest.approx(0.9)
    assert not any("/zh" in k for k in metrics)
