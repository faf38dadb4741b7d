"""The one trust boundary (issue 43): every read of a file by path goes through
:mod:`evalkit.untrusted`, and the layer's rules hold for each kind of file it is handed.

The house test is an AST scan of ``src/evalkit``: a module other than the layer that opens,
reads or copies a file by path, decodes an image from a path, or reads Parquet, JSON or YAML
from a file fails it, naming the module, the line and what it does.
"""

from __future__ import annotations

import ast
import os
import socket
import threading
from pathlib import Path

import pytest

from evalkit import untrusted
from evalkit.errors import DataError, RunDirError
from tests.conftest import REPO_ROOT

SRC = REPO_ROOT / "src" / "evalkit"
LAYER = "untrusted.py"

#: mode characters that make ``open`` a write
_WRITE_MODES = set("wax+")
#: ``X.open(...)`` receivers that are modules, not paths (their ``open`` takes a file object or
#: is not a file read); a ``Path.open`` for reading is refused
_MODULE_OPENERS = {"os", "io", "codecs", "tarfile", "zipfile", "gzip", "bz2", "lzma", "PILImage", "Image", "webbrowser"}
#: calls that read a file named by path, by the dotted name they are called as
_PATH_READERS = {
    "json.load": "reads JSON from a file",
    "yaml.load": "reads YAML from a file", "yaml.safe_load": "reads YAML from a file",
    "yaml.full_load": "reads YAML from a file", "yaml.unsafe_load": "reads YAML from a file",
    "OmegaConf.load": "reads YAML from a file",
    "shutil.copy": "copies a file", "shutil.copy2": "copies a file", "shutil.copyfile": "copies a file",
    "shutil.copytree": "copies a tree",
    "pq.read_table": "reads Parquet", "pq.ParquetFile": "reads Parquet", "pq.read_pandas": "reads Parquet",
    "pyarrow.parquet.read_table": "reads Parquet", "pd.read_parquet": "reads Parquet", "pd.read_json": "reads JSON",
    "pd.read_csv": "reads a file", "np.load": "reads a file", "numpy.load": "reads a file",
    "pickle.load": "reads a pickle", "fileinput.input": "reads a file", "io.open": "opens a file",
    "codecs.open": "opens a file", "zipfile.ZipFile": "opens an archive",
}  # fmt: skip


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes (``""`` for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):
        inner = _dotted(node.func)
        return ".".join([f"{inner}()", *reversed(parts)]) if inner else ""
    return ""


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _mode(call: ast.Call, position: int) -> str | None:
    """The ``mode`` of an ``open``-like call, when it is written as a literal (else ``None``)."""
    if len(call.args) > position:
        return _literal(call.args[position])
    for kw in call.keywords:
        if kw.arg == "mode":
            return _literal(kw.value)
    return "r"


def _is_write(mode: str | None) -> bool:
    return mode is not None and bool(_WRITE_MODES & set(mode))


def raw_reads(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each read of a file by path in a module's ``source`` that does not
    go through :mod:`evalkit.untrusted`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        last = node.func.attr if isinstance(node.func, ast.Attribute) else name
        what = None
        if name == "open":
            first = _literal(node.args[0]) if node.args else None
            if not _is_write(_mode(node, 1)) and not (first or "").startswith("/proc/"):
                what = "opens a file for reading (open)"
        elif name == "os.open":
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            if not any(w in flags for w in ("O_WRONLY", "O_RDWR", "write=True")):
                what = "opens a file for reading (os.open)"
        elif name == "os.fdopen":
            if not _is_write(_mode(node, 1)):
                what = "reads a descriptor opened elsewhere (os.fdopen)"
        elif last in ("read_text", "read_bytes") and isinstance(node.func, ast.Attribute):
            if "resources.files" not in name:  # a package's own data is evalkit's code
                what = f"reads a file by path (.{last})"
        elif last == "open" and isinstance(node.func, ast.Attribute):
            receiver = _dotted(node.func.value)
            if receiver in ("Image", "PILImage"):
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Call) and _dotted(first.func) in ("io.BytesIO", "BytesIO")):
                    what = "decodes an image from a path (Image.open)"
            elif receiver == "tarfile":
                if not any(kw.arg == "fileobj" for kw in node.keywords):
                    what = "opens an archive by path (tarfile.open)"
            elif receiver not in _MODULE_OPENERS and (not node.args or _literal(node.args[0]) is not None):
                if not _is_write(_mode(node, 0)):
                    what = "opens a file for reading (Path.open)"
        elif name in _PATH_READERS:
            what = f"{_PATH_READERS[name]} ({name})"
        if what:
            found.append((node.lineno, what))
    return found


