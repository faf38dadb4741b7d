"""The journal is read a line at a time, and finalize keeps of each row only what the
summary reads (issue 23 item 2: the driver's peak at N = 20,000 was the journal read back
whole, twice; figures in docs/performance.md, ``perf/footprint.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.engine.budget import journal_spend
from evalkit.journal import NOT_IN_SUMMARY, read_journal, summary_view
from evalkit.untrusted import TolerantRead, iter_objects, iter_tolerant, read_tolerant


def _row(sid: str, accuracy: float = 1.0, **extra: object) -> dict:
    return {"sample_id": sid, "subset": "all", "status": "ok", "output": f"answer of {sid} " * 50, "parsed": [sid],
            "scores": {"accuracy": accuracy}, "checks": {"c1": True}, "failed_checks": [], "detail": "why",
            "request_hash": f"h-{sid}", "prompt_hash": "p", "epoch": 0, "reasoning_rule": "none", "usage": {"prompt_tokens": 3},
            "latency_s": 0.5, "attempts": 1, "throttled": 0, "cached": False, "finish_reason": "stop", "reasoning": None,
            "started_at": 1.0, "ended_at": 2.0, "cost_usd": 0.25, "spent_tokens": 3, "n_turns": 1, **extra}  # fmt: skip


def _write(path: Path, rows: list[object]) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")


def test_iter_objects_reads_a_line_at_a_time(tmp_path):
    """A whole-file read (every row held at once) would not see a line appended after the
    first row was handed out; a reader that holds one line at a time does."""
    path = tmp_path / "predictions.jsonl"
    _write(path, [_row("a"), _row("b")])
    rows = iter_objects(path)
    assert next(rows)["sample_id"] == "a"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(_row("c")) + "\n")
    assert [r["sample_id"] for r in rows] == ["b", "c"]


def test_a_damaged_journal_reads_as_before(tmp_path):
    """Line numbers, skipped lines and the torn last line, as the whole-file reader found
    them: blank and CRLF lines, bytes that are not UTF-8, a JSON line that is no object, a
    U+2028 inside a string (not a line break), and a torn last line without its newline."""
    path = tmp_path / "predictions.jsonl"
    body = (json.dumps(_row("a")) + "\r\n\n   \n" + '{"sample_id": "b\u2028x", "epoch": 0}\n').encode("utf-8")
    body += b'{"sample_id": "c\xff"}\n[1, 2]\nnot json\n{"sample_id": "d", "sc'
    path.write_bytes(body)
    read = read_tolerant(path)
    assert [n for n, _ in read.rows] == [1, 4, 5]
    assert [r["sample_id"] for r in read.objects] == ["a", "b\u2028x", "c\ufffd"]
    assert read.unreadable == [6, 7, 8] and read.torn_last
    into = TolerantRead()
    assert list(iter_tolerant(path, into)) == read.rows and into.unreadable == [6, 7, 8] and into.torn_last
    path.write_bytes(body + b"\n")  # the last line whole but unreadable: damage, not a torn line
    assert not read_tolerant(path).torn_last


def test_read_journal_holds_the_summary_view_and_applies_the_rules_to_whole_rows(tmp_path):
    path = tmp_path / "predictions.jsonl"
    stripped = _row("b", reasoning="thought", output_unstripped="<think>x</think>y")
    rows = [_row("stale", request_hash="old"), _row("a"), stripped, _row("a", accuracy=0.0), "torn {", _row("not-asked")]
    _write(path, rows)
    hashes = {("a", 0): "h-a", ("b", 0): "h-b", ("stale", 0): "h-stale"}
    whole = read_journal(path, hashes)
    viewed = read_journal(path, hashes, view=summary_view)
    for attr in ("unreadable", "torn_last", "invalid", "stale", "unselected", "duplicates", "conflicts"):
        assert getattr(viewed, attr) == getattr(whole, attr)
    assert viewed.stale == [1] and viewed.unselected == [6] and viewed.unreadable == [5]
    assert viewed.conflicts == [("a", 2, 4, {"accuracy": 1.0}, {"accuracy": 0.0})]  # compared on the whole row's scores
    assert list(viewed.rows) == list(whole.rows) == [("a", 0), ("b", 0)]
    kept = viewed.rows[("b", 0)]
    assert not NOT_IN_SUMMARY & set(kept)  # no answer, no hashes, no times
    assert kept == {"sample_id": "b", "subset": "all", "status": "ok", "scores": {"accuracy": 1.0}, "checks": {"c1": True},
                    "epoch": 0, "usage": {"prompt_tokens": 3}, "latency_s": 0.5, "cached": False,
                    "reasoning": True, "output_unstripped": True}  # fmt: skip
    assert "reasoning" not in viewed.rows[("a", 0)]  # a null reasoning is no reasoning: left out
    assert summary_view(kept) == kept  # a view of a view is itself


def test_read_journal_reads_a_line_at_a_time(tmp_path):
    """The view sees each row as it is read: a row appended while the first is viewed is
    counted (a reader holding the whole file first would not see it)."""
    path = tmp_path / "predictions.jsonl"
    _write(path, [_row("a")])

    def view(row: dict) -> dict:
        if row["sample_id"] == "a":
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(_row("b")) + "\n")
        return summary_view(row)

    assert list(read_journal(path, view=view).rows) == [("a", 0), ("b", 0)]


def test_journal_spend_reads_every_journal_of_the_run(tmp_path):
    _write(tmp_path / "predictions.jsonl", [_row("a"), _row("b")])
    _write(tmp_path / "failed.jsonl", [{"sample_id": "c", "cost_usd": 0.5, "spent_tokens": 7}, "torn"])
    assert journal_spend(tmp_path) == (1.0, 13)


def test_the_summary_view_keeps_one_string_per_status_and_subset(tmp_path):
    """Issue 46: a view per sample is held by finalize; its few-valued texts are shared."""
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(_row(f"s{i}", subset="sub-" + "ab"[i % 2])) + "\n" for i in range(4)))
    rows = list(read_journal(path, {(f"s{i}", 0): f"h-s{i}" for i in range(4)}, view=summary_view).rows.values())
    assert [r["subset"] for r in rows] == ["sub-a", "sub-b", "sub-a", "sub-b"]
    assert rows[0]["subset"] is rows[2]["subset"] and rows[1]["status"] is rows[3]["status"]  # parsed apart, held once
    assert rows[0]["sample_id"] == "s0" and rows[0]["sample_id"] is not rows[2]["sample_id"]
