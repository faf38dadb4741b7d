"""Tracking speed: what MLflow tracking costs per sample under ``tracking.traces=sample`` (the
default) and ``tracking.traces=all``, in time and in store size (prints figures; issue 46).

    .venv/bin/python perf/tracking_speed.py [--data ../shared/data] [--out DIR] [--limit N] [--samples N]
                                            [--policies sample all] [--server] [--floor] [--max-traces N]

1. **Per policy** (``--policies``, default ``sample all``): one offline run (``model=reference``)
   with ``tracking=mlflow tracking.traces=<policy>`` into a fresh store — its own SQLite file
   (created and migrated before the clock starts), or, with ``--server``, a local
   ``mlflow server`` (SQLite backend, ``--serve-artifacts``; started once, each policy in an
   experiment of its own). The data: full offline ACEBench (``benchmark.language=all``,
   2,040 samples; ``--limit N``: the first N), or with ``--samples N`` an arith_mini task of N
   generated one-line questions (one subset). Timed: every call the run makes to its observer
   (``run_started``, ``run_finished``; of which the traces, and the record: params, metrics,
   the dataset, the tables, the run directory's files). Printed per policy: the traces
   logged and the run's ``evalkit.traces`` tag; tracking seconds and **ms per sample**;
   the whole command's wall and **tracking's share of it**; the store's growth
   (the database file, the artifact folder) and **bytes per sample**.
2. ``--floor``: MLflow's cheapest way to write every trace, in the same store right after
   the ``all`` run: the same traces (built by evalkit's trace builder, not timed), each
   trace with its assessments in one ``TracingClient.start_trace(TraceInfo)`` and the spans
   of 200 traces per ``log_spans`` call; printed with the ratio ``all`` / floor (its traces
   only).

An offline run has no network waits, so its wall is shorter than a run against a zero-latency
server's: tracking's share printed here is the larger of the two. SQLite's cost is mostly its
commits: the figures move with the disk and with other load (the load average is printed).
Not a test: nothing is asserted beyond the trace counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.mlflow_server (--server)

from evalkit.compose import compose, resolve  # noqa: E402
from evalkit.engine.plan import prepare  # noqa: E402
from evalkit.engine.run import run_evaluation  # noqa: E402
from evalkit.specs import build  # noqa: E402
from evalkit.tracking.mlflow_tracking import MlflowObserver, client, trace_client  # noqa: E402
from evalkit.tracking.samples import outcomes  # noqa: E402
from evalkit.tracking.traces import build_trace  # noqa: E402

SPAN_BATCH = 200


class TimedObserver(MlflowObserver):
    """:class:`MlflowObserver` with a clock on each hook (and on its trace logging)."""

    seconds: dict[str, float]

    def _timed(self, name: str, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def run_started(self, run):
        return self._timed("run_started", super().run_started, run)

    def run_finished(self, run, summary):
        return self._timed("run_finished", super().run_finished, run, summary)

    def _log_traces(self, *args):
        return self._timed("of which traces", super()._log_traces, *args)

    def _log_record(self, *args):
        return self._timed("of which record", super()._log_record, *args)


def size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (0 when absent)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def store_bytes(db: Path, artifacts: Path) -> tuple[int, int]:
    """(database bytes, its WAL and journal included; artifact bytes)."""
    return sum(size(Path(f"{db}{s}")) for s in ("", "-wal", "-journal")), size(artifacts)


def write_floor(tracer, exp_id: str, built: list) -> float:
    """Seconds to write ``built`` ``(TraceInfo, spans)`` pairs: start_trace each (with its
    assessments), log_spans per SPAN_BATCH traces."""
    t0 = time.perf_counter()
    for i in range(0, len(built), SPAN_BATCH):
        batch = built[i : i + SPAN_BATCH]
        for info, _ in batch:
            tracer.start_trace(info)
        tracer.log_spans(exp_id, [s for _, spans in batch for s in spans])
    return time.perf_counter() - t0


def count(tracer, exp_id: str, run_id: str, uri: str) -> int:
    return len(MlflowObserver.logged_traces(tracer, exp_id, run_id, uri))


def arith_data(path: Path, n: int) -> Path:
    """``n`` one-line arith_mini questions (``What is i + 1?``), one JSON object a line."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n")
    return path


