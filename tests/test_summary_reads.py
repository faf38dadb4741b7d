"""Readers of another run's summary.json go through the typed summary (evalkit.summary): the
dry run's power line with ``run.baseline=<run dir>`` read the file with ``json.loads``, so it
followed a symbolic link out of the run directory and read any size."""

from __future__ import annotations

import json
from pathlib import Path

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


# ---- summary.json: one bounded reader --------------------------------------------------
def _big_summary(run: Path) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text("benchmark:\n  name: arith_mini\n", encoding="utf-8")
    (run / "predictions.jsonl").write_text("", encoding="utf-8")
    with open(run / "summary.json", "wb") as fh:
        fh.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of nothing, no disk used
    return run / "summary.json"


def test_a_summary_over_the_bound_is_refused_by_size_before_it_is_read(tmp_path):
    """summary.json was read whole up to 256 MiB (then parsed) by compare, rescore, track and
    audit. Now one reader refuses one over 32 MiB by its size, before reading a byte."""
    from evalkit import track as track_mod
    from evalkit.benchmarks.ke.audit import read_run as ke_read_run
    from evalkit.compare import CompareError, load_run
    from evalkit.errors import RunDirError
    from evalkit.summary import MAX_SUMMARY_BYTES, read_summary

    assert MAX_SUMMARY_BYTES == 32 * 1024 * 1024
    path = _big_summary(tmp_path / "run")
    too_big = "67,108,864 bytes, over the 33,554,432 allowed for a summary; not read"
    with pytest.raises(RunDirError, match=too_big):
        read_summary(path)
    with pytest.raises(CompareError, match=too_big):
        load_run(tmp_path / "run")
    with pytest.raises(RunDirError, match=too_big):
        track_mod.read_run(tmp_path / "run")
    legacy = _big_summary(tmp_path / "legacy")
    (legacy.parent / "config.yaml").unlink()  # a legacy KE run directory: its summary as written
    with pytest.raises(RunDirError, match=too_big):
        ke_read_run(legacy.parent)


def test_a_summary_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """A FIFO named summary.json: opening it for reading waited for a writer forever."""
    import os
    import threading

    from evalkit.errors import RunDirError
    from evalkit.summary import read_summary

    os.mkfifo(tmp_path / "summary.json")
    got: list[BaseException] = []

    def read() -> None:
        try:
            read_summary(tmp_path / "summary.json")
        except BaseException as exc:  # noqa: BLE001 - what the reader raised, checked below
            got.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(120)  # a bound with a wide margin, not a timing assert: a blocked open never returns
    assert got and isinstance(got[0], RunDirError) and "not a regular file" in str(got[0])
