"""Compare finished runs: a side-by-side metric table, paired statistics, and the
per-sample flips between them.

    python -m evalkit.compare RUN_A RUN_B [RUN_C ...] [--json] [--metrics-only]
        [--ci-level 0.95] [--resamples 2000] [--seed 0] [--data-dir DIR] [--tracking-uri URI]
        [--gate noninferior:MARGIN | superior | equivalent:MARGIN] [--log]
        [--request-deadline-s S] [--max-response-bytes N]

A run is a run directory, or an MLflow run id (found through the run's ``run_dir`` tag in
``--tracking-uri``, default the project's store ``outputs/mlflow.db``).

- **Comparability**: runs are comparable when they share the benchmark and the data
  fingerprint; one line names each difference that matters (prompt hash, generation
  parameters, shots, repeats, sample selection).
- **Paired statistics** (runs of one benchmark, each pair): for every metric, over the
  units scored in both runs where the metric is defined in both (its own n), Δ = B − A
  with its interval and p-value from one procedure — Tango's unconditional score test and
  the interval that inverts it for a mean of per-unit 0/1 scores (exact unconditional below
  50 units; with the discordant counts and the exact McNemar p as a labelled secondary), the
  score interval on bounded differences for graded scores and for weighted means of
  categories (stratified, valid at any n; never [0, 0], and a total loss FAILs), a t on the
  paired stratified bootstrap's standard error for a non-linear aggregate
  (:func:`evalkit.stats.paired`); "no paired samples" when there are none; Holm- and Benjamini–Hochberg-adjusted p over the pair's metrics (the
  family), the headline marked primary; for the headline, "no difference detected" or a
  difference, with the minimum detectable effect at 80 % power, and worst-case bounds of Δ
  when a run has failures. Runs with repeats pair by sample, each sample's epochs averaged.
  This needs the benchmark's data (as ``rescore`` does; ``--data-dir`` when it moved);
  without it the section says why and the rest is shown.
- **In MLflow** (``--log``): each comparison becomes an MLflow run (``evalkit.kind=comparison``)
  in the store ``--tracking-uri`` names, else the compared runs' own when a run directory may
  choose it (:func:`log_comparisons`: ``MLFLOW_TRACKING_URI``'s, or their output root's SQLite
  file; never a server a run directory names alone), named by what it compares and what
  it found (``Δ overall acebench: reference → replay −0.28 (p 0.0003, worse)``), linked to
  both, and both link back to it (tag ``evalkit.compared_in``, a description line). Before
  the first write to a tracking server, the preflight a run has (credentials and write
  permission in the experiment: :func:`~evalkit.tracking.mlflow_tracking.preflight_store`;
  a refusal is one line, exit 2). Each
  HTTP call to a tracking server ends within ``--request-deadline-s`` and reads at most
  ``--max-response-bytes`` of its answer (``tracking.request_deadline_s`` /
  ``tracking.max_response_bytes``' defaults): a server that trickles or floods is one error
  line naming the bound, exit 2.
- **Instrument**: two runs measured differently (another judge, rubric or scoring rules:
  ``summary.json`` → ``instrument``) get a note, and the headline's verdict says the
  difference is the instrument's, never "no difference detected".
- **Gate** (``--gate``, two runs BASE NEW): PASS / FAIL / INCONCLUSIVE on the headline's
  paired Δ (:func:`evalkit.stats.gate`), printed last and in ``--json`` as ``gate``; the
  exit code is 0 (PASS) / 1 (FAIL) / 3 (INCONCLUSIVE, or FUTILE: a ``run.stop_when`` run
  stopped with PASS out of reach, under the same gate). A gate on a headline a judge scores is
  refused (one line, exit 2) unless each run recorded its judges as qualified when it ran
  (``judge_qualification`` of its summary, issue 45: :func:`judge_gate_refusal`) — a run made
  with ``require: never`` on an unqualified judge included.
- **Judges' qualification**: each run's recorded qualification is shown beside its
  judge-scored numbers (under the runs, in ``--json`` as each run's ``judge_qualification``,
  and with ``--log`` in the MLflow comparison run's description).

- **Metric table**: one column per run, one row per metric of any run (the headline first).
  An incomplete run has no ``metrics`` (they are withheld); its ``partial_*`` figures are
  shown instead, in the same row as the complete runs' metric and marked ``(partial)``.
- **Flips** (runs of the same benchmark only): for every pair of runs, the sample ids
  scored in both where one run is right and the other wrong — by the benchmark's primary
  per-sample score (the benchmark's ``primary_score``, recorded in ``summary.json``): ``1`` vs ``< 1`` for 0/1 scores (ACEBench
  ``accuracy``, SOBHard ``sample_pass``), or simply the higher one for graded scores
  (KE per-item ``f1``). Samples scored in only one of the two runs (failed, or outside the
  other's selection) are counted, not flipped.

Errors (a path that is not a run directory, runs of different benchmarks when flips are
asked for) raise :class:`CompareError`; on the command line they are one line
``evalkit: error: ...`` and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from pathlib import Path
from typing import Any, Sequence

from tabulate import tabulate

from evalkit import secrets, stats
from evalkit.benchmarks import get_benchmark_class
from evalkit.engine.sequential import interval_entry
from evalkit.errors import EvalkitError, RunDirError, first_line, printable
from evalkit.engine.plan import load_unique
from evalkit.journal import Journal, damaged_journal, read_run_journal
from evalkit.untrusted import read_run_yaml
from evalkit.report.summary import qualification_text
from evalkit.rescore import Recount, check_summary, disagreement, load_benchmark, recorded_run_settings, recount, replay_gate
from evalkit.summary import Summary, read_summary
from evalkit.tracking.ledger import FILE as LEDGER_FILE
from evalkit.tracking.ledger import read_file as read_ledger_file
from evalkit.tracking.ledger import store_a_run_may_name
from evalkit.tracking.store import add_http_bound_options, use_http_bound_options



class CompareError(EvalkitError):
    """A run directory cannot be compared (not a run, unreadable summary, a summary that
    disagrees with its records, benchmarks differ)."""


class RecordsUnavailable(EvalkitError):
    """A run's figures cannot be derived from its records here: its benchmark or the
    benchmark's data cannot be loaded (``--data-dir``). Its paired statistics are then not
    computed and the metric table shows its summary's figures, marked as such."""


