"""evalkit, Inspect AI and lm-evaluation-harness side by side on one workload, each framework a process of its own (prints figures).

    .venv/bin/python perf/frameworks.py                      # everything (~27 min on 2 quiet cores)
    .venv/bin/python perf/frameworks.py --profile fixed      # one part (each part < 10 min)
    .venv/bin/python perf/frameworks.py --profile lognormal --concurrency 64 --results R.jsonl
    .venv/bin/python perf/frameworks.py --scale-out --results R.jsonl
    .venv/bin/python perf/frameworks.py --report R.jsonl     # the tables of earlier parts
        [--framework evalkit inspect lmeval] [--workers 2] [--seed 0] [--max-tokens 16]
        [--bench-python .venv-bench/bin/python] [--repeat 1] [--max-n 40 (a quick check)]

The workload: N prompts ``sample {i}`` (one JSONL file, read by every framework), each
one chat request with max_tokens 16 and temperature 0, no retries, against
``tests/support/fake_openai.py`` in its own process, under two latency profiles:

* ``fixed``: every request waits 200 ms;
* ``lognormal``: request ``i`` waits a lognormal draw (median 2 s, sigma 1.0, capped at
  60 s) seeded by ``--seed`` and ``i`` alone (the server reads ``i`` from the prompt: the
  plan's ``latency_profile``), so every framework meets the same latency for the same
  sample whatever the order it sends them in.

N is 50 at concurrency 1, 400 at 16 and 2,000 at 64 and 256. The frameworks:

* evalkit: ``perf/run_evalkit.py`` (the command line's own path; a fresh local Ray,
  ``runner.num_workers`` = ``--workers``, ``backend.concurrency`` = C) in this interpreter,
  with the ``evalkit`` package this interpreter imports;
* Inspect AI: ``perf/run_inspect.py`` (``openai-api`` provider, ``max_connections`` = C);
* lm-eval: ``local-chat-completions`` at ``num_concurrent`` = C through
  ``simple_evaluate`` (the child of ``perf/throughput.py``; the task index is built as
  its command line does), with a fresh datasets cache per run.

Inspect AI and lm-eval run in ``--bench-python`` (default ``.venv-bench/bin/python`` when it
exists, else this interpreter): ``pip install inspect-ai openai "lm_eval[api]"`` there
(``openai`` for Inspect AI's ``openai-api`` provider); a framework that is not importable
is skipped with one line. This interpreter needs evalkit and psutil
(``pip install -e '.[bench]'`` installs psutil and both frameworks).

Each run is measured from outside, the same way for all three:

* wall: from launching the process to its exit, imports included;
* × limit: wall divided by the physical limit. Every request's latency is known in
  advance, so the limit is exact: the finishing time of an ideal client that keeps all C
  slots busy from time 0 and gives each free slot the next request in sample order
  (⌈N/C⌉·L for a fixed latency). 1.00 would be a framework with no start-up, no
  overhead and no exit;
* start-up: launch to the first request the server sees; exit: the last answer (arrival
  plus its scripted latency) to the process's exit;
* in-flight: the server's peak number of requests being served at once;
* CPU per request: user + system CPU of the process and every descendant (Ray's daemons
  and workers, scoring pools) divided by N: the larger of two lower bounds. (1) The
  difference of ``getrusage(RUSAGE_CHILDREN)`` around the run, this script being a child
  subreaper (``PR_SET_CHILD_SUBREAPER``: a process that outlives its parent is re-parented
  here, waited for, ended after 30 s, and reaped). It is exact for a tree whose parents
  wait for their children, but Ray's raylet does not reap its workers that way, so their
  CPU never reaches it. (2) The sum over the tree's processes of each one's own CPU time
  when last seen (psutil, sampled every 0.2 s): it misses at most the last 0.2 s of each
  process (and processes that live less than that). For a single process the two agree
  within 1 %; for evalkit (2) is the larger, by the Ray workers' CPU. The column
  ``(requests)`` is the tree's CPU between the first request and the last answer alone
  (the sampled series, interpolated), start-up and exit left out;
* peak memory: the largest sum of the tree's resident set sizes (psutil, sampled every
  0.2 s; shared pages counted in each process).

``--scale-out`` (issue 16, item 6): evalkit at ``runner.num_workers`` 1, 2, 4 under the
fixed profile at concurrency 64 and 256, N = 2,000: requests per second (whole run and
request phase) and per core (requests per CPU-second of evalkit's processes in the
request phase).

Results go to ``--results`` (JSON Lines, default a new ``outputs/bench/frameworks-<stamp>.jsonl``)
as each run ends; give the parts one file and the last part prints every table, or print
them with ``--report``. With several runs of a cell (``--repeat``, or parts run again when
the machine is quieter), the tables show the run with the shortest wall time. The server
shares the machine with the framework under test: on a small machine the figures include
that contention, equally for all. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import heapq
import json
import os
import platform
import resource
import shutil
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

from tests.support.fake_openai import profile_latency  # noqa: E402
from throughput import LMEVAL_CHILD, LMEVAL_TASK, lmeval_task_dir, post, start_server  # noqa: E402

import evalkit  # noqa: E402

#: where this interpreter found evalkit: the evalkit process runs that one
EVALKIT_ROOT = Path(evalkit.__file__).resolve().parents[1]

FRAMEWORKS = ("evalkit", "inspect", "lmeval")
LABEL = {"evalkit": "evalkit", "inspect": "Inspect AI", "lmeval": "lm-eval"}
PROFILES = ("fixed", "lognormal")
SIZES = {1: 50, 16: 400, 64: 2000, 256: 2000}  # N per concurrency
FIXED_S = 0.2
LOGNORMAL = {"kind": "lognormal", "median_s": 2.0, "sigma": 1.0, "cap_s": 60.0}
SCALE_WORKERS = (1, 2, 4)
SCALE_CONCURRENCY = (64, 256)
LINGER_S = 30.0  # how long a process that outlived the framework's own may go on before it is ended
SAMPLE_S = 0.2


# ---- the workload and its limit ------------------------------------------------------------
def plan_of(profile: str, seed: int) -> dict[str, Any]:
    if profile == "fixed":
        return {"default": {"content": "ok", "latency_s": FIXED_S}}
    return {"default": {"content": "ok", "latency_profile": {**LOGNORMAL, "seed": seed}}}


def latencies(profile: str, seed: int, n: int) -> list[float]:
    if profile == "fixed":
        return [FIXED_S] * n
    return [profile_latency({**LOGNORMAL, "seed": seed}, i) for i in range(n)]


def ideal_makespan(lat: list[float], c: int) -> float:
    """When an ideal client finishes: C slots busy from time 0, each free slot given the
    next request in sample order."""
    free = [0.0] * min(c, len(lat))
    for x in lat:
        heapq.heappush(free, heapq.heappop(free) + x)
    return max(free)


# ---- measuring a process tree --------------------------------------------------------------
def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process (Linux), so that their resource
    usage reaches ``RUSAGE_CHILDREN`` when they are reaped here."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def tree(exclude: set[int]) -> list[psutil.Process]:
    """This process's descendants, less the excluded processes and theirs (the server)."""
    out = []
    for kid in psutil.Process().children():
        if kid.pid in exclude:
            continue
        out.append(kid)
        try:
            out += kid.children(recursive=True)
        except psutil.Error:
            pass
    return out


