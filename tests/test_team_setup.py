"""A team's own setup (issue 32 items 2 and 3): a config directory OUTSIDE the repository
(``EVALKIT_CONFIG_DIR``) with its own judges, models and tasks; entry-point benchmarks with
no YAML; one-line messages with a did-you-mean; and a task file checked whole against its
data before anything starts (no Ray, no server, no run directory), whatever the model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from evalkit.errors import ConfigError, DataError, EvalkitError
from tests.conftest import evalkit_cmd
from tests.support.judge_conf import judge_config_dir

EXTBENCH = Path(__file__).parent / "support" / "extbench"
ROWS = [{"id": "a", "q": "1+1?", "ans": "2", "topic": "science"},
        {"id": "b", "q": "Capital of France?", "ans": "Paris", "topic": "geo"},
        {"id": "c", "q": "2+2?", "ans": "4", "topic": "science"}]  # fmt: skip
#: a network model under test (nothing listens on port 9: a check that came after start-up would fail otherwise)
NETWORK = ["model=openai_compatible", "model.provider_model=openai/x", "backend.api_base=http://127.0.0.1:9"]


@pytest.fixture
def team(tmp_path, monkeypatch):
    """``(conf, data)``: a config directory outside the repository (judges judge_a/b/c in
    ``model/``, ``benchmark/`` for tasks), on ``EVALKIT_CONFIG_DIR``, and the rows' JSONL."""
    conf, data = judge_config_dir(tmp_path, ROWS)
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(conf))
    monkeypatch.chdir(tmp_path)
    return conf, data


def _task(conf: Path, data: Path, name: str = "t", **over) -> Path:
    spec = {"name": name, "kind": "task", "dataset": {"path": str(data), "fields": {"id": "id", "input": "q", "target": "ans",
                                                                                     "category": "topic"}},
            "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match", "name": "acc"}]}  # fmt: skip
    for key, value in over.items():
        spec[key] = value
    path = conf / "benchmark" / f"{name}.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def _error(*overrides: str) -> str:
    from evalkit.compose import compose, resolve

    with pytest.raises(EvalkitError) as info:
        resolve(compose(list(overrides)))
    return str(info.value)


# ---- item 2: the config directory is first class ----------------------------------------
def test_a_judge_and_a_panel_of_the_config_dir_are_found_inside_the_running_app(team):
    """Inside ``python -m evalkit``'s running Hydra app the judges were composed without the
    user's search path: ``judge=judge_a`` was "unknown model". Here the app's state (Hydra
    initialised on ``conf/`` alone) is made as the app makes it."""
    from hydra import initialize_config_dir

    from evalkit.compose import CONF_DIR, _compose_in_context, compose_judges

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        judges = compose_judges(["judge_a", "judge_b"], ["backend.api_base=http://127.0.0.1:9"])
        user = _compose_in_context(["model=judge_c"])  # benchmark.user_model's path
        with pytest.raises(ConfigError) as info:
            compose_judges("judge_aa", None)
    assert [j["model"]["name"] for j in judges] == ["judge_a", "judge_b"]
    assert judges[0]["backend"]["api_base"] == "http://127.0.0.1:9"
    assert user.model.name == "judge_c"
    assert str(info.value).startswith("judge: model=judge_aa: unknown model; did you mean model=judge_a?; available: ")
    assert "judge_a, judge_b, judge_c" in str(info.value)


def test_an_entry_point_benchmark_needs_no_yaml_and_help_lists_what_the_team_adds(team, monkeypatch):
    from evalkit.compose import compose, help_additions, resolve

    monkeypatch.syspath_prepend(str(EXTBENCH))  # the capitals package and its dist-info (entry point), no YAML
    _, cfg = resolve(compose(["benchmark=capitals", "model=reference"]))
    assert cfg.benchmark.name == "capitals" and cfg.benchmark.data_path.name == "capitals.jsonl"  # the settings' defaults
    assert "did you mean benchmark=capitals?" in _error("benchmark=capitols", "model=reference")
    text = help_additions()
    assert f"EVALKIT_CONFIG_DIR {team[0]}:\n  benchmark: \n" not in text
    assert "  model: judge_a, judge_b, judge_c" in text
    assert "  benchmark: capitals" in text
    (team[0] / "benchmark" / "capitals.yaml").write_text("name: capitals\nscore_timeout_s: 20\n")  # a YAML of its own wins
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "automatic schema matching" of the YAML against the entry point's node
        _, cfg = resolve(compose(["benchmark=capitals", "model=reference"]))
    assert cfg.benchmark.score_timeout_s == 20


