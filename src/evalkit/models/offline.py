"""Models that need no network: ``reference`` (gold replay) and ``replay`` (recorded outputs).

Both answer from a table keyed by sample id that the driver builds before the run, so
they go through exactly the same engine path (journal, scoring, resume) as a real model.
"""

from __future__ import annotations

import logging
from pathlib import Path

from evalkit.errors import DataError, printable
from evalkit.jsonl import SideFileError, read_objects, with_side_file
from evalkit.models.base import ModelCallError
from evalkit.types import Completion, Failure, Request, sha256_hex

log = logging.getLogger("evalkit")


class TableModel:
    """Answers each request with ``outputs[request.sample_id]``.

    A sample absent from the table is a failure of kind ``missing_output`` (replay of a
    file that does not cover the selection), never an empty answer scored as 0.
    """

    def __init__(self, name: str, outputs: dict[str, str], source: str):
        self.outputs = outputs
        self.model_id = f"{name}:{source}"

    async def generate(self, request: Request) -> Completion:
        text = self.outputs.get(request.sample_id)
        if text is None:
            raise ModelCallError(Failure("missing_output", f"no recorded output for {request.sample_id}", attempts=1))
        if not text.strip():
            raise ModelCallError(Failure("empty", "recorded output is empty", attempts=1))
        return Completion(text=text, finish_reason="stop", attempts=1)


def load_replay_file(path: Path, continuation: bool = False) -> dict[str, str]:
    """Read a replay file: JSONL of ``{"sample_id": str, "output": str}`` (an integer
    ``sample_id`` is its decimal text, as SOBHard's data and ``run.sample_ids`` have it).

    ``continuation`` (``model.api=completion``): each answer is the model's continuation of a
    completion-mode prompt, which the engine puts after the benchmark's answer prefix as a
    live completion run does: a line's ``raw_output`` when it has one (a completion run's
    ``predictions.jsonl`` keeps the continuation there, and prefix + continuation in
    ``output``), else its ``output`` — so the prefix is never added twice.

    Raises:
        DataError: a line that is not such an object (names file and line) or a sample id
            given twice with different outputs (the id printed escaped).

    A capped ``predictions.jsonl`` row whose side file is missing or not what the row
    recorded (size, sha256) is left out with one warning: its sample then fails as
    ``missing_output``, never replays the row's first characters.
    """
    outputs: dict[str, str] = {}
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
        if sid in outputs and outputs[sid] != text:
            raise DataError(f"{path}:{lineno}: sample {printable(sid, 200)} appears twice with different outputs")
        outputs[sid] = text
    return outputs


def file_digest(path: Path) -> str:
    return sha256_hex(Path(path).read_bytes())[:16]
