"""Hostile task files, templates and run directories' ``config.yaml`` (issue 35, items 1-4):
one plain-name check for names from files that become paths, one bounded YAML loader
(:func:`evalkit.untrusted.load_yaml`), one bounded renderer (:mod:`evalkit.benchmarks.task.template`:
in process, and in a child under kernel limits), and run-directory readers that refuse a
crafted ``config.yaml`` in one line. In-process tests; the whole-command ones are marked slow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from evalkit.benchmarks.task import TaskSettings
from evalkit.benchmarks.task.template import TemplateRefused, check_renders, render
from evalkit.errors import ConfigError, DataError, RunDirError
from evalkit.untrusted import MAX_YAML_ALIASES, MAX_YAML_DEPTH, load_yaml, read_run_yaml
from evalkit.settings import plain_name
from tests.conftest import REPO_ROOT
from tests.test_tasks import _task

#: "billion laughs": 9 levels of 9 aliases, 9**9 strings written out (about 400 bytes of text)
BOMB = 'l0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"l{i + 1}: &a{i + 1} [{','.join(['*a' + str(i)] * 9)}]\n" for i in range(9))
LOOP = "{% for i in range(50000) %}{% for j in range(50000) %}{% endfor %}{% endfor %}{{ input }}"
PATH_NAMES = ["../../../../x", "/tmp/x", "a/b", "..", ".hidden", "", "a\\b", "x\0y"]


# ---- item 1: names from files -----------------------------------------------------------------
@pytest.mark.parametrize("name", PATH_NAMES)
def test_a_task_name_with_path_characters_is_refused_by_the_one_plain_name_check(name: str):
    with pytest.raises(ValueError) as info:
        plain_name(name, "benchmark.name")
    assert str(info.value).startswith("benchmark.name: ") and "\n" not in str(info.value)
    with pytest.raises(ValidationError, match="is not a plain name"):
        TaskSettings(name=name, dataset={"path": "d.jsonl"}, prompt={"template": "x"}, scorers=[{"kind": "exact_match"}])


@pytest.mark.parametrize("name", ["../../../../x", "/tmp/evalkit-escape"])
def test_a_task_file_naming_a_path_is_one_config_line_before_any_run_dir(tmp_path: Path, monkeypatch, name: str):
    from evalkit.compose import compose, resolve

    (tmp_path / "benchmark").mkdir()
    task = {"name": name, "kind": "task", "dataset": {"path": "examples/tasks/arith_mini.jsonl"},
            "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}]}  # fmt: skip
    (tmp_path / "benchmark" / "escape.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        resolve(compose(["benchmark=escape", "model=reference", f"run.output_root={tmp_path / 'out'}"]))
    assert "benchmark.name" in str(info.value) and "not a plain name" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


# ---- item 2: the bounded YAML loader ----------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        (BOMB, "aliases expand the document beyond"),
        ("[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1), f"nested deeper than {MAX_YAML_DEPTH}"),
        ("a: &x 1\n" + "".join(f"k{i}: *x\n" for i in range(MAX_YAML_ALIASES + 1)), f"more than {MAX_YAML_ALIASES:,} aliases"),
        ("&a [*a]", "a node that contains it"),
        ("x: " + "1" * 5000, "a number of 5,000 characters"),
        ("x: " + "y" * (1024 * 1024), "over the 1,048,576 a YAML file may have"),
    ],
)
def test_the_bounded_yaml_loader_refuses_each_bound_in_one_line(text: str, expected: str):
    with pytest.raises(DataError) as info:
        load_yaml(text, "task.yaml")
    message = str(info.value)
    assert message.startswith("task.yaml: ") and expected in message and "\n" not in message


def test_yaml_within_the_bounds_loads_as_safe_load_does():
    depth = MAX_YAML_DEPTH - 1  # under the top mapping: MAX_YAML_DEPTH collections in all
    text = "a: &x {b: [1, 2.5, 'c']}\nd: *x\ne: {<<: *x, f: null}\n" + "g: " + "[" * depth + "]" * depth
    assert load_yaml(text, "t.yaml") == yaml.safe_load(text)


def test_an_alias_bomb_task_file_is_one_config_line_before_hydra_reads_it(tmp_path: Path, monkeypatch):
    """Before, Hydra's OmegaConf expanded it: no output for 300 s, then killed."""
    from evalkit.compose import compose

    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "bomb.yaml").write_text("name: bomb\nkind: task\n" + BOMB, encoding="utf-8")
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    for overrides in (["benchmark=bomb", "model=reference"], ["benchmark=arith_mini,bomb", "model=reference"]):
        with pytest.raises(ConfigError) as info:
            compose(overrides)
        message = str(info.value)
        assert message.startswith(str(tmp_path / "benchmark" / "bomb.yaml")) and "aliases expand" in message and "\n" not in message


