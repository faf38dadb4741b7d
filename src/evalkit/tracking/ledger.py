"""``tracking.json`` in a run directory: what has been logged of the run to which store, so
that logging again (a resumed run, ``python -m evalkit.track``) adds only what is new.

Content::

    {"mlflow_run_id": "...", "tracking_uri": "...", "experiment_id": "...",
     "summary_sha256": "<of the summary.json last logged whole, or null>",
     "run_key": "<32 hex: this directory's key; the MLflow run carries its sha256 as the
                 tag evalkit.run_key_sha256>",
     "traces": {"<sample key>": "<trace id>", ...}}

A run directory is untrusted input (it may have been copied or edited): the file is checked
against :class:`LedgerFile` (types and bounds; a violation is one line, exit 2), and the
MLflow run it names is written only when it belongs to the directory (see
:func:`owner_problem`).

A trace id names what its trace shows (:func:`evalkit.tracking.traces.trace_id_of`), so an
unchanged sample keeps its trace and a changed one (failed, now scored) gets a new one in
place of the old. The file is rewritten (atomically) after every batch of traces: a
logging that stops half-way resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets as random_secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from evalkit import secrets
from evalkit.errors import RunDirError, TrackingError, printable
from evalkit.untrusted import read_json

FILE = "tracking.json"
#: the MLflow tag holding the sha256 (hex) of the directory's ``run_key``
RUN_KEY_TAG = "evalkit.run_key_sha256"
#: the largest ``tracking.json`` read (bytes): a trace id per sample for millions of samples
MAX_FILE_BYTES = 512 * 1024 * 1024

_Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class LedgerFile(BaseModel):
    """The schema of ``tracking.json`` (bounds: ids of at most 64 characters from
    ``[A-Za-z0-9_-]``, a store address of at most 4,096 characters, sample keys of at most
    100,000 characters, at most 10 million traces)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    mlflow_run_id: _Id | None = None
    tracking_uri: Annotated[str, StringConstraints(max_length=4096)]
    experiment_id: _Id | None = None
    summary_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    run_key: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")] | None = None
    traces: Annotated[dict[Annotated[str, StringConstraints(max_length=100_000)],
                           Annotated[str, StringConstraints(pattern=r"^tr-[0-9a-f]{32}$")]],
                      Field(max_length=10_000_000)] | None = None  # fmt: skip


class StoreAnswerRefused(TrackingError):
    """The tracking store answered an id that :class:`LedgerFile` refuses (a run, experiment
    or trace id that is not one: a server answering garbage): ``tracking.json`` is left as it
    was, so the directory stays loggable. The logging failed, exit 1 (try again later)."""

    exit_code = 1


def _where(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc'][:2]) or '(top level)'}: {err['msg']}"


def _check_answer(state: dict[str, Any], tracking_uri: str, path: Path | None) -> None:
    """Raise :class:`StoreAnswerRefused` (one line naming the store and the field) unless
    ``state`` passes :class:`LedgerFile`."""
    try:
        LedgerFile.model_validate(state)
    except ValidationError as exc:
        kept = f"; {printable(str(path))} is left as it was" if path else ""
        raise StoreAnswerRefused(f"tracking: the MLflow store {printable(secrets.scrub(tracking_uri), 300)} answered what is "
                                 f"not an MLflow id ({printable(_where(exc), 300)}){kept}") from None  # fmt: skip


def checked_traces(traces: dict[str, str], tracking_uri: str) -> dict[str, str]:
    """``traces`` (``{sample key: trace id}`` as the store lists them) once they pass
    :class:`LedgerFile`'s bounds.

    Raises:
        StoreAnswerRefused: a key or trace id the store answered breaks them.
    """
    _check_answer({"tracking_uri": tracking_uri, "traces": traces}, tracking_uri, None)
    return traces


def read_file(path: Path) -> LedgerFile | None:
    """``tracking.json`` at ``path`` checked against :class:`LedgerFile`; ``None`` when there
    is none. The file is opened without following a symbolic link, and read only when it is a
    regular file (:func:`evalkit.untrusted.open_regular`).

    Raises:
        RunDirError: the file is a link, too large, not JSON, or breaks the schema (one
            line naming the file and the field).
    """
    if not os.path.lexists(path):
        return None
    state = read_json(path, MAX_FILE_BYTES, follow=False, what="tracking.json", error=RunDirError)
    try:
        return LedgerFile.model_validate(state)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, ValidationError):
            raise RunDirError(f"{path}: {_where(exc)}") from None
        raise RunDirError(f"{path}: not JSON ({type(exc).__name__})") from None


