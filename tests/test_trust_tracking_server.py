"""A tracking server that misbehaves (issue 43, items 4 and 5): every HTTP call evalkit makes
to MLflow ends within ``tracking.request_deadline_s`` (retries included: a total deadline, not
a per-read timeout) and reads at most ``tracking.max_response_bytes`` of an answer
(:mod:`evalkit.tracking.http_bounds`); a server answering ids that are not ids never gets them
into ``tracking.json``.

Each test starts a real HTTP server on 127.0.0.1 (stdlib ``http.server`` in a thread, stopped
at the test's end and by its own timer) that answers every request one way: one byte every
few seconds (a trickle, from the status line on, where a per-read timeout never fires), a
body of 600 MiB made as it is sent (a flood, never held), a 503 asking for a retry in an
hour, or a 200 whose JSON means nothing.
An offline run (``model=reference`` on ``arith_mini``) in a directory named
``x;touch PWNED;y`` logs to it, then ``python -m evalkit.track`` of that run (and
``python -m evalkit.compare RUN RUN --log``). Each ends in one line naming the server and the bound, with the shell-quoted ``python -m evalkit.track`` that
logs the run later, and the documented exit code (README, "Exit codes" and "A shared tracking
server": the run keeps its own, 0; ``track`` exits 1 while the server misbehaves), the run
complete in its directory. Time and memory are asserted with wide margins (a loaded host):
the deadline holds (far below what the trickle would take) and the peak RSS of the process
(``os.wait4``) stays far below what the flood offered.
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, evalkit_cmd

#: seconds between two bytes of the trickle
TRICKLE_S = 2.0
#: the trickled answer: a valid MLflow answer, padded so that sending it takes 300 s
TRICKLE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"p" * 80 + b"\r\nContent-Length: 2\r\n\r\n{}"
#: bytes of each flooded answer (made as they are sent)
FLOOD_BYTES = 600 << 20
#: an answer that is JSON and means nothing: MLflow reads it as empty ids
GARBAGE = b'{"junk": [1, 2, {"x": null}], "next_page_token": 7, "\\u0000": "x;touch PWNED"}'
#: the wait a busy server asks for (503 with ``Retry-After``; urllib3 honours up to 6 hours)
RETRY_AFTER_S = 3600
#: the bounds the tests set (small, so that each test is short)
DEADLINE_S = 5
MAX_BYTES = 4 << 20
#: the server stops itself after this many seconds whatever happens
SERVER_LIFE_S = 900
RUN_DIR_NAME = "x;touch PWNED;y"


class HostileServer:
    """A stdlib HTTP server on 127.0.0.1 answering every request by ``mode`` (``trickle``,
    ``flood``, ``busy``, ``garbage``). ``held``: seconds each answer lasted (until it ended or the
    client went away); ``sent``: bytes of each answer sent. Stopped on leaving the ``with``
    block (every answer ended and counted then), or by itself after :data:`SERVER_LIFE_S`."""

    def __init__(self, mode: str):
        self.mode = mode
        self.held: list[float] = []
        self.sent: list[int] = []
        self.stop = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60  # a read from the client waits at most this long

            def log_message(self, *args):  # quiet
                pass

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(min(length, 64 << 20))
                start, sent = time.monotonic(), 0
                try:
                    sent = getattr(outer, f"_{outer.mode}")(self)
                except OSError:  # the client went away
                    sent = getattr(self, "sent", 0)
                outer.held.append(time.monotonic() - start)
                outer.sent.append(sent)
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False  # server_close() joins the answers (each ends once stop is set)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def _trickle(self, handler) -> int:
        handler.sent = 0
        for byte in TRICKLE:
            if self.stop.is_set():
                break
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            handler.sent += 1
            self.stop.wait(TRICKLE_S)
        return handler.sent

    def _flood(self, handler) -> int:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")  # no Content-Length: the body ends when the server closes
        handler.end_headers()
        handler.sent = 0
        handler.wfile.write(b'{"experiment": {"name": "')
        chunk = b"x" * (1 << 20)
        while handler.sent < FLOOD_BYTES and not self.stop.is_set():
            handler.wfile.write(chunk)
            handler.sent += len(chunk)
        return handler.sent

    def _busy(self, handler) -> int:
        handler.send_response(503)
        handler.send_header("Retry-After", str(RETRY_AFTER_S))
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return 0

    def _garbage(self, handler) -> int:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(GARBAGE)))
        handler.end_headers()
        handler.wfile.write(GARBAGE)
        return len(GARBAGE)

    def __enter__(self) -> "HostileServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.timer = threading.Timer(SERVER_LIFE_S, self.close)
        self.timer.daemon = True
        self.timer.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        self.close()


def _bounded(cmd: list[str], limit_s: float) -> tuple[int, str, str, float, int]:
    """Run ``cmd`` in the repository, killed after ``limit_s``: ``(exit code, stdout, stderr,
    seconds, peak RSS in bytes)`` — the peak RSS of this process alone, its ``VmHWM`` read
    from ``/proc`` while it runs. ``os.wait4``'s ``ru_maxrss`` is the largest of the process
    and every descendant it reaped, and a run reaps Ray's processes (its workers import
    litellm): that figure, 1,271 MiB in CI, measured Ray, not the bound on the MLflow reply.
    A process gone before its first reading falls back to ``ru_maxrss``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=err)
        killer = threading.Timer(limit_s, proc.kill)
        killer.start()
        peak = [0]
        done = threading.Event()

        def watch() -> None:  # VmHWM only grows, so the last reading before exit is the peak
            while not done.is_set():
                try:
                    status_text = Path(f"/proc/{proc.pid}/status").read_text()
                except OSError:
                    return
                for line in status_text.splitlines():
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]) * 1024)
                done.wait(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
            done.set()
            watcher.join()
        took = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), took, peak[0] or usage.ru_maxrss * 1024


