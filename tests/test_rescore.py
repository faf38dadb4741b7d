"""Defects left over from issues 35 and 32 (helper "leftovers"): config-dir files that are
not regular files, the summary's read bound, rescore's extra journal rows, config-dir
precedence, a rescored gate's record, the README/--help texts, CI's warning summary."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _pytest_filters() -> list[str]:
    import tomllib

    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["pytest"]["ini_options"].get("filterwarnings", [])


def test_pydantic_readonly_warning_is_filtered_and_nothing_else():
    """CI's warning summary was hundreds of lines of pydantic's "ReadOnly qualifier"
    UserWarning (litellm's TypedDicts), pushing the durations table out of the log tail. The
    pytest config ignores exactly that message from pydantic's schema builder; another
    UserWarning, or the same text from elsewhere, is still shown."""
    from _pytest.config import parse_warning_filter

    filters = [parse_warning_filter(f, escape=False) for f in _pytest_filters()]
    assert filters, "no filterwarnings in pyproject's pytest config"
    pydantic_msg = ("Item 'x' on TypedDict class 'ChatCompletionToolParam' is using the `ReadOnly` qualifier. "
                    "Pydantic will not protect items from any mutation on dictionary instances.")  # fmt: skip
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        for action, message, category, module, lineno in filters:
            warnings.filterwarnings(action, message, category, module, lineno)
        warnings.warn_explicit(pydantic_msg, UserWarning, "_generate_schema.py", 1, module="pydantic._internal._generate_schema")
        warnings.warn_explicit(pydantic_msg, UserWarning, "other.py", 1, module="evalkit.other")
        warnings.warn_explicit("something else", UserWarning, "_generate_schema.py", 2, module="pydantic._internal._generate_schema")
    assert [str(w.message)[:14] for w in seen] == [pydantic_msg[:14], "something else"]


# ---- 1. a config-dir file that is not a regular file is named, not skipped --------------
def _make(kind: str, path: Path, tmp_path: Path) -> None:
    import os

    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        with open(path, "wb") as fh:
            fh.truncate(300 * 1024 * 1024)  # sparse: no disk used


@pytest.mark.parametrize(("kind", "why"), [
    ("link to /dev/zero", "not a regular file (a symbolic link to /dev/zero, a character device)"),
    ("fifo", "not a regular file (a FIFO)"),
    ("directory", "not a regular file (a directory)"),
    ("huge", "314,572,800 bytes, over the 1,048,576 a YAML file may have"),
])  # fmt: skip
def test_a_config_dir_yaml_that_is_not_a_regular_file_is_named_not_unknown(tmp_path, monkeypatch, kind, why):
    """A benchmark YAML in EVALKIT_CONFIG_DIR that was a link to /dev/zero, a FIFO or a
    directory was skipped (Hydra too), then reported as "unknown benchmark"; a FIFO's open
    would wait for a writer. Now one line names the file and why, before anything reads it."""
    from evalkit.compose import compose
    from evalkit.errors import ConfigError

    (tmp_path / "benchmark").mkdir()
    path = tmp_path / "benchmark" / "x.yaml"
    _make(kind, path, tmp_path)
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        compose(["benchmark=x", "model=reference"])
    assert str(err.value).startswith(f"{path}: {why}") and "unknown" not in str(err.value)


def test_a_config_dir_yaml_linked_to_a_regular_file_is_read_through_the_link(tmp_path, monkeypatch):
    """A team may link a shared YAML into its config directory: Hydra reads it through the
    link, and so does the bounded check (it said "Too many levels of symbolic links")."""
    from evalkit.compose import compose

    (tmp_path / "benchmark").mkdir()
    (tmp_path / "shared.yaml").write_text("name: arith_mini\n", encoding="utf-8")
    (tmp_path / "benchmark" / "linked.yaml").symlink_to(tmp_path / "shared.yaml")
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    assert compose(["benchmark=linked", "model=reference"]).benchmark.name == "arith_mini"


# ---- 2. summary.json: one bounded reader --------------------------------------------------
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


# ---- 3. rescore names the journal rows that are not the run's -----------------------------
ACE = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"]


def _append(path: Path, rows: list[dict]) -> None:
    import json

    with open(path, "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def test_rescore_names_extra_journal_rows_and_scores_only_the_runs(run_eval, capsys):
    """rescore skipped a row of a sample id the data does not hold without a word, scored a
    row at an epoch the run never asked (a repeats=1 run read as 2 epochs), and said nothing
    of identical duplicates. Now it scores exactly the run's samples and epochs, names the
    others by count in its one warning line, and exits 1 (the journal holds what the run did
    not count); a duplicate alone is named but is no difference (the first row counts)."""
    import json

    from evalkit import rescore as rescore_mod

    res = run_eval(ACE)
    preds = res.run_dir / "predictions.jsonl"
    first = json.loads(preds.read_text(encoding="utf-8").splitlines()[0])
    _append(preds, [first])  # an identical duplicate
    assert rescore_mod.main([str(res.run_dir)]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and "1 journal row not rescored: 1 duplicate row of a sample and epoch already journaled (lines 4;" in warned[0]
    _append(preds, [{**first, "sample_id": "not_in_data"}, {**first, "epoch": 1, "scores": {"accuracy": 0.0}}])
    result = rescore_mod.rescore(res.run_dir)
    assert result["metrics"]["accuracy/normal_atom_bool"] == 1.0 and len(result["epochs"]) == 1
    assert (result["extra"]["unknown"], result["extra"]["beyond"]) == (["not_in_data"], [f"{first['sample_id']}@1"])
    capsys.readouterr()
    assert rescore_mod.main([str(res.run_dir)]) == 1
    out = capsys.readouterr()
    warned = [ln for ln in out.err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and "3 journal rows not rescored: 1 row of sample ids not in the benchmark's data (not_in_data)" in warned[0]
    assert "1 row at an epoch beyond the run's repeats=1" in warned[0] and "DIFFERS" not in out.out


# ---- 4. an option defined twice is refused, naming both files ------------------------------
def test_a_config_dir_option_with_a_shipped_name_is_refused_naming_both_files(tmp_path, monkeypatch):
    """A team's ``benchmark/arith_mini.yaml`` (or ``model/reference.yaml``, as a judge too) was
    silently hidden by the shipped one (Hydra's search path takes ``conf/`` first). Choosing it
    is now one line naming both files; a shipped default that the run does not choose (the
    default benchmark, overridden) is no conflict."""
    from evalkit.compose import CONF_DIR, compose
    from evalkit.errors import ConfigError

    for group, name, text in (("benchmark", "arith_mini", "name: arith_mini\n"), ("benchmark", "acebench", "name: acebench\n"),
                              ("model", "reference", "name: reference\nkind: reference\n")):  # fmt: skip
        (tmp_path / group).mkdir(exist_ok=True)
        (tmp_path / group / f"{name}.yaml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        compose(["benchmark=arith_mini", "model=smollm2"])
    assert str(err.value).startswith(f"benchmark=arith_mini: defined twice, in {CONF_DIR / 'benchmark' / 'arith_mini.yaml'} "
                                      f"and in {tmp_path / 'benchmark' / 'arith_mini.yaml'}")  # fmt: skip
    with pytest.raises(ConfigError, match=r"^model=reference: defined twice"):
        compose(["benchmark=mc_mini", "model=smollm2", "judge=reference"])
    assert compose(["benchmark=mc_mini", "model=smollm2"]).benchmark.name == "mc_mini"  # acebench.yaml: not chosen


# ---- 5. a rescored gate-decided run: its gate walked again ----------------------------------
def _decided_run(tmp_path: Path, acebench_dir: Path) -> tuple[Path, Path]:
    """A baseline reference run and a replay run that answers nothing right, stopped by
    ``run.stop_when=noninferior:0.15`` (decided FAIL early)."""
    import json

    from tests.conftest import run_in_process

    out, common = tmp_path / "out", ["benchmark.subsets=[normal_atom_bool,normal_atom_enum,normal_atom_number]"]
    base = run_in_process(["model=reference", *common], out, acebench_dir).run_dir
    rows = [json.loads(line) for line in (base / "predictions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": "no idea"}) + "\n" for r in rows), encoding="utf-8")
    res = run_in_process(["model=replay", f"model.path={bad}", "run.stop_when=noninferior:0.15", f"run.baseline={base}",
                          "run.min_samples=5", "backend.concurrency=2", *common], out, acebench_dir)  # fmt: skip
    return base, res.run_dir


@pytest.mark.slow  # two runs
def test_a_rescored_decided_run_walks_its_gate_again_over_the_new_scores(tmp_path, acebench_dir):
    """``rescore --set`` of a run that its gate decided copied the recorded ``sequential``
    block as it was: a verdict and interval measured under the old scores beside the new
    metrics (and ``compare`` took that interval as the headline's). The gate is walked again
    over the rescored answers — the same order, seed and baseline: unchanged scores give the
    recorded block; scores now equal to the baseline's no longer FAIL. Without its baseline
    the recorded block stays, saying it was not walked again."""
    import json
    import shutil

    from evalkit.rescore import rescore, write_rescored

    base, run = _decided_run(tmp_path, acebench_dir)
    recorded = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert (recorded["status"], recorded["sequential"]["verdict"]) == ("decided", "FAIL")
    same = json.loads((write_rescored(run, rescore(run, overrides={"scoring": "evalscope"}), {"scoring": "evalscope"}) / "summary.json").read_text())
    assert {k: v for k, v in same["sequential"].items() if k != "regated"} == recorded["sequential"]
    assert same["sequential"]["regated"].startswith("walked again")
    result = rescore(run, overrides={"scoring": "evalscope"})
    for row in result["rows"].values():  # as if the new rules scored every answer as the baseline's
        row["scores"] = {k: 1.0 for k in row["scores"]}
    fixed = json.loads((write_rescored(run, result, {"scoring": "evalscope"}) / "summary.json").read_text())
    gate = fixed["sequential"]
    # every dispatched unit paired, none decides: undecided where the run stopped
    assert (gate["verdict"], gate["interval"]["delta"], gate["n_used"]) == ("CONTINUE", 0.0, recorded["n_samples"])
    assert fixed["status"] == "complete"
    shutil.rmtree(base)
    kept = json.loads((write_rescored(run, rescore(run, overrides={"scoring": "evalscope"}), {"scoring": "evalscope"}) / "summary.json").read_text())
    assert kept["sequential"]["verdict"] == "FAIL" and kept["sequential"]["regated"].startswith("not walked again")


# ---- 6. README, --help and console plurals --------------------------------------------------
def test_readme_says_how_to_start_the_fake_server_its_judge_recipe_uses():
    """The team-judge recipe needs ``OUR_JUDGE_URL``; the README used the fake OpenAI server
    (tests/support/fake_openai.py) without saying how to start it. Its passage gives the
    command, in the script's own argument order, a plan that is valid JSON and a verdict, and
    the URL on the same port."""
    import json
    import re

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    judge = readme[readme.index("<!-- journey: team-judge -->"): readme.index("<!-- journey: plugin -->")]
    start = re.search(r"^python tests/support/fake_openai\.py (\S+) (\d+) (\S+) &$", judge, re.M)
    assert start, "no command that starts the fake server beside the judge recipe"
    assert (REPO_ROOT / "tests" / "support" / "fake_openai.py").is_file()
    plan_line = re.search(rf"^echo '(.*)' > {re.escape(start.group(3))}$", judge, re.M)
    plan = json.loads(plan_line.group(1))  # bash keeps single-quoted text as it is
    assert json.loads(plan["default"]["content"]) == {"score": 4}
    assert f"export OUR_JUDGE_URL=http://127.0.0.1:{start.group(2)}/v1" in judge
    from tests.support import fake_openai

    assert "PORT_FILE [PORT [PLAN_FILE]]" in fake_openai.main.__doc__ and "PORT_FILE [PORT [PLAN_FILE]]" in judge


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


def test_console_counts_say_1_request_not_1_requests(tmp_path):
    """The dry run said "1 requests"; the summary line "1 samples × 1 epochs"."""
    from evalkit.compose import compose, resolve
    from evalkit.errors import counted
    from evalkit.job import dry_run
    assert (counted(1, "request"), counted(0, "request"), counted(2, "epoch"), counted(1, "bootstrap resample")) == (
        "1 request", "0 requests", "2 epochs", "1 bootstrap resample")  # fmt: skip
    _, cfg = resolve(compose([f"run.output_root={tmp_path}", "tracking=none", "model=reference", "benchmark=arith_mini", "run.limit=1",
                              "run.dry_run=true"]))  # fmt: skip
    lines = dry_run(cfg).lines
    assert lines[0].startswith("evalkit: dry run: arith_mini × reference: 1 request answered offline")


# ---- rescore: links, files that are not regular, a bad --set value, extra samples ----------
@pytest.fixture(scope="module")
def ace_run(tmp_path_factory, acebench_dir) -> Path:
    """One reference run of 3 ACEBench samples, shared by the module's tests (each copies it)."""
    from tests.conftest import run_in_process

    return run_in_process(ACE, tmp_path_factory.mktemp("ace"), acebench_dir).run_dir


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(run, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


def _err_lines(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: error:")]


@pytest.mark.parametrize("where", ["rescored", "rescored/evalscope"])
def test_rescore_set_never_writes_through_a_linked_rescored_folder(ace_run, tmp_path, capsys, where):
    """``RUN/rescored`` linked to a folder outside the run: ``rescore --set`` wrote the
    rescored run there (exit 0); ``RUN/rescored/<label>`` a link: an ``rmtree`` traceback
    text. Both are one line naming the link, exit 2, nothing written outside."""
    from evalkit import rescore as rescore_mod

    run, outside = _copy(ace_run, tmp_path), tmp_path / "outside"
    outside.mkdir()
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (run / where).symlink_to(outside)
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and f"{run / where}: a symbolic link" in errs[0] and "rmtree" not in errs[0]
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("sets", [[], ["--set", "benchmark.scoring=evalscope"]])
def test_rescore_refuses_a_linked_summary_even_dangling(ace_run, tmp_path, capsys, sets):
    """A dangling ``summary.json`` link read as "the run did not finish" (``exists()``
    follows links): now refused in one line, exit 2, with and without ``--set``."""
    from evalkit import rescore as rescore_mod

    run = _copy(ace_run, tmp_path)
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(tmp_path / "missing.json")
    assert rescore_mod.main([str(run), *sets]) == 2
    out = capsys.readouterr()
    errs = [ln for ln in out.err.splitlines() if ln.startswith("evalkit: error:")]
    assert len(errs) == 1 and "summary.json: a symbolic link, never followed here; not read" in errs[0]
    assert "did not finish" not in out.err


def test_rescore_names_a_predictions_fifo_as_not_a_regular_file(ace_run, tmp_path, capsys):
    """A FIFO ``predictions.jsonl`` was "not an evalkit run directory (... needed)"."""
    import os

    from evalkit import rescore as rescore_mod

    run = _copy(ace_run, tmp_path)
    (run / "predictions.jsonl").unlink()
    os.mkfifo(run / "predictions.jsonl")
    assert rescore_mod.main([str(run)]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and f"{run / 'predictions.jsonl'}: not a regular file" in errs[0]
    (run / "predictions.jsonl").unlink()
    assert rescore_mod.main([str(run)]) == 2 and "not an evalkit run directory" in _err_lines(capsys)[0]


def test_rescore_blames_the_set_value_not_the_runs_config(ace_run, tmp_path, capsys):
    """``--set benchmark.scoring=../../x`` was reported as ``RUN/config.yaml: benchmark.scoring``."""
    from evalkit import rescore as rescore_mod

    run = _copy(ace_run, tmp_path)
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=../../x"]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and "--set benchmark.scoring='../../x'" in errs[0] and "config.yaml" not in errs[0]
    assert not (run / "rescored").exists()


def test_rescore_scores_only_the_runs_own_selection_with_and_without_set(ace_run, tmp_path, capsys):
    """Rows of a 4th sample (in the data, not in the run's ``run.limit=3`` selection) were
    scored by ``rescore --set`` (exit 0, 4 rows written, the metric changed, the summary
    still saying 3 samples). Both paths now tell the run's rows by its own selection
    (``run_selection``): not scored, named in the one warning line; the plain path exits 1."""
    import json

    from evalkit import rescore as rescore_mod
    from evalkit.rescore import load_benchmark

    run = _copy(ace_run, tmp_path)
    preds = run / "predictions.jsonl"
    rows = [json.loads(ln) for ln in preds.read_text(encoding="utf-8").splitlines()]
    fourth = next(s.id for s in load_benchmark(run).load() if s.id not in {r["sample_id"] for r in rows})
    _append(preds, [{**rows[0], "sample_id": fourth}])  # the first sample's answer: wrong for the 4th
    assert rescore_mod.main([str(run)]) == 1
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and f"1 journal row not rescored: 1 row of samples outside the run's selection ({fourth})" in warned[0]
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and "1 row of samples outside the run's selection" in warned[0]
    new = run / "rescored" / "evalscope"
    written = [json.loads(ln)["sample_id"] for ln in (new / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    summary = json.loads((new / "summary.json").read_text(encoding="utf-8"))
    assert sorted(written) == sorted(r["sample_id"] for r in rows) and fourth not in written
    assert (summary["n_samples"], summary["n_scored_rows"]) == (3, 3) and summary["metrics"]["overall"] == 1.0


def test_rescore_set_refuses_rows_of_more_samples_when_the_selection_cannot_be_rebuilt(ace_run, tmp_path, capsys):
    """Without a selection to tell them by (here ``run.limit`` no longer validates), rows of
    more samples than the summary's ``n_samples`` cannot be told from the run's: ``--set``
    refuses in one line (exit 2) rather than write a run whose rows its summary does not count."""
    import json

    import yaml

    from evalkit import rescore as rescore_mod
    from evalkit.rescore import load_benchmark

    run = _copy(ace_run, tmp_path)
    cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    cfg["run"]["limit"] = "three"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    preds = run / "predictions.jsonl"
    rows = [json.loads(ln) for ln in preds.read_text(encoding="utf-8").splitlines()]
    fourth = next(s.id for s in load_benchmark(run).load() if s.id not in {r["sample_id"] for r in rows})
    _append(preds, [{**rows[0], "sample_id": fourth}])
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and "rows of 4 samples, 1 more than the n_samples=3" in errs[0] and not (run / "rescored").exists()


def _help_header() -> str:
    import yaml

    return yaml.safe_load((REPO_ROOT / "conf" / "config.yaml").read_text())["hydra"]["help"]["header"]


def test_help_lists_every_exit_code_the_readme_lists():
    """``--help`` said "Exit: 0 complete, 1 incomplete, 2 …, 130 interrupted" while a
    ``run.batch_detach=true`` run exits 3 (README's table has it)."""
    import re

    from evalkit.engine.run import DETACHED_EXIT_CODE

    readme = (REPO_ROOT / "README.md").read_text()
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
    readme = (REPO_ROOT / "README.md").read_text()
    assert example.split("#")[0].strip() == "benchmark.pilot_path=pilot.jsonl benchmark.icl_path=icl_examples.jsonl"
    assert "benchmark=ke model=reference,baseline_file_read shots=0,3 benchmark.data_dir=../shared/data/ke" in _help_header()
    assert "benchmark=ke model=reference,baseline_file_read shots=0,3 benchmark.data_dir=../shared/data/ke" in readme