def measure(policy: str, args: argparse.Namespace, out: Path, uri: str | None, db: Path, artifacts: Path) -> dict:
    """One run under ``policy``; prints its line and returns its figures."""
    root = out / policy
    root.mkdir(parents=True, exist_ok=True)
    if args.samples:
        bench = ["benchmark=arith_mini", f"benchmark.dataset.path={arith_data(out / 'arith.jsonl', args.samples)}",
                 "run.bootstrap_resamples=0"]  # fmt: skip
    else:
        bench = ["benchmark=acebench", "benchmark.language=all", f"benchmark.data_dir={args.data / 'acebench'}"]
    overrides = ["model=reference", *bench, f"run.output_root={root}", "tracking=mlflow", "run.progress=false",
                 f"tracking.traces={policy}", f"tracking.experiment=speed-{policy}"]  # fmt: skip
    if uri:
        overrides.append(f"tracking.tracking_uri={uri}")
    if args.limit:
        overrides.append(f"run.limit={args.limit}")
    _, cfg = resolve(compose(overrides))
    specs = build(cfg)
    base = MlflowObserver.from_spec(specs.tracking)
    if not uri:
        db, artifacts = root / "mlflow.db", root / "mlartifacts"
    mlflow_client = client(base.uri)  # the store exists (created, migrated) before the clock starts
    observer = TimedObserver(base.uri, base.experiment, base.artifact_root, traces=policy, max_traces=args.max_traces,
                             seed=cfg.run.seed, traces_per_category=base.traces_per_category)  # fmt: skip
    observer.seconds = {}
    before = store_bytes(db, artifacts)
    t0 = time.perf_counter()
    result = run_evaluation(specs, observer)
    wall = time.perf_counter() - t0
    after = store_bytes(db, artifacts)
    n = result.summary["n_samples"]
    tracked = sum(v for k, v in observer.seconds.items() if not k.startswith("of which"))
    run_id = json.loads((result.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    run = mlflow_client.get_run(run_id)
    tracer = trace_client(base.uri)
    n_traces = count(tracer, run.info.experiment_id, run_id, base.uri)
    grew = (after[0] - before[0], after[1] - before[1])
    print(f"evalkit run: {n} samples, {result.summary['status']}, policy {policy}: {n_traces} traces "
          f"(evalkit.traces = {run.data.tags.get('evalkit.traces')!r})")  # fmt: skip
    print(f"policy {policy}: tracking {tracked:.2f} s = {1000 * tracked / n:.2f} ms/sample "
          f"(" + ", ".join(f"{k} {v:.2f} s" for k, v in observer.seconds.items()) + f"); command wall {wall:.1f} s, "
          f"tracking {100 * tracked / wall:.1f} % of it; store +{sum(grew):,} B = {sum(grew) / n:,.0f} B/sample "
          f"(database +{grew[0]:,} B, artifacts +{grew[1]:,} B)")  # fmt: skip
    return {"result": result, "specs": specs, "tracer": tracer, "client": mlflow_client, "exp_id": run.info.experiment_id,
            "traces_s": observer.seconds.get("of which traces", 0.0), "n_traces": n_traces, "uri": base.uri}  # fmt: skip


def floor(m: dict) -> None:
    """MLflow's cheapest write of every trace of the ``all`` run ``m``, in its store."""
    result, tracer, exp_id = m["result"], m["tracer"], m["exp_id"]
    outs = outcomes(result.run_dir, result.typed, [u.request for u in prepare(m["specs"]).units])
    run_id = m["client"].create_run(exp_id, tags={"mlflow.runName": "floor", "evalkit.kind": "benchmark"}).info.run_id
    built = [build_trace(o, result.run_dir, run_id, exp_id, result.typed, time.time()) for o in outs]
    seconds = write_floor(tracer, exp_id, built)
    assert count(tracer, exp_id, run_id, m["uri"]) == len(outs)
    print(f"MLflow floor (start_trace with its assessments, spans of 200 traces per log_spans): {seconds:.2f} s for "
          f"{len(outs)} traces ({1000 * seconds / len(outs):.1f} ms each)")  # fmt: skip
    print(f"ratio evalkit / floor (traces of the all run): {m['traces_s'] / seconds:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=None, help="output root (default: a temporary directory)")
    parser.add_argument("--limit", type=int, default=None, help="run.limit: the first N samples only (a quick check)")
    parser.add_argument("--samples", type=int, default=None, help="an arith_mini task of N generated samples instead of ACEBench")
    parser.add_argument("--policies", nargs="+", default=["sample", "all"], choices=["sample", "all", "none"])
    parser.add_argument("--server", action="store_true", help="log to a local mlflow server (SQLite backend) started here")
    parser.add_argument("--floor", action="store_true", help="after the all run: MLflow's cheapest write of the same traces")
    parser.add_argument("--max-traces", type=int, default=None, help="tracking.max_traces: a cap on top of the policy")
    args = parser.parse_args()
    out = (args.out or Path(tempfile.mkdtemp(prefix="evalkit-tracking-speed-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; store "
          f"{'a local mlflow server (SQLite backend)' if args.server else 'SQLite, one file per policy'} under {out}")  # fmt: skip
    with ExitStack() as stack:
        uri, db, artifacts = None, out / "server" / "mlflow.db", out / "server" / "artifacts"
        if args.server:
            from tests.support.mlflow_server import mlflow_server

            db.parent.mkdir(parents=True, exist_ok=True)
            srv = stack.enter_context(mlflow_server(f"sqlite:///{db}", artifacts, db.parent, serve_artifacts=True))
            srv.wait_ready()
            uri = srv.url
        figures = {policy: measure(policy, args, out, uri, db, artifacts) for policy in args.policies}
        if args.floor and "all" in figures:
            floor(figures["all"])
    print(f"store kept in {out}")


if __name__ == "__main__":  # the scorer's worker processes import this module again
    main()