@pytest.mark.parametrize("overrides, expected", [
    (["benchmark=acebench", "benchmark.data_dri=x"], "benchmark.data_dri: unknown key; did you mean benchmark.data_dir? (file "),
    (["benchmark=acebench", "benchmark.langauge=en"], "benchmark.langauge: unknown key; did you mean benchmark.language?"),
    (["benchmark=mc_mini", "benchmark.extract.patern=x"], "benchmark.extract.patern: unknown key; did you mean benchmark.extract.pattern?"),
    (["run.limt=3"], "run.limt: unknown key; did you mean run.limit?"),
])  # fmt: skip
def test_every_unknown_key_gets_a_did_you_mean(overrides, expected):
    assert _error("model=reference", *overrides).startswith(expected)


def test_an_unknown_key_names_the_task_file_it_comes_from(team):
    conf, data = team
    path = _task(conf, data, extract={"kind": "regex", "patern": "x"})
    assert _error("benchmark=t", "model=reference") == (
        f"benchmark.extract.patern: unknown key; did you mean benchmark.extract.pattern? (file {path})")


def test_a_mistake_in_a_judge_config_names_its_file(team):
    conf, data = team
    path = conf / "model" / "judge_b.yaml"
    path.write_text(path.read_text().replace("provider_model:", "provider_modle:"))
    _task(conf, data, scorers=[{"kind": "llm_judge", "rubric": "{{ output }}"}])
    assert _error("benchmark=t", "model=reference", "judge=[judge_a,judge_b]") == (
        f"judge.1.model.provider_modle: unknown key; did you mean judge.1.model.provider_model? (file {path})")