@dataclass
class Run:
    """One run directory as read by :func:`load_run`.

    Attributes:
        path: the run directory.
        summary: ``summary.json``, typed and validated (:class:`evalkit.summary.Summary`; a
            version-1 summary's counts read as version 2).
        journal: its ``predictions.jsonl`` as the engine counted it (:mod:`evalkit.journal`):
            ``journal.rows`` is ``{(sample_id, epoch): row}``.
        figures: its figures derived from the journal (:func:`check_run`; ``None`` before,
            or when they cannot be derived: ``unavailable`` says why).
    """

    path: Path
    summary: Summary
    journal: Journal
    figures: Recount | None = None
    unavailable: str | None = None

    @cached_property
    def rows(self) -> dict[str, dict[str, Any]]:
        """``{sample_id: row}`` of epoch 0 (the first epoch), in journal order."""
        return {sid: row for (sid, epoch), row in self.journal.rows.items() if epoch == 0}

    @property
    def benchmark(self) -> str:
        return self.summary.benchmark

    @property
    def model(self) -> str:
        return self.summary.model

    @property
    def complete(self) -> bool:
        return self.summary.complete

    def metric_values(self) -> tuple[dict[str, float], bool]:
        """``({metric name: value}, partial)``: the metrics derived from the journal
        (:func:`check_run`; ``partial`` True for an incomplete run, its failed samples left
        out); where they cannot be derived (``unavailable``), the summary's ``metrics`` of a
        complete run or ``partial_metrics`` of an incomplete one, ``partial_`` removed."""
        if self.figures is not None:
            return dict(self.figures.metrics), not self.figures.complete
        return self.summary.shown_metrics()


def load_run(path: str | Path) -> Run:
    """Read a run directory.

    Raises:
        CompareError: ``path`` is not a directory, has no ``summary.json`` or
            ``predictions.jsonl``, its ``summary.json`` is not a valid summary
            (:class:`evalkit.summary.Summary`), a journal row cannot count
            (:mod:`evalkit.journal`), or ``predictions.jsonl`` holds fewer readable
            predictions than the summary's ``n_scored_rows``.
    """
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise CompareError(f"{run_dir}: not a run directory (no such directory)")
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise CompareError(f"{run_dir}: not a run directory (no summary.json)")
    if not (run_dir / "predictions.jsonl").is_file():
        raise CompareError(f"{run_dir}: not a run directory (no predictions.jsonl)")
    typed = read_summary(summary_path, CompareError)
    try:
        journal = read_run_journal(run_dir, typed.stale_lines)
    except EvalkitError as exc:
        raise CompareError(str(exc)) from None
    damage = damaged_journal(journal.path, len(journal.rows), typed.n_scored_rows, "n_scored_rows")
    if damage:
        raise CompareError(damage)
    return Run(run_dir, typed, journal)


def check_run(run: Run, data_dir: Path | None = None) -> Recount | None:
    """Derive ``run``'s figures from its records and refuse a summary that disagrees: the
    benchmark rebuilt from ``config.yaml`` (data from ``data_dir`` when given), every
    journal score in the benchmark's range (:meth:`~evalkit.journal.Journal.check_scores`),
    the counts, metrics and bounds recomputed (:func:`evalkit.rescore.recount`) and checked
    against ``summary.json`` (:func:`evalkit.rescore.check_summary`), and a ``sequential``
    block only where ``config.yaml`` set ``run.stop_when`` (its figures are checked by
    replaying the gate, :func:`_sequential_headline`). Kept in ``run.figures``; computed
    once per run.

    Returns ``run.figures``, or ``None`` when the benchmark or its data cannot be loaded
    (``run.unavailable`` says why, one line).

    Raises:
        CompareError: a score outside the benchmark's range, or a summary field that
            disagrees with the records (one line naming the file and the field).
    """
    if run.figures is not None or run.unavailable is not None:
        return run.figures
    try:
        bench = load_benchmark(run.path, data_dir)
    except EvalkitError as exc:
        run.unavailable = first_line(exc)
        return None
    run.journal.check_scores(bench.score_bounds, CompareError)
    try:
        loaded = load_unique(bench)
    except EvalkitError as exc:
        run.unavailable = first_line(exc)
        return None
    figures = recount(bench, loaded, run.journal.rows, run.summary.failed_ids, run.summary.repeats)
    where = run.path / "summary.json"
    check_summary(run.summary, figures, where, CompareError)
    record = getattr(run.summary, "sequential", None)
    stop_when = _gate_settings(run).get("stop_when")
    if record is None and (stop_when or run.summary.status == "decided"):
        why = "config.yaml sets run.stop_when" if stop_when else "its status is decided"
        raise CompareError(f"{printable(str(where))}: {disagreement('sequential', None, 'a gate record')} ({why}); not read")
    if record is not None and not stop_when:
        raise CompareError(f"{printable(str(where))}: sequential: a gate record, but the run's config.yaml sets no "
                           "run.stop_when; the summary is not its run's record, not read")  # fmt: skip
    if record is not None and not isinstance(record, dict):
        raise CompareError(f"{printable(str(where))}: sequential: a {type(record).__name__}, not a gate record; not read")
    run.figures = figures
    return figures


def _gate_settings(run: Run) -> dict[str, Any]:
    """The ``run`` settings of ``run``'s ``config.yaml`` as written (``{}`` when it has none)."""
    try:
        cfg = read_run_yaml(run.path / "config.yaml")
    except EvalkitError:
        return {}
    raw = cfg.get("run") if isinstance(cfg, dict) else None
    return raw if isinstance(raw, dict) else {}


