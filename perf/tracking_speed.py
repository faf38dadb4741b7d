"""Tracking speed: seconds of MLflow tracking per 1,000 samples of a full offline ACEBench
run, beside MLflow's own cheapest way to write the same traces (prints figures).

    .venv/bin/python perf/tracking_speed.py [--data ../shared/data] [--out DIR] [--context 300] [--limit N]
                                            [--max-traces N]

1. **evalkit**: ``model=reference benchmark=acebench benchmark.language=all`` (2,040 samples,
   offline) with ``tracking=mlflow`` into a fresh SQLite store (created and migrated before
   the clock starts). Timed: every call the run makes to its observer — ``run_started``
   (the store check), ``run_finished`` (the MLflow run, params,
   metrics, dataset, tables, artifacts, one trace per sample, the store's trace count).
2. **MLflow's floor**, in the same store right after: the same 2,040 traces (built by
   evalkit's trace builder, not timed) written the cheapest way MLflow offers — each trace
   with its assessments in one ``TracingClient.start_trace(TraceInfo)`` (one transaction:
   trace, tags, metadata, assessments) and the spans of 200 traces per ``log_spans`` call.
   Nothing else. The ratio evalkit / floor is the figure to watch (target <= 1.2).
3. For context, on the first ``--context`` traces: the spans written trace by trace
   (``start_trace`` + ``log_spans`` each), and one call at a time (``start_trace`` without
   assessments, ``log_spans``, then one ``log_assessment`` per score: the ``log_feedback``
   path).

SQLite's cost is mostly its commits, so the figures move with the disk and with other load
on the machine (the load average is printed); the ratio is measured under the same load.
4. An extrapolation to 100,000 samples: the trace seconds per trace × the traces logged
   (all of them, or ``--max-traces``), plus the rest of the tracking (params, metrics, the
   dataset, tables, files) per sample × 100,000 — both assumed linear, which the store's
   commits and the tables roughly are; a straight line from one size, not a measurement.

``--max-traces N`` runs with ``tracking.max_traces=N`` (a seeded sample of N traces).
Not a test: nothing is asserted beyond the trace counts.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
from pathlib import Path

from evalkit.compose import compose, resolve
from evalkit.engine.plan import prepare
from evalkit.engine.run import run_evaluation
from evalkit.specs import build
from evalkit.tracking.mlflow_tracking import MlflowObserver, client, trace_client
from evalkit.tracking.samples import outcomes
from evalkit.tracking.traces import build_trace

REPO = Path(__file__).resolve().parents[1]
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


def per_1000(seconds: float, n: int) -> str:
    return f"{seconds:.2f} s ({1000 * seconds / n:.2f} s per 1,000)"


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


def write_per_trace(tracer, exp_id: str, built: list) -> float:
    t0 = time.perf_counter()
    for info, spans in built:
        tracer.start_trace(info)
        tracer.log_spans(exp_id, spans)
    return time.perf_counter() - t0


def write_one_call_at_a_time(tracer, exp_id: str, built: list) -> float:
    t0 = time.perf_counter()
    for info, spans in built:
        feedbacks, info.assessments = info.assessments, []
        tracer.start_trace(info)
        tracer.log_spans(exp_id, spans)
        for fb in feedbacks:
            fb.assessment_id = None
            tracer.log_assessment(info.trace_id, fb)
    return time.perf_counter() - t0


def count(tracer, exp_id: str, run_id: str) -> int:
    return len(MlflowObserver.logged_traces(tracer, exp_id, run_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=None, help="output root (default: a temporary directory)")
    parser.add_argument("--context", type=int, default=300, help="traces for the per-trace and one-call-at-a-time figures")
    parser.add_argument("--limit", type=int, default=None, help="run.limit: the first N samples only (a quick check)")
    parser.add_argument("--max-traces", type=int, default=None, help="tracking.max_traces: traces for a seeded sample of N")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="evalkit-tracking-speed-"))
    overrides = ["model=reference", "benchmark=acebench", "benchmark.language=all", f"benchmark.data_dir={args.data / 'acebench'}",
                 f"run.output_root={out}", "tracking=mlflow", "run.progress=false"]  # fmt: skip
    if args.limit:
        overrides.append(f"run.limit={args.limit}")
    _, cfg = resolve(compose(overrides))
    specs = build(cfg)
    base = MlflowObserver.from_spec(specs.tracking)
    mlflow_client = client(base.uri)  # the store exists (created, migrated) before the clock starts
    observer = TimedObserver(base.uri, base.experiment, base.artifact_root, max_traces=args.max_traces, seed=cfg.run.seed)
    observer.seconds = {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; store {base.uri}")
    t0 = time.perf_counter()
    result = run_evaluation(specs, observer)
    wall = time.perf_counter() - t0
    n = result.summary["n_samples"]
    tracked = sum(v for k, v in observer.seconds.items() if k != "of which traces")
    print(f"evalkit run: {n} samples, {result.summary['status']}, run wall {result.summary['wall_s']:.1f} s, command {wall:.1f} s")
    print("evalkit tracking: " + per_1000(tracked, n) + "; " + ", ".join(f"{k} {v:.2f} s" for k, v in observer.seconds.items()))

    tracer = trace_client(base.uri)
    exp_id = mlflow_client.get_experiment_by_name(base.experiment).experiment_id
    n_traces = min(n, args.max_traces or n)
    assert count(tracer, exp_id, json.loads((result.run_dir / "tracking.json").read_text())["mlflow_run_id"]) == n_traces
    per_trace = observer.seconds.get("of which traces", 0.0) / n_traces
    rest = (tracked - observer.seconds.get("of which traces", 0.0)) / n
    print(f"per trace {1000 * per_trace:.1f} ms ({n_traces} traces); the rest of the tracking {1000 * rest:.2f} ms per sample")
    for bound in (None, 1000, 10000):
        total = 100_000 * rest + min(100_000, bound or 100_000) * per_trace
        print(f"100,000 samples, {'all traces' if bound is None else f'max_traces={bound}'}: about {total:.0f} s "
              f"({total / 60:.1f} min), a straight line from {n} samples")  # fmt: skip
    outs = outcomes(result.run_dir, result.typed, [u.request for u in prepare(specs).units])
    start_s = time.time()

    def built_for(label: str, items: list) -> tuple[str, list]:
        run_id = mlflow_client.create_run(exp_id, tags={"mlflow.runName": f"floor: {label}", "evalkit.kind": "benchmark"}).info.run_id
        return run_id, [build_trace(o, result.run_dir, run_id, exp_id, result.typed, start_s) for o in items]

    floor_run, built = built_for("start_trace with assessments, log_spans per 200", outs)
    floor = write_floor(tracer, exp_id, built)
    assert count(tracer, exp_id, floor_run) == n
    print("MLflow floor (start_trace with its assessments, spans of 200 traces per log_spans): " + per_1000(floor, n))
    print(f"ratio evalkit / floor: {tracked / floor:.2f}")

    k = min(args.context, n)
    run_id, built = built_for("per trace", outs[:k])
    print(f"context, {k} traces: spans trace by trace: " + per_1000(write_per_trace(tracer, exp_id, built), k))
    run_id, built = built_for("one call at a time", outs[:k])
    seconds = write_one_call_at_a_time(tracer, exp_id, copy.deepcopy(built))
    n_feedback = sum(len(info.assessments) for info, _ in built)
    print(f"context, {k} traces ({n_feedback} assessments): one call at a time: " + per_1000(seconds, k))
    assert count(tracer, exp_id, run_id) == k
    print(f"store kept in {out}")


if __name__ == "__main__":  # the scorer's worker processes import this module again
    main()