# ---- item 3: the bounded renderer -------------------------------------------------------------
BYPASSES = {
    "nested format width": "{{ '{:^{w}}'.format('x', w='900000000') }}",
    "nested format width by position": "{{ '{0:{1}}'.format('x', '900000000') }}",
    "format_map width": "{{ '{a:{w}}'.format_map({'a': 'x', 'w': '900000000'}) }}",
    "nested range loops": LOOP,
    "range over the bound": "{% for i in range(10**8) %}{% endfor %}",
    "list doubling": "{% set ns = namespace(l=['x' * 40000]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}x",
    "printing a doubled list": "{% set ns = namespace(l=['x' * 40000]) %}{% for i in range(15) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l }}",
    "replace filter": "{{ ('x' * 40000)|replace('x', 'y' * 40000) }}",
    "replace method": "{{ ('x' * 40000).replace('x', 'y' * 40000) }}",
    "join filter": "{% set ns = namespace(l=['x' * 40000]) %}{% for i in range(15) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|join }}",
    "join method": "{% set ns = namespace(l=['x' * 40000]) %}{% for i in range(15) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ''.join(ns.l) }}",
    "string filter": "{% set ns = namespace(l=['x' * 40000]) %}{% for i in range(15) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|string|length }}",
    "concatenation": "{% set ns = namespace(l=['x' * 40000]) %}{% for i in range(15) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l ~ '' }}",
    "macro calling itself twice": "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
    "endless recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "recursive loop": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
}


@pytest.mark.parametrize("template", list(BYPASSES.values()), ids=list(BYPASSES))
def test_template_bound_bypasses_are_one_line(template: str):
    with pytest.raises(TemplateRefused) as info:
        render(template, {"input": "q"}, 50_000, "s1")
    message = str(info.value)
    assert message.startswith("sample 's1': prompt template: ") and "\n" not in message


def test_templates_within_the_bounds_render_as_before():
    data = {"input": "2+2?", "choices": ["3", "4"], "letters": ["A", "B"]}
    template = "{{ input }}\n{% for c in choices %}{{ letters[loop.index0] }}. {{ c }}\n{% endfor %}{{ '{:>4}|{:.2f}'.format('a', 0.5) }}"
    assert render(template, data, 50_000, "s") == "2+2?\nA. 3\nB. 4\n   a|0.50"
    assert render("{{ choices|join(', ') }} {{ 'ab'|replace('a', 'x') }} {{ range(3)|list }}", data, 50_000, "s") == "3, 4 xb [0, 1, 2]"


def test_the_child_renderer_is_killed_past_its_time_limit():
    """Work the in-process checks allow (each render under the step budget) but that is over
    the child's time limit: refused in one line by the parent, which kills the child."""
    jobs = [("{% for i in range(90000) %}{{ i }}{% endfor %}", {}, 10**6, f"s{i}") for i in range(2000)]
    with pytest.raises(TemplateRefused) as info:
        check_renders(jobs, "task t", timeout_s=1.0)
    assert str(info.value).startswith("task t: rendering its templates took over 1 s") and "\n" not in str(info.value)


def test_the_child_renderer_is_held_to_its_memory_limit():
    """A value within the (here huge) character bound but over the child's address space:
    the kernel refuses the allocation (RLIMIT_AS), not the template's goodwill."""
    jobs = [("{{ ('x' * 900000)|replace('x', 'y' * 900) }}", {}, 10**9, "s1")]
    with pytest.raises(TemplateRefused) as info:
        check_renders(jobs, "task t", memory_mb=64)
    # issue 43: the line names the bound that was hit and the sample, never "MemoryError: (no message)"
    assert str(info.value) == "task t: sample 's1': rendering its prompt template needs over 64 MiB (the bounded renderer's memory limit)"


def test_a_template_that_grows_a_list_names_the_memory_bound():
    """Issue 43: a template that grows a list until the child's address space is spent was
    reported as ``prompt template: MemoryError: (no message)``; the line names the bound."""
    jobs = [("{% set xs = [] %}{% for i in range(50000) %}{% if xs.append('y' * 10000) %}{% endif %}{% endfor %}", {}, 10**9,
             "s\n2")]  # fmt: skip
    with pytest.raises(TemplateRefused) as info:
        check_renders(jobs, "task t", memory_mb=64)
    assert str(info.value) == ("task t: sample 's\\n2': rendering its prompt template needs over 64 MiB "
                               "(the bounded renderer's memory limit)")  # fmt: skip


