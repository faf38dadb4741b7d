"""The run journal: ``predictions.jsonl`` and ``failed.jsonl``, append-only (written with
:class:`evalkit.jsonl.JsonlAppender`, read with the tolerant reader).

Reading rules: a row is found by ``(sample_id, epoch)`` (a row without ``epoch`` was written
before repeats existed: epoch 0); a torn or otherwise unreadable line is skipped (its sample
is asked again); of several rows for one key the first wins (a resumed run never rewrites a
row). Both are said, once, in one warning line: the numbers of the unreadable lines, and
for a duplicate whose scores differ, the sample id and both scores.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from evalkit.jsonl import iter_objects, read_tolerant

log = logging.getLogger("evalkit")


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a journal, skipping blank and unreadable (torn) lines."""
    return iter_objects(path)


def unreadable_lines(path: Path) -> int:
    """How many non-blank lines of a journal :func:`read_jsonl` skips (not JSON, or not a
    JSON object). One torn last line is what a killed process leaves; more means damage."""
    return len(read_tolerant(path).unreadable)


def row_key(row: dict[str, Any]) -> tuple[str, int] | None:
    """``(sample_id, epoch)`` of a journal row (epoch 0 when absent), ``None`` when the row
    has no usable sample id or epoch."""
    sid, epoch = row.get("sample_id"), row.get("epoch", 0)
    if not isinstance(sid, str) or not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        return None
    return sid, epoch


@dataclass
class Journal:
    """One read of ``predictions.jsonl``: the first usable row per ``(sample_id, epoch)``
    (``rows``), the unreadable line numbers, and the conflicting duplicates
    ``(sample_id, kept line, other line, kept scores, other scores)``."""

    path: Path
    rows: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    unreadable: list[int] = field(default_factory=list)
    torn_last: bool = False
    conflicts: list[tuple[str, int, int, Any, Any]] = field(default_factory=list)

    def epochs(self, samples: list[Any], repeats: int) -> list[list[dict[str, Any]]]:
        """The rows of ``samples``, one list per epoch ``0 .. repeats-1``, in selection order."""
        return [[self.rows[(s.id, e)] for s in samples if (s.id, e) in self.rows] for e in range(repeats)]

    def problems(self) -> str | None:
        """One line naming what was skipped or resolved, or ``None`` when nothing was."""
        parts = []
        if self.unreadable:
            kind = "a torn last line" if self.torn_last and len(self.unreadable) == 1 else "unreadable lines"
            parts.append(f"{kind} {_numbers(self.unreadable)} skipped (their samples are asked again)")
        for sid, kept, other, a, b in self.conflicts[:5]:
            parts.append(f"sample {sid} journaled twice with different scores: line {kept} {a} kept, line {other} {b} ignored")
        if len(self.conflicts) > 5:
            parts.append(f"{len(self.conflicts) - 5} more conflicting duplicates")
        return f"{self.path}: " + "; ".join(parts) if parts else None

    def warn(self) -> None:
        """Log :meth:`problems` as one WARNING (console and the run's ``evalkit.log``)."""
        line = self.problems()
        if line:
            log.warning("%s", line)


def _numbers(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:10])
    return shown + (f" and {len(lines) - 10} more" if len(lines) > 10 else "")


def read_journal(path: Path, request_hashes: dict[tuple[str, int], str] | None = None) -> Journal:
    """The journal at ``path`` as :class:`Journal`.

    With ``request_hashes`` (``{(sample_id, epoch): hash}`` of the current run), only rows
    whose ``request_hash`` matches count: a row recorded under other generation params or
    another prompt is not a result of this run.
    """
    read = read_tolerant(path)
    journal = Journal(Path(path), unreadable=read.unreadable, torn_last=read.torn_last)
    first_line: dict[tuple[str, int], int] = {}
    for lineno, row in read.rows:
        key = row_key(row)
        if key is None:
            continue
        if request_hashes is not None and request_hashes.get(key) != row.get("request_hash"):
            continue
        if key in journal.rows:
            kept = journal.rows[key].get("scores")
            if row.get("scores") != kept:
                journal.conflicts.append((key[0], first_line[key], lineno, kept, row.get("scores")))
            continue
        journal.rows[key] = row
        first_line[key] = lineno
    return journal


def latest_by_sample(path: Path, request_hashes: dict[tuple[str, int], str] | None = None) -> dict[str, dict[str, Any]]:
    """First journaled row per sample id of epoch 0 (see :func:`read_journal`)."""
    return {sid: row for (sid, epoch), row in read_journal(path, request_hashes).rows.items() if epoch == 0}


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
