"""Re-score a finished run from its journal alone — no model, no network.

    python -m evalkit.rescore RUN_DIR [--data-dir DIR]
    python -m evalkit.rescore RUN_DIR --set benchmark.scoring=evalscope [--data-dir DIR]

Reads ``config.yaml`` (the benchmark settings that ran: ``model.dataset_args`` applied) and
``predictions.jsonl``, scores every journaled trajectory again through the benchmark's one
scoring entry, as the run did, and prints, per metric, the recorded value, the recomputed
one, and the samples whose verdict changed.

Without ``--set`` nothing in the run directory is modified. Exit code: 0 identical,
1 differences found, 2 the directory is not a usable run (or a bad ``--set``).

With ``--set benchmark.KEY=VALUE`` (only the scoring keys of :data:`SETTABLE`, which change
no prompt and no selection) the answers are scored under the changed settings and written
as a run directory of their own, ``RUN_DIR/rescored/<value>/`` (:func:`write_rescored`:
``config.yaml`` with the setting changed, ``predictions.jsonl`` with the new verdicts and
each row's ``scoring_rule``, ``failed.jsonl`` copied, ``summary.json`` with the new
metrics, intervals, ``instrument`` and ``scoring_rules`` (rows per rule that decided); a ``run.stop_when`` run's gate walked again over
the new scores, :func:`regate`), which ``compare`` reads like any run; no model is asked.
Exit code 0 when written, 2 when it cannot be.

Journal rows that are not the run's (a sample id the data lacks, a sample outside the run's
selection, :func:`run_selection`, an epoch beyond its repeats, duplicates) are not scored; one warning line names them by count (:func:`extra_rows`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import stat
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable

import yaml
from pydantic import ValidationError
from tabulate import tabulate

from evalkit.benchmarks import get_benchmark_class
from evalkit.config import RunSettings, resolve_layers
from evalkit.engine.finalize import code_version
from evalkit.engine.plan import load_unique, select_samples
from evalkit.engine.records import scored_view, trajectory_of_row
from evalkit.engine.scoring import Scorer
from evalkit.engine.sequential import GateSetup, Monitor
from evalkit.errors import ConfigError, EvalkitError, RunDirError, counted, printable, shell_line
from evalkit.journal import FAILED, PREDICTIONS, Journal, damaged_journal, read_run_journal
from evalkit.untrusted import MAX_RECORD_BYTES, SideFileError, copy_file, load_yaml, read_run_yaml
from evalkit.report.figures import epoch_mean, plan_figures, worst_case_bounds
from evalkit.report.summary import instrument
from evalkit.summary import Summary, read_summary, read_summary_record

log = logging.getLogger("evalkit")


#: ``--set`` keys: settings that change only how answers are scored, never a prompt or the selection
SETTABLE = ("benchmark.scoring",)


def rescore(run_dir: Path, data_dir: Path | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Recompute scores and metrics of ``run_dir``, under its own benchmark settings with
    ``overrides`` (``{benchmark key: value}``) applied.

    Returns ``{"metrics": {...}, "recorded": {...}, "changed": [sample ids], "unreadable": [sample ids],
    "rows": {(sample id, epoch): new row}, "bench", "samples": selected samples, "epochs": rows by epoch,
    "summary": the recorded Summary or None, "has_summary": bool, "loaded": the benchmark's samples,
    "recorded_rows": the run's own rows of the journal, as recorded}`` (``has_summary`` false: an
    interrupted run, whose ``recorded`` is empty):
    ``unreadable`` are the samples whose side file is missing or does not match its row's
    sha256 (each warned about; they keep their recorded scores and count as differences).

    Raises:
        RunDirError: no ``config.yaml`` / ``predictions.jsonl``, an unreadable or invalid
            ``summary.json`` (:class:`evalkit.summary.Summary`), a journal row that cannot
            count (:mod:`evalkit.journal`: a score that is not a finite number) or whose score
            lies outside the benchmark's range, or fewer readable predictions than its
            ``n_scored_rows``.
    """
    run_dir = Path(run_dir)
    for name in ("config.yaml", PREDICTIONS):
        _run_file(run_dir, name)
    bench = load_benchmark(run_dir, data_dir, overrides)
    loaded = bench.load()
    by_id = {s.id: s for s in loaded}
    summary_path = run_dir / "summary.json"  # lexists: a link, even dangling, is refused by the reader, not taken for "unfinished"
    recorded_summary = read_summary(summary_path) if os.path.lexists(summary_path) else None
    journal = read_run_journal(run_dir, recorded_summary.stale_lines if recorded_summary else ())
    journal.check_scores(bench.score_bounds)  # a recorded score outside the benchmark's range is not a record
    rows = journal.rows
    damage = recorded_summary and damaged_journal(journal.path, len(rows), recorded_summary.n_scored_rows, "n_scored_rows")
    if damage:
        raise RunDirError(damage)
    repeats = recorded_summary.repeats if recorded_summary else max(journal.n_epochs(), 1)
    selection = run_selection(run_dir, bench)
    own = by_id if selection is None else {sid: s for sid, s in by_id.items() if sid in selection}  # the run's samples
    selected = [own[sid] for sid in journal.sample_ids() if sid in own]
    extra = extra_rows(journal, by_id, repeats, recorded_summary.n_samples if recorded_summary else None, own)
    problems = "; ".join(p for p in (journal.problems(), extra["line"]) if p)
    if problems:
        print(f"evalkit: warning: {problems}", file=sys.stderr)
    epochs: list[list[dict[str, Any]]] = [[] for _ in range(repeats)]
    changed: list[str] = []
    unreadable: list[str] = []
    new_rows: dict[tuple[str, int], dict[str, Any]] = {}
    with Scorer(bench) as scorer:  # the run's own bounds on time and memory per sample
        for (sid, epoch), row in rows.items():
            if sid not in own or epoch >= repeats:  # not the run's (extra_rows names them)
                continue
            row = dict(row)
            try:
                trajectory = trajectory_of_row(row, run_dir)
            except SideFileError as exc:  # never score the row's first characters as if they were the output
                log.warning("%s; the sample keeps its recorded scores and counts as a difference", exc)
                unreadable.append(sid if repeats == 1 else f"{sid}@{epoch}")
                epochs[epoch].append(row)
                new_rows[(sid, epoch)] = row
                continue
            view, rule = scored_view(bench, trajectory)  # the run's reasoning rule, as it ran
            scored = scorer.score_sync(by_id[sid], view)
            if scored.scores != row.get("scores"):
                changed.append(sid if repeats == 1 else f"{sid}@{epoch}")
            row["scores"] = scored.scores
            _verdict_fields(row, scored)
            if "reasoning_rule" in row:  # the rules that scored it now (benchmark.scoring may change it)
                row["reasoning_rule"] = rule["reasoning_rule"]
            epochs[epoch].append(row)
            new_rows[(sid, epoch)] = row
    metrics = epoch_mean([bench.aggregate(selected, records) for records in epochs])
    metrics.update(plan_figures(bench, selected, epochs, _NO_INTERVALS)["repeat"])
    recorded = recorded_summary.shown_metrics()[0] if recorded_summary else {}
    return {"metrics": metrics, "recorded": recorded, "changed": changed, "unreadable": unreadable,
            "rows": new_rows, "bench": bench, "samples": selected, "epochs": epochs, "summary": recorded_summary,
            "has_summary": recorded_summary is not None, "extra": extra, "loaded": loaded,
            "recorded_rows": {k: r for k, r in rows.items() if k[0] in own and k[1] < repeats},
            "scoring_rules": scoring_rule_counts(new_rows.values())}  # fmt: skip


