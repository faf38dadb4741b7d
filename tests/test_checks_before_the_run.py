"""Checks before the run: task files, data, sample ids and settings that were a traceback,
minutes of CPU, a run that could never finish, or a lost headline (found by an adversarial
pass over the guide) are now one line before the run. In-process: the task's own checks."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from evalkit.benchmarks.task import TaskSettings
from evalkit.benchmarks.task.template import TemplateRefused, template_variables
from evalkit.engine.plan import MAX_SAMPLE_IDS_FILE_BYTES, load_unique, select_samples
from evalkit.errors import ConfigError, DataError
from evalkit.journal import MAX_SAMPLE_ID_CHARS
from evalkit.types import Sample
from tests.test_tasks import _task


@pytest.mark.parametrize("template", ["{{ 2 ** 100000 }}{{ input }}", "{{ (7 ** 30000000) % 10 }}{{ input }}"])
def test_a_constant_power_is_never_computed_while_the_template_is_read(template: str):
    # a plain sandbox's compiler folds the constant: a ValueError traceback (2**100000 has
    # over 4,300 digits) or minutes of CPU (7**30000000) before any bound is looked at
    assert template_variables(template, 50_000, "benchmark.prompt.template") == {"input"}


def test_a_task_whose_template_holds_a_constant_power_is_refused_in_one_line(tmp_path: Path):
    bench = _task(tmp_path, [{"input": "q", "target": "t"}], prompt={"template": "{{ 2 ** 100000 }}{{ input }}"})
    with pytest.raises(TemplateRefused) as info:
        bench.check()
    assert "exponent 100000 is over the bound" in str(info.value) and "\n" not in str(info.value)


def test_a_lone_surrogate_in_the_data_is_one_line_naming_the_file_and_row(tmp_path: Path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"input": "fine", "target": "a"}\n{"input": "q\\ud800", "target": "a"}\n', encoding="utf-8")
    bench = _task(tmp_path, [], dataset={"path": str(data)})
    data.write_text('{"input": "fine", "target": "a"}\n{"input": "q\\ud800", "target": "a"}\n', encoding="utf-8")
    with pytest.raises(DataError) as info:
        bench.load()
    assert f"{data}: row 2 holds a lone surrogate" in str(info.value) and "\n" not in str(info.value)


class _Loaded:
    name = "t"

    def __init__(self, ids: list[str]):
        self.samples = [Sample(id=i, subset="all", data={}) for i in ids]

    def load(self) -> list[Sample]:
        return self.samples


def test_a_sample_id_longer_than_the_journal_keeps_is_refused_before_the_run():
    long_id = "y" * (MAX_SAMPLE_ID_CHARS + 1)
    with pytest.raises(DataError) as info:
        load_unique(_Loaded(["ok", long_id]))
    message = str(info.value)
    assert f"({MAX_SAMPLE_ID_CHARS + 1} characters) is longer than the journal's {MAX_SAMPLE_ID_CHARS}" in message
    assert len(message) < 400  # the id is cut, not repeated whole
    assert [s.id for s in load_unique(_Loaded(["ok", "y" * MAX_SAMPLE_ID_CHARS]))][0] == "ok"


def test_an_unknown_id_of_a_sample_ids_file_is_named_cut_short_and_the_file_is_bounded(tmp_path: Path):
    ids = tmp_path / "ids.txt"
    ids.write_text("z" * 100_000 + "\n", encoding="utf-8")
    run = SimpleNamespace(sample_ids=None, sample_ids_file=str(ids), limit=None)
    with pytest.raises(ConfigError) as info:
        select_samples(_Loaded(["a"]).samples, run)
    assert "(100000 characters)" in str(info.value) and len(str(info.value)) < 400
    with open(ids, "wb") as fh:
        fh.truncate(MAX_SAMPLE_IDS_FILE_BYTES + 1)
    with pytest.raises(ConfigError, match="67,108,865 bytes, over the 67,108,864 allowed for a sample-ids file"):
        select_samples(_Loaded(["a"]).samples, run)


@pytest.mark.parametrize("weights, expected", [
    ({"science": -1, "geo": 1}, "benchmark.metrics.weights.science: -1.0 is not a weight"),
    ({"science": math.nan, "geo": 1}, "benchmark.metrics.weights.science: nan is not a weight"),
    ({"science": math.inf, "geo": 1}, "benchmark.metrics.weights.science: inf is not a weight"),
    ({"science": 0, "geo": 0}, "benchmark.metrics.weights: the weights sum to 0"),
])  # fmt: skip
def test_weights_that_cannot_weigh_are_refused_not_a_lost_headline(weights: dict, expected: str):
    with pytest.raises(ValidationError, match=expected):
        TaskSettings(name="t", dataset={"path": "d.jsonl"}, prompt={"template": "x"}, scorers=[{"kind": "exact_match"}],
                     metrics={"weights": weights})  # fmt: skip


def test_prompt_max_chars_is_bounded_so_that_it_bounds_the_renderer():
    with pytest.raises(ValidationError, match="less than or equal to 4000000"):
        TaskSettings(name="t", dataset={"path": "d.jsonl"}, prompt={"template": "x", "max_chars": 10**12},
                     scorers=[{"kind": "exact_match"}])  # fmt: skip


def test_a_data_path_that_is_a_folder_is_not_called_missing(tmp_path: Path):
    (tmp_path / "dir.jsonl").mkdir()
    bench = _task(tmp_path, [{"input": "q", "target": "t"}], dataset={"path": str(tmp_path / "dir.jsonl")})
    with pytest.raises(DataError, match="is not a regular file"):
        bench.load()


def test_a_misspelt_generation_key_gets_a_did_you_mean():
    from evalkit.config import _generation_layer

    with pytest.raises(ConfigError, match=r"benchmark.generation.max_tokns: unknown key; did you mean benchmark.generation.max_tokens\?"):
        _generation_layer({"max_tokns": 3}, "benchmark.generation")


def test_a_negative_shots_count_names_its_key():
    from evalkit.compose import quote_numeric_groups

    assert quote_numeric_groups(["shots=-1"]) == ["shots.n=-1"]


def test_a_plugin_whose_data_file_is_missing_is_one_data_line_not_a_crash():
    class Missing(_Loaded):
        def load(self) -> list[Sample]:
            open("/nonexistent/evalkit/other.jsonl", encoding="utf-8")
            return []

    with pytest.raises(DataError) as info:
        load_unique(Missing([]))
    assert str(info.value).startswith("t: its data cannot be read: /nonexistent/evalkit/other.jsonl (FileNotFoundError")
