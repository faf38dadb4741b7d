"""Where a run's time goes before and after its requests (prints figures; not a test).

    .venv/bin/python perf/startup.py [--n 50] [--repeat 3] [--baseline-src DIR]
        [--sweep-latency 1.0] [--skip-sweep]

Runs, as a user does (``python -m evalkit`` in its own process, timed from launch to exit):

* a network run: ``--n`` ACEBench samples against ``tests/support/fake_openai.py`` in its own
  process with zero latency (``model=openai_compatible``, no cache, no tracking);
* an offline run: the same samples with ``model=reference``;

and prints each run's ``summary.json`` → ``engine.phases`` (``compose_validate_s``,
``data_load_s``, ``ray_start_s``, ``workers_ready_s``, ``to_first_request_s``,
``requests_s``, ``scoring_s``, ``summary_report_s``, ``tracking_s``) beside the whole
process's wall time, the median of ``--repeat`` runs.

``--baseline-src DIR``: the same runs with another evalkit source tree first on the path
(e.g. a ``git worktree`` of an older commit), for a before/after comparison in one
script run; its summaries may lack the phases, so its start-up is measured from the
server's side: launch to the first request the server sees (the same measure is printed
for this tree).

``--prompts N`` (issue 34 item 5): instead, ``--repeat`` pairs of runs of N one-message
prompts (``perf/run_evalkit.py``, the workload of ``perf/frameworks.py``: ``runner.num_workers=2``,
``--concurrency`` in flight, default 64) against the server, the baseline tree's run and
this tree's alternating (baseline first in odd pairs, this tree first in even ones), each
printed with the host's load average (1 min) at its launch; then the medians. On a shared
host compare the pairs, not figures taken at different times.

With ``--prompts``, ``--floor`` (issue 46 item 6) adds a third run to each round, the floor
under any Ray-based evaluator: a bare driver (``ray.init(include_dashboard=False)``) that
starts one actor importing litellm (``LITELLM_LOCAL_MODEL_COST_MAP=True``, as evalkit's
workers run) and sends the one request from it. Its breakdown is printed beside
evalkit's with the same names: ``ray_start_s`` (the floor's: launch to ``ray.init``
returned; evalkit's: its ``ray.init`` alone), ``workers_ready_s`` (the actor created to its
first answer; evalkit's: its workers created to the first one's answer) and ``first
request`` (launch to the first request the server sees, for both; evalkit's own
``to_first_request_s`` counts from its compose).
Then evalkit's excess over the floor (target: at most 1.0 s).

Then a sweep (``--skip-sweep`` to skip): 6 jobs (2 model names × 3 settings, ``--n``
samples each, concurrency 16) against the server with a fixed ``--sweep-latency``, timed
against the sum of its jobs' request phases plus one start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def start_server() -> tuple[subprocess.Popen, str]:
    port_file = Path(tempfile.mkdtemp()) / "port"
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "support" / "fake_openai.py"), str(port_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(200):
        if port_file.exists() and port_file.read_text().strip():
            base = f"http://127.0.0.1:{port_file.read_text().strip()}"
            try:
                urllib.request.urlopen(f"{base}/_stats", timeout=1).read()
                return proc, base
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError("fake server did not start")


def post(url: str, body: dict) -> None:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def first_request_time(base: str) -> float | None:
    log = json.loads(urllib.request.urlopen(f"{base}/_log", timeout=10).read())
    return min((e["t"] for e in log), default=None)


def run(src: Path, args: list[str], base: str | None) -> tuple[float, float | None, dict]:
    """(wall seconds from launch to exit, seconds from launch to the server's first request,
    summary.engine.phases)."""
    out = Path(tempfile.mkdtemp())
    env = {**os.environ, "PYTHONPATH": f"{src / 'src'}{os.pathsep}{src}"}
    if base:
        post(f"{base}/_plan", {"default": {"content": "[]"}})
    launched = time.time()
    proc = subprocess.run([sys.executable, "-m", "evalkit", *args, f"run.output_root={out}"], cwd=src, env=env,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.time() - launched
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    first = first_request_time(base) if base else None
    (summary,) = out.rglob("summary.json")
    phases = (json.loads(summary.read_text()).get("engine") or {}).get("phases") or {}
    return wall, (first - launched) if first else None, phases


def median_runs(src: Path, args: list[str], base: str | None, repeat: int) -> tuple[float, float | None, dict]:
    results = [run(src, args, base) for _ in range(repeat)]
    walls = [r[0] for r in results]
    firsts = [r[1] for r in results if r[1] is not None]
    keys = {k for r in results for k in r[2]}
    phases = {k: round(statistics.median(r[2][k] for r in results if k in r[2]), 3) for k in sorted(keys)}
    return statistics.median(walls), (statistics.median(firsts) if firsts else None), phases


def runs(base: str, n: int) -> dict[str, list[str]]:
    common = ["benchmark=acebench", f"benchmark.data_dir={DATA / 'acebench'}", "benchmark.subsets=[normal_atom_bool]",
              f"run.limit={n}", "tracking=none", "run.progress=false", "run.cache=false"]  # fmt: skip
    network = [*common, "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={base}/v1",
               "backend.concurrency=16"]  # fmt: skip
    return {"network (fake server, 0 latency)": network, "offline (model=reference)": [*common, "model=reference"]}


def report(label: str, src: Path, base: str, n: int, repeat: int) -> None:
    print(f"\n== {label}: {src}")
    for name, args in runs(base, n).items():
        wall, first, phases = median_runs(src, args, base if "network" in name else None, repeat)
        first_text = f"; launch to the server's first request {first:.2f} s" if first is not None else ""
        print(f"  {name}: process wall {wall:.2f} s (median of {repeat}){first_text}")
        if phases:
            print("    phases: " + ", ".join(f"{k} {v}" for k, v in phases.items()))


def sweep(base: str, n: int, latency: float) -> None:
    post(f"{base}/_plan", {"default": {"content": "[]", "latency_s": latency}})
    out = Path(tempfile.mkdtemp())
    args = ["-m", "benchmark=acebench", f"benchmark.data_dir={DATA / 'acebench'}", "benchmark.subsets=[normal_atom_bool]",
            f"run.limit={n}", "tracking=none", "run.progress=false", "run.cache=false", "model=openai_compatible",
            "model.provider_model=openai/fake,openai/fake2", f"backend.api_base={base}/v1", "backend.concurrency=16",
            "benchmark.max_dialog_turns=30,40,50", f"run.output_root={out}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    launched = time.time()
    proc = subprocess.run([sys.executable, "-m", "evalkit", *args], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.time() - launched
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    engines = [json.loads(p.read_text())["engine"] for p in sorted(out.rglob("summary.json")) if "sweeps" in str(p)]
    requests = sum(e["phases"]["requests_s"] for e in engines)
    startup = engines[0]["phases"]["to_first_request_s"]
    print(f"\n== sweep: {len(engines)} jobs x {n} samples, latency {latency} s, concurrency 16")
    print(f"  wall {wall:.1f} s; sum of request phases {requests:.1f} s + one start-up {startup:.1f} s = {requests + startup:.1f} s; "
          f"ratio {wall / (requests + startup):.2f} (target at most 1.5)")
    print(f"  worker processes per job: {[e.get('worker_pids') for e in engines]}")


FLOOR_CHILD = """
import json, os, sys, time
import ray
ray.init(include_dashboard=False, log_to_driver=False)
ray_up = time.time()