def _run(url: str, run_dir: Path, limit_s: float) -> tuple[int, str, str, float, int]:
    return _bounded(evalkit_cmd("benchmark=arith_mini", "model=reference", "run.progress=false", f"run.dir='{run_dir}'",
                                f"run.output_root={run_dir.parent / 'out'}", f"tracking.tracking_uri={url}",
                                f"tracking.request_deadline_s={DEADLINE_S}", f"tracking.max_response_bytes={MAX_BYTES}"),
                    limit_s)  # fmt: skip


def _track(url: str, run_dir: Path, limit_s: float) -> tuple[int, str, str, float, int]:
    return _bounded([sys.executable, "-m", "evalkit.track", "--tracking-uri", url, "--request-deadline-s", str(DEADLINE_S),
                     "--max-response-bytes", str(MAX_BYTES), str(run_dir)], limit_s)  # fmt: skip


def _compare_log(url: str, run_dir: Path, limit_s: float) -> tuple[int, str, str, float, int]:
    """``python -m evalkit.compare RUN RUN --log`` into ``url`` (the run compared with itself)."""
    return _bounded([sys.executable, "-m", "evalkit.compare", str(run_dir), str(run_dir), "--log", "--tracking-uri", url,
                     "--request-deadline-s", str(DEADLINE_S), "--max-response-bytes", str(MAX_BYTES)], limit_s)  # fmt: skip


def _hint(line: str, url: str, run_dir: Path, after: str) -> None:
    """``line`` ends with the ``python -m evalkit.track`` that logs ``run_dir`` into ``url``,
    shell-quoted: pasted into a shell (``python`` a no-op there), it runs nothing else."""
    command = line.split(after, 1)[1]
    assert command == shlex.join(["python", "-m", "evalkit.track", "--tracking-uri", url, str(run_dir)])
    assert f"'{run_dir}'" in command  # the ; and the space are inside quotes
    pasted = subprocess.run(["bash", "-c", f"python() {{ :; }}\n{command}"], cwd=run_dir.parent, capture_output=True, timeout=60)
    assert pasted.returncode == 0 and not (run_dir.parent / "PWNED").exists()


