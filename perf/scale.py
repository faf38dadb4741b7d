"""Scale: N samples end to end, and what a selection costs (issue 46; prints figures, not a test).

    .venv/bin/python perf/scale.py [--sizes 10000,100000,1000000] [--fake] [--concurrency 256]
        [--skip-reference] [--tracking none|mlflow] [--selection 2000/200000] [--every 10000] [--keep DIR]

**The ladder** (``--sizes``): for each N, a generated arith-style YAML task of N rows
(``What is a + b?``, the answer a number, 4 categories; ``dataset.max_rows`` raised to N)
is run end to end by ``python -m evalkit`` as a child process, ``model=reference`` (offline:
the gold answers, scored by the engine's bounded scorer) and, with ``--fake``, also
``model=openai_compatible`` against the zero-latency fake OpenAI server
(``tests/support/fake_openai.py``, a process of its own; every answer ``42``) at
``backend.concurrency=--concurrency``. ``tracking=none`` by default (``--tracking mlflow``:
into a SQLite store of the run's own). While a run goes, its driver's resident set (RSS,
psutil) and its journal are read every 0.25 s; printed per 10,000 journaled rows (and at
the end; ``--every``): seconds since launch, driver RSS (MiB), the journal's size (``predictions.jsonl``);
at the end the driver's peak RSS (``VmHWM``), ``summary.json``'s and the store's size
(the MLflow SQLite file and its artifacts; 0 without tracking), the driver's own CPU
seconds (user + system of its threads, last seen 0.25 s before its exit; per row), the run's phases, and the
RSS growth per sample between the first and the last 10k mark (while the requests run).
After the ladder, per mode, the driver's **peak** RSS growth per sample from the smallest N
to the largest: issue 46's figure (target: at most 0.5 KB from 10k to 1M).

**The selection** (``--selection K/M``, default ``2000/200000``; ``--selection 0`` skips
it): ``run.limit=K`` on an M-row task against the whole K-row task (same rows, same
config), offline, each run's wall time and driver peak RSS, and their ratios
(issue 46's target: at most 1.5×).

Every figure is of one machine under whatever load it has: compare ratios within one
invocation, not across hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import post, start_server  # noqa: E402  (one way to start the fake server)
MARK = 10_000  # a line printed per this many journaled rows (--every)

TASK_YAML = """\
name: {name}
kind: task
dataset:
  path: {path}
  fields: {{id: id, input: question, target: answer, category: category}}
  max_rows: {max_rows}
prompt:
  system: Answer the question. Put the final number alone on the last line.
  template: "{{{{ input }}}}"
extract: {{kind: last_line}}
scorers:
  - {{kind: numeric, name: accuracy, abs_tol: 1.0e-6}}
generation:
  temperature: 0.0
  max_tokens: 16
"""


def write_task(folder: Path, name: str, n_rows: int, seed: int = 0) -> Path:
    """A config folder (``EVALKIT_CONFIG_DIR``) holding ``benchmark/<name>.yaml``, a task over
    ``<folder>/<name>.jsonl`` of ``n_rows`` arith rows (the same rows for the same seed: a
    shorter file is a prefix of a longer one). Returns the folder."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{name}.jsonl"
    with data.open("w") as fh:
        for i in range(n_rows):
            a, b = rng.randrange(1000), rng.randrange(1000)
            fh.write(json.dumps({"id": f"q{i}", "question": f"What is {a} + {b}?", "answer": str(a + b),
                                 "category": "abcd"[i % 4]}) + "\n")  # fmt: skip
    (folder / "benchmark").mkdir(parents=True, exist_ok=True)
    (folder / "benchmark" / f"{name}.yaml").write_text(TASK_YAML.format(name=name, path=data, max_rows=max(n_rows, 1)))
    return folder


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


