"""JSON Lines, the one module that writes them (run journals, side files, replay files);
they are read back through :mod:`evalkit.untrusted` (the one layer of every read).

Rules, the same for every file evalkit reads or writes:

* a record is one line; lines are split on ``\\n`` only (``\\r\\n`` is tolerated), never on
  the other characters :meth:`str.splitlines` breaks on (U+2028, U+2029, U+0085, form
  feed ...), which are data inside JSON strings;
* the writer emits one compact JSON object per line, UTF-8, with U+2028/U+2029/U+0085
  escaped (``\\u2028``) and a lone surrogate written as its ``\\udXXX`` escape, so that every
  line it writes is read back by any JSON Lines reader, evalkit's or another tool's;
* :func:`evalkit.untrusted.read_objects` is the **strict** reader (inputs: a bad line is one
  error naming file and line); :func:`evalkit.untrusted.read_tolerant` is the **tolerant**
  reader (journals a killed process may have torn: unreadable lines are skipped, counted and
  named by number).

A parser of *model output* that happens to read JSON lines (SOBHard's ``jsonl`` notation)
follows its benchmark's own rules instead (spec), not this module.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from evalkit.errors import WRITE_FAULTS, RunDirWriteError, write_failed
from evalkit.untrusted import SideFileError, link_refusal, open_flags

#: TEST-ONLY seam: called with the path before every write of a journal row, a side file
#: or ``summary.json``; it may raise :class:`OSError` to make the run directory fail writes
#: for a moment. ``None`` in every production run: nothing under ``src/`` assigns it (a test
#: scans for that), and no configuration key or environment variable of evalkit reaches it.
#: Only ``tests/support/write_faults.py`` sets it, loaded into a driver process by
#: ``perf/chaos.py`` through a ``sitecustomize`` module on that process's ``PYTHONPATH``
#: (tests/support/chaos_site/), which is in the repository checkout, not in the package.
before_write: Callable[[Path], None] | None = None


def check_write(path: Path) -> None:
    """Run the test-only :data:`before_write` seam, if a test installed one (else nothing).

    Raises:
        OSError: only what the installed seam raises.
    """
    if before_write is not None:
        before_write(Path(path))

#: characters JSON allows raw inside strings that some line readers treat as line breaks
_LINE_BREAKS_IN_STRINGS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}
_TRANS = str.maketrans(_LINE_BREAKS_IN_STRINGS)


def dumps_line(obj: Any) -> str:
    """``obj`` as one JSON Lines record (no trailing newline): compact, UTF-8 kept,
    U+2028/U+2029/U+0085 escaped; values JSON cannot hold are written as ``str(value)``.
    Lone surrogates stay in the returned text; :class:`JsonlAppender` writes them as their
    ``\\udXXX`` escape."""
    return json.dumps(obj, ensure_ascii=False, default=str).translate(_TRANS)


class JsonlAppender:
    """Append JSON objects to ``path``, one per line (:func:`dumps_line`), flushed to the OS
    at once, so a SIGKILL of the process loses nothing already written; ``fsync`` at most
    once per ``fsync_interval_s`` and on close, so an OS crash loses at most that window.

    ``transform`` (e.g. secret scrubbing) is applied to every row before it is written.
    """

    def __init__(self, path: Path, fsync_interval_s: float = 1.0, transform: Any = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_symlink():
            raise link_refusal(self.path)
        self._repair_torn_tail()
        # backslashreplace: a lone surrogate in model text is written as the JSON escape
        # \udXXX (valid JSON that reads back to the same string) instead of crashing;
        # O_NOFOLLOW: a link planted after the check above is not written through either
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        self._fh = os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")
        self._fsync_interval_s = fsync_interval_s
        self._last_fsync = time.monotonic()
        self._transform = transform
        self._failed: RunDirWriteError | None = None

    def _repair_torn_tail(self) -> None:
        """A killed writer may leave a last line without newline: end it so the next row
        starts on its own line (the torn row itself is skipped by tolerant readers)."""
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb+") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")

    def append(self, row: dict[str, Any]) -> None:
        """Write ``row`` as one line.

        Raises:
            RunDirWriteError: the write failed (a full disk, an I/O error): the rows
                appended before are on disk; this one is not, or is a torn last line that
                the next appender mends. The appender then writes no more.
        """
        if self._transform is not None:
            row = self._transform(row)
        line = dumps_line(row) + "\n"
        if self._failed:
            raise self._failed
        try:
            check_write(self.path)
            self._fh.write(line)
            self._fh.flush()
            now = time.monotonic()
            if now - self._last_fsync >= self._fsync_interval_s:
                os.fsync(self._fh.fileno())
                self._last_fsync = now
        except OSError as exc:
            self._failed = write_failed(self.path, exc)
            raise self._failed from exc

    def close(self) -> None:
        """Flush, ``fsync`` and close; after a failed write, close without flushing again
        (what could not be written is dropped, never raised a second time)."""
        if self._fh.closed:
            return
        if self._failed:
            try:
                self._fh.close()
            except OSError:
                pass
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



#: characters of a sample id kept (made safe) at the start of a unit's file name, for reading
NAME_PREFIX_CHARS = 40


def unit_file_name(sample_id: str, epoch: int) -> str:
    """The file name of one unit's side file or transcript: ``<id prefix>-<digest>.json``.

    The digest (sha256 of the JSON of ``[sample_id, epoch]``, 32 hex characters: 128 bits)
    makes the name injective over (sample id, epoch) — ``x/y`` and ``x__y``, or two epochs of
    one sample, never share a file — and bounded (at most 78 characters) whatever the id
    holds (1,000 characters, ``/``, ``..``, NUL, control characters). The prefix is the id's
    first :data:`NAME_PREFIX_CHARS` characters with everything but ``[A-Za-z0-9._-]`` (and a
    leading ``.``) replaced by ``_``, for a reader of the directory only (the digest alone
    identifies)."""
    digest = hashlib.sha256(json.dumps([sample_id, epoch]).encode("ascii")).hexdigest()[:32]
    prefix = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in sample_id[:NAME_PREFIX_CHARS])
    return f"{'_' + prefix[1:] if prefix.startswith('.') else prefix}-{digest}.json"



def write_unit_file(run_dir: Path, folder: str, name: str, data: bytes) -> str:
    """Write ``data`` to ``<run_dir>/<folder>/<name>`` without following a symbolic link
    (neither ``folder`` nor the file may be one: a link planted in a run directory is never
    written through); returns the path relative to ``run_dir``.

    Raises:
        SideFileError: ``folder`` or the file is a link or not writable (one line).
        RunDirWriteError: the file system refused the write (a full disk, an I/O error:
            :data:`~evalkit.errors.WRITE_FAULTS`).
    """
    where = Path(run_dir) / folder
    try:
        where.mkdir(exist_ok=True)
        if where.is_symlink():
            raise OSError(errno.ELOOP, "a symbolic link")
        check_write(where / name)
        fd = os.open(where / name, open_flags(write=True), 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        if exc.errno in WRITE_FAULTS:  # a full disk, an I/O error
            raise write_failed(where / name, exc) from exc
        raise SideFileError(f"{where / name}: cannot be written ({exc.strerror or type(exc).__name__}; "
                            "evalkit never writes through a symbolic link in a run directory)") from None  # fmt: skip
    return f"{folder}/{name}"
