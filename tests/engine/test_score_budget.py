"""``benchmark.score_budget_s`` (issue 25 item 6): once a run's scoring seconds are spent,
the answers not yet scored are failures of their own kind (never zeros), the run ends with
its summary, and a resume scores them."""

from __future__ import annotations

import json

import pytest

from evalkit.engine.journal import read_jsonl

pytestmark = pytest.mark.slow  # whole runs (a scoring pool each)

ARGS = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=5"]


def test_a_spent_scoring_budget_leaves_resumable_failures_not_zeros(run_eval, tmp_path):
    root = tmp_path / "outputs"
    # any answer takes more than a microsecond to score: the first is scored, the budget is then spent
    first = run_eval([*ARGS, "benchmark.score_budget_s=0.000001"], output_root=root)
    failed = list(read_jsonl(first.run_dir / "failed.jsonl"))
    assert first.summary["status"] == "incomplete" and first.summary["n_scored"] == 1
    assert first.summary["failed_by_kind"] == {"score_budget_exceeded": 4}
    assert {f["actor"] for f in failed} == {"scorer"} and all("benchmark.score_budget_s=1e-06" in f["message"] for f in failed)
    assert json.loads((first.run_dir / "summary.json").read_text())["metrics"] == {}  # headline withheld
    again = run_eval([*ARGS, f"run.resume={first.run_dir}"], output_root=root)  # the default budget (1800 s)
    assert again.summary["status"] == "complete" and again.summary["n_scored"] == 5
    assert again.summary["metrics"]["overall"] == 1.0


def test_a_resume_that_completes_leaves_no_stale_partial_metrics_in_mlflow(run_eval, tmp_path):
    """MLflow's partial_* metrics once kept the first attempt's values after a resume completed the run."""
    import math

    from mlflow.tracking import MlflowClient

    root = tmp_path / "outputs"
    first = run_eval([*ARGS, "tracking=mlflow", "benchmark.score_budget_s=0.000001"], output_root=root)
    again = run_eval([*ARGS, "tracking=mlflow", f"run.resume={first.run_dir}"], output_root=root)
    assert again.summary["status"] == "complete"
    run_id = json.loads((first.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    metrics = MlflowClient(f"sqlite:///{root / 'mlflow.db'}").get_run(run_id).data.metrics
    partial = {k: v for k, v in metrics.items() if k.startswith("partial_")}
    assert partial and all(math.isnan(v) for v in partial.values())
    assert metrics["overall"] == 1.0 and metrics["n_scored"] == 5.0