def test_a_task_renders_every_prompt_in_the_bounded_child_when_it_loads(tmp_path: Path):
    rows = [{"id": "a", "input": "q", "target": "t"}, {"id": "b", "input": "q" * 60, "target": "t"}]
    bench = _task(tmp_path, rows, dataset={"path": str(tmp_path / "data.jsonl"), "fields": {"id": "id"}},
                  prompt={"template": "{% for c in input %}{% for d in input %}{{ c }}{% endfor %}{% endfor %}", "max_chars": 1000})  # fmt: skip
    with pytest.raises(DataError) as info:  # 60 × 60 characters: over max_chars=1000 on sample b only
        bench.load()
    assert str(info.value).startswith("task t: sample 'b': ") and "\n" not in str(info.value)
    ok = _task(tmp_path, rows, dataset={"path": str(tmp_path / "data.jsonl"), "fields": {"id": "id"}})
    assert [s.id for s in ok.load()] == ["a", "b"]


def test_a_judge_rubric_is_checked_with_the_prompts(tmp_path: Path):
    bench = _task(tmp_path, [{"input": "q", "target": "t"}],
                  scorers=[{"kind": "llm_judge", "name": "j", "rubric": LOOP}])  # fmt: skip
    with pytest.raises(TemplateRefused, match="steps"):
        bench.load()


