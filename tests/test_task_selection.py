"""A selection costs only itself (issue 46, item 1): ``run.limit`` and ``run.sample_ids`` read
and check only the rows they select. Counted in rows read (the readers wrapped), never timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evalkit.benchmarks.task.benchmark as task_module
from evalkit.benchmarks.base import Selection
from evalkit.benchmarks.task import TaskBenchmark, TaskSettings
from evalkit.config import RunSettings
from evalkit.engine.plan import select_samples, selection_of
from evalkit.errors import ConfigError, DataError

N_ROWS = 200_000


def _spec(path: Path, **dataset) -> dict:
    return {"name": "t", "kind": "task", "dataset": {"path": str(path), "max_rows": N_ROWS,
            "fields": {"id": "id", "input": "q", "target": "a", "category": "c"}, **dataset},
            "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}]}  # fmt: skip


def _write(path: Path, n: int) -> Path:
    """``n`` rows; row 100 (``q99``) holds a prompt over ``prompt.max_chars`` and is the only
    one of category ``rare``."""
    with path.open("w") as fh:
        for i in range(n):
            q = "x" * 60_000 if i == 99 else f"{i}+1"
            fh.write(json.dumps({"id": f"q{i}", "q": q, "a": str(i + 1), "c": "rare" if i == 99 else "ab"[i % 2]}) + "\n")
    return path


@pytest.fixture(scope="module")
def big_jsonl(tmp_path_factory) -> Path:
    """200,000 rows (:func:`_write`): only ever read a few rows at a time here."""
    return _write(tmp_path_factory.mktemp("sel") / "big.jsonl", N_ROWS)


@pytest.fixture(scope="module")
def small_jsonl(tmp_path_factory) -> Path:
    """2,000 rows (:func:`_write`): read whole."""
    return _write(tmp_path_factory.mktemp("sel") / "small.jsonl", 2_000)


@pytest.fixture
def counted(monkeypatch) -> dict[str, int]:
    """Rows the task's JSONL and Parquet readers handed out, counted."""
    seen = {"rows": 0}

    def counting(reader):
        def wrapped(*args, **kwargs):
            for item in reader(*args, **kwargs):
                seen["rows"] += 1
                yield item

        return wrapped

    monkeypatch.setattr(task_module, "iter_records", counting(task_module.iter_records))
    monkeypatch.setattr(task_module, "iter_parquet", counting(task_module.iter_parquet))
    return seen


def test_a_limit_reads_only_the_rows_it_takes(big_jsonl, counted):
    bench = TaskBenchmark(TaskSettings(**_spec(big_jsonl)))
    samples = bench.load_selection(Selection(first=5))
    assert [s.id for s in samples] == ["q0", "q1", "q2", "q3", "q4"]
    assert counted["rows"] == 5
    # the fingerprint says what it covers: the first 5 rows, not the file
    assert list(bench.data_fingerprints()) == [f"{big_jsonl}[:5]"]
    bench.check_selection(samples)  # the five prompts render; row 100's is never rendered


def test_the_pre_run_check_reads_only_the_limit_and_a_whole_read_still_checks_every_row(small_jsonl, counted):
    bench = TaskBenchmark(TaskSettings(**_spec(small_jsonl, filter={"c": "a"}), metrics={"weights": {"zz": 1.0}}))
    with pytest.raises(ConfigError, match="no sample of .* has category 'zz'"):
        bench.check()  # read whole: every category is known, so a weight naming none is refused
    counted["rows"] = 0
    bench.check(Selection(first=3))  # stopped early: the categories are not all known, nothing refused
    assert counted["rows"] == 5  # rows 0, 2, 4 pass the filter: 5 read, none further


def test_sample_ids_keep_only_their_rows_and_check_only_what_is_sent(small_jsonl, counted):
    bench = TaskBenchmark(TaskSettings(**_spec(small_jsonl)))
    samples = bench.load_selection(Selection(ids=frozenset({"q1500", "q3"})))
    assert [s.id for s in samples] == ["q3", "q1500"]  # file order; the engine puts them in the ids' order
    assert counted["rows"] == 2_000
    assert list(bench.data_fingerprints()) == [str(small_jsonl)]  # read whole: the file's fingerprint
    bench.check_selection(samples)
    bad = bench.load_selection(Selection(ids=frozenset({"q3", "q99"})))
    with pytest.raises(DataError, match="q99"):
        bench.check_selection(bad)  # the one prompt over the bound is sent, so it is refused


