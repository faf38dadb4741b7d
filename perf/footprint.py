"""Where the memory of evalkit's process tree goes (issue 23, item 5), in RSS and PSS.

    .venv/bin/python perf/footprint.py                                  # fixed 200 ms, C=64, N=400, and bare
    .venv/bin/python perf/footprint.py --profile lognormal --concurrency 64 -n 2000
    .venv/bin/python perf/footprint.py --mode bare                      # Ray + 2 idle litellm workers + driver
    .venv/bin/python perf/footprint.py --mode run -n 20000 --prompt-kb 2 6   # the driver's growth with N

``run`` mode: one evalkit run the way ``perf/frameworks.py`` runs it (``perf/run_evalkit.py``
in a process of its own, against ``tests/support/fake_openai.py`` under a latency profile),
its process tree sampled with psutil every ``--every`` seconds: the driver, Ray's daemons
(gcs_server, raylet, dashboard head, dashboard agent, runtime-env agent, log monitor,
monitor), Ray's
workers (``ray::…``), the scoring pool (the driver's forkserver and its workers) and any
other process. Printed per group: the sum of resident set sizes (RSS: a page shared by
several processes is counted in each) and of proportional set sizes (PSS, psutil's
``memory_full_info().pss``: a shared page is split between the processes that map it, so
the tree's PSS sum counts each page once), at the sample where the tree's PSS peaked and at
the last sample before the request phase ended (the last request answered, from the
server's log), with the tree's totals.

``bare`` mode: the floor under any run: ``evalkit.engine.ray_session.ensure_ray`` (evalkit's
own Ray start) in a bare driver, two idle actors that import litellm, sampled for
``--bare-s`` seconds once they are up.

``floor`` mode (issue 46 item 7): the floor of ``perf/startup.py --floor``, Ray's defaults:
a bare driver's ``ray.init(include_dashboard=False)`` and one idle actor that imported
litellm, sampled the same way. With ``--mode run floor`` the run's tree peak is printed
over the floor's (target: at most 2×).

Each table is followed by what each process holds at that sample (``--per-process``, on by
default): pid, group, name, RSS and PSS, largest PSS first.

MiB = 2**20 bytes. The server's process is not counted. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

import psutil  # noqa: E402  (bench extra)
from frameworks import (  # noqa: E402
    EVALKIT_ROOT,
    become_subreaper,
    framework_command,
    latencies,
    machine,
    plan_of,
    reap_leftovers,
    tree,
)
from throughput import lmeval_task_dir, post, start_server  # noqa: E402

GROUPS = ("driver", "gcs_server", "raylet", "dashboard head", "dashboard agent", "runtime-env agent", "log monitor",
          "ray monitor", "ray workers", "scoring pool", "other")  # fmt: skip

BARE_CHILD = """
import sys, time, ray
from evalkit.engine.ray_session import ensure_ray
ensure_ray(None, None)

@ray.remote
class Idle:
    def ready(self):
        import litellm  # what a model worker imports
        return True

actors = [Idle.remote() for _ in range(2)]
ray.get([a.ready.remote() for a in actors])
print("READY", flush=True)
time.sleep(float(sys.argv[1]))
ray.shutdown()
"""

FLOOR_CHILD = """
import os, sys, time, ray
ray.init(include_dashboard=False, log_to_driver=False)

@ray.remote(num_cpus=0)
class Floor:
    def ready(self):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm  # what a model worker imports
        return True

