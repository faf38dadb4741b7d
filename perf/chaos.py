"""Chaos: N seeded trials, each a run with 1-3 random faults, resumed until complete; the
result must equal an undisturbed run's.

    python perf/chaos.py [--trials 30] [--seed 0] [--quick] [--keep-dir DIR]

Every trial runs ``python -m evalkit benchmark=arith_mini`` (10 samples; ``--repeats``
epochs each) as a subprocess (the driver) against the fake OpenAI server
(``tests/support/fake_openai.py``, a subprocess of this script; each sample answered after
a lognormal latency, 3 of 10 answers wrong so that scores differ), on a Ray instance this
script starts (the drivers join it with ``runner.address``), MLflow tracking into a SQLite
file of the trial's own. Faults, 1-3 a trial, drawn with the trial's seed, fire at seeded
times counted from the trial's first journaled row, uniform within 1.2 × the undisturbed
run's time from its first journaled row to its last (a late one lands while the run
finalizes, or misses when the run has ended):

* ``worker_kill``    SIGKILL of one model worker (a Ray actor process);
* ``driver_kill``    SIGKILL of the driver (the run is resumed with ``run.resume``);
* ``storm_429``      every request answered 429 (Retry-After 1) for a while;
* ``burst_5xx``      every request answered 500/502/503 for a while;
* ``resets``         every connection reset (TCP RST, no response) for a while;
* ``stall``          the server holds every request past ``backend.timeout_s`` for a while;
* ``server_restart`` the fake server SIGKILLed, down for a moment, restarted on its port;
* ``write_fault``    the run directory fails writes (EIO) for a moment, injected in the
                     driver through evalkit's test-only seam (``evalkit.jsonl.before_write``,
                     set by ``tests/support/write_faults.py``; see there why production
                     runs never trip it);
* ``llama_kill``     (trials of their own, every ``--embedded-every``-th seed: the
                     embedded model ``model=smollm2``, 3 samples) the llama.cpp server
                     SIGKILLed mid-run; these trials also draw ``driver_kill``, after
                     which the driver's server must end by itself (none may outlive the
                     trial by 15 s);
* ``node_kill``      (trials of their own with ``--cluster-every K``: ``runner=cluster`` on
                     a local cluster of a head and 2 worker nodes started for the trial,
                     ``tests/support/local_cluster.py``) the raylet of one worker node
                     SIGKILLed, once, beside 0-2 of the faults above (not worker_kill).

A storm or stall longer than ``backend.retry_budget_s`` ends in failures by design; a
driver that died, or a run that ended incomplete, is resumed (``run.resume``) as many
times as needed (at most ``--max-attempts`` drivers). A trial passes when, compared with
the undisturbed run of its kind: the predictions are identical (sample, epoch, output,
scores); no (sample, epoch) is missing from ``predictions.jsonl`` or journaled twice there,
and ``failed.jsonl`` is empty at the end; ``summary.json`` is complete (every sample
scored, none failed); the MLflow store holds exactly one trace per journaled unit
(``evalkit.key`` tag; sample × epoch) and one MLflow run; the trial's wall time is within
``--cap-s``. The time limits (``backend.timeout_s``, ``backend.retry_budget_s``, the cap) are
the idle host's times the host's slowness measured at the start (``tests/support/host.py``;
``--slowness`` sets it), so the undisturbed reference run holds on a loaded host (issue 46).
A failing trial's directory is kept with its seed and the command that
replays it. Prints a table and ``K/N identical``. Not a test: nothing is asserted
(``tests/test_perf_scripts.py`` runs one quick trial, seed 22).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # tests.support (the fake server, the test-only write seam)

from tests.support.fake_openai import profile_latency  # noqa: E402
from tests.support.host import slowness  # noqa: E402
from tests.support.write_faults import ENV as WRITE_FAULT_ENV  # noqa: E402

FAKE_FAULTS = ("worker_kill", "driver_kill", "storm_429", "burst_5xx", "resets", "stall", "server_restart", "write_fault")
EMBEDDED_FAULTS = ("llama_kill", "llama_kill", "driver_kill")
#: a cluster trial's faults besides its one node_kill (a model worker dies with its node there)
CLUSTER_FAULTS = tuple(f for f in FAKE_FAULTS if f != "worker_kill")
TASK_DATA = REPO_ROOT / "examples" / "tasks" / "arith_mini.jsonl"
CHAOS_SITE = REPO_ROOT / "tests" / "support" / "chaos_site"


@dataclass
class Settings:
    """A trial's run: ``repeats`` epochs of the 10 samples, ``concurrency`` requests in flight
    on ``workers`` model workers; the fake server's lognormal latency (``median_s``,
    ``sigma``, capped at ``cap_latency_s`` seconds, below ``timeout_s``); retries; the
    embedded trials' ``embedded_limit`` samples; a trial's wall-time cap ``cap_s`` and at
    most ``max_attempts`` drivers."""

    repeats: int = 2
    concurrency: int = 3
    workers: int = 2
    median_s, sigma, cap_latency_s = 0.8, 0.5, 2.5
    timeout_s, retry_budget_s, max_retries = 4.0, 6.0, 8
    embedded_limit: int = 3
    cap_s: float = 300.0
    max_attempts: int = 10
    #: the host's slowness the timeouts were scaled by (:meth:`calibrate`; 1: an idle host)
    slowness: float = 1.0

    def calibrate(self, factor: float) -> None:
        """Scale the run's time limits to the host (issue 46 item 9): ``backend.timeout_s``,
        ``backend.retry_budget_s`` and the trial's cap, each times ``factor`` (the host's
        :func:`~tests.support.host.slowness`, at least 1). On an idle host they stay as
        they are; at load 30 on 2 cores a worker's CPU work around a request stretches past
        the idle host's 4 s timeout, and the undisturbed run ended incomplete. The server's
        latencies are not scaled (its sleeps are not stretched by load), and the faults
        drawn from these limits (a stall past ``timeout_s``, a storm past
        ``retry_budget_s``) keep their meaning."""
        self.slowness = max(1.0, factor)
        self.timeout_s = round(type(self).timeout_s * self.slowness, 1)
        self.retry_budget_s = round(type(self).retry_budget_s * self.slowness, 1)
        self.cap_s = round(type(self).cap_s * self.slowness)

    def fake_args(self, api_base: str) -> list[str]:
        return [
            "benchmark=arith_mini", "model=openai_compatible", "model.provider_model=openai/fake",
            f"backend.api_base={api_base}", f"backend.concurrency={self.concurrency}",
            f"runner.num_workers={self.workers}", f"backend.timeout_s={self.timeout_s}",
            f"backend.max_retries={self.max_retries}", "backend.retry_initial_wait_s=0.2",
            "backend.retry_max_wait_s=1.0", f"backend.retry_budget_s={self.retry_budget_s}",
            f"run.repeats={self.repeats}",
        ]  # fmt: skip

    def embedded_args(self) -> list[str]:
        return ["benchmark=arith_mini", "model=smollm2", f"run.limit={self.embedded_limit}", "runner.num_workers=1",
                "backend.max_retries=1", "backend.retry_initial_wait_s=0.2", "backend.retry_budget_s=10"]  # fmt: skip


# ---- the fake server, a subprocess that can be SIGKILLed and restarted on its port ------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer:
    def __init__(self, workdir: Path):
        self.port = _free_port()
        self.workdir = workdir
        self.plan: dict[str, Any] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Start (or restart) the server on its port, answering by the current plan from its
        first request on (a plan set only once it listens let a restarted server answer a
        retried request with the default content: a wrong answer no provider gives)."""
        plan_file = self.workdir / "fake-plan.json"
        plan_file.write_text(json.dumps(self.plan or {}))
        log = open(self.workdir / "fake-server.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fake_openai", str(self.workdir / "fake-port"), str(self.port), str(plan_file)],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None:  # the port not free yet: try again
                    return self.start()
                time.sleep(0.1)
        else:
            raise RuntimeError("the fake server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def set_plan(self, plan: dict[str, Any]) -> None:
        with self.lock:
            self.plan = plan
            req = urllib.request.Request(f"{self.api_base.rsplit('/v1', 1)[0]}/_plan", data=json.dumps(plan).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
            try:
                urllib.request.urlopen(req, timeout=10).close()
            except OSError:
                pass  # down (being restarted): start() hands it self.plan


def base_plan(seed: int, s: Settings) -> dict[str, Any]:
    """Each arith_mini question answered after its lognormal latency; every 4th answer wrong."""
    rows = [json.loads(x) for x in TASK_DATA.read_text().splitlines() if x.strip()]
    profile = {"kind": "lognormal", "median_s": s.median_s, "sigma": s.sigma, "cap_s": s.cap_latency_s, "seed": seed}
    rules = []
    for i, r in enumerate(rows):
        assert sum(r["question"] in o["question"] for o in rows) == 1, "a question inside another: rules would clash"
        answer = r["answer"] if i % 4 != 3 else f"{float(r['answer']) + 1:g}"
        rules.append({"match": r["question"], "content": f"Working.\n{answer}", "latency_s": profile_latency(profile, i)})
    return {"rules": rules}


def fault_plan(base: dict[str, Any], status: Any, **extra: Any) -> dict[str, Any]:
    return {"rules": [{**r, "always_status": status, "latency_s": 0.05, **extra} for r in base["rules"]]}


# ---- processes ------------------------------------------------------------------------
def model_worker_pids() -> list[int]:
    """Process ids of the ALIVE ModelWorker actors in this script's Ray instance (the GCS
    actor table; every driver of a trial joins this instance, one trial at a time)."""
    from ray._private import state

    return sorted(int(a["Pid"]) for a in state.actors().values()
                  if a["ActorClassName"].split(".")[-1] == "ModelWorker" and a["State"] == "ALIVE" and a.get("Pid"))  # fmt: skip


def llama_pids(driver_pid: int) -> list[int]:
    import psutil

    try:
        kids = psutil.Process(driver_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in kids:
        try:
            if any("serve_fresh" in a or "llama_cpp.server" in a for a in p.cmdline()):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


@dataclass
class Fault:
    name: str
    at_s: float  # after the trial's first journaled row
    hold_s: float = 0.0  # how long a window fault lasts (or the server is down)
    status: Any = None
    fired: bool = False
    note: str = ""

    def label(self) -> str:
        hold = f"+{self.hold_s:.1f}s" if self.hold_s else ""
        missed = "" if self.fired else f" MISSED{f' ({self.note})' if self.note else ''}"
        return f"{self.name}{'' if self.status is None else f'({self.status})'}@{self.at_s:.1f}s{hold}{missed}"


def draw_faults(rng: random.Random, kinds: tuple[str, ...], span_s: float, s: Settings) -> list[Fault]:
    out = []
    for name in rng.choices(kinds, k=rng.randint(1, 3)):
        at = rng.uniform(0.0, span_s)
        f = Fault(name, at)
        if name in ("storm_429", "burst_5xx", "resets"):
            f.hold_s = rng.uniform(0.5, 1.6 * s.retry_budget_s)  # some outlast retry_budget_s
            f.status = {"storm_429": 429, "resets": "reset"}.get(name) or rng.choice([500, 502, 503])
        elif name == "stall":
            f.hold_s, f.status = rng.uniform(1.2 * s.timeout_s, 2.5 * s.timeout_s), "hang"
        elif name == "server_restart":
            f.hold_s = rng.uniform(0.2, 3.0)
        elif name == "write_fault":
            f.hold_s = rng.uniform(0.2, 2.0)
        out.append(f)
    return sorted(out, key=lambda f: f.at_s)


class Injector:
    """Fires a trial's faults at their times (a thread); window faults end by themselves,
    and :meth:`stop` ends any still on (the plan restored, the write fault lifted)."""

    def __init__(self, faults: list[Fault], server: FakeServer | None, base: dict[str, Any] | None, control: Path,
                 driver: Callable[[], subprocess.Popen[bytes] | None], rng: random.Random,
                 kill_node: Callable[[int], int] | None = None):  # fmt: skip
        self.faults, self.server, self.base, self.control, self.driver, self.rng = faults, server, base, control, driver, rng
        self.kill_node = kill_node
        self.windows: list[Fault] = []
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()

    def _plan(self) -> None:
        if self.server is not None and self.base is not None:
            top = self.windows[-1] if self.windows else None
            extra = {"retry_after": 1} if top is not None and top.status == 429 else {"hang_s": 120} if top is not None and top.status == "hang" else {}
            self.server.set_plan(self.base if top is None else fault_plan(self.base, top.status, **extra))

    def _loop(self) -> None:
        t0 = time.monotonic()
        events: list[tuple[float, int, Fault, bool]] = []
        for i, f in enumerate(self.faults):
            events.append((f.at_s, i, f, True))
            if f.hold_s and f.name not in ("server_restart",):
                events.append((f.at_s + f.hold_s, i, f, False))
        for at, _, f, begin in sorted(events, key=lambda e: (e[0], e[1])):
            if self.stopped.wait(max(0.0, at - (time.monotonic() - t0))):
                return
            try:
                self._fire(f) if begin else self._end(f)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is reported, not raised
                f.note = f"{type(exc).__name__}: {exc}"[:200]

    def _fire(self, f: Fault) -> None:
        proc = self.driver()
        if f.name == "driver_kill":
            f.fired = proc is not None and proc.poll() is None and _kill(proc.pid)
        elif f.name == "worker_kill":
            pids = model_worker_pids()
            f.fired = bool(pids) and _kill(self.rng.choice(pids))
        elif f.name == "node_kill":  # the raylet of worker node 1 or 2 (of a head and 2 worker nodes)
            node = self.rng.choice([1, 2])
            f.fired, f.status = self.kill_node is not None and bool(self.kill_node(node)), f"node {node}"
        elif f.name == "llama_kill":
            pids = llama_pids(proc.pid) if proc is not None and proc.poll() is None else []
            f.fired = bool(pids) and _kill(pids[0])
        elif f.name == "server_restart":
            assert self.server is not None
            self.server.kill()
            f.fired = True
            time.sleep(f.hold_s)
            self.server.start()
        elif f.name == "write_fault":
            self.control.touch()
            f.fired = True
        else:
            self.windows.append(f)
            self._plan()
            f.fired = True

    def _end(self, f: Fault) -> None:
        if f.name == "write_fault":
            self.control.unlink(missing_ok=True)
        elif f in self.windows:
            self.windows.remove(f)
            self._plan()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        self.control.unlink(missing_ok=True)
        if self.windows:
            self.windows.clear()
            self._plan()


# ---- one run (a driver, resumed as needed) -------------------------------------------------
@dataclass
class Outcome:
    run_dir: Path
    attempts: list[int] = field(default_factory=list)  # exit code of each driver
    wall_s: float = 0.0
    first_row_s: float | None = None  # seconds from the start to the first journaled row
    last_row_s: float | None = None  # ... to the last time the journal grew
    capped: bool = False
    servers: set[int] = field(default_factory=set)  # llama.cpp servers the drivers started
    leaked: list[int] = field(default_factory=list)  # ... still running 15 s after the trial


def _journal_size(run_dir: Path) -> int:
    return sum((run_dir / f).stat().st_size for f in ("predictions.jsonl", "failed.jsonl") if (run_dir / f).exists())


def run_until_complete(args: list[str], tdir: Path, s: Settings, env: dict[str, str],
                       injector_for: Callable[[Callable[[], Any]], Injector | None]) -> Outcome:  # fmt: skip
    """Start the driver; resume it (``run.resume``) whenever it dies or ends incomplete,
    until it exits 0, ``s.max_attempts`` drivers ran, or ``s.cap_s`` passed."""
    run_dir = tdir / "run"
    out = Outcome(run_dir)
    current: dict[str, subprocess.Popen[bytes] | None] = {"proc": None}
    injector = injector_for(lambda: current["proc"])
    t0 = time.monotonic()
    try:
        while len(out.attempts) < s.max_attempts:
            where = f"run.resume={run_dir}" if (run_dir / "config.yaml").exists() else f"run.dir={run_dir}"
            with open(tdir / f"driver-{len(out.attempts)}.log", "wb") as log:
                proc = subprocess.Popen([sys.executable, "-m", "evalkit", *args, where], cwd=REPO_ROOT, env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            current["proc"] = proc
            size, polls = _journal_size(run_dir), 0
            while proc.poll() is None:
                polls += 1
                if polls % 20 == 1:
                    out.servers.update(llama_pids(proc.pid))
                grown, size = _journal_size(run_dir) > size, _journal_size(run_dir)
                if grown:
                    out.last_row_s = time.monotonic() - t0
                if grown and out.first_row_s is None:
                    out.first_row_s = out.last_row_s
                    if injector is not None:
                        injector.start()
                if time.monotonic() - t0 > s.cap_s:
                    out.capped = True
                    _kill(proc.pid)
                time.sleep(0.05)
            out.attempts.append(proc.returncode)
            _reap(proc)
            if out.capped or proc.returncode == 0:  # complete (faults still to come are missed)
                break
    finally:
        out.wall_s = time.monotonic() - t0
        if injector is not None:
            injector.stop()
        out.leaked = _outlived(out.servers)
    return out


def _outlived(pids: set[int], grace_s: float = 15.0) -> list[int]:
    """The processes of ``pids`` still running ``grace_s`` after their drivers ended (then
    SIGKILLed): an embedded server that outlived the process that started it."""
    import psutil

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + grace_s
    alive = [p for p in pids if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [p for p in alive if running(p)]
    for p in alive:
        _kill(p)
    return alive


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """What a killed driver left in its process group (its scoring pool) is killed too,
    so that trials do not pile up processes on a shared machine."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---- what a finished run holds -----------------------------------------------------------------
def run_record(run_dir: Path, tracking_uri: str) -> dict[str, Any]:
    from evalkit.untrusted import read_tolerant

    def rows(name: str) -> list[dict[str, Any]]:
        path = run_dir / name
        return read_tolerant(path).objects if path.exists() else []

    preds = rows("predictions.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    return {
        "units": Counter((r.get("sample_id"), r.get("epoch")) for r in preds),
        "predictions": {(r.get("sample_id"), r.get("epoch")): (r.get("output"), r.get("scores")) for r in preds},
        "failed": len(rows("failed.jsonl")),
        "summary": {k: summary.get(k) for k in ("status", "n_samples", "n_scored", "n_failed", "n_scored_rows", "n_failed_rows")},
        "traces": traces_by_key(tracking_uri),
    }


def traces_by_key(tracking_uri: str) -> dict[str, Any]:
    """{"runs": MLflow runs in the store, "keys": Counter of the traces' evalkit.key tags}."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    mlflow.set_tracking_uri(tracking_uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps) if exps else []
    keys: Counter = Counter()
    for exp in exps:
        for t in mlflow.search_traces(locations=[exp], return_type="list", max_results=None, include_spans=False):
            keys[t.info.tags.get("evalkit.key")] += 1
    return {"runs": len(runs), "keys": keys}


def verdict(got: dict[str, Any], ref: dict[str, Any], out: Outcome, s: Settings) -> list[str]:
    """What differs from the undisturbed run (empty: the trial passes)."""
    bad = []
    if out.leaked:
        bad.append(f"llama.cpp server(s) {out.leaked} outlived their driver")
    if out.capped:
        bad.append(f"wall time over the cap ({s.cap_s:.0f} s)")
    if out.attempts and out.attempts[-1] != 0:
        bad.append(f"last driver exit {out.attempts[-1]} after {len(out.attempts)} drivers")
    twice = sorted(k for k, n in got["units"].items() if n > 1)
    lost = sorted(set(ref["units"]) - set(got["units"]))
    if twice:
        bad.append(f"journaled twice: {twice[:3]}")
    if lost:
        bad.append(f"lost: {lost[:3]}")
    differ = sorted(k for k in ref["predictions"] if k in got["predictions"] and got["predictions"][k] != ref["predictions"][k])
    if differ:
        bad.append(f"predictions differ: {differ[:3]}")
    if got["failed"]:
        bad.append(f"{got['failed']} rows in failed.jsonl")
    if got["summary"] != ref["summary"] or got["summary"]["status"] != "complete":
        bad.append(f"summary {got['summary']}")
    tr, want = got["traces"], ref["traces"]
    if tr["runs"] != 1 or tr["keys"] != want["keys"] or set(tr["keys"].values()) != {1}:
        extra = {k: n for k, n in tr["keys"].items() if n != 1 or k not in want["keys"]}
        missing = sorted(set(want["keys"]) - set(tr["keys"]))
        bad.append(f"MLflow: {tr['runs']} runs, {sum(tr['keys'].values())} traces (not one per unit: {extra or ''} missing {missing[:3]})")
    return bad


# ---- trials ------------------------------------------------------------------------------------------
class Chaos:
    def __init__(self, root: Path, s: Settings, base_seed: int):
        import ray

        self.root, self.s = root, s
        ray.init(num_cpus=4, include_dashboard=False, object_store_memory=256 * 2**20, log_to_driver=False)
        self.ray_address = ray.get_runtime_context().gcs_address
        self.server = FakeServer(root)
        self.server.plan = base_plan(base_seed, s)
        self.server.start()
        self.refs: dict[str, tuple[dict[str, Any], float]] = {}

    def common(self, tdir: Path, ray_address: str) -> list[str]:
        return [f"runner.address={ray_address}", "run.cache=false", "run.progress=false", "tracking=mlflow",
                f"tracking.tracking_uri=sqlite:///{tdir}/mlflow.db", f"run.output_root={tdir}/out"]  # fmt: skip

    def args(self, kind: str, tdir: Path, cluster: Any = None) -> list[str]:
        own = self.s.embedded_args() if kind == "embedded" else self.s.fake_args(self.server.api_base)
        if cluster is not None:
            return [*own, "runner=cluster", *self.common(tdir, cluster.address)]
        return [*own, *self.common(tdir, self.ray_address)]

    def reference(self, kind: str) -> tuple[dict[str, Any], float]:
        """The undisturbed run of ``kind`` and its span (first row to the last, seconds)."""
        if kind not in self.refs:
            tdir = self.root / f"undisturbed-{kind}"
            tdir.mkdir()
            out = run_until_complete(self.args(kind, tdir), tdir, self.s, dict(os.environ), lambda _: None)
            rec = run_record(out.run_dir, f"sqlite:///{tdir}/mlflow.db")
            if out.attempts != [0] or rec["summary"]["status"] != "complete" or rec["failed"]:
                raise SystemExit(f"the undisturbed {kind} run did not complete: {out.attempts} {rec['summary']}; see {tdir}")
            span = (out.last_row_s or 0.0) - (out.first_row_s or 0.0)
            print(f"undisturbed {kind} run: {out.wall_s:.1f} s ({span:.1f} s from the first row to the last), "
                  f"{len(rec['units'])} units, {len(rec['traces']['keys'])} traces", flush=True)  # fmt: skip
            self.refs[kind] = (rec, span)
        return self.refs[kind]

    def trial(self, seed: int, kind: str) -> dict[str, Any]:
        """One trial; a ``cluster`` trial runs on a local cluster of its own (a head and 2
        worker nodes, ``tests/support/local_cluster.py``), compared with the undisturbed
        ``fake`` run (the same samples, plan and settings)."""
        ref, span = self.reference("fake" if kind == "cluster" else kind)
        rng = random.Random(seed)
        tdir = self.root / f"trial-{seed}"
        tdir.mkdir()
        control = tdir / "write-fault.on"
        faults = draw_faults(rng, EMBEDDED_FAULTS if kind == "embedded" else CLUSTER_FAULTS if kind == "cluster" else FAKE_FAULTS,
                             1.2 * span, self.s)  # fmt: skip
        cluster = None
        if kind == "cluster":
            from tests.support.local_cluster import LocalCluster

            faults = sorted([Fault("node_kill", rng.uniform(0.0, 1.2 * span)), *faults[:2]], key=lambda f: f.at_s)
            cluster = LocalCluster(worker_nodes=2)
            cluster.start()
        env = dict(cluster.env if cluster is not None else os.environ)
        if any(f.name == "write_fault" for f in faults):
            env.update({"PYTHONPATH": os.pathsep.join(filter(None, [str(CHAOS_SITE), env.get("PYTHONPATH")])),
                        WRITE_FAULT_ENV: str(control)})  # fmt: skip
        server = None if kind == "embedded" else self.server
        if server is not None:
            server.set_plan(server.plan)  # a fresh log; the plan of this script's seed
        try:
            out = run_until_complete(
                self.args(kind, tdir, cluster), tdir, self.s, env,
                lambda driver: Injector(faults, server, server.plan if server else None, control, driver, rng,
                                        cluster.kill_raylet if cluster is not None else None),
            )  # fmt: skip
        finally:
            if cluster is not None:
                cluster.remove()
        got = run_record(out.run_dir, f"sqlite:///{tdir}/mlflow.db")
        problems = verdict(got, ref, out, self.s)
        return {"seed": seed, "kind": kind, "faults": faults, "outcome": out, "problems": problems, "dir": tdir}


def trials(chaos: Chaos, a: argparse.Namespace, s: Settings, flags: str) -> list[dict[str, Any]]:
    """Run the trials, one line each; a passing trial's folder is removed, a failing one kept."""
    results = []
    for seed in range(a.seed, a.seed + a.trials):
        kind = ("embedded" if a.embedded_every and seed % a.embedded_every == a.embedded_every - 1
                else "cluster" if a.cluster_every and seed % a.cluster_every == 0 else "fake")  # fmt: skip
        s.cap_s = a.cap_s or round((300.0 if kind == "fake" else 600.0) * s.slowness)
        r = chaos.trial(seed, kind)
        results.append(r)
        o = r["outcome"]
        ok = not r["problems"]
        print(f"{seed:>5}  {kind:<8}  {', '.join(f.label() for f in r['faults']):<70}  drivers {len(o.attempts)} "
              f"{o.attempts}  {o.wall_s:6.1f} s  {'identical' if ok else 'FAILED: ' + '; '.join(r['problems'])}", flush=True)  # fmt: skip
        if ok:
            shutil.rmtree(r["dir"], ignore_errors=True)
        else:
            print(f"       kept {r['dir']}; replay: python perf/chaos.py --seed {seed} --trials 1{flags}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--seed", type=int, default=0, help="trial i has seed SEED+i (its faults and their times)")
    p.add_argument("--embedded-every", type=int, default=10,
                   help="a seed divisible by this is an embedded-model trial (llama_kill); 0: none")
    p.add_argument("--cluster-every", type=int, default=0,
                   help="a seed divisible by this (and not embedded) is a cluster trial (node_kill); 0: none")
    p.add_argument("--quick", action="store_true", help="one epoch, shorter latencies (the test's setting)")
    p.add_argument("--slowness", type=float, default=None,
                   help="scale the timeouts by this instead of the host's measured slowness (1: the idle host's limits)")
    p.add_argument("--keep-dir", type=Path, default=None, help="where trials run (default: a new temporary folder)")
    p.add_argument("--cap-s", type=float, default=None, help="a trial's wall-time cap (default 300 s; embedded and cluster 600 s)")
    p.add_argument("--concurrency", type=int, default=Settings.concurrency,
                   help="backend.concurrency of the fake trials (issue 34 asks 16 and 64: every unit of a trial in flight at once)")
    a = p.parse_args(argv)
    s = Settings()
    s.concurrency = a.concurrency
    if a.quick:
        s.repeats, s.median_s, s.cap_latency_s = 1, 0.4, 1.5
    s.calibrate(a.slowness if a.slowness is not None else slowness(tries=5))
    root = a.keep_dir or Path(tempfile.mkdtemp(prefix="evalkit-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    flags = f"{' --quick' if a.quick else ''} --embedded-every {a.embedded_every} --cluster-every {a.cluster_every} --concurrency {a.concurrency}"
    print(f"chaos: {a.trials} trials from seed {a.seed} in {root}; fake trials {s.repeats} epoch(s) × 10 samples, "
          f"concurrency {s.concurrency}, {s.workers} workers, lognormal latency median {s.median_s} s σ {s.sigma}, "
          f"timeout {s.timeout_s} s, retry budget {s.retry_budget_s} s (the idle host's times slowness {s.slowness:.1f}, "
          f"load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
    t0 = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below stops the server and Ray
    chaos = Chaos(root, s, a.seed)
    try:
        results = trials(chaos, a, s, flags)
    finally:
        import ray

        chaos.server.kill()
        ray.shutdown()
    n_ok = sum(not r["problems"] for r in results)
    fired = Counter(f.name for r in results for f in r["faults"] if f.fired)
    missed = Counter(f.name for r in results for f in r["faults"] if not f.fired)
    walls = sorted(r["outcome"].wall_s for r in results)
    print(f"faults fired: {dict(sorted(fired.items()))}; missed (the run had ended, or nothing to kill): {dict(sorted(missed.items()))}")
    print(f"drivers per trial: {dict(sorted(Counter(len(r['outcome'].attempts) for r in results).items()))}; trial wall time: "
          f"median {walls[(len(walls) - 1) // 2]:.1f} s, max {walls[-1]:.1f} s; all trials {time.monotonic() - t0:.0f} s")  # fmt: skip
    print(f"{n_ok}/{len(results)} identical")
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
