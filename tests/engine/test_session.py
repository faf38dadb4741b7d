"""A sweep's jobs start once: under Hydra's default launcher they share one Ray instance and
warm model workers (the same worker processes serve every job), and each job's results are
a standalone run's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from evalkit.engine.journal import read_jsonl
from tests.conftest import REPO_ROOT, evalkit_cmd

pytestmark = pytest.mark.slow  # a sweep in a subprocess, on Ray


def _args(fake, acebench: Path, out: Path) -> list[str]:
    return ["benchmark=acebench", f"benchmark.data_dir={acebench}", "model=openai_compatible", "model.provider_model=openai/fake",
            f"backend.api_base={fake.api_base}", "benchmark.subsets=[normal_atom_bool]", "run.limit=4", "run.cache=false",
            "tracking=none", "run.progress=false", f"run.output_root={out}"]  # fmt: skip


def _scores(run_dir: Path) -> dict[str, tuple]:
    return {r["sample_id"]: (r["output"], r["scores"]) for r in read_jsonl(run_dir / "predictions.jsonl")}


@pytest.mark.slow
def test_sweep_jobs_share_ray_and_workers_and_score_as_standalone_runs(fake_openai, acebench_dir, tmp_path):
    fake_openai.set_plan({"default": {"content": "[]"}, "rules": [{"match": "Asian cuisine", "content": "[x()]"}]})
    sweep = subprocess.run(
        evalkit_cmd("-m", *_args(fake_openai, acebench_dir, tmp_path / "sweep"), "benchmark.max_dialog_turns=30,40,50"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "sweep" / "sweeps").iterdir()
    jobs = sorted(p for p in sweep_dir.iterdir() if (p / "summary.json").is_file())
    engines = [json.loads((j / "summary.json").read_text())["engine"] for j in jobs]
    assert len(engines) == 3
    assert engines[0]["worker_pids"] == engines[1]["worker_pids"] == engines[2]["worker_pids"]
    assert [e["reused_workers"] for e in engines] == [False, True, True]
    assert all(e["phases"]["to_first_request_s"] > 0 for e in engines)
    assert sweep.stderr.count("starting a local Ray instance") == 1 and sweep.stderr.count("model workers") == 1
    alone = subprocess.run(evalkit_cmd(*_args(fake_openai, acebench_dir, tmp_path / "alone"), "benchmark.max_dialog_turns=40"),
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-3000:]
    (run_dir,) = (tmp_path / "alone" / "runs" / "acebench" / "openai_compatible").iterdir()
    standalone = _scores(run_dir)
    assert all(_scores(j) == standalone for j in jobs)
    assert len(standalone) == 4 and {s[1]["accuracy"] for s in standalone.values()} == {0.0}
    solo = json.loads((run_dir / "summary.json").read_text())["engine"]
    assert solo["reused_workers"] is False and set(solo["worker_pids"]).isdisjoint(engines[0]["worker_pids"])


def test_the_engine_is_handed_its_session_and_never_looks_it_up():
    """Issue 26 item 17: engine/run.py read the ambient ``session.current()`` in four
    functions. The sweep's job reads it once and passes it in (``run_evaluation(...,
    shared=...)``); no module of the engine but the session's own looks it up."""
    engine = REPO_ROOT / "src" / "evalkit" / "engine"
    readers = sorted(p.name for p in engine.rglob("*.py") if p.name != "session.py" and "session.current(" in p.read_text(encoding="utf-8"))
    assert readers == []
