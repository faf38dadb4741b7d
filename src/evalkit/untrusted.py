"""The one layer every untrusted byte enters through (issue 43).

Untrusted is everything but evalkit's own code and installed plugins: datasets and the
images they name, run directories (journals, summaries, side files, ``config.yaml``),
EvalScope directories to import, config directories (``EVALKIT_CONFIG_DIR``) and task
files, baselines, batch result files. Every read of a file by path, wherever the path came
from, goes through this module; ``tests/test_trust_boundary.py`` scans ``src/`` and fails
when another module opens, reads or copies a file by path, decodes an image from a path, or
reads Parquet, JSON or YAML from a file.

The rules, the same for every reader:

* **No link out of its root.** A caller that knows the directory a file must lie in (a run
  directory, a dataset's folder, an import directory, a config directory) passes it as
  ``root``: a path that resolves outside it (a symbolic link, ``..``) is refused. Without a
  root, the path is the one the user named and is read as named. Run-directory readers also
  refuse a link as the file itself (``follow=False``: ``O_NOFOLLOW``).
* **Regular files only.** Opened with ``O_NONBLOCK`` (opening a FIFO no writer holds would
  wait for ever) and checked with ``fstat`` on the descriptor before any byte is read: a
  FIFO, a device, a socket or a directory is refused by name.
* **Bounded.** Every read has a byte bound (per file; per line for line readers), checked
  against ``fstat``'s size first and counted while reading (a file that grows is cut at the
  bound); line readers stream a line at a time; Parquet is read by row groups and batches,
  with ``max_rows`` and a decoded-size bound applied before the rest is decoded.
* **One line, exit 2.** A refusal is the caller's :class:`~evalkit.errors.EvalkitError`
  subclass (``error``; :class:`~evalkit.errors.DataError` by default), whose message is one
  line naming the file and the bound: ``<path>: <what it is or what bound it passed>; not
  read``. A NUL in a path, a directory, a missing file and an unreadable one are refusals
  too, never tracebacks.

Nothing read here is executed: YAML is read by a bounded ``SafeLoader``; JSON by
:func:`json.loads` with its nesting bounded and, for records (:func:`read_json`), NaN and
Infinity refused.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from evalkit.errors import DataError, EvalkitError, RunDirError, printable

PathLike = "str | os.PathLike[str]"


# ---- the primitive: one open of a regular file, inside its root, bounded --------------------
def refusal(path: object, reason: str, error: type[EvalkitError] = DataError) -> EvalkitError:
    """``error`` with the layer's one-line message ``<path>: <reason>; not read``."""
    return error(f"{printable(str(path), 300)}: {reason}; not read")


def _file_kind(mode: int) -> str:
    """What a non-regular file is, in words (``stat``'s file type of ``mode``)."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_flags(write: bool) -> int:
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if write else os.O_RDONLY
    return flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def checked_path(path: object, root: object = None, error: type[EvalkitError] = DataError,
                 links: bool = True) -> Path:
    """``path`` as a :class:`~pathlib.Path` once it is a usable name and, with ``root``,
    resolves inside ``root`` (links and ``..`` followed to their end, ``root`` itself
    resolved too); with ``links=False`` as well, no part of it below ``root`` is a link.

    Raises:
        error: a NUL character in the name, not a path at all, outside ``root``, or (with
            ``links=False``) reached through a link below ``root`` (one line).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise error(f"{printable(repr(path), 200)}: not a file path; not read")
    name = os.fspath(path)
    if isinstance(name, bytes) or "\0" in name:
        raise refusal(printable(name, 200), "a path with a NUL character", error)
    if root is not None:
        real, top = os.path.realpath(name), os.path.realpath(os.fspath(root))  # type: ignore[arg-type]
        if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
            raise refusal(name, f"leads outside {printable(str(root), 200)} (through a symbolic link or '..'), "
                          "and nothing is read from outside it", error)  # fmt: skip
        if not links:
            below = os.path.relpath(os.path.abspath(name), os.path.abspath(os.fspath(root)))  # type: ignore[arg-type]
            if os.path.normpath(os.path.join(top, below)) != real:
                raise refusal(name, "reached through a symbolic link, never followed here", error)
    return Path(name)


