"""Judged and compared runs read right (issue 32, item 5): the run's ``instrument`` names its
judges (model, provider, rubric digest) and ``compare`` says when they differ, never "no
difference detected"; a comparison run is named by what it compares and what it found; its
metrics carry the ``compare/`` prefix; a run with more than ten breakdown metrics logs them as
tables. Also: report.md of a complete run whose headline has no value (issue 32, item 3).

The MLflow side (the name, the tags and description lines on both compared runs, the flips
table of a sweep's comparisons) is checked against a real ``mlflow server`` in
tests/test_mlflow_server.py."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from evalkit.report.summary import judge_identity
from evalkit.summary import Summary
from tests.support.judge_conf import judge_config_dir

ROWS = [{"id": "a", "q": "1+1?", "ans": "2"}, {"id": "b", "q": "2+2?", "ans": "4"}]
RUBRIC = "Q: {{ input }} Ref: {{ target }} A: {{ output }}"


def _judged(conf: Path, data: Path, *overrides: str, rubric: str = RUBRIC):
    from evalkit.compose import compose, resolve

    spec = {"name": "judged", "kind": "task", "prompt": {"template": "{{ input }}"},
            "dataset": {"path": str(data), "fields": {"id": "id", "input": "q", "target": "ans"}},
            "scorers": [{"kind": "llm_judge", "name": "quality", "rubric": rubric}]}  # fmt: skip
    (conf / "benchmark" / "judged.yaml").write_text(json.dumps(spec), encoding="utf-8")
    return resolve(compose(["benchmark=judged", *overrides]))[1]


def _identity(cfg):
    """The judges' identity as the run's summary takes it: from the run's report spec."""
    from evalkit.specs import build

    report = build(cfg).report
    return judge_identity(report.judges, report.judge_scorers)


def test_the_instrument_names_each_judge_its_provider_and_the_rubric(tmp_path, monkeypatch):
    conf, data = judge_config_dir(tmp_path, ROWS)
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(conf))
    network = ["model=openai_compatible", "model.provider_model=openai/x", "backend.api_base=http://127.0.0.1:9"]
    cfg = _judged(conf, data, *network, "judge=[judge_b,judge_a]")
    panel = _identity(cfg)
    assert panel["judges"] == [{"name": "judge_b", "model": "openai/judge_b", "provider": "openai"},
                               {"name": "judge_a", "model": "openai/judge_a", "provider": "openai"}]  # fmt: skip
    one = _identity(cfg.model_copy(update={"judge": cfg.judge[1:]}))
    assert one["judges"] == panel["judges"][1:] and one["rubric"] == panel["rubric"]
    assert one["rubric"].startswith("sha256:") and len(one["rubric"]) == len("sha256:") + 16
    scorer = cfg.benchmark.scorers[0].model_copy(update={"rubric": RUBRIC + " Be strict."})
    reworded = _identity(cfg.model_copy(update={"benchmark": cfg.benchmark.model_copy(update={"scorers": [scorer]})}))
    assert reworded["judges"] == panel["judges"] and reworded["rubric"] != panel["rubric"]
    gold = _identity(_judged(conf, data, "model=reference"))
    assert gold["judges"] == [{"name": "reference", "model": "reference", "provider": "reference"}]
    assert judge_identity(()) == {}