def _scan(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: {what}"
        for path in sorted(root.rglob("*.py"))
        if path.name != LAYER or path.parent != root
        for line, what in raw_reads(path.read_text(encoding="utf-8"))
    ]


def test_every_read_of_a_file_goes_through_the_untrusted_layer():
    """Issue 43 item 1: outside :mod:`evalkit.untrusted`, no module of ``src/evalkit`` opens,
    reads or copies a file by path, decodes an image from a path, or reads Parquet, JSON or
    YAML from a file."""
    assert _scan(SRC) == []


@pytest.mark.parametrize("line, what", [
    ("open(p)", "opens a file for reading (open)"),
    ("open(p, 'rb')", "opens a file for reading (open)"),
    ("open(p, mode)", "opens a file for reading (open)"),
    ("os.open(p, os.O_RDONLY)", "opens a file for reading (os.open)"),
    ("os.fdopen(fd, 'rb')", "reads a descriptor opened elsewhere (os.fdopen)"),
    ("Path(p).read_text()", "reads a file by path (.read_text)"),
    ("p.read_bytes()", "reads a file by path (.read_bytes)"),
    ("(Path(p) / 'x.json').read_text()", "reads a file by path (.read_text)"),
    ("p.open(encoding='utf-8')", "opens a file for reading (Path.open)"),
    ("shutil.copyfile(a, b)", "copies a file (shutil.copyfile)"),
    ("PILImage.open(p)", "decodes an image from a path (Image.open)"),
    ("pq.read_table(p)", "reads Parquet (pq.read_table)"),
    ("json.load(fh)", "reads JSON from a file (json.load)"),
    ("yaml.safe_load(fh)", "reads YAML from a file (yaml.safe_load)"),
    ("OmegaConf.load(p)", "reads YAML from a file (OmegaConf.load)"),
    ("tarfile.open(p)", "opens an archive by path (tarfile.open)"),
])  # fmt: skip
def test_the_scan_names_each_kind_of_raw_read(line, what):
    """The scan is not blind: each kind of read it looks for is named in a scratch module."""
    assert raw_reads(f"def f(p, a, b, fh, fd, mode):\n    return {line}\n") == [(2, what)]


@pytest.mark.parametrize("line", [
    "open(p, 'w', encoding='utf-8')", "open(p, 'ab')", "open('/proc/self/status')",
    "os.open(p, os.O_WRONLY | os.O_CREAT)", "os.fdopen(fd, 'wb')", "PILImage.open(io.BytesIO(data))",
    "tarfile.open(fileobj=buf)", "json.loads(text)", "plan.models.open(run_dir, pool=None)",
    "resources.files('evalkit').joinpath('x.json').read_text()",
])  # fmt: skip
def test_the_scan_passes_writes_and_reads_of_memory(line):
    """Writes, reads of bytes already in memory and the package's own data are not reads of
    untrusted files."""
    assert raw_reads(f"def f(p, fh, fd, data, buf, text, plan, run_dir):\n    return {line}\n") == []


def test_a_raw_open_added_to_a_scratch_copy_of_src_is_caught(tmp_path):
    """What the issue's reviewer will do: copy ``src/evalkit``, add a raw ``open()`` to one
    module, and see the house test fail naming it."""
    import shutil

    copy = tmp_path / "evalkit"
    shutil.copytree(SRC, copy)
    victim = copy / "compare.py"
    victim.write_text(victim.read_text(encoding="utf-8") + "\n\ndef _peek(p):\n    return open(p).read()\n", encoding="utf-8")
    problems = _scan(copy)
    assert len(problems) == 1 and problems[0].startswith("compare.py:") and "opens a file for reading (open)" in problems[0]


# ---- the layer's rules -------------------------------------------------------------------------
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    with pytest.raises(DataError) as exc:
        untrusted.read_bytes(fifo, 1024, what="an image")
    assert str(exc.value) == f"{fifo}: a FIFO, not a regular file; not read"


def test_a_directory_a_nul_and_a_missing_file_are_one_line_each(tmp_path):
    (tmp_path / "d.png").mkdir()
    cases = {
        tmp_path / "d.png": f"{tmp_path / 'd.png'}: a directory, not a regular file; not read",
        f"{tmp_path}/a\0b.png": f"{tmp_path}/a\\x00b.png: a path with a NUL character; not read",
        tmp_path / "none.png": f"{tmp_path / 'none.png'}: does not exist; not read",
    }
    for path, line in cases.items():
        with pytest.raises(RunDirError) as exc:
            untrusted.read_bytes(path, 1024, error=RunDirError)
        assert str(exc.value) == line


