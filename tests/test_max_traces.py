"""``tracking.max_traces`` (issue 25 item 5, "offer a bound, such as logging traces for a sample
of N"): only a seeded sample of N outcomes gets an MLflow trace, failed ones first; the run
says "N of M"; ``python -m evalkit.track`` logs the same N again and nothing more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.tracking.samples import Outcome
from evalkit.tracking.traces import traced_sample
from tests.conftest import base_overrides


def _outcomes(n: int, failed: tuple[int, ...] = ()) -> list[Outcome]:
    return [Outcome(f"s{i}", "x", failure={"error_kind": "timeout"}) if i in failed else Outcome(f"s{i}", "x", row={"scores": {}})
            for i in range(n)]  # fmt: skip


def test_traced_sample_keeps_n_failed_first_seeded_and_stable():
    outs = _outcomes(12, failed=(4, 9))
    chosen = traced_sample(outs, 3, seed=0)
    assert len(chosen) == 3 and {"s4", "s9"} <= {o.sample_id for o in chosen}
    assert [o.sample_id for o in chosen] == [o.sample_id for o in outs if o in chosen]  # the run's order
    assert [o.sample_id for o in traced_sample(list(reversed(outs)), 3, seed=0)][::-1] == [o.sample_id for o in chosen]
    assert traced_sample(outs, None, seed=0) == outs and traced_sample(outs, 12, seed=0) == outs
    only_failed = traced_sample(_outcomes(12, failed=(1, 2, 3, 4)), 2, seed=0)
    assert len(only_failed) == 2 and all(not o.ok for o in only_failed)  # N caps the failed ones too
    picks = {tuple(o.sample_id for o in traced_sample(_outcomes(50), 5, seed=s)) for s in range(5)}
    assert len(picks) > 1  # the seed chooses


def _run(root: Path, acebench: Path, *overrides: str):
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    _, cfg = resolve(compose(base_overrides(root, acebench) + list(overrides)))
    return run_validated(cfg)


def _traces(uri: str, run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({sample key: trace id} the store links to the run, the run's tags)."""
    from evalkit.tracking.mlflow_tracking import MlflowObserver, client, trace_client

    run = client(uri).get_run(json.loads((run_dir / "tracking.json").read_text())["mlflow_run_id"])
    return MlflowObserver.logged_traces(trace_client(uri), run.info.experiment_id, run.info.run_id, uri), run.data.tags


@pytest.mark.slow  # whole runs into an MLflow store
def test_max_traces_logs_a_seeded_sample_of_n_and_the_same_n_on_retrack(tmp_path: Path, acebench_dir: Path):
    from evalkit.job import outcome_line
    from evalkit.track import main

    root = tmp_path / "out"
    uri = f"sqlite:///{root.resolve() / 'mlflow.db'}"
    args = ("model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=12", "tracking=mlflow")
    res = _run(root, acebench_dir, *args, "tracking.max_traces=3", "run.seed=7")
    assert res.summary["n_samples"] == 12
    phases = res.summary["engine"]["phases"]  # scoring and tracking counted apart, and printed apart
    assert f"; scoring {phases['scoring_s']:.1f} s, tracking {phases['tracking_s']:.1f} s → " in outcome_line(res)
    traces, tags = _traces(uri, res.run_dir)
    assert len(traces) == 3
    assert tags["evalkit.traces"].startswith("3 of 12 samples, sampled (tracking.max_traces=3, run.seed=7")
    assert "Traces: 3 of 12 samples" in tags["mlflow.note.content"]
    assert len(json.loads((res.run_dir / "tracking.json").read_text())["traces"]) == 3
    assert main(["--tracking-uri", uri, str(res.run_dir)]) == 0  # re-track: the same 3, nothing more
    assert _traces(uri, res.run_dir)[0] == traces
    (res.run_dir / "tracking.json").unlink()  # logged anew as a new MLflow run: the same samples chosen
    assert main(["--tracking-uri", uri, str(res.run_dir)]) == 0
    assert set(_traces(uri, res.run_dir)[0]) == set(traces)

    every = _run(root, acebench_dir, *args)  # max_traces null: one trace per sample
    traces, tags = _traces(uri, every.run_dir)
    assert len(traces) == 12 and tags["evalkit.traces"] == "all 12 samples"
