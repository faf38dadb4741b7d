"""A selection of a million samples held packed (issue 46 item 3: the driver's memory flat in
the number of samples): the samples (:class:`evalkit.types.PackedSamples`), the request
hashes (:class:`evalkit.engine.plan.RequestHashes`) and finalize's row views
(:class:`evalkit.journal.PackedRows`) read back exactly what was put in, and a run's
summary from packed views is the summary from whole rows."""

from __future__ import annotations

import itertools
import json
import pickle

import pytest

from evalkit.engine.plan import RequestHashes
from evalkit import journal as journal_module
from evalkit.journal import BlockRows, PackedRow, PackedRows, SlotView, packed_summary_view, read_journal, summary_view
from evalkit.types import PackedSamples, Sample, sample_keys, sha256_hex
from tests.support.reachable import held


def _samples(n: int) -> list[Sample]:
    return [Sample(f"q{i}", "abcd"[i % 4], {"id": f"q{i}", "input": f"What is {i} + 1?", "target": str(i + 1), "n": i,
                                             "x": 0.1 * i, "big": 10**30 + i, "ok": i % 2 == 0, "none": None,
                                             "list": [1, "a", {"b": [None, True]}], "zh": "函数调用\ud800"})  # fmt: skip
            for i in range(n)]


def test_packed_samples_read_back_equal_in_order_with_one_string_per_subset():
    samples = _samples(50)
    packed = PackedSamples(samples)
    assert len(packed) == 50 and list(packed) == samples
    assert packed[7] == samples[7] and packed[-1] == samples[-1]
    assert [json.dumps(s.data) for s in packed] == [json.dumps(s.data) for s in samples]  # key order and float bits kept
    assert isinstance(packed[10:20], PackedSamples) and list(packed[10:20]) == samples[10:20]
    assert list(packed[::-7]) == samples[::-7]
    with pytest.raises(IndexError):
        packed[50]
    ids, subsets = sample_keys(packed)
    assert ids == [s.id for s in samples] and len({id(s) for s in subsets}) == 4


def test_packed_samples_across_compressed_blocks_read_back_in_any_order(monkeypatch):
    """Blocks of 4 samples here: full blocks compressed, the last one open, samples marshal
    cannot hold at a block's edge; reads in and out of order, backwards and sliced."""
    monkeypatch.setattr(PackedSamples, "BLOCK", 4)
    samples = _samples(23)
    samples[3] = Sample("odd", "all", {"when": object()})
    samples[8] = Sample("odd2", "all", {"when": object()})
    packed = PackedSamples(samples)
    assert len(packed._blocks) == 5 and list(packed) == samples and packed[3] is samples[3] and packed[8] is samples[8]
    order = [22, 0, 13, 5, 21, 4, 12, 1, 20, 9, 9, 7, 16]
    assert [packed[i] for i in order] == [samples[i] for i in order] and list(reversed(packed)) == samples[::-1]
    assert list(packed[2:19:3]) == samples[2:19:3] and packed.nbytes() < sum(len(json.dumps(s.data)) for s in samples[9:])
    fresh = PackedSamples(samples[:3] + samples[4:8] + samples[9:])
    before = pickle.dumps(fresh)
    fresh[0], fresh[13], fresh.id_positions()  # noqa: B018 - reads fill its caches
    assert pickle.dumps(fresh) == before and list(pickle.loads(before)) == list(fresh)  # a worker's copy, a digest: the same bytes


def test_a_packed_sample_is_a_new_object_each_time_and_its_changes_are_not_kept():
    packed = PackedSamples(_samples(3))
    first = packed[0]
    first.data["target"] = "changed"
    assert packed[0].data["target"] == "1" and packed[0] is not packed[0]


def test_data_marshal_cannot_hold_and_subclasses_are_kept_as_they_are():
    class Tagged(Sample):
        pass

    odd = Sample("o", "all", {"when": object()})
    tagged = Tagged("t", "all", {"a": 1})
    packed = PackedSamples([Sample("a", "all", {"k": 1}), odd, tagged])
    assert packed[1] is odd and packed[2] is tagged and type(packed[2]) is Tagged
    assert packed[0] == Sample("a", "all", {"k": 1})


def test_request_hashes_are_the_dict_they_replace():
    ids = [f"s{i}" for i in range(40)]
    want = {(sid, epoch): sha256_hex(f"{sid}/{epoch}") for epoch in range(3) for sid in ids}
    hashes = RequestHashes(ids, 3)
    for (sid, epoch), h in want.items():
        hashes.set(ids.index(sid), epoch, h)
    assert dict(hashes) == want and list(hashes) == list(want) and len(hashes) == 120
    assert hashes[("s3", 2)] == want[("s3", 2)] and hashes.get(("s3", 2)) == want[("s3", 2)]
    for absent in [("s3", 3), ("s3", -1), ("nope", 0), ("s3", True), ("s3", 1.0), "s3", ("s3",), None, ("s3", 0, 1)]:
        assert absent not in hashes and hashes.get(absent) is None  # type: ignore[arg-type]
    assert {k: v for k, v in hashes.items() if k[0] == "s1"} == {k: v for k, v in want.items() if k[0] == "s1"}
    assert hashes.canonical_id("".join(["s", "5"])) is ids[5] and hashes.canonical_id("zz") == "zz"


