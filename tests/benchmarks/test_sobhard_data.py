"""SOBHard data and prompts: loading and integrity, template rendering, session replay,
the shot budget, demonstrations and the offline Hub path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from evalkit.benchmarks.sobhard.data import Row
from evalkit.benchmarks.sobhard.prompts import render
from evalkit.errors import ConfigError, DataError


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def fixtures(shared_data_dir: Path) -> Path:
    return shared_data_dir / "sobhard"


@pytest.fixture(scope="module")
def loaded(fixtures: Path) -> tuple[SOBHard, dict]:
    bench = SOBHard(SOBHardSettings(data_dir=fixtures))
    return bench, {s.id: s for s in bench.load()}


def _copy(fixtures: Path, tmp_path: Path, edit_test=None, edit_shots=None) -> Path:
    """A private copy of the fixture splits (in tmp_path, never in the repo) with edits."""
    out = tmp_path / "data"
    out.mkdir()
    for name, edit in (("test.jsonl", edit_test), ("shots.jsonl", edit_shots)):
        rows = _rows(fixtures / name)
        if edit is not None:
            rows = edit(rows)
        (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return out


def test_load_ids_subsets_and_fingerprints(loaded, fixtures):
    bench, samples = loaded
    assert list(samples) == [str(i) for i in range(1, 23)]
    assert samples["11"].subset == "session/easy" and samples["7"].subset == "diff/easy"
    fps = bench.data_fingerprints()
    import hashlib

    assert fps["sobhard/test"] == hashlib.sha256((fixtures / "test.jsonl").read_bytes()).hexdigest()
    assert set(fps) == {"sobhard/test", "sobhard/shots"}
    assert len(bench.prompt_fingerprint()) == 64


def test_subset_selection_by_family_and_cell(fixtures):
    bench = SOBHard(SOBHardSettings(data_dir=fixtures, subsets=["diff", "merge/medium"]))
    assert [s.id for s in bench.load()] == ["7", "18", "20"]
    with pytest.raises(ValueError, match="unknown SOBHard subsets"):
        SOBHardSettings(data_dir=fixtures, subsets=["nope"])


def test_non_session_prompt_is_one_user_message_with_the_rendered_template(loaded, fixtures):
    bench, samples = loaded
    raw = _rows(fixtures / "test.jsonl")[0]
    req = bench.build(samples["1"], 0)
    assert req.params == {}
    assert len(req.messages) == 1 and req.messages[0]["role"] == "user"
    expected = raw["instruction"]
    for slot in ("task", "input_data", "format", "question"):
        expected = expected.replace("{" + slot + "}", raw["inputs"][slot])
    assert req.messages[0]["content"] == expected
    assert "Входные данные:\n" + raw["inputs"]["input_data"] in expected


def test_render_is_literal_slot_replacement():
    row = Row.model_validate({
        "instruction": "A\n{task}\n{input_data}\n{format}\n{question}",
        "inputs": {"task": "{question}", "input_data": "x: ${count} {{y}} {format}", "format": "{", "question": "q}"},
        "meta": {"id": 1, "reference": "{}", "categories": {"family": "convert", "difficulty": "easy", "target_format": "json"}},
    })  # fmt: skip
    assert render(row) == "A\n{question}\nx: ${count} {{y}} {format}\n{\nq}"


@pytest.mark.parametrize("sid,dialogue,k", [("11", "dlg-easy-01", 3), ("22", "dlg-medium-01", 4)])
def test_session_history_has_k_minus_1_pairs_before_the_graded_turn(loaded, fixtures, sid, dialogue, k):
    bench, samples = loaded
    shots = sorted((r for r in _rows(fixtures / "shots.jsonl") if r["meta"]["dialogue_id"] == dialogue),
                   key=lambda r: r["meta"]["turn_index"])  # fmt: skip
    msgs = bench.build(samples[sid], 0).messages
    assert len(msgs) == 2 * (k - 1) + 1
    assert [m["role"] for m in msgs] == ["user", "assistant"] * (k - 1) + ["user"]
    for i, shot in enumerate(shots):
        assert msgs[2 * i + 1]["content"] == shot["outputs"]  # the fenced reference, verbatim
        assert shot["inputs"]["question"] in msgs[2 * i]["content"]
    assert shots[0]["inputs"]["input_data"] in msgs[0]["content"]  # turn 1 carries the document
    graded = next(r for r in _rows(fixtures / "test.jsonl") if str(r["meta"]["id"]) == sid)
    assert msgs[-1]["content"].endswith(graded["inputs"]["question"])


def test_other_families_stay_single_turn_with_a_shot_budget(loaded):
    bench, samples = loaded
    assert len(bench.build(samples["4"], 4).messages) == 1


def test_shot_budget_smaller_than_the_conversation_is_an_error(loaded, fixtures):
    bench, samples = loaded
    assert len(bench.build(samples["22"], 3).messages) == 7
    with pytest.raises(ConfigError, match="needs 3 replayed turns but the shot budget is 2"):
        bench.build(samples["22"], 2)
    small = SOBHard(SOBHardSettings(data_dir=fixtures, max_replayed_turns=2))
    small_samples = {s.id: s for s in small.load()}
    assert len(small.build(small_samples["11"], 0).messages) == 5
    with pytest.raises(ConfigError, match="shot budget is 2"):
        small.build(small_samples["22"], 0)


def test_demonstrations_only_when_enabled(fixtures):
    bench = SOBHard(SOBHardSettings(data_dir=fixtures, demos=True))
    samples = {s.id: s for s in bench.load()}
    msgs = bench.build(samples["1"], 4).messages
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 4 + ["user"]
    assert msgs[1]["content"].startswith("```yaml\n- name: Afghanistan")
    assert len(bench.build(samples["22"], 4).messages) == 7  # sessions get their history, not demos
    with pytest.raises(ConfigError, match="6 demonstrations asked, the shots split has 5"):
        bench.build(samples["1"], 6)


def test_missing_earlier_turn_stops_loading(fixtures, tmp_path):
    data = _copy(fixtures, tmp_path, edit_shots=lambda rows: [r for r in rows if r["meta"]["id"] != 2012])
    with pytest.raises(DataError, match=r"dlg-medium-01.*1\.\.3.*\[1, 3\]"):
        SOBHard(SOBHardSettings(data_dir=data)).load()


def test_reference_hash_mismatch_is_a_data_error(fixtures, tmp_path):
    def edit(rows):
        rows[4]["meta"]["reference"] += " "
        return rows

    data = _copy(fixtures, tmp_path, edit_test=edit)
    with pytest.raises(DataError, match="id=5.*reference_sha256"):
        SOBHard(SOBHardSettings(data_dir=data)).load()


def test_unparseable_reference_is_a_data_error(fixtures, tmp_path):
    import hashlib

    def edit(rows):
        rows[0]["meta"]["reference"] = "[not json"
        rows[0]["meta"]["reference_sha256"] = hashlib.sha256(b"[not json").hexdigest()
        return rows

    data = _copy(fixtures, tmp_path, edit_test=edit)
    with pytest.raises(DataError, match="id=1.*does not parse as json"):
        SOBHard(SOBHardSettings(data_dir=data)).load()


def test_parquet_directory_loads_the_same_rows(fixtures, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "pq"
    (out / "data").mkdir(parents=True)
    for split in ("test", "shots"):
        pq.write_table(pa.Table.from_pylist(_rows(fixtures / f"{split}.jsonl")), out / "data" / f"{split}-00000-of-00001.parquet")
    bench = SOBHard(SOBHardSettings(data_dir=out))
    samples = bench.load()
    assert [s.id for s in samples] == [str(i) for i in range(1, 23)]
    assert bench.score(samples[10], bench.reference_output(samples[10])).scores["sample_pass"] == 1.0


def test_instruction_index_resolved_from_dataset_meta(fixtures, tmp_path):
    templates: list[str] = []

    def edit(rows):
        for r in rows:
            if r["instruction"] not in templates:
                templates.append(r["instruction"])
            r["instruction"] = templates.index(r["instruction"])
        return rows

    data = _copy(fixtures, tmp_path, edit_test=edit, edit_shots=edit)
    (data / "dataset_meta.json").write_text(json.dumps({"prompts": templates}, ensure_ascii=False), encoding="utf-8")
    bench = SOBHard(SOBHardSettings(data_dir=data))
    samples = {s.id: s for s in bench.load()}
    ref = SOBHard(SOBHardSettings(data_dir=fixtures))
    ref_samples = {s.id: s for s in ref.load()}
    assert bench.build(samples["22"], 0).messages == ref.build(ref_samples["22"], 0).messages


def test_no_data_source_and_offline_hub_are_clear_errors(monkeypatch):
    with pytest.raises(DataError, match="benchmark.data_dir"):
        SOBHard(SOBHardSettings()).load()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets.config as dcfg

        monkeypatch.setattr(dcfg, "HF_HUB_OFFLINE", True, raising=False)
    except ModuleNotFoundError:
        pass
    with pytest.raises(DataError, match="cannot load split 'test' of Hugging Face dataset 'no-such-org/sobhard'|needs the 'datasets' package"):
        SOBHard(SOBHardSettings(dataset="no-such-org/sobhard")).load()


def test_missing_data_dir_is_rejected_by_settings(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        SOBHardSettings(data_dir=tmp_path / "absent")