def test_the_check_goes_to_its_child_a_chunk_at_a_time_and_still_names_the_bad_sample(small_jsonl, monkeypatch):
    """Render jobs hold their sample's data, so a million samples go to the bounded child
    ``CHECK_CHUNK`` at a time (issue 46 item 3): each sample is rendered once, in order, and
    the over-bound prompt of row 100 (in the 4th chunk of 30) is refused by name."""
    monkeypatch.setattr(task_module, "CHECK_CHUNK", 30)
    calls: list[list[str]] = []
    real = task_module.check_renders

    def counting(jobs, where):
        calls.append(list(dict.fromkeys(job[3] for job in jobs)))  # a sample's renders (template, answer template): its id once
        return real(jobs, where)

    monkeypatch.setattr(task_module, "check_renders", counting)
    bench = TaskBenchmark(TaskSettings(**_spec(small_jsonl)))
    samples = bench.load_selection(Selection(first=99))
    bench.check_selection(samples)
    assert [len(c) for c in calls] == [30, 30, 30, 9] and [sid for c in calls for sid in c] == [f"q{i}" for i in range(99)]
    calls.clear()
    with pytest.raises(DataError, match="q99"):
        bench.check_selection(bench.load_selection(Selection(first=120)))
    assert len(calls) == 4  # the fourth chunk holds row 100: refused there, nothing after it rendered


def test_an_unknown_id_is_named_with_an_id_the_data_has(small_jsonl, tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("# wanted\nq7\nnope\n")
    run = RunSettings(sample_ids_file=ids, limit=1)
    assert selection_of(run) == Selection(ids=frozenset({"q7", "nope"}))  # ids: the limit applies after them
    assert selection_of(RunSettings(limit=4)) == Selection(first=4)
    bench = TaskBenchmark(TaskSettings(**_spec(small_jsonl)))
    loaded = bench.load_selection(selection_of(run))
    with pytest.raises(ConfigError) as info:
        select_samples(loaded, run, example=bench.example_id)
    assert str(info.value) == "run.sample_ids: unknown sample id 'nope' (ids look like 'q0')"


def test_a_limit_with_sample_ids_takes_the_first_n_of_the_ids_in_their_order(small_jsonl, tmp_path):
    """``run.sample_ids`` / ``run.sample_ids_file`` select first (the ids in the order given,
    ``sample_ids`` then the file's lines, a repeated id once), then ``run.limit`` keeps the first
    N of them — never the first N rows of the data (docs/running.md)."""
    ids = tmp_path / "ids.txt"
    ids.write_text("q40\nq5\nq1500\nq5\n")
    bench = TaskBenchmark(TaskSettings(**_spec(small_jsonl)))
    for run, expected in ((RunSettings(sample_ids=["q900", "q2", "q700"], limit=2), ["q900", "q2"]),
                          (RunSettings(sample_ids_file=ids, limit=3), ["q40", "q5", "q1500"]),
                          (RunSettings(sample_ids=["q3"], sample_ids_file=ids, limit=3), ["q3", "q40", "q5"]),
                          (RunSettings(sample_ids=["q900", "q2"], limit=10), ["q900", "q2"])):  # fmt: skip
        selected = select_samples(bench.load_selection(selection_of(run)), run, example=bench.example_id)
        assert [s.id for s in selected] == expected, run


def test_parquet_is_streamed_a_batch_at_a_time(tmp_path, counted):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "big.parquet"
    rows = [{"id": f"q{i}", "q": f"{i}+1", "a": str(i + 1), "c": "a"} for i in range(5_000)]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=500)
    bench = TaskBenchmark(TaskSettings(**_spec(path)))
    assert [s.id for s in bench.load_selection(Selection(first=3))] == ["q0", "q1", "q2"]
    assert counted["rows"] == 3
    assert len(bench.load_selection(None)) == 5_000


def test_a_fixed_system_prompt_is_rendered_once_and_one_that_reads_the_row_per_sample(small_jsonl):
    spec = _spec(small_jsonl)
    fixed = TaskBenchmark(TaskSettings(**{**spec, "prompt": {"template": "{{ input }}", "system": "Answer."}}))
    samples = fixed.load_selection(Selection(first=50))
    jobs = fixed.render_jobs(samples)
    assert [j[0] for j in jobs].count("Answer.") == 1 and [j[0] for j in jobs].count("{{ input }}") == 50
    assert {fixed.build(s, 0).messages[0]["content"] for s in samples} == {"Answer."}
    per_row = TaskBenchmark(TaskSettings(**{**spec, "prompt": {"template": "{{ input }}", "system": "Category {{ c }}."}}))
    samples = per_row.load_selection(Selection(first=4))
    assert [j[0] for j in per_row.render_jobs(samples)].count("Category {{ c }}.") == 4
    assert [per_row.build(s, 0).messages[0]["content"] for s in samples] == ["Category a.", "Category b.", "Category a.", "Category b."]