def test_a_socket_and_a_device_are_refused_by_name(tmp_path):
    sock_path = tmp_path / "s.jsonl"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(DataError, match="a socket, not a regular file"):
            untrusted.read_objects(sock_path)
    with pytest.raises(DataError, match="a character device, not a regular file"):
        untrusted.read_bytes("/dev/zero", 10)


def test_no_link_out_of_the_root_is_followed(tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("outside text")
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    (root / "inside.txt").write_text("inside text")
    (root / "out.txt").symlink_to(outside)
    (root / "in.txt").symlink_to(root / "inside.txt")
    (root / "sub" / "up").symlink_to(tmp_path)
    assert untrusted.read_text(root / "in.txt", 100, root=root) == "inside text"
    for path in (root / "out.txt", root / "sub" / "up" / "secret.txt", root / ".." / "secret.txt"):
        with pytest.raises(DataError) as exc:
            untrusted.read_text(path, 100, root=root)
        assert str(exc.value) == (f"{path}: leads outside {root} (through a symbolic link or '..'), "
                                  "and nothing is read from outside it; not read")  # fmt: skip
    with pytest.raises(DataError, match="a symbolic link, never followed here"):
        untrusted.read_text(root / "in.txt", 100, root=root, follow=False)


def test_a_file_over_its_bound_is_refused_before_it_is_read_and_one_that_grows_is_cut(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(DataError) as exc:
        untrusted.read_bytes(big, 4096, what="an image")
    assert str(exc.value) == f"{big}: 5,000 bytes, over the 4,096 allowed for an image; not read"
    # a file that grows after it was opened (fstat said 0 bytes) is cut at the bound while read
    grow = tmp_path / "grow.bin"
    grow.write_bytes(b"")
    fh = untrusted.open_file(grow, 100, what="a record")
    grow.write_bytes(b"y" * 1000)
    with pytest.raises(DataError, match=r"more than 100 bytes, the bound for a record"):
        fh.read()
    fh.close()


def test_a_fifo_named_in_place_of_a_journal_line_file_never_blocks(tmp_path):
    """The strict JSON Lines reader goes through the layer too (a dataset file, a replay)."""
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    done = threading.Event()

    def read():
        with pytest.raises(DataError, match="a FIFO, not a regular file"):
            untrusted.read_objects(fifo)
        done.set()

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(60)
    assert done.is_set()


def test_json_records_refuse_nan_and_infinity(tmp_path):
    for text in ('{"score": NaN}', '{"score": Infinity}', '[-Infinity]'):
        path = tmp_path / "summary.json"
        path.write_text(text)
        with pytest.raises(RunDirError) as exc:
            untrusted.read_json(path, 1000, error=RunDirError)
        assert str(exc.value).startswith(f"{path}: ") and "is not a number a record may hold; not read" in str(exc.value)


def test_parquet_is_read_by_row_groups_with_max_rows_and_a_decoded_bound(tmp_path):
    """A 4 KB Parquet file once decoded to 1.5 GB and ``max_rows`` was checked after the whole
    read: rows past ``max_rows`` are never decoded, and a bomb is refused before it is whole."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = pa.table({"id": [f"s{i}" for i in range(10_000)], "text": ["t"] * 10_000})
    path = tmp_path / "data.parquet"
    pq.write_table(rows, path, row_group_size=1000)
    got = list(untrusted.iter_parquet(path, max_rows=3))
    assert got == [{"id": "s0", "text": "t"}, {"id": "s1", "text": "t"}, {"id": "s2", "text": "t"}]
    assert len(list(untrusted.iter_parquet(path))) == 10_000
    # a dictionary-encoded column: one 100 KB value repeated 20,000 times is a few KB on disk
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"text": ["z" * 100_000] * 20_000}), bomb, compression="zstd", use_dictionary=True)
    assert bomb.stat().st_size < 100_000
    with pytest.raises(DataError) as exc:
        list(untrusted.iter_parquet(bomb, max_decoded=50 * 2**20))
    assert f"{bomb}: decodes to more than 52,428,800 bytes" in str(exc.value)
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"x.parquet: not a Parquet file"):
        list(untrusted.iter_parquet(not_parquet))


def test_copy_refuses_a_link_out_of_the_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "secret").write_text("s")
    (run / "failed.jsonl").symlink_to(tmp_path / "secret")
    with pytest.raises(RunDirError, match="leads outside"):
        untrusted.copy_file(run / "failed.jsonl", tmp_path / "copy", 100, root=run, error=RunDirError)
    assert not (tmp_path / "copy").exists()