def test_packed_rows_read_back_the_summary_view(tmp_path):
    rows = [{"sample_id": f"s{i}", "epoch": 0, "subset": "a", "status": "ok", "scores": {"acc": i % 2, "f": 0.1 * i},
             "output": "long text " * 10, "request_hash": f"h{i}", "usage": {"prompt_tokens": 3}} for i in range(6)]  # fmt: skip
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    hashes = {(f"s{i}", 0): f"h{i}" for i in range(6)}
    packed = read_journal(path, hashes, view=packed_summary_view)
    plain = read_journal(path, hashes, view=summary_view)
    assert all(isinstance(r, PackedRow) for r in packed.rows.values())
    assert {k: r.unpack() for k, r in packed.rows.items()} == plain.rows
    assert packed.rows[("s1", 0)].get("scores") == {"acc": 1, "f": 0.1}
    epochs = packed.epochs([f"s{i}" for i in reversed(range(6))], 1)
    assert isinstance(epochs[0], PackedRows) and [r["sample_id"] for r in epochs[0]] == [f"s{i}" for i in reversed(range(6))]
    assert list(epochs[0]) == list(plain.epochs([f"s{i}" for i in reversed(range(6))], 1)[0])
    chained = PackedRows.chained(epochs + epochs)
    assert len(chained) == 12 and chained[11] == epochs[0][5] and list(chained[2:4]) == list(epochs[0])[2:4]
    assert chained[0] is not chained[0]  # unpacked anew: a reader's change is its own
    assert epochs[0] + [{"x": 1}] == [*epochs[0], {"x": 1}] and [{"x": 1}] + epochs[0] == [{"x": 1}, *epochs[0]]
    assert list(itertools.islice(iter(chained), 2)) == list(epochs[0])[:2]


def test_finalize_reads_rows_into_the_plans_slots_with_the_rules_of_a_dict(tmp_path):
    """With the plan's hashes and a view (finalize), the journal's rows and first lines are
    held by slot (:class:`evalkit.journal.SlotRows`): the same rows, stale/unselected lines,
    duplicates and conflicts as a dict-keyed read."""
    ids = [f"s{i}" for i in range(5)]
    hashes = RequestHashes(ids, 2)
    for i in range(5):
        for e in range(2):
            hashes.set(i, e, sha256_hex(f"{i}/{e}"))
    def row(i, e, acc, h=None):
        return {"sample_id": f"s{i}", "epoch": e, "subset": "a", "status": "ok", "scores": {"acc": acc},
                "request_hash": h or sha256_hex(f"{i}/{e}")}  # fmt: skip
    lines = [row(3, 1, 1), row(0, 0, 0), row(9, 0, 1), row(2, 0, 1, h="0" * 64), row(0, 0, 1), row(0, 0, 0), row(1, 5, 1), row(4, 0, 1)]
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    slotted = read_journal(path, hashes, view=summary_view)
    plain = read_journal(path, dict(hashes), view=summary_view)
    assert type(slotted.rows).__name__ == "SlotRows" and isinstance(plain.rows, dict)
    assert dict(slotted.rows) == plain.rows and len(slotted.rows) == 3
    assert list(slotted.rows) == [("s0", 0), ("s4", 0), ("s3", 1)]  # slot order: epoch, then selection
    assert dict(slotted.lines) == plain.lines == {("s3", 1): 1, ("s0", 0): 2, ("s4", 0): 8}
    for name in ("stale", "unselected", "duplicates", "conflicts"):
        assert getattr(slotted, name) == getattr(plain, name), name
    assert slotted.conflicts == [("s0", 2, 5, {"acc": 0}, {"acc": 1})]
    assert ("s1", 0) not in slotted.rows and ("s9", 0) not in slotted.rows and ("s0", 0) in slotted.rows
    assert slotted.epochs(ids, 2) == plain.epochs(ids, 2)
    with pytest.raises(KeyError):
        slotted.rows[("s9", 0)] = {}
    del slotted.rows[("s0", 0)]
    assert len(slotted.rows) == 2 and ("s0", 0) not in slotted.rows