@pytest.mark.slow  # a whole run (in process, offline)
def test_runs_judged_by_different_judges_never_read_no_difference_detected(tmp_path):
    """The same answers judged by two judges: ``compare`` notes the instrument change and the
    headline's verdict says the Δ is the instrument's; with the same judge it does not."""
    from evalkit.compare import compare, render
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    res = run_validated(resolve(compose(["benchmark=explain_mini", "model=reference", "tracking=none", "run.progress=false",
                                         f"run.output_root={tmp_path / 'out'}"]))[1])  # fmt: skip
    assert res.exit_code == 0
    instrument = json.loads((res.run_dir / "summary.json").read_text())["instrument"]
    assert instrument["judge"]["judges"] == [{"name": "reference", "model": "reference", "provider": "reference"}]
    other = tmp_path / "other"
    shutil.copytree(res.run_dir, other)
    summary = json.loads((other / "summary.json").read_text())
    summary["instrument"]["judge"]["judges"] = [{"name": "judge_b", "model": "anthropic/claude-x", "provider": "anthropic"}]
    (other / "summary.json").write_text(json.dumps(summary), encoding="utf-8")

    same = render(compare([res.run_dir, res.run_dir]))
    assert "no difference detected" in same and "instrument" not in same
    text = render(compare([res.run_dir, other]))
    assert "instrument differs (judge: reference (reference) vs judge_b (anthropic/claude-x))" in text
    assert "is not a model difference: the instrument changed" in text and "no difference detected" not in text

    summary["instrument"]["judge"]["judges"] = instrument["judge"]["judges"]
    summary["instrument"]["judge"]["rubric"] = "sha256:0000000000000000"
    (other / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    text = render(compare([res.run_dir, other]))
    assert f"judge rubric: {instrument['judge']['rubric']} vs sha256:0000000000000000" in text
    assert "no difference detected" not in text


def test_a_comparison_is_named_by_what_it_compares_and_found():
    from evalkit.tracking.curate import comparison_metrics, comparison_name

    worse = {"delta": -0.2833, "p": 0.0003, "low": -0.4, "high": -0.1, "n": 40}
    assert comparison_name("overall", "acebench", "reference", "replay", worse, 0.95) == \
        "Δ overall acebench: reference → replay −0.28 (p 0.0003, worse)"  # fmt: skip
    better = {"delta": 0.1, "p": 0.01}
    assert comparison_name("f1_macro", "ke", "shots=0", "shots=3", better, 0.95) == "Δ f1_macro ke: shots=0 → shots=3 +0.1 (p 0.01, better)"
    same = {"delta": -0.05, "p": 0.4}
    assert comparison_name("accuracy", "arith", "a", "b", same, 0.95).endswith("−0.05 (p 0.4, no difference detected)")
    assert comparison_name("accuracy", "arith", "a", "b", better, 0.95, "judge: x vs y").endswith("(p 0.01, instrument changed)")
    assert comparison_name("accuracy", "arith", "a", "b", {"delta": None}, 0.95).endswith("a → b (no paired samples)")
    assert comparison_name("accuracy", "arith", "a" * 300, "b", better, 0.95) == ("Δ accuracy arith: " + "a" * 300)[:250]
    metrics = comparison_metrics({**worse, "p_holm": 0.001, "p_bh": 0.0009, "mde": 0.1, "test": "tango"})
    assert set(metrics) == {"compare/delta", "compare/p", "compare/delta_ci_low", "compare/delta_ci_high", "compare/n_paired",
                            "compare/p_holm", "compare/p_bh", "compare/mde"}  # fmt: skip
    assert metrics["compare/delta"] == -0.2833


def _summary(n_breakdown: int, **extra) -> Summary:
    metrics = {"accuracy": 0.5, **{f"accuracy/topic/t{i}": i / 100 for i in range(n_breakdown)}}
    return Summary(status="complete", benchmark="t", model="m", n_samples=4, n_scored=4, n_failed=0, n_scored_rows=4,
                   n_failed_rows=0, headline="accuracy", metrics=metrics, **extra)  # fmt: skip


def test_more_than_ten_breakdown_metrics_go_to_tables_not_metric_columns():
    from evalkit.tracking.curate import MAX_BREAKDOWN_METRICS, breakdown_tables, run_metrics

    few = run_metrics(_summary(MAX_BREAKDOWN_METRICS))
    assert sum(k.startswith("accuracy/topic/") for k in few) == MAX_BREAKDOWN_METRICS and breakdown_tables(_summary(10)) == {}
    many = _summary(MAX_BREAKDOWN_METRICS + 1)
    metrics = run_metrics(many)
    assert not any(k.startswith("accuracy/") for k in metrics) and metrics["accuracy"] == 0.5 and metrics["headline"] == 0.5
    table = breakdown_tables(many)["topic"]
    assert table["topic"] == [f"t{i}" for i in range(11)] and table["accuracy"] == [i / 100 for i in range(11)]


class _Bench:
    def report_tables(self, metrics, ci, counts):
        return []


@pytest.mark.parametrize("value", [None, float("nan")])
def test_report_of_a_complete_run_without_a_headline_value_says_it_could_not_be_computed(tmp_path, value):
    from evalkit.report.summary import write_report

    metrics = {"macro_accuracy": value} if value is not None else {}
    summary = Summary(status="complete", benchmark="plug", model="m", n_samples=2, n_scored=2, n_failed=0, n_scored_rows=2,
                      n_failed_rows=0, headline="macro_accuracy", metrics=metrics)  # fmt: skip
    text = write_report(tmp_path, summary, _Bench()).read_text()
    assert "the headline could not be computed" in text and "`macro_accuracy` has no value" in text
    assert "**Status: complete.**" not in text and "= None" not in text
    ok = Summary(**{**summary.model_dump(), "metrics": {"macro_accuracy": 0.5}})
    assert "**Status: complete.** Headline `macro_accuracy = 0.5000" in write_report(tmp_path, ok, _Bench()).read_text()


def test_the_render_check_covers_every_row_of_the_data_whatever_the_selection(tmp_path, monkeypatch):
    """The task check renders each row's templates once (a superset of what a run with
    ``run.limit`` renders), in one bounded child whose time limit grows with the renders."""
    import evalkit.benchmarks.task.benchmark as task_module
    from evalkit.benchmarks.task.benchmark import TaskBenchmark
    from evalkit.benchmarks.task.settings import TaskSettings
    from evalkit.benchmarks.task.template import CHECK_BASE_S, CHECK_PER_RENDER_S

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "q": f"{i}+1?", "ans": str(i + 1)}) + "\n" for i in range(50)), encoding="utf-8")
    settings = TaskSettings.model_validate({"name": "t", "kind": "task", "prompt": {"system": "Answer.", "template": "{{ input }}"},
                                            "dataset": {"path": str(data), "fields": {"id": "id", "input": "q", "target": "ans"}},
                                            "scorers": [{"kind": "exact_match", "name": "acc"}]})  # fmt: skip
    seen = []
    monkeypatch.setattr(task_module, "check_renders", lambda jobs, where: seen.append(jobs))
    TaskBenchmark(settings).load()
    (jobs,) = seen
    per_row = Counter(j[3] for j in jobs)
    assert set(per_row) == {f"r{i}" for i in range(50)} and len({per_row[f"r{i}"] for i in range(1, 50)}) == 1  # each row alike
    assert per_row["r0"] == per_row["r1"] + 1  # and the system prompt, which reads no variable, once (issue 46)
    assert CHECK_BASE_S + CHECK_PER_RENDER_S * len(jobs) < CHECK_BASE_S + 2  # the child's wall-clock bound for these renders


def test_a_rescore_keeps_the_judges_that_measured_the_run():
    """``rescore`` asks no judge (it re-reads the verdicts): the recorded judges stay in the
    rescored run's instrument."""
    from evalkit.rescore import _judged_by

    judge = {"judges": [{"name": "judge_a", "model": "openai/judge_a", "provider": "openai"}], "rubric": "sha256:0123456789abcdef"}
    recorded = _summary(0, instrument={"judge": judge, "scoring": "official"})
    assert _judged_by(recorded) == {"judge": judge} and _judged_by(_summary(0)) == {}
