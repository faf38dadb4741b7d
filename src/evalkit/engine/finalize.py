"""Stage 5 of a run, *finalize*: read the journal back, aggregate, write ``summary.json``,
``report.md`` and the plots, and tell the observer. Scoring reads only the journal, so a
resumed run and an uninterrupted one give the same metrics. The headline metrics are
withheld (``partial_*`` instead) when any selected sample has no scored prediction.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path
import itertools
from typing import Any, Callable, Sequence

from evalkit import __version__, secrets
from evalkit.benchmarks.task.agreement import invalid_verdicts, panel_agreement
from evalkit.engine.budget import BUDGET_EXCEEDED, journal_spend
from evalkit.engine import sequential
from evalkit.engine.phases import Phases
from evalkit.engine.plan import RunPlan, data_fingerprint
from evalkit.engine.records import reasoning_rule
from evalkit.engine.rundir import FAILED, PREDICTIONS, SUMMARY, RunState
from evalkit.errors import counted
from evalkit.images import EXTENSIONS, media_type_of
from evalkit.journal import PackedRows, packed_summary_view, read_failures, read_journal
from evalkit.jsonl import write_unit_file
from evalkit.report.figures import aggregation, category_counts, epoch_mean, plan_figures, worst_case_bounds
from evalkit.report.summary import build_summary, interval_methods, spend_fields, write_report
from evalkit.summary import EngineFigures, Summary, write_summary
from evalkit.tracking.base import Observer, RunInfo
from evalkit.types import sha256_hex
from evalkit.untrusted import sha256_file

#: the largest source file of evalkit hashed into :func:`code_version` (bytes)
MAX_SOURCE_BYTES = 16 * 2**20

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")  # what the run is doing now, on the console (__main__)


def store_images(run_dir: Path, images: dict[str, Any]) -> int:
    """Write each image of the run once into ``<run_dir>/images/<sha256>.<ext>`` (an existing
    file of that name is kept; a link planted there is refused by
    :func:`evalkit.jsonl.write_unit_file`); traces, ``report.md`` and readers of the run find
    them there by digest. ``images``: ``{sha256: bytes, or a call giving them}`` (read one at
    a time, each only when its file is not there yet). Returns the number written."""
    written = 0
    folder = Path(run_dir) / "images"
    for digest, data in images.items():
        if any((folder / f"{digest}.{ext}").is_file() for ext in EXTENSIONS.values()):
            continue
        data = data() if callable(data) else data
        write_unit_file(Path(run_dir), "images", f"{digest}.{EXTENSIONS.get(media_type_of(data), 'bin')}", data)
        written += 1
    return written


def code_version() -> str:
    """``<version>+<sha256 of evalkit's sources, 12 hex>``: identifies the code that scored."""
    root = Path(__file__).resolve().parents[1]
    digest = sha256_hex(
        "".join(f"{p.relative_to(root)}\0{sha256_file(p, MAX_SOURCE_BYTES, root=root)}\n" for p in sorted(root.rglob("*.py")))
    )
    return f"{__version__}+{digest[:12]}"


def summarize(plan: RunPlan, state: RunState, engine: dict[str, Any] | None,
              view: Callable[[dict[str, Any]], Any] | None = packed_summary_view) -> tuple[dict[str, Any], Sequence[dict[str, Any]]]:  # fmt: skip
    """The run's summary (secrets scrubbed) and its scored records, from the journal: the
    metrics of each epoch by the benchmark's rules, averaged; intervals on them (``partial_*``
    ones when incomplete), counts per category, aggregation rules and repeat figures.
    ``wall_s`` is the interval from ``started_at`` to ``finished_at`` (milliseconds).

    The journal is read a line at a time and of each row only ``view`` is kept
    (:func:`evalkit.journal.packed_summary_view`: no model texts, packed, each row unpacked
    when read; ``None``: whole rows, the same summary), so the driver holds the scores of
    every sample and epoch, not their answers (issue 46 item 3)."""
    report, bench, samples = plan.specs.report, plan.bench, plan.samples
    hashes = plan.request_hashes()
    journal = read_journal(state.run_dir / PREDICTIONS, hashes, view=view)
    epochs = journal.epochs(samples, report.repeats)
    records = PackedRows.chained(epochs)
    failures = read_failures(state.run_dir / FAILED, [k for k in hashes if k not in journal.rows])
    missing = [key for key in plan.units.keys() if key not in journal.rows]
    metrics = epoch_mean([bench.aggregate(samples, rows) for rows in epochs])
    figs = plan_figures(bench, samples, epochs, plan.specs.run, prefix="" if not missing else "partial_")
    metrics.update(figs["repeat"])
    ci = figs["metrics_ci"]
    names = list(metrics) if not missing else [f"partial_{k}" for k in metrics]
    finished_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
    wall_s = (dt.datetime.fromisoformat(finished_at) - dt.datetime.fromisoformat(state.started_at)).total_seconds()
    summary = build_summary(
        spec=report, bench=bench, samples=samples, records=records, failures=failures, missing=missing, metrics=metrics,
        fingerprint=data_fingerprint(samples), prompt_hash=plan.prompt_hash(), code_version=code_version(),
        model_id=plan.models.model_id, started_at=state.started_at, finished_at=finished_at, wall_s=wall_s,
        figures={"metrics_ci": ci, "ci_level": report.ci_level, "seed": report.seed,
                 "metrics_not_estimable": figs["not_estimable"],
                 **({"partial_bounds": {f"partial_{k}": v for k, v in worst_case_bounds(bench, samples, epochs, missing).items()}}
                    if missing else {}),
                 **({"repeat_variance": figs["repeat_variance"]} if figs["repeat_variance"] else {}),
                 "category_counts": category_counts(bench, samples, epochs), "aggregation": aggregation(bench, names)},
    )  # fmt: skip
    summary["stale_lines"] = journal.uncounted()  # what readers without the requests skip (evalkit.journal)
    summary["endpoints"] = dict(plan.models.endpoints)
    if report.replayed_run is not None:
        summary["replayed_run"] = report.replayed_run  # the run whose answers were replayed (python -m evalkit.judge)
    agreement = panel_agreement(records, [j.name for j in report.judges], report.ci_level, report.bootstrap_resamples, report.seed)
    if agreement:
        summary["judge_agreement"] = agreement
    judged_rows = itertools.chain(records, (f for f in failures.values() if isinstance(f.get("judgements"), list)))
    invalid = invalid_verdicts(judged_rows, list(report.judge_scorers), [j.name for j in report.judges])
    if invalid:
        summary["judge_invalid"] = invalid
    if report.judge_qualification:
        summary["judge_qualification"] = report.judge_qualification
    summary.update(_spend(plan, state, records, failures))
    if engine is not None:
        summary["engine"] = engine
    if plan.images and plan.specs.models.networked and not plan.specs.execution.batch:
        # images go to Ray's model workers by reference: a count even when nothing was sent (a resume)
        summary.setdefault("engine", {}).setdefault("images_by_reference", {"put": 0, "bytes": 0})
    summary = sequential.annotate(plan, summary, state.run_dir)  # run.stop_when: the gate's record, status decided
    return secrets.scrub_obj(summary), records


