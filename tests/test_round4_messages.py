"""Issue 35 item 12: messages that name the real cause."""

from __future__ import annotations

import pytest

from evalkit import rescore as rescore_mod

ACE = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"]


@pytest.mark.slow  # a run
def test_rescore_of_an_interrupted_run_says_it_has_no_summary(run_eval, capsys):
    """An interrupted run (no summary.json) printed DIFFERS on every metric and exited 1.
    Now one line says it has no summary.json; the verdicts are still compared (none changed: 0)."""
    res = run_eval(ACE)
    (res.run_dir / "summary.json").unlink()
    assert rescore_mod.main([str(res.run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "DIFFERS" not in out and "accuracy" in out
    said = [ln for ln in err.splitlines() if "no summary.json" in ln]
    assert len(said) == 1 and str(res.run_dir) in said[0]
