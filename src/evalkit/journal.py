"""The run journal's one reader: ``predictions.jsonl`` and ``failed.jsonl``, append-only
(written with :class:`evalkit.jsonl.JsonlAppender`, read with the tolerant reader).

Every reader of a run directory reads the journal here — the engine (resume and
finalize), ``rescore``, ``compare``, the MLflow samples table and traces
(:mod:`evalkit.tracking.samples`) and KE's audit — so one row counts, or does not, the same
way for all of them. The module sits at the bottom of the layers (beside :mod:`evalkit.jsonl`)
so that benchmarks and tracking may import it.

Which row counts, for a key ``(sample_id, epoch)`` (a row without ``epoch`` was written
before repeats existed: epoch 0):

1. a line that is not a JSON object (torn by a killed writer, or damaged) is skipped, its
   number kept (``unreadable``; its sample is asked again on resume);
2. a row whose key is unusable — ``sample_id`` not a string of at most
   :data:`MAX_SAMPLE_ID_CHARS` characters, ``epoch`` not an integer in
   ``[0, MAX_REPEATS)``, ``scores`` not an object of finite numbers (``null`` allowed; a
   bool, a string, NaN or Infinity — which Python's JSON parser accepts — are not) — is
   skipped, its line and
   reason kept (``invalid``); the engine warns, the commands reading a finished run
   (``rescore``, ``compare``, ``evalkit.track``, ``evalkit.audit``) refuse the run with
   one line (:meth:`Journal.raise_invalid`); a reader with the benchmark at hand also
   refuses a score outside the benchmark's range (:meth:`Journal.check_scores`);
3. a *stale* row — recorded under another request than the run's (another prompt,
   parameter or model id: its ``request_hash`` is not the current request's) — does not
   count. With the run's request hashes at hand (the engine; ``evalkit.track``) they
   decide; without them (``compare``, ``rescore``, audit), the line numbers the engine
   found stale, or outside its selection, when it last finalized the run
   (``summary.json`` → ``stale_lines``, :meth:`Journal.uncounted`) are
   skipped (:func:`read_run_journal`);
4. of several remaining rows for one key the **first** wins (a resumed run never rewrites a
   row); a later duplicate whose scores differ is kept in ``conflicts`` and said.

A capped row (over 1 MiB of JSON) keeps only the first characters of the model's texts;
:meth:`Journal.full` puts the whole texts back from its side file, through
:func:`evalkit.untrusted.with_side_file` (the one side-file read).

Sources: the first-row rule and the request-hash rule are the engine's since resume
existed (``docs/architecture.md``); issue 26 item 13 made them the only ones.
"""

from __future__ import annotations

import logging
import marshal
import math
import sys
import zlib
from array import array
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, overload

from evalkit.errors import RunDirError, printable
from evalkit.untrusted import TolerantRead, iter_objects, iter_tolerant, with_side_file
from evalkit.types import LEGACY_AGENT_ACTOR, MAX_REPEATS, Actor

log = logging.getLogger("evalkit")

#: the longest sample id a journal row may carry (characters)
MAX_SAMPLE_ID_CHARS = 4096

PREDICTIONS = "predictions.jsonl"
FAILED = "failed.jsonl"

