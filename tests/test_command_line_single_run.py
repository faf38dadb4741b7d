"""``python -m evalkit KEY=VALUE ...``, one run: it runs on the configuration its one-line
check composed, not a second composition in Hydra's main (issue 46, start-up). What Hydra's
main gave a run still holds: ``${hydra:...}`` values resolve as they did, and a judge's
overrides are composed inside the running Hydra (an unknown key is one line, exit 2)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.conftest import REPO_ROOT, evalkit_cmd

pytestmark = pytest.mark.slow  # processes of their own


def _evalkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(evalkit_cmd(*args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


def test_hydra_values_resolve_as_hydras_main_gave_them(tmp_path):
    """``${hydra:job.name}`` is ``__main__`` and ``${hydra:runtime.output_dir}`` the working
    directory (``hydra.run.dir`` is ``.``): the compose API alone gives ``app`` and no directory."""
    root = tmp_path / "out"
    proc = _evalkit("benchmark=arith_mini", "model=reference", "tracking=none", "run.progress=false", "run.limit=1",
                    f"run.output_root={root}", "run.suite=${hydra:job.name}", "benchmark.prompt.system=${hydra:runtime.output_dir}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (config,) = root.rglob("config.yaml")
    recorded = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert recorded["run"]["suite"] == "__main__"
    assert recorded["benchmark"]["prompt"]["system"] == str(REPO_ROOT)


def test_a_judge_override_of_an_unknown_key_is_one_line():
    proc = _evalkit("benchmark=explain_mini", "model=reference", "tracking=none", "judge=gpt4o",
                    "judge_overrides=['benchmark.foo=1']", "run.dry_run=true")  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == ["evalkit: error: judge: benchmark.foo: unknown key (to add a new key use +benchmark.foo=...)"]


def test_a_hydra_override_still_goes_through_hydras_main(tmp_path):
    """A ``hydra.*`` override is applied by Hydra's main (the check leaves it out): the run
    happens in the directory ``hydra.run.dir`` names, with ``hydra.job.chdir=true``."""
    where = tmp_path / "there"
    proc = _evalkit("benchmark=arith_mini", "model=reference", "tracking=none", "run.progress=false", "run.limit=1",
                    f"run.output_root={tmp_path / 'out'}", f"hydra.run.dir={where}", "hydra.job.chdir=true",
                    f"benchmark.dataset.path={REPO_ROOT / 'examples' / 'tasks' / 'arith_mini.jsonl'}",
                    "benchmark.prompt.system=${hydra:runtime.output_dir}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (config,) = (tmp_path / "out").rglob("config.yaml")
    assert yaml.safe_load(config.read_text(encoding="utf-8"))["benchmark"]["prompt"]["system"] == str(where)
