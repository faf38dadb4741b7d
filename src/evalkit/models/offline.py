"""Models that need no network: ``reference`` (gold replay) and ``replay`` (recorded outputs).

Both answer from a table keyed by sample id that the driver builds before the run, so
they go through exactly the same engine path (journal, scoring, resume) as a real model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterator

from evalkit.errors import DataError, RunDirError, printable
from evalkit.journal import FAILED, read_failures, read_run_journal
from evalkit.untrusted import MAX_JSONL_BYTES, read_objects, sha256_file, SideFileError, with_side_file
from evalkit.models.base import ModelCallError
from evalkit.summary import read_summary
from evalkit.types import Completion, Failure, PackedSamples, Request, Sample, canonical_json, sha256_hex

log = logging.getLogger("evalkit")


class TableModel:
    """Answers each request with ``outputs[request.sample_id]`` (or, for a table keyed by
    ``(sample_id, epoch)`` — the replay of a run directory — ``outputs[(sample_id, epoch)]``).

    A sample absent from the table is a failure of kind ``missing_output`` (replay of a
    file that does not cover the selection), never an empty answer scored as 0.
    """

    #: answers without a network: never kept in the response cache (evalkit.engine.solve)
    offline = True

    def __init__(self, name: str, outputs: Mapping[str, str] | Mapping[tuple[str, int], str], source: str):
        self.outputs = outputs
        self.by_epoch = not isinstance(outputs, SampleAnswers) and any(isinstance(k, tuple) for k in outputs)
        self.model_id = f"{name}:{source}"

    async def generate(self, request: Request) -> Completion:
        text = self.outputs.get((request.sample_id, request.epoch) if self.by_epoch else request.sample_id)  # type: ignore[call-overload]
        if text is None:
            raise ModelCallError(Failure("missing_output", f"no recorded output for {request.sample_id}", attempts=1))
        if not text.strip():
            raise ModelCallError(Failure("empty", "recorded output is empty", attempts=1))
        return Completion(text=text, finish_reason="stop", attempts=1)


class SampleAnswers(Mapping[str, str]):
    """``{sample id: answer(sample)}`` over a packed selection, each answer made from its
    sample when asked, not held: the offline model's table for a million samples (issue 46
    item 3: about 0.09 KB a sample less). ``skip(sample)``: a sample with no answer here
    (a rollout's agents answer it). A sample's answer is the same each time it is asked."""

    def __init__(self, samples: PackedSamples, answer: Callable[[Sample], str], skip: Callable[[Sample], bool]):
        self._samples, self._answer, self._skip = samples, answer, skip

    def __getitem__(self, sid: Any) -> str:
        position = self._samples.id_positions().get(sid) if isinstance(sid, str) else None
        sample = self._samples[position] if position is not None else None
        if sample is None or self._skip(sample):
            raise KeyError(sid)
        return self._answer(sample)

    def __iter__(self) -> Iterator[str]:
        return (s.id for s in self._samples if not self._skip(s))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ReferenceJudge:
    """The reference judge (``judge=reference``, the judge of ``model=reference``): answers
    each judge request with the gold verdict its solver put in
    ``request.meta["reference_verdict"]`` (a judge of the gold answers, through the same
    path as a real judge's verdicts)."""

    model_id = "reference-judge"
    offline = True

    async def generate(self, request: Request) -> Completion:
        text = request.meta.get("reference_verdict")
        if not isinstance(text, str) or not text:
            raise ModelCallError(Failure("missing_output", f"no gold verdict for {request.sample_id}", attempts=1))
        return Completion(text=text, finish_reason="stop", attempts=1)


#: the largest ``epoch`` a replay file's row may name (a run has at most this many repeats)
MAX_REPLAY_EPOCH = 10_000


def load_replay_file(path: Path, continuation: bool = False) -> dict[str, str] | dict[tuple[str, int], str]:
    """Read a replay file: JSONL of ``{"sample_id": str, "output": str}`` (an integer
    ``sample_id`` is its decimal text, as SOBHard's data and ``run.sample_ids`` have it),
    keyed by sample id. A row may name its repeat, ``"epoch"`` (a JSON integer from 0 to
    :data:`MAX_REPLAY_EPOCH`, as an import of a run with repeats writes it): the table is
    then keyed by ``(sample id, epoch)``, a row without one being epoch 0.

    ``continuation`` (``model.api=completion``): each answer is the model's continuation of a
    completion-mode prompt, which the engine puts after the benchmark's answer prefix as a
    live completion run does: a line's ``raw_output`` when it has one (a completion run's
    ``predictions.jsonl`` keeps the continuation there, and prefix + continuation in
    ``output``), else its ``output`` — so the prefix is never added twice.

    Raises:
        DataError: a line that is not such an object, an ``epoch`` that is not such an
            integer (names file and line) or a sample id (and epoch) given twice with
            different outputs (the id printed escaped).

    A capped ``predictions.jsonl`` row whose side file is missing or not what the row
    recorded (size, sha256) is left out with one warning: its sample then fails as
    ``missing_output``, never replays the row's first characters.
    """
    outputs: dict[tuple[str, int], str] = {}
    by_epoch = False
    for lineno, row in read_objects(path):
        try:
            row = with_side_file(row, Path(path).parent)  # a predictions.jsonl row capped by evalkit
        except SideFileError as exc:  # its first characters are not the output: the sample fails (missing_output)
            log.warning("%s:%d: %s; the sample is not replayed", path, lineno, exc)
            continue
        sid = row.get("sample_id")
        if isinstance(sid, int) and not isinstance(sid, bool):
            sid = str(sid)  # SOBHard's ids are integers in its data: 1 is the id "1" (as run.sample_ids=[1] takes it)
        if not isinstance(sid, str) or not isinstance(row.get("output"), str):
            raise DataError(f"{path}:{lineno}: expected an object with fields sample_id (text or integer) and output (text)")
        text = row["raw_output"] if continuation and isinstance(row.get("raw_output"), str) else row["output"]
        epoch = row.get("epoch", 0)
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch <= MAX_REPLAY_EPOCH:
            raise DataError(f"{path}:{lineno}: epoch is {printable(json.dumps(epoch), 40)}, not a JSON integer from 0 "
                            f"to {MAX_REPLAY_EPOCH:,} (the repeat the row answers)")  # fmt: skip
        by_epoch = by_epoch or "epoch" in row
        if (sid, epoch) in outputs and outputs[(sid, epoch)] != text:
            raise DataError(f"{path}:{lineno}: sample {printable(sid, 200)}" + (f" epoch {epoch}" if "epoch" in row else "")
                            + " appears twice with different outputs")  # fmt: skip
        outputs[(sid, epoch)] = text
    if by_epoch:
        return outputs
    return {sid: text for (sid, _), text in outputs.items()}


def load_run_outputs(run_dir: Path, continuation: bool = False) -> dict[tuple[str, int], str]:
    """The answers a finished run recorded, per ``(sample_id, epoch)``: the rows of its
    ``predictions.jsonl`` that count (read through :mod:`evalkit.journal`, with the
    ``stale_lines`` of its ``summary.json``; a capped row's texts from its checked side
    file) and, for an answer whose judges failed, the ``output`` its ``judge_error`` row of
    ``failed.jsonl`` keeps. ``continuation``: a completion run's ``raw_output``, as
    :func:`load_replay_file` reads it. Nothing is read through a symbolic link.

    Raises:
        RunDirError: not a finished run (no readable ``summary.json``), a journal row that
            cannot count — one line.

    A capped row whose side file cannot be trusted is left out with one warning (its sample
    then fails as ``missing_output``).
    """
    run_dir = Path(run_dir)
    if run_dir.is_symlink() or not run_dir.is_dir():
        raise RunDirError(f"model.path: {printable(str(run_dir), 300)} is not a run directory (a link is never followed)")
    journal = read_run_journal(run_dir, read_summary(run_dir / "summary.json").stale_lines)
    outputs: dict[tuple[str, int], str] = {}
    for key, row in journal.rows.items():
        try:
            row = journal.full(row)
        except SideFileError as exc:
            log.warning("%s; the sample is not replayed", exc)
            continue
        text = row.get("raw_output") if continuation and isinstance(row.get("raw_output"), str) else row.get("output")
        if isinstance(text, str):
            outputs[key] = text
    for key, failure in read_failures(run_dir / FAILED).items():
        if key not in outputs and failure.get("error_kind") == "judge_error" and isinstance(failure.get("output"), str):
            outputs[key] = failure["output"]
    return outputs


def table_digest(outputs: dict[tuple[str, int], str]) -> str:
    """16 hex of SHA-256 over a replayed run's answers (sorted by key): the replay model's
    identity, so that a request hash changes when the answers do."""
    return sha256_hex(canonical_json(sorted([sid, epoch, text] for (sid, epoch), text in outputs.items())))[:16]


def file_digest(path: Path) -> str:
    return sha256_file(path, MAX_JSONL_BYTES, what="a replay file")[:16]
