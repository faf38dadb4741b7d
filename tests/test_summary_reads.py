"""Readers of another run's summary.json go through the typed summary (evalkit.summary): the
dry run's power line with ``run.baseline=<run dir>`` read the file with ``json.loads``, so it
followed a symbolic link out of the run directory and read any size."""

from __future__ import annotations

import json

import pytest

from evalkit.errors import ConfigError

SUMMARY = {"status": "complete", "benchmark": "acebench", "model": "m", "n_samples": 40, "n_scored": 40, "n_failed": 0,
           "n_scored_rows": 40, "n_failed_rows": 0, "headline": "overall", "metrics": {"overall": 0.7}}  # fmt: skip


def _cfg(tmp_path, acebench_dir, baseline):
    from evalkit.compose import compose, resolve
    from tests.conftest import base_overrides

    opts = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=40", "run.dry_run=true", f"run.baseline={baseline}"]
    return resolve(compose(base_overrides(tmp_path / "out", acebench_dir) + opts))[1]


def test_a_baseline_run_dir_gives_its_headline_as_the_rate(tmp_path, acebench_dir):
    from evalkit.job import power_line

    run = tmp_path / "base"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(SUMMARY), encoding="utf-8")
    assert f"a baseline rate of 0.7000 (the headline of {run})" in power_line(_cfg(tmp_path, acebench_dir, run), 40)


def test_a_baseline_summary_behind_a_link_is_refused_in_one_line(tmp_path, acebench_dir):
    from evalkit.job import power_line

    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(SUMMARY), encoding="utf-8")
    run = tmp_path / "base"
    run.mkdir()
    (run / "summary.json").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"summary.json: a symbolic link, never followed here; not read$"):
        power_line(_cfg(tmp_path, acebench_dir, run), 40)
