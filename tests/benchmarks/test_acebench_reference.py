"""Gold replay (spec §6.1-§6.2, pitfall 35) and shortcut answers."""

from __future__ import annotations

from collections import defaultdict

import pytest

from evalkit.benchmarks.acebench.metrics import dialogue_id

ZH_UNSATISFIABLE = {"zh/normal_similar_api_2", "zh/normal_similar_api_22", "zh/normal_atom_object_short_1"}


def _reference_failures(loaded) -> set[str]:
    bench = loaded.bench
    return {s.id for s in loaded.samples if bench.score(s, bench.reference_output(s)).scores["accuracy"] != 1.0}


def test_reference_en_scores_one_everywhere(acebench_en):
    assert len(acebench_en.samples) == 973
    assert _reference_failures(acebench_en) == set()


def test_pitfall_35_reference_zh_fails_exactly_the_unsatisfiable_records(acebench_zh):
    assert len(acebench_zh.samples) == 967
    assert _reference_failures(acebench_zh) == ZH_UNSATISFIABLE


def test_reference_multi_turn_dialogues_all_pass(acebench_en, acebench_zh):
    for loaded in (acebench_en, acebench_zh):
        bench = loaded.bench
        dialogues: dict[tuple[str, str], list[float]] = defaultdict(list)
        for s in loaded.samples:
            if s.subset.startswith("normal_multi_turn"):
                dialogues[(s.subset, dialogue_id(s.data["prompt"]["id"]))].append(bench.score(s, bench.reference_output(s)).scores["accuracy"])
        assert len(dialogues) == 100
        assert all(all(v == 1.0 for v in steps) for steps in dialogues.values())


def test_reference_escapes_whitespace_in_strings(acebench_en):
    sample = acebench_en.by_id["en/normal_single_turn_single_function_0"]
    text = acebench_en.bench.reference_output(sample)
    assert text.startswith("[NightSkyAnalysis_performEclipseAnalysis(")
    inside_literals = "".join(text.split("'")[1::2])
    assert not any(c.isspace() for c in inside_literals)


def test_reference_cascade_rescues_empty_optional_container(acebench_en):
    sample = acebench_en.by_id["en/normal_single_turn_parallel_function_42"]
    bench = acebench_en.bench
    text = bench.reference_output(sample)
    assert bench.score(sample, text).scores["accuracy"] == 1.0
    assert "=[]" not in text.replace(" ", "")


def test_shortcut_answers_score_zero_on_every_normal_record(acebench_en, acebench_zh):
    for loaded in (acebench_en, acebench_zh):
        bench = loaded.bench
        normal = [s for s in loaded.samples if s.subset.startswith("normal_")]
        assert len(normal) in (823, 817)
        for s in normal:
            assert bench.score(s, s.data["prompt"]["question"]).scores["accuracy"] == 0.0, s.id
            assert bench.score(s, "[]").scores["accuracy"] == 0.0, s.id


def test_special_reference_is_not_a_shortcut_across_categories(acebench_en):
    bench = acebench_en.bench
    inc, err = acebench_en.by_id["en/special_incomplete_1"], acebench_en.by_id["en/special_error_param_1"]
    assert bench.score(inc, bench.reference_output(err)).scores["accuracy"] == 0.0
    assert bench.score(err, bench.reference_output(inc)).scores["accuracy"] == 0.0


@pytest.mark.slow
def test_language_all_reference_run_reaches_the_ceilings_and_rescores_identically(run_eval):
    """A whole ``language=all`` run of the reference (all 2,040 samples, agents included)
    completes (its aggregation used to crash on ``overall_upstream_rounded``), scores 1.0
    on every record but zh's three unsatisfiable ones, reaches the spec §6.1 ceilings, and
    ``evalkit.rescore`` of it finds no difference."""
    from evalkit.engine.journal import read_jsonl
    from evalkit.rescore import rescore

    res = run_eval(["model=reference", "benchmark.language=all"])
    s = res.summary
    assert (s["status"], s["n_samples"], s["n_scored"], s["n_failed"], res.exit_code) == ("complete", 2040, 2040, 0, 0)
    rows = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert len(rows) == 2040
    assert {r["sample_id"] for r in rows if r["scores"]["accuracy"] != 1.0} == ZH_UNSATISFIABLE

    metrics = s["metrics"]
    zh_normal = (10 + 0.96 + 0.98) / 12  # normal_similar_api 48/50, normal_atom_object_short 49/50
    zh_overall = (0.578 * zh_normal + 0.2676 + 0.1545) / 1.0001
    expected_below_one = {
        "accuracy/zh/normal_similar_api": 0.96,
        "accuracy/zh/normal_atom_object_short": 0.98,
        "accuracy/zh/ATOM": (5 + 0.98) / 6,
        "accuracy/zh/NORMAL": zh_normal,
        "overall/zh": zh_overall,
        "overall_upstream_rounded/zh": 0.997,
        "overall": (1.0 + zh_overall) / 2,  # the headline: mean of the two languages
    }
    below = {k: v for k, v in metrics.items() if v != pytest.approx(1.0, abs=1e-12)}
    assert below == pytest.approx(expected_below_one, abs=1e-12)
    assert metrics["overall/en"] == pytest.approx(1.0, abs=1e-12) and metrics["overall_upstream_rounded/en"] == 1.0
    assert len([k for k in metrics if k.startswith("accuracy/en/")]) == 17 + 6  # categories + groups
    assert not any(k.startswith("accuracy/normal_") for k in metrics)  # no language-less category figures

    out = rescore(res.run_dir)
    assert out["changed"] == [] and out["metrics"] == metrics
