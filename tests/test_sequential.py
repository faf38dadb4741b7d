"""The sequential gate (issue 37 items 1-4): the confidence sequence, the order, the
decision, the config, the simulation (reduced) and, slow, runs that stop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalkit.sequential import ConfidenceSequence, decide, fixed_n, simulate, stratified_order, Look

ROOT = Path(__file__).resolve().parents[1]


def test_census_collapses_to_the_exact_delta_and_covers_it_at_every_look():
    """Sampling without replacement: once every unit is drawn the interval is the exact Δ;
    before that it holds the true Δ (a fixed population, 3 strata with unequal weights)."""
    rng = np.random.default_rng(3)
    sizes, weights = [5, 30, 60], [0.5, 0.3, 0.2]
    pops = [rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.2, 0.6, 0.2]) for n in sizes]
    truth = sum(w * p.mean() for w, p in zip(weights, pops))
    cs = ConfidenceSequence(sizes, weights)
    strata = [k for k, n in enumerate(sizes) for _ in range(n)]
    order = stratified_order(strata, dict(enumerate(weights)), seed=1)
    flat = np.concatenate(pops)
    for t, i in enumerate(order, 1):
        cs.add(strata[i], float(flat[i]))
        if t % 10 == 0 or t == len(order):
            look = cs.interval()
            assert look.low - 1e-9 <= truth <= look.high + 1e-9, (t, look, truth)
    assert abs(look.low - truth) < 0.01 and abs(look.high - truth) < 0.01


def test_order_is_seeded_and_keeps_each_strata_share_at_its_weight():
    strata = [0] * 50 + [1] * 50 + [2] * 4
    a = stratified_order(strata, {0: 0.45, 1: 0.45, 2: 0.10}, seed=7)
    assert a == stratified_order(strata, {0: 0.45, 1: 0.45, 2: 0.10}, seed=7)
    assert a != stratified_order(strata, {0: 0.45, 1: 0.45, 2: 0.10}, seed=8)
    assert sorted(a) == list(range(len(strata)))
    first20 = [strata[i] for i in a[:20]]
    assert first20.count(2) == 2 and first20.count(0) == 9  # 10 % and 45 % of 20 draws


def test_decide_speaks_the_gate_language_and_futility_only_under_a_cap():
    look = Look(n=100, delta=-0.2, low=-0.3, high=-0.1)
    assert decide(look, "noninferior", 0.05, 500)[0] == "FAIL"
    assert decide(Look(100, 0.1, 0.01, 0.2), "superior", 0.0, 500)[0] == "PASS"
    assert decide(Look(100, 0.0, -0.02, 0.03), "equivalent", 0.05, 500)[0] == "PASS"
    assert decide(Look(10, 0.1, 0.01, 0.2), "superior", 0.0, 500, min_samples=20)[0] == "CONTINUE"
    near = Look(n=400, delta=-0.06, low=-0.12, high=-0.04)
    assert decide(near, "noninferior", 0.05, 500)[0] == "FUTILE"
    assert decide(near, "noninferior", 0.05, 500, population=500)[0] == "CONTINUE"  # a census reaches the exact Δ


def test_a_sequence_of_zeros_never_passes_superior_and_a_clear_loss_fails_early():
    d = np.zeros(400)
    strata = np.arange(400) % 2
    got = simulate(d, strata, {0: 0.5, 1: 0.5}, "superior", 0.0, 400, 10, 20, seed=0)
    assert got["verdict"] != "PASS"
    bad = -np.ones(400)
    got = simulate(bad, strata, {0: 0.5, 1: 0.5}, "noninferior", 0.05, 400, 10, 20, seed=0)
    assert got["verdict"] == "FAIL" and got["n"] <= 40


def test_fixed_n_design_size():
    assert fixed_n(0.05, 0.2) == 841  # (1.96 + 1.2816)² · 0.2 / 0.05²


def test_perf_script_smallest_run_holds_its_bounds():
    """perf/sequential.py at its smallest (a fast test): the table's rows, no PASS at the
    margin, coverage at every look, never more than the fixed-n design plus one batch."""
    sys.path.insert(0, str(ROOT / "perf"))
    import sequential as perf  # perf/sequential.py

    res = perf.measure(sims=2, seed=5, n_pop=300, margin=0.15, discordance=0.2, batch=10, min_samples=20)
    assert set(res["rows"]) == {"-3x", "-2x", "-1x", "+0x", "+1x", "+2x"} and res["fixed_n"] == 94
    assert res["false_pass_at_margin"] == 0.0 and all(v == 1.0 for v in res["coverage"].values())
    assert all(r["max_fraction"] <= 1.0 + 10 / res["fixed_n"] for r in res["rows"].values())
    assert "| true Δ |" in perf.render(res)


@pytest.mark.slow
def test_perf_script_reduced_meets_its_targets():
    """perf/sequential.py reduced: no false PASS at the margin beyond the nominal, coverage
    ≥ level at every look, and the savings at +2×margin and −3×margin (≤ 50 % of fixed n)."""
    sys.path.insert(0, str(ROOT / "perf"))
    import sequential as perf  # perf/sequential.py

    res = perf.measure(sims=6, seed=5, n_pop=800, margin=0.1, discordance=0.2, batch=10, min_samples=20)
    assert res["false_pass_at_margin"] <= 1 / 6  # 0 expected; one of six allowed by chance
    assert all(v == 1.0 for v in res["coverage"].values())
    assert res["rows"]["+2x"]["mean_fraction"] <= 0.5 and res["rows"]["-3x"]["mean_fraction"] <= 0.5
    assert all(r["max_fraction"] <= 1.0 + 10 / res["fixed_n"] for r in res["rows"].values())


def test_stop_when_with_batch_is_refused_in_one_line(tmp_path):
    from evalkit.config import RunSettings

    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(ValueError, match="run.stop_when: a batch holds every request"):
        RunSettings(stop_when="noninferior:0.02", baseline=str(tmp_path), batch=True)
    with pytest.raises(ValueError, match="run.stop_when: needs run.baseline"):
        RunSettings(stop_when="superior")
    with pytest.raises(ValueError, match="run.stop_when"):
        RunSettings(stop_when="worse:3", baseline=str(tmp_path))


# ---- runs that stop (slow: they launch runs) ---------------------------------------------
def _replay(base: Path, path: Path, wrong: bool) -> Path:
    rows = [json.loads(line) for line in (base / "predictions.jsonl").read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": "no idea" if wrong else r["output"]}) + "\n" for r in rows))
    return path


def _sob(data: Path) -> list[str]:
    return ["benchmark=sobhard", f"benchmark.data_dir={data / 'sobhard'}", "tracking=none", "run.progress=false"]


@pytest.mark.slow
def test_gate_run_against_a_clearly_worse_replay_stops_early_with_fail_and_resumes_to_it(run_eval, shared_data_dir, tmp_path):
    base = run_eval([*_sob(shared_data_dir), "model=reference"]).run_dir
    bad = _replay(base, tmp_path / "bad.jsonl", wrong=True)
    args = [*_sob(shared_data_dir), "model=replay", f"model.path={bad}", "run.stop_when=noninferior:0.15",
            f"run.baseline={base}", "run.min_samples=5", "backend.concurrency=2"]
    res = run_eval(args)
    s = json.loads((res.run_dir / "summary.json").read_text())
    assert s["status"] == "decided" and s["sequential"]["verdict"] == "FAIL"
    assert s["sequential"]["n_used"] < 22 and s["n_samples"] <= s["sequential"]["n_used"] + 2  # one batch beyond
    again = run_eval([*args, f"run.resume={res.run_dir}"])
    t = json.loads((again.run_dir / "summary.json").read_text())
    assert t["sequential"]["verdict"] == "FAIL" and t["sequential"]["n_used"] == s["sequential"]["n_used"]
    assert (res.run_dir / "plots" / "sequential.png").is_file()
    from evalkit.compare import compare, gate_verdict

    result = compare([str(base), str(res.run_dir)], True, 0.95, 200, 0, shared_data_dir / "sobhard")
    head = result["paired"][0]["metrics"]["sample_pass_rate"]
    assert head["test"].startswith("anytime-valid") and head["high"] == s["sequential"]["interval"]["high"]
    assert gate_verdict(result, "noninferior:0.15")["verdict"] == "FAIL"
    assert len((res.run_dir / "predictions.jsonl").read_text().splitlines()) == s["n_samples"]  # nothing paid twice
    # as after a SIGKILL before the decision: the journal's first 6 rows only, no summary
    lines = (res.run_dir / "predictions.jsonl").read_text().splitlines(keepends=True)
    (res.run_dir / "predictions.jsonl").write_text("".join(lines[:6]))
    (res.run_dir / "summary.json").unlink()
    killed = run_eval([*args, f"run.resume={res.run_dir}"])
    k = json.loads((killed.run_dir / "summary.json").read_text())
    assert (k["status"], k["sequential"]["verdict"], k["sequential"]["n_used"]) == ("decided", "FAIL", s["sequential"]["n_used"])
    assert k["sequential"]["interval"] == s["sequential"]["interval"]  # the same martingale, not a fresh test


@pytest.mark.slow
def test_gate_run_against_an_equal_replay_does_not_pass_superior(run_eval, shared_data_dir, tmp_path):
    base = run_eval([*_sob(shared_data_dir), "model=reference"]).run_dir
    same = _replay(base, tmp_path / "same.jsonl", wrong=False)
    res = run_eval([*_sob(shared_data_dir), "model=replay", f"model.path={same}", "run.stop_when=superior",
                    f"run.baseline={base}", "run.min_samples=5", "backend.concurrency=2"])
    s = json.loads((res.run_dir / "summary.json").read_text())
    assert s["sequential"]["verdict"] != "PASS"


@pytest.mark.slow
def test_a_capped_regression_stops_futile_saying_what_it_excludes_and_compare_agrees(run_eval, shared_data_dir, tmp_path, capsys):
    """Issue 44: a capped run that stopped FUTILE read INCONCLUSIVE in compare. Its line says
    what the interval excludes and that it still holds −δ; compare's gate of the same gate
    reads FUTILE, exit 3, with the run's line."""
    from evalkit.compare import main

    base = run_eval([*_sob(shared_data_dir), "model=reference"]).run_dir
    bad = _replay(base, tmp_path / "bad.jsonl", wrong=True)
    res = run_eval([*_sob(shared_data_dir), "model=replay", f"model.path={bad}", "run.stop_when=noninferior:0.05",
                    f"run.baseline={base}", "run.min_samples=5", "run.limit=12", "backend.concurrency=2"])
    s = json.loads((res.run_dir / "summary.json").read_text())["sequential"]
    assert s["verdict"] == "FUTILE" and s["n_used"] < 12, s
    assert "excludes Δ > +" in s["why"] and "still holds -0.05" in s["why"] and "Δ < -1.0000" not in s["why"]
    assert main([str(base), str(res.run_dir), "--gate", "noninferior:0.05", "--data-dir", str(shared_data_dir / "sobhard")]) == 3
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith(f"gate noninferior:0.05: FUTILE — {s['why']}")