Key = tuple[str, int]


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a journal, skipping blank and unreadable (torn) lines (no rule applied)."""
    return iter_objects(path)


def unreadable_lines(path: Path) -> int:
    """How many non-blank lines of a journal :func:`read_jsonl` skips (not JSON, or not a
    JSON object). One torn last line is what a killed process leaves; more means damage."""
    read = TolerantRead()
    for _ in iter_tolerant(path, read):
        pass
    return len(read.unreadable)


def row_problem(row: dict[str, Any]) -> str | None:
    """Why a journal row cannot count (rule 2 of the module docstring), or ``None``."""
    sid, epoch = row.get("sample_id"), row.get("epoch", 0)
    if not isinstance(sid, str):
        return f"sample_id is {type(sid).__name__}, not a string"
    if len(sid) > MAX_SAMPLE_ID_CHARS:
        return f"sample_id of {len(sid)} characters (at most {MAX_SAMPLE_ID_CHARS})"
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return f"epoch is {type(epoch).__name__} {_short(epoch)}, not an integer"
    if not 0 <= epoch < MAX_REPEATS:
        return f"epoch {epoch} out of range (0 to {MAX_REPEATS - 1})"
    scores = row.get("scores")
    if scores is not None:
        if not isinstance(scores, dict):
            return f"scores is {type(scores).__name__}, not an object"
        for name, value in scores.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"scores.{_short(name)} is {type(value).__name__} {_short(value)}, not a number"
            if isinstance(value, float) and not math.isfinite(value):
                return f"scores.{_short(name)} is {value!r}, not a finite number"
    return None


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def row_key(row: dict[str, Any]) -> Key | None:
    """``(sample_id, epoch)`` of a journal row (epoch 0 when absent), ``None`` when the row
    cannot count (:func:`row_problem`)."""
    if row_problem(row) is not None:
        return None
    return row["sample_id"], row.get("epoch", 0)


@dataclass
class Journal:
    """One read of ``predictions.jsonl``: the row that counts per ``(sample_id, epoch)``
    (``rows``, journal order; finalize's read: the plan's order, :class:`SlotRows`), and what was skipped: ``unreadable`` line numbers,
    ``invalid`` ``(line, reason)``, ``stale`` line numbers (rule 3), ``unselected`` line
    numbers (a sample or epoch outside the run's requests, when they are given: a resume
    with a smaller selection; not counted, not warned of), every later row of a
    key already held (``duplicates``: ``(key, line)``), and of those the ones whose scores
    differ (``conflicts``: ``(sample_id, kept line, other line, kept scores, other scores)``)."""

    path: Path
    rows: dict[Key, dict[str, Any]] = field(default_factory=dict)
    unreadable: list[int] = field(default_factory=list)
    torn_last: bool = False
    invalid: list[tuple[int, str]] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)
    unselected: list[int] = field(default_factory=list)
    duplicates: list[tuple[Key, int]] = field(default_factory=list)
    conflicts: list[tuple[str, int, int, Any, Any]] = field(default_factory=list)
    #: the line number of each row that counts
    lines: dict[Key, int] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    def epochs(self, samples: Sequence[Any], repeats: int) -> list[Sequence[dict[str, Any]]]:
        """The rows of ``samples`` (samples, or their ids), one sequence per epoch ``0 ..
        repeats-1``, in selection order. Linear in the rows and ``repeats`` (not their
        product: ``repeats`` may come from a run directory's summary). Rows read packed
        (:func:`packed_summary_view`) come as :class:`PackedRows`, each unpacked when read
        (finalize's read, :class:`BlockRows`, in the slots' own order: each epoch a
        :class:`SlotView`); others as lists."""
        if isinstance(self.rows, BlockRows) and _in_slot_order(samples, self.rows.slots):
            return [self.rows.epoch_rows(e) for e in range(repeats)]
        shared = getattr(samples, "id_positions", None)  # a packed selection's own index
        order = shared() if shared is not None else {s if isinstance(s, str) else s.id: i for i, s in enumerate(samples)}
        placed: list[list[tuple[int, Any]]] = [[] for _ in range(repeats)]
        for (sid, epoch), row in self.rows.items():
            if epoch < repeats and sid in order:
                placed[epoch].append((order[sid], row))
        out: list[Sequence[dict[str, Any]]] = []
        for rows in placed:
            rows.sort(key=lambda p: p[0])
            kept = [row for _, row in rows]
            rows.clear()
            out.append(PackedRows(kept) if kept and isinstance(kept[0], PackedRow) else kept)
        return out

    def uncounted(self) -> list[int]:
        """The lines a reader without the requests must skip to count as this read did: the
        stale and the unselected rows (``summary.json`` → ``stale_lines``)."""
        return sorted(self.stale + self.unselected)

    def sample_ids(self) -> list[str]:
        """The distinct sample ids with a row, in journal order."""
        return list(dict.fromkeys(sid for sid, _ in self.rows))

    def n_epochs(self) -> int:
        """1 + the highest epoch with a row (0 for an empty journal); below :data:`MAX_REPEATS`."""
        return 1 + max((epoch for _, epoch in self.rows), default=-1)

    def full(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with the whole texts of a capped row read back from its side file
        (:func:`evalkit.untrusted.with_side_file`); an uncapped row as it is.

        Raises:
            SideFileError: the side file is missing, a link, or not what the row recorded.
        """
        return with_side_file(row, self.run_dir)

    def problems(self) -> str | None:
        """One line naming what was skipped or resolved, or ``None`` when nothing was."""
        parts = []
        if self.unreadable:
            kind = "a torn last line" if self.torn_last and len(self.unreadable) == 1 else "unreadable lines"
            parts.append(f"{kind} {_numbers(self.unreadable)} skipped (a resume asks their samples again)")
        if self.invalid:
            line, why = self.invalid[0]
            more = f" and {len(self.invalid) - 1} more" if len(self.invalid) > 1 else ""
            parts.append(f"invalid rows skipped: line {line} ({why}){more}")
        if self.stale:
            parts.append(f"stale rows {_numbers(self.stale)} (recorded under another request) not counted")
        for sid, kept, other, a, b in self.conflicts[:5]:
            parts.append(f"sample {printable(sid, 200)} journaled twice with different scores: line {kept} {printable(a, 200)} "
                         f"kept, line {other} {printable(b, 200)} ignored")  # fmt: skip
        if len(self.conflicts) > 5:
            parts.append(f"{len(self.conflicts) - 5} more conflicting duplicates")
        return f"{self.path}: " + "; ".join(parts) if parts else None

    def warn(self) -> None:
        """Log :meth:`problems` as one WARNING (console and the run's ``evalkit.log``)."""
        line = self.problems()
        if line:
            log.warning("%s", line)

    def raise_invalid(self, error: type[Exception] = RunDirError) -> None:
        """Refuse a finished run whose journal holds a row that cannot count (rule 2): one
        line naming the file, the line and why.

        Raises:
            ``error`` (default RunDirError, exit 2): when ``invalid`` is not empty.
        """
        if self.invalid:
            line, why = self.invalid[0]
            more = f" (and {len(self.invalid) - 1} more invalid rows)" if len(self.invalid) > 1 else ""
            raise error(f"{self.path}:{line}: not a journal row: {why}{more}")

    def check_scores(self, bounds: Callable[[str], tuple[float, float]], error: type[Exception] = RunDirError) -> None:
        """Refuse a row that counts whose score lies outside its benchmark's range:
        ``bounds(name)`` is ``(low, high)``, inclusive
        (:meth:`evalkit.benchmarks.base.Benchmark.score_bounds`). Rule 2 already refused
        what is not a finite number.

        Raises:
            ``error`` (default RunDirError, exit 2): one line naming the file, the line, the
                score and its value.
        """
        for key, row in self.rows.items():
            scores = row.get("scores")
            for name, value in (scores.items() if isinstance(scores, dict) else ()):
                if value is None:
                    continue
                low, high = bounds(str(name))
                if not low <= value <= high:
                    raise error(f"{self.path}:{self.lines.get(key, '?')}: scores.{_short(name)} is {_short(value)}, "
                                f"outside the benchmark's range [{low:g}, {high:g}]")  # fmt: skip


def _numbers(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:10])
    return shown + (f" and {len(lines) - 10} more" if len(lines) > 10 else "")