def _os_reason(exc: OSError, path: object = None) -> str:
    if exc.errno == errno.ENXIO and path is not None:  # a socket (or a device with no driver) refuses open
        try:
            return f"{_file_kind(os.lstat(path).st_mode)}, not a regular file"  # type: ignore[arg-type]
        except OSError:
            pass
    if exc.errno == errno.ENOENT:
        return "does not exist"
    if exc.errno == errno.ELOOP:
        return "a symbolic link, never followed here"
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is not a directory"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"


class _Bounded(io.RawIOBase):
    """A raw reader of one descriptor that refuses to return more than ``limit`` bytes in
    all (a read that would pass the bound raises ``error``)."""

    def __init__(self, fd: int, limit: int, path: Path, error: type[EvalkitError], what: str):
        self._fd, self._limit, self._path, self._error, self._what = fd, limit, path, error, what
        self._count = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return os.lseek(self._fd, offset, whence)

    def tell(self) -> int:
        return os.lseek(self._fd, 0, io.SEEK_CUR)

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        room = self._limit - self._count + 1
        try:
            got = os.readv(self._fd, [view[: max(1, min(len(view), room))]])
        except OSError as exc:
            raise refusal(self._path, _os_reason(exc), self._error) from None
        self._count += got
        if self._count > self._limit:
            raise refusal(self._path, f"more than {self._limit:,} bytes, the bound for {self._what}", self._error)
        return got

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def open_file(path: object, limit: int, *, root: object = None, follow: bool = True, what: str = "this file",
              error: type[EvalkitError] = DataError) -> BinaryIO:
    """A binary reader of the regular file ``path`` that yields at most ``limit`` bytes.

    ``root``: the directory the file must lie in (:func:`checked_path`); ``follow=False``:
    the file itself may not be a symbolic link (``O_NOFOLLOW``: run directories), nor,
    with ``root``, any folder between ``root`` and it. ``what``
    names the bound in the refusal (``"an image"``). The reader is seekable (Parquet reads
    its footer first); a read past ``limit`` bytes raises ``error``.

    Raises:
        error: a NUL in the name, outside ``root``, missing, unreadable, a link (with
            ``follow=False``), not a regular file (a FIFO is never waited on: ``O_NONBLOCK``,
            then ``fstat`` of what was opened), or larger than ``limit`` (one line).
    """
    where = checked_path(path, root, error, links=follow)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(where, flags)
    except OSError as exc:
        raise refusal(where, _os_reason(exc, where), error) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refusal(where, f"{_file_kind(st.st_mode)}, not a regular file", error)
        if st.st_size > limit:
            raise refusal(where, f"{st.st_size:,} bytes, over the {limit:,} allowed for {what}", error)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(_Bounded(fd, limit, where, error, what))  # type: ignore[return-value]