# ---- item 4: reading another run's directory --------------------------------------------------
def _run_dir(tmp_path: Path, config_text: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(config_text, encoding="utf-8")
    (run / "summary.json").write_text(json.dumps({"status": "complete"}), encoding="utf-8")
    (run / "predictions.jsonl").write_text("", encoding="utf-8")
    return run


def test_every_run_dir_reader_refuses_an_alias_bomb_config_in_one_line(tmp_path: Path):
    from evalkit.benchmarks.ke.audit import _read_evalkit
    from evalkit.rescore import load_benchmark
    from evalkit.track import read_run

    run = _run_dir(tmp_path, "benchmark: {name: ke}\n" + BOMB)
    for read in (read_run_yaml, lambda r: read_run(r.parent), lambda r: load_benchmark(r.parent), lambda r: _read_evalkit(r.parent, None)):
        with pytest.raises(RunDirError) as info:
            read(run / "config.yaml")
        assert "aliases expand the document beyond" in str(info.value) and "\n" not in str(info.value)


def test_track_refuses_a_looping_template_in_config_yaml_before_opening_the_store(tmp_path: Path):
    from evalkit.track import requests_of

    recorded = {"config_format": 2, "benchmark": {"name": "arith_mini", "kind": "task", "dataset": {"path": str(REPO_ROOT / "examples/tasks/arith_mini.jsonl"),
                "fields": {"id": "id", "input": "question", "target": "answer"}}, "prompt": {"template": LOOP},
                "scorers": [{"kind": "numeric"}]}, "model": {"name": "reference", "kind": "reference"},
                "backend": {"kind": "offline"}, "run": {"limit": 2, "output_root": str(tmp_path / "out")}}  # fmt: skip
    with pytest.raises(RunDirError) as info:
        requests_of(tmp_path, recorded)
    assert str(info.value).startswith(f"{tmp_path}/config.yaml: task arith_mini: sample ") and "\n" not in str(info.value)


@pytest.mark.slow
def test_track_and_judge_on_a_crafted_run_dir_are_one_line_exit_2(tmp_path: Path):
    """Before: ``evalkit.track`` and ``evalkit.judge`` hung (killed at 150-200 s)."""
    env_cmd = [sys.executable, "-m", "evalkit", "benchmark=explain_mini", "model=reference", "judge=reference",
               "run.limit=2", f"run.output_root={tmp_path / 'out'}", "tracking=none", "run.progress=false"]  # fmt: skip
    assert subprocess.run(env_cmd, cwd=REPO_ROOT, capture_output=True, timeout=600).returncode == 0
    run = next((tmp_path / "out" / "runs" / "explain_mini" / "reference").iterdir())
    text = (run / "config.yaml").read_text(encoding="utf-8")
    looping, bomb = tmp_path / "looping", tmp_path / "bomb"
    for target, content in ((looping, text.replace("template: '{{ input }}'", "template: '" + LOOP + "'")), (bomb, BOMB + text)):
        subprocess.run(["cp", "-r", str(run), str(target)], check=True)
        (target / "config.yaml").write_text(content, encoding="utf-8")
    assert LOOP in (looping / "config.yaml").read_text(encoding="utf-8")
    for target in (looping, bomb):
        for cmd in (["evalkit.track", str(target), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                    ["evalkit.judge", str(target), "judge=gpt4o", f"run.output_root={tmp_path / 'judged'}", "tracking=none"]):
            done = subprocess.run([sys.executable, "-m", *cmd], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                                  env={**__import__("os").environ, "OPENAI_API_KEY": "sk-test-not-used"})  # fmt: skip
            lines = done.stderr.strip().splitlines()
            errors = [line for line in lines if line.startswith("evalkit: error: ")]
            assert done.returncode == 2 and len(errors) == 1 and lines[-1] == errors[0], (cmd, done.stderr)
            assert "Traceback" not in done.stderr and ("aliases expand" in errors[0] or "steps" in errors[0]), errors
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "judged").exists()


# ---- issue 43's review: what an attacker found in templates and data files ------------------
@pytest.mark.parametrize("template, line", [
    ("{{ input }}{{ 1 + [] }}", "task t: sample 's1': prompt template: TypeError: unsupported operand type(s) for +: 'int' and 'list'"),
    ("{{ 1 // 0 }}", "task t: sample 's1': prompt template: ZeroDivisionError: integer division or modulo by zero"),
    ("{{ [1, 2, 3]|random }}", "task t: sample 's1': prompt template: TemplateAssertionError: No filter named 'random'."),
    ("{{ lipsum() }}", "task t: sample 's1': prompt template: UndefinedError: 'lipsum' is undefined"),
    ("{{ input|attr('format_map') }}", "task t: sample 's1': prompt template: SecurityError: a template turns a Python object "
                                       "(function) into text; a prompt is made of the row's values (its text would differ "
                                       "from one process to the next)"),
    ("{% for x in [1] %}{{ 'n' ~ loop }}{% endfor %}", "task t: sample 's1': prompt template: SecurityError: a template turns a "
                                                      "Python object (LoopContext) into text; a prompt is made of the row's "
                                                      "values (its text would differ from one process to the next)"),
])  # fmt: skip
def test_a_template_that_fails_or_is_not_a_function_of_its_row_is_one_line(template, line):
    """A runtime error was an "unexpected error" with a traceback (exit 1); a random filter, or
    a method's text holding its address, passed the check and then no run could complete
    (every prompt hashed differently from one process to the next)."""
    with pytest.raises(DataError) as info:
        check_renders([(template, {"input": "q"}, 50_000, "s1")], "task t")
    assert str(info.value) == line


def test_a_row_with_too_many_columns_or_too_long_a_line_is_refused_by_its_bound(tmp_path):
    """100,003 CSV columns took 1.8 GB and were blamed on the template; a 300 MB field was read
    whole. Each is now one line naming the bound, before rows are rendered."""
    from evalkit.benchmarks.task.benchmark import MAX_COLUMNS, _file_rows

    wide = tmp_path / "wide.csv"
    wide.write_text("id,q," + ",".join(f"c{i}" for i in range(MAX_COLUMNS)) + "\na,b," + ",".join("1" * MAX_COLUMNS) + "\n")
    with pytest.raises(DataError) as info:
        list(_file_rows(wide, 100))
    assert str(info.value) == f"benchmark.dataset.path: {wide}: row 1 has 1,002 columns, over the 1,000 a task's row may have"
    wide_jsonl = tmp_path / "wide.jsonl"
    wide_jsonl.write_text(json.dumps({f"c{i}": 1 for i in range(MAX_COLUMNS + 1)}) + "\n")
    with pytest.raises(DataError, match="row 1 has 1,001 columns, over the 1,000"):
        list(_file_rows(wide_jsonl, 100))


def test_a_csv_line_over_the_bound_is_refused_before_it_is_held(tmp_path, monkeypatch):
    import evalkit.benchmarks.task.benchmark as task_benchmark

    monkeypatch.setattr(task_benchmark, "MAX_LINE_BYTES", 1000)
    long = tmp_path / "long.csv"
    long.write_text("id,q\na," + "x" * 5000 + "\n")
    with pytest.raises(DataError) as info:
        list(task_benchmark._file_rows(long, 100))
    assert str(info.value) == f"benchmark.dataset.path: {long}:2: a line longer than 1,000 characters; not a row evalkit reads"
