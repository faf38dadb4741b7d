"""``python -m evalkit list`` and ``show`` (issue 48 item 3): what is there — built in, in a
config directory, installed — each with one line, and every knob of a benchmark or model with
its type, default and doc, read from the pydantic models that validate them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def _evalkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalkit", *args], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, **(env or {})}, timeout=300)  # fmt: skip


def test_list_benchmarks_names_the_built_in_ones_and_a_config_directorys_with_their_line(tmp_path):
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "team_qa.yaml").write_text("# The team's QA set: 40 questions on our docs.\nname: team_qa\nkind: task\n")
    res = _evalkit("list", "benchmarks", env={"EVALKIT_CONFIG_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("benchmarks (benchmark=NAME")
    by_name = {ln.split()[0]: ln for ln in lines[1:]}
    assert {"acebench", "sobhard", "ke", "mc_mini", "arith_mini", "team_qa"} <= set(by_name)
    assert "ACEBench (ACEBench/ACEBench @ e6db74b7)" in by_name["acebench"] and "[" not in by_name["acebench"]
    assert by_name["team_qa"].endswith(f"The team's QA set: 40 questions on our docs.  [{tmp_path.resolve()}]")


def test_list_models_judges_and_suites():
    models = _evalkit("list", "models").stdout.splitlines()
    judges = _evalkit("list", "judges").stdout.splitlines()
    suites = _evalkit("list", "suites").stdout.splitlines()
    model_names = {ln.split()[0] for ln in models[1:] if not ln.startswith("(")}
    judge_names = {ln.split()[0] for ln in judges[1:] if not ln.startswith("(")}
    assert {"smollm2", "reference", "dsv4", "gpt4o", "replay", "baseline_echo"} <= model_names
    # offline baselines and replay answer from rules or files: they do not judge
    assert "baseline_echo" not in judge_names and "replay" not in judge_names and {"gpt4o", "reference"} <= judge_names
    assert {ln.split()[0] for ln in suites[1:] if not ln.startswith("(")} == {p.stem for p in (REPO_ROOT / "suites").glob("*.yaml")}


def test_show_prints_every_knob_with_type_default_and_doc():
    res = _evalkit("show", "benchmark=mc_mini")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.splitlines()[0].startswith("benchmark=mc_mini  (") and "TaskSettings)" in out.splitlines()[0]
    assert "  benchmark.dataset.max_rows: int = 100000\n" in out
    assert "  benchmark.dataset.path: Path | None = None  [this config: 'examples/tasks/mc_mini.jsonl']\n" in out
    ace = _evalkit("show", "benchmark=acebench").stdout
    assert "  benchmark.language: 'en' | 'zh' | 'all' = 'en'\n" in ace
    # each knob its own doc from the class docstring's entry (the two scoring bounds once shared one)
    timeout = ace.split("  benchmark.score_timeout_s: float = 10.0\n")[1].splitlines()[0]
    memory = ace.split("  benchmark.score_memory_mb: int = 2048\n")[1].splitlines()[0]
    assert timeout.strip().startswith("the bound on scoring one sample, in wall seconds;")
    assert memory.strip().startswith("the bound on scoring one sample, in MiB of address space")
    model = _evalkit("show", "model=dsv4").stdout
    assert "  model.api_key_env: str | None = None  [this config: 'DEEPSEEK_API_KEY']\n" in model


def test_an_unknown_word_or_name_is_one_line_exit_2():
    for args, line in [
        (("list", "benchmark"), "evalkit: error: list benchmark: not something evalkit lists; list one of: "
                                "benchmarks, models, judges, suites"),
        (("show", "benchmark=acebenhc"), "evalkit: error: benchmark=acebenhc: no such benchmark; there are: "),
        (("show", "judge=x"), "evalkit: error: show judge=x: usage: python -m evalkit list"),
    ]:  # fmt: skip
        res = _evalkit(*args)
        assert res.returncode == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1
        assert res.stderr.startswith(line), res.stderr


def test_every_knob_show_prints_has_a_description():
    """Each knob ``show`` prints for every built-in benchmark and model config is followed by
    a non-empty line of doc (the pydantic field's description, at the model)."""
    from evalkit.catalog import _rows, show

    shown = {f"benchmark={name}": show(f"benchmark={name}") for name, where, _ in _rows("benchmarks") if where == "built-in"}
    shown |= {f"model={name}": show(f"model={name}") for name, where, _ in _rows("models") if where == "built-in"}
    assert {"benchmark=acebench", "benchmark=ke", "benchmark=sobhard", "benchmark=mc_mini", "model=gpt4o"} <= set(shown)
    undocumented, knobs = [], 0
    for what, text in shown.items():
        lines = text.splitlines()[1:]
        for k, line in enumerate(lines):
            if line.startswith("  ") and not line.startswith("      "):
                knobs += 1
                doc = lines[k + 1] if k + 1 < len(lines) else ""
                if not (doc.startswith("      ") and doc.strip()):
                    undocumented.append(f"{what}: {line.split(':')[0].strip()}")
    assert knobs > 300 and not undocumented, undocumented
    # the knobs named as a config writes them: a list's items as key[].field, a field by its alias
    task = shown["benchmark=mc_mini"]
    assert "  benchmark.scorers[].kind: " in task and "  benchmark.scorers[].schema: dict | bool | None = None\n" in task
    assert "  benchmark.dataset.hub: str | None = None\n      a Hugging Face dataset id" in task


def test_knobs_documented_together_in_a_docstring_share_the_entry():
    """``a`` / ``b``: one docstring entry for two knobs gives both that doc."""
    from evalkit.catalog import knobs
    from evalkit.config import RunSettings

    docs = {key: doc for key, _, _, doc in knobs(RunSettings, "run")}
    assert docs["run.batch_poll_s"] == docs["run.batch_poll_max_s"]
    assert docs["run.batch_poll_s"].startswith("the first and the longest wait between polls")
