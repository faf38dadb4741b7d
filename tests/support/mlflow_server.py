"""A real ``mlflow server`` process for tests: one worker, no job runner, no telemetry, on a
free 127.0.0.1 port, in its own process group (so that stopping it ends uvicorn's children
too). Used by the UI test (tests/test_mlflow_ui.py) and the shared-server journeys
(tests/test_mlflow_server.py).

``serve_artifacts``: ``--serve-artifacts`` with ``--artifacts-destination`` (clients upload
through the server), else ``--no-serve-artifacts --default-artifact-root`` (clients write
the artifact folder themselves). ``app_name="basic-auth"``: MLflow's basic-auth app, its
admin created with ``admin_password`` (``MLFLOW_AUTH_ADMIN_PASSWORD``; MLflow 3.17 ships
no default password), its user database in ``workdir``.

A new SQLite store starts as a copy of one made once per test session with MLflow's tables
at the installed version's head revision and nothing in them (MLflow's own migrations took
about 12 s of each server's start at load 20-25 on 2 cores; the server still opens, checks and
fills the store itself: the default experiment, with its own artifact root, is its).
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


_TEMPLATE: list[Path | None] = []


def _migrated_store() -> Path | None:
    """A SQLite file with MLflow's tables migrated to head and no rows, made on first use in
    this process (removed at its exit); ``None`` if it cannot be made (a server then migrates
    its own store, as it always can)."""
    if not _TEMPLATE:
        folder = Path(tempfile.mkdtemp(prefix="evalkit-mlflow-store-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "mlflow.db"
        try:
            import sqlalchemy
            from mlflow.store.db.utils import _initialize_tables

            engine = sqlalchemy.create_engine(f"sqlite:///{path}")
            try:
                _initialize_tables(engine)
            finally:
                engine.dispose()
            _TEMPLATE.append(path)
        except Exception:  # noqa: BLE001 - an optimisation only: the server migrates its own store
            _TEMPLATE.append(None)
    return _TEMPLATE[0]


def _seed_sqlite_store(store_uri: str) -> None:
    """Copy the migrated empty store to ``store_uri``'s file if it is SQLite and absent."""
    if not store_uri.startswith("sqlite:///"):
        return
    target = Path(store_uri[len("sqlite:///") :])
    template = None if target.exists() else _migrated_store()
    if template is not None:
        shutil.copyfile(template, target)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """A started ``mlflow server``: ``url``, its process, its log file."""

    def __init__(self, proc: subprocess.Popen, url: str, log_file: Path, auth: tuple[str, str] | None = None):
        self.proc, self.url, self.log_file, self.auth = proc, url, log_file, auth

    def wait_ready(self, timeout: float = 120.0) -> str:
        """Wait for ``/health`` to answer 200 (fails the test, with the log's tail, if the
        server exits or is not healthy within ``timeout`` s); returns the URL."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                request = urllib.request.Request(f"{self.url}/health")
                if self.auth:
                    token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
                    request.add_header("Authorization", f"Basic {token}")
                with urllib.request.urlopen(request, timeout=2) as resp:
                    if resp.status == 200:
                        return self.url
            except OSError:
                pass
            time.sleep(0.25)
        pytest.fail(f"mlflow server not healthy within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """End the server's whole process group (SIGTERM, then SIGKILL); idempotent."""
        if self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        try:  # the uvicorn child and anything the parent left behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=5)


@contextmanager
def mlflow_server(store_uri: str, artifacts: Path, workdir: Path, serve_artifacts: bool = True,
                  app_name: str | None = None, admin_password: str | None = None,
                  port: int | None = None) -> Iterator[MlflowServer]:  # fmt: skip
    """Start ``mlflow server`` on ``port`` (default: a free one); yields at once (call
    ``wait_ready``) and always ends the whole process group."""
    port = port or free_port()
    _seed_sqlite_store(store_uri)
    log_file = workdir / f"mlflow-server-{port}.log"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    store = ["--artifacts-destination", str(artifacts)] if serve_artifacts else ["--no-serve-artifacts", "--default-artifact-root", artifacts.as_uri()]
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store_uri, *store,
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # fmt: skip
    auth = None
    if app_name:
        cmd += ["--app-name", app_name]
        ini = workdir / "basic_auth.ini"
        ini.write_text(f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{workdir / 'basic_auth.db'}\n"
                       "admin_username = admin\nauthorization_function = mlflow.server.auth:authenticate_request_basic_auth\n",
                       encoding="utf-8")  # fmt: skip
        env.update(MLFLOW_AUTH_CONFIG_PATH=str(ini), MLFLOW_FLASK_SERVER_SECRET_KEY="evalkit-test-csrf-key",
                   MLFLOW_AUTH_ADMIN_PASSWORD=str(admin_password))  # fmt: skip
        auth = ("admin", str(admin_password))
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env, start_new_session=True)
    server = MlflowServer(proc, f"http://127.0.0.1:{port}", log_file, auth)
    try:
        yield server
    finally:
        server.stop()