def scoring_rule_counts(rows: Any) -> dict[str, int]:
    """``{scoring_rule: rows}`` over journal rows that carry one (a benchmark with several
    scoring rules, such as ACEBench's ``benchmark.scoring``), most frequent first, then by
    name: how many verdicts each rule decided (under ``evalscope``, every rule on which it
    differs from the official scoring has its own name)."""
    counts = Counter(r["scoring_rule"] for r in rows if isinstance(r.get("scoring_rule"), str))
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def rules_line(counts: dict[str, int]) -> str:
    """One line naming each scoring rule with its count (``""`` when no row has one)."""
    if not counts:
        return ""
    return "scoring rules: " + ", ".join(f"{name} {n:,}" for name, n in counts.items())


def _run_file(run_dir: Path, name: str) -> None:
    """Check that ``run_dir/name`` is a regular file, judged by ``lstat`` (no link followed,
    nothing opened: a FIFO is never waited on).

    Raises:
        RunDirError: missing (not a run directory), a symbolic link, or not a regular file
            (a FIFO, a directory, a device) — one line naming it.
    """
    path = run_dir / name
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise RunDirError(f"{printable(str(run_dir))}: not an evalkit run directory (config.yaml and predictions.jsonl needed)") from None
    except OSError as exc:
        raise RunDirError(f"{printable(str(path))}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if stat.S_ISLNK(mode):
        raise RunDirError(f"{printable(str(path))}: a symbolic link; evalkit never reads a run's files through a link")
    if not stat.S_ISREG(mode):
        raise RunDirError(f"{printable(str(path))}: not a regular file (a FIFO, a directory or a device); not read")


def extra_rows(journal: Any, by_id: dict[str, Any], repeats: int, n_samples: int | None,
               own: dict[str, Any] | None = None) -> dict[str, Any]:
    """The journal rows that are not the run's, which ``rescore`` does not score (as the run
    did not count them) but names, by count, in one line (``line``; ``None`` when there are
    none): rows of a sample id the benchmark's data does not hold (``unknown``), rows of a
    sample the data holds but the run did not select (``outside``: not in ``own``, the run's
    selection, :func:`run_selection`; ``own`` ``None``: every sample of the data), rows at an
    epoch beyond the summary's ``repeats`` (``beyond``), later rows of a key already counted
    (``duplicates``, line numbers: the first row counts, :mod:`evalkit.journal`'s rule 4;
    those with other scores are also named by :meth:`~evalkit.journal.Journal.problems`), and
    ``surplus``: how many more samples have rows than the summary's ``n_samples``.

    ``unknown``, ``outside``, ``beyond`` and ``surplus`` make the rescore differ from the record (exit 1:
    the journal holds what the run did not count); duplicates do not (the run counted the
    first row too). Rule: a re-scorer scores exactly the run's samples and epochs and says
    what else it found, as Inspect's ``inspect score`` re-scores a log's own samples.
    """
    own = by_id if own is None else own
    unknown = [f"{sid}@{e}" if repeats > 1 else sid for sid, e in journal.rows if sid not in by_id]
    outside = [f"{sid}@{e}" if repeats > 1 else sid for sid, e in journal.rows if sid in by_id and sid not in own]
    beyond = [f"{sid}@{e}" for sid, e in journal.rows if sid in own and e >= repeats]
    duplicates = [line for _, line in journal.duplicates]
    with_rows = len({sid for sid, _ in journal.rows if sid in own})
    surplus = max(0, with_rows - n_samples) if n_samples is not None else 0
    def listed(keys: list[str], what: str) -> str:  # "2 rows <what> (a, b)": at most 5 keys shown
        return f"{counted(len(keys), 'row')} {what} ({printable(', '.join(keys[:5]), 300)}{', ...' if len(keys) > 5 else ''})"

    parts = [listed(keys, what) for keys, what in ((unknown, "of sample ids not in the benchmark's data"),
                                                  (outside, "of samples outside the run's selection"),
                                                  (beyond, f"at an epoch beyond the run's repeats={repeats}")) if keys]  # fmt: skip
    if duplicates:
        parts.append(f"{counted(len(duplicates), 'duplicate row')} of a sample and epoch already journaled (lines "
                     f"{', '.join(map(str, duplicates[:10]))}{', ...' if len(duplicates) > 10 else ''}; the first row counts, as in the run)")  # fmt: skip
    line = None
    if parts:
        line = f"{counted(len(unknown) + len(outside) + len(beyond) + len(duplicates), 'journal row')} not rescored: " + "; ".join(parts)
    if surplus:
        more = f"rows of {counted(with_rows, 'sample')}, {surplus} more than the n_samples={n_samples} summary.json counts: the journal holds rows the run did not count"
        line = f"{line}; {more}" if line else more
    if line and not journal.problems():
        line = f"{journal.path}: {line}"
    return {"unknown": unknown, "outside": outside, "beyond": beyond, "duplicates": duplicates, "surplus": surplus, "line": line}


def recorded_run_settings(cfg: Any) -> RunSettings:
    """The ``run.*`` settings a run's ``config.yaml`` (read as ``cfg``) recorded, keys this
    version does not know left out.

    Raises:
        pydantic.ValidationError: a recorded value that no longer validates.
    """
    raw = cfg.get("run") if isinstance(cfg, dict) and isinstance(cfg.get("run"), dict) else {}
    return RunSettings(**{k: v for k, v in raw.items() if k in RunSettings.model_fields})


def run_selection(run_dir: Path, bench: Any) -> set[str] | None:
    """The sample ids the run selected, rebuilt as the run built them
    (:func:`evalkit.engine.plan.select_samples` over :func:`~evalkit.engine.plan.load_unique`,
    with ``config.yaml``'s ``run`` settings: ``sample_ids``, ``sample_ids_file``, ``limit``,
    and a ``run.stop_when`` gate's order); ``None`` when it cannot be rebuilt (settings that no
    longer validate, a ``sample_ids_file`` or baseline gone): the count check of
    :func:`extra_rows` (``surplus``) is then all that tells the run's rows from others.
    The one rule by which both ``rescore`` and ``rescore --set`` tell the run's samples."""
    try:
        run = recorded_run_settings(read_run_yaml(Path(run_dir) / "config.yaml"))
        order = GateSetup(bench, run).order if run.stop_when else None
        return {s.id for s in select_samples(load_unique(bench), run, order)}
    except (EvalkitError, ValidationError, ValueError, OSError, KeyError, TypeError) as exc:
        log.warning("%s: the run's selection cannot be rebuilt (%s: %s); its rows are told by count only",
                    printable(str(run_dir)), type(exc).__name__, printable(str(exc), 300))  # fmt: skip
        return None


def _verdict_fields(row: dict[str, Any], scored: Any) -> None:
    """The verdict's fields of a journal row replaced by ``scored``'s (a row of a rescored
    run says what the new rules decided): status (a truncated answer stays truncated when it
    still scores ok), parsed, checks, detail and ``scoring_rule``."""
    status = scored.status
    if status == "ok" and row.get("status") == "truncated":
        status = "truncated"
    row.update(status=status, parsed=scored.parsed, checks=scored.checks, failed_checks=scored.failed_checks, detail=scored.detail)
    if scored.scoring_rule is not None:
        row["scoring_rule"] = scored.scoring_rule
    else:
        row.pop("scoring_rule", None)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["benchmark.scoring=evalscope"]`` → ``{"scoring": "evalscope"}`` (values read as YAML scalars).

    Raises:
        ConfigError: not ``KEY=VALUE``, or a key outside :data:`SETTABLE` (one line).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (e.g. benchmark.scoring=evalscope)")
        if key not in SETTABLE:
            raise ConfigError(f"--set {key}: only {', '.join(SETTABLE)} can be changed by rescoring "
                              "(it changes how answers are scored, never what was asked)")  # fmt: skip
        out[key.removeprefix("benchmark.")] = load_yaml(value, f"--set {key}", ConfigError)
    return out


def _judged_by(recorded: Any) -> dict[str, Any]:
    """The recorded run's judges (its ``instrument["judge"]``): a rescore asks no judge, it
    re-reads their verdicts from the journal, so the judges that measured the run stay."""
    judge = recorded.instrument.get("judge") if isinstance(getattr(recorded, "instrument", None), dict) else None
    return {"judge": judge} if judge else {}


def write_rescored(run_dir: Path, result: dict[str, Any], overrides: dict[str, Any]) -> Path:
    """Write ``run_dir/rescored/<value of the override>/`` from :func:`rescore`'s ``result``
    (a run directory that ``compare`` reads; replaced whole when it exists, written aside
    first so a failure leaves no half-written directory).

    The run's ``summary.json`` must be its journal's record (:func:`check_summary`); the
    rescored one's metrics, partial metrics and worst-case bounds are recounted from the
    new rows (:func:`recount`).

    Raises:
        RunDirError: the run has no valid ``summary.json`` to carry over, its summary
            disagrees with its journal (one line naming the field), or the directory
            cannot be written (one line).
    """
    recorded = result["summary"]
    if recorded is None:
        raise RunDirError(f"{run_dir}: no summary.json; only a finished run can be rescored into a run directory")
    if (result.get("extra") or {}).get("surplus"):  # rows of more samples than the run counted, the run's own not told apart
        raise RunDirError(f"{printable(str(run_dir))}: {result['extra']['line']}; a rescored run would count samples the run did not")
    run_dir = Path(run_dir)
    label = "-".join(str(v) for v in overrides.values())
    if not label or not all(c.isalnum() or c in "-_." for c in label) or label.startswith("."):
        raise RunDirError(f"--set value {label!r} cannot name a directory")
    target = run_dir / "rescored" / label
    for path in (target.parent, target):  # lexists-style checks: a dangling link is a link too
        if os.path.islink(path):
            raise RunDirError(f"{printable(str(path))}: a symbolic link; evalkit never writes through a symbolic link "
                              "in a run directory (remove it to write the rescored run)")  # fmt: skip
    bench = result["bench"]
    # the summary carried over must be its journal's record; the new figures are recounted, never copied
    check_summary(recorded, recount(bench, result["loaded"], result["recorded_rows"], recorded.failed_ids, recorded.repeats),
                  run_dir / "summary.json")  # fmt: skip
    counted = recount(bench, result["loaded"], result["rows"], recorded.failed_ids, recorded.repeats)
    try:
        cfg = read_run_yaml(run_dir / "config.yaml")
        cfg["benchmark"] = {**_benchmark_settings(run_dir, cfg), **overrides}
        cfg["config_format"] = cfg.get("config_format") or 2
        run_cfg = cfg.get("run") if isinstance(cfg.get("run"), dict) else {}
        settings = SimpleNamespace(bootstrap_resamples=int(run_cfg.get("bootstrap_resamples") or 0),
                                   ci_level=float(recorded.ci_level), seed=int(recorded.seed))  # fmt: skip
        figs = plan_figures(bench, result["samples"], result["epochs"], settings,
                            prefix="" if recorded.complete else "partial_")  # fmt: skip
        summary = read_summary_record(run_dir / "summary.json")  # the fields as written; no link followed, bounded
        metrics = dict(counted.metrics)
        rows = list(result["rows"].values())
        summary.update(
            metrics=metrics if recorded.complete else {},
            metrics_ci=figs["metrics_ci"], metrics_not_estimable=figs["not_estimable"],
            instrument={**_judged_by(recorded), **instrument(bench)}, code_version=code_version(), stale_lines=[],
            status_counts=dict(Counter(r.get("status", "ok") for r in rows)), n_scored_rows=len(rows),
            scorer_limit_ids=[r["sample_id"] for r in rows if r.get("status") == "scorer_limit"],
            rescored_from=str(run_dir), rescored_with={f"benchmark.{k}": v for k, v in overrides.items()},
            scoring_rules=result.get("scoring_rules") or scoring_rule_counts(rows),
        )  # fmt: skip
        if not recorded.complete:
            summary["partial_metrics"] = {f"partial_{k}": v for k, v in metrics.items()}
            summary["partial_bounds"] = {f"partial_{k}": v for k, v in counted.partial_bounds.items()}  # the new scores' worst cases
        if figs["repeat_variance"]:
            summary["repeat_variance"] = figs["repeat_variance"]
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{label}-", dir=target.parent))
        with open(work / PREDICTIONS, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                side = (row.get("large") or {}).get("file") if isinstance(row.get("large"), dict) else None
                if isinstance(side, str) and os.path.lexists(run_dir / side) and ".." not in Path(side).parts:
                    (work / side).parent.mkdir(parents=True, exist_ok=True)
                    copy_file(run_dir / side, work / side, MAX_RECORD_BYTES, root=run_dir, what="a side file",
                              error=RunDirError)  # fmt: skip
        if os.path.lexists(run_dir / FAILED):
            copy_file(run_dir / FAILED, work / FAILED, MAX_RECORD_BYTES, root=run_dir, what="failed.jsonl", error=RunDirError)
        if isinstance(summary.get("sequential"), dict):  # a run.stop_when run: its gate under the new scores
            summary.update(regate(bench, cfg, work, result, summary))
        (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
        (work / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    except (OSError, yaml.YAMLError, ValueError, TypeError) as exc:
        raise RunDirError(f"{target}: cannot write the rescored run ({type(exc).__name__}: {exc})") from None
    return target


def regate(bench: Any, cfg: dict[str, Any], work: Path, result: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """``{"sequential", "status"}`` of a rescored ``run.stop_when`` run: its gate walked again
    (:class:`evalkit.engine.sequential.GateSetup` and :class:`~evalkit.engine.sequential.Monitor`,
    the run's own order, seed, looks and baseline) over the rescored journal in ``work``, for
    the units the run dispatched (its rows and its failed samples). ``status`` is ``decided``
    when the gate decides within them, else ``complete`` (the rescored answers did not
    decide it where the run stopped: its block says ``CONTINUE``, undecided).

    The recorded block stays, with ``regated`` saying why, when the gate cannot be walked
    again (the baseline run is gone or unreadable, the settings do not validate): one
    warning line. Never raises."""
    recorded = summary["sequential"]
    try:
        run = recorded_run_settings(cfg)
        dispatched = {s.id for s in result["samples"]} | set(summary.get("failed_ids") or [])
        hashes = {k: row.get("request_hash") for k, row in result["rows"].items()}
        monitor, block = replay_gate(bench, run, work, hashes, dispatched)
    except (EvalkitError, ValueError, OSError, KeyError) as exc:  # the baseline gone, settings that no longer validate
        why = f"not walked again ({type(exc).__name__}: {printable(str(exc), 300)}); as recorded, under the run's own scores"
        log.warning("the rescored run's gate (run.stop_when) is %s", why)
        return {"sequential": {**recorded, "regated": why}}
    block["regated"] = "walked again over the rescored answers (same order, seed and baseline)"
    status = "decided" if monitor.decided else "complete"
    return {"sequential": block, "status": status if summary.get("status") in ("decided", "complete") else summary.get("status")}


def replay_gate(bench: Any, run: RunSettings, run_dir: Path, request_hashes: dict[tuple[str, int], Any],
                dispatched: set[str]) -> tuple[Monitor, dict[str, Any]]:  # fmt: skip
    """The gate of a finished ``run.stop_when`` run walked again over the journal in
    ``run_dir``: its :class:`~evalkit.engine.sequential.GateSetup` (the run's order, strata,
    seed and baseline, from ``run``) and the walk a resume makes
    (:class:`~evalkit.engine.sequential.Monitor`, rebuilt from the journal: the same
    confidence sequence fed in the recorded order, the same looks), over the rows whose
    ``request_hash`` is ``request_hashes[(sample_id, epoch)]`` (the rows that count) and
    the failures of ``failed.jsonl``. The walk stops at the first unit neither answered nor
    failed. ``dispatched``: the sample ids the run dispatched (rows and failed samples), for
    the block's ``n_answered``.

    Returns ``(monitor, block)``: ``block`` is the summary's ``sequential`` record as the
    run wrote it (:meth:`~evalkit.engine.sequential.Monitor.record`).

    Raises:
        ConfigError: the baseline is unusable (gone, another benchmark, a journal row that
            cannot count; :meth:`GateSetup.order`), one line.
        EvalkitError / ValueError / KeyError / OSError: the benchmark's data cannot be read
            or the settings do not fit it.
    """
    setup = GateSetup(bench, run)
    ordered = select_samples(load_unique(bench), run, order=setup.order)  # the gate's order and strata, as the run built them
    keys: dict[tuple[str, int], Any] = {(s.id, e): None for s in ordered for e in range(run.repeats)}
    keys.update({k: h for k, h in request_hashes.items() if k in keys})  # None: no row, the walk stops there
    plan = SimpleNamespace(samples=ordered, specs=SimpleNamespace(run=run), request_hashes=lambda: keys)
    monitor = Monitor(setup, plan, run_dir)
    return monitor, monitor.record(sum(s.id in dispatched for s in ordered))


@dataclass
class Recount:
    """A finished run's figures derived from its records alone (:func:`recount`): what a
    reader shows and gates on, and what its ``summary.json`` must agree with
    (:func:`check_summary`).

    Attributes:
        bench: the benchmark, rebuilt from the run's ``config.yaml``.
        samples: the run's samples (those with a journal row, and the failed ones), in the
            benchmark's order.
        epochs: their rows, one list per epoch (:meth:`evalkit.journal.Journal.epochs`).
        missing: ``(sample_id, epoch)`` of every answer without a row.
        metrics: the metrics of every epoch by the benchmark's rules, averaged, with the
            repeat figures (pass@k ...), as *finalize* computes them.
        partial_bounds: ``{metric: [low, high]}`` with every missing answer counted as 0 and
            as 1 (:func:`evalkit.report.figures.worst_case_bounds`; ``{}`` when complete).
    """

    bench: Any
    samples: list[Any]
    epochs: list[list[dict[str, Any]]]
    missing: list[tuple[str, int]]
    metrics: dict[str, float]
    partial_bounds: dict[str, list[float]]

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def failed_ids(self) -> list[str]:
        return list(dict.fromkeys(sid for sid, _ in self.missing))

    def counts(self) -> dict[str, int]:
        """The summary's counts (:mod:`evalkit.summary`) of these records."""
        n_failed = len(self.failed_ids)
        return {"n_samples": len(self.samples), "n_scored": len(self.samples) - n_failed, "n_failed": n_failed,
                "n_scored_rows": sum(len(rows) for rows in self.epochs), "n_failed_rows": len(self.missing)}  # fmt: skip


def recount(bench: Any, loaded: list[Any], rows: dict[tuple[str, int], dict[str, Any]], failed_ids: Iterable[str],
            repeats: int) -> Recount:  # fmt: skip
    """The figures of a run from its journal's ``rows`` (``{(sample_id, epoch): row}``, the
    rows that count): its samples are those of ``loaded`` (the benchmark's samples) with a
    row or among ``failed_ids`` (the samples it selected and could not score), its metrics
    :func:`epoch_mean` of :meth:`aggregate` per epoch plus the repeat figures, as *finalize*
    computes them (:func:`evalkit.engine.finalize.summarize`)."""
    chosen = {sid for sid, _ in rows} | set(failed_ids)
    samples = [s for s in loaded if s.id in chosen]
    epochs = Journal(Path("."), rows=rows).epochs(samples, repeats)
    missing = [(s.id, e) for s in samples for e in range(repeats) if (s.id, e) not in rows]
    metrics = epoch_mean([bench.aggregate(samples, records) for records in epochs])
    metrics.update(plan_figures(bench, samples, epochs, _NO_INTERVALS)["repeat"])
    return Recount(bench, samples, epochs, missing, metrics, worst_case_bounds(bench, samples, epochs, missing))


def _same(a: Any, b: Any) -> bool:
    """Two recorded figures agree: equal, or numbers within float rounding (a sum taken in
    another order), NaN agreeing with NaN."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def disagreement(field: str, recorded: Any, derived: Any) -> str:
    """``"n_scored is 40 in summary.json, its records give 38"``: one field that a summary
    records otherwise than its records give (values shortened and made printable)."""
    return f"{field} is {printable(repr(recorded), 80)} in summary.json, its records give {printable(repr(derived), 80)}"


def check_summary(summary: Summary, counted: Recount, where: Path | str, error: type[EvalkitError] = RunDirError) -> None:
    """Refuse a summary whose figures disagree with its records (:func:`recount`): its
    status (complete or not), counts, failed samples, headline and primary score (the
    benchmark's), every metric that both give (``metrics``, or an incomplete run's
    ``partial_metrics``; a reader shows the records' only) and the worst-case bounds it
    records. A reader then shows and gates on the records'
    figures only, and a summary edited to say otherwise never reaches a verdict.

    Raises:
        ``error`` (default RunDirError, exit 2): one line naming ``where`` and the first
            field that disagrees, with both values.
    """
    def refuse(field: str, recorded: Any, derived: Any) -> None:
        why = "the summary is not its run's record, not read"
        if summary.code_version and summary.code_version != code_version():  # or the rules changed since it was written
            why += (f" (it was written by evalkit {printable(summary.code_version, 40)}, this is {code_version()}: "
                    "python -m evalkit.rescore RUN shows what the code changed)")  # fmt: skip
        raise error(f"{printable(str(where))}: {disagreement(field, recorded, derived)}; {why}")

    if summary.complete != counted.complete:
        refuse("status", summary.status, "complete" if counted.complete else "incomplete")
    for field, value in counted.counts().items():
        if getattr(summary, field) != value:
            refuse(field, getattr(summary, field), value)
    if set(summary.failed_ids) != set(counted.failed_ids):
        refuse("failed_ids", sorted(set(summary.failed_ids))[:5], sorted(counted.failed_ids)[:5])
    bench = counted.bench
    if summary.headline is not None and summary.headline != bench.headline_metric:
        refuse("headline", summary.headline, bench.headline_metric)
    if summary.primary_score is not None and summary.primary_score != bench.primary_score:
        refuse("primary_score", summary.primary_score, bench.primary_score)
    field, prefix = ("metrics", "") if counted.complete else ("partial_metrics", "partial_")
    recorded = dict(summary.metrics) if counted.complete else dict(summary.partial_metrics or {})
    derived = {prefix + k: v for k, v in counted.metrics.items()}
    for name in [n for n in recorded if n in derived]:  # a figure one side lacks is never shown (older or newer code)
        if not _same(recorded[name], derived[name]):
            refuse(f"{field}.{name}", recorded[name], derived[name])
    if counted.complete and summary.partial_metrics:
        refuse("partial_metrics", dict(summary.partial_metrics), "none (the run is complete)")
    bounds = {f"partial_{k}": v for k, v in counted.partial_bounds.items()}
    for name, value in summary.partial_bounds.items():
        if name in bounds and not _same(list(value), bounds[name]):
            refuse(f"partial_bounds.{name}", list(value), bounds[name])


#: the run settings :func:`plan_figures` reads, with intervals off (rescore compares metrics only)
_NO_INTERVALS = SimpleNamespace(bootstrap_resamples=0, ci_level=0.95, seed=0)


def load_benchmark(run_dir: Path, data_dir: Path | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """The benchmark a run used, rebuilt from its ``config.yaml`` (``data_dir`` replaces
    where its data was found; ``overrides``, ``{key: value}``, replace those settings).

    Raises:
        RunDirError: the config cannot be read, names no known benchmark, or its settings
            do not validate (one line naming the key).
    """
    cfg = read_run_yaml(Path(run_dir) / "config.yaml")  # bounded (evalkit.untrusted.load_yaml)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("benchmark"), dict) or "name" not in cfg["benchmark"]:
        raise RunDirError(f"{run_dir}/config.yaml is not an evalkit run config (no benchmark.name)")
    bench_raw = _benchmark_settings(run_dir, cfg)
    if data_dir is not None:
        bench_raw["data_dir"] = str(data_dir)
    bench_raw.update(overrides or {})
    try:
        bench_cls = get_benchmark_class(str(bench_raw["name"]), kind=bench_raw.get("kind"))  # never a module: see evalkit.benchmarks
    except KeyError as exc:
        raise RunDirError(f"{run_dir}/config.yaml: {exc.args[0]}") from None
    try:
        settings = bench_cls.settings_model(**bench_raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        key = ".".join(map(str, err["loc"]))
        if err["loc"] and err["loc"][0] in (overrides or {}):  # the --set value is at fault, not the run's config
            raise ConfigError(f"--set benchmark.{key}={printable(repr(overrides[err['loc'][0]]), 200)}: {msg}") from None  # type: ignore[index]
        raise RunDirError(f"{run_dir}/config.yaml: benchmark.{key}: {msg}") from None
    return bench_cls(settings)


def _benchmark_settings(run_dir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """The benchmark settings a run used: ``benchmark`` of a resolved ``config.yaml``
    (format 2), or of an earlier one (format 1: raw layers) with its model's
    ``dataset_args`` applied as that run applied them."""
    if cfg.get("config_format") is not None:
        return dict(cfg["benchmark"])
    try:
        return dict(resolve_layers(cfg, get_benchmark_class)["benchmark"])
    except ConfigError as exc:
        raise RunDirError(f"{run_dir}/config.yaml: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalkit.rescore", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data-dir", type=Path, default=None, help="benchmark data (if not where the run found it)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="benchmark.KEY=VALUE",
                        help=f"score under a changed setting ({', '.join(SETTABLE)}) and write RUN_DIR/rescored/<value>/")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        overrides = parse_sets(args.sets)
        result = rescore(args.run_dir, args.data_dir, overrides)
        written = write_rescored(args.run_dir, result, overrides) if overrides else None
    except EvalkitError as exc:
        print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
        return 2
    names = sorted(set(result["metrics"]) | set(result["recorded"]))
    if not result.get("has_summary", True):  # interrupted: no recorded metrics to differ from
        print(f"evalkit: {printable(str(args.run_dir))} has no summary.json (the run did not finish; run.resume finishes "
              "it): its metrics are not compared, only each sample's verdict", file=sys.stderr)  # fmt: skip
    rows = []
    for name in names:
        new, old = result["metrics"].get(name), result["recorded"].get(name)
        same = old is not None and new is not None and abs(new - old) < 1e-12
        rows.append([name, old, new, "" if same or not result.get("has_summary", True) else "DIFFERS"])
    print(tabulate(rows, headers=["metric", "recorded", "rescored", ""], tablefmt="github", floatfmt=".4f"))
    if result["changed"]:
        print(f"{counted(len(result['changed']), 'sample verdict')} changed: {printable(', '.join(result['changed'][:20]))}")
    if rules_line(result.get("scoring_rules") or {}):
        print(printable(rules_line(result["scoring_rules"]), 2000))
    if result["unreadable"]:
        print(f"{counted(len(result['unreadable']), 'sample')} not rescored (side file unreadable or not as recorded): "
              f"{printable(', '.join(result['unreadable'][:20]))}")  # fmt: skip
    if written is not None:
        print(f"rescored run written to {printable(str(written))} (compare it with: "
              f"{printable(shell_line('python', '-m', 'evalkit.compare', args.run_dir, written))})")  # fmt: skip
        return 0
    extra = result.get("extra") or {}
    differs = bool(result["changed"]) or bool(result["unreadable"]) or any(r[3] for r in rows) \
        or bool(extra.get("unknown") or extra.get("outside") or extra.get("beyond") or extra.get("surplus"))  # fmt: skip
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
