"""No journal or record file is read or written through a symbolic link: a link planted in
a run directory (to a file outside it) is refused in one line by every reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.errors import RunDirError
from evalkit.journal import read_journal
from evalkit.jsonl import JsonlAppender
from evalkit.untrusted import read_run_text, read_tolerant


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.jsonl"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"sample_id": "s", "epoch": 0, "scores": {"f1": 1.0}}) + "\n")
    return secret


def test_a_linked_journal_is_refused_not_read(tmp_path: Path, outside: Path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").symlink_to(outside)
    with pytest.raises(RunDirError, match="symbolic link"):
        read_tolerant(run / "predictions.jsonl")
    with pytest.raises(RunDirError, match="symbolic link"):
        read_journal(run / "predictions.jsonl")


def test_a_dangling_link_is_refused_not_read_as_empty(tmp_path: Path):
    (tmp_path / "failed.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(RunDirError, match="symbolic link"):
        read_tolerant(tmp_path / "failed.jsonl")


def test_a_linked_journal_is_never_appended_to(tmp_path: Path, outside: Path):
    before = outside.read_bytes()
    (tmp_path / "predictions.jsonl").symlink_to(outside)
    with pytest.raises(RunDirError, match="symbolic link"):
        JsonlAppender(tmp_path / "predictions.jsonl")
    assert outside.read_bytes() == before


def test_a_plain_journal_still_reads_and_appends(tmp_path: Path):
    writer = JsonlAppender(tmp_path / "predictions.jsonl")
    writer.append({"sample_id": "a", "epoch": 0})
    writer.close()
    assert read_tolerant(tmp_path / "predictions.jsonl").objects == [{"sample_id": "a", "epoch": 0}]
    assert read_tolerant(tmp_path / "missing.jsonl").objects == []


def test_a_linked_config_is_one_line(tmp_path: Path, outside: Path):
    (tmp_path / "config.yaml").symlink_to(outside)
    with pytest.raises(RunDirError, match="symbolic link, never followed"):
        read_run_text(tmp_path / "config.yaml")
    (tmp_path / "big.yaml").write_bytes(b"x" * 11)
    with pytest.raises(RunDirError, match="11 bytes, over the 10 allowed for a run record; not read"):
        read_run_text(tmp_path / "big.yaml", limit=10)
