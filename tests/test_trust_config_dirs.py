"""Config directories are data, not code (issue 43 item 3): a file of ``EVALKIT_CONFIG_DIR`` or a
task YAML that would reach Hydra's machinery (a ``hydra`` key, an instantiate key, a ``# @package``
header out of its group, a ``defaults`` entry into ``hydra`` or the root package) is one line naming
the file and the key, exit 2, before Hydra composes anything, and nothing it names is called; an
``${oc.env:NAME}`` a config file writes is recorded as written (``config.yaml``, MLflow params and
artifacts, the report), never its value; an override error never echoes an API key."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from evalkit.errors import ConfigError
from tests.conftest import evalkit_cmd

REPO = Path(__file__).resolve().parents[1]
#: the attack of the issue: Hydra called pathlib.Path.write_text from a benchmark YAML's callback
CALLBACK = """# @package _global_
hydra:
  callbacks:
    pwn:
      _target_: pathlib.Path.write_text
      _args_:
        - {{_target_: pathlib.Path, _args_: [{target}]}}
        - written by a config file
benchmark:
  name: arith_mini
  kind: task
"""
#: a task of the config directory (the rows of evalkit's arith_mini example)
TASK = """name: {name}
kind: task
dataset:
  path: {rows}
  fields: {{id: id, input: question, target: answer}}
prompt:
  system: "{system}"
  template: "{{{{ input }}}}"
extract: {{kind: last_line}}
scorers:
  - {{kind: numeric, name: accuracy}}
