"""Numbers you can compare: intervals on every metric, their plans equal to each benchmark's
aggregation, paired tests, repeats, counts per category and the aggregation stated."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.ke import KE
from evalkit.benchmarks.ke.settings import KESettings
from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from evalkit.compare import compare
from evalkit.engine.journal import read_jsonl
from evalkit.report.figures import epoch_mean
from evalkit.stats import BINARY, Column, StatPlan, intervals, mcnemar, paired, pass_at_k
from evalkit.types import Trajectory
from tests.conftest import REPO_ROOT, evalkit_cmd


# ------------------------------------------------------------------------------------------
# every plan's point estimates are the benchmark's own aggregate
# ------------------------------------------------------------------------------------------
def _records(bench, samples, seed: int, drop: float = 0.05) -> list[dict]:
    """Scored records of a mixed-quality model: reference answers, some cut in half (wrong),
    some samples left unscored; agent rollouts get random 0/1 accuracy and process_acc."""
    rnd = random.Random(seed)
    out = []
    for s in samples:
        if rnd.random() < drop:
            continue
        if bench.is_rollout(s):
            scores = {"accuracy": float(rnd.random() < 0.5), "process_acc": rnd.choice([0.0, 0.25, 0.5, 1.0])}
            out.append({"sample_id": s.id, "subset": s.subset, "scores": scores})
            continue
        text = bench.reference_output(s)
        if rnd.random() < 0.4:
            text = text[: len(text) // 2]
        scored = bench.score_sample(s, Trajectory(final_output=text))
        out.append({"sample_id": s.id, "subset": s.subset, "scores": scored.scores, "checks": scored.checks})
    return out


def _benchmarks(shared: Path):
    yield AceBench(AceBenchSettings(data_dir=shared / "acebench", language="all"))
    yield AceBench(AceBenchSettings(data_dir=shared / "acebench", language="zh", subsets=["normal_multi_turn_user_switch", "special_incomplete"]))
    yield SOBHard(SOBHardSettings(data_dir=shared / "sobhard"))
    yield KE(KESettings(pilot_path=shared / "ke" / "pilot.jsonl", icl_path=shared / "ke" / "icl_examples.jsonl"))


@pytest.fixture(scope="module")
def loaded(shared_data_dir: Path):
    return [(b, b.load()) for b in _benchmarks(shared_data_dir)]


def test_plan_point_estimates_equal_each_benchmarks_aggregate(loaded):
    for bench, samples in loaded:
        for seed in (1, 2):
            records = _records(bench, samples, seed)
            expected = bench.aggregate(samples, records)
            got = bench.stat_plan(samples, [records]).point()
            assert set(got) == set(expected), (bench.name, set(got) ^ set(expected))
            assert got == pytest.approx(expected, abs=1e-12), bench.name


def test_plan_over_epochs_is_the_mean_of_each_epochs_aggregate(loaded):
    for bench, samples in loaded:
        epochs = [_records(bench, samples, seed) for seed in (3, 4, 5)]
        expected = epoch_mean([bench.aggregate(samples, rows) for rows in epochs])
        got = bench.stat_plan(samples, epochs).point()
        assert got == pytest.approx(expected, abs=1e-12), bench.name


def test_acebench_resamples_dialogues_not_turns(loaded):
    bench, samples = next((b, s) for b, s in loaded if b.name == "acebench" and b.settings.language == "zh")
    plan = bench.stat_plan(samples, [_records(bench, samples, 7, drop=0.0)])
    multi = [s for s in samples if s.subset == "normal_multi_turn_user_switch"]
    dialogues = {s.data["prompt"]["id"].rsplit("_", 1)[0] for s in multi}
    assert len(multi) > len(dialogues) > 1
    assert sum(u.startswith("zh/normal_multi_turn_user_switch_") for u in plan.units) == len(dialogues)


# ------------------------------------------------------------------------------------------
# the intervals themselves
# ------------------------------------------------------------------------------------------
def test_a_single_stratum_interval_agrees_with_scipys_bootstrap(loaded):
    """KE's f1_macro/<difficulty> is a plain mean over that difficulty's items (one stratum):
    its interval is scipy.stats.bootstrap's percentile interval, within Monte-Carlo error."""
    bench, samples = next((b, s) for b, s in loaded if b.name == "ke")
    records = _records(bench, samples, 11, drop=0.0)
    ci = intervals(bench.stat_plan(samples, [records]), 0.95, 20_000, 0)
    diff = "medium"
    f1 = np.array([r["scores"]["f1"] for r in records if r["subset"] == diff])
    assert len(set(f1)) > 2
    ref = sps.bootstrap((f1,), np.mean, method="percentile", n_resamples=20_000, random_state=1).confidence_interval
    assert ci[f"f1_macro/{diff}"]["low"] == pytest.approx(ref.low, abs=0.02)
    assert ci[f"f1_macro/{diff}"]["high"] == pytest.approx(ref.high, abs=0.02)
    assert ci[f"f1_macro/{diff}"]["n"] == len(f1) and "percentile bootstrap" in ci["f1_macro"]["method"]


