"""Tasks written in YAML (``kind: task``): extraction, the scorer library, the bounded Jinja2
prompt, few-shot draws, weighted categories, one-line validation, and the three example tasks
through reference runs, paired compare and MLflow like any benchmark."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from evalkit.benchmarks import get_benchmark_class
from evalkit.benchmarks.task import TaskBenchmark, TaskSettings
from evalkit.benchmarks.task.benchmark import render
from evalkit.benchmarks.task.scorers import extract, normalise, score_one, token_f1
from evalkit.benchmarks.task.settings import Extract, ScorerSpec
from evalkit.errors import ConfigError, DataError
from evalkit.types import Sample
from tests.conftest import REPO_ROOT, evalkit_cmd

TASKS = REPO_ROOT / "examples" / "tasks"


def _task(tmp_path: Path, rows: list[dict], **spec) -> TaskBenchmark:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = {"name": "t", "kind": "task", "dataset": {"path": str(data)}, "prompt": {"template": "{{ input }}"},
            "scorers": [{"kind": "exact_match"}], **spec}  # fmt: skip
    return TaskBenchmark(TaskSettings(**spec))


# ------------------------------------------------------------------------------------------
# extraction and scorers
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rule, output, expected",
    [
        ({"kind": "none"}, "  42 \n", "42"),
        ({"kind": "last_line"}, "Let me think.\n6 * 7 = 42\n\n", "6 * 7 = 42"),
        ({"kind": "regex", "pattern": r"answer is (\d+)"}, "the answer is 4, no, the answer is 5", "5"),
        ({"kind": "json_field", "field": "answer"}, 'Sure: {"answer": "Paris", "why": "capital"}', "Paris"),
        ({"kind": "json_field", "field": "answer"}, '{"other": 1}', None),
        ({"kind": "mc_letter"}, "I think (B) is wrong. Answer: C", "C"),
        ({"kind": "mc_letter"}, "The answer is a bird", None),  # the article is not a letter
        ({"kind": "mc_letter"}, "D", "D"),
        ({"kind": "mc_letter"}, "C. Mars", "C"),  # SmolLM2's form on mc_mini
        ({"kind": "mc_letter"}, "Mars is the A. answer", None),
        ({"kind": "last_line"}, " \n ", None),
    ],
)
def test_extraction_rules(rule, output, expected):
    assert extract(Extract(**rule), output) == expected


def test_scorers_state_their_rules():
    def s(kind, answer, target, choices=None, pattern=None, **kw):
        return score_one(ScorerSpec(kind=kind, **({"pattern": pattern} if pattern else {}), **kw), answer, target, choices, pattern)

    assert s("exact_match", "Paris", "paris") == 0.0  # only outer space is stripped by default
    assert s("exact_match", " The Paris! ", "paris", normalise=["lower", "strip_punctuation", "remove_articles", "collapse_whitespace"]) == 1.0
    assert s("includes", "It is Paris, France", "paris", normalise=["lower"]) == 1.0
    assert s("regex", "x = 42;", 42, pattern=r"=\s*42\b") == 1.0 and s("regex", "x = 420", 42, pattern=r"=\s*42\b") == 0.0
    assert s("numeric", "$1,234.5 total", "1234.50") == 1.0 and s("numeric", "1234.6", "1234.5") == 0.0
    assert s("numeric", "101", "100", rel_tol=0.02) == 1.0 and s("numeric", "no number", "0") == 0.0
    assert s("multiple_choice", "B", 1, ["x", "y"]) == 1.0 and s("multiple_choice", "B", "y", ["x", "y"]) == 1.0
    assert s("multiple_choice", "A", "B", ["x", "y"]) == 0.0
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
    assert s("json_schema", '{"a": 1}', None, schema=schema) == 1.0
    assert s("json_schema", '{"a": "1"}', None, schema=schema) == 0.0 and s("json_schema", "{a: 1}", None, schema=schema) == 0.0


def test_token_f1_is_squads():
    # "the cat sat" vs "a cat sat down": normalised "cat sat" / "cat sat down": P = 1, R = 2/3
    steps = ["lower", "strip_punctuation", "remove_articles", "collapse_whitespace"]
    assert token_f1(normalise("The cat sat.", steps), normalise("a cat sat down", steps)) == pytest.approx(0.8)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0


def test_nothing_extracted_is_a_wrong_answer_never_a_skip(tmp_path):
    bench = _task(tmp_path, [{"input": "q", "target": "B", "choices": ["x", "y"]}], extract={"kind": "mc_letter"},
                  scorers=[{"kind": "multiple_choice"}], dataset={"path": str(tmp_path / "data.jsonl"), "fields": {"choices": "choices"}})  # fmt: skip
    (sample,) = bench.load()
    scored = bench.score(sample, "no letter here")
    assert scored.scores == {"multiple_choice": 0.0} and scored.status == "format_error"
    assert bench.score(sample, bench.reference_output(sample)).scores == {"multiple_choice": 1.0}


# ------------------------------------------------------------------------------------------
# prompt, few-shot, metrics
# ------------------------------------------------------------------------------------------
def test_the_rendered_prompt_is_bounded_beyond_the_sandbox():
    with pytest.raises(DataError, match="max_chars"):
        render("{{ 'ab' * 3000000 }}", {}, 50_000, "s1")
    with pytest.raises(DataError, match="max_chars"):
        render("{% for i in range(99999) %}{{ input }}{% endfor %}", {"input": "x" * 10}, 50_000, "s1")
    with pytest.raises(DataError, match="s1.*UndefinedError"):
        render("{{ missing }}", {}, 50_000, "s1")
    with pytest.raises(DataError, match="SecurityError"):
        render("{{ input.__class__.__mro__ }}", {"input": "x"}, 50_000, "s1")
    assert render("{{ input | upper }}", {"input": "é<b>"}, 100, "s1") == "É<B>"  # no HTML escaping in a prompt


@pytest.mark.parametrize("template", [
    # values doubled by ``~`` / ``+`` without any output: 2**28 characters held in memory
    '{% set ns = namespace(a="xxxxxxxx") %}{% for i in range(28) %}{% set ns.a = ns.a ~ ns.a %}{% endfor %}{{ ns.a|length }}',
    '{% set ns = namespace(a=["x"]) %}{% for i in range(28) %}{% set ns.a = ns.a + ns.a %}{% endfor %}{{ ns.a|length }}',
    '{% set a = "x"|center(10**8) %}ok',  # a filter's width: 100 MB never rendered
    '{{ "x"|center(10**30) }}',  # OverflowError escaped as itself, not one DataError line
    # a width or precision in a format string: 100 MB built before the output bound
    '{% set a = "%0100000000d" % 1 %}ok', '{% set a = "%.100000000f"|format(1) %}ok', '{% set a = "{:>100000000}".format(1) %}ok',
    '{% set a = "%*d" % (100000000, 1) %}ok',
])
def test_a_template_cannot_build_a_value_past_the_bound(template):
    with pytest.raises(DataError, match="s1.*prompt template"):
        render(template, {}, 50_000, "s1")
    assert render('{{ "ab" ~ input + "c" }}{{ input|center(7) }}', {"input": "x"}, 100, "s1") == "abxc   x   "
    assert render('{{ "%05d|%.2f" % (7, 1.5) }} {{ "{:>4}".format(input) }} {{ "%d%%"|format(5) }}', {"input": "x"}, 100, "s1") == "00007|1.50    x 5%"


def test_few_shot_draws_follow_the_seed_and_never_show_the_sample(tmp_path):
    rows = [{"id": f"r{i}", "input": f"q{i}", "target": str(i)} for i in range(12)]
    bench = _task(tmp_path, rows, seed=7)
    samples = bench.load()
    first = bench.build(samples[0], 3)
    assert [m["role"] for m in first.messages] == ["user", "assistant"] * 3 + ["user"]
    assert "q0" not in [m["content"] for m in first.messages[:-1]]
    assert bench.build(samples[0], 3).messages == first.messages  # the same seed, the same shots
    other = _task(tmp_path, rows, seed=8)
    assert [other.build(s, 3).messages for s in samples] != [bench.build(s, 3).messages for s in samples]
    with pytest.raises(DataError, match="only 11 demonstrations"):
        bench.build(samples[0], 12)


def test_categories_and_weights(tmp_path):
    rows = [{"id": f"r{i}", "input": "q", "target": "a", "cat": c} for i, c in enumerate(["x", "x", "y", "y"])]
    bench = _task(tmp_path, rows, dataset={"path": str(tmp_path / "data.jsonl"), "fields": {"id": "id", "category": "cat"}},
                  metrics={"weights": {"x": 3, "y": 1}})  # fmt: skip
    samples = bench.load()
    records = [{"sample_id": s.id, "scores": {"exact_match": v}} for s, v in zip(samples, [1.0, 1.0, 1.0, 0.0])]
    metrics = bench.aggregate(samples, records)
    assert metrics["exact_match"] == 0.75 and metrics["exact_match/x"] == 1.0 and metrics["exact_match/y"] == 0.5
    assert metrics["exact_match/weighted"] == pytest.approx((3 * 1.0 + 1 * 0.5) / 4)
    assert bench.headline_metric == "exact_match/weighted" and bench.primary_score == "exact_match"


def test_data_errors_are_one_line_naming_the_row(tmp_path):
    with pytest.raises(DataError, match=r"row 2: duplicate id 'a'"):
        _task(tmp_path, [{"id": "a", "input": "q", "target": "t"}] * 2, dataset={"path": str(tmp_path / "data.jsonl"), "fields": {"id": "id"}}).load()
    with pytest.raises(DataError, match=r"row 1: no column 'target'"):
        _task(tmp_path, [{"input": "q"}]).load()


def test_csv_and_parquet_read_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "d.csv").write_text('input,target,choices\nq1,0,"[""a"", ""b""]"\n', encoding="utf-8")
    pq.write_table(pa.Table.from_pylist([{"input": "q1", "target": "0", "choices": ["a", "b"]}]), tmp_path / "d.parquet")
    loaded = []
    for name in ("d.csv", "d.parquet"):
        spec = {"name": "t", "kind": "task", "dataset": {"path": str(tmp_path / name), "fields": {"choices": "choices"}},
                "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "multiple_choice"}]}  # fmt: skip
        loaded.append(TaskBenchmark(TaskSettings(**spec)).load()[0].data["choices"])
    assert loaded == [["a", "b"], ["a", "b"]]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("benchmark.extract.kind=bogus", "benchmark.extract.kind: Input should be"),
        ("benchmark.scorers=[]", "benchmark.scorers: List should have at least 1 item"),
        ("+benchmark.dataset.hub=org/x", "benchmark.dataset: give exactly one of"),
        ("benchmark.kind=recipe", "benchmark.kind: unknown benchmark kind 'recipe'"),
        ("benchmark.metrics.headline=nope", "benchmark.metrics.headline: 'nope' is not a scorer's score"),
    ],
)
def test_a_malformed_task_is_one_line_naming_the_field(override, expected):
    from evalkit.compose import compose, resolve

    with pytest.raises(ConfigError) as info:
        resolve(compose(["benchmark=arith_mini", "model=reference", override]))
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ('name: t\nkind: task\nprompt: {template: "x"\nscorers: []\n',
         "line 4, column 1: expected ',' or '}', but got '<scalar>' (YAML syntax; the construct began at line 3)"),
        ("name: t\nkind: task\nprompt: x: y\n", "line 3, column 10: mapping values are not allowed here (YAML syntax)"),
    ],
)
def test_a_task_file_that_is_not_yaml_is_one_line_naming_the_place(tmp_path, monkeypatch, text, expected):
    """A new user's unclosed ``{`` gave only "while parsing a flow mapping": the line now
    names the file, the line and column, and what YAML expected."""
    from evalkit.compose import compose

    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "broken.yaml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        compose(["benchmark=broken", "model=reference"])
    message = str(info.value)
    assert message.startswith(str(tmp_path / "benchmark" / "broken.yaml")) and expected in message and "\n" not in message


def test_a_task_is_found_by_kind_and_named_by_its_file():
    from evalkit.compose import compose, resolve

    _, cfg = resolve(compose(["benchmark=mc_mini", "model=reference", "run.seed=5"]))
    assert get_benchmark_class(cfg.benchmark.name, kind=cfg.benchmark.kind) is TaskBenchmark
    assert cfg.benchmark.name == "mc_mini" and cfg.benchmark.seed == 5  # the few-shot draw follows run.seed


# ------------------------------------------------------------------------------------------
# the example tasks, end to end
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_example_tasks_score_1_with_reference_and_compare_paired(tmp_path: Path):
    root = tmp_path / "out"
    common = [f"run.output_root={root}", "run.progress=false", "tracking=mlflow", "model=reference"]
    for task, headline in (("arith_mini", "accuracy"), ("mc_mini", "accuracy/weighted"), ("explain_mini", "judge")):
        proc = subprocess.run(evalkit_cmd(f"benchmark={task}", *common, f"run.dir={tmp_path / task}"), cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        summary = json.loads((tmp_path / task / "summary.json").read_text())
        assert summary["benchmark"] == task and summary["headline"] == headline and summary["metrics"][headline] == 1.0
        assert headline in summary["metrics_ci"] and summary["prompt_template_hash"]
    rows = [json.loads(x) for x in (TASKS / "mc_mini.jsonl").read_text().splitlines()]
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": r["id"], "output": "Answer: A"}) + "\n" for r in rows))
    proc = subprocess.run(evalkit_cmd("benchmark=mc_mini", *common[:-1], "model=replay", f"model.path={replay}", f"run.dir={tmp_path / 'rep'}"),
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "rep" / "summary.json").read_text())
    journaled = [json.loads(x)["sample_id"] for x in (tmp_path / "rep" / "predictions.jsonl").read_text().splitlines()]
    assert journaled == [r["id"] for r in rows]  # offline: scored together, journaled in selection order
    right = sum(r["answer"] == 0 for r in rows)  # "A" is right where the answer is choice 0
    assert rep["metrics"]["accuracy"] == right / len(rows)
    compared = subprocess.run([*evalkit_cmd()[:2], "evalkit.compare", str(tmp_path / "mc_mini"), str(tmp_path / "rep"), "--json"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    acc = json.loads(compared.stdout)["paired"][0]["metrics"]["accuracy"]
    assert acc["test"] in ("Tango score", "exact unconditional (Tango's statistic)") and acc["only_a"] == len(rows) - right and acc["only_b"] == 0
    assert math.isclose(acc["delta"], right / len(rows) - 1.0)


def test_cohens_kappa_against_human_labels_matches_an_independent_computation(tmp_path):
    import numpy as np

    from evalkit.stats import intervals

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 60)
    verdicts = np.where(rng.random(60) < 0.8, labels, 1 - labels)  # a scorer that agrees 80% of the time
    rows = [{"id": f"r{i}", "input": "q", "target": "a", "human": ["no", "yes"][int(lab)]} for i, lab in enumerate(labels)]
    bench = _task(tmp_path, rows, dataset={"path": str(tmp_path / "data.jsonl"), "fields": {"id": "id", "label": "human"}})
    samples = bench.load()
    records = [{"sample_id": s.id, "scores": {"exact_match": float(v)}} for s, v in zip(samples, verdicts)]
    # Cohen (1960) from the 2x2 confusion matrix
    table = np.array([[np.sum((verdicts == a) & (labels == b)) for b in (0, 1)] for a in (0, 1)]) / len(labels)
    observed, chance = np.trace(table), float(table.sum(axis=1) @ table.sum(axis=0))
    expected = (observed - chance) / (1 - chance)
    plan = bench.stat_plan(samples, [records])
    metrics = bench.aggregate(samples, records)
    assert metrics["kappa/exact_match"] == pytest.approx(expected, abs=1e-12) and 0.3 < expected < 0.9
    assert metrics["agreement/exact_match"] == pytest.approx(observed)
    ci = intervals(plan, 0.95, 2000, 0)["kappa/exact_match"]
    assert ci["low"] < expected < ci["high"] and ci["n"] == 60
    with pytest.raises(DataError, match="label 'maybe'"):
        _task(tmp_path, [{"input": "q", "target": "a", "human": "maybe"}],
              dataset={"path": str(tmp_path / "data.jsonl"), "fields": {"label": "human"}}).load()


@pytest.mark.parametrize("other", [None, "", "  \n"])
def test_a_pairwise_judge_has_an_answer_to_compare_with(tmp_path, other):
    """Pairwise, the answer is judged against the row's ``against`` field: missing, empty or
    blank, any answer would beat nothing — one line at build, never a judged sample."""
    row = {"id": "r1", "input": "q", "target": "gold"} | ({} if other is None else {"rival": other})
    scorer = {"kind": "llm_judge", "name": "pref", "rubric": "{{ answer_a }} vs {{ answer_b }}", "mode": "pairwise", "against": "rival"}
    bench = _task(tmp_path, [row], scorers=[scorer])
    with pytest.raises(DataError, match="no field .rival. to judge"):
        bench.build(bench.load()[0], 0)
    good = _task(tmp_path, [{**row, "rival": "an answer"}], scorers=[scorer])
    assert good.build(good.load()[0], 0).messages[-1]["content"] == "q"