"""


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    """An empty config directory on ``EVALKIT_CONFIG_DIR`` (groups ``benchmark`` and ``model``);
    the working directory is ``tmp_path``."""
    conf = tmp_path / "conf"
    (conf / "benchmark").mkdir(parents=True)
    (conf / "model").mkdir()
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(conf))
    monkeypatch.chdir(tmp_path)
    return conf


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(evalkit_cmd(*args), cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)


def _refusal(*overrides: str) -> str:
    from evalkit.compose import compose, resolve

    with pytest.raises(ConfigError) as info:
        resolve(compose(list(overrides)))
    line = str(info.value)
    assert "\n" not in line
    return line


@pytest.mark.slow
def test_a_benchmark_yaml_moved_into_hydra_is_one_line_and_its_callback_is_never_called(conf, tmp_path):
    """The issue's attack, run as a user would: ``# @package _global_`` and
    ``hydra.callbacks.<x>._target_: pathlib.Path.write_text`` made Hydra write the file; with
    Hydra's ``--cfg`` flag (no run) the file is checked too; evalkit's own launchers still compose."""
    target = tmp_path / "written.pth"
    evil = conf / "benchmark" / "evil.yaml"
    evil.write_text(CALLBACK.format(target=target), encoding="utf-8")
    for args in (["benchmark=evil", "model=reference", "run.dry_run=true"], ["--cfg", "job", "benchmark=evil"]):
        done = _cli(tmp_path, *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"evalkit: error: {evil}: # @package _global_: a config file stays in its group's package (benchmark); "
            "_global_ would move its keys to the root, hydra into Hydra's settings (a config file is data, not code: "
            "README, Trust)"]  # fmt: skip
        assert not target.exists()
    elsewhere = _cli(tmp_path, "-cd", str(conf), "benchmark=evil", "model=reference")
    assert elsewhere.returncode == 2 and elsewhere.stderr.strip().splitlines() == [
        "evalkit: error: -cd: evalkit composes its own conf/ and the directories of EVALKIT_CONFIG_DIR (checked as data "
        "before Hydra reads them); add a config directory there (README: Trust)"]  # fmt: skip
    assert not target.exists()
    evil.unlink()
    launcher = _cli(tmp_path, "--cfg", "hydra", "hydra/launcher=local_processes", "model=reference")
    assert launcher.returncode == 0, launcher.stderr
    assert "submitit_folder: ${hydra.sweep.dir}/.submitit/%j" in launcher.stdout  # conf/hydra/launcher/: evalkit's own, unaffected


@pytest.mark.parametrize(
    "files, culprit, key",
    [
        ({"benchmark/x.yaml": "name: arith_mini\nhydra:\n  callbacks: {}\n"}, "benchmark/x.yaml", "hydra"),
        ({"benchmark/x.yaml": "name: arith_mini\nprompt:\n  system: {_target_: os.system, _args_: [id]}\n"}, "benchmark/x.yaml",
         "prompt.system._target_"),
        ({"benchmark/x.yaml": "name: arith_mini\nscorers:\n  - {kind: numeric, _partial_: true}\n"}, "benchmark/x.yaml",
         "scorers.0._partial_"),
        ({"benchmark/x.yaml": "name: arith_mini\nextract: {_args_: [1]}\n"}, "benchmark/x.yaml", "extract._args_"),
        ({"benchmark/x.yaml": "base: &b {_target_: os.system}\nname: arith_mini\nprompt:\n  <<: *b\n"}, "benchmark/x.yaml",
         "base._target_"),
        ({"benchmark/x.yaml": "#@package hydra.callbacks\nname: arith_mini\n"}, "benchmark/x.yaml", "# @package hydra.callbacks"),
        ({"model/x.yaml": "# @package _global_.hydra\nname: x\n"}, "model/x.yaml", "# @package _global_.hydra"),
        ({"model/x.yaml": "defaults:\n  - override /hydra/launcher: basic\nname: x\n"}, "model/x.yaml",
         "defaults.0 (override /hydra/launcher: basic)"),
        ({"model/x.yaml": "defaults:\n  - /model@_global_.hydra.callbacks.x: gpt4o\nname: x\n"}, "model/x.yaml",
         "defaults.0 (/model@_global_.hydra.callbacks.x: gpt4o)"),
        ({"model/x.yaml": "defaults:\n  - /evil@_global_\nname: x\n"}, "model/x.yaml", "defaults.0 (/evil@_global_)"),
        ({"model/x.yaml": "defaults:\n  - override /backend@_global_.backend: ${oc.env:PICK}\nname: x\n"}, "model/x.yaml",
         "defaults.0 (override /backend@_global_.backend: ${oc.env:PICK})"),
        ({"model/x.yaml": "defaults:\n  - /evil\nname: x\n", "evil.yaml": "hydra:\n  callbacks: {}\n"}, "evil.yaml", "hydra"),
        ({"model/x.yaml": "defaults:\n  - /evil\nname: x\n", "evil.yaml": "base: &b {hydra: {job: {chdir: true}}}\n<<: *b\n"},
         "evil.yaml", "hydra"),
    ],
)
def test_a_config_file_that_reaches_hydra_is_one_line_naming_the_file_and_the_key(conf, files, culprit, key):
    """Each way a config directory's file could reach Hydra's machinery: a ``hydra`` key (at
    the top, or in a file at the root that a ``defaults`` entry pulls in, a merge key's too), an instantiate key at
    any depth (an alias's target too), a header out of its group, a ``defaults`` entry into a
    ``hydra`` group, the root package or Hydra's settings, or one Hydra would pick by an
    interpolation no check reads."""
    for rel, text in files.items():
        (conf / rel).write_text(text, encoding="utf-8")
    chosen = "benchmark=x" if "benchmark/x.yaml" in files else "model=x"
    line = _refusal(chosen, "model=reference" if chosen == "benchmark=x" else "benchmark=arith_mini")
    assert line.startswith(f"{conf / culprit}: {key}: "), line
    assert line.endswith(("README, Trust)", "name the option")), line


def test_a_config_directory_holding_hydras_own_groups_is_refused_and_its_own_configs_still_compose(conf):
    """A ``hydra/`` folder of a config directory would be Hydra's own settings (launchers,
    logging, whose configs are calls); a team's model config that picks a backend the README's
    way (``override /backend@_global_.backend``, its own package named) composes as before."""
    (conf / "model" / "ours.yaml").write_text("# @package model\ndefaults:\n  - override /backend@_global_.backend: offline\n"
                                              "name: ours\nkind: reference\n", encoding="utf-8")  # fmt: skip
    from evalkit.compose import compose

    assert compose(["model=ours"]).backend.kind == "offline"
    (conf / "hydra" / "launcher").mkdir(parents=True)
    (conf / "hydra" / "launcher" / "mine.yaml").write_text("_target_: os.system\n", encoding="utf-8")
    assert _refusal("model=ours") == (
        f"{conf / 'hydra'}: a config directory of EVALKIT_CONFIG_DIR holds no hydra group (Hydra's own settings, whose "
        "callbacks and launchers are code, are evalkit's conf/); remove it (README: Trust)"
    )


def test_the_overrides_a_task_applies_to_its_user_model_set_no_hydra_key(conf):
    """``benchmark.user_overrides`` (a task file may hold them) compose another config:
    ``hydra.searchpath`` there would read configs from a directory no check has read."""
    line = _refusal("benchmark=acebench", "model=openai_compatible", "backend.api_base=http://127.0.0.1:9",
                    "benchmark.user_model=gpt4o", f"benchmark.user_overrides=['hydra.searchpath=[file://{conf}]']")  # fmt: skip
    assert line == (f"benchmark.user_overrides: hydra.searchpath=[file://{conf}]: an override of a composed config sets its "
                    "own keys, no hydra key and no callable (a config is data, not code: README, Trust)")  # fmt: skip


@pytest.mark.parametrize(
    "judge_overrides",
    [
        "judge_overrides=[backend.api_key=sk-live-0123456789abcdef']",
        "judge_overrides=['backend.api_key=[sk-live-0123456789abcdef']",
        "judge_overrides=[\"backend.api_key=sk-live-0123456789abcdef'x\"]",
        "judge_overrides=['backend api_key=sk-live-0123456789abcdef']",
    ],
)
def test_an_unparsable_judge_override_never_echoes_the_api_key(judge_overrides):
    """The override is named with its key's value as ``***`` (the parser's own words quoted
    the value, with its key or without)."""
    line = _refusal("benchmark=explain_mini", "model=reference", "judge=gpt4o", judge_overrides, "run.dry_run=true")
    assert "0123456789abcdef" not in line
    assert "cannot be parsed" in line and "api_key=***" in line, line


@pytest.mark.slow
def test_an_unparsable_judge_override_on_the_command_line_is_one_line_without_the_key(tmp_path):
    secret = "sk-live-fedcba9876543210"
    done = _cli(tmp_path, "benchmark=explain_mini", "model=reference", "judge=gpt4o", f"judge_overrides=[backend.api_key={secret}']",
                "run.dry_run=true")  # fmt: skip
    assert done.returncode == 2
    assert secret not in done.stderr + done.stdout
    assert done.stderr.strip().splitlines() == [
        "evalkit: error: override \"judge_overrides=[backend.api_key=***']\" cannot be parsed (LexerNoViableAltException: "
        "judge_overrides=[backend.api_key=***']); expected key=value"]  # fmt: skip


def test_an_environment_variable_a_task_reads_is_sent_resolved_and_recorded_as_written(conf, monkeypatch):
    """The request carries the variable's value; the record (``config.yaml``'s source) the
    text the file wrote. An interpolation of the command line is the user's and resolves."""
    from evalkit.compose import compose, resolve
    from evalkit.engine.plan import prepare
    from evalkit.specs import build

    monkeypatch.setenv("TEAM_NOTE", "note-value-5e6f7a8b")
    rows = REPO / "examples" / "tasks" / "arith_mini.jsonl"
    (conf / "benchmark" / "noted.yaml").write_text(TASK.format(name="noted", rows=rows, system="Note: ${oc.env:TEAM_NOTE}."),
                                                   encoding="utf-8")  # fmt: skip
    monkeypatch.setenv("ROWS_FILE", str(rows))
    _, cfg = resolve(compose(["benchmark=noted", "model=reference", "benchmark.dataset.path=${oc.env:ROWS_FILE}"]))
    request = prepare(build(cfg)).units[0].request
    assert request.messages[0] == {"role": "system", "content": "Note: note-value-5e6f7a8b."}
    record = cfg.record()
    assert record["benchmark"]["prompt"]["system"] == "Note: ${oc.env:TEAM_NOTE}."
    assert "note-value-5e6f7a8b" not in json.dumps(record)
    assert record["benchmark"]["dataset"]["path"] == str(rows)


