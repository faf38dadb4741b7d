"""JSON Lines, the one module that writes and reads them (benchmark data, replay files,
run journals, past runs).

Rules, the same for every file evalkit reads or writes:

* a record is one line; lines are split on ``\\n`` only (``\\r\\n`` is tolerated), never on
  the other characters :meth:`str.splitlines` breaks on (U+2028, U+2029, U+0085, form
  feed ...), which are data inside JSON strings;
* the writer emits one compact JSON object per line, UTF-8, with U+2028/U+2029/U+0085
  escaped (``\\u2028``) and a lone surrogate written as its ``\\udXXX`` escape, so that every
  line it writes is read back by any JSON Lines reader, evalkit's or another tool's;
* :func:`read_objects` is the **strict** reader (inputs: a bad line is one error naming
  file and line); :func:`read_tolerant` is the **tolerant** reader (journals a killed
  process may have torn: unreadable lines are skipped, counted and named by number).

A parser of *model output* that happens to read JSON lines (SOBHard's ``jsonl`` notation)
follows its benchmark's own rules instead (spec), not this module.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from evalkit.errors import WRITE_FAULTS, DataError, EvalkitError, RunDirError, RunDirWriteError, printable, write_failed

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


#: the longest line :func:`read_objects` reads (bytes): data and replay records are far
#: smaller (the largest shared record is under 1 MiB); a longer line is refused before it is
#: held in memory whole (a 1.4 GB line once ended in MemoryError)
MAX_LINE_BYTES = 64 * 2**20
#: the deepest nesting of arrays and objects a record read as data may have: the shared
#: data nests at most a dozen levels; deeper structures would overflow the recursion of
#: the code that walks them (hashing, validation, scoring)
MAX_JSON_DEPTH = 200


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


def loads_bounded(text: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)`` of data, its nesting bounded.

    Raises:
        json.JSONDecodeError: not JSON.
        ValueError: nested more than ``limit`` levels (message ``JSON nested too deeply``).
    """
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested too deeply (more than {limit} levels)") from None
    # fewer opening brackets than the limit cannot nest deeper (counting is C-fast; most records stop here)
    if isinstance(obj, (dict, list)) and text.count("[") + text.count("{") > limit and json_depth_over(obj, limit):
        raise ValueError(f"JSON nested too deeply (more than {limit} levels)")
    return obj