def _spend(plan: RunPlan, state: RunState, records: Sequence[dict[str, Any]], failures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The summary's reasoning, token, cost and budget fields (:func:`spend_fields`)."""
    report, settings = plan.specs.report, plan.specs.benchmark
    return spend_fields(
        records=records,
        spent=journal_spend(state.run_dir),
        prices={actor: price.describe() if price is not None else None for actor, price in plan.prices.items()},
        limits={"max_cost_usd": report.max_cost_usd, "max_total_tokens": report.max_total_tokens},
        not_sent=sum(1 for f in failures.values() if f.get("error_kind") == BUDGET_EXCEEDED),
        rule=reasoning_rule(plan.bench),
        strip_prefix=settings.strip_reasoning_prefix,
    )


def interval_line(summary: Summary, resamples: int) -> str:
    """The console's line on the intervals the run computed: ``intervals (95%): exact
    binomial (Clopper–Pearson) (13 metrics)``, the methods :func:`evalkit.stats.intervals`
    chose by regime (as report.md lists them: :func:`interval_methods`); the number of
    bootstrap ``resamples`` only when a method used the bootstrap (a small run's exact
    intervals use none)."""
    methods = interval_methods(summary.metrics_ci)
    if not methods:
        return "intervals: none computed" + (" (run.bootstrap_resamples=0)" if resamples <= 0 else "")
    boot = f", from {counted(resamples, 'bootstrap resample')}" if "bootstrap" in methods else ""
    return f"intervals ({round(100 * summary.ci_level)}%): {methods}{boot}"


def finalize(plan: RunPlan, state: RunState, engine: dict[str, Any] | None, observer: Observer,
             phases: Phases | None = None) -> Summary:  # fmt: skip
    """Write ``summary.json``, the plots and ``report.md``, then call the observer's
    ``run_finished`` (a tracker's failure is its own one-line ``TrackingError``; the
    run's results are on disk by then). ``summary.json`` → ``engine.phases`` holds the
    run's phase timings (:mod:`evalkit.engine.phases`); the tracking phase is written into
    it after the observer ran. Returns the summary, typed."""
    phases = phases or Phases()
    started = time.perf_counter()
    report = plan.specs.report
    status.info("summary: %s × %s, intervals by each metric's regime; then report.md and the plots…",
                counted(len(plan.samples), "sample"), counted(report.repeats, "epoch"))  # fmt: skip
    built, records = summarize(plan, state, engine)
    run_dir = state.run_dir
    store_images(run_dir, plan.images)  # once per run, by digest: traces, rescore and compare read them there
    summary = _write_summary(run_dir, built, phases, time.perf_counter() - started)
    status.info("%s", interval_line(summary, report.bootstrap_resamples))
    try:
        plan.bench.write_plots(run_dir / "plots", summary.shown_metrics()[0], records)
    except Exception:  # noqa: BLE001 - a figure must never cost the run its summary
        log.exception("plotting failed")
    del records  # the rows' views: not held while the observer reads the journal again (tracking)
    write_report(run_dir, summary, plan.bench, generates=not plan.models.offline)
    phases.add("summary_report_s", time.perf_counter() - started)
    requests = plan.units.requests()  # the selection, in order, with each prompt (built as it is read)
    with phases.timed("tracking_s"):
        observer.run_finished(RunInfo(run_dir, state.resumed, report, requests, plan.request_hashes()), summary)
    return _write_summary(run_dir, summary, phases)


def _write_summary(run_dir: Path, summary: dict[str, Any] | Summary, phases: Phases, so_far: float = 0.0) -> Summary:
    """``summary.json`` with ``engine.phases`` as they stand (``so_far``: the summary phase
    until now, counted in this write only); the summary written, typed."""
    timings = phases.as_dict()
    if so_far:
        timings["summary_report_s"] = round(timings.get("summary_report_s", 0.0) + so_far, 4)
    if isinstance(summary, Summary):
        if summary.engine is None:
            summary.engine = EngineFigures(phases=timings)  # assigned: a field set is written
        else:
            summary.engine.phases = timings
    else:
        summary.setdefault("engine", {})["phases"] = timings
    return write_summary(run_dir / SUMMARY, summary)