class TreeSampler(threading.Thread):
    """The largest sum of the tree's resident set sizes, sampled every ``SAMPLE_S``; and,
    as a cross-check of the CPU figure, each process's own CPU time when last seen (a
    lower bound: it misses what a process spends after its last sample)."""

    def __init__(self, exclude: set[int]) -> None:
        super().__init__(daemon=True)
        self.exclude, self.peak, self.procs, self._done = exclude, 0, 0, threading.Event()
        self.cpu_seen: dict[tuple[int, float], tuple[str, float]] = {}
        self.series: list[tuple[float, float]] = []  # (time, the tree's CPU seconds so far)

    def run(self) -> None:
        while not self._done.is_set():
            total = n = 0
            for p in tree(self.exclude):
                try:
                    with p.oneshot():
                        total += p.memory_info().rss
                        t = p.cpu_times()
                        self.cpu_seen[(p.pid, p.create_time())] = (p.name(), t.user + t.system)
                    n += 1
                except psutil.Error:
                    pass
            self.peak, self.procs = max(self.peak, total), max(self.procs, n)
            self.series.append((time.time(), sum(c for _, c in self.cpu_seen.values())))
            self._done.wait(SAMPLE_S)

    def cpu_between(self, t1: float, t2: float) -> float:
        """The tree's CPU seconds between two moments (interpolated between samples)."""

        def at(t: float) -> float:
            prev = (self.series[0][0], 0.0) if self.series else (t, 0.0)
            for ts, cpu in self.series:
                if ts >= t:
                    return prev[1] + (cpu - prev[1]) * (t - prev[0]) / (ts - prev[0]) if ts > prev[0] else cpu
                prev = (ts, cpu)
            return prev[1]

        return at(t2) - at(t1)

    def stop(self) -> None:
        self._done.set()
        self.join()


