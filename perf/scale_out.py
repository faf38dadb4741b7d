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

``--node-loss`` (issue 46 item 5): instead, rounds of two runs on a cluster of their own each
(a head and 2 worker nodes, ``runner.num_workers=2``, the two model workers spread over
them; ``--n`` prompts, ``--latency`` seconds per answer, ``--concurrency``): an undisturbed
run, then one whose worker node 1 has its raylet SIGKILLed ``--kill-at`` seconds after the
server's first request (the model worker there dies with it; Ray restarts it on a node
left once the GCS has declared the node dead). Printed per round, from the server's log:
each request phase (first request to last answer), the disturbed one over the undisturbed
one (target: at most 1.25, plus Ray's restart), the requests in flight at the server each
second from the kill on, the longest stretch after the kill with fewer than half the
window in flight, and the engine's ``delivery`` figures. ``--baseline-src DIR``: the same
rounds with another evalkit tree first on the path (the driver's and the cluster's nodes').
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
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


@contextlib.contextmanager
def serving(work: Path, latency: float) -> Iterator[str]:
    """:func:`start_server` for the ``with`` block: its base URL; the server stopped after."""
    server, api_base = start_server(work, latency)
    try:
        yield api_base
    finally:
        server.terminate()
        server.wait(timeout=10)


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


def server_log(api_base: str) -> list[dict]:
    return json.loads(urllib.request.urlopen(f"{api_base.removesuffix('/v1')}/_log", timeout=60).read())


def node_loss_run(src: Path, args: argparse.Namespace, work: Path, api_base: str, data: Path, kill: bool) -> dict:
    """One run on a cluster of its own; ``kill``: SIGKILL worker node 1's raylet ``args.kill_at``
    seconds after the server's first request."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(src / "src"), str(src)])  # the cluster's nodes inherit it
    try:
        cluster = LocalCluster(worker_nodes=2, cpus=1)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    killed_at = None
    try:
        cluster.start()
        set_plan(api_base, args.latency)
        out = work / f"run-{time.time_ns()}.json"
        cmd = [sys.executable, str(REPO / "perf" / "run_evalkit.py"), str(data), str(out), "runner=cluster",
               f"runner.address={cluster.address}", "runner.num_workers=2", "model=openai_compatible",
               "model.provider_model=openai/fake", f"backend.api_base={api_base}", f"backend.concurrency={args.concurrency}",
               "run.cache=false", "tracking=none", "run.progress=false", f"run.output_root={work / 'out'}"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=src, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if kill:
            while proc.poll() is None:
                log = server_log(api_base)
                if log and time.time() - min(e["t"] for e in log) >= args.kill_at:
                    cluster.kill_raylet(1)
                    killed_at = time.time()
                    break
                time.sleep(0.2)
        output, _ = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"the run failed (exit {proc.returncode}): {output[-2000:]}")
        engine = json.loads(out.read_text())["engine"]
        log = server_log(api_base)
    finally:
        cluster.remove()
    first, last = min(e["t"] for e in log), max(e.get("done", e["t"]) for e in log)
    rec = {"requests_s": last - first, "asked": len(log), "delivery": engine.get("delivery", {}), "killed_at": killed_at}
    if killed_at is not None:
        per_s, low, stretch = [], 0.0, 0.0
        t = killed_at
        while t < last:
            in_flight = sum(1 for e in log if e["t"] <= t < e.get("done", e["t"]))
            per_s.append(in_flight)
            stretch = stretch + 0.1 if in_flight < args.concurrency / 2 else 0.0
            low = max(low, stretch)
            t += 0.1
        rec.update(in_flight_per_s=per_s[::10], longest_below_half_s=round(low, 1), kill_to_end_s=last - killed_at)
    return rec


def node_loss(args: argparse.Namespace) -> None:
    """``--node-loss``: rounds of an undisturbed run and a run that loses worker node 1."""
    trees = {"baseline": args.baseline_src.resolve(), "this tree": REPO} if args.baseline_src else {"this tree": REPO}
    with tempfile.TemporaryDirectory(prefix="node-loss-") as tmp:
        work = Path(tmp)
        with serving(work, args.latency) as api_base:
            data = prompts(work, args.n)
            print(f"N={args.n}, backend.concurrency={args.concurrency}, latency {args.latency:g} s, 2 worker nodes x 1 CPU, "
                  f"kill at {args.kill_at:g} s; {os.cpu_count()} cores", flush=True)  # fmt: skip
            for r in range(args.repeat):
                for name, src in trees.items():
                    load = os.getloadavg()[0]
                    calm = node_loss_run(src, args, work, api_base, data, kill=False)
                    lost = node_loss_run(src, args, work, api_base, data, kill=True)
                    d = lost["delivery"]
                    print(f"round {r + 1} {name} (load {load:.1f}): undisturbed {calm['requests_s']:.1f} s, node lost "
                          f"{lost['requests_s']:.1f} s: {lost['requests_s'] / calm['requests_s']:.2f}x; after the kill "
                          f"{lost.get('kill_to_end_s', 0):.1f} s, below half the window for {lost.get('longest_below_half_s')} s "
                          f"at most; resent {d.get('resent')}, restarted {d.get('workers_restarted')}, left out "
                          f"{d.get('workers_lost')}, worker_died {d.get('lost')}", flush=True)  # fmt: skip
                    print(f"    in flight each second from the kill: {lost.get('in_flight_per_s')}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["1x1", "2x2", "2x4"], help="NODESxWORKERS (worker nodes x model workers)")
    parser.add_argument("--n", type=int, default=600, help="prompts per run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per answer")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs each node offers Ray")
    parser.add_argument("--node-loss", action="store_true", help="instead: runs that lose a node, against undisturbed ones")
    parser.add_argument("--kill-at", type=float, default=3.0, help="with --node-loss: seconds after the server's first request")
    parser.add_argument("--repeat", type=int, default=1, help="with --node-loss: rounds")
    parser.add_argument("--baseline-src", type=Path, default=None, help="with --node-loss: another evalkit tree, measured too")
    args = parser.parse_args()
    if args.node_loss:
        node_loss(args)
        return
    with tempfile.TemporaryDirectory(prefix="scale-out-") as tmp:
        work = Path(tmp)
        with serving(work, args.latency) as api_base:
            data = prompts(work, args.n)
            print(f"N={args.n} prompts, backend.concurrency={args.concurrency}, server latency {args.latency:g} s; "
                  f"this machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
            print(f"{'nodes x workers':>16} {'requests/s':>11} {'CPU s':>7} {'requests/CPU-s':>15} {'CPU ms/request':>15}  units per node")
            for shape in args.shapes:
                nodes, workers = (int(x) for x in shape.split("x"))
                r = one_shape(nodes, workers, args, work, api_base, data)
                print(f"{shape:>16} {r['requests_per_s']:>11.1f} {r['cpu_s']:>7.1f} {r['per_cpu_s']:>15.1f} "
                      f"{r['cpu_ms_per_request']:>15.2f}  {r['units_per_node']}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