def test_a_yaml_tasks_plan_holds_no_sample_object_and_its_items_are_the_rows(tmp_path):
    """The plan of a YAML task holds its selection packed: no :class:`Sample` object is
    reachable from it (the offline model makes each answer from the packed selection when asked), and the work
    items, hashes and fingerprint are those of the rows."""
    from evalkit.compose import compose, resolve
    from evalkit.engine.plan import data_fingerprint, prepare
    from evalkit.specs import build

    _, cfg = resolve(compose(["benchmark=arith_mini", "model=reference", "tracking=none", f"run.dir={tmp_path / 'run'}", "run.repeats=2"]))
    plan = prepare(build(cfg))
    assert isinstance(plan.samples, PackedSamples) and isinstance(plan.hashes, RequestHashes)
    assert held(plan, Sample) == 0
    items = list(plan.units)
    assert [u.key for u in items] == list(plan.hashes) and len(items) == 2 * len(plan.samples)
    assert {u.key: u.request.request_hash(plan.models.model_id) for u in items} == dict(plan.hashes)
    assert [u.sample for u in items[: len(plan.samples)]] == list(plan.samples)
    assert data_fingerprint(plan.samples) == data_fingerprint(list(plan.samples))


def test_finalize_rows_held_in_compressed_blocks_read_back_as_a_dict_read(tmp_path, monkeypatch):
    """Finalize's read (the plan's hashes, the packed view) holds rows in compressed blocks of
    slots (:class:`evalkit.journal.BlockRows`, 4 slots a block here): out of journal order, a
    duplicate and a conflict, a row set and one deleted after their block was compressed, an
    incomplete block and an epoch without rows: every row, epoch, slice and index read back
    equal to a dict-keyed read, each a new dict."""
    monkeypatch.setattr(journal_module, "ROWS_PER_BLOCK", 4)
    ids = [f"s{i}" for i in range(10)]
    hashes = RequestHashes(ids, 3)
    for i in range(10):
        for e in range(3):
            hashes.set(i, e, sha256_hex(f"{i}/{e}"))

    def row(i, e, acc, **extra):
        return {"sample_id": f"s{i}", "epoch": e, "subset": "ab"[i % 2], "status": "ok", "scores": {"acc": acc, "f": i / 7},
                "request_hash": sha256_hex(f"{i}/{e}"), "output": "text " * i, "usage": {"prompt_tokens": i}, **extra}  # fmt: skip

    order = [(i, 0) for i in (3, 1, 0, 2, 7, 9, 4, 5, 6, 8)] + [(i, 1) for i in (0, 2, 1)]  # epoch 1 partly, epoch 2 none
    lines = [row(i, e, (i + e) % 2) for i, e in order] + [row(1, 0, 0), row(2, 0, 0, note="函数\ud800")]
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    blocks = read_journal(path, hashes, view=packed_summary_view)
    plain = read_journal(path, dict(hashes), view=summary_view)
    assert isinstance(blocks.rows, BlockRows) and len(blocks.rows) == len(plain.rows) == 13
    assert dict(blocks.rows) == plain.rows and list(blocks.rows) == sorted(plain.rows, key=lambda k: (k[1], ids.index(k[0])))
    assert blocks.duplicates == plain.duplicates == [(("s1", 0), 14), (("s2", 0), 15)]
    assert blocks.conflicts == plain.conflicts == [("s1", 2, 14, {"acc": 1, "f": 1 / 7}, {"acc": 0, "f": 1 / 7})]
    epochs, want = blocks.epochs(ids, 3), plain.epochs(ids, 3)
    assert all(isinstance(rows, SlotView) for rows in epochs) and [list(r) for r in epochs] == [list(r) for r in want]
    assert [len(r) for r in epochs] == [10, 3, 0] and epochs[1][2] == want[1][2] and list(epochs[0][3:6]) == want[0][3:6]
    assert epochs[0][0] is not epochs[0][0]  # unpacked anew: a reader's change is its own
    chained = PackedRows.chained(epochs)
    assert isinstance(chained, SlotView) and list(chained) == [*want[0], *want[1]] and chained[11] == want[1][1]
    assert blocks.epochs(list(reversed(ids)), 2)[0] == list(reversed(want[0]))  # another order: read as lists
    blocks.rows[("s9", 2)] = summary_view(row(9, 2, 1))  # into a block already compressed, and out again
    del blocks.rows[("s3", 0)]
    assert blocks.rows[("s9", 2)]["scores"] == {"acc": 1, "f": 9 / 7} and ("s3", 0) not in blocks.rows and len(blocks.rows) == 13
    blocks.rows.seal()
    assert blocks.rows[("s4", 0)] == plain.rows[("s4", 0)] and [len(r) for r in blocks.epochs(ids, 3)] == [9, 3, 1]
    for bad in [("s9", 3), ("zz", 0), ("s3", 0)]:
        with pytest.raises(KeyError):
            blocks.rows[bad]  # noqa: B018
    with pytest.raises(KeyError):
        blocks.rows[("zz", 0)] = {}
    with pytest.raises(ValueError):  # a value marshal cannot hold: refused before anything changed
        blocks.rows[("s9", 1)] = {"when": object()}
    assert ("s9", 1) not in blocks.rows and len(blocks.rows) == 13