def run_one(config_dir: Path, overrides: list[str], run_dir: Path, label: str, quiet: bool = False) -> dict[str, Any]:
    """One ``python -m evalkit`` run, watched; prints a line per :data:`MARK` journaled rows.
    Returns ``{wall_s, peak_rss_mib, driver_cpu_s (its own, last seen), marks: [(rows, s, rss_mib, journal_bytes)], summary}``."""
    env = {**os.environ, "EVALKIT_CONFIG_DIR": str(config_dir), "PYTHONPATH": f"{REPO / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "evalkit", *overrides, f"run.dir={run_dir}", "run.progress=false"]
    started = time.perf_counter()
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid)
    journal, rows, seen, marks, hwm, cpu = run_dir / "predictions.jsonl", 0, 0, [], 0, 0.0
    if not quiet:
        print(f"  {label}: {'rows':>9} {'s':>8} {'RSS MiB':>8} {'journal MB':>11}", flush=True)

    def read_rows() -> None:
        nonlocal rows, seen
        if journal.exists():
            with journal.open("rb") as fh:
                fh.seek(seen)
                chunk = fh.read()
            cut = chunk.rfind(b"\n") + 1
            rows += chunk[:cut].count(b"\n")
            seen += cut

    while proc.poll() is None:
        time.sleep(0.25)
        try:
            rss = ps.memory_info().rss
            hwm = max(hwm, _hwm_kib(proc.pid))
            times = ps.cpu_times()
            cpu = times.user + times.system  # the driver's own CPU (its threads; not its children)
        except psutil.Error:
            break
        before = rows
        read_rows()
        if rows // MARK > before // MARK:
            mark = (rows, time.perf_counter() - started, rss / 2**20, seen)
            marks.append(mark)
            if not quiet:
                print(f"  {label}: {mark[0]:>9,} {mark[1]:>8.1f} {mark[2]:>8.0f} {mark[3] / 1e6:>11.1f}", flush=True)
    proc.wait()
    wall = time.perf_counter() - started
    read_rows()
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    out = {"wall_s": wall, "peak_rss_mib": hwm / 1024, "driver_cpu_s": cpu, "marks": marks, "rows": rows, "journal_bytes": seen,
           "summary_bytes": _size(summary_path), "rc": proc.returncode, "summary": summary}  # fmt: skip
    if proc.returncode != 0:
        print(f"  {label}: exit {proc.returncode}; see {run_dir.parent / (run_dir.name + '.log')}", flush=True)
    return out


def start_fake() -> tuple[subprocess.Popen[bytes], str]:
    """The fake server of perf/throughput.py, answering "42" at once to every request."""
    proc, base = start_server(wait_s=60)
    post(f"{base}/_plan", {"default": {"content": "42", "latency_s": 0.0}})
    return proc, base


