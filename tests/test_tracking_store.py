"""The MLflow store opened by several evalkit processes at once (tracking/store.py)."""

from __future__ import annotations

import json

import pytest
import re
import subprocess
from pathlib import Path

from evalkit.tracking.store import sqlite_path
from tests.conftest import REPO_ROOT, evalkit_cmd


@pytest.mark.slow
def test_four_runs_started_together_on_a_fresh_output_root_all_reach_mlflow(shared_data_dir: Path, tmp_path: Path):
    """Four ``python -m evalkit`` at once with no ``mlflow.db`` yet: each completes and each
    is an MLflow run. (Before the store lock, all but one died with exit 2 on MLflow's
    schema migration: "table experiments already exists", "duplicate column name".)"""
    from mlflow import MlflowClient

    ke, root = shared_data_dir / "ke", tmp_path / "out"
    cmd = evalkit_cmd("benchmark=ke", "model=reference", f"benchmark.pilot_path={ke / 'pilot.jsonl'}",
                      f"benchmark.icl_path={ke / 'icl_examples.jsonl'}", f"run.output_root={root}", "run.progress=false")  # fmt: skip
    procs = [subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in outs]
    run_dirs = sorted(re.search(r"→ (\S+)$", out.strip()).group(1) for out, _ in outs)
    assert len(set(run_dirs)) == 4

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("evalkit").experiment_id])
    assert sorted(r.data.tags["run_dir"] for r in runs) == run_dirs
    assert {(r.info.status, r.data.tags["status"], r.data.metrics["f1_macro"]) for r in runs} == {("FINISHED", "complete", 1.0)}


def test_sqlite_path_names_the_database_file_of_sqlite_uris_only():
    assert sqlite_path("sqlite:////data/out/mlflow.db") == Path("/data/out/mlflow.db")
    assert sqlite_path("sqlite:///out/mlflow.db") == Path("out/mlflow.db")
    assert sqlite_path("sqlite://") is None and sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("http://127.0.0.1:5000") is None and sqlite_path("postgresql://u@h/db") is None


def test_track_with_a_sqlite_store_elsewhere_keeps_artifacts_beside_it(tmp_path: Path):
    from evalkit.track import beside_store

    assert beside_store(f"sqlite:///{tmp_path}/t.db", "file:///x") == (tmp_path / "mlartifacts").as_uri()
    assert beside_store("http://127.0.0.1:5000", "file:///x") == "file:///x"
    json.dumps(beside_store("sqlite:///rel.db", "d"))
