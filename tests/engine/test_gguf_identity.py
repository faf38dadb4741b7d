"""Issue 35 item 8: the embedded model's cache identity is the GGUF file's content digest,
not its name and size."""

from __future__ import annotations

import os

from evalkit.backends import llamacpp
from evalkit.backends.llamacpp import gguf_digest, served_weights_identity
from evalkit.config import LlamaCppBackend


def _backend(path) -> LlamaCppBackend:
    return LlamaCppBackend(gguf=path)


def test_same_name_and_size_other_bytes_get_other_keys(tmp_path):
    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    a.parent.mkdir(), b.parent.mkdir()
    a.write_bytes(b"GGUF" + b"\x01" * 4096)
    b.write_bytes(b"GGUF" + b"\x02" * 4096)
    assert served_weights_identity(_backend(a)) != served_weights_identity(_backend(b))


def test_same_bytes_under_another_name_get_one_key(tmp_path):
    a, b = tmp_path / "model.gguf", tmp_path / "renamed-copy.gguf"
    a.write_bytes(b"GGUF" + bytes(range(256)) * 16)
    b.write_bytes(a.read_bytes())
    assert served_weights_identity(_backend(a)) == served_weights_identity(_backend(b))


def test_digest_is_kept_and_redone_when_the_file_changes(tmp_path, monkeypatch):
    """Hashed once per file version: a second call (even in a new process, through the
    sidecar) does not read the file; a rewrite with a new mtime is hashed again."""
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF-one")
    first = gguf_digest(f)
    assert (tmp_path / "m.gguf.sha256.json").is_file()
    monkeypatch.setattr(llamacpp, "_DIGESTS", {})  # a new process: only the sidecar is left
    opened: list[str] = []
    real_open = os.open  # every read goes through evalkit.untrusted, which opens with os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: (opened.append(str(p)), real_open(p, *a, **k))[1])
    assert gguf_digest(f) == first and str(f) not in opened
    f.write_bytes(b"GGUF-two")
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert gguf_digest(f) != first and str(f) in opened