def by_name(seen: dict[tuple[int, float], tuple[str, float]]) -> dict[str, float]:
    """Sampled CPU seconds per process name, largest first."""
    out: dict[str, float] = {}
    for name, cpu in seen.values():
        out[name] = out.get(name, 0.0) + cpu
    return dict(sorted(((k, round(v, 2)) for k, v in out.items()), key=lambda kv: -kv[1]))


def reap_leftovers(exclude: set[int]) -> tuple[int, float]:
    """Wait for the processes that outlived the framework's own (re-parented here), end
    them after ``LINGER_S``, reap them. Returns how many there were and how long the last
    one lived on."""
    t0, seen = time.perf_counter(), set()
    while True:
        kids = [k for k in psutil.Process().children() if k.pid not in exclude]
        if not kids:
            break
        seen.update(k.pid for k in kids)
        late = time.perf_counter() - t0 > LINGER_S
        for k in kids:
            try:
                if late:
                    k.kill()
                pid, _ = os.waitpid(k.pid, os.WNOHANG)
            except (psutil.Error, ChildProcessError):
                continue
        time.sleep(0.05)
    return len(seen), time.perf_counter() - t0 if seen else 0.0


def measure(cmd: list[str], env: dict[str, str], log: Path, server_pid: int, base: str,
            lat: list[float]) -> dict[str, Any]:  # fmt: skip
    """Run ``cmd`` to its exit; its figures and the server's."""
    exclude = {server_pid}
    sampler = TreeSampler(exclude)
    cpu0 = cpu_children()
    with log.open("w") as fh:
        sampler.start()
        t_launch, p0 = time.time(), time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        try:
            rc = proc.wait()
        except BaseException:
            for p in [proc, *tree(exclude)]:
                try:
                    p.kill()
                except (psutil.Error, ProcessLookupError):
                    pass
            raise
        wall = time.perf_counter() - p0
        leftovers, linger = reap_leftovers(exclude)
        sampler.stop()
    cpu_reaped = cpu_children() - cpu0
    cpu_sampled = sum(c for _, c in sampler.cpu_seen.values())
    entries = json.loads(urllib.request.urlopen(f"{base}/_log", timeout=60).read())
    stats = json.loads(urllib.request.urlopen(f"{base}/_stats", timeout=10).read())
    res: dict[str, Any] = {"rc": rc, "wall_s": wall, "cpu_s": max(cpu_reaped, cpu_sampled), "cpu_reaped_s": cpu_reaped,
                           "cpu_sampled_s": cpu_sampled, "peak_rss_mib": sampler.peak / 2**20,
                           "cpu_by_name": by_name(sampler.cpu_seen), "max_procs": sampler.procs, "leftovers": leftovers, "linger_s": linger,
                           "requests": len(entries), "max_in_flight": stats["max_in_flight"],
                           "non_200": sum(1 for e in entries if e["status"] != 200)}  # fmt: skip
    if entries:
        first = min(e["t"] for e in entries)
        last_answer = max(e["t"] + lat[int(e["last"].split()[-1])] for e in entries if e["last"].split()[-1].isdigit())
        res.update(startup_s=first - t_launch, requests_s=last_answer - first, exit_s=t_launch + wall - last_answer,
                   cpu_requests_s=sampler.cpu_between(first, last_answer))  # fmt: skip
    return res


# ---- the frameworks --------------------------------------------------------------------------
def probe(py: str, module: str) -> str:
    """Empty if ``py`` imports ``module``, else the reason."""
    if not Path(py).exists():
        return f"{py} does not exist"
    r = subprocess.run([py, "-c", f"import {module}"], capture_output=True, text=True)
    return "" if r.returncode == 0 else f"{py}: " + (r.stderr.strip().splitlines() or ["no error output"])[-1]


