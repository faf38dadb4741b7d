"""Console lines with a count agree in number with it (issue 35's "1 requests", found again
by a tester): "1 of 1 sample failed", "1 job complete", "1 of 1 request already journaled"
(each was "... samples", "all 1 jobs", "... requests"), through :func:`evalkit.errors.counted`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from evalkit.summary import Summary


def _summary(n_samples: int, n_failed: int, repeats: int = 1, n_requested: int | None = None) -> Summary:
    status = "complete" if not n_failed else "incomplete"
    return Summary(status=status, benchmark="t", model="m", n_samples=n_samples, n_scored=n_samples - n_failed,
                   n_failed=n_failed, n_scored_rows=(n_samples - n_failed) * repeats, n_failed_rows=n_failed * repeats,
                   repeats=repeats, n_requested=n_requested)  # fmt: skip


@pytest.mark.parametrize(("args", "line"), [
    ((1, 1), "1 of 1 sample failed"),
    ((1, 0), "0 of 1 sample failed"),
    ((4, 1), "1 of 4 samples failed"),
    ((1, 1, 2, 2), "1 of 1 sample failed (2 of 2 answers)"),
    ((4, 1, 3, 12), "1 of 4 samples failed (3 of 12 answers)"),
])  # fmt: skip
def test_the_count_line_agrees_with_its_total(args, line):
    assert _summary(*args).count_line() == line


def test_a_sweep_jobs_record_of_an_incomplete_run_agrees_with_its_total(tmp_path):
    from evalkit.sweep import _record_result

    record: dict = {}
    _record_result(record, SimpleNamespace(typed=_summary(1, 1), run_dir=tmp_path, exit_code=1))
    assert record["error"] == f"1 of 1 sample failed; resume with run.resume={tmp_path}"


@pytest.mark.parametrize(("n_jobs", "n_failed", "tail"), [
    (1, 0, "1 job complete"),
    (4, 0, "all 4 jobs complete"),
    (1, 1, "1 of 1 job failed"),
    (4, 2, "2 of 4 jobs failed"),
])  # fmt: skip
def test_the_sweeps_last_line_agrees_with_its_total(n_jobs, n_failed, tail):
    from evalkit.sweep import sweep_outcome_line

    line = sweep_outcome_line({"sweep_id": "s1", "n_jobs": n_jobs}, n_failed, Path("/x/sweep_summary.json"))
    assert line == f"evalkit: sweep s1: {tail} → /x/sweep_summary.json"


@pytest.mark.parametrize(("units", "line"), [(1, "1 of 1 request already journaled"), (5, "1 of 5 requests already journaled")])
def test_a_resumed_dry_runs_line_agrees_with_its_total(units, line):
    from evalkit.job import DryRun, dry_run_lines

    cfg = SimpleNamespace(benchmark=SimpleNamespace(name="b"), model=SimpleNamespace(name="reference", kind="reference"),
                          judge=[], run=SimpleNamespace(batch=False, resume="/runs/r1", baseline=None))  # fmt: skip
    plan = SimpleNamespace(units=[object()] * units, samples=[object()] * units)
    dry = DryRun(requests=units - 1, prompt_tokens=None, cost_usd=0.0, rollouts=0, lines=[], journaled=1)
    assert dry_run_lines(cfg, plan, dry)[-1] == f"evalkit: dry run: resuming /runs/r1: {line}, {units - 1} to send"


@pytest.mark.parametrize(("args", "line"), [((1, 1), "1 of 1 sample failed (never ran)"), ((4, 2), "2 of 4 samples failed (never ran)")])
def test_the_mlflow_description_of_an_incomplete_run_agrees_with_its_total(args, line):
    from evalkit.tracking.curate import description

    assert f"status **INCOMPLETE** — {line}; no headline" in description(_summary(*args), Path("/runs/r1"))


@pytest.mark.parametrize(("args", "line"), [
    ((1, 1, 1, 1), "**Status: INCOMPLETE** — 1 of 1 answer is not scored (see `failed.jsonl`). No headline score is published"),
    ((4, 1, 1, 4), "**Status: INCOMPLETE** — 1 of 4 answers is not scored"),
    ((4, 2, 1, 4), "**Status: INCOMPLETE** — 2 of 4 answers are not scored"),
])  # fmt: skip
def test_report_mds_status_line_of_an_incomplete_run_agrees_with_its_total(tmp_path, args, line):
    """A 1-sample run that failed said "1 of 1 answers are not scored" (found on a real run)."""
    from evalkit.report.summary import write_report

    bench = SimpleNamespace(report_tables=lambda metrics, ci, counts: [])
    assert line in write_report(tmp_path, _summary(*args), bench).read_text()