def primary_score_key(runs: Sequence[Run]) -> str:
    """The per-sample score that decides flips for these runs (same benchmark): the
    benchmark's declared ``primary_score`` (recorded in ``summary.json``; for a run written
    before it was, the registered benchmark's); else the headline if it is a per-sample
    key, else ``accuracy``, else the only score key of the rows.

    Raises:
        CompareError: no score key can be chosen (rows without ``scores``).
    """
    bench = runs[0].benchmark
    declared = runs[0].summary.primary_score
    if isinstance(declared, str) and declared:
        return declared
    try:
        return get_benchmark_class(bench).primary_score
    except KeyError:
        pass
    keys: set[str] = set()
    for run in runs:
        for row in run.rows.values():
            if isinstance(row.get("scores"), dict):
                keys.update(row["scores"])
    headline = runs[0].summary.headline
    for candidate in (headline, "accuracy"):
        if candidate in keys:
            return str(candidate)
    if len(keys) == 1:
        return next(iter(keys))
    raise CompareError(f"benchmark {bench}: cannot tell which per-sample score decides flips (score keys: {sorted(keys)})")


def _score(row: dict[str, Any] | None, key: str) -> float | None:
    scores = (row or {}).get("scores")
    value = scores.get(key) if isinstance(scores, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _better(x: float, y: float) -> bool:
    """Whether score ``x`` beats ``y``: right (1) vs wrong for 0/1 scores, higher otherwise."""
    if x in (0.0, 1.0) and y in (0.0, 1.0):
        return x == 1.0 and y != 1.0
    return x > y


def flips(a: Run, b: Run, key: str | None = None) -> dict[str, Any]:
    """Per-sample flips between two runs of the same benchmark.

    Returns ``{"a": str(a.path), "b": str(b.path), "score": key, "n_common": int,
    "only_in_a": [ids], "only_in_b": [ids], "unscored": [ids],
    "a_better": [{"sample_id", "subset", "a", "b"}], "b_better": [...]}`` — ``a_better``
    are samples ``a`` got right and ``b`` wrong (or ``a`` scored higher), ids in ``a``'s
    journal order. ``unscored`` are common ids without a numeric ``key`` score in one run.

    Raises:
        CompareError: the runs are of different benchmarks.
    """
    if a.benchmark != b.benchmark:
        raise CompareError(f"flips need runs of one benchmark: {a.path} is {a.benchmark}, {b.path} is {b.benchmark}")
    key = key or primary_score_key([a, b])
    common = [sid for sid in a.rows if sid in b.rows]
    a_better: list[dict[str, Any]] = []
    b_better: list[dict[str, Any]] = []
    unscored: list[str] = []
    for sid in common:
        sa, sb = _score(a.rows[sid], key), _score(b.rows[sid], key)
        if sa is None or sb is None:
            unscored.append(sid)
            continue
        entry = {"sample_id": sid, "subset": a.rows[sid].get("subset"), "a": sa, "b": sb}
        rules = (a.rows[sid].get("scoring_rule"), b.rows[sid].get("scoring_rule"))
        if rules[0] != rules[1]:  # the scoring rule that decided each verdict (benchmark.scoring)
            entry["why"] = f"{rules[0]} → {rules[1]}"
        if _better(sa, sb):
            a_better.append(entry)
        elif _better(sb, sa):
            b_better.append(entry)
    return {
        "a": str(a.path),
        "b": str(b.path),
        "score": key,
        "n_common": len(common),
        "only_in_a": [sid for sid in a.rows if sid not in b.rows],
        "only_in_b": [sid for sid in b.rows if sid not in a.rows],
        "unscored": unscored,
        "a_better": a_better,
        "b_better": b_better,
    }


#: summary fields whose difference makes two runs of one benchmark less comparable
_SETTINGS = (("prompt_hash", "prompt hash"), ("generation_params", "generation parameters"), ("shots", "shots"),
             ("repeats", "repeats"), ("mode", "API mode"), ("code_version", "code versions (the scorer may differ)"))  # fmt: skip


def comparability(a: Run, b: Run) -> list[str]:
    """One line per difference that matters between two runs of one benchmark (empty when
    they share the data fingerprint and every setting in :data:`_SETTINGS`)."""
    notes = []
    if a.summary.data_fingerprint != b.summary.data_fingerprint:
        notes.append("the data fingerprints differ: other samples were selected (or the data changed); "
                     "only samples scored in both are paired")  # fmt: skip
    for key, label in _SETTINGS:
        va, vb = getattr(a.summary, key), getattr(b.summary, key)  # fields of Summary (repeats defaults to 1)
        if va != vb:
            notes.append(f"{label} differ: {va!r} vs {vb!r}")
    changed = instrument_change(a, b)
    if changed:
        notes.append(f"instrument differs ({changed}): the runs were measured differently, so a difference "
                     "between them is the instrument's change, not a model difference")  # fmt: skip
    return notes


def instrument_change(a: Run, b: Run) -> str:
    """``"scoring: 'official' vs 'evalscope'"``: each key of the runs' ``instrument``
    (:func:`evalkit.report.summary.instrument`) that both record and that differs; ``""``
    when none does (a run written before a key was recorded is not called different)."""
    ia, ib = a.summary.instrument, b.summary.instrument
    out = []
    for k in sorted(set(ia) & set(ib)):
        if ia[k] == ib[k]:
            continue
        if k == "judge" and isinstance(ia[k], dict) and isinstance(ib[k], dict):
            out += _judge_change(ia[k], ib[k])
        else:
            out.append(f"{k}: {ia[k]!r} vs {ib[k]!r}")
    return "; ".join(out)


def _judge_change(ja: dict[str, Any], jb: dict[str, Any]) -> list[str]:
    """``["judge: judge_a (openai/gpt-4o) vs judge_b (anthropic/claude-3)", "judge rubric:
    sha256:… vs sha256:…"]``: how two runs' judges (``instrument["judge"]``,
    :func:`evalkit.report.summary.judge_identity`) differ."""

    def who(j: dict[str, Any]) -> str:
        judges = j.get("judges") if isinstance(j.get("judges"), list) else []
        return ", ".join(f"{x.get('name')} ({x.get('model')})" if isinstance(x, dict) else str(x) for x in judges) or "none"

    out = [f"judge: {printable(who(ja))} vs {printable(who(jb))}"] if ja.get("judges") != jb.get("judges") else []
    if ja.get("rubric") != jb.get("rubric"):
        out.append(f"judge rubric: {printable(str(ja.get('rubric')))} vs {printable(str(jb.get('rubric')))}")
    return out or [f"judge: {ja!r} vs {jb!r}"]


def run_plan(run: Run, data_dir: Path | None = None) -> Any:
    """The run's :class:`~evalkit.stats.StatPlan`: its benchmark rebuilt from ``config.yaml``
    (data from ``data_dir`` when given), its journal by epoch (:func:`check_run`).

    Raises:
        RecordsUnavailable: the benchmark or its data cannot be loaded (one line).
        CompareError: its summary disagrees with its records (:func:`check_run`).
    """
    figures = check_run(run, data_dir)
    if figures is None:
        raise RecordsUnavailable(run.unavailable or "the benchmark cannot be loaded")
    return figures.bench.stat_plan(figures.samples, figures.epochs)


def paired_stats(a: Run, b: Run, level: float = 0.95, resamples: int = 2000, seed: int = 0,
                 data_dir: Path | None = None, plans: dict[Path, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """``{"a", "b", "notes": [comparability lines], "metrics": {name: paired entry}}`` — or
    ``"error"`` instead of ``"metrics"`` when a plan cannot be built (see :func:`run_plan`)."""
    out: dict[str, Any] = {"a": str(a.path), "b": str(b.path), "notes": comparability(a, b)}
    if instrument_change(a, b):
        out["instrument_changed"] = instrument_change(a, b)
    plans = {} if plans is None else plans
    try:
        for run in (a, b):
            if run.path not in plans:
                plans[run.path] = run_plan(run, data_dir)
    except RecordsUnavailable as exc:
        out["error"] = f"paired statistics need the benchmark's data ({exc}); pass --data-dir"
        return out
    pa, pb = plans[a.path], plans[b.path]
    if pa is None or pb is None:
        out["error"] = f"benchmark {a.benchmark} has no statistics plan"
        return out
    metrics = stats.paired(pa, pb, level, resamples, seed)
    head = a.summary.headline if a.summary.headline == b.summary.headline else None
    adjusted = stats.adjust({n: m["p"] for n, m in metrics.items()})
    for name, adj in adjusted.items():
        metrics[name]["p_holm"], metrics[name]["p_bh"] = adj["holm"], adj["bh"]
    _sequential_headline(a, b, head, metrics, out)
    out["metrics"] = metrics
    out["primary"] = head
    out["family"] = (f"the {len(adjusted)} metrics with a p-value of this pair (Holm: family-wise error; "
                     f"Benjamini–Hochberg: false discovery rate); the headline {head} is primary, its p also unadjusted")  # fmt: skip
    out["level"] = level
    if pa.n_epochs != pb.n_epochs:
        out["notes"].append(f"{pa.n_epochs} epoch(s) vs {pb.n_epochs}: paired by sample, each sample's epochs averaged")
    bounds = _worst_case_delta(a, b, head)
    if bounds is not None:
        out["worst_case_delta"] = bounds
    return out


def _sequential_headline(a: Run, b: Run, head: str | None, metrics: dict[str, Any], out: dict[str, Any]) -> None:
    """A run stopped by ``run.stop_when`` against ``a`` (:mod:`evalkit.engine.sequential`):
    the headline's Δ and interval become the run's anytime-valid interval at its decision,
    labelled (a fixed-n interval on the units a sequential run happened to stop at would not
    hold its level); the fixed-n entry is kept under ``fixed_n``. A note says so.

    The interval is never read from the summary: the gate is replayed over ``b``'s journal
    in the recorded order by the walk a resume makes (:func:`evalkit.rescore.replay_gate`,
    the run's ``config.yaml`` settings, ``a``'s journal as the baseline), and the summary's
    ``sequential`` block must agree with the replay, field by field.

    Raises:
        CompareError: the block disagrees with the replay (one line naming the field), or
            the gate cannot be replayed (its settings no longer validate, the data does not
            fit them).
    """
    record = getattr(b.summary, "sequential", None)
    if head is None or record is None or b.figures is None:
        return
    settings = _gate_settings(b)
    baseline = settings.get("baseline")
    try:
        same = isinstance(baseline, str) and Path(baseline).resolve() == a.path.resolve()
    except (OSError, ValueError, RuntimeError):
        same = False
    if not same:
        out["notes"].append(f"{b.path} was gated sequentially against {printable(str(baseline))}, not against {a.path}: "
                            "its fixed-n paired statistics are shown")  # fmt: skip
        return
    where = b.path / "summary.json"
    try:
        run = recorded_run_settings({"run": settings})
        dispatched = {sid for sid, _ in b.journal.rows} | set(b.summary.failed_ids)
        hashes = {key: row.get("request_hash") for key, row in b.journal.rows.items()}
        monitor, block = replay_gate(b.figures.bench, run, b.path, hashes, dispatched)
    except EvalkitError as exc:
        raise CompareError(f"{printable(str(b.path))}: its gate (run.stop_when) cannot be replayed from its journal: {first_line(exc)}") from None
    except (ValueError, KeyError, OSError) as exc:  # settings that no longer validate, data that does not fit them
        raise CompareError(f"{printable(str(b.path))}: its gate (run.stop_when) cannot be replayed from its journal "
                           f"({type(exc).__name__}: {printable(first_line(exc), 300)})") from None  # fmt: skip
    first = ("verdict", "n_used", "interval")
    for key in first + tuple(k for k in block if k not in first):
        if record.get(key, _MISSING) != block[key]:
            raise CompareError(f"{printable(str(where))}: "
                               f"{disagreement(f'sequential.{key}', record.get(key, None), block[key])} "
                               "(the gate replayed over its journal); the summary is not its run's record, not read")  # fmt: skip
    if (b.summary.status == "decided") != monitor.decided:
        raise CompareError(f"{printable(str(where))}: {disagreement('status', b.summary.status, 'decided' if monitor.decided else 'complete')} "
                           "(the gate replayed over its journal); not read")  # fmt: skip
    entry = interval_entry(block)
    fixed = metrics.get(head)
    if entry is None:
        return
    entry["fixed_n"] = fixed
    entry["method"] = f"sequential (run.stop_when={block['gate']}, {block['verdict']} at n={block['n_used']}): {entry['method']}"
    metrics[head] = {**{k: v for k, v in (fixed or {}).items() if k in ("a", "b", "n_paired", "n_excluded")}, **entry}
    out["notes"].append(f"the headline's Δ interval is {b.path}'s anytime-valid one (run.stop_when={block['gate']}, "
                        f"n={block['n_used']}), replayed from its journal, not a fixed-n interval")  # fmt: skip


#: a field a record does not hold
_MISSING: Any = object()


def _worst_case_delta(a: Run, b: Run, head: str | None) -> list[float] | None:
    """``[low, high]``: the headline's Δ (B − A) whatever the failed answers of either run
    would have scored — from each run's worst-case bounds derived from its journal
    (:attr:`Recount.partial_bounds`; a complete run's value is its own bound); ``None`` when
    neither run has failures or a bound is unknown."""
    if head is None or (a.complete and b.complete):
        return None

    def bounds(run: Run) -> list[float] | None:  # from the journal (check_run), never the summary's figures
        figures = run.figures
        if figures is None:
            return None
        if figures.complete:
            value = figures.metrics.get(head)
            return [float(value)] * 2 if value is not None else None
        got = figures.partial_bounds.get(head)
        return [float(got[0]), float(got[1])] if got is not None else None

    ba, bb = bounds(a), bounds(b)
    if ba is None or bb is None:
        return None
    return [bb[0] - ba[1], bb[1] - ba[0]]


def _parse_gate(spec: str) -> tuple[str, float]:
    try:
        return stats.parse_gate(spec)
    except ValueError as exc:
        raise CompareError(str(exc)) from None


def gate_verdict(result: dict[str, Any], spec: str) -> dict[str, Any]:
    """The ``--gate`` verdict (:func:`evalkit.stats.gate`) on the headline of the first pair
    (BASE → NEW): ``{"gate", "verdict", "exit", "line"}``.

    Raises:
        CompareError: ``spec`` is not a gate, or the headline rests on a judge that was not
            qualified (:func:`judge_gate_refusal`) — one line.
    """
    kind, margin = _parse_gate(spec)
    if result.get("judge_gate_refusal"):
        raise CompareError(result["judge_gate_refusal"])
    pair = (result.get("paired") or [{}])[0]
    head = pair.get("primary") or result["runs"][0].get("headline")
    entry = (pair.get("metrics") or {}).get(head)
    if entry is None and "error" in pair:
        entry = {"note": pair["error"]}
    verdict = stats.gate(entry, kind, margin, pair.get("level", 0.95), str(head))
    partial = [r for r in result["runs"][:2] if r.get("status") not in ("complete", "decided")]
    if verdict["verdict"] == "PASS" and partial:  # the samples it lacks could be its failures (or marked stale by hand)
        names = ", ".join(f"{printable(r['dir'], 200)} ({r.get('n_failed')} failed)" for r in partial)
        verdict = {**verdict, "verdict": "INCONCLUSIVE", "exit": stats.GATE_EXIT["INCONCLUSIVE"],
                   "line": f"{verdict['line']}; but INCONCLUSIVE: an incomplete run never passes a gate ({names}; resume it)"}  # fmt: skip
    return verdict


def judge_gate_refusal(runs: Sequence[Run]) -> str | None:
    """Why ``--gate`` may not rest on these runs' judges (``None``: it may): a run whose
    headline a judge scored, whose recorded qualification (``judge_qualification``) names a
    judge of the headline's scorer that was not qualified, whatever its
    ``judge_qualification.require`` (``never`` included) — or a run judged by a network judge
    that recorded no qualification (made before evalkit recorded one)."""
    for run in runs:
        qual = run.summary.judge_qualification
        judges = (run.summary.instrument.get("judge") or {}).get("judges") if isinstance(run.summary.instrument.get("judge"), dict) else None
        networked = [j for j in judges or [] if isinstance(j, dict) and j.get("provider") != "reference"]
        if not qual:
            if networked:
                return (f"--gate: {printable(str(run.path), 300)} was judged by {printable(networked[0].get('name'), 100)} and records no "
                        "judge qualification (a run made before evalkit recorded one): a gate cannot rest on an unqualified judge")  # fmt: skip
            continue
        scorer = qual.get("headline_scorer")
        if not scorer:  # require=never too: a run made unqualified by choice is no ground for a gate
            continue
        for judge, per in (qual.get("judges") or {}).items():
            status = (per or {}).get(scorer) if isinstance(per, dict) else None
            if not isinstance(status, dict) or status.get("status") != "qualified":
                line = status.get("line") if isinstance(status, dict) else "no status recorded"
                return f"--gate: {printable(str(run.path), 300)}: {printable(str(line), 400)} (recorded when the run started)"
    return None


def metric_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per metric name of any run: ``{"metric": name, "values": [value or None
    per run], "partial": [bool per run]}``. Headline metrics come first, then names in
    first-seen order."""
    per_run = [r.metric_values() for r in runs]
    names: list[str] = []
    for run in runs:
        head = run.summary.headline
        if isinstance(head, str) and head not in names and any(head in vals for vals, _ in per_run):
            names.append(head)
    for vals, _ in per_run:
        names += [n for n in vals if n not in names]
    return [
        {
            "metric": name,
            "values": [vals.get(name) for vals, _ in per_run],
            "partial": [partial and name in vals for vals, partial in per_run],
        }
        for name in names
    ]


def compare(paths: Sequence[str | Path], with_flips: bool = True, level: float = 0.95, resamples: int = 2000,
            seed: int = 0, data_dir: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The machine-readable comparison (what ``--json`` prints).

    Returns ``{"runs": [{"dir", "benchmark", "model", "status", "n_samples", "n_scored",
    "n_failed", "headline", "data_fingerprint"}], "metrics": metric_rows(...),
    "paired": [paired_stats(a, b) for every pair], "flips": [flips(a, b) for every pair]}``
    (pairs in argument order; both ``[]`` with ``with_flips=False``).

    Every figure is derived from the runs' journals (:func:`check_run`); a run whose
    benchmark or data cannot be loaded shows its summary's figures, marked ``unverified``
    in its ``runs`` entry, and has no paired statistics.

    Raises:
        CompareError: fewer than two runs, a path is not a run directory, a summary that
            disagrees with its journal (one line naming the field), a journal score outside
            the benchmark's range, or (with flips) the runs are of different benchmarks.
    """
    if len(paths) < 2:
        raise CompareError("compare needs at least two run directories")
    runs = [load_run(p) for p in paths]
    for run in runs:  # every figure shown or gated on is derived from the journal; a summary that disagrees is refused
        check_run(run, data_dir)
    pairs: list[dict[str, Any]] = []
    paired: list[dict[str, Any]] = []
    if with_flips:
        benches = sorted({r.benchmark for r in runs})
        if len(benches) > 1:
            raise CompareError(
                f"flips need runs of one benchmark, got {', '.join(benches)} (use --metrics-only to compare metrics only)"
            )
        key = primary_score_key(runs)
        pairs = [flips(a, b, key) for a, b in combinations(runs, 2)]
        plans: dict[Path, Any] = {}
        for (ia, a), (ib, b) in combinations(enumerate(runs, 1), 2):
            paired.append({"ia": ia, "ib": ib, **paired_stats(a, b, level, resamples, seed, data_dir, plans)})
    info = [
        {
            "dir": str(r.path),
            **r.summary.model_dump(include={"benchmark", "model", "status", "n_samples", "n_scored", "n_failed", "headline", "data_fingerprint"}),
            **({"unverified": r.unavailable} if r.figures is None else {}),
            **({"judge_qualification": r.summary.judge_qualification} if r.summary.judge_qualification else {}),
        }
        for r in runs
    ]
    out = {"runs": info, "metrics": metric_rows(runs), "paired": paired, "flips": pairs}
    refused = judge_gate_refusal(runs)
    if refused is not None:
        out["judge_gate_refusal"] = refused
    return out


def _fmt(value: Any, partial: bool) -> str:
    if value is None:
        return "-"
    text = f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    return f"{text} (partial)" if partial else text


def render(result: dict[str, Any]) -> str:
    """The human-readable form of :func:`compare`'s result."""
    runs = result["runs"]
    out = ["Runs:"]
    for i, r in enumerate(runs, 1):
        state = r["status"] if r["status"] in ("complete", "decided") else f"INCOMPLETE, n_failed={r['n_failed']}"
        out.append(f"  [{i}] {printable(r['dir'])}  ({printable(r['benchmark'])} × {printable(r['model'])}, {state}, {r['n_scored']}/{r['n_samples']} scored)")
        out += [f"      judge {printable(line)}" for line in qualification_text(r.get("judge_qualification") or {})]
    for i, r in enumerate(runs, 1):
        if r.get("unverified"):
            out.append(f"  note: [{i}]'s figures are its summary.json's, not derived from its journal ({printable(r['unverified'])}; "
                       "--data-dir)")  # fmt: skip
    fps = {r["data_fingerprint"] for r in runs}
    if len({r["benchmark"] for r in runs}) == 1 and len(fps) > 1:
        out.append("  note: the runs' data fingerprints differ (different sample selections or data)")
    out.append("")
    headers = ["metric"] + [f"[{i}] {r['model']}" for i, r in enumerate(runs, 1)]
    heads = {r["headline"] for r in runs}
    table = [
        [row["metric"] + (" *" if row["metric"] in heads else "")] + [_fmt(v, p) for v, p in zip(row["values"], row["partial"])]
        for row in result["metrics"]
    ]
    out.append(tabulate(table, headers=headers, tablefmt="simple", disable_numparse=True))
    out.append("* headline metric")
    if any(any(row["partial"]) for row in result["metrics"]):
        out.append("(partial) = partial_ figure of an incomplete run: its failed samples are left out")
    order = [row["metric"] for row in result["metrics"]]
    for pair in result.get("paired") or []:
        out += _render_paired(pair, order, heads)
    for (ia, ib), pair in zip(combinations(range(1, len(runs) + 1), 2), result["flips"]):
        out += [
            "",
            f"Flips [{ia}] vs [{ib}] (score: {pair['score']}; {pair['n_common']} samples in both"
            + (f", {len(pair['only_in_a'])} only in [{ia}]" if pair["only_in_a"] else "")
            + (f", {len(pair['only_in_b'])} only in [{ib}]" if pair["only_in_b"] else "")
            + "):",
        ]
        for label, entries in ((f"better in [{ia}], worse in [{ib}]", pair["a_better"]), (f"better in [{ib}], worse in [{ia}]", pair["b_better"])):
            out.append(f"  {label}: {len(entries)}")
            if entries:
                why = any("why" in e for e in entries)  # the scoring rules that decided, where they differ
                rows = [[printable(e["sample_id"]), printable(e["subset"]), _fmt(e["a"], False), _fmt(e["b"], False)]
                        + ([printable(e.get("why", ""))] if why else []) for e in entries]  # fmt: skip
                table_text = tabulate(rows, headers=["sample_id", "subset", f"[{ia}]", f"[{ib}]"] + (["scoring rule"] if why else []),
                                      tablefmt="simple", disable_numparse=True)  # fmt: skip
                out += ["    " + line for line in table_text.splitlines()]
    return "\n".join(out)


def _render_paired(pair: dict[str, Any], order: list[str], heads: set[str]) -> list[str]:
    ia, ib = pair["ia"], pair["ib"]
    level = int(round(100 * pair.get("level", 0.95)))
    out = ["", f"Paired [{ia}] → [{ib}] (Δ = [{ib}] − [{ia}]; each metric over the units scored in both where it is defined "
               f"in both, its n; {level}% intervals):"]  # fmt: skip
    out += [f"  note: {note}" for note in pair["notes"]]
    if "error" in pair:
        return out + [f"  {pair['error']}"]
    rows = []
    names = [n for n in order if n in pair["metrics"]] + [n for n in pair["metrics"] if n not in order]
    for name in names:
        m = pair["metrics"][name]
        label = name + (" * (primary)" if name == pair.get("primary") else " *" if name in heads else "")
        if m["delta"] is None:
            rows.append([label, "-", "-", m.get("note", "no paired samples"), "", "", "", 0])
            continue
        if m["low"] is None:
            why = "not estimable"
            p_text = f"{m['p']:.4g}" if m.get("p") is not None else ""
            rows.append([label, f"{m['a']:.4f}", f"{m['b']:.4f}", f"{m['delta']:+.4f} (no interval: {why})", p_text, "", m.get("test", "none"), m["n"]])
            continue
        test = m["test"] + (f" (b={m['only_a']}, c={m['only_b']}; exact McNemar p {m['p_mcnemar_exact']:.3g})"
                            if "p_mcnemar_exact" in m else f" (b={m['only_a']}, c={m['only_b']})" if "only_a" in m else "")
        adj = f"{m['p_holm']:.3g} / {m['p_bh']:.3g}" if "p_holm" in m else ""
        rows.append([label, f"{m['a']:.4f}", f"{m['b']:.4f}", f"{m['delta']:+.4f} [{m['low']:+.4f}, {m['high']:+.4f}]",
                     f"{m['p']:.4g}" if m.get("p") is not None else "(anytime)", adj, test, m["n"]])  # fmt: skip
    first = next(iter(pair["metrics"].values()), {"n_paired": 0, "n_excluded": 0})
    out.append(f"  {first['n_paired']} units paired, {first['n_excluded']} excluded (scored in one run only)")
    table = tabulate(rows, headers=["metric", f"[{ia}]", f"[{ib}]", "Δ [interval]", "p", "p Holm / BH", "test", "n"],
                     tablefmt="simple", disable_numparse=True)  # fmt: skip
    out += ["    " + line for line in table.splitlines()]
    out.append(f"  multiplicity: {pair.get('family', '')}")
    out += _verdict_lines(pair)
    return out


def _verdict_lines(pair: dict[str, Any]) -> list[str]:
    """What the headline's comparison shows: a difference, or "no difference detected" with
    the smallest difference this comparison could detect; worst-case bounds with failures."""
    head = pair.get("primary")
    m = (pair.get("metrics") or {}).get(head) if head else None
    if not m or m.get("p") is None:
        return []
    level = pair.get("level", 0.95)
    mde = m.get("mde")
    power = f"this comparison could detect |Δ| ≥ {mde:.4f} (80% power, two-sided α = {1 - level:.2g})" if mde else \
        "its minimum detectable effect cannot be estimated (the paired differences do not vary)"  # fmt: skip
    if pair.get("instrument_changed"):
        lines = [f"  {head}: Δ {m['delta']:+.4f} (p = {m['p']:.3g}) is not a model difference: the instrument changed "
                 f"({pair['instrument_changed']})"]  # fmt: skip
    elif m["p"] < 1 - level:
        lines = [f"  {head}: a difference, Δ {m['delta']:+.4f} (p = {m['p']:.3g}; {power})"]
    else:
        lines = [f"  {head}: no difference detected (p = {m['p']:.3g}) — not evidence of no difference; {power}"]
    if m.get("warning"):
        lines.append(f"  {head}: warning: {m['warning']}")
    if "worst_case_delta" in pair:
        low, high = pair["worst_case_delta"]
        lines.append(f"  {head}: failures are left out (assumed missing at random); counting them as 0 or 1, Δ could be "
                     f"anywhere in [{low:+.4f}, {high:+.4f}]")  # fmt: skip
    return lines


def _ledger(run_dir: Path) -> dict[str, Any]:
    """A run's ``tracking.json`` as far as it names its MLflow run (``{}`` when absent or
    unusable): ``tracking_uri``, ``mlflow_run_id``, ``experiment_id`` (strings only), read
    by the ledger's own reader (no link followed, bounded, checked against its schema)."""
    try:
        state = read_ledger_file(Path(run_dir) / LEDGER_FILE)
    except RunDirError:
        return {}
    if state is None:
        return {}
    return {k: v for k, v in state.model_dump(include={"tracking_uri", "mlflow_run_id", "experiment_id"}).items() if isinstance(v, str)}


def log_comparisons(result: dict[str, Any], tracking_uri: str | None = None) -> list[str]:
    """Record every paired comparison of ``result`` as an MLflow run (``compare --log``;
    :func:`evalkit.tracking.mlflow_tracking.log_comparison`) in the store of the compared
    runs (their ``tracking.json``), or ``tracking_uri`` when given; returns one line per
    comparison naming the MLflow run and the store.

    Raises:
        CompareError: the runs were logged to different stores, or to none, and no
            ``tracking_uri`` is given (one line).
    """
    from evalkit.tracking.mlflow_tracking import log_comparison, preflight_store

    runs = result["runs"]
    lines = []
    checked: set[tuple[str, str | None]] = set()
    for pair, flip in zip(result.get("paired") or [], result.get("flips") or []):
        a, b = runs[pair["ia"] - 1], runs[pair["ib"] - 1]
        la, lb = _ledger(Path(a["dir"])), _ledger(Path(b["dir"]))
        stores = {x["tracking_uri"] for x in (la, lb) if "tracking_uri" in x}
        if tracking_uri is None and len(stores) != 1:
            why = "live in different MLflow stores" if stores else "were not logged to MLflow"
            raise CompareError(f"--log: the compared runs {why} ({', '.join(sorted(stores)) or 'none'}): pass --tracking-uri")
        uri = tracking_uri or _store_a_run_may_name(next(iter(stores)), (Path(a["dir"]), Path(b["dir"])))
        ends = tuple({"dir": r["dir"], "name": f"{r['benchmark']} × {r['model']}", "label": r["model"], "benchmark": r["benchmark"],
                      "judge_qualification": qualification_text(r.get("judge_qualification") or {}),
                      **({k: v for k, v in led.items() if k != "tracking_uri"} if led.get("tracking_uri") == uri else {})}
                     for r, led in ((a, la), (b, lb)))  # fmt: skip
        store = (uri, next((e.get("experiment_id") for e in ends if e.get("experiment_id")), None))
        if store not in checked:  # issue 47: credentials and write permission before the first write
            preflight_store(uri, exp_id=store[1])
            checked.add(store)
        rid = log_comparison(uri, pair, flip, ends, verdict=result.get("gate") if pair is result["paired"][0] else None)  # type: ignore[arg-type]
        lines.append(f"comparison [{pair['ia']}] → [{pair['ib']}] recorded in MLflow: run {rid} in {uri}")
    return lines


def _store_a_run_may_name(uri: str, run_dirs: tuple[Path, ...]) -> str:
    """``uri``, the store both runs' ``tracking.json`` name, when a run directory may choose
    it: the one ``MLFLOW_TRACKING_URI`` names, or a SQLite file in a folder holding both runs
    (their own output root, ``sqlite:///<run.output_root>/mlflow.db``). A run directory is
    untrusted: it never picks the server evalkit sends the user's MLflow credentials to, nor
    where a new SQLite file is written (issue 43).

    Raises:
        CompareError: any other store (one line naming it, and how to choose it).
    """
    if store_a_run_may_name(uri, run_dirs):
        return uri
    raise CompareError(f"--log: the runs' tracking.json names {printable(secrets.scrub(uri), 200)}; a run directory never chooses "
                       f"the store evalkit logs to (or sends credentials to): pass --tracking-uri to log there")  # fmt: skip


def resolve_run(arg: str, tracking_uri: str | None) -> Path:
    """A run directory, or the ``run_dir`` tag of the MLflow run whose id is ``arg``.

    Raises:
        CompareError: ``arg`` is neither (one line).
    """
    path = Path(arg)
    if path.is_dir() or not (len(arg) == 32 and all(c in "0123456789abcdef" for c in arg)):
        return path
    from evalkit.tracking.mlflow_tracking import bound_hit, client

    uri = tracking_uri or f"sqlite:///{Path('outputs').resolve() / 'mlflow.db'}"
    try:
        run_dir = client(uri).get_run(arg).data.tags.get("run_dir")
    except Exception as exc:  # noqa: BLE001 - any store error is one line
        why = bound_hit(exc) or type(exc).__name__  # a server that trickles or floods: its bound
        raise CompareError(f"{arg}: not a run directory, and no MLflow run with that id in {secrets.scrub(uri)} ({why})") from None
    if not run_dir:
        raise CompareError(f"{arg}: the MLflow run has no run_dir tag")
    return Path(run_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit code (0; 2 on an error; with ``--gate`` 1 on FAIL and 3
    on INCONCLUSIVE or FUTILE)."""
    parser = argparse.ArgumentParser(prog="python -m evalkit.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories (outputs/runs/<benchmark>/<model>/<stamp>) or MLflow run ids")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--metrics-only", action="store_true", help="metric table only (runs may be of different benchmarks)")
    parser.add_argument("--ci-level", type=float, default=0.95, help="level of the paired intervals (default 0.95)")
    parser.add_argument("--resamples", type=int, default=2000, help="paired-bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    parser.add_argument("--data-dir", type=Path, default=None, help="the benchmark's data, if not where the runs found it")
    parser.add_argument("--tracking-uri", default=None, help="MLflow store of run ids (default: sqlite:///outputs/mlflow.db)")
    parser.add_argument("--gate", default=None, metavar="GATE",
                        help="noninferior:MARGIN, superior or equivalent:MARGIN on the headline's paired Δ of RUN_B − RUN_A: "
                             "PASS exits 0, FAIL 1, INCONCLUSIVE or FUTILE 3")  # fmt: skip
    parser.add_argument("--log", action="store_true",
                        help="record each comparison as an MLflow run (evalkit.kind=comparison) in the compared runs' store")  # fmt: skip
    add_http_bound_options(parser)
    args = parser.parse_args(argv)
    use_http_bound_options(args)
    try:
        if args.log and args.metrics_only:
            raise CompareError("--log records paired comparisons: it cannot go with --metrics-only")
        if args.gate is not None:
            _parse_gate(args.gate)
            if len(args.runs) != 2 or args.metrics_only:
                raise CompareError("--gate compares exactly two runs, BASE and NEW, with their paired statistics")
        paths = [resolve_run(r, args.tracking_uri) for r in args.runs]
        result = compare(paths, not args.metrics_only, args.ci_level, args.resamples, args.seed, args.data_dir)
        verdict = gate_verdict(result, args.gate) if args.gate is not None else None
    except EvalkitError as exc:
        print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
        return 2
    if verdict is not None:
        result["gate"] = verdict
    if args.log:
        try:
            result["logged"] = log_comparisons(result, args.tracking_uri)
        except EvalkitError as exc:
            if exc.exit_code == 1:  # the preflight met a server down, trickling or flooding: as any failed logging
                print(f"evalkit: error: --log: MLflow failed ({printable(str(exc).removeprefix('tracking: '))})", file=sys.stderr)
            else:
                print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
            return 2
        except Exception as exc:  # noqa: BLE001 - a store that fails is one line; the comparison is still printed
            from evalkit.tracking.mlflow_tracking import bound_hit  # MLflow's module, as log_comparisons'

            why = bound_hit(exc) or f"{type(exc).__name__}: {first_line(exc)}"  # a server that trickles or floods: its bound
            print(f"evalkit: error: --log: MLflow failed ({printable(secrets.scrub(why))})", file=sys.stderr)
            return 2
    try:
        text = json.dumps(result, indent=2, ensure_ascii=False) if args.json else render(result) + (f"\n\n{verdict['line']}" if verdict else "")
        text += "".join(f"\n{line}" for line in result.get("logged") or []) if not args.json else ""
        print(text, flush=True)
    except BrokenPipeError:  # `| head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return verdict["exit"] if verdict else 0


if __name__ == "__main__":
    sys.exit(main())
