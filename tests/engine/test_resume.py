"""Crash and resume: a SIGKILLed driver loses nothing, and resuming re-requests nothing
that was journaled."""

from __future__ import annotations

import pytest
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from evalkit.benchmarks import get_benchmark_class
from evalkit.engine.journal import read_jsonl
from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd

IDS = [f"en/normal_atom_bool_{i}" for i in range(8)]


def _gold_rules(acebench_dir: Path) -> list[dict]:
    cls = get_benchmark_class("acebench")
    bench = cls(cls.settings_model(name="acebench", data_dir=acebench_dir))
    rules = []
    for s in bench.load():
        if s.id in IDS:
            rules.append({"match": bench.build(s, 0).messages[-1]["content"][-80:], "content": bench.reference_output(s)})
    return rules


def _args(fake, ray_address, root: Path, acebench_dir: Path, *extra: str) -> list[str]:
    return [
        *base_overrides(root, acebench_dir),
        "model=openai_compatible",
        "model.provider_model=openai/fake",
        f"backend.api_base={fake.api_base}",
        "backend.concurrency=1",
        f"runner.address={ray_address}",
        "run.cache=false",
        f"run.sample_ids=[{','.join(IDS)}]",
        *extra,
    ]


@pytest.mark.slow
def test_sigkill_mid_run_then_resume(fake_openai, ray_address, acebench_dir, tmp_path, run_eval):
    fake_openai.set_plan({"rules": _gold_rules(acebench_dir), "default": {"content": "[]", "latency_s": 0.4}})
    for rule in fake_openai.plan["rules"]:
        rule["latency_s"] = 0.4
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        evalkit_cmd(*_args(fake_openai, ray_address, tmp_path / "out", acebench_dir, f"run.dir={run_dir}")),
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    preds = run_dir / "predictions.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline:
        if preds.exists() and len(list(read_jsonl(preds))) >= 3:
            break
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {r["sample_id"]: r for r in read_jsonl(preds)}
    assert 3 <= len(before) < len(IDS)
    assert not (run_dir / "summary.json").exists()
    n_requests_before = len(fake_openai.log)

    resumed = subprocess.run(
        evalkit_cmd(*_args(fake_openai, ray_address, tmp_path / "out", acebench_dir, f"run.resume={run_dir}")),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    rows = list(read_jsonl(preds))
    ids = [r["sample_id"] for r in rows]
    assert sorted(set(ids)) == sorted(IDS)
    # every sample journaled exactly once (a request in flight at the kill may be re-run,
    # but a journaled one never is)
    assert len(ids) == len(set(ids))
    asked_after = {r["last"] for r in fake_openai.log[n_requests_before:]}
    for sid, row in before.items():
        question = next(r["match"] for r in fake_openai.plan["rules"] if r["content"] == row["output"])
        assert not any(question in text for text in asked_after), f"{sid} was re-requested"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["n_scored"] == len(IDS)

    # the same metrics as an uninterrupted run
    fresh = run_eval(_args(fake_openai, ray_address, tmp_path / "out2", acebench_dir)[4:])
    assert fresh.summary["metrics"] == summary["metrics"]


def test_resume_tolerates_torn_line_and_duplicates_and_larger_limit(run_eval, tmp_path):
    first = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=5"])
    preds = first.run_dir / "predictions.jsonl"
    lines = preds.read_text(encoding="utf-8").splitlines()
    with open(preds, "a", encoding="utf-8") as fh:
        fh.write(lines[0] + "\n")  # a duplicate row
        fh.write(lines[1][: len(lines[1]) // 2])  # a torn last line, no newline
    again = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=8", f"run.resume={first.run_dir}"])
    assert again.run_dir == first.run_dir
    assert again.summary["status"] == "complete"
    assert again.summary["n_samples"] == 8 and again.summary["n_scored"] == 8
    rows = list(read_jsonl(preds))
    ids = [r["sample_id"] for r in rows]
    assert sorted(set(ids)) == [f"en/normal_atom_bool_{i}" for i in range(8)]
    assert len(ids) == 9  # 5 + the duplicate + 3 new ones; the torn line is skipped
    assert again.summary["metrics"]["accuracy/normal_atom_bool"] == 1.0


def test_resume_of_another_model_is_refused(run_eval):
    from evalkit.errors import RunDirError

    first = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=2"])
    import pytest

    with pytest.raises(RunDirError, match="model=reference"):
        run_eval(
            ["model=replay", f"model.path={first.run_dir / 'predictions.jsonl'}", f"run.resume={first.run_dir}",
             "benchmark.subsets=[normal_atom_bool]", "run.limit=2"]  # fmt: skip
        )