def read_journal(path: Path, request_hashes: dict[Key, str] | None = None, skip_lines: Iterable[int] = (),
                 view: Callable[[dict[str, Any]], Any] | None = None) -> Journal:  # fmt: skip
    """The journal at ``path`` as :class:`Journal`, by the rules of the module docstring,
    read a line at a time (:func:`evalkit.untrusted.iter_tolerant`).

    ``request_hashes`` (``{(sample_id, epoch): hash}`` of the current run): only rows whose
    ``request_hash`` matches count; the others are ``stale`` (or ``unselected``, outside the
    requests). ``skip_lines``: line numbers known not to count (a finished run's
    ``stale_lines``), used only when the hashes are not at hand. ``view``: what is kept of
    each row that counts (e.g. :func:`summary_view`), applied after the rules have read the
    whole row; it must keep ``scores`` (a later duplicate is compared with them). Without
    it the whole rows are kept.
    """
    read = TolerantRead()
    rows = iter_tolerant(path, read)
    journal = Journal(Path(path), unreadable=read.unreadable)
    skip = set(skip_lines) if request_hashes is None else set()
    first_line: MutableMapping[Key, int] = {}
    if view is not None and hasattr(request_hashes, "slot"):  # finalize: rows placed by the plan's slots
        journal.rows = BlockRows(request_hashes) if view is packed_summary_view else SlotRows(request_hashes)
        first_line = SlotRows(request_hashes, lines=True)
    canonical = getattr(request_hashes, "canonical_id", None)  # the plan's own id strings, one per sample
    for lineno, row in rows:
        why = row_problem(row)
        if why is not None:
            journal.invalid.append((lineno, why))
            continue
        key: Key = (row["sample_id"] if canonical is None else canonical(row["sample_id"]), row.get("epoch", 0))
        if request_hashes is not None and key not in request_hashes:
            journal.unselected.append(lineno)
            continue
        if lineno in skip or (request_hashes is not None and request_hashes[key] != row.get("request_hash")):
            journal.stale.append(lineno)
            continue
        if key in journal.rows:
            journal.duplicates.append((key, lineno))
            kept = journal.rows[key].get("scores")
            if row.get("scores") != kept:
                journal.conflicts.append((key[0], first_line[key], lineno, kept, row.get("scores")))
            continue
        journal.rows[key] = row if view is None else view(row)
        first_line[key] = lineno
    journal.lines = first_line  # type: ignore[assignment]
    journal.torn_last = read.torn_last
    if isinstance(journal.rows, BlockRows):
        journal.rows.seal()
    return journal


