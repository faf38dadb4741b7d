"""finalize reads the journal a line at a time and keeps of each row only its summary view
(:func:`evalkit.journal.summary_view`): the summary, report and plots are those the whole
rows give (issue 23 item 2; the driver's memory at N = 20,000 in docs/performance.md)."""

from __future__ import annotations

import json

import pytest

from evalkit.compose import compose, resolve
from evalkit.engine.finalize import summarize
from evalkit.engine.plan import prepare
from evalkit.engine.rundir import RunState
from evalkit.journal import NOT_IN_SUMMARY
from evalkit.specs import build
from tests.conftest import base_overrides

pytestmark = pytest.mark.slow  # a whole reference run

TIMES = ("finished_at", "wall_s")


@pytest.fixture
def finished(tmp_path, acebench_dir):
    """A reference ACEBench run over a single-turn and a multi-turn category, two epochs."""
    from evalkit.job import run_validated

    overrides = base_overrides(tmp_path / "outputs", acebench_dir) + [
        "model=reference", "benchmark.subsets=[normal_atom_bool,normal_multi_turn_user_adjust]", "run.limit=16",
        "run.repeats=2", "run.bootstrap_resamples=200"]  # fmt: skip
    _, cfg = resolve(compose(overrides))
    result = run_validated(cfg)
    assert result.summary["status"] == "complete"
    return prepare(build(cfg)), result


def _both(plan, run_dir):
    state = RunState(run_dir, False, "2026-12-02T00:00:00.000+00:00", 0.0)
    viewed, records = summarize(plan, state, None)
    whole, whole_records = summarize(plan, state, None, view=None)
    for summary in (viewed, whole):
        for key in TIMES:
            summary.pop(key)
    return viewed, records, whole, whole_records


def test_the_summary_from_row_views_is_the_summary_from_whole_rows(finished):
    plan, result = finished
    viewed, records, whole, whole_records = _both(plan, result.run_dir)
    assert viewed == whole
    assert len(records) == len(whole_records) == 2 * 16
    assert all(r.get("output") for r in whole_records)  # the whole rows hold the answers ...
    assert not any(NOT_IN_SUMMARY & set(r) for r in records)  # ... finalize's do not
    written = json.loads((result.run_dir / "summary.json").read_text(encoding="utf-8"))
    assert written["metrics"] == viewed["metrics"] and written["metrics_ci"] == viewed["metrics_ci"]
    assert written["metrics"]["pass@2"] == 1.0  # repeat figures came from the views too


def test_an_incomplete_run_gives_the_same_partial_figures_and_bounds(finished):
    plan, result = finished
    preds = result.run_dir / "predictions.jsonl"
    lines = preds.read_text(encoding="utf-8").splitlines(keepends=True)
    preds.write_text("".join(lines[1:-2]), encoding="utf-8")  # three answers lost
    viewed, _, whole, _ = _both(plan, result.run_dir)
    assert viewed["status"] == "incomplete" and viewed["n_failed_rows"] == 3
    assert viewed["partial_bounds"] and viewed == whole
