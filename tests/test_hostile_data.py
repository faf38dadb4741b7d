"""Hostile datasets (issue 25 item 7 and defect 11): deeply nested JSON, a huge line and
wrong types in any benchmark's data are one line naming the file and the record (exit 2),
never a RecursionError, a MemoryError or a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalkit.benchmarks import get_benchmark_class
from evalkit.errors import DataError

#: benchmark → (file holding its records, settings given the copied data directory)
LAYOUTS = {
    "acebench": ("data_all/data_en/data_normal_atom_bool.json", lambda d: {"data_dir": d, "subsets": ["normal_atom_bool"]}),
    "sobhard": ("test.jsonl", lambda d: {"data_dir": d}),
    "ke": ("pilot.jsonl", lambda d: {"data_dir": d, "pilot_path": "pilot.jsonl", "icl_path": "icl_examples.jsonl"}),
}


def _copy(shared_data_dir: Path, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(shared_data_dir / name, dst)
    for path in dst.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def _load_error(name: str, data: Path) -> str:
    cls = get_benchmark_class(name)
    with pytest.raises(DataError) as info:
        cls(cls.settings_model(name=name, **LAYOUTS[name][1](data))).load()
    line = str(info.value)
    assert "\n" not in line and len(line) < 600, line
    return line


def _replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[number - 1] = text
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("depth", [250, 100_000])
def test_deeply_nested_records_are_one_line(shared_data_dir, tmp_path, name, depth):
    data = _copy(shared_data_dir, name, tmp_path)
    victim = data / LAYOUTS[name][0]
    _replace_line(victim, 2, json.dumps({"id": "x", "deep": "@"}).replace('"@"', "[" * depth + "]" * depth))
    assert _load_error(name, data).startswith(f"{victim}:2: JSON nested too deeply")


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_line_over_the_bound_is_refused_before_it_is_read_whole(shared_data_dir, tmp_path, monkeypatch, name):
    """The bound is 64 MiB (a 1.4 GB line once ended in MemoryError); it is lowered here so
    the test writes 2 MiB, not 65."""
    import evalkit.untrusted

    assert evalkit.untrusted.MAX_LINE_BYTES == 64 * 2**20
    monkeypatch.setattr(evalkit.untrusted, "MAX_LINE_BYTES", 2**20)
    data = _copy(shared_data_dir, name, tmp_path)
    victim = data / LAYOUTS[name][0]
    _replace_line(victim, 3, json.dumps({"id": "x", "pad": "a" * (2 * 2**20)}))
    assert _load_error(name, data) == f"{victim}:3: line longer than 1 MiB; not a record evalkit reads"


@pytest.mark.parametrize("field", ["task_meta", "checks"])
@pytest.mark.parametrize("depth", [250, 100_000])
def test_sobhard_task_meta_nested_too_deeply_is_one_line(shared_data_dir, tmp_path, field, depth):
    """task_meta / checks are JSON text inside the record: decoded, they once raised RecursionError."""
    data = _copy(shared_data_dir, "sobhard", tmp_path)
    lines = (data / "test.jsonl").read_text(encoding="utf-8").split("\n")
    row = json.loads(lines[0])
    row["meta"][field] = json.dumps({"a": 1}).replace("1", "[" * depth + "]" * depth)
    lines[0] = json.dumps(row, ensure_ascii=False)
    (data / "test.jsonl").write_text("\n".join(lines), encoding="utf-8")
    line = _load_error("sobhard", data)
    assert f"row id={row['meta']['id']}: meta.{field}:" in line and "nested too deeply" in line


@pytest.mark.parametrize(
    "name, victim, mutate, message",
    [
        ("sobhard", "test.jsonl", lambda r: r.update(meta=[1, 2]), "row id=#1: meta: Input should be a valid dictionary"),
        ("sobhard", "test.jsonl", lambda r: r["inputs"].update(task=["a"]), "inputs.task: Input should be a valid string"),
        ("acebench", "data_all/data_en/data_agent_multi_turn.json", lambda r: r.update(involved_classes=7),
         "line 1: 'involved_classes' must be a list of class names"),
        ("acebench", "data_all/data_en/data_agent_multi_turn.json", lambda r: r.update(initial_config=[1]),
         "line 1: 'involved_classes' must be a list of class names and 'initial_config' an object"),
    ],
)
def test_wrong_types_in_a_record_are_one_line(shared_data_dir, tmp_path, name, victim, mutate, message):
    data = _copy(shared_data_dir, name, tmp_path)
    path = data / victim
    lines = path.read_text(encoding="utf-8").split("\n")
    row = json.loads(lines[0])
    mutate(row)
    lines[0] = json.dumps(row, ensure_ascii=False)
    path.write_text("\n".join(lines), encoding="utf-8")
    cls = get_benchmark_class(name)
    settings = LAYOUTS[name][1](data)
    if victim.endswith("agent_multi_turn.json"):
        settings["subsets"] = ["agent_multi_turn"]
    with pytest.raises(DataError) as info:
        cls(cls.settings_model(name=name, **settings)).load()
    assert message in str(info.value) and "\n" not in str(info.value)