actor = Floor.remote()
ray.get(actor.ready.remote())
print("READY", flush=True)
time.sleep(float(sys.argv[1]))
ray.shutdown()
"""


def group_of(p: psutil.Process, driver: int, parents: dict[int, int]) -> str:
    """The group of one process of the tree, by its name and command line (Ray 2.60's names)."""
    name = p.name()
    if p.pid == driver:
        return "driver"
    if name in ("gcs_server", "raylet"):
        return name
    if name.startswith("ray::DashboardAgent"):
        return "dashboard agent"
    if name.startswith("ray::RuntimeEnvAgent"):
        return "runtime-env agent"
    cmd = " ".join(p.cmdline())
    for key, label in (("dashboard/dashboard.py", "dashboard head"), ("log_monitor.py", "log monitor"),
                       ("autoscaler/_private/monitor.py", "ray monitor")):  # fmt: skip
        if key in cmd:
            return label
    if name.startswith("ray::") or "default_worker.py" in cmd:
        return "ray workers"
    pid = parents.get(p.pid)
    while pid:  # a descendant of the driver that is none of Ray's: the scoring pool (forkserver + workers)
        if pid == driver:
            return "scoring pool"
        pid = parents.get(pid)
    return "other"


class PssSampler(threading.Thread):
    """Samples of the tree: (time, {group: [rss, pss, processes]}), every ``every`` seconds."""

    def __init__(self, exclude: set[int], every: float) -> None:
        super().__init__(daemon=True)
        self.exclude, self.every, self.driver = exclude, every, 0
        self.samples: list[tuple[float, dict[str, list[int]]]] = []
        #: per sample (the same index): ``[(pid, group, name, rss, pss)]``
        self.processes: list[list[tuple[int, str, str, int, int]]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            procs = tree(self.exclude)
            parents = {}
            for p in procs:
                try:
                    parents[p.pid] = p.ppid()
                except psutil.Error:
                    pass
            groups: dict[str, list[int]] = {}
            each = []
            for p in procs:
                try:
                    mem = p.memory_full_info()
                    g = group_of(p, self.driver, parents)
                    each.append((p.pid, g, p.name()[:40], mem.rss, mem.pss))
                except psutil.Error:
                    continue
                acc = groups.setdefault(g, [0, 0, 0])
                acc[0] += mem.rss
                acc[1] += mem.pss
                acc[2] += 1
            if groups:
                self.samples.append((time.time(), groups))
                self.processes.append(each)
            self._done.wait(self.every)

    def stop(self) -> None:
        self._done.set()
        self.join()


def total(groups: dict[str, list[int]], i: int) -> int:
    return sum(v[i] for v in groups.values())


def table(title: str, groups: dict[str, list[int]]) -> str:
    rows = [f"{title}", f"  {'group':<18} {'procs':>5} {'RSS MiB':>9} {'PSS MiB':>9}"]
    for g in GROUPS:
        if g in groups:
            rss, pss, n = groups[g]
            rows.append(f"  {g:<18} {n:>5} {rss / 2**20:>9.0f} {pss / 2**20:>9.0f}")
    rows.append(f"  {'tree':<18} {total(groups, 2):>5} {total(groups, 0) / 2**20:>9.0f} {total(groups, 1) / 2**20:>9.0f}")
    return "\n".join(rows)


def per_process(sampler: PssSampler, sample: tuple[float, dict[str, list[int]]]) -> str:
    """What each process held at ``sample`` (one of ``sampler.samples``), largest PSS first."""
    each = sampler.processes[sampler.samples.index(sample)]
    rows = [f"    {'pid':>7} {'group':<18} {'name':<40} {'RSS MiB':>8} {'PSS MiB':>8}"]
    for pid, g, name, rss, pss in sorted(each, key=lambda e: -e[4]):
        rows.append(f"    {pid:>7} {g:<18} {name:<40} {rss / 2**20:>8.0f} {pss / 2**20:>8.0f}")
    return "\n".join(rows)


def as_mib(groups: dict[str, list[int]]) -> dict[str, Any]:
    out: dict[str, Any] = {g: {"procs": v[2], "rss_mib": round(v[0] / 2**20, 1), "pss_mib": round(v[1] / 2**20, 1)}
                           for g, v in groups.items()}  # fmt: skip
    out["tree"] = {"procs": total(groups, 2), "rss_mib": round(total(groups, 0) / 2**20, 1),
                   "pss_mib": round(total(groups, 1) / 2**20, 1)}  # fmt: skip
    return out


def start(cmd: list[str], env: dict[str, str], log: Path, exclude: set[int], every: float) -> tuple[subprocess.Popen[bytes], PssSampler]:
    sampler = PssSampler(exclude, every)
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
    sampler.driver = proc.pid
    sampler.start()
    return proc, sampler


def prompts(work: Path, n: int, kb: tuple[float, float]) -> Path:
    """``work/prompts-N.jsonl``: N prompts of ``kb[0]``–``kb[1]`` KB each (uniform, seed 0),
    ending in ``sample {i}`` as the server's latency profile expects."""
    rng = random.Random(0)
    data = work / f"prompts-{n}.jsonl"
    with data.open("w") as fh:
        for i in range(n):
            fill = "lorem ipsum " * int(rng.uniform(*kb) * 1024 / 12)
            fh.write(json.dumps({"i": i, "text": f"{fill}sample {i}"}) + "\n")
    return data


def run_mode(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    server, base = start_server()
    try:
        data = prompts(work, args.n, args.prompt_kb) if args.prompt_kb else lmeval_task_dir(work, args.n, 16) / "data.jsonl"
        lat = latencies(args.profile, 0, args.n)
        cmd, env, out = framework_command("evalkit", sys.executable, work, "fp", data, base, args.concurrency, args.workers, 16)
        post(f"{base}/_plan", plan_of(args.profile, 0))
        proc, sampler = start(cmd, env, work / "log.txt", {server.pid}, args.every)
        rc = proc.wait()
        reap_leftovers({server.pid})
        sampler.stop()
        entries = json.loads(urllib.request.urlopen(f"{base}/_log", timeout=60).read())
    finally:
        server.terminate()
        server.wait(timeout=10)
    if rc != 0 or len(entries) != args.n:
        tail = " | ".join((work / "log.txt").read_text(errors="replace").strip().splitlines()[-3:])[-300:]
        if rc != 1 or len(entries) < 0.95 * args.n:
            raise SystemExit(f"the run failed: exit {rc}, {len(entries)} requests of {args.n} ({tail})")
        # an incomplete run (a few requests failed: the fake server under a heavy load) still held the
        # plan and its journal: its memory is measured, and said to be of an incomplete run
        print(f"note: the run is incomplete (exit 1, {len(entries)} requests answered of {args.n}); its figures follow")
    end = max(e["t"] + lat[int(e["last"].split()[-1])] for e in entries if e["last"].split()[-1].isdigit())
    peak = max(sampler.samples, key=lambda s: total(s[1], 1))
    before = [s for s in sampler.samples if s[0] <= end] or sampler.samples[:1]
    at_end = before[-1]
    what = f"fixed {args.fixed_ms} ms" if args.profile == "fixed" else "lognormal (median 2 s, sigma 1, cap 60 s)"
    size = f", prompts {args.prompt_kb[0]:g}-{args.prompt_kb[1]:g} KB" if args.prompt_kb else ""
    print(f"run: {what}, C={args.concurrency}, N={args.n}{size}, runner.num_workers={args.workers}; "
          f"{len(sampler.samples)} samples every {args.every} s")  # fmt: skip
    print(table(f"at the tree's PSS peak (t = {peak[0] - sampler.samples[0][0]:.1f} s after launch):", peak[1]))
    if args.per_process:
        print(per_process(sampler, peak))
    print(table(f"at the end of the request phase (sample {end - at_end[0]:.1f} s before the last answer):", at_end[1]))
    driver_peak = [max(smp[1].get("driver", [0, 0])[i] for smp in sampler.samples) / 2**20 for i in (0, 1)]
    print(f"the driver's own peak: {driver_peak[0]:.0f} MiB RSS, {driver_peak[1]:.0f} MiB PSS")
    return {"mode": "run", "driver_peak": {"rss_mib": round(driver_peak[0], 1), "pss_mib": round(driver_peak[1], 1)}, "profile": args.profile, "c": args.concurrency, "n": args.n, "workers": args.workers, "prompt_kb": args.prompt_kb,
            "samples": len(sampler.samples), "peak": as_mib(peak[1]), "end_of_requests": as_mib(at_end[1])}  # fmt: skip


def bare_mode(args: argparse.Namespace, work: Path, floor: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EVALKIT_ROOT), str(REPO), os.environ.get("PYTHONPATH", "")])}
    log = work / ("floor.txt" if floor else "bare.txt")
    proc, sampler = start([sys.executable, "-c", FLOOR_CHILD if floor else BARE_CHILD, str(args.bare_s)], env, log, set(), args.every)
    t_ready = None
    while proc.poll() is None:
        if t_ready is None and "READY" in log.read_text(errors="replace"):
            t_ready = time.time()
        time.sleep(0.1)
    reap_leftovers(set())
    sampler.stop()
    if proc.returncode != 0 or t_ready is None:
        raise SystemExit(f"the bare driver failed: exit {proc.returncode} ({log.read_text(errors='replace')[-300:]})")
    idle = [s for s in sampler.samples if s[0] >= t_ready] or sampler.samples[-1:]
    peak = max(idle, key=lambda s: total(s[1], 1))
    what = ("floor: ray.init(include_dashboard=False) + 1 idle actor that imported litellm + a bare driver" if floor
            else "bare: evalkit's ensure_ray + 2 idle actors that imported litellm + a bare driver")  # fmt: skip
    print(f"{what}; {len(idle)} samples over {args.bare_s:.0f} s once up")
    print(table("at the largest PSS while idle:", peak[1]))
    if args.per_process:
        print(per_process(sampler, peak))
    return {"mode": "floor" if floor else "bare", "samples": len(idle), "peak": as_mib(peak[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", nargs="+", choices=("run", "bare", "floor"), default=["run", "bare"])
    parser.add_argument("--per-process", action=argparse.BooleanOptionalAction, default=True,
                        help="print what each process holds at each table's sample")
    parser.add_argument("--profile", choices=("fixed", "lognormal"), default="fixed")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("-n", type=int, default=400, help="samples (prompts) of the run")
    parser.add_argument("--workers", type=int, default=2, help="runner.num_workers")
    parser.add_argument("--prompt-kb", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                        help="prompts of LO-HI KB (ACEBench-sized: 2 6) instead of 'sample {i}'")  # fmt: skip
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples of the tree")
    parser.add_argument("--bare-s", type=float, default=5.0, help="seconds the bare tree is sampled once up")
    parser.add_argument("--results", type=Path, default=None, help="JSON Lines file the figures are appended to")
    args = parser.parse_args()
    args.fixed_ms = 200
    become_subreaper()
    work = Path(tempfile.mkdtemp(prefix="footprint-"))
    print(f"{machine()}; load {os.getloadavg()[0]:.1f}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", flush=True)
    peaks: dict[str, float] = {}
    for mode in args.mode:
        rec = run_mode(args, work) if mode == "run" else bare_mode(args, work, floor=mode == "floor")
        peaks[mode] = rec["peak"]["tree"]["pss_mib"]
        if args.results:
            rec.update(date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), load1=os.getloadavg()[0])
            with args.results.open("a") as fh:
                fh.write(json.dumps(rec) + "\n")
    if "run" in peaks and "floor" in peaks:
        print(f"tree PSS peak: the run {peaks['run']:.0f} MiB, the floor {peaks['floor']:.0f} MiB: "
              f"{peaks['run'] / peaks['floor']:.2f}x (target at most 2x)")


if __name__ == "__main__":
    main()