@pytest.mark.slow
def test_a_secret_a_shared_task_reads_from_the_environment_is_refused_and_a_note_recorded_as_written(conf, tmp_path):
    """A shared task that reads a variable named like a secret is refused in one line (a
    prompt holding a key would send it, reversed or cut so no scrubbing finds it), the value
    in no line and no file. A variable of another name is sent, and a real run
    (``model=reference``, tracked to a local SQLite store) records the text as written in
    ``config.yaml``, ``summary.json``, ``report.md``, the MLflow params and the ``config.yaml``
    artifact, the value in none of them."""
    secret, note = "tsv-9f8e7d6c5b4a3210", "note-1234abcd5678"
    rows = REPO / "examples" / "tasks" / "arith_mini.jsonl"
    (conf / "benchmark" / "leaky.yaml").write_text(TASK.format(name="leaky", rows=rows, system="Key ${oc.env:TEAM_SECRET}"),
                                                   encoding="utf-8")  # fmt: skip
    out = tmp_path / "out"
    refused = _cli(tmp_path, "benchmark=leaky", "model=reference", f"run.dir={out / 'run'}", f"run.output_root={out}",
                   "run.progress=false", TEAM_SECRET=secret, TEAM_NOTE=note)  # fmt: skip
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith(f"evalkit: error: {conf / 'benchmark' / 'leaky.yaml'}: prompt.system: ${{oc.env:TEAM_SECRET}} "
                                     "reads a variable named like a secret")  # fmt: skip
    assert secret not in refused.stdout + refused.stderr and not out.exists()
    system = "Note ${oc.env:TEAM_NOTE}"
    (conf / "benchmark" / "leaky.yaml").write_text(TASK.format(name="leaky", rows=rows, system=system), encoding="utf-8")
    done = _cli(tmp_path, "benchmark=leaky", "model=reference", f"run.dir={out / 'run'}", f"run.output_root={out}",
                "run.progress=false", TEAM_SECRET=secret, TEAM_NOTE=note)  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files) and any("artifacts" in p.parts for p in files)
    recorded = (out / "run" / "config.yaml").read_text(encoding="utf-8")
    assert "system: Note ${oc.env:TEAM_NOTE}" in recorded
    artifacts = [p for p in files if p.name == "config.yaml" and "artifacts" in p.parts]
    assert len(artifacts) == 1 and artifacts[0].read_text(encoding="utf-8") == recorded
    with sqlite3.connect(out / "mlflow.db") as db:
        params = dict(db.execute("SELECT key, value FROM params").fetchall())
    assert "${oc.env:TEAM_NOTE}" in params["benchmark.prompt"]
    for text in (recorded, json.dumps(params), (out / "run" / "summary.json").read_text(), (out / "run" / "report.md").read_text()):
        assert note not in text