@ray.remote(num_cpus=0)
class Floor:
    def __init__(self):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm  # what a model worker imports

    def ready(self):
        return os.getpid()

    async def ask(self, api_base):
        import litellm

        reply = await litellm.acompletion(model="openai/fake", api_base=api_base, api_key="unused",
                                          messages=[{"role": "user", "content": "sample 0"}])
        return reply.choices[0].message.content

created = time.time()
actor = Floor.remote()
ray.get(actor.ready.remote())
ready = time.time()
ray.get(actor.ask.remote(sys.argv[1]))
print(json.dumps({"ray_up": ray_up, "created": created, "ready": ready}))
ray.shutdown()
"""


def floor_run(base: str) -> tuple[float, float | None, dict, float]:
    """One floor run (``FLOOR_CHILD``): (wall seconds from launch to exit, launch to the server's
    first request, its phases under evalkit's names, load average at launch)."""
    post(f"{base}/_plan", {"default": {"content": "ok"}})
    load = os.getloadavg()[0]
    launched = time.time()
    proc = subprocess.run([sys.executable, "-c", FLOOR_CHILD, f"{base}/v1"], capture_output=True, text=True)
    wall = time.time() - launched
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    first = first_request_time(base)
    phases = {"ray_start_s": round(got["ray_up"] - launched, 3), "workers_ready_s": round(got["ready"] - got["created"], 3)}
    return wall, (first - launched) if first else None, phases, load


def prompts_run(src: Path, data: Path, base: str, concurrency: int) -> tuple[float, float | None, dict, float]:
    """One ``perf/run_evalkit.py`` run of ``data`` with ``src`` first on the path: (wall seconds
    from launch to exit, launch to the server's first request, engine.phases, load average at launch)."""
    out = Path(tempfile.mkdtemp())
    env = {**os.environ, "PYTHONPATH": f"{src / 'src'}{os.pathsep}{src}"}
    post(f"{base}/_plan", {"default": {"content": "ok"}})
    load = os.getloadavg()[0]
    launched = time.time()
    proc = subprocess.run([sys.executable, str(REPO / "perf" / "run_evalkit.py"), str(data), str(out / "out.json"),
                           "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={base}/v1",
                           f"backend.concurrency={concurrency}", "runner.num_workers=2", "tracking=none",
                           "run.progress=false", "run.cache=false", f"run.output_root={out}"],
                          cwd=src, env=env, capture_output=True, text=True)  # fmt: skip
    wall = time.time() - launched
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    first = first_request_time(base)
    engine = json.loads((out / "out.json").read_text())["engine"]
    return wall, (first - launched) if first else None, {**engine.get("phases", {}), "resent": engine.get("delivery", {}).get("resent")}, load


def paired_prompts(baseline: Path | None, n: int, concurrency: int, repeat: int, base: str, floor: bool = False) -> None:
    data = Path(tempfile.mkdtemp()) / "prompts.jsonl"
    data.write_text("".join(json.dumps({"i": i, "text": f"sample {i}"}) + "\n" for i in range(n)))
    trees: dict[str, Path | None] = {"baseline": baseline.resolve(), "this tree": REPO} if baseline else {"this tree": REPO}
    if floor:
        trees = {"floor": None, **trees}
    got: dict[str, list[tuple[float, float | None, dict, float]]] = {name: [] for name in trees}
    keys = ("ray_start_s", "data_load_s", "workers_ready_s", "to_first_request_s", "requests_s", "resent")
    print(f"\n== {n} prompts, concurrency {concurrency}, 2 workers: launch to the server's first request")
    for pair in range(repeat):
        order = list(trees) if pair % 2 == 0 else list(reversed(trees))
        for name in order:
            tree = trees[name]
            r = floor_run(base) if tree is None else prompts_run(tree, data, base, concurrency)
            got[name].append(r)
            wall, first, phases, load = r
            first_text = f"{first:.2f}" if first is not None else "?"
            print(f"  pair {pair + 1} {name:9s} load {load:5.2f}: first request {first_text} s, wall {wall:.1f} s; "
                  + ", ".join(f"{k} {phases.get(k)}" for k in keys), flush=True)
    for name, results in got.items():
        firsts = [r[1] for r in results if r[1] is not None]
        med = {k: statistics.median(r[2][k] for r in results if isinstance(r[2].get(k), (int, float))) for k in keys
               if any(isinstance(r[2].get(k), (int, float)) for r in results)}  # fmt: skip
        print(f"  median {name}: first request {statistics.median(firsts):.2f} s (load {statistics.median(r[3] for r in results):.2f}); "
              + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    if floor:
        print("  launch to the server's first request, per round (evalkit − floor):")
        floors = [r[1] for r in got["floor"]]
        for name in (k for k in trees if k != "floor"):
            excess = [r[1] - f for r, f in zip(got[name], floors) if r[1] is not None and f is not None]
            print(f"    {name}: " + ", ".join(f"{e:+.2f}" for e in excess) + f" s; median {statistics.median(excess):+.2f} s (target at most +1.00 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, default=None, help="another evalkit source tree to measure first")
    parser.add_argument("--sweep-latency", type=float, default=1.0)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--prompts", type=int, default=None, help="N one-message prompts, runs paired (see above)")
    parser.add_argument("--concurrency", type=int, default=64, help="with --prompts")
    parser.add_argument("--floor", action="store_true", help="with --prompts: the floor's run in each round too (see above)")
    args = parser.parse_args()
    server, base = start_server()
    try:
        if args.prompts:
            paired_prompts(args.baseline_src, args.prompts, args.concurrency, args.repeat, base, args.floor)
            return
        if args.baseline_src:
            report("baseline", args.baseline_src.resolve(), base, args.n, args.repeat)
        report("this tree", REPO, base, args.n, args.repeat)
        if not args.skip_sweep:
            sweep(base, args.n, args.sweep_latency)
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
