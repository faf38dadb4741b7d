"""The dry run (issue 26 items 4 and 8): no key needed, and with ``run.resume`` it counts
what the resume would send and refuses what the resume refuses."""

from __future__ import annotations

import pytest

from evalkit.compose import compose, resolve
from evalkit.errors import RunDirError
from evalkit.job import dry_run
from tests.conftest import base_overrides

pytestmark = pytest.mark.slow  # a run of the reference model (a scoring pool) before the dry runs


def _dry(root, acebench_dir, *overrides: str):
    return dry_run(resolve(compose([*base_overrides(root, acebench_dir), *overrides, "run.dry_run=true"]))[1])


def test_a_dry_run_of_a_resume_counts_only_what_is_still_to_send(run_eval, acebench_dir, tmp_path):
    root = tmp_path / "outputs"
    first = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"], output_root=root)
    listing = sorted(p.name for p in first.run_dir.iterdir())
    resumed = _dry(root, acebench_dir, "model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=5",
                   f"run.resume={first.run_dir}")  # fmt: skip
    assert (resumed.requests, resumed.journaled) == (2, 3)
    assert resumed.line.splitlines()[-1] == (
        f"evalkit: dry run: resuming {first.run_dir}: 3 of 5 requests already journaled, 2 to send"
    )
    done = _dry(root, acebench_dir, "model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3",
                f"run.resume={first.run_dir}")  # fmt: skip
    assert (done.requests, done.journaled) == (0, 3)
    with pytest.raises(RunDirError, match="benchmark.language differs"):  # as the real resume refuses it
        _dry(root, acebench_dir, "model=reference", "benchmark.subsets=[normal_atom_bool]", "benchmark.language=zh",
             f"run.resume={first.run_dir}")  # fmt: skip
    assert sorted(p.name for p in first.run_dir.iterdir()) == listing  # nothing written


def test_the_readme_dry_run_runs_offline_without_a_key(acebench_dir, tmp_path):
    """The README's example as written (data_dir given, so nothing is downloaded), with no
    OPENAI_API_KEY: once exit 2 for the missing key."""
    import os
    import subprocess

    from tests.conftest import evalkit_cmd

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(
        evalkit_cmd("model=gpt4o", "benchmark.subsets=[normal_atom_bool]", f"benchmark.data_dir={acebench_dir}", "run.dry_run=true"),
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("evalkit: dry run: acebench × gpt4o: 50 requests, ~") and "estimated cost ≥ $" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written
