"""Every speed script in perf/ runs, for a few samples, and prints its figures.

The scripts measure (they assert nothing about time); these tests only keep them working:
each is run as a user runs it (``python perf/<script>.py``, its own process) with the
smallest arguments it takes, and must exit 0 and print the line that carries its figure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # each starts a process of its own; most start Ray and the fake server

PERF = REPO_ROOT / "perf"


def _run(script: str, *args: str, timeout: int = 600) -> str:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'src'}{os.pathsep}{REPO_ROOT}"}
    proc = subprocess.run([sys.executable, str(PERF / script), *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_every_perf_script_has_a_test_here():
    tested = {"ci_speed.py", "scoring_speed.py", "tracking_speed.py", "startup.py", "throughput.py", "engine_cpu.py",
              "frameworks.py", "run_evalkit.py", "run_inspect.py", "coverage.py", "summary_size.py",
              "score_budget.py", "footprint.py", "agreement_coverage.py", "chaos.py", "rate_limit_cost.py",
              "scale_out.py", "import_graph.py", "qualification_coverage.py", "qualification_coverage_cell.py", "qualify_speed.py",
              "sequential.py", "scale.py"}  # fmt: skip  (sequential.py: tests/test_sequential.py runs it, smallest and reduced)
    assert {p.name for p in PERF.glob("*.py")} == tested


@pytest.mark.slow
def test_scale_for_a_few_samples():
    out = _run("scale.py", "--sizes=20,40", "--selection=20/400", "--every=20")
    assert "ratio limit/whole: time " in out and "(target ≤ 1.5×)" in out, out
    assert "reference: driver peak RSS growth 20→40 samples: " in out and " KB/sample (" in out, out
    assert "  end: wall " in out and "rows 40, status complete" in out and "driver peak RSS" in out and " ms/row)" in out, out


def test_import_graph():
    out = _run("import_graph.py", "--list")
    assert "import graph: " in out and " modules and packages, " in out and " arrows" in out, out
    listed = {line.strip().split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert "evalkit.specs" in listed and "evalkit.config" in listed, out
    assert not any(m.startswith(("evalkit.engine", "evalkit.tracking", "evalkit.report", "evalkit.models")) for m in listed), out


def test_ci_speed(shared_data_dir):
    out = _run("ci_speed.py", f"--data={shared_data_dir}", "--resamples=20", "--limit=60")
    assert "60 samples x 1 epochs" in out and "plan + every interval:" in out


def test_scoring_speed(shared_data_dir):
    out = _run("scoring_speed.py", f"--data={shared_data_dir}", "--limit=10")
    for label in ("acebench normal+special", "ke fixtures", "sobhard fixtures"):
        assert f"{label}, isolated (process pool" in out, out


def test_tracking_speed(shared_data_dir, tmp_path):
    out = _run("tracking_speed.py", f"--data={shared_data_dir}", f"--out={tmp_path}", "--limit=5", "--floor")
    # 5 samples: tracking.traces=sample (25 per subset, the default) traces every one, as all does
    assert "evalkit run: 5 samples, complete, policy sample: 5 traces (evalkit.traces = 'all 5 samples')" in out, out
    assert "evalkit run: 5 samples, complete, policy all: 5 traces" in out, out
    for policy in ("sample", "all"):
        line = next(x for x in out.splitlines() if x.startswith(f"policy {policy}: tracking "))
        assert float(line.split(" B/sample")[0].split(" = ")[-1].replace(",", "")) > 0, line  # the store grew
        assert " ms/sample " in line and " % of it; store +" in line, line
    assert "ratio evalkit / floor (traces of the all run):" in out, out


def test_startup():
    out = _run("startup.py", "--n=3", "--repeat=1", "--skip-sweep")
    assert "network (fake server, 0 latency): process wall" in out and "offline (model=reference): process wall" in out, out
    assert "to_first_request_s" in out


def test_throughput():
    out = _run("throughput.py", "--n=12", "--latency=0.01", "--concurrency", "4", "--workers=1", "--skip-lmeval",
               "--skip-litellm-alone")  # fmt: skip
    assert "evalkit overhead: 12 samples at zero latency" in out and "concurrency   4: 12 samples" in out, out


def test_engine_cpu():
    out = _run("engine_cpu.py", "--n", "8", "16", "--concurrency=4", "--workers=1")
    assert "CPU per request, marginal over 8 requests" in out and "evalkit's own" in out, out
    phase = out.split("during the request phase of the N=16 run")[1]
    assert float(phase.split("driver:")[1].split()[0]) > 0, out  # the request phase's own CPU: never a negative marginal
    references = out.split("host reference before each run")[1].split("):")[1].split(",")
    assert len(references) == 2 and all(float(r) > 0 for r in references), out  # the host's speed beside each run


def test_run_evalkit_alone(fake_openai, tmp_path):
    """frameworks.py's evalkit child, on its own (frameworks.py needs psutil)."""
    fake_openai.set_plan({"default": {"content": "ok"}})
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"i": i, "text": f"sample {i}"}) + "\n" for i in range(4)))
    out = tmp_path / "out.json"
    _run("run_evalkit.py", str(data), str(out), "model=openai_compatible", "model.provider_model=openai/fake",
         f"backend.api_base={fake_openai.api_base}", "runner.num_workers=1", "tracking=none", "run.progress=false",
         f"run.output_root={tmp_path / 'runs'}")  # fmt: skip
    result = json.loads(out.read_text())
    assert result["status"] == "complete" and result["n_scored"] == 4
    assert len(fake_openai.log) == 4