def read_bytes(path: object, limit: int, *, root: object = None, follow: bool = True, what: str = "this file",
               error: type[EvalkitError] = DataError) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` (:func:`open_file`'s rules).

    Raises:
        error: as :func:`open_file` (one line).
    """
    with open_file(path, limit, root=root, follow=follow, what=what, error=error) as fh:
        return fh.read()


def read_text(path: object, limit: int, *, root: object = None, follow: bool = True, what: str = "this file",
              error: type[EvalkitError] = DataError) -> str:
    """The UTF-8 text of ``path`` (:func:`read_bytes`), strictly decoded.

    Raises:
        error: as :func:`open_file`, or not UTF-8 (one line).
    """
    data = read_bytes(path, limit, root=root, follow=follow, what=what, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refusal(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})", error) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a record may hold")


def _finite_float(text: str) -> float:
    """A JSON number's value, refused when it overflows to infinity (``1e999``: no ``NaN`` or
    ``Infinity`` literal needed)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{printable(text, 40)} overflows to infinity, not a number a record may hold")
    return value


def read_json(path: object, limit: int, *, root: object = None, follow: bool = True, what: str = "a JSON record",
              error: type[EvalkitError] = DataError, finite: bool = True) -> Any:
    """One JSON document from ``path`` (:func:`read_text`), nested at most
    :data:`MAX_JSON_DEPTH` levels, with ``NaN``, ``Infinity``, ``-Infinity`` and ``1e999`` refused
    (Python's :func:`json.loads` accepts them) unless ``finite=False`` (a record evalkit
    itself writes with :func:`json.dumps`, whose figures are recomputed, never believed).

    Raises:
        error: as :func:`read_text`, not JSON, nested too deeply, or a non-finite number.
    """
    text = read_text(path, limit, root=root, follow=follow, what=what, error=error)
    try:
        return loads_bounded(text, finite=finite)
    except json.JSONDecodeError as exc:
        raise refusal(path, f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})", error) from None
    except ValueError as exc:
        raise refusal(path, str(exc), error) from None


def copy_file(source: object, target: Path, limit: int, *, root: object = None, follow: bool = False,
              what: str = "this file", error: type[EvalkitError] = DataError) -> None:
    """Copy the regular file ``source`` (read by :func:`open_file`'s rules: inside ``root``,
    no link by default, at most ``limit`` bytes) to ``target``, written without following a
    link there and streamed in 1 MiB chunks.

    Raises:
        error: ``source`` refused (one line).
        OSError: ``target`` could not be written.
    """
    chunks = iter_chunks(source, limit, root=root, follow=follow, what=what, error=error)
    first = next(chunks, b"")  # the source is opened (or refused) before the target is made
    fd = os.open(target, open_flags(write=True), 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(first)
        for chunk in chunks:
            out.write(chunk)


def sha256_file(path: object, limit: int, *, root: object = None, follow: bool = True, what: str = "this file",
                error: type[EvalkitError] = DataError) -> str:
    """The SHA-256 (hex) of the regular file ``path``, streamed in 1 MiB chunks
    (:func:`open_file`'s rules: at most ``limit`` bytes).

    Raises:
        error: as :func:`open_file` (one line).
    """
    digest = hashlib.sha256()
    for chunk in iter_chunks(path, limit, root=root, follow=follow, what=what, error=error):
        digest.update(chunk)
    return digest.hexdigest()


def iter_chunks(path: object, limit: int, *, root: object = None, follow: bool = True, what: str = "this file",
                error: type[EvalkitError] = DataError) -> Iterator[bytes]:
    """The bytes of the regular file ``path`` in chunks of at most 1 MiB (:func:`open_file`'s
    rules: at most ``limit`` bytes in all), for hashing or copying without holding the file.

    Raises:
        error: as :func:`open_file` (one line; at the first chunk for a refused open).
    """
    with open_file(path, limit, root=root, follow=follow, what=what, error=error) as fh:
        while chunk := fh.read(2**20):
            yield chunk


# ---- Parquet: row groups and batches, bounded before the rest is decoded -------------------
#: the largest Parquet file read (bytes on disk)
MAX_PARQUET_FILE_BYTES = 4 * 2**30
#: the most bytes a Parquet file may decode to (Arrow's in-memory size of what is read): a
#: 4 KB file once decoded to 1.5 GB
MAX_PARQUET_DECODED_BYTES = 2 * 2**30
#: rows decoded at once: a dictionary-encoded column repeats a value per row, so the
#: decoded size is checked every this many rows
PARQUET_BATCH_ROWS = 256


def iter_parquet(path: object, *, max_rows: int | None = None, max_decoded: int = MAX_PARQUET_DECODED_BYTES,
                 root: object = None, error: type[EvalkitError] = DataError) -> Iterator[dict[str, Any]]:
    """The rows of a Parquet file as dicts, in order, read a row group at a time in batches
    of :data:`PARQUET_BATCH_ROWS`: at most ``max_rows`` rows are decoded (``None``: all), and
    the decoded size is bounded by ``max_decoded`` bytes, checked against each row group's
    recorded uncompressed size before it is read and against each batch as it is decoded.

    Raises:
        error: as :func:`open_file`, not Parquet, or over ``max_decoded`` (one line).
    """
    import pyarrow as pa  # deferred: only Parquet data needs it
    import pyarrow.parquet as pq

    with open_file(path, MAX_PARQUET_FILE_BYTES, root=root, what="a Parquet file", error=error) as fh:
        try:
            pf = pq.ParquetFile(fh)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise refusal(path, f"not a Parquet file ({printable(str(exc), 200)})", error) from None
        left, decoded = max_rows, 0
        for group in range(pf.metadata.num_row_groups):
            if left is not None and left <= 0:
                return
            recorded = pf.metadata.row_group(group).total_byte_size
            if decoded + recorded > max_decoded:
                raise refusal(path, f"decodes to more than {max_decoded:,} bytes (row group {group} "
                              f"records {recorded:,}), the bound for a Parquet file", error)  # fmt: skip
            try:
                for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[group]):
                    decoded += batch.nbytes
                    if decoded > max_decoded:
                        raise refusal(path, f"decodes to more than {max_decoded:,} bytes, the bound for a Parquet file",
                                      error)  # fmt: skip
                    rows = batch.to_pylist()
                    if left is not None:
                        rows, left = rows[:left], left - len(rows[:left])
                    yield from rows
                    if left is not None and left <= 0:
                        return
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise refusal(path, f"not a readable Parquet file ({printable(str(exc), 200)})", error) from None


# ---- JSON and JSON Lines ---------------------------------------------------------------------
#: the longest line :func:`read_objects` reads (bytes): data and replay records are far
#: smaller (the largest shared record is under 1 MiB); a longer line is refused before it is
#: held in memory whole (a 1.4 GB line once ended in MemoryError)
MAX_LINE_BYTES = 64 * 2**20
#: the deepest nesting of arrays and objects a record read as data may have: the shared
#: data nests at most a dozen levels; deeper structures would overflow the recursion of
#: the code that walks them (hashing, validation, scoring)
MAX_JSON_DEPTH = 200
#: the largest JSON Lines file read as data (bytes): read a line at a time, so this bounds
#: time, not memory
MAX_JSONL_BYTES = 16 * 2**30


def json_depth_over(obj: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``obj`` nests lists and dicts more than ``limit`` levels deep (walked
    without recursion, stopping at the first level past ``limit``)."""
    level: list[Any] = [obj]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        nxt: list[Any] = []
        for value in level:
            if isinstance(value, dict):
                nxt.extend(v for v in value.values() if isinstance(v, (dict, list)))
            elif isinstance(value, list):
                nxt.extend(v for v in value if isinstance(v, (dict, list)))
        level = nxt
    return False


class DuplicateKeyError(ValueError):
    """A JSON object with a key twice (JSON leaves it undefined; Python keeps the last)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of :func:`json.loads` that refuses a key given twice in one object.

    Raises:
        DuplicateKeyError: naming the key (its first 40 characters).
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"{key[:40]!r} is given twice")
        out[key] = value
    return out


def loads_bounded(text: str, limit: int = MAX_JSON_DEPTH, finite: bool = False, unique: bool = False) -> Any:
    """``json.loads(text)`` of data, its nesting bounded; ``finite=True`` also refuses
    ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow to infinity (``1e999``),
    which :func:`json.loads` accepts; ``unique=True`` refuses a key given twice in an object
    (:func:`unique_keys`), which :func:`json.loads` resolves to the last.

    Raises:
        json.JSONDecodeError: not JSON.
        ValueError: nested more than ``limit`` levels (message ``JSON nested too deeply``),
            a non-finite number with ``finite``, or (:class:`DuplicateKeyError`) a duplicate
            key with ``unique``.
    """
    kwargs: dict[str, Any] = {"parse_constant": _refuse_constant, "parse_float": _finite_float} if finite else {}
    if unique:
        kwargs["object_pairs_hook"] = unique_keys
    try:
        obj = json.loads(text, **kwargs)
    except RecursionError:
        raise ValueError(f"JSON nested too deeply (more than {limit} levels)") from None
    # fewer opening brackets than the limit cannot nest deeper (counting is C-fast; most records stop here)
    if isinstance(obj, (dict, list)) and text.count("[") + text.count("{") > limit and json_depth_over(obj, limit):
        raise ValueError(f"JSON nested too deeply (more than {limit} levels)")
    return obj


def read_objects(path: object, error: type[EvalkitError] = DataError, *, root: object = None,
                 limit: int = MAX_JSONL_BYTES, max_rows: int | None = None,
                 strict_keys: bool = False) -> list[tuple[int, dict[str, Any]]]:  # fmt: skip
    """Strict reading: ``(line number, object)`` for every non-blank line of ``path``, read a
    line at a time (at most :data:`MAX_LINE_BYTES` per line, nesting at most
    :data:`MAX_JSON_DEPTH`), every row held (:func:`iter_records` holds one at a time).
    ``max_rows``: reading stops after that many objects (the rest of the file is never read).
    ``strict_keys``: a key given twice in an object is refused (:func:`unique_keys`) — for
    files people write (labels), where Python's last-wins would silently take one of two values.

    Raises:
        ``error`` (default DataError): the file is missing, unreadable or not UTF-8, or a
            line is too long, not JSON, nested too deeply, or not an object (with
            ``strict_keys``: a duplicate key) — naming file and line.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    for item in iter_records(path, error, root=root, limit=limit, strict_keys=strict_keys):
        rows.append(item)
        if max_rows is not None and len(rows) >= max_rows:
            break
    return rows


def iter_records(path: object, error: type[EvalkitError] = DataError, *, root: object = None,
                 limit: int = MAX_JSONL_BYTES, torn_last: list[int] | None = None,
                 strict_keys: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:  # fmt: skip
    """:func:`read_objects` a row at a time: ``(line number, object)`` for every non-blank
    line of ``path``, by the same rules, one row in memory at once (whatever the file's size:
    its caller keeps what it needs of each row). The file is opened at the first row.
    ``strict_keys``: as :func:`read_objects`.

    ``torn_last``: a list that receives the number of a torn last line — the file's last
    line, without a newline, that is not JSON or not UTF-8: what a writer killed mid-row
    leaves — which is then skipped instead of refused (a damaged line anywhere else is
    still refused).

    Raises:
        ``error`` (default DataError): as :func:`read_objects` (naming file and line; at the
            row where it is met, after the rows before it were yielded).
    """
    for lineno, line in iter_lines(path, error, root=root, limit=limit, torn_last=torn_last):
        try:
            obj = loads_bounded(line, unique=strict_keys)
        except json.JSONDecodeError as exc:
            if torn_last is not None and not line.endswith("\n"):  # the last line, cut short
                torn_last.append(lineno)
                return
            raise error(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        except DuplicateKeyError as exc:
            raise error(f"{path}:{lineno}: a duplicate key: {exc} (one value a key)") from None
        except ValueError as exc:
            raise error(f"{path}:{lineno}: {exc}") from None
        if not isinstance(obj, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def iter_lines(path: object, error: type[EvalkitError] = DataError, *, root: object = None,
               limit: int = MAX_JSONL_BYTES, torn_last: list[int] | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of ``path`` (:func:`open_file`'s rules, at most ``limit``
    bytes in all), read a line at a time, split on ``\n`` only, blank lines skipped, each
    line decoded as UTF-8 and at most :data:`MAX_LINE_BYTES` long. ``torn_last``: as
    :func:`iter_records` (a last line without a newline that is not UTF-8 is skipped, its
    number appended).

    Raises:
        error: as :func:`open_file`, a line too long or not UTF-8 (naming file and line).
    """
    fh = open_file(path, limit, root=root, what="a JSON Lines file", error=error)
    with fh:
        offset, lineno = 0, 0
        while True:
            try:
                raw = fh.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise error(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
            if not raw:
                return
            lineno += 1
            if len(raw) > MAX_LINE_BYTES:
                raise error(f"{path}:{lineno}: line longer than {MAX_LINE_BYTES // 2**20} MiB; not a record evalkit reads")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if torn_last is not None and not raw.endswith(b"\n"):  # the last line, cut inside a character
                    torn_last.append(lineno)
                    return
                raise error(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {offset + exc.start})") from None
            offset += len(raw)
            if text.strip():
                yield lineno, text


@dataclass
class TolerantRead:
    """What :func:`read_tolerant` found: ``rows`` as ``(line number, object)``, and the
    numbers of the non-blank lines that are not a JSON object (``unreadable``). ``torn_last``
    is True when the last of them is the file's last line and has no newline: what a killed
    writer leaves (the only damage a resume expects)."""

    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    unreadable: list[int] = field(default_factory=list)
    torn_last: bool = False

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [row for _, row in self.rows]


def link_refusal(path: Path) -> RunDirError:
    return RunDirError(f"{printable(str(path))}: a symbolic link; evalkit never reads or writes a journal "
                       "through a link (nothing follows links out of a run directory)")


def read_tolerant(path: Path) -> TolerantRead:
    """Tolerant reading of a JSON Lines file evalkit appends to (a journal), every row held
    (:func:`iter_tolerant` reads it a line at a time without holding them). A missing file
    reads as empty; undecodable bytes are replaced; a line that is not a JSON object is
    skipped and its number kept in ``unreadable``.

    Raises:
        RunDirError: ``path`` is a symbolic link (never followed, one line).
    """
    out = TolerantRead()
    out.rows = list(iter_tolerant(path, out))
    return out


def iter_tolerant(path: Path, into: TolerantRead | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each JSON-object line of a journal, read a line at a time
    (one row in memory at once, whatever the file's size), by :func:`read_tolerant`'s rules:
    lines split on ``\n`` only, blank lines skipped, undecodable bytes replaced. The numbers
    of the lines that are not a JSON object, and ``torn_last``, go to ``into`` (rows left
    empty) as the iteration passes them; they are complete once it is exhausted.

    Raises:
        RunDirError: ``path`` is a symbolic link or not a regular file (at the call, before
            any row).
    """
    path = Path(path)
    into = into if into is not None else TolerantRead()
    if not path.exists() and not path.is_symlink():
        return iter(())
    return _tolerant_rows(open_file(path, MAX_JSONL_BYTES, follow=False, what="a journal", error=RunDirError), into)


def _tolerant_rows(fh: Any, into: TolerantRead) -> Iterator[tuple[int, dict[str, Any]]]:
    """The rows of :func:`iter_tolerant` from the open binary file ``fh`` (closed at the end).
    A ``\n`` byte is never part of a UTF-8 sequence, so splitting the bytes on it splits
    the decoded text where a whole-file read would."""
    last, ended = None, True
    with fh:
        for lineno, raw in enumerate(fh, 1):
            ended = raw.endswith(b"\n")
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            last = lineno
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                obj = None
            if isinstance(obj, dict):
                yield lineno, obj
            else:
                into.unreadable.append(lineno)
    into.torn_last = bool(into.unreadable) and into.unreadable[-1] == last and not ended


def iter_objects(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a journal, a line at a time, skipping unreadable lines
    (:func:`iter_tolerant`).

    Raises:
        RunDirError: ``path`` is a symbolic link (at the call).
    """
    return (obj for _, obj in iter_tolerant(path))



#: fields of a journal row that may live in a side file (the model's texts)
SIDE_FILE_FIELDS = ("output", "raw_output", "output_unstripped", "reasoning", "trajectory")


class SideFileError(DataError):
    """A capped journal row's side file is missing, a link, outside the run directory, or
    does not hold the bytes its row recorded (``large.bytes`` / ``large.sha256``)."""




#: the largest record file of a run directory read whole (config.yaml, summary.json, …)
MAX_RECORD_BYTES = 256 * 1024 * 1024


def read_run_text(path: Path, limit: int = MAX_RECORD_BYTES) -> str:
    """The text of a run directory's record file (``config.yaml``, …): :func:`read_text` with
    no link followed, at most ``limit`` bytes.

    Raises:
        RunDirError: missing, unreadable, a link, not a regular file, over ``limit`` bytes or
            not UTF-8 (one line).
    """
    return read_text(path, limit, follow=False, what="a run record", error=RunDirError)


def with_side_file(row: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """``row`` with the texts a capped journal row keeps in its side file put back: the row
    names it as ``large = {"file": <path relative to base_dir>, "bytes", "sha256", ...}``
    (``base_dir``: the directory of the JSON Lines file the row came from). A row without
    ``large`` is returned as it is.

    The side file is read only inside ``base_dir`` and through no symbolic link, and its
    size and sha256 are checked against the row's.

    Raises:
        SideFileError: the file is missing, outside ``base_dir``, reached through a link,
            or not what the row recorded (the row's capped texts must not be taken for the
            output: its caller fails or asks the unit again, with a warning).
    """
    large = row.get("large")
    if not isinstance(large, dict):
        return row
    name, size, digest = large.get("file"), large.get("bytes"), large.get("sha256")
    if not isinstance(name, str) or not isinstance(size, int) or not isinstance(digest, str):
        raise SideFileError(f"sample {printable(row.get('sample_id'))}: its row's side-file record is malformed")
    base = Path(base_dir).resolve()
    path = Path(os.path.normpath(base / name))
    data = read_bytes(path, max(size, 0), root=base, follow=False, error=SideFileError,
                      what=f"the side file of sample {printable(row.get('sample_id'), 100)} (its row's size)")  # fmt: skip
    if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
        raise SideFileError(f"{printable(str(path))}: side file of sample {printable(row.get('sample_id'))} does not "
                            "match its row's size and sha256")  # fmt: skip
    try:
        moved = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        moved = None
    if not isinstance(moved, dict):
        raise SideFileError(f"{printable(str(path))}: side file of sample {printable(row.get('sample_id'))} is not a JSON object")
    return {**row, **{k: v for k, v in moved.items() if k in SIDE_FILE_FIELDS}}


# ---- YAML: the one bounded loader ----------------------------------------------------------
#: the largest YAML file evalkit reads (a task file, a run directory's ``config.yaml``), in

#: bytes: evalkit's own largest config is under 10 KiB; PyYAML's pure-Python parser reads
#: about 80,000 characters a second on a busy host, so this bounds a read to about 15 s
MAX_YAML_BYTES = 1024 * 1024
#: most aliases (``*a``, merge keys ``<<: *a`` included) one YAML document may use; evalkit's
#: own configs use none
MAX_YAML_ALIASES = 1000
#: deepest nesting of collections in one YAML document (evalkit's own: 6)
MAX_YAML_DEPTH = 64
#: largest size of one YAML document with every alias expanded, in units of one per node
#: plus one per scalar character (an alias counts its target's full size each time it is
#: used): a document without aliases has about one unit per character, so this is
#: :data:`MAX_YAML_BYTES`; "billion laughs" bombs are refused before anything is built
MAX_YAML_UNITS = MAX_YAML_BYTES
#: longest YAML scalar converted to an int or a float (characters): Python's own limit on
#: decimal int text (``sys.int_info.default_max_str_digits``); YAML 1.1's sexagesimal and
#: base-2/8/16 forms convert in quadratic time past it
MAX_YAML_NUMBER_CHARS = 4300


@functools.cache
def bounded_yaml_loader(max_units: int = MAX_YAML_UNITS, max_aliases: int | None = MAX_YAML_ALIASES,
                        max_depth: int | None = MAX_YAML_DEPTH, max_number: int = MAX_YAML_NUMBER_CHARS) -> type:
    """PyYAML's ``SafeLoader`` (pure Python: its composer is hooked node by node) with bounds,
    each a ``yaml.YAMLError`` raised before anything is constructed:

    * more than ``max_aliases`` aliases in a document (``None``: no count), counted as the
      composer meets them;
    * collections nested deeper than ``max_depth`` (``None``: only Python's recursion limit);
    * a node that is its own ancestor through an alias (``&a [*a]``: a cycle);
    * a document whose size with every alias expanded is over ``max_units`` (one unit per
      node plus one per scalar character; checked on the composed node graph, each node
      visited once, iteratively);
    * an int or float scalar longer than ``max_number`` characters.

    Built once per set of bounds; documents within them load exactly as with ``SafeLoader``.
    The one loader of every YAML file evalkit reads (:func:`load_yaml`) and of SOBHard's
    YAML answers (:func:`evalkit.benchmarks.sobhard.readers.read_yaml`, with its own bounds).
    """
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.events import AliasEvent, CollectionStartEvent
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    class Refused(yaml.YAMLError):
        pass

    def children(node: Any) -> list[Any]:
        if isinstance(node, SequenceNode):
            return list(node.value)
        if isinstance(node, MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    def check_graph(root: Any) -> None:
        size: dict[int, int] = {}
        active: set[int] = set()
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if done:
                active.discard(key)
                total = 1 + sum(size[id(c)] for c in children(node))
                if total > max_units:
                    raise Refused(f"aliases expand the document beyond {max_units:,} nodes and characters")
                size[key] = total
            elif key in size:
                continue
            elif key in active:
                raise Refused("an alias refers to a node that contains it (a recursive document)")
            elif isinstance(node, ScalarNode):
                size[key] = 1 + len(node.value)
            else:
                active.add(key)
                stack.append((node, True))
                stack.extend((c, False) for c in children(node))

    class BoundedLoader(yaml.SafeLoader):
        def compose_document(self) -> Any:
            self._aliases, self._depth = 0, 0
            node = super().compose_document()
            if node is not None:
                check_graph(node)
            return node

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(AliasEvent):
                self._aliases += 1
                if max_aliases is not None and self._aliases > max_aliases:
                    raise Refused(f"more than {max_aliases:,} aliases in one document")
                return super().compose_node(parent, index)
            nested = self.check_event(CollectionStartEvent)
            self._depth += nested
            try:
                if max_depth is not None and self._depth > max_depth:
                    raise Refused(f"collections nested deeper than {max_depth} levels")
                return super().compose_node(parent, index)
            finally:
                self._depth -= nested

        def _number(self, node: Any, construct: Any) -> Any:
            if isinstance(node, ScalarNode) and len(node.value) > max_number:
                problem = f"a number of {len(node.value):,} characters (over {max_number:,})"
                raise ConstructorError(None, None, problem, node.start_mark)
            return construct(self, node)

        def construct_yaml_int(self, node: Any) -> Any:
            return self._number(node, yaml.SafeLoader.construct_yaml_int)

        def construct_yaml_float(self, node: Any) -> Any:
            return self._number(node, yaml.SafeLoader.construct_yaml_float)

    BoundedLoader.refused = Refused  # type: ignore[attr-defined]  (what load_yaml's check mode reports)
    BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
    BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_yaml_float)
    return BoundedLoader


def load_yaml(text: str | bytes, where: str, error: type[EvalkitError] = DataError, construct: bool = True,
              max_bytes: int = MAX_YAML_BYTES) -> Any:
    """One YAML document of ``text`` read with :func:`bounded_yaml_loader`'s bounds, at most
    ``max_bytes`` bytes (UTF-8). ``construct=False`` only composes and checks it (for a file
    another loader reads next, as Hydra's OmegaConf does with task files: its own tags,
    interpolations and syntax errors — which Hydra's messages name — are left to it) and
    returns PyYAML's composed node graph (``None`` for an empty document or a syntax error):
    only a bound refuses then. The one YAML reader of task files
    (:func:`check_yaml_file`) and of run directories' ``config.yaml`` (:func:`read_run_yaml`).

    Raises:
        error: over a bound, not YAML, or not UTF-8 — one line starting with ``where``.
    """
    import yaml

    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if size > max_bytes:
        raise error(f"{where}: {size:,} bytes, over the {max_bytes:,} a YAML file may have; not read")
    loader_class = bounded_yaml_loader()
    try:
        body = text.decode("utf-8") if isinstance(text, bytes) else text
        loader = loader_class(body)
        try:
            return loader.get_single_data() if construct else loader.get_single_node()
        finally:
            loader.dispose()
    except UnicodeDecodeError:
        raise error(f"{where}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        if not construct and not isinstance(exc, loader_class.refused):  # type: ignore[attr-defined]
            return None  # a syntax error: the next loader names it
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or lines[0]
        raise error(f"{where}: refused as YAML: {printable(problem, 200)}{at}") from None
    except (TypeError, ValueError, OverflowError, RecursionError, MemoryError) as exc:  # unhashable keys, float range
        raise error(f"{where}: refused as YAML: {type(exc).__name__}: {printable(str(exc), 200)}") from None


def check_yaml_file(path: Path, error: type[EvalkitError] = DataError) -> tuple[str, Any] | None:
    """Compose ``path`` (a task file, any Hydra config-group entry) with the bounds of
    :func:`load_yaml` before another loader reads it; a missing file is left to that loader
    (``None``). Returns the file's text and its composed node graph (``None`` when the text
    is not YAML: the next loader names its error), for the caller's own checks of what the
    file says (:func:`evalkit.compose.check_data_only`).

    The file must be a regular file (a symbolic link to one is read through, as Hydra reads
    it) of at most :data:`MAX_YAML_BYTES`, judged by ``stat`` before it is opened: a link to
    ``/dev/zero``, a FIFO (whose ``open`` would wait for a writer), a device or a directory
    is refused by name, never skipped (Hydra would skip it, and the option would then be an
    "unknown benchmark").

    Raises:
        error: not a regular file, over a bound, or unreadable (one line naming the file).
    """
    where = printable(str(path))
    if not os.path.lexists(path):
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        raise error(f"{where} cannot be read ({exc.strerror or type(exc).__name__}"
                    f"{'; a symbolic link to a missing file' if os.path.islink(path) else ''})") from None  # fmt: skip
    if not stat.S_ISREG(st.st_mode):
        link = f"a symbolic link to {printable(os.readlink(path), 200)}, " if os.path.islink(path) else ""
        raise error(f"{where}: not a regular file ({link}{_file_kind(st.st_mode)}); a config file must be a YAML file; not read")
    if st.st_size > MAX_YAML_BYTES:
        raise error(f"{where}: {st.st_size:,} bytes, over the {MAX_YAML_BYTES:,} a YAML file may have; not read")
    data = read_bytes(path, MAX_YAML_BYTES, what="a YAML file", error=error)
    node = load_yaml(data, where, error, construct=False)
    return data.decode("utf-8"), node  # load_yaml refused anything that is not UTF-8


def read_run_yaml(path: Path) -> Any:
    """A run directory's YAML record (``config.yaml``), read as :func:`read_run_text` reads
    (no link followed) and loaded by :func:`load_yaml` (at most :data:`MAX_YAML_BYTES`).

    Raises:
        RunDirError: unreadable, a link, over a bound, or not YAML (one line).
    """
    return load_yaml(read_run_text(path, MAX_YAML_BYTES), printable(str(path)), RunDirError)