def test_several_missing_api_keys_are_one_line(team, monkeypatch):
    conf, data = team
    for name in ("judge_a", "judge_b"):
        text = (conf / "model" / f"{name}.yaml").read_text()
        (conf / "model" / f"{name}.yaml").write_text(text + f"api_key_env: KEY_OF_{name.upper()}\n")
    monkeypatch.delenv("KEY_OF_JUDGE_A", raising=False)
    monkeypatch.delenv("KEY_OF_JUDGE_B", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _task(conf, data, scorers=[{"kind": "llm_judge", "rubric": "{{ output }}"}])
    assert _error("benchmark=t", "model=gpt4o", "judge=[judge_a,judge_b]") == (
        "model.api_key_env, judge: 3 API key environment variables are not set: OPENAI_API_KEY (model=gpt4o); "
        "KEY_OF_JUDGE_A (judge judge_a); KEY_OF_JUDGE_B (judge judge_b)")


def test_shots_takes_any_count():
    from evalkit.compose import compose, quote_numeric_groups, resolve

    assert quote_numeric_groups(["shots=2", "shots=3", "shots=0,3", "shots=0,2"]) == ["shots.n=2", "shots='3'", "shots='0','3'", "shots.n=0,2"]
    _, cfg = resolve(compose(["benchmark=mc_mini", "model=reference", "shots=2"]))
    assert cfg.shots.n == 2


# ---- item 3: a task file checked whole before anything starts ---------------------------
MISTAKES = [
    ({"extract": {"kind": "regex", "pattern": "Answer: (\\w+"}},
     "benchmark.extract.pattern: 'Answer: (\\\\w+' does not compile (missing ), unterminated subpattern at position 8)"),
    ({"extract": {"kind": "regex", "pattern": "Answer: \\w+", "group": 1}},
     "benchmark.extract.group: group 1, but benchmark.extract.pattern 'Answer: \\\\w+' has 0 groups"),
    ({"scorers": [{"kind": "regex", "pattern": "(["}]},
     "benchmark.scorers.0.pattern: '([' does not compile (unterminated character set at position 1)"),
    ({"metrics": {"weights": {"sciense": 2, "geo": 1}}},
     "benchmark.metrics.weights.sciense: no sample of {data} has category 'sciense' (column 'topic': geo, science); "
     "did you mean 'science'?"),
    ({"prompt": {"template": "{{ input }} {{ context }}"}},
     "benchmark.prompt.template: {{ context }} is not a column of {data} (its rows have: ans, choices, id, input, label, q, target, topic)"),
    ({"scorers": [{"kind": "llm_judge", "rubric": "{{ output.__class__.__mro__ }}"}]},
     "benchmark.scorers.0.rubric: sample 'a': prompt template: SecurityError: access to attribute '__class__' of 'str' object is unsafe."),
    ({"dataset": {"path": "{empty}", "fields": {"input": "q", "target": "ans"}}},
     "benchmark.dataset.path: {empty}: it is empty (no rows)"),
    ({"dataset": {"path": "{data}", "fields": {"input": "question", "target": "ans"}}},
     "benchmark.dataset: {data}: row 1: no column 'question' (dataset.fields maps input='question', target='ans')"),
]  # fmt: skip


@pytest.mark.parametrize("change, expected", MISTAKES, ids=lambda v: str(v)[:30] if isinstance(v, str) else None)
def test_a_task_mistake_is_one_line_naming_the_key_and_file_before_anything_starts(team, change, expected):
    conf, data = team
    empty = data.parent / "empty.jsonl"
    empty.write_text("")
    change = json.loads(json.dumps(change).replace("{empty}", str(empty)).replace("{data}", str(data)))
    path = _task(conf, data, **change)
    judged = ["judge=judge_a"] if "llm_judge" in json.dumps(change) else []
    out = data.parent / "out"
    with pytest.raises((ConfigError, DataError)) as info:
        from evalkit.compose import compose, resolve

        resolve(compose(["benchmark=t", *NETWORK, *judged, f"run.output_root={out}"]))
    assert str(info.value) == f"{expected.replace('{data}', str(data)).replace('{empty}', str(empty))} (file {path})"
    assert not out.exists()


def test_a_reference_answers_through_the_answer_template_and_wins_a_pairwise_judgement(team):
    """A regex task whose demonstrations answer "… Answer: X": the reference answered the
    bare target and scored 0.0; a pairwise judgement of the gold answer was a tie (0.5)."""
    from evalkit.benchmarks.task import TaskBenchmark
    from evalkit.benchmarks.task.judge import ORDERS, verdict_value
    from evalkit.benchmarks.task.settings import ScorerSpec
    from evalkit.benchmarks.task.solver import gold_verdict
    from evalkit.compose import compose, resolve

    conf, data = team
    _task(conf, data, prompt={"template": "{{ input }}", "answer_template": "Let me think. Answer: {{ target }}"},
          extract={"kind": "regex", "pattern": "Answer: (\\w+)", "group": 1})  # fmt: skip
    _, cfg = resolve(compose(["benchmark=t", "model=reference"]))
    bench = TaskBenchmark(cfg.benchmark)
    samples = bench.load()
    assert bench.reference_output(samples[1]) == "Let me think. Answer: Paris"
    assert [bench.score(s, bench.reference_output(s)).scores["acc"] for s in samples] == [1.0, 1.0, 1.0]
    pairwise = ScorerSpec(kind="llm_judge", rubric="{{ answer_a }} {{ answer_b }}", mode="pairwise")
    assert [verdict_value(pairwise, json.loads(gold_verdict(pairwise, o)), o) for o in ORDERS] == [1.0, 1.0]


# ---- whole runs ---------------------------------------------------------------------------
def _run(*overrides: str):
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    _, cfg = resolve(compose([*overrides, "tracking=none", "run.progress=false"]))
    return cfg, run_validated(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["arith_mini", "mc_mini", "explain_mini", "regex_template", "pairwise"])
def test_a_reference_run_of_every_shipped_and_user_task_scores_its_maximum(team, task, capsys):
    from evalkit.job import reference_shortfall

    conf, data = team
    repo = Path(__file__).resolve().parents[1]
    if task == "regex_template":
        _task(conf, data, name=task, prompt={"template": "{{ input }}", "answer_template": "Reasoning… Answer: {{ target }}"},
              extract={"kind": "regex", "pattern": "Answer: (\\w+)", "group": 1})  # fmt: skip
    elif task == "pairwise":
        _task(conf, data, name=task, scorers=[{"kind": "llm_judge", "name": "pref", "mode": "pairwise",
                                               "rubric": "A: {{ answer_a }} B: {{ answer_b }}"}])  # fmt: skip
    extra = [f"benchmark.dataset.path={repo / 'examples' / 'tasks' / f'{task}.jsonl'}"] if task.endswith("_mini") else []
    cfg, result = _run(f"benchmark={task}", "model=reference", *extra, f"run.output_root={data.parent / 'out'}")
    assert result.typed.complete
    assert result.typed.headline_value == 1.0, result.summary["metrics"]
    assert reference_shortfall(cfg, result) is None


@pytest.mark.slow
def test_a_reference_run_below_the_maximum_and_a_headline_that_cannot_be_computed_say_so(team):
    from evalkit.job import outcome_line, reference_shortfall

    conf, data = team
    _task(conf, data, name="short", prompt={"template": "{{ input }}", "answer_template": "It is {{ target }}"},
          extract={"kind": "regex", "pattern": "Answer: (\\w+)", "group": 1})  # fmt: skip
    cfg, result = _run("benchmark=short", "model=reference", f"run.output_root={data.parent / 'out'}")
    line = reference_shortfall(cfg, result)
    assert line is not None and line.startswith("evalkit: warning: model=reference scored acc = 0.0000, below the maximum 1: ")
    _task(conf, data, name="nohead", metrics={"headline": "acc/nowhere"})
    cfg, result = _run("benchmark=nohead", "model=reference", f"run.output_root={data.parent / 'out2'}")
    assert result.typed.headline_value is None
    assert outcome_line(result).startswith("evalkit: complete, but NO HEADLINE: nohead × reference: the headline acc/nowhere could not "
                                           "be computed")  # fmt: skip


def _cli(tmp_path: Path, *args: str, module: str = "evalkit", extra_path: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [extra_path, os.environ.get("PYTHONPATH")]))}
    cmd = evalkit_cmd(*args) if module == "evalkit" else [*evalkit_cmd()[:2], module, *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_panel_of_the_teams_judges_runs_from_the_command_line(team, fake_openai, ray_address):
    """The real entry path (``python -m evalkit``, the judges composed inside the running
    Hydra app): ``judge=[judge_a,judge_b]`` from the config directory judges every answer on
    the fake server; then ``python -m evalkit.judge RUN judge=judge_c`` judges them again."""
    conf, data = team
    fake_openai.set_plan({"default": {"content": json.dumps({"score": 4, "reason": "ok"})}})
    _task(conf, data, name="judged", scorers=[{"kind": "llm_judge", "name": "quality", "rubric": "Rate {{ output }}"}])
    run_dir = data.parent / "run"
    common = [f"judge_overrides=['backend.api_base={fake_openai.api_base}']", f"runner.address={ray_address}", "tracking=none",
              "run.progress=false", f"run.output_root={data.parent / 'out'}", "judge_qualification.require=never"]  # fmt: skip
    done = _cli(data.parent, "benchmark=judged", "model=reference", "judge=[judge_a,judge_b]", f"run.dir={run_dir}", *common)
    assert done.returncode == 0, done.stderr
    assert "— judge not qualified: judge_a unqualified, judge_b unqualified, judge_qualification.require=never" in done.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["quality"] == 0.75  # (4 - 1) / (5 - 1), both judges
    asked = {r["model"] for r in fake_openai.log}
    assert {"judge_a", "judge_b"} <= asked
    again = _cli(data.parent, str(run_dir), "judge=judge_c", *common[:1], *common[2:], module="evalkit.judge")
    assert again.returncode == 0, again.stderr
    assert "judge_c" in {r["model"] for r in fake_openai.log}


@pytest.mark.slow
def test_a_task_mistake_stops_the_command_before_anything_starts_and_help_lists_the_team(team):
    conf, data = team
    path = _task(conf, data, metrics={"weights": {"sciense": 2, "geo": 1}})
    out = data.parent / "out"
    done = _cli(data.parent, "benchmark=t", *NETWORK, f"run.output_root={out}")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"evalkit: error: benchmark.metrics.weights.sciense: no sample of {data} has category 'sciense' (column 'topic': geo, "
        f"science); did you mean 'science'? (file {path})"]  # fmt: skip  (no "starting Ray" line before it)
    assert not out.exists()
    _task(conf, data)  # mended
    shots = _cli(data.parent, "benchmark=t", "model=reference", "shots=2", "run.dry_run=true")
    assert shots.returncode == 0, shots.stderr
    helped = _cli(data.parent, "--help", extra_path=str(EXTBENCH))
    assert helped.returncode == 0
    assert f"EVALKIT_CONFIG_DIR {conf}:\n  benchmark: t\n  model: judge_a, judge_b, judge_c\n" in helped.stdout
    assert "benchmark: acebench, arith_mini, capitals, explain_mini" in helped.stdout  # Hydra's own listing: the entry point


@pytest.mark.slow
def test_a_suite_names_the_teams_task_and_model(team):
    """``bash/run_suite.sh`` checked the benchmark against ``conf/benchmark/*.yaml`` alone:
    a task of the config directory was refused."""
    import sys

    conf, data = team
    _task(conf, data)
    suite = data.parent / "team.yaml"
    suite.write_text("- {benchmark: t}\n", encoding="utf-8")
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "VENV": str(Path(sys.executable).parent.parent)}
    done = subprocess.run(["bash", str(repo / "bash" / "run_suite.sh"), str(suite), "--model", "judge_a", "--dry-run"],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "-m evalkit benchmark=t model=judge_a" in done.stdout
