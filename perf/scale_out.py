"""Requests per second, and per core, as a local Ray cluster's nodes and model workers grow (prints figures; not a test).

    .venv/bin/python perf/scale_out.py [--shapes 1x1 2x2 2x4] [--n 600] [--concurrency 32]
        [--latency 0.05] [--cpus 1]

Each shape ``NODESxWORKERS`` is a real cluster on this machine (a head and NODES worker
nodes, each its own raylet, made by ``launchers/ray_local_cluster.sh`` through
tests/support/local_cluster.py; the model workers are placed on the worker nodes, the
driver runs beside the head) and one ``runner=cluster runner.num_workers=WORKERS`` run of
``--n`` single-turn prompts (``perf/run_evalkit.py``'s ``prompts_jsonl``) against the fake
OpenAI server (tests/support/fake_openai.py, a process of its own, ``--latency`` seconds per
answer) at ``backend.concurrency=--concurrency``. Clusters are made one at a time and
stopped after their run.

Printed per shape:

* requests/s: ``--n`` / the request phase (``summary.json`` → ``engine.requests_wall_s``,
  first request sent to last answer);
* CPU: seconds used during the request phase (the server's first request to its last
  answer) by the driver's process tree and every process of the cluster (Ray's daemons of
  each node, the model workers, the shared rate-limit actor), read with psutil every 0.2 s
  (start-up and shutdown left out); the server is not counted;
* per core: requests per CPU-second (what one fully busy core buys), and CPU ms per request.

Every node runs on this machine's cores (``os.cpu_count()`` printed), so more nodes add
processes, not cores: on one machine the figures show what the cluster's machinery costs,
not what more machines would give.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.local_cluster import LocalCluster  # noqa: E402


class CpuSampler(threading.Thread):
    """CPU seconds (user + system) of the processes ``select(proc)`` picks, sampled every
    ``every`` seconds; :meth:`between` gives the CPU they used between two instants (a
    process's last reading is carried forward once it has ended)."""

    def __init__(self, select, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.select, self.every = select, every
        self.snapshots: list[tuple[float, dict[int, float]]] = []
        self.done = threading.Event()

    def sample(self) -> None:
        now, seen = time.time(), {}
        for proc in psutil.process_iter():
            try:
                if self.select(proc):
                    seen[proc.pid] = sum(proc.cpu_times()[:2])
            except psutil.Error:
                continue
        self.snapshots.append((now, seen))

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.every)

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.sample()  # one reading after the last instant asked for

    def total(self, at: float) -> float:
        latest: dict[int, float] = {}
        for when, seen in self.snapshots:
            if when > at:
                break
            latest.update(seen)
        return sum(latest.values())

    def between(self, start: float, end: float) -> float:
        """CPU seconds from the last reading at or before ``start`` to the first at or after
        ``end``: the window widened to whole sampling intervals, so that a request phase
        shorter than one (a small N on a loaded machine) is not read as 0."""
        after = next((when for when, _ in self.snapshots if when >= end), self.snapshots[-1][0])
        return self.total(after) - self.total(start)


def start_server(work: Path, latency: float) -> tuple[subprocess.Popen, str]:
    port_file = work / "port"
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "support" / "fake_openai.py"), str(port_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        if time.monotonic() > deadline:
            raise SystemExit("the fake server did not start")
        time.sleep(0.1)
    base = f"http://127.0.0.1:{port_file.read_text().strip()}"
    while True:
        try:
            set_plan(f"{base}/v1", latency)
            return server, f"{base}/v1"
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def set_plan(api_base: str, latency: float) -> None:
    """Every answer "ok" after ``latency`` seconds; the server's request log emptied."""
    plan = json.dumps({"default": {"content": "ok", "latency_s": latency}}).encode()
    request = urllib.request.Request(f"{api_base.removesuffix('/v1')}/_plan", plan, {"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10)


def prompts(work: Path, n: int) -> Path:
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"i": i, "text": f"question {i}: say ok"}) + "\n" for i in range(n)))
    return data


def one_shape(nodes: int, workers: int, args: argparse.Namespace, work: Path, api_base: str, data: Path) -> dict:
    cluster = LocalCluster(worker_nodes=nodes, cpus=args.cpus)
    try:
        cluster.start()
        sids = set(cluster.sessions)
        set_plan(api_base, args.latency)
        out = work / f"{nodes}x{workers}.json"
        cmd = [sys.executable, str(REPO / "perf" / "run_evalkit.py"), str(data), str(out), "runner=cluster",
               f"runner.address={cluster.address}", f"runner.num_workers={workers}", "model=openai_compatible",
               "model.provider_model=openai/fake", f"backend.api_base={api_base}", f"backend.concurrency={args.concurrency}",
               "run.cache=false", "tracking=none", "run.progress=false", f"run.output_root={work / 'out'}"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=REPO, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        driver = psutil.Process(proc.pid)

        def mine(p: psutil.Process) -> bool:
            if p.pid == proc.pid:
                return True
            try:
                if os.getsid(p.pid) in sids:
                    return True
            except OSError:
                return False
            return any(parent.pid == driver.pid for parent in p.parents())

        sampler = CpuSampler(mine)
        sampler.start()
        log, _ = proc.communicate(timeout=3600)
        sampler.stop()
        if proc.returncode != 0:
            raise SystemExit(f"{nodes}x{workers}: the run failed (exit {proc.returncode}): {log[-2000:]}")
        engine = json.loads(out.read_text())["engine"]
        requests = json.loads(urllib.request.urlopen(f"{api_base.removesuffix('/v1')}/_log", timeout=60).read())
        cpu_s = sampler.between(min(r["t"] for r in requests), max(r["done"] for r in requests))
    finally:
        cluster.remove()
    rps = args.n / engine["requests_wall_s"]
    return {"nodes": nodes, "workers": workers, "requests_per_s": rps, "cpu_s": cpu_s, "per_cpu_s": args.n / cpu_s,
            "cpu_ms_per_request": cpu_s / args.n * 1e3, "units_per_node": [n["units"] for n in engine.get("nodes", [])]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["1x1", "2x2", "2x4"], help="NODESxWORKERS (worker nodes x model workers)")
    parser.add_argument("--n", type=int, default=600, help="prompts per run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per answer")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs each node offers Ray")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="scale-out-") as tmp:
        work = Path(tmp)
        server, api_base = start_server(work, args.latency)
        try:
            data = prompts(work, args.n)
            print(f"N={args.n} prompts, backend.concurrency={args.concurrency}, server latency {args.latency:g} s; "
                  f"this machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
            print(f"{'nodes x workers':>16} {'requests/s':>11} {'CPU s':>7} {'requests/CPU-s':>15} {'CPU ms/request':>15}  units per node")
            for shape in args.shapes:
                nodes, workers = (int(x) for x in shape.split("x"))
                r = one_shape(nodes, workers, args, work, api_base, data)
                print(f"{shape:>16} {r['requests_per_s']:>11.1f} {r['cpu_s']:>7.1f} {r['per_cpu_s']:>15.1f} "
                      f"{r['cpu_ms_per_request']:>15.2f}  {r['units_per_node']}", flush=True)  # fmt: skip
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