def ladder(work: Path, sizes: list[int], args: argparse.Namespace, base: str | None) -> None:
    modes = [] if args.skip_reference else [("reference", ["model=reference"])]
    if base is not None:
        modes.append((f"fake C={args.concurrency}", [
            "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={base}/v1",
            f"backend.concurrency={args.concurrency}", "run.cache=false"]))  # fmt: skip
    peaks: dict[str, list[tuple[int, float]]] = {}  # mode → [(N, driver peak MiB)]
    for n in sizes:
        config = write_task(work / f"conf{n}", f"arith_scale_{n}", n)
        for label, extra in modes:
            run_dir = work / f"run-{n}-{label.split()[0]}"
            store = work / f"mlflow-{n}-{label.split()[0]}"
            tracking = ["tracking=none"] if args.tracking == "none" else [
                "tracking=mlflow", f"tracking.tracking_uri=sqlite:///{store}/mlflow.db", f"tracking.artifact_location={store}/artifacts"]  # fmt: skip
            if args.tracking != "none":
                store.mkdir(parents=True, exist_ok=True)
            print(f"N={n:,} {label} (tracking={args.tracking})", flush=True)
            r = run_one(config, [f"benchmark=arith_scale_{n}", *extra, *tracking], run_dir, f"{n // 1000}k {label.split()[0]}")
            peaks.setdefault(label, []).append((n, r["peak_rss_mib"]))
            phases = (r["summary"].get("engine") or {}).get("phases") or {}
            print(f"  end: wall {r['wall_s']:.1f} s, rows {r['rows']:,}, status {r['summary'].get('status')}, driver peak RSS "
                  f"{r['peak_rss_mib']:.0f} MiB, journal {r['journal_bytes'] / 1e6:.1f} MB ({r['journal_bytes'] / max(r['rows'], 1):.0f} B/row), "
                  f"summary.json {r['summary_bytes'] / 1e3:.1f} kB, store {_size(store) / 1e6:.1f} MB, driver CPU {r['driver_cpu_s']:.1f} s "
                  f"({1e3 * r['driver_cpu_s'] / max(r['rows'], 1):.2f} ms/row)", flush=True)  # fmt: skip
            print("  phases: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items() if isinstance(v, (int, float))), flush=True)
            if len(r["marks"]) >= 2:
                (n0, _, m0, _), (n1, _, m1, _) = r["marks"][0], r["marks"][-1]
                print(f"  RSS growth {n0:,}→{n1:,} rows: {(m1 - m0) * 2**20 / 1024 / (n1 - n0):.2f} KB/sample", flush=True)
            if not args.keep:
                shutil.rmtree(run_dir, ignore_errors=True)
                shutil.rmtree(store, ignore_errors=True)
    for label, points in peaks.items():  # issue 46's figure: the driver's peak, from the smallest N to the largest
        (n0, m0), (n1, m1) = points[0], points[-1]
        if n1 > n0:
            print(f"{label}: driver peak RSS growth {n0:,}→{n1:,} samples: {(m1 - m0) * 1024 / (n1 - n0):.2f} KB/sample "
                  f"({m0:.0f} → {m1:.0f} MiB; target at most 0.5)", flush=True)  # fmt: skip


def selection(work: Path, k: int, m: int) -> None:
    big = write_task(work / "conf-big", "arith_big", m)
    small = write_task(work / "conf-small", "arith_small", k)
    print(f"selection: run.limit={k:,} of {m:,} rows against the {k:,}-row task (model=reference, tracking=none)", flush=True)
    got = {}
    for label, config, overrides in (("whole", small, ["benchmark=arith_small"]), ("limit", big, ["benchmark=arith_big", f"run.limit={k}"])):
        run_dir = work / f"sel-{label}"
        r = run_one(config, [*overrides, "model=reference", "tracking=none"], run_dir, label, quiet=True)
        load = ((r["summary"].get("engine") or {}).get("phases") or {}).get("data_load_s", float("nan"))
        print(f"  {label:>5}: wall {r['wall_s']:.1f} s, data_load_s {load:.2f}, driver peak RSS {r['peak_rss_mib']:.0f} MiB, "
              f"rows {r['rows']:,}", flush=True)  # fmt: skip
        got[label] = r
    print(f"  ratio limit/whole: time {got['limit']['wall_s'] / got['whole']['wall_s']:.2f}×, "
          f"peak RSS {got['limit']['peak_rss_mib'] / max(got['whole']['peak_rss_mib'], 1):.2f}× (target ≤ 1.5×)", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated N of the ladder ('' skips it)")
    p.add_argument("--fake", action="store_true", help="also run against the zero-latency fake server")
    p.add_argument("--skip-reference", action="store_true", help="with --fake: only the fake server's runs")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--tracking", choices=("none", "mlflow"), default="none")
    p.add_argument("--selection", default="2000/200000", help="K/M: run.limit=K of M rows against K rows; 0 skips")
    p.add_argument("--every", type=int, default=10_000, help="a line per this many journaled rows")
    p.add_argument("--keep", default=None, help="a folder to keep the runs in (default: a temporary one, removed)")
    args = p.parse_args()
    global MARK
    MARK = max(1, args.every)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="evalkit-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; work in {work}", flush=True)
    server = None
    try:
        if args.selection and args.selection != "0":
            k, m = (int(x) for x in args.selection.split("/"))
            selection(work, k, m)
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
        if sizes:
            base = None
            if args.fake:
                server, base = start_fake()
            ladder(work, sizes, args, base)
    finally:
        if server is not None:
            server.kill()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
