"""A real multi-node Ray cluster on this machine, made and stopped by
``launchers/ray_local_cluster.sh`` (a head and N worker nodes, each its own ``ray start``:
its own raylet, object store and workers), for tests and scripts (``perf/scale_out.py``,
the chaos script):

    cluster = LocalCluster(worker_nodes=2)
    address = cluster.start()          # "127.0.0.1:PORT"; cluster.env: the environment a driver needs
    cluster.kill_raylet(1)             # SIGKILL the raylet of worker node 1 (of 1..N)
    cluster.stop()                     # ends this cluster's processes and nothing else

Each cluster has a temp dir of its own (short: Ray's socket paths are at most 107
characters), a free GCS port, random ports for everything else, and its own auth token.
Worker nodes offer the ``evalkit_worker`` resource, so evalkit's model workers are placed on
them and the head keeps the driver. ``stop`` never runs ``ray stop`` (which would end every
Ray of the user on the machine).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "launchers" / "ray_local_cluster.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClusterError(RuntimeError):
    """The launcher script failed (its output and the tail of its log in the message)."""


class LocalCluster:
    """A cluster made by the launcher script; ``stop()`` is idempotent. ``worker_nodes``:
    nodes besides the head; ``cpus``: CPUs each node offers."""

    def __init__(self, worker_nodes: int = 1, cpus: int = 1, python: str | None = None) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.worker_nodes = worker_nodes
        self.dir = Path(tempfile.mkdtemp(prefix="ekray-", dir="/tmp"))
        python = python or sys.executable
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY")}
        self.env = {
            **env,
            "PY": python,  # the nodes run this Python's Ray and evalkit
            "RAY_PORT": str(self.port),
            "RAY_CLUSTER_DIR": str(self.dir),
            "RAY_WORKER_NODES": str(worker_nodes),
            "RAY_NODE_CPUS": str(cpus),
            "RAY_READY_TIMEOUT": "300",
            # a token of this cluster's own, so nothing depends on ~/.ray
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.dir / "auth_token"),
        }
        self.sessions: list[int] = []
        self.start_output = ""

    def script(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO_ROOT, env=self.env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip

    def start(self, attempts: int = 3) -> str:
        """Start the cluster; returns its address. A node that does not register within
        Ray's own 30 s (``ray start``: "The current node timed out during startup", seen on
        this machine at load average 30) is tried again, on a new port, up to ``attempts``
        times in all. Raises :class:`ClusterError` (after stopping what started) when it
        does not come up."""
        for attempt in range(attempts):
            res = self.script("start", timeout=600)
            if (self.dir / "sessions").exists():
                self.sessions = [int(x) for x in (self.dir / "sessions").read_text().split()]
            if res.returncode == 0:
                self.start_output = res.stdout
                return self.address
            log = (self.dir / "start.log").read_text(errors="replace")[-3000:] if (self.dir / "start.log").exists() else ""
            self.stop()
            if attempt + 1 == attempts or "timed out during startup" not in log + res.stderr:
                raise ClusterError(f"cluster did not start:\n{res.stdout}\n{res.stderr}\n{log}")
            self.port = free_port()
            self.address = f"127.0.0.1:{self.port}"
            self.env["RAY_PORT"] = str(self.port)
        raise AssertionError("unreachable")

    def nodes(self) -> list[tuple[int, int, int | None]]:
        """``(index, session id, raylet pid or None)`` per node; index 0 is the head."""
        res = self.script("nodes")
        if res.returncode != 0:
            raise ClusterError(res.stderr)
        rows = [line.split() for line in res.stdout.splitlines() if line.strip()]
        return [(int(i), int(sid), None if pid == "-" else int(pid)) for i, sid, pid in rows]

    def kill_raylet(self, k: int) -> int:
        """SIGKILL the raylet of worker node ``k`` (1..N); returns its pid."""
        res = self.script("kill-raylet", str(k))
        if res.returncode != 0:
            raise ClusterError(res.stderr)
        return int(res.stdout.rsplit("pid ", 1)[1].rstrip(")\n"))

    def stop(self) -> subprocess.CompletedProcess:
        return self.script("stop")

    def processes(self) -> list[str]:
        """Processes left of this cluster: in one of its sessions or naming its temp dir."""
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                sid = int(stat.read_text().rsplit(")", 1)[1].split()[3])
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue  # the process ended meanwhile
            if sid in self.sessions or f"{self.dir}/" in cmdline:
                out.append(f"{stat.parent.name}: {cmdline[:200]}")
        return out

    def remove(self) -> None:
        """Stop the cluster and delete its temp dir (logs included)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
