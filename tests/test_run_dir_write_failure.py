"""A run directory that fails a write (a full disk, an I/O error; issue 23 item 3's fault
"the run directory failing writes"): the run stops with one line naming the file that
failed and the ``run.resume=DIR`` that continues it (it said "unexpected error (OSError …)"
and named no resume), exit code 1, and every row journaled before stays.

The fault is injected in the process through the test-only seam
``evalkit.jsonl.before_write`` (tests/support/write_faults.py; everything here runs as root,
so permissions cannot make a write fail), or by the kernel itself: ``/dev/full`` answers
every write with ENOSPC."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.errors import RunDirWriteError
from evalkit.jsonl import JsonlAppender
from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd

RUN = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=5"]


def _fail_after(monkeypatch, name: str, rows: int) -> None:
    """Fail every write of ``name`` after its first ``rows`` with ENOSPC, through the seam."""
    import evalkit.jsonl as jsonl

    seen = {"n": 0}

    def before_write(path: Path) -> None:
        if path.name == name:
            seen["n"] += 1
            if seen["n"] > rows:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(jsonl, "before_write", before_write)


@pytest.mark.slow  # two runs (about 4 s)
def test_a_journal_write_that_fails_names_the_file_and_the_resume(run_eval, monkeypatch, capsys):
    from evalkit.cli import report_error

    _fail_after(monkeypatch, "predictions.jsonl", 2)
    with pytest.raises(RunDirWriteError) as err:
        run_eval(RUN)
    run_dir = err.value.run_dir
    assert run_dir is not None and Path(run_dir).is_dir()
    assert report_error(err.value) == 1  # the run is incomplete, as with failures: not a refused config (2)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"evalkit: error: cannot write {run_dir}/predictions.jsonl (No space left on device); "
                     f"the samples journaled before it are kept — resume with run.resume={run_dir}"]  # fmt: skip
    # the two rows written before the fault are whole; the summary was never written
    journaled = [json.loads(line) for line in (Path(run_dir) / "predictions.jsonl").read_text().splitlines()]
    assert len(journaled) == 2 and not (Path(run_dir) / "summary.json").exists()

    monkeypatch.setattr("evalkit.jsonl.before_write", None)  # the disk has room again
    done = run_eval([*RUN, f"run.resume={run_dir}"])
    ids = [json.loads(line)["sample_id"] for line in (Path(run_dir) / "predictions.jsonl").read_text().splitlines()]
    assert done.exit_code == 0 and done.typed.n_samples == 5
    assert len(ids) == 5 == len(set(ids)) and ids[:2] == [r["sample_id"] for r in journaled]


def test_a_summary_write_that_fails_names_the_file_and_the_resume(run_eval, monkeypatch):
    _fail_after(monkeypatch, "summary.json", 0)
    with pytest.raises(RunDirWriteError) as err:
        run_eval(RUN)
    assert str(err.value).startswith(f"cannot write {err.value.run_dir}/summary.json (No space left on device); ")
    assert str(err.value).endswith(f"resume with run.resume={err.value.run_dir}")
    assert len((Path(err.value.run_dir) / "predictions.jsonl").read_text().splitlines()) == 5


def test_a_write_the_kernel_refuses_is_said_once_and_the_appender_closes():
    """/dev/full: the row reaches the file object, its flush fails with ENOSPC. The appender
    says so naming the file, writes no more, and closes without raising a second time."""
    out = JsonlAppender(Path("/dev/full"))
    with pytest.raises(RunDirWriteError, match=r"^cannot write /dev/full \(No space left on device\)$") as first:
        out.append({"sample_id": "a"})
    with pytest.raises(RunDirWriteError) as again:
        out.append({"sample_id": "b"})
    assert again.value is first.value
    out.close()


@pytest.mark.slow  # a python -m evalkit subprocess
def test_the_command_line_says_one_line_and_exits_1(acebench_dir, tmp_path):
    """The real command, its run directory failing every write (the chaos script's seam,
    loaded through tests/support/chaos_site/ while its control file exists)."""
    control = tmp_path / "fail-writes"
    control.touch()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests" / "support" / "chaos_site"),
           "EVALKIT_CHAOS_WRITE_FAULT_FILE": str(control)}  # fmt: skip
    out = tmp_path / "out"
    proc = subprocess.run(evalkit_cmd(*base_overrides(out, acebench_dir), *RUN), cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    (run_dir,) = (out / "runs" / "acebench" / "reference").iterdir()
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"evalkit: error: cannot write {run_dir}/predictions.jsonl (injected write fault "
        f"(tests/support/write_faults.py): predictions.jsonl); "
        f"the samples journaled before it are kept — resume with run.resume={run_dir}")
    assert "Traceback" not in proc.stderr and "unexpected error" not in proc.stderr
