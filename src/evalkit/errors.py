"""evalkit's user-facing errors: each one becomes a single clear line and exit code 2."""

from __future__ import annotations

import errno
import re
import shlex
from typing import Any


class EvalkitError(Exception):
    """Base of errors reported as one line without a traceback (exit code 2)."""

    exit_code = 2


class ConfigError(EvalkitError):
    """The composed configuration is invalid (unknown key, wrong type, missing credential)."""


class DataError(EvalkitError):
    """Benchmark data is missing, malformed or fails an integrity check."""


class RunDirError(EvalkitError):
    """The run directory cannot be used (exists without resume, resume target missing)."""


class JudgeError(EvalkitError):
    """A judge could not be asked: its server unreachable, or an error (or no valid verdict)
    for every call. Nothing was measured, so nothing is recorded."""


class TrackingError(EvalkitError):
    """Experiment tracking (MLflow) failed; the run directory holds the results."""


class RunDirWriteError(EvalkitError):
    """A file of the run directory could not be written (a full disk, an I/O error): the
    run stops there. Every row journaled before stays (each was flushed when written; a torn
    last line is mended on resume), and ``run.resume=<run_dir>`` continues the run once the
    cause is fixed. Exit code 1: the run is incomplete, not refused.

    Attributes:
        path: the file that failed (``pathlib.Path``).
        reason: the operating system's words (``No space left on device``).
        run_dir: the run directory, set once known (:func:`evalkit.engine.rundir.open_run`);
            ``None``: the line names no resume.
    """

    exit_code = 1

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(str(path), reason)
        self.path, self.reason = path, reason
        self.run_dir: object = None

    def __str__(self) -> str:
        line = f"cannot write {self.path} ({self.reason})"
        if self.run_dir is None:
            return line
        return f"{line}; the samples journaled before it are kept — resume with {resume_arg(self.run_dir)}"


#: the errors of a write the file system or its device refused (full, over quota, too large,
#: read-only, failing): what :class:`RunDirWriteError` reports when a file is opened and
#: written at once (a folder where a file should be, a link: not these, said otherwise)
WRITE_FAULTS = frozenset({errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def write_failed(path: object, exc: OSError) -> RunDirWriteError:
    """:class:`RunDirWriteError` for ``path`` from the :class:`OSError` a write raised."""
    return RunDirWriteError(path, exc.strerror or first_line(exc))


def first_line(exc: BaseException, limit: int | None = 300) -> str:
    """The first line of an exception's message (its type name when it has none), cut to
    ``limit`` characters: what a one-line error quotes of a library's exception."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:limit]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 request"``, ``"3 requests"``, ``"0 requests"``: ``n`` and ``noun`` in the number
    English gives it (``plural``: the plural when it is not ``noun + "s"``). For console lines
    (issue 35: "1 requests")."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


#: functions every :func:`printable` text passes through first: :mod:`evalkit.secrets` adds its
#: ``scrub`` when imported, so that a registered secret is never printed, whichever error line
#: quotes it (a value a config read from ``${oc.env:…}``, an override echoed by a parser)
line_filters: list = []


def printable(text: object, limit: int | None = None) -> str:
    """``text`` (``str()`` of anything else) safe to print on a terminal as part of one line:
    every character that is not printable (Python's :meth:`str.isprintable`: controls such as
    ESC, CR, newline and NUL, line and paragraph separators, format characters such as
    bidirectional overrides, lone surrogates) is written as its Python escape (``\\x1b``,
    ``\\u202e``, ``\\ud800``), so that data (sample ids, model outputs, error bodies) never
    moves the cursor, recolours, or splits a line. ``limit``: at most that many characters of
    ``text`` are shown, then ``…``. Linear in the length of ``text``."""
    text = text if isinstance(text, str) else str(text)
    for line_filter in line_filters:
        text = line_filter(text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during a run whose directory exists: the samples finished so far are
    journaled there, and ``run.resume=<run_dir>`` continues the run.

    Attributes:
        run_dir: the run directory (``pathlib.Path``).
    """

    def __init__(self, run_dir: object) -> None:
        super().__init__(str(run_dir))
        self.run_dir = run_dir


def interrupted_line(exc: BaseException) -> str:
    """The one line printed when a run is interrupted: where to resume it, when known."""
    run_dir = getattr(exc, "run_dir", None)
    target = resume_arg(run_dir) if run_dir is not None else "run.resume=<run dir>"
    return f"evalkit: interrupted; finished samples are journaled — resume with {target}"


def shell_line(*argv: object) -> str:
    """``argv`` (each ``str()``-ed) as one command line a POSIX shell splits back into exactly
    these words (:func:`shlex.join`): every command evalkit prints or records for a user to
    paste. A run directory named ``x;touch PWNED;y`` is quoted, never run."""
    return shlex.join(str(a) for a in argv)


#: a value Hydra's override grammar reads as it is, unquoted (a conservative subset)
_HYDRA_PLAIN = re.compile(r"^[A-Za-z0-9_./:@%+~-]+$")


def hydra_value(value: object) -> str:
    """``value`` as Hydra's override grammar reads it back exactly: as it is when plain, else
    single-quoted, a quote escaped and the backslashes before a quote or at the end doubled
    (Hydra unescapes only those)."""
    text = str(value)
    if _HYDRA_PLAIN.match(text):
        return text
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text) + "'"


def resume_arg(run_dir: object) -> str:
    """``run.resume=<run_dir>`` as one shell word that Hydra reads back as that directory
    (:func:`hydra_value`, then :func:`shlex.quote`d when it needs to be): pasted as printed, a
    directory named ``x $(touch PWN);`id``` resumes, and runs nothing."""
    return shlex.quote(f"run.resume={hydra_value(run_dir)}")


#: a host whose 1-minute load average per core is at least this is called loaded (the likely
#: cause of a timeout or a slow start there)
LOADED_PER_CORE = 1.5


def host_load(loadavg: tuple[float, float, float] | None = None, cores: int | None = None) -> str:
    """``"the host's load is 25.1 on 2 cores"`` when the 1-minute load average per core is
    at least :data:`LOADED_PER_CORE` (``os.getloadavg()`` and ``os.cpu_count()`` unless
    given), else ``""`` (a quiet host, or a platform without a load average): the hint a
    timeout or a slow start gives when the host is the likely cause."""
    import os

    try:
        load = loadavg or os.getloadavg()
    except OSError:
        return ""
    cores = cores or os.cpu_count() or 1
    if load[0] / cores < LOADED_PER_CORE:
        return ""
    return f"the host's load is {load[0]:.1f} on {counted(cores, 'core')}"


async def within(awaitable: Any, timeout_s: float | None) -> Any:
    """``await awaitable`` with a deadline of ``timeout_s`` seconds (``None``: none).

    Raises:
        TimeoutError: (``asyncio.TimeoutError``) the deadline passed first; ``awaitable``
            was cancelled and has ended.
        asyncio.CancelledError: the caller was cancelled, always, even when ``awaitable``
            ended at the same moment. ``asyncio.wait_for`` before Python 3.12 returns the
            result then and the cancellation is lost: a batch run's poll loop went on after a
            Ctrl-C, so the run never ended (CI, stop 52). ``asyncio.timeout`` (3.11) awaits
            in the caller's own task and cannot lose it; Python 3.10 keeps ``wait_for``.
    """
    import asyncio

    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:  # pragma: no cover - Python 3.10
        return await asyncio.wait_for(awaitable, timeout_s)
    async with timeout(timeout_s):
        return await awaitable