def framework_command(fw: str, py: str, work: Path, tag: str, data: Path, base: str, c: int, workers: int,
                      max_tokens: int) -> tuple[list[str], dict[str, str], Path]:  # fmt: skip
    """The command line, environment and result file of one run of ``fw``."""
    env = dict(os.environ)
    out = work / f"out-{tag}.json"
    if fw == "evalkit":
        env["PYTHONPATH"] = os.pathsep.join([str(EVALKIT_ROOT), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        overrides = ["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={base}/v1",
                     f"backend.concurrency={c}", "backend.max_retries=0", f"runner.num_workers={workers}",
                     "tracking=none", "run.cache=false", "run.progress=false", f"run.output_root={work / ('runs-' + tag)}",
                     f"+model.generation={{temperature: 0.0, max_tokens: {max_tokens}}}"]  # fmt: skip
        return [sys.executable, str(HERE / "run_evalkit.py"), str(data), str(out), *overrides], env, out
    spec = work / f"spec-{tag}.json"
    if fw == "inspect":
        spec.write_text(json.dumps({"data": str(data), "base_url": f"{base}/v1", "concurrency": c, "max_tokens": max_tokens,
                                    "log_dir": str(work / f"logs-{tag}"), "out": str(out)}))  # fmt: skip
        return [py, str(HERE / "run_inspect.py"), str(spec)], env, out
    child = work / "run_lmeval.py"
    if not child.exists():
        child.write_text(LMEVAL_CHILD)
    spec.write_text(json.dumps({"base_url": f"{base}/v1/chat/completions", "concurrency": c, "max_tokens": max_tokens,
                                "include_path": str(data.parent), "task": LMEVAL_TASK, "out": str(out)}))  # fmt: skip
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TQDM_DISABLE="1",
               HF_DATASETS_CACHE=str(work / f"hf-cache-{tag}"))  # fmt: skip
    return [py, str(child), str(spec)], env, out


def scored(out: Path) -> int | None:
    """Samples the framework itself reports as scored."""
    if not out.exists():
        return None
    r = json.loads(out.read_text())
    return r.get("n_scored")


# ---- tables -----------------------------------------------------------------------------------
def table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def best(records: list[dict[str, Any]], **key: Any) -> tuple[dict[str, Any] | None, int]:
    runs = [r for r in records if r.get("ok") and all(r.get(k) == v for k, v in key.items())]
    return (min(runs, key=lambda r: r["wall_s"]) if runs else None), len(runs)


def report(records: list[dict[str, Any]]) -> str:
    out: list[str] = []
    cells = [r for r in records if r["kind"] == "cell"]
    if cells:
        hosts = sorted({r["machine"] for r in records})
        out.append(f"machine: {'; '.join(hosts)}")
        out.append("wall: launch to exit; x limit: wall / the ideal client's finishing time; start-up: launch to the "
                   "first request; exit: last answer to exit; CPU: user+system of the whole process tree over the "
                   "whole run, and (requests) between the first request and the last answer; "
                   "memory: peak sum of the tree's RSS; load: 1-min load average at the start of the run")  # fmt: skip
    for profile in PROFILES:
        rows = []
        for c in sorted({r["c"] for r in cells if r["profile"] == profile}):
            for fw in FRAMEWORKS:
                r, k = best(cells, profile=profile, c=c, framework=fw)
                failed = [x for x in cells if x["profile"] == profile and x["c"] == c and x["framework"] == fw and not x.get("ok")]
                if r is None:
                    if failed:
                        rows.append([str(c), "", "", LABEL[fw], "failed: " + failed[-1].get("error", "")[:60]] + [""] * 10)
                    continue
                rows.append([str(c), str(r["n"]), f"{r['limit_s']:.2f}", LABEL[fw], f"{r['wall_s']:.2f}",
                             f"{r['wall_s'] / r['limit_s']:.2f}", f"{r['startup_s']:.2f}", f"{r['exit_s']:.2f}",
                             str(r["max_in_flight"]), f"{r['cpu_s']:.1f}", f"{1000 * r['cpu_s'] / r['n']:.2f}",
                             f"{1000 * r['cpu_requests_s'] / r['n']:.2f}" if r.get("cpu_requests_s") else "", f"{r['peak_rss_mib']:.0f}",
                             f"{r['load1']:.1f}", str(k)])  # fmt: skip
        if rows:
            what = f"fixed {FIXED_S * 1000:.0f} ms" if profile == "fixed" else (
                f"lognormal, median {LOGNORMAL['median_s']:.0f} s, sigma {LOGNORMAL['sigma']}, cap {LOGNORMAL['cap_s']:.0f} s, "
                f"seed {cells[0].get('seed', 0)}")  # fmt: skip
            out.append(f"\nprofile {profile} ({what}):")
            out.append(table(["C", "N", "limit s", "framework", "wall s", "x limit", "start-up s", "exit s", "in-flight",
                              "CPU s", "CPU ms/req", "(requests)", "peak MiB", "load", "runs"], rows))  # fmt: skip
    target = [best(cells, profile="lognormal", c=64, framework=fw)[0] for fw in FRAMEWORKS]
    if any(target):
        parts = [f"{LABEL[fw]} {r['wall_s'] / r['limit_s']:.2f}" for fw, r in zip(FRAMEWORKS, target) if r]
        out.append(f"\nlognormal profile at concurrency 64, whole run / limit: {', '.join(parts)}")
    scale = [r for r in records if r["kind"] == "scale"]
    if scale:
        rows = []
        for c in sorted({r["c"] for r in scale}):
            for w in sorted({r["workers"] for r in scale}):
                r, k = best(scale, c=c, workers=w)
                if r is None:
                    continue
                cpu_req = r.get("cpu_requests_s")
                rows.append([str(w), str(c), str(r["n"]), f"{r['wall_s']:.2f}", f"{r['n'] / r['wall_s']:.0f}",
                             f"{r['n'] / r['requests_s']:.0f}", f"{r['n'] / r['limit_s']:.0f}", f"{r['cpu_s']:.1f}",
                             f"{1000 * r['cpu_s'] / r['n']:.2f}", f"{1000 * cpu_req / r['n']:.2f}" if cpu_req else "",
                             f"{r['n'] / cpu_req:.0f}" if cpu_req else "", str(r["max_in_flight"]),
                             f"{r['load1']:.1f}", str(k)])  # fmt: skip
        out.append(f"\nscale-out: evalkit, fixed {FIXED_S * 1000:.0f} ms. req/s (run): N / wall; req/s (requests): "
                   f"N / first request to last answer; (limit): N / the ideal client's time. CPU ms/req (run): the "
                   f"whole tree over the whole run; (requests): the tree's CPU between the first request and the last "
                   f"answer (sampled), start-up and exit left out; req/s per core: N / that CPU, the rate one core "
                   f"of evalkit's processes sustains while the latency is not the bound")  # fmt: skip
        out.append(table(["workers", "C", "N", "wall s", "req/s (run)", "req/s (requests)", "req/s (limit)", "CPU s",
                          "CPU ms/req (run)", "(requests)", "req/s per core", "in-flight", "load", "runs"], rows))  # fmt: skip
    return "\n".join(out)


# ---- main -------------------------------------------------------------------------------------
def machine() -> str:
    return f"{platform.node()}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--profile", nargs="+", choices=PROFILES, default=None)
    parser.add_argument("--concurrency", type=int, nargs="+", choices=sorted(SIZES), default=None)
    parser.add_argument("--framework", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--scale-out", action="store_true", help="evalkit at runner.num_workers 1, 2, 4 (fixed profile)")
    parser.add_argument("--workers", type=int, default=2, help="evalkit's runner.num_workers in the side-by-side runs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the lognormal latencies")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each cell")
    parser.add_argument("--bench-python", default=None, help="interpreter with inspect-ai and lm_eval[api]")
    parser.add_argument("--results", type=Path, default=None, help="JSON Lines file the runs are appended to")
    parser.add_argument("--report", type=Path, default=None, help="print the tables of a results file and exit")
    parser.add_argument("--max-n", type=int, default=None, help="at most this many prompts per run (a quick check)")
    args = parser.parse_args()

    if args.report:
        print(report([json.loads(x) for x in args.report.read_text().splitlines() if x.strip()]))
        return
    everything = args.profile is None and args.concurrency is None and not args.scale_out
    profiles = args.profile or (list(PROFILES) if args.concurrency or everything else [])
    concurrencies = args.concurrency or sorted(SIZES)
    scale_out = args.scale_out or everything
    results = args.results or REPO / "outputs" / "bench" / f"frameworks-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    results.parent.mkdir(parents=True, exist_ok=True)

    py = args.bench_python or next((p for p in [str(REPO / ".venv-bench" / "bin" / "python")] if Path(p).exists()), sys.executable)
    frameworks = []
    for fw in args.framework:
        reason = "" if fw == "evalkit" else probe(py, {"inspect": "inspect_ai", "lmeval": "lm_eval.models.openai_completions"}[fw])
        if reason:
            print(f"{LABEL[fw]} is not importable ({reason}): skipped; pip install inspect-ai openai 'lm_eval[api]'")
        else:
            frameworks.append(fw)
    if not become_subreaper():
        print("warning: not a child subreaper (not Linux?): CPU of processes that outlive their parent is not counted")

    server, base = start_server()
    work = Path(tempfile.mkdtemp(prefix="frameworks-"))
    host = machine()
    print(f"{host}; results -> {results}; work files in {work}", flush=True)
    t_start = time.perf_counter()

    def one(kind: str, profile: str, c: int, fw: str, workers: int, n: int) -> None:
        data = lmeval_task_dir(work, n, args.max_tokens) / "data.jsonl"
        lat = latencies(profile, args.seed, n)
        limit = ideal_makespan(lat, c)
        tag = f"{kind}-{profile}-c{c}-{fw}-w{workers}-{int(time.time() * 1000)}"
        cmd, env, out = framework_command(fw, py, work, tag, data, base, c, workers, args.max_tokens)
        post(f"{base}/_plan", plan_of(profile, args.seed))  # also resets the server's log and peak
        load1 = os.getloadavg()[0]
        rec: dict[str, Any] = {"kind": kind, "profile": profile, "c": c, "n": n, "framework": fw, "workers": workers,
                               "seed": args.seed, "limit_s": limit, "load1": load1, "machine": host,
                               "date": dt.datetime.now().isoformat(timespec="seconds")}  # fmt: skip
        log = work / f"log-{tag}.txt"
        m = measure(cmd, env, log, server.pid, base, lat)
        rec.update(m)
        n_scored = scored(out)
        problems = []
        if m["rc"] != 0:
            problems.append(f"exit {m['rc']}")
        if m["requests"] != n or m["non_200"]:
            problems.append(f"the server saw {m['requests']} requests ({m['non_200']} not 200); expected {n}")
        if n_scored != n:
            problems.append(f"{n_scored} samples scored of {n}")
        rec["ok"] = not problems
        if problems:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])[-300:]
            rec["error"] = "; ".join(problems) + f" (log {log}: {tail})"
        with results.open("a") as fh:
            fh.write(json.dumps(rec) + "\n")
        what = f"{LABEL[fw]}" + (f" workers={workers}" if fw == "evalkit" else "")
        if rec["ok"]:
            print(f"{profile:>9} C={c:<3} N={n:<4} {what:<18} wall {m['wall_s']:7.2f} s = {m['wall_s'] / limit:5.2f} x limit "
                  f"{limit:.2f} s; start-up {m['startup_s']:.2f} s; in-flight {m['max_in_flight']}; "
                  f"CPU {1000 * m['cpu_s'] / n:.2f} ms/req; peak {m['peak_rss_mib']:.0f} MiB; load {load1:.1f}", flush=True)  # fmt: skip
        else:
            print(f"{profile:>9} C={c:<3} N={n:<4} {what:<18} FAILED: {rec['error']}", flush=True)
        for p in work.glob(f"*{tag}*"):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)  # run directories, Inspect logs, datasets caches

    try:
        for _ in range(args.repeat):
            for profile in profiles:
                for c in concurrencies:
                    for fw in frameworks:  # the frameworks take turns, so a change in the machine's load falls on all
                        one("cell", profile, c, fw, args.workers, min(SIZES[c], args.max_n or SIZES[c]))
            if scale_out and "evalkit" in frameworks:
                for c in SCALE_CONCURRENCY:
                    for w in SCALE_WORKERS:
                        one("scale", "fixed", c, "evalkit", w, min(SIZES[c], args.max_n or SIZES[c]))
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"\n{time.perf_counter() - t_start:.0f} s for this part\n")
    print(report([json.loads(x) for x in results.read_text().splitlines() if x.strip()]))


if __name__ == "__main__":
    main()