@pytest.mark.parametrize("where, value", [
    ("fields", "{id: id, input: '${oc.env:OPENAI_API_KEY}', target: answer}"),
    ("fields", "{id: id, input: '${oc.env:${oc.env:WHICH}}', target: answer}"),
    ("path", "'data/${oc.env:HF_TOKEN}.jsonl'"),
])  # fmt: skip
def test_a_config_file_never_reads_a_secret_named_variable(conf, tmp_path, monkeypatch, where, value):
    """Issue 43's review: a task whose ``dataset.fields`` or ``dataset.path`` read
    ``${oc.env:OPENAI_API_KEY}`` echoed the key in its error line (``no column 'sk-…'``).
    Such a read, or one of a computed name, is refused before Hydra composes, naming the file."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET123")
    monkeypatch.setenv("HF_TOKEN", "hf-test-SECRET456")
    monkeypatch.setenv("WHICH", "OPENAI_API_KEY")
    rows = REPO / "examples" / "tasks" / "arith_mini.jsonl"
    text = TASK.format(name="sly", rows=rows, system="S")
    text = text.replace("  fields: {id: id, input: question, target: answer}", f"  fields: {value}") if where == "fields" \
        else text.replace(f"  path: {rows}", f"  path: {value}")  # fmt: skip
    (conf / "benchmark" / "sly.yaml").write_text(text, encoding="utf-8")
    line = _refusal("benchmark=sly", "model=reference")
    assert line.startswith(f"{conf / 'benchmark' / 'sly.yaml'}: dataset.") and "${oc.env:" in line
    assert "SECRET" not in line


def test_a_secret_named_variables_value_is_never_printed_in_an_error_line(tmp_path):
    """The command line's own ``${oc.env:…}`` is the user's, resolved: a parser's message that
    quotes the value (``(got 'sk-…')``) prints ``***`` (every printed line is scrubbed of the
    environment's secret-named values)."""
    done = _cli(tmp_path, "benchmark=arith_mini", "model=gpt4o", "backend.api_base=${oc.env:OPENAI_API_KEY}", "run.dry_run=true",
                OPENAI_API_KEY="sk-test-SECRET123")  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("evalkit: error: backend.api_base: not a server address") and "(got '***')" in done.stderr
    assert "SECRET123" not in done.stdout + done.stderr


def test_a_defaults_entry_puts_a_config_only_at_its_own_place(conf):
    """Issue 43's review: ``- /benchmark@_global_.run: x`` composed (a benchmark config put over
    the run's settings); ``/backend@_global_.backend``, a config at its own place, still works."""
    (conf / "benchmark" / "x.yaml").write_text("name: x\n", encoding="utf-8")
    (conf / "model" / "m.yaml").write_text("defaults:\n  - /benchmark@_global_.run: x\nname: m\nkind: reference\n",
                                           encoding="utf-8")  # fmt: skip
    line = _refusal("benchmark=arith_mini", "model=m")
    assert line == (f"{conf / 'model' / 'm.yaml'}: defaults.0 (/benchmark@_global_.run: x): @_global_.run: a config file puts "
                    "a benchmark config only at its own place (@_global_.benchmark), never into another group's keys "
                    "(README, Trust)")  # fmt: skip


# ---- a config-dir file that is not a regular file is named, not skipped --------------
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


# ---- an option defined twice is refused, naming both files ------------------------------
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