def test_frameworks_for_a_few_prompts(tmp_path):
    pytest.importorskip("psutil", reason="perf/frameworks.py measures process trees with psutil (pip install -e '.[bench]')")
    results = tmp_path / "r.jsonl"
    out = _run("frameworks.py", "--framework", "evalkit", "--profile", "fixed", "--concurrency", "1", "--max-n=3",
               f"--results={results}")  # fmt: skip
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    assert rows and all(r["framework"] == "evalkit" and r["rc"] == 0 for r in rows), out
    assert "evalkit" in _run("frameworks.py", f"--report={results}")


def test_footprint_for_a_few_prompts(tmp_path):
    pytest.importorskip("psutil", reason="perf/footprint.py measures process trees with psutil (pip install -e '.[bench]')")
    results = tmp_path / "r.jsonl"
    out = _run("footprint.py", "--concurrency", "1", "-n", "3", "--prompt-kb", "1", "2", "--bare-s", "1", f"--results={results}")
    rows = {r["mode"]: r for r in (json.loads(line) for line in results.read_text().splitlines() if line.strip())}
    assert set(rows) == {"run", "bare"}, out
    for r in (rows["run"]["peak"], rows["run"]["end_of_requests"], rows["bare"]["peak"]):
        assert {"driver", "gcs_server", "raylet", "ray workers", "tree"} <= set(r), out
        assert 0 < r["tree"]["pss_mib"] <= r["tree"]["rss_mib"], out  # shared pages are split in PSS, counted whole in RSS
    assert rows["bare"]["peak"]["ray workers"]["procs"] >= 2, out  # the two idle actors that imported litellm
    assert rows["run"]["driver_peak"]["rss_mib"] >= rows["run"]["peak"]["driver"]["rss_mib"] > 0, out


def test_run_inspect_for_a_few_prompts(tmp_path):
    pytest.importorskip("psutil", reason="perf/frameworks.py measures process trees with psutil (pip install -e '.[bench]')")
    if importlib.util.find_spec("inspect_ai") is None:
        pytest.skip("perf/run_inspect.py runs in an interpreter with inspect-ai (pip install inspect-ai openai)")
    results = tmp_path / "r.jsonl"
    _run("frameworks.py", "--framework", "inspect", "--profile", "fixed", "--concurrency", "1", "--max-n=3",
         f"--results={results}")  # fmt: skip
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    assert rows and all(r["framework"] == "inspect" and r["rc"] == 0 for r in rows)


