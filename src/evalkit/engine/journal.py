"""The run journal: append-only JSONL files that survive a killed process.

Every finished sample is written at once (one line, flushed to the OS, so a SIGKILL of the
process loses nothing already written; fsync at most once per ``fsync_interval_s`` and on
close, so an OS crash loses at most that window). Readers tolerate a torn last line and
duplicate rows (the first row for a key wins).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from evalkit.secrets import scrub_obj


class JsonlAppender:
    """Append JSON objects to ``path``, one per line, flushed immediately."""

    def __init__(self, path: Path, fsync_interval_s: float = 1.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_torn_tail()
        # backslashreplace: a lone surrogate in model text is written as the JSON escape
        # \udXXX (valid JSON that reads back to the same string) instead of crashing
        self._fh = open(self.path, "a", encoding="utf-8", errors="backslashreplace")
        self._fsync_interval_s = fsync_interval_s
        self._last_fsync = time.monotonic()

    def _repair_torn_tail(self) -> None:
        """A killed writer may leave a last line without newline: end it so the next row
        starts on its own line (the torn row itself is skipped by readers)."""
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb+") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")

    def append(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(scrub_obj(row), ensure_ascii=False, default=str) + "\n")
        self._fh.flush()
        now = time.monotonic()
        if now - self._last_fsync >= self._fsync_interval_s:
            os.fsync(self._fh.fileno())
            self._last_fsync = now

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any] | None]:
    """Each non-blank line of a JSONL file as its object, or ``None`` when it is not a JSON
    object (a torn line, other JSON)."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            yield row if isinstance(row, dict) else None


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file, skipping blank and unparseable (torn) lines."""
    return (row for row in _jsonl_rows(path) if row is not None)


def unreadable_lines(path: Path) -> int:
    """How many non-blank lines of a JSONL file :func:`read_jsonl` skips (not JSON, or not
    a JSON object). One torn last line is what a killed process leaves; more means damage."""
    return sum(row is None for row in _jsonl_rows(path))


def damaged_journal(path: Path, n_readable: int, n_scored: Any) -> str | None:
    """The one-line complaint when a run's ``predictions.jsonl`` (``path``) yields fewer
    readable predictions (``n_readable``) than its ``summary.json`` counts as scored
    (``n_scored``), else ``None``."""
    if not isinstance(n_scored, int) or n_readable >= n_scored:
        return None
    return (
        f"{path}: {n_readable} readable predictions for n_scored={n_scored} in summary.json "
        f"({unreadable_lines(path)} unreadable lines): the journal is damaged"
    )


def latest_by_sample(path: Path, request_hashes: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """First journaled row per sample id.

    With ``request_hashes`` (``{sample_id: hash}`` of the current run), only rows whose
    ``request_hash`` matches count: a row recorded under other generation params or
    another prompt is not a result of this run.
    """
    rows: dict[str, dict[str, Any]] = {}
    for row in read_jsonl(path):
        sid = row.get("sample_id")
        if not isinstance(sid, str) or sid in rows:
            continue
        if request_hashes is not None and request_hashes.get(sid) != row.get("request_hash"):
            continue
        rows[sid] = row
    return rows
