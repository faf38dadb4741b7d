"""Ctrl-C on a real ``python -m evalkit`` (issue 26 item 11): mid-run with the Ray instance
evalkit starts itself, no Ray "killed by ray.kill" lines; right after the outcome line, one
line saying the run had finished and the run's own exit code (it once gave exit 130 and no
message). Both were not reproduced on this engine; these keep them so."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd

pytestmark = pytest.mark.slow  # subprocess runs of python -m evalkit against the fake server


def _args(fake, out: Path, acebench_dir: Path, *extra: str) -> list[str]:
    return [*base_overrides(out, acebench_dir), "model=openai_compatible", "model.provider_model=openai/fake",
            f"backend.api_base={fake.api_base}", "benchmark.subsets=[normal_atom_bool]", "run.cache=false",
            "backend.concurrency=2", "runner.num_workers=1", "tracking=none", "run.progress=false", *extra]  # fmt: skip


def _popen(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(evalkit_cmd(*args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip


def test_ctrl_c_right_after_the_outcome_line_says_the_run_finished(fake_openai, ray_address, acebench_dir, tmp_path):
    fake_openai.set_plan({"default": {"content": "[]"}})
    proc = _popen(_args(fake_openai, tmp_path / "out", acebench_dir, "run.limit=3", f"runner.address={ray_address}"))
    outcome: list[str] = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("evalkit: "):
                outcome.append(line.rstrip("\n"))
                proc.send_signal(signal.SIGINT)  # the moment the outcome line is out
                break
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert outcome and outcome[0].startswith("evalkit: complete: "), (outcome, err)
    run_dir = outcome[0].rsplit(" → ", 1)[1]
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 0 and last == f"evalkit: interrupted after the run finished; its results are in {run_dir}", err
    assert (Path(run_dir) / "summary.json").is_file()


def test_ctrl_c_of_a_run_on_its_own_ray_prints_no_ray_kill_lines(fake_openai, acebench_dir, tmp_path):
    """No runner.address: evalkit starts (and stops) its own Ray instance and kills its workers."""
    fake_openai.set_plan({"default": {"content": "[]", "latency_s": 0.3}})
    out = tmp_path / "out"
    proc = _popen(_args(fake_openai, out, acebench_dir, "run.limit=40"))
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            preds = list((out / "runs").glob("acebench/openai_compatible/*/predictions.jsonl"))
            if preds and len(preds[0].read_text(encoding="utf-8").splitlines()) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it was interrupted"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
        reader.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(err_lines)
    assert proc.returncode == 130, err
    assert "ray.kill" not in err and "Unhandled error" not in err and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("evalkit: interrupted; finished samples are journaled — resume with run.resume=")