def test_coverage():
    out = _run("coverage.py", "--sims=10", "--boot-sims=3", "--resamples=100", "--grid-reps=10", "--betting-reps=2")
    assert "Coverage at a nominal 95%" in out and "| 0/1 rate, n = 100, p = 0.99 |" in out and "7-point sweep" in out, out
    assert "| issue: 40 strata × 3 units, Δ = −0.2, one-sided | issue | score |" in out and "width ratio at n ≥ 200" in out, out


def test_agreement_coverage():
    out = _run("agreement_coverage.py", "--sims=5", "--resamples=50")
    lines = [line.split() for line in out.splitlines()[1:-1]]
    assert len(lines) == 12 and {line[0] for line in lines} == {"2", "3"} and all(0 <= float(line[4]) <= 1 for line in lines), out


def test_qualification_coverage_cell():
    out = _run("qualification_coverage_cell.py", "7", "3", "0.9")
    m = re.fullmatch(r"binary p=0\.5 kappa 0\.9: cover (\d\.\d{3}) of (\d) \(truth below interval (\d), above (\d)\); \d+ s\n", out)
    assert m, out
    cover, done, below, above = float(m[1]), int(m[2]), int(m[3]), int(m[4])
    assert 1 <= done <= 3 and round(cover * done) + below + above == done, out


def test_qualification_coverage():
    out = _run("qualification_coverage.py", "--sims=3", "--resamples=50", "--n", "30")
    rows = [line.split() for line in out.splitlines()[1:-1]]
    assert len(rows) == 9 and {r[-5] for r in rows} == {"0.4", "0.7", "0.9"}, out
    assert all(0 <= float(x) <= 1 for r in rows for x in r[-4:-1]), out


def test_qualify_speed():
    out = _run("qualify_speed.py", "--labels=12", "--steer-items=1")
    assert "cache empty" in out and "cache full" in out and "12 labelled answers, 17 injected" in out, out


def test_summary_size(shared_data_dir):
    out = _run("summary_size.py", "--sizes=300", "--benchmarks=sobhard,ke", "--resamples=50", f"--data={shared_data_dir}")
    assert "| sobhard | 300 |" in out and "| ke | 300 |" in out and "failed" not in out, out


def test_score_budget(shared_data_dir, tmp_path):
    # a budget of a microsecond: the first answer is scored, the other four are over the budget
    out = _run("score_budget.py", "--n=5", "--kb=20", "--budget=0.000001", f"--data={shared_data_dir / 'sobhard'}", f"--out={tmp_path}")
    assert "5 answers, benchmark.score_budget_s=1e-06:" in out and "failed_by_kind {'score_budget_exceeded': 4}" in out, out


def test_chaos_a_seeded_trial(tmp_path):
    """One quick trial whose seed draws a SIGKILLed driver (seed 22: the run resumed),
    identical to the undisturbed run (predictions, journal, summary, one MLflow trace per
    unit). A killed model worker and failing writes, which seed 23 draws, have tests of their
    own (tests/engine/test_crash_resume.py, tests/test_write_fault_seam.py); a second trial
    here cost CI about a minute."""
    pytest.importorskip("psutil", reason="perf/chaos.py finds the embedded server's process with psutil")
    out = _run("chaos.py", "--trials", "1", "--seed", "22", "--quick", "--embedded-every", "0",
               "--keep-dir", str(tmp_path / "chaos"), timeout=900)  # fmt: skip
    lines = out.splitlines()
    assert lines[-1] == "1/1 identical", out
    assert any("driver_kill@" in ln and "drivers 2" in ln for ln in lines), out


def test_rate_limit_cost():
    out = _run("rate_limit_cost.py", "--n=50", "--concurrency=4", "--callers", "1")
    assert "in-process window:" in out and "shared actor, 1 caller process(es):" in out and "ms in the limits actor" in out, out


def test_scale_out():
    """The smallest shape: a head and one worker node (a cluster of its own), one model worker."""
    out = _run("scale_out.py", "--shapes", "1x1", "--n=12", "--concurrency=4", "--latency=0.01")
    assert "nodes x workers" in out and "             1x1 " in out and "[12]" in out, out