#: the fields of a journal row that :func:`summary_view` drops: the model's texts (kept in
#: ``predictions.jsonl``; :data:`evalkit.untrusted.SIDE_FILE_FIELDS` and ``parsed``), the
#: verdict's explanations (``detail``, ``failed_checks``) and the per-call bookkeeping
#: (hashes, times, attempts, spend: the summary's spend is read from the journal by
#: :func:`evalkit.engine.budget.journal_spend`)
NOT_IN_SUMMARY = frozenset({
    "output", "raw_output", "trajectory", "parsed", "detail", "failed_checks", "large",
    "request_hash", "prompt_hash", "reasoning_rule", "finish_reason", "attempts", "throttled",
    "started_at", "ended_at", "n_turns", "cost_usd", "spent_tokens",
})  # fmt: skip
#: texts of which the summary counts only the presence: :func:`summary_view` keeps ``True``
#: in their place when present (``output_unstripped`` not null; ``reasoning`` not empty)
PRESENCE_ONLY = {"output_unstripped": lambda v: v is not None, "reasoning": bool}


def summary_view(row: dict[str, Any]) -> dict[str, Any]:
    """What a run's summary, report and plots read of a journal row (finalize holds one per
    sample and epoch, so not the model's texts): every field but :data:`NOT_IN_SUMMARY` —
    ``sample_id``, ``subset``, ``epoch``, ``status``, ``scores``, ``checks``, ``usage``,
    ``usage_by_actor``, ``latency_s``, ``cached``, ``judgements`` and any field of a
    benchmark's own — with the :data:`PRESENCE_ONLY` texts as ``True`` when present (left
    out when not). The field names are interned (one string per name, not one per row), and
    so are the values of ``status`` and ``subset`` (issue 46: the summary's memory per sample)."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name in NOT_IN_SUMMARY:
            continue
        present = PRESENCE_ONLY.get(name)
        if present is not None:
            if present(value):
                out[sys.intern(name)] = True
            continue
        out[sys.intern(name)] = sys.intern(value) if name in _FEW_VALUES and type(value) is str and len(value) < 200 else value
    return out


#: the fields of a row whose text takes few values over a run (a handful of statuses and
#: subsets): :func:`summary_view` keeps one string per value, not one per row
_FEW_VALUES = frozenset({"status", "subset"})


class SlotRows(MutableMapping[Key, Any]):
    """``{(sample_id, epoch): value}`` for the keys of a run's work items only, held in a list
    by each key's slot (``slots``: the plan's :class:`~evalkit.engine.plan.RequestHashes`:
    ``slot(key)``, ``key_at(slot)``, ``len``) instead of a dict of tuples: 8 bytes a key
    against about 0.15 KB (issue 46 item 3). Iterates in slot order (epoch by epoch, each in
    selection order), not in the order set. ``lines``: integer values (line numbers), held
    as an ``array`` of int64.

    Raises:
        KeyError: setting a key that is not a work item's."""

    def __init__(self, slots: Any, lines: bool = False):
        self._slots, self._lines = slots, lines
        self._values: Any = array("q", [-1]) * len(slots) if lines else [None] * len(slots)
        self._n = 0

    def _filled(self, value: Any) -> bool:
        return value != -1 if self._lines else value is not None

    def _slot(self, key: Any) -> int | None:
        """The slot of ``key`` when it holds a value, else ``None``."""
        slot = self._slots.slot(key)
        return slot if slot is not None and self._filled(self._values[slot]) else None

    def __getitem__(self, key: Key) -> Any:
        slot = self._slot(key)
        if slot is None:
            raise KeyError(key)
        return self._values[slot]

    def __setitem__(self, key: Key, value: Any) -> None:
        slot = self._slots.slot(key)
        if slot is None:
            raise KeyError(key)
        self._n += not self._filled(self._values[slot])
        self._values[slot] = value

    def __delitem__(self, key: Key) -> None:
        slot = self._slot(key)
        if slot is None:
            raise KeyError(key)
        self._values[slot] = -1 if self._lines else None
        self._n -= 1

    def __contains__(self, key: object) -> bool:
        return self._slot(key) is not None

    def __iter__(self) -> Iterator[Key]:
        for slot, value in enumerate(self._values):
            if self._filled(value):
                yield self._slots.key_at(slot)

    def items(self) -> Iterator[tuple[Key, Any]]:  # type: ignore[override]
        """``(key, value)`` in slot order (one pass, no lookup per key)."""
        for slot, value in enumerate(self._values):
            if self._filled(value):
                yield self._slots.key_at(slot), value

    def __len__(self) -> int:
        return self._n