def _complete(run_dir: Path) -> None:
    """The run is complete in its directory, whatever its tracking did."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["n_samples"] == 10
    assert len((run_dir / "predictions.jsonl").read_text().splitlines()) == 10


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("evalkit: error:", "evalkit: warning:"))]


@pytest.mark.slow
def test_a_trickling_server_is_cut_off_at_the_deadline(tmp_path):
    """One byte every 2 s from the status line on (the answer would take 300 s; MLflow's read
    timeout never fires): the run's check and its logging each end at the 5 s deadline (its
    exit code 0, complete, one line with the bound and the quoted track command); ``track``
    ends the same way, exit 1; ``compare --log`` in one line, exit 2. Before the deadline, the
    run hung past 200 s in its check."""
    run_dir = tmp_path / RUN_DIR_NAME
    trickle_s = len(TRICKLE) * TRICKLE_S
    with HostileServer("trickle") as srv:
        code, out, err, took, _ = _run(srv.url, run_dir, limit_s=trickle_s + 60)
        assert took < trickle_s * 0.8, f"the run took {took:.0f} s"  # the run's start included; the deadline is 5 s
        assert code == 0 and "evalkit: complete: arith_mini × reference" in out, err[-2000:]
        (line,) = _errors(err)
        assert line.startswith(f"evalkit: warning: tracking: MLflow logging failed (the MLflow server {srv.url} did not answer "
                               f"within tracking.request_deadline_s = {DEADLINE_S} s)")  # fmt: skip
        _hint(line, srv.url, run_dir, "log them with: ")
        _complete(run_dir)
        assert not (run_dir / "tracking.json").exists()

        code, out, err, took, _ = _track(srv.url, run_dir, limit_s=trickle_s + 60)
        assert took < trickle_s * 0.8 and code == 1, (took, err[-2000:])
        (line,) = _errors(err)
        assert line.startswith(f"evalkit: error: tracking: the MLflow server {srv.url} did not answer within "
                               f"tracking.request_deadline_s = {DEADLINE_S} s; log {run_dir} later with: ")  # fmt: skip
        _hint(line, srv.url, run_dir, " later with: ")
        assert "Traceback" not in err

        code, out, err, took, _ = _compare_log(srv.url, run_dir, limit_s=trickle_s + 60)
        assert took < trickle_s * 0.8 and code == 2, (took, err[-2000:])
        assert _errors(err) == [f"evalkit: error: --log: MLflow failed (the MLflow server {srv.url} did not answer within "
                                f"tracking.request_deadline_s = {DEADLINE_S} s)"]  # fmt: skip
    # each answer was cut off near the deadline (the server sees it at its next byte), not trickled to its end
    assert len(srv.held) == 4 and max(srv.held) < trickle_s / 4, srv.held
    assert max(srv.sent) < len(TRICKLE) / 2, srv.sent


@pytest.mark.slow
def test_a_flooding_server_is_cut_off_at_the_size_bound(tmp_path):
    """600 MiB answers (no Content-Length: they end when the server closes): each is refused
    once 4 MiB are read, the process's peak RSS stays far below what was offered (before the
    bound, ``track`` reached 2.0 GB on it); the run completes (exit 0) with one line naming the
    bound, ``track`` exits 1 with the same, ``compare --log`` 2."""
    run_dir = tmp_path / RUN_DIR_NAME
    with HostileServer("flood") as srv:
        code, out, err, _, rss = _run(srv.url, run_dir, limit_s=600)
        assert rss < 600 << 20, f"peak RSS {rss >> 20} MiB"
        assert code == 0 and "evalkit: complete: arith_mini × reference" in out, err[-2000:]
        (line,) = _errors(err)
        bound = f"the MLflow server {srv.url} sent a response larger than tracking.max_response_bytes = {MAX_BYTES:,} bytes"
        assert line.startswith(f"evalkit: warning: tracking: MLflow logging failed ({bound})")
        _hint(line, srv.url, run_dir, "log them with: ")
        _complete(run_dir)

        code, out, err, _, rss = _track(srv.url, run_dir, limit_s=600)
        assert code == 1 and rss < 600 << 20, (rss >> 20, err[-2000:])
        (line,) = _errors(err)
        assert line.startswith(f"evalkit: error: tracking: {bound}; log {run_dir} later with: ")
        _hint(line, srv.url, run_dir, " later with: ")

        code, out, err, _, rss = _compare_log(srv.url, run_dir, limit_s=600)
        assert code == 2 and rss < 600 << 20, (rss >> 20, err[-2000:])
        assert _errors(err) == [f"evalkit: error: --log: MLflow failed ({bound})"]
    # every answer was cut short: the client stopped reading near the bound (plus socket buffers)
    assert len(srv.sent) == 4 and max(srv.sent) < FLOOD_BYTES / 8, srv.sent


@pytest.mark.slow
def test_a_server_answering_garbage_never_reaches_tracking_json(tmp_path):
    """A 200 whose JSON means nothing: MLflow reads empty ids from it (an experiment ``""``,
    a run ``""``). The run completes (exit 0) with one line naming the server and the quoted
    track command, and no ``tracking.json`` is written (before, ``{"mlflow_run_id": ""}`` was,
    and every later ``track`` of the directory was refused, exit 2); ``track`` exits 1, the
    directory still loggable."""
    run_dir = tmp_path / RUN_DIR_NAME
    with HostileServer("garbage") as srv:
        code, out, err, _, rss = _run(srv.url, run_dir, limit_s=600)
        assert code == 0 and "evalkit: complete: arith_mini × reference" in out, err[-2000:]
        (line,) = _errors(err)
        assert line.startswith(f"evalkit: warning: tracking: MLflow logging failed (the MLflow store {srv.url} answered what "
                               "is not an MLflow id (mlflow_run_id: ")  # fmt: skip
        _hint(line, srv.url, run_dir, "log them with: ")
        _complete(run_dir)
        assert not (run_dir / "tracking.json").exists()

        for _ in range(2):  # the directory stays loggable: the same answer, not a refusal of the directory
            code, out, err, _, rss = _track(srv.url, run_dir, limit_s=600)
            assert code == 1, err[-2000:]
            (line,) = _errors(err)
            assert line.startswith(f"evalkit: error: tracking: the MLflow store {srv.url} answered what is not an MLflow id")
            _hint(line, srv.url, run_dir, " later with: ")
            assert not (run_dir / "tracking.json").exists()


@pytest.mark.slow
def test_a_server_asking_for_an_hours_wait_is_left_at_the_deadline(tmp_path):
    """A 503 with ``Retry-After: 3600`` to every request (MLflow honours it, and urllib3 up to
    6 hours, between its retries): ``track`` of a run made with ``tracking=none`` ends at
    once, exit 1, in one line naming the bound and the wait asked for, with the quoted track
    command. Before, it slept the hour."""
    run_dir = tmp_path / RUN_DIR_NAME
    code, out, err, _, _ = _bounded(evalkit_cmd("benchmark=arith_mini", "model=reference", "run.progress=false", "tracking=none",
                                                f"run.dir='{run_dir}'", f"run.output_root={tmp_path / 'out'}"), 600)  # fmt: skip
    assert code == 0, err[-2000:]
    with HostileServer("busy") as srv:
        code, out, err, took, _ = _track(srv.url, run_dir, limit_s=RETRY_AFTER_S / 12)
        assert took < RETRY_AFTER_S / 24 and code == 1, (took, err[-2000:])
        (line,) = _errors(err)
        assert line.startswith(f"evalkit: error: tracking: the MLflow server {srv.url} did not answer within "
                               f"tracking.request_deadline_s = {DEADLINE_S} s (it asked for a wait of {RETRY_AFTER_S} s "
                               f"before a retry); log {run_dir} later with: ")  # fmt: skip
        _hint(line, srv.url, run_dir, " later with: ")
    assert len(srv.held) == 1  # asked once: no retry was waited for
    _complete(run_dir)


def test_compare_log_never_takes_its_server_from_a_run_directory(tmp_path, monkeypatch):
    """Attack found in issue 43's review: ``tracking.json`` of both runs edited to name a
    listener, ``compare --log`` sent the user's MLflow credentials there (and a ``sqlite:``
    address outside every root made a database there). Now such a store is refused in one
    line before any request; the runs' own output-root SQLite store still works."""
    from evalkit.compare import CompareError, _store_a_run_may_name

    runs = (tmp_path / "out" / "runs" / "a", tmp_path / "out" / "runs" / "b")
    for d in runs:
        d.mkdir(parents=True)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    own = f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}"
    assert _store_a_run_may_name(own, runs) == own
    for named in ("http://127.0.0.1:18777", f"sqlite:///{tmp_path / 'elsewhere' / 'evil.db'}", "file:///tmp/x"):
        with pytest.raises(CompareError) as info:
            _store_a_run_may_name(named, runs)
        assert str(info.value) == (f"--log: the runs' tracking.json names {named}; a run directory never chooses the store "
                                   "evalkit logs to (or sends credentials to): pass --tracking-uri to log there")  # fmt: skip
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:18777")  # the user's own choice
    assert _store_a_run_may_name("http://127.0.0.1:18777", runs) == "http://127.0.0.1:18777"
    assert not (tmp_path / "elsewhere").exists()