def test_95_percent_intervals_cover_the_rate_95_percent_of_the_time():
    rng = np.random.default_rng(2026)
    covered = 0
    for i in range(1000):
        v = (rng.random(200) < 0.3).astype(float)
        plan = StatPlan([str(j) for j in range(200)], np.zeros(200, dtype=int), {"rate": Column(v[None, :], np.ones((1, 200), bool), BINARY)})
        ci = intervals(plan, 0.95, 1000, i)["rate"]
        covered += ci["low"] <= 0.3 <= ci["high"]
    assert 930 <= covered <= 970


def test_a_reference_run_has_a_degenerate_interval_not_nan(run_eval):
    res = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool,special_irrelevant]", "run.limit=40"])
    ci = res.summary["metrics_ci"]
    assert ci["overall"]["low"] == ci["overall"]["high"] == 1.0 and ci["overall"]["stderr"] == 0.0
    assert set(ci) == set(res.summary["metrics"]) - {"overall_upstream_rounded"} or set(ci) == set(res.summary["metrics"])


# ------------------------------------------------------------------------------------------
# paired tests
# ------------------------------------------------------------------------------------------
def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_pairs():
    rng = np.random.default_rng(5)
    a, b = (rng.random(300) < 0.6).astype(float), (rng.random(300) < 0.7).astype(float)
    only_a, only_b, p = mcnemar(a, b)
    assert (only_a, only_b) == (int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1))))
    assert p == sps.binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert mcnemar(a, a) == (0, 0, 1.0)


def test_paired_self_comparison_is_zero_with_p_one(loaded):
    for bench, samples in loaded:
        plan = bench.stat_plan(samples, [_records(bench, samples, 9)])
        for name, m in paired(plan, plan, 0.95, 500, 0).items():
            assert (m["delta"], m["low"], m["high"], m["p"]) == (0.0, 0.0, 0.0, 1.0), (bench.name, name)


def test_pass_at_k_is_the_unbiased_estimator():
    correct, n = np.array([0, 1, 3, 2]), np.array([3, 3, 3, 3])
    assert pass_at_k(correct, n, 1) == pytest.approx(np.mean(correct / 3))
    assert pass_at_k(correct, n, 3) == pytest.approx(0.75)  # any of 3 right
    assert pass_at_k(correct, n, 2) == pytest.approx(np.mean([0, 1 - 1 / 3, 1, 1]))