class PackedRow(bytes):
    """A row's summary view held packed (:mod:`marshal` bytes, exact for JSON values, about
    a third of the dict it reads back as): what finalize keeps per sample and epoch (issue 46
    item 3). :meth:`unpack` gives a new dict each time; :meth:`get` reads one field of it.
    Only bytes this process packed are unpacked."""

    __slots__ = ()

    def unpack(self) -> dict[str, Any]:
        return marshal.loads(self)  # type: ignore[no-any-return]

    def get(self, name: str, default: Any = None) -> Any:
        return self.unpack().get(name, default)


def packed_summary_view(row: dict[str, Any]) -> PackedRow:
    """:func:`summary_view` of ``row``, packed (:class:`PackedRow`)."""
    return PackedRow(marshal.dumps(summary_view(row)))


class _Rows(Sequence[dict[str, Any]]):
    """Rows read as dicts from what holds them packed: ``rows + other`` (and ``other + rows``)
    is a list of dicts, every row unpacked (for short sequences)."""

    def __add__(self, other: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*self, *other]

    def __radd__(self, other: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*other, *self]


class PackedRows(_Rows):
    """Rows held packed (:class:`PackedRow`), read as dicts: ``len``, an index, a slice (a
    :class:`PackedRows`) and passes, each unpacking the rows again (a change made to a row
    read is not kept; a reader holds the rows it keeps). ``rows + other`` is a list of
    dicts (every row unpacked: for short sequences)."""

    def __init__(self, packed: list[PackedRow]):
        self.packed = packed

    def __len__(self) -> int:
        return len(self.packed)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> "PackedRows": ...

    def __getitem__(self, i: int | slice) -> "dict[str, Any] | PackedRows":
        if isinstance(i, slice):
            return PackedRows(self.packed[i])
        return self.packed[i].unpack()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for row in self.packed:
            yield row.unpack()

    @staticmethod
    def chained(epochs: list[Sequence[dict[str, Any]]]) -> "Sequence[dict[str, Any]]":
        """The rows of every epoch (:meth:`Journal.epochs`) in one sequence, packed when they are."""
        if epochs and all(isinstance(rows, SlotView) and rows.whole and rows.rows is epochs[0].rows for rows in epochs) \
                and all(a.stop == b.start for a, b in zip(epochs, epochs[1:])):  # fmt: skip
            return SlotView(epochs[0].rows, epochs[0].start, epochs[-1].stop)  # type: ignore[attr-defined]
        if epochs and all(isinstance(rows, PackedRows) for rows in epochs):
            return PackedRows([row for rows in epochs for row in rows.packed])  # type: ignore[attr-defined]
        return [row for rows in epochs for row in rows]