def store_a_run_may_name(uri: str, run_dirs: tuple[Path, ...]) -> bool:
    """Whether ``uri``, a store that run directories' ``tracking.json`` name, may be used
    because they name it: it is the one ``MLFLOW_TRACKING_URI`` names, or a SQLite file in a
    folder holding every one of ``run_dirs`` (their own output root,
    ``sqlite:///<run.output_root>/mlflow.db``). A run directory is untrusted: it never picks
    the server evalkit sends the user's MLflow credentials to, nor where a new SQLite file is
    written (issue 43); ``compare --log`` and ``evalkit.judge`` (issue 47) follow this rule."""
    if uri == os.environ.get("MLFLOW_TRACKING_URI"):
        return True
    if uri.startswith("sqlite:///"):
        folder = Path(uri.removeprefix("sqlite:///")).parent.resolve()
        return all(Path(d).resolve().is_relative_to(folder) for d in run_dirs)
    return False


def key_digest(run_key: str) -> str:
    """The sha256 (hex) of a ``run_key``: what the MLflow run's :data:`RUN_KEY_TAG` holds (the
    key itself stays in the directory, so reading the store does not give it away)."""
    return hashlib.sha256(run_key.encode("ascii")).hexdigest()


@dataclass
class Ledger:
    """The logging record of one run directory in one tracking store (``run_id`` ``None``:
    nothing logged there yet)."""

    path: Path
    tracking_uri: str
    run_id: str | None = None
    experiment_id: str | None = None
    summary_sha256: str | None = None
    traces: dict[str, str] = field(default_factory=dict)
    run_key: str | None = None

    @classmethod
    def load(cls, run_dir: Path, tracking_uri: str) -> "Ledger":
        """The ledger of ``run_dir`` for ``tracking_uri``: empty when the file is missing or
        records another store (the run is then logged there anew).

        Raises:
            RunDirError: the file breaks :class:`LedgerFile` (see :func:`read_file`).
        """
        path = Path(run_dir) / FILE
        state = read_file(path)
        if state is None or state.tracking_uri != tracking_uri:
            return cls(path, tracking_uri, run_key=state.run_key if state else None)
        return cls(path, tracking_uri, state.mlflow_run_id, state.experiment_id, state.summary_sha256,
                   dict(state.traces or {}), state.run_key)  # fmt: skip

    def new_key(self) -> str:
        """This directory's run key (made now when it has none)."""
        if self.run_key is None:
            self.run_key = random_secrets.token_hex(16)
        return self.run_key

    def save(self) -> None:
        """Write the file atomically (a temporary file renamed over it), once its run and
        experiment ids — the store's answers — pass :class:`LedgerFile` (its traces are the
        store's only through :func:`checked_traces`).

        Raises:
            StoreAnswerRefused: an id the store answered is not one; nothing is written.
        """
        state = {"mlflow_run_id": self.run_id, "tracking_uri": self.tracking_uri, "experiment_id": self.experiment_id,
                 "summary_sha256": self.summary_sha256, "run_key": self.run_key, "traces": self.traces}  # fmt: skip
        _check_answer({**state, "traces": None}, self.tracking_uri, self.path)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, ensure_ascii=False) + "\n", encoding="utf-8", errors="backslashreplace")
        os.replace(tmp, self.path)


def owner_problem(run_dir: Path, ledger: Ledger, tags: dict[str, str]) -> str | None:
    """Why the MLflow run ``ledger.run_id`` (whose tags are ``tags``) does not belong to
    ``run_dir``, or ``None`` when it does. It belongs when its :data:`RUN_KEY_TAG` is the
    digest of the directory's ``run_key``, or (a run logged before run keys) its ``run_dir``
    tag names this directory. A directory whose key matches but whose run's ``run_dir`` tag
    names another directory that still holds that key is a copy, not the run moved."""
    here = str(Path(run_dir).resolve())
    tagged_dir, tagged_key = tags.get("run_dir"), tags.get(RUN_KEY_TAG)
    if tagged_key is not None:
        if ledger.run_key is None or key_digest(ledger.run_key) != tagged_key:
            return f"its run key is not this directory's (the run belongs to {tagged_dir})"
        if tagged_dir and tagged_dir != here:
            try:
                other = read_file(Path(tagged_dir) / FILE)
            except RunDirError:
                other = None
            if other is not None and other.run_key == ledger.run_key:
                return f"this directory is a copy of {tagged_dir}, which still holds the run"
        return None
    if tagged_dir != here:
        return f"its run_dir tag names {tagged_dir}, not this directory"
    return None
