"""A benchmark from outside evalkit with a solver of its own (issue 24 item 1: "it imports
on the Ray workers too"): the package ``twice_bench`` (tests/support/extsolver) lives on
``PYTHONPATH`` only, is registered by its entry point, its YAML in ``EVALKIT_CONFIG_DIR``.
A network model sends its samples to Ray model workers, which unpickle the solver there and
so must import the user's package: the fake server sees each sample's two calls."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import evalkit_cmd

pytestmark = pytest.mark.slow  # a subprocess run with its own Ray instance

EXTSOLVER = Path(__file__).parent / "support" / "extsolver"
CAPITALS = {"fr": "Paris", "jp": "Tokyo", "pe": "Lima"}


def test_an_outside_solver_runs_on_the_ray_model_workers(fake_openai, tmp_path: Path):
    rules = [{"match": f"FINAL {sid}:", "content": f" {city} "} for sid, city in CAPITALS.items()]
    fake_openai.set_plan({"default": {"content": "not sure yet", "latency_s": 0.0}, "rules": rules})
    since = len(fake_openai.log)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(EXTSOLVER), os.environ.get("PYTHONPATH")])),
           "EVALKIT_CONFIG_DIR": str(EXTSOLVER / "conf")}  # fmt: skip
    run_dir = tmp_path / "run"
    done = subprocess.run(
        evalkit_cmd("benchmark=twice", "model=openai_compatible", "model.provider_model=openai/fake",
                    f"backend.api_base={fake_openai.api_base}", "runner.num_workers=1", "tracking=none",
                    "run.progress=false", f"run.dir={run_dir}"),  # fmt: skip
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["metrics"]["accuracy"] == 1.0
    asked = Counter(entry["last"].split(":")[0] for entry in fake_openai.log[since:])
    assert asked == Counter({f"{step} {sid}": 1 for sid in CAPITALS for step in ("DRAFT", "FINAL")}), asked
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in rows) == sorted(CAPITALS)
    assert [r["n_turns"] for r in rows] == [2, 2, 2]  # the solver's two calls, recorded by the engine
    assert "starting 1 model worker (a Ray actor)" in done.stderr  # solved on a Ray worker, not in the driver
