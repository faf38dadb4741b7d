"""``python -m evalkit --help``: what a config directory and installed packages add comes
before Hydra's footer, and its exit codes and examples are the guide's."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT


def test_help_additions_come_before_hydras_footer():
    """``--help`` printed what EVALKIT_CONFIG_DIR and the entry points add after Hydra's
    "Powered by Hydra … --hydra-help" footer; they now come before it, and the footer ends the text."""
    from evalkit.compose import help_text

    hydra = "usage: ...\n== Config ==\nrun: {}\n\nPowered by Hydra (https://hydra.cc)\nUse --hydra-help to view Hydra specific help\n"
    added = "== Added by your config directory and installed packages ==\nEVALKIT_CONFIG_DIR /x:\n  benchmark: t\n"
    text = help_text(hydra, added)
    assert text.index("== Added by") < text.index("Powered by Hydra")
    assert text.endswith("Use --hydra-help to view Hydra specific help\n") and text.count("benchmark: t") == 1
    assert help_text(hydra, "") == hydra


@pytest.mark.slow  # a subprocess
def test_help_command_puts_the_config_dir_before_the_footer(tmp_path):
    """The same through ``python -m evalkit --help`` (a process of its own: Hydra's help
    leaves its config set in the process that printed it)."""
    import os
    import subprocess

    from tests.conftest import evalkit_cmd

    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "team_t.yaml").write_text("name: arith_mini\n", encoding="utf-8")
    env = {**os.environ, "EVALKIT_CONFIG_DIR": str(tmp_path)}
    proc = subprocess.run(evalkit_cmd("--help"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.index(f"EVALKIT_CONFIG_DIR {tmp_path}:\n  benchmark: team_t\n") < out.index("Powered by Hydra (https://hydra.cc)")
    assert out.rstrip().endswith("Use --hydra-help to view Hydra specific help")


def _help_header() -> str:
    import yaml

    return yaml.safe_load((REPO_ROOT / "conf" / "config.yaml").read_text())["hydra"]["help"]["header"]


def test_help_lists_every_exit_code_the_readme_lists():
    """``--help`` said "Exit: 0 complete, 1 incomplete, 2 …, 130 interrupted" while a
    ``run.batch_detach=true`` run exits 3 (README's table has it)."""
    import re

    from evalkit.engine.run import DETACHED_EXIT_CODE

    readme = (REPO_ROOT / "docs" / "runs.md").read_text()  # the README's "Exit codes", moved (issue 48)
    table = readme[readme.index("## Exit codes"):].split("\n\n")[2]  # the first table: python -m evalkit's
    documented = set(re.findall(r"^\| (\d+) \|", table, re.M))
    exit_line = _help_header().split("Exit:", 1)[1]
    listed = set(re.findall(r"(?:^ |, |\n\s*)(\d+) ", exit_line))
    assert documented == {"0", "1", "2", "3", "130"} and str(DETACHED_EXIT_CODE) in documented
    assert listed == documented


def test_help_and_readme_give_the_ke_data_paths_the_same_way():
    """``--help``'s KE example passed paths under ../shared/data/ke while the README passes
    ``benchmark.data_dir`` and file names relative to it: both now give the README's form."""
    example = next(ln.strip() for ln in _help_header().splitlines() if "benchmark.pilot_path=" in ln)
    readme = (REPO_ROOT / "docs" / "sweeps-and-suites.md").read_text()  # the README's sweep, moved (issue 48)
    assert example.split("#")[0].strip() == "benchmark.pilot_path=pilot.jsonl benchmark.icl_path=icl_examples.jsonl"
    assert "benchmark=ke model=reference,baseline_file_read shots=0,3 benchmark.data_dir=../shared/data/ke" in _help_header()
    assert "benchmark=ke model=reference,baseline_file_read shots=0,3 benchmark.data_dir=../shared/data/ke" in readme
