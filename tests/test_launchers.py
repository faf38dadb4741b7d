"""Hydra launcher configs of conf/hydra/launcher/: they compose with the installed plugins,
and a sweep through submitit's local executor really runs each point as its own process.
(The Ray cluster itself, and a sweep whose runs use it, are in tests/test_cluster.py.)"""

from __future__ import annotations

import json
import pickle
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, evalkit_cmd


def _hydra_cfg(*overrides: str) -> dict:
    res = subprocess.run(
        evalkit_cmd("model=reference", *overrides, "--cfg", "hydra"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return yaml.safe_load(res.stdout)["hydra"]


@pytest.mark.slow
def test_slurm_launcher_composes_with_evalkit_defaults_and_overrides():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    launcher = _hydra_cfg("hydra/launcher=slurm", "hydra.launcher.partition=cpu", "hydra.launcher.array_parallelism=3")["launcher"]
    assert launcher["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher["partition"] == "cpu"
    assert launcher["array_parallelism"] == 3
    assert (launcher["timeout_min"], launcher["cpus_per_task"], launcher["mem_gb"]) == (240, 4, 16)
    assert launcher["submitit_folder"] == "${hydra.sweep.dir}/.submitit/%j"


@pytest.mark.slow
def test_ray_cluster_launcher_composes():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="hydra-ray-launcher is not an evalkit extra")
    launcher = _hydra_cfg("hydra/launcher=ray_cluster", "hydra.launcher.ray.init.address=127.0.0.1:6380")["launcher"]
    assert launcher["_target_"] == "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
    assert launcher["ray"]["init"] == {"address": "127.0.0.1:6380", "object_store_memory": None}
    assert launcher["ray"]["remote"] == {"num_cpus": 1}


@pytest.mark.slow
def test_local_processes_sweep_runs_every_point_in_a_process_of_its_own(shared_data_dir: Path, tmp_path: Path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    ke = shared_data_dir / "ke"
    out = tmp_path / "out"
    proc = subprocess.Popen(
        evalkit_cmd(
            "-m", "hydra/launcher=local_processes", "model=reference", "benchmark=ke",
            f"benchmark.pilot_path={ke / 'pilot.jsonl'}", f"benchmark.icl_path={ke / 'icl_examples.jsonl'}",
            "tracking=none", "run.progress=false", f"run.output_root={out}", "run.limit=2,3",
        ),
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output

    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("sweeps/*/*-ke-reference-*/summary.json"))]
    assert sorted((s["n_samples"], s["n_scored"], s["status"]) for s in summaries) == [(2, 2, "complete"), (3, 3, "complete")]
    assert all(s["metrics"][s["headline"]] == 1.0 for s in summaries)  # gold replay
    # each run in a process of its own, none in the sweep's (the basic launcher would run
    # both in the sweep's process, one after the other)
    pids = {s["pid"] for s in summaries}
    assert len(pids) == 2 and proc.pid not in pids

    # submitit kept one finished job per point, each returning the run's (falsy) result
    (sweep_dir,) = (out / "sweeps").iterdir()
    results = sorted(sweep_dir.glob(".submitit/*/*_result.pkl"))
    assert len(results) == 2
    for path in results:
        outcome, _value = pickle.loads(path.read_bytes())
        assert outcome == "success"


@pytest.mark.slow
def test_unknown_launcher_is_refused_by_hydra():
    res = subprocess.run(
        evalkit_cmd("-m", "hydra/launcher=nonexistent", "model=reference", "run.limit=1"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode != 0
    assert "nonexistent" in res.stderr and "slurm" in res.stderr  # the available options are listed