#: slots per compressed block of :class:`BlockRows`
ROWS_PER_BLOCK = 512


class BlockRows(MutableMapping[Key, dict[str, Any]]):
    """``{(sample_id, epoch): row}`` for the keys of a run's work items (``slots``: the plan's
    :class:`~evalkit.engine.plan.RequestHashes`, as :class:`SlotRows`), each row held as
    :mod:`marshal` bytes (:class:`PackedRow`; a dict set is packed) and every
    :data:`ROWS_PER_BLOCK` consecutive slots, once each holds a row, compressed together
    (zlib): a row's field names and repeated values are held once a block, not once a row
    (issue 46 item 3: about 10 bytes a row for the summary's view, against 0.17 KB packed
    alone). :meth:`seal` compresses the blocks still open (a journal read has ended).

    A read gives a new dict each time (a change to it is not kept); iteration and
    :meth:`items` are in slot order (epoch by epoch, each in selection order), each block
    decompressed once a pass. :meth:`epoch_rows` are one epoch's rows as a sequence.

    Raises:
        KeyError: setting a key that is not a work item's, or reading one without a row."""

    def __init__(self, slots: Any):
        self._slots, n = slots, len(slots)
        self._filled = bytearray(n)
        self._loose: dict[int, bytes] = {}  # rows of blocks not compressed
        self._sealed: dict[int, tuple[bytes, array]] = {}  # block → (zlib of its rows, each row's end)
        self._n = 0
        self._raw: tuple[int, bytes] = (-1, b"")  # the last block decompressed

    @property
    def slots(self) -> Any:
        return self._slots

    def _span(self, block: int) -> range:
        return range(block * ROWS_PER_BLOCK, min(len(self._filled), (block + 1) * ROWS_PER_BLOCK))

    def _seal_block(self, block: int) -> None:
        ends, parts, at = array("Q"), [], 0
        for slot in self._span(block):
            part = self._loose.pop(slot, b"")
            parts.append(part)
            at += len(part)
            ends.append(at)
        self._sealed[block] = (zlib.compress(b"".join(parts), 1), ends)

    def _open_block(self, block: int) -> None:
        """Its rows back among the loose ones (a block changed after it was compressed)."""
        data, ends = self._sealed.pop(block)
        raw, start = zlib.decompress(data), 0
        for slot, end in zip(self._span(block), ends):
            if self._filled[slot]:
                self._loose[slot] = raw[start:end]
            start = end
        self._raw = (-1, b"")

    def seal(self) -> None:
        """Compress every block that holds loose rows."""
        for block in sorted({slot // ROWS_PER_BLOCK for slot in self._loose}):
            self._seal_block(block)

    def packed(self, slot: int) -> bytes:
        """The packed row at a filled ``slot``."""
        loose = self._loose.get(slot)
        if loose is not None:
            return loose
        block = slot // ROWS_PER_BLOCK
        data, ends = self._sealed[block]
        cached, raw = self._raw
        if cached != block:
            raw = zlib.decompress(data)
            self._raw = (block, raw)
        i = slot - block * ROWS_PER_BLOCK
        return raw[ends[i - 1] if i else 0 : ends[i]]

    def _slot(self, key: Any) -> int | None:
        slot = self._slots.slot(key)
        return slot if slot is not None and self._filled[slot] else None

    def __getitem__(self, key: Key) -> dict[str, Any]:
        slot = self._slot(key)
        if slot is None:
            raise KeyError(key)
        return marshal.loads(self.packed(slot))  # type: ignore[no-any-return]

    def __setitem__(self, key: Key, value: Any) -> None:
        slot = self._slots.slot(key)
        if slot is None:
            raise KeyError(key)
        packed = bytes(value) if isinstance(value, PackedRow) else marshal.dumps(value)  # before any change: it may raise
        block = slot // ROWS_PER_BLOCK
        if block in self._sealed:
            self._open_block(block)
        self._n += not self._filled[slot]
        self._filled[slot] = 1
        self._loose[slot] = packed
        span = self._span(block)
        if self._filled.count(1, span.start, span.stop) == len(span):
            self._seal_block(block)

    def __delitem__(self, key: Key) -> None:
        slot = self._slot(key)
        if slot is None:
            raise KeyError(key)
        block = slot // ROWS_PER_BLOCK
        if block in self._sealed:
            self._open_block(block)
        self._loose.pop(slot, None)
        self._filled[slot] = 0
        self._n -= 1

    def __contains__(self, key: object) -> bool:
        return self._slot(key) is not None

    def __iter__(self) -> Iterator[Key]:
        for slot in self._filled_slots(0, len(self._filled)):
            yield self._slots.key_at(slot)

    def items(self) -> Iterator[tuple[Key, dict[str, Any]]]:  # type: ignore[override]
        for slot in self._filled_slots(0, len(self._filled)):
            yield self._slots.key_at(slot), marshal.loads(self.packed(slot))

    def _filled_slots(self, start: int, stop: int) -> Iterator[int]:
        find, slot = self._filled.find, start
        while True:
            slot = find(1, slot, stop)
            if slot < 0:
                return
            yield slot
            slot += 1

    def __len__(self) -> int:
        return self._n

    def epoch_rows(self, epoch: int) -> "SlotView":
        """The rows of ``epoch``, in selection order (empty past the slots' epochs)."""
        n = len(self._slots.ids)
        start = min(epoch * n, len(self._filled))
        return SlotView(self, start, min(start + n, len(self._filled)))


class SlotView(_Rows):
    """The rows of a :class:`BlockRows` in slots ``[start, stop)``, in slot order: ``len``, an
    index, a slice and passes, each row unpacked anew (as :class:`PackedRows`); ``index``:
    the filled slots when already known (a slice's). A view, not a copy: the rows must not
    change while it is read (finalize reads them once the journal's read has ended)."""

    def __init__(self, rows: BlockRows, start: int, stop: int, index: Sequence[int] | None = None):
        self.rows, self.start, self.stop, self._index = rows, start, stop, index
        self.whole = index is None  # every filled slot of the range (not a slice's)

    def _slots(self) -> Sequence[int]:
        if self._index is None:
            self._index = array("q", self.rows._filled_slots(self.start, self.stop))
        return self._index

    def __len__(self) -> int:
        if self._index is not None:
            return len(self._index)
        return self.rows._filled.count(1, self.start, self.stop)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> "SlotView": ...

    def __getitem__(self, i: int | slice) -> "dict[str, Any] | SlotView":
        if isinstance(i, slice):
            return SlotView(self.rows, self.start, self.stop, self._slots()[i])
        return marshal.loads(self.rows.packed(self._slots()[i]))  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        slots = self._index if self._index is not None else self.rows._filled_slots(self.start, self.stop)
        for slot in slots:
            yield marshal.loads(self.rows.packed(slot))


def _in_slot_order(samples: Sequence[Any], slots: Any) -> bool:
    """Whether ``samples`` (samples, or their ids) are the slots' own selection, in its order."""
    ids = getattr(samples, "ids", None)
    if ids is None:
        ids = [s if isinstance(s, str) else s.id for s in samples]
    return ids is slots.ids or (len(ids) == len(slots.ids) and all(a == b for a, b in zip(ids, slots.ids)))


def read_run_journal(run_dir: Path, stale_lines: Iterable[int] = (), request_hashes: dict[Key, str] | None = None) -> Journal:
    """The ``predictions.jsonl`` of a finished run, for a command that reads it
    (``rescore``, ``compare``, audit, tracking): the rows that count as the engine counted
    them (``stale_lines``: the summary's, when ``request_hashes`` are not at hand).

    Raises:
        RunDirError: a row that cannot count (rule 2), as one line.
    """
    journal = read_journal(Path(run_dir) / PREDICTIONS, request_hashes, stale_lines)
    journal.raise_invalid()
    return journal


def read_failures(path: Path, keys: Iterable[Key] | None = None) -> dict[Key, dict[str, Any]]:
    """``failed.jsonl``: the **last** failure per ``(sample_id, epoch)`` (a resumed run that
    failed again says why it failed last), only for ``keys`` when given; rows without a
    usable key are skipped. An ``actor`` of ``model`` (the model under test in runs written
    before :class:`evalkit.types.Actor`) is read as ``agent``."""
    wanted = set(keys) if keys is not None else None
    out: dict[Key, dict[str, Any]] = {}
    for row in iter_objects(path):
        key = row_key(row)
        if key is not None and (wanted is None or key in wanted):
            if row.get("actor") == LEGACY_AGENT_ACTOR:
                row["actor"] = Actor.AGENT.value
            out[key] = row
    return out


def latest_by_sample(path: Path, request_hashes: dict[Key, str] | None = None) -> dict[str, dict[str, Any]]:
    """The row that counts per sample id, of epoch 0 (see :func:`read_journal`)."""
    return {sid: row for (sid, epoch), row in read_journal(path, request_hashes).rows.items() if epoch == 0}


def damaged_journal(path: Path, n_readable: int, n_scored_rows: Any, name: str = "n_scored") -> str | None:
    """The one-line complaint when a run's ``predictions.jsonl`` (``path``) yields fewer
    readable predictions (``n_readable``) than its ``summary.json`` counts as scored rows
    (``n_scored_rows``, the summary's field ``name``), else ``None``."""
    if not isinstance(n_scored_rows, int) or n_readable >= n_scored_rows:
        return None
    return (
        f"{path}: {n_readable} readable predictions for {name}={n_scored_rows} in summary.json "
        f"({unreadable_lines(path)} unreadable lines): the journal is damaged"
    )