def read_objects(path: Path, error: type[EvalkitError] = DataError) -> list[tuple[int, dict[str, Any]]]:
    """Strict reading: ``(line number, object)`` for every non-blank line of ``path``, read a
    line at a time (at most :data:`MAX_LINE_BYTES` per line, nesting at most
    :data:`MAX_JSON_DEPTH`).

    Raises:
        ``error`` (default DataError): the file is missing, unreadable or not UTF-8, or a
            line is too long, not JSON, nested too deeply, or not an object — naming file
            and line.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    for lineno, line in _bounded_lines(path, error):
        try:
            obj = loads_bounded(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        except ValueError as exc:
            raise error(f"{path}:{lineno}: {exc}") from None
        if not isinstance(obj, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        rows.append((lineno, obj))
    return rows


def _bounded_lines(path: Path, error: type[EvalkitError]) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of ``path``, split on ``\n`` only, blank lines skipped, each
    line decoded as UTF-8 and at most :data:`MAX_LINE_BYTES` long."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise error(f"{path}: file does not exist") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
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


def _link_error(path: Path) -> RunDirError:
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
    try:
        fd = open_regular(path)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise RunDirError(f"{printable(str(path))}: cannot be read ({exc.strerror})") from None
        raise _link_error(path) if exc.errno == errno.ELOOP else exc from None
    return _tolerant_rows(os.fdopen(fd, "rb"), into)


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
            raise _link_error(self.path)
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



#: fields of a journal row that may live in a side file (the model's texts)
SIDE_FILE_FIELDS = ("output", "raw_output", "output_unstripped", "reasoning", "trajectory")
#: characters of a sample id kept (made safe) at the start of a unit's file name, for reading
NAME_PREFIX_CHARS = 40


class SideFileError(DataError):
    """A capped journal row's side file is missing, a link, outside the run directory, or
    does not hold the bytes its row recorded (``large.bytes`` / ``large.sha256``)."""


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


def _open_flags(write: bool) -> int:
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if write else os.O_RDONLY
    return flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


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
        fd = os.open(where / name, _open_flags(write=True), 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        if exc.errno in WRITE_FAULTS:  # a full disk, an I/O error
            raise write_failed(where / name, exc) from exc
        raise SideFileError(f"{where / name}: cannot be written ({exc.strerror or type(exc).__name__}; "
                            "evalkit never writes through a symbolic link in a run directory)") from None  # fmt: skip
    return f"{folder}/{name}"


def open_regular(path: Path | str) -> int:
    """A read-only descriptor of ``path``, opened without following a symbolic link and
    without waiting (``O_NONBLOCK``: opening a FIFO no writer holds would wait for ever), and
    only when it is a regular file (``fstat`` of what was opened, so nothing is swapped in
    between): a FIFO, a device or a directory planted in a run directory is never read.

    Raises:
        OSError: missing, unreadable, a link (``ELOOP``), or not a regular file (``EINVAL``,
            its ``strerror`` saying what it is instead).
    """
    fd = os.open(path, _open_flags(write=False) | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"not a regular file but {_file_kind(mode)}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_no_link(path: Path, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of the regular file ``path`` (:func:`open_regular`).

    Raises:
        OSError: missing, unreadable, a link (``ELOOP``), or not a regular file.
    """
    with os.fdopen(open_regular(path), "rb") as fh:
        return fh.read(limit + 1)


#: the largest record file of a run directory read whole (config.yaml, summary.json, …)
MAX_RECORD_BYTES = 256 * 1024 * 1024


def read_run_text(path: Path, limit: int = MAX_RECORD_BYTES) -> str:
    """The text of a run directory's record file (``config.yaml``, …), read without following
    a symbolic link and at most ``limit`` bytes.

    Raises:
        RunDirError: missing, unreadable, a link, over ``limit`` bytes or not UTF-8 (one line).
    """
    try:
        data = read_no_link(path, limit)
        if len(data) > limit:
            raise RunDirError(f"{printable(str(path))}: over {limit} bytes; not read")
        return data.decode("utf-8")
    except OSError as exc:
        why = "a symbolic link, never followed" if exc.errno == errno.ELOOP else (exc.strerror or type(exc).__name__)
        raise RunDirError(f"{printable(str(path))} cannot be read ({why})") from None
    except UnicodeDecodeError:
        raise RunDirError(f"{printable(str(path))} is not UTF-8 text") from None


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
    try:
        if not path.is_relative_to(base) or path.resolve() != path:
            raise OSError(errno.ELOOP, "outside the run directory or reached through a symbolic link")
        data = read_no_link(path, max(size, 0))
    except OSError as exc:
        raise SideFileError(f"{printable(str(path))}: side file of sample {printable(row.get('sample_id'))} "
                            f"cannot be read ({exc.strerror or type(exc).__name__})") from None  # fmt: skip
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
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise error(f"{where} cannot be read ({exc.strerror or type(exc).__name__})") from None
    node = load_yaml(data, where, error, construct=False)
    return data.decode("utf-8"), node  # load_yaml refused anything that is not UTF-8


def _file_kind(mode: int) -> str:
    """What a non-regular file is, in words (``stat``'s file type of ``mode``)."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_run_yaml(path: Path) -> Any:
    """A run directory's YAML record (``config.yaml``), read as :func:`read_run_text` reads
    (no link followed) and loaded by :func:`load_yaml` (at most :data:`MAX_YAML_BYTES`).

    Raises:
        RunDirError: unreadable, a link, over a bound, or not YAML (one line).
    """
    return load_yaml(read_run_text(path, MAX_YAML_BYTES), printable(str(path)), RunDirError)