# ------------------------------------------------------------------------------------------
# through real runs: a sweep, compare, counts, repeats
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ke_sweep_reports_intervals_and_the_paired_delta_compare_agrees(tmp_path, shared_data_dir):
    ke = shared_data_dir / "ke"
    proc = subprocess.run(
        evalkit_cmd("-m", "benchmark=ke", "model=baseline_file_read,baseline_first_k", "shots=0,3",
                    f"benchmark.pilot_path={ke / 'pilot.jsonl'}", f"benchmark.icl_path={ke / 'icl_examples.jsonl'}",
                    f"run.output_root={tmp_path}", "tracking=none", "run.progress=false"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (sweep_dir,) = (tmp_path / "sweeps").iterdir()
    summary = json.loads((sweep_dir / "sweep_summary.json").read_text())
    jobs = {j["num"]: j for j in summary["jobs"]}
    assert all(j["headline_ci"]["low"] <= j["headline_value"] <= j["headline_ci"]["high"] for j in jobs.values())
    model_pairs = [p for p in summary["paired"] if p["key"] == "model"]
    assert {(p["base"], p["job"]) for p in model_pairs} == {(0, 2), (1, 3)}
    pair = next(p for p in model_pairs if p["base"] == 0)
    result = compare([jobs[0]["run_dir"], jobs[2]["run_dir"]])
    f1 = result["paired"][0]["metrics"]["f1_macro"]
    assert (f1["delta"], f1["low"], f1["high"], f1["p"]) == (pair["delta"], pair["low"], pair["high"], pair["p"])
    assert f1["delta"] == pytest.approx(jobs[2]["headline_value"] - jobs[0]["headline_value"])
    report = (sweep_dir / "sweep_report.md").read_text()
    assert f"{pair['delta']:+.4f} [{pair['low']:+.4f}, {pair['high']:+.4f}]" in report
    assert f"{jobs[0]['headline_value']:.4f} [{jobs[0]['headline_ci']['low']:.4f}, {jobs[0]['headline_ci']['high']:.4f}]" in report
    shots_pair = next(p for p in summary["paired"] if p["key"] == "shots" and p["base"] == 0)
    assert (shots_pair["delta"], shots_pair["p"]) == (0.0, 1.0)  # a rule baseline ignores the shots


@pytest.mark.slow
def test_compare_of_a_run_with_itself(run_eval):
    res = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=10"])
    proc = subprocess.run([sys.executable, "-m", "evalkit.compare", str(res.run_dir), str(res.run_dir), "--json"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pair = json.loads(proc.stdout)["paired"][0]
    assert pair["notes"] == []
    assert all(m["delta"] == 0.0 and m["p"] == 1.0 for m in pair["metrics"].values())
    acc = pair["metrics"]["accuracy/normal_atom_bool"]
    assert (acc["test"], acc["only_a"], acc["only_b"], acc["n_paired"], acc["n_excluded"]) == ("exact McNemar", 0, 0, 10, 0)


@pytest.mark.slow
def test_compare_output_into_head_prints_no_traceback(run_eval):
    res = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=30"])
    cmd = f"{sys.executable} -m evalkit.compare {res.run_dir} {res.run_dir} | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.stdout.startswith("Runs:") and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.slow
def test_a_failed_sample_shows_scored_of_requested(fake_openai, ray_address, run_eval):
    fake_openai.set_plan({"default": {"content": "[]"}, "rules": [{"match": "Please focus on Europe", "always_status": 400}]})
    ids = "run.sample_ids=[en/normal_atom_bool_0,en/normal_atom_bool_1,en/normal_atom_bool_2,en/normal_atom_bool_3]"
    res = run_eval(["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
                    "backend.max_retries=0", ids, "run.cache=false"])  # fmt: skip
    counts = res.summary["category_counts"]["normal_atom_bool"]
    failed = res.summary["n_failed"]
    assert failed == 1 and counts == {"n_requested": 4, "n_scored": 3, "n_failed": 1}
    assert f"| {4 - failed} of 4 " in (res.run_dir / "report.md").read_text()
    assert "partial_accuracy/normal_atom_bool" in res.summary["metrics_ci"] and "accuracy/normal_atom_bool" not in res.summary["metrics_ci"]


@pytest.mark.slow
def test_repeats_ask_every_sample_k_times_and_resume_adds_only_new_epochs(fake_openai, ray_address, run_eval, tmp_path):
    fake_openai.set_plan({"default": {"content": "[]"}})
    base = ["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
            "benchmark.subsets=[normal_atom_bool]", "run.limit=4", "+model.generation.temperature=0.7"]  # fmt: skip
    res = run_eval([*base, "run.repeats=3", "tracking=mlflow"], output_root=tmp_path / "out")
    assert len(fake_openai.log) == 12 and len({e["key"] for e in fake_openai.log}) == 4  # same prompt, 3 identities each
    s = res.summary
    assert s["status"] == "complete" and (s["n_scored"], s["n_scored_rows"]) == (4, 12) and s["repeats"] == 3
    assert {"pass@3", "pass^3", "within_sample_std"} <= set(s["metrics"])
    from mlflow.tracking import MlflowClient

    run_id = json.loads((res.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    logged = MlflowClient(f"sqlite:///{(tmp_path / 'out').resolve() / 'mlflow.db'}").get_run(run_id).data.metrics
    assert logged["pass_at_3"] == s["metrics"]["pass@3"] and logged["pass_all_3"] == s["metrics"]["pass^3"]
    rows = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert sorted({r["epoch"] for r in rows}) == [0, 1, 2] and len({r["request_hash"] for r in rows}) == 12
    fake_openai.set_plan({"default": {"content": "[]"}})
    again = run_eval([*base, "run.repeats=4", f"run.resume={res.run_dir}"], output_root=tmp_path / "out")
    assert len(fake_openai.log) == 4 and again.summary["n_scored_rows"] == 16 and "pass@4" in again.summary["metrics"]


def test_every_benchmarks_report_states_its_aggregation(run_eval, shared_data_dir):
    ace = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool,normal_multi_turn_user_adjust]", "run.limit=30"])
    text = (ace.run_dir / "report.md").read_text()
    assert "## How the figures aggregate" in text and "0.578·NORMAL + 0.2676·SPECIAL + 0.1545·AGENT" in text
    assert ace.summary["aggregation"]["overall"].startswith("0.578·NORMAL")
    ke = shared_data_dir / "ke"
    k = run_eval(["benchmark=ke", "model=reference", f"benchmark.pilot_path={ke / 'pilot.jsonl'}", f"benchmark.icl_path={ke / 'icl_examples.jsonl'}"])
    assert k.summary["aggregation"]["f1_macro"] == "mean of per-item F1 (each item weighs equally; spec §6)"
    sob = run_eval(["benchmark=sobhard", "model=reference", f"benchmark.data_dir={shared_data_dir / 'sobhard'}"])
    assert "0.01" in sob.summary["aggregation"]["balance_score"] and "geometric mean" in sob.summary["aggregation"]["balance_score"]
    assert set(sob.summary["aggregation"]) == set(sob.summary["metrics"])


def test_sign_flip_of_one_pair_is_p_one_and_of_three_equal_signs_is_exact():
    from evalkit.stats import sign_flip

    rng = np.random.default_rng(0)
    assert sign_flip(np.array([0.2]), np.array([0.9]), 999, rng) == 1.0
    # 3 pairs, all B > A: of the 2^3 sign assignments, 2 are as extreme (all + or all −)
    assert sign_flip(np.array([0.1, 0.2, 0.3]), np.array([0.5, 0.6, 0.9]), 9999, rng) == pytest.approx(0.25)
