"""Sweeps: ``python -m evalkit -m benchmark=ke model=reference,baseline_file_read shots=0,3``.

Hydra's multirun runs one job per point of the sweep; evalkit adds, for any launcher:

* each job's run directory is Hydra's job directory ``<sweep dir>/<num>-<benchmark>-<model>-shots<k>``
  (``hydra.sweep.subdir``); the response cache stays the shared ``<output_root>/cache``;
* :class:`SweepCallback` (``hydra.callbacks.sweep``) runs in the sweep's driver process: at the
  start it tells the tracking observer (MLflow opens one *parent run* for the sweep, tags
  ``sweep=<sweep id>``, ``evalkit.kind=sweep``) and writes ``<sweep dir>/sweep.json`` with
  what the observer returned; every job reads ``sweep.json`` and hands it to its own
  observer, so its MLflow run is the parent's child (``mlflow.parentRunId``) also when jobs
  run in other processes or on other machines sharing the file system;
* a job never stops the sweep: :func:`run_job` records its outcome in
  ``<sweep dir>/jobs/<num>.json`` (overrides with secrets redacted, run dir, status, exit code,
  error line, headline metric) and returns;
* at the end the callback writes ``sweep_summary.json`` and ``sweep_report.md`` and tells the
  observer (MLflow logs them and ``n_jobs`` / ``n_complete_jobs`` / ``n_failed_jobs`` /
  ``job<num>.<headline>`` to the parent run and ends it — FINISHED if every job completed,
  FAILED otherwise, KILLED when interrupted); the process exits 1 naming each failed job on
  stderr (:func:`exit_code`).

The sweep id is the sweep directory's name (``<YYYYmmdd-HHMMSS>`` by default).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict

from evalkit import secrets
from evalkit.compare import flips, load_run, paired_stats
from evalkit.engine import session
from evalkit.errors import DataError, EvalkitError, counted, first_line, printable, resume_arg, shell_line
from evalkit.report.markdown import md_code, md_text
from evalkit.specs import tracking_of
from evalkit.stats import adjust, with_interval
from evalkit.job import run_composed
from evalkit.summary import MAX_SUMMARY_BYTES
from evalkit.tracking import make_observer, sweep_observer
from evalkit.tracking.mlflow_tracking import bound_hit
from evalkit.untrusted import read_json

log = logging.getLogger("evalkit")

SWEEP_FILE = "sweep.json"
JOBS_DIR = "jobs"
SWEEP_SUMMARY = "sweep_summary.json"
SWEEP_REPORT = "sweep_report.md"
#: a job's status when its run completed but its MLflow logging failed (issue 47): not complete;
#: its line names the ``python -m evalkit.track`` command that logs it later
UNTRACKED = "untracked"
#: above this many points the pre-check composes the first point and each distinct value only
PRECHECK_ALL_UP_TO = 64

_exit_code = 0
#: the sweep this process drives, between on_multirun_start and on_multirun_end
_active: Path | None = None


def exit_code() -> int:
    """Exit code of the last sweep that ended in this process: 0 every job complete, 1 not."""
    return _exit_code


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(secrets.scrub_obj(obj), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------
# overrides
# ------------------------------------------------------------------------------------------
def redact_overrides(overrides: Sequence[str]) -> list[str]:
    """Overrides as they may be written down: secret-looking keys get ``***`` (also when
    their value is the ``${oc.env:EVALKIT_SECRET_n}`` left by ``hide_secret_overrides``, and
    nested: ``judge_overrides=['backend.api_key=***']``; :func:`evalkit.secrets.redact_line`)."""
    out = []
    for ov in overrides:
        key, sep, value = ov.partition("=")
        leaf = key.lstrip("+~").rsplit(".", 1)[-1]
        out.append(f"{key}={secrets.REDACTED}" if sep and value and secrets.is_secret_key(leaf) else secrets.redact_line(ov))
    return out


def expand_sweep(overrides: Sequence[str]) -> list[list[str]]:
    """Every point of a sweep, in Hydra's job order (``BasicSweeper.split_arguments``):
    ``["model=a,b", "shots=0,3"]`` → ``[["model=a", "shots=0"], ["model=a", "shots=3"], ...]``.

    Raises:
        hydra.errors.HydraException / OverrideParseException: as Hydra's parser does.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    (points,) = BasicSweeper.split_arguments(parsed, None)
    return points


def swept_keys(points: Sequence[Sequence[str]]) -> set[str]:
    """The override keys whose value differs between the points of a sweep."""
    values: dict[str, set[str]] = {}
    for point in points:
        for ov in point:
            values.setdefault(ov.partition("=")[0], set()).add(ov)
    return {k for k, v in values.items() if len(v) > 1}


def swept_label(point: Sequence[str], swept: set[str]) -> str:
    """``model=a shots=3``: a point's values of the swept keys only (secrets redacted; the whole
    point as a label is :func:`evalkit.tracking.curate.point_label`)."""
    return " ".join(_shown(ov) for ov in redact_overrides(point) if ov.partition("=")[0] in swept)


def points_to_check(points: list[list[str]]) -> list[list[str]]:
    """All points of a small sweep; of a large one the first point plus, for each value of
    each swept key, the first point with that value."""
    if len(points) <= PRECHECK_ALL_UP_TO:
        return points
    chosen: dict[tuple[str, ...], None] = {tuple(points[0]): None}
    for i in range(len(points[0])):
        seen = {points[0][i]}
        for p in points:
            if p[i] not in seen:
                seen.add(p[i])
                chosen.setdefault(tuple(points[0][:i] + [p[i]] + points[0][i + 1 :]), None)
    return [list(p) for p in chosen]


# ------------------------------------------------------------------------------------------
# the job (runs wherever the launcher runs it)
# ------------------------------------------------------------------------------------------
def read_sweep_file(sweep_dir: Path) -> dict[str, Any] | None:
    try:
        return read_json(Path(sweep_dir) / SWEEP_FILE, MAX_SUMMARY_BYTES, root=sweep_dir, follow=False,
                         what="a sweep.json", finite=False)  # fmt: skip
    except DataError:
        return None


def _job_record(hc: Any) -> dict[str, Any]:
    return {
        "num": int(hc.job.num),
        "overrides": redact_overrides(list(hc.overrides.task)),
        "run_dir": None,
        "status": "error",
        "exit_code": 2,
        "error": None,
        "headline": None,
        "headline_value": None,
        "started_at": _now(),
    }


def _job_config(cfg: DictConfig, sweep_dir: Path, job_dir: Path) -> DictConfig:
    """The job's config: it joins the sweep, and its run directory is Hydra's job directory,
    named as the sweep's directory was given (:func:`_as_given`)."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.run.sweep_dir = str(sweep_dir)
        if cfg.run.dir is None and cfg.run.resume is None:
            # Hydra made the job's directory (empty); evalkit's run directory must be new
            if job_dir.is_dir() and not any(job_dir.iterdir()):
                job_dir.rmdir()
            cfg.run.dir = str(_as_given(sweep_dir, job_dir))
    return cfg


def _as_given(sweep_dir: Path, job_dir: Path) -> Path:
    """``job_dir`` (Hydra's, absolute) as ``<sweep dir>/<its name>`` in the form the sweep's
    directory was given — relative to the working directory under a relative
    ``run.output_root``, as a single run's directory is — when that names the same
    directory from here; else ``job_dir`` as it is (issue 48: a single run's paths were
    relative, a sweep job's absolute)."""
    given = sweep_dir / job_dir.name
    return given if given.resolve() == job_dir.resolve() else job_dir


def _record_result(record: dict[str, Any], result: Any) -> None:
    """The job's record of a finished run (``result``: an :class:`~evalkit.engine.run.RunResult`)."""
    s = result.typed
    if s is None:  # batches left running at the provider (run.batch_detach): no summary yet
        record.update(run_dir=str(result.run_dir), status="batch_submitted", exit_code=result.exit_code)
        return
    record.update(
        run_dir=str(result.run_dir),
        status=s.status,
        exit_code=result.exit_code,
        headline=s.headline,
        headline_value=s.headline_value,
        headline_ci=s.metrics_ci.get(s.headline) if s.complete and s.headline else None,
        n_samples=s.n_samples,
        n_failed=s.n_failed,
    )
    if not s.complete:
        record["error"] = f"{s.count_line()}; resume with {resume_arg(result.run_dir)}"
    failure = getattr(result, "tracking_failure", None)
    if failure:  # issue 47: a job whose tracking failed is never reported complete
        record["tracking_error"] = secrets.scrub(failure.removeprefix("evalkit: warning: tracking: "))
        if s.complete:
            record.update(status=UNTRACKED, error=record["tracking_error"])


def run_job(cfg: DictConfig) -> None:
    """The task function of a multirun job: run ``cfg`` into the job's directory and record
    the outcome in ``<sweep dir>/jobs/<num>.json``. Never raises for an evalkit error, an
    incomplete run or a bug (the other jobs must run); only an interrupt propagates."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    sweep_dir = Path(hc.sweep.dir)
    record = _job_record(hc)
    jobs = sweep_dir / JOBS_DIR
    jobs.mkdir(parents=True, exist_ok=True)
    cfg = _job_config(cfg, sweep_dir, Path(hc.runtime.output_dir))
    info = read_sweep_file(sweep_dir) or {"sweep_id": sweep_dir.name, "sweep_dir": str(sweep_dir.resolve())}
    try:
        # the session the sweep's callback opened (its jobs run in this process), passed in
        _record_result(record, run_composed(cfg, sweep=info, shared=session.current()))
    except EvalkitError as exc:
        print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
        record.update(exit_code=exc.exit_code, error=secrets.scrub(str(exc)))
    except KeyboardInterrupt:
        target = cfg.run.resume or cfg.run.dir
        run_dir = Path(str(target))
        if target and (run_dir / "config.yaml").is_file():
            record.update(run_dir=str(run_dir), error=f"interrupted; resume with {resume_arg(run_dir)}")
        record.update(status="interrupted", exit_code=130, error=record["error"] or "interrupted", finished_at=_now())
        _write_json(jobs / f"{record['num']}.json", record)
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in one job must not stop the others
        record.update(exit_code=1, error=secrets.scrub(f"{type(exc).__name__}: {first_line(exc)}"))
        record["traceback"] = secrets.scrub(traceback.format_exc())
        print(f"evalkit: error: job {record['num']}: {printable(record['error'])}", file=sys.stderr)
    if record["run_dir"] is None and cfg.run.dir and (Path(str(cfg.run.dir)) / "summary.json").is_file():
        record["run_dir"] = str(cfg.run.dir)  # e.g. the run finished but MLflow logging failed
    for key in ("benchmark", "model"):
        record[key] = str(cfg[key].get("name")) if key in cfg else None
    record["shots"] = cfg.shots.get("n") if "shots" in cfg else None
    record["finished_at"] = _now()
    _write_json(jobs / f"{record['num']}.json", record)


# ------------------------------------------------------------------------------------------
# the driver's callback
# ------------------------------------------------------------------------------------------
def _expected_points(config: DictConfig) -> list[list[str]] | None:
    """The points the basic sweeper will launch (None for another sweeper)."""
    sweeper = str(config.hydra.sweeper.get("_target_", ""))
    if not sweeper.endswith("BasicSweeper"):
        return None
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    try:
        return expand_sweep(params + list(config.hydra.overrides.task))
    except Exception:  # noqa: BLE001 - Hydra itself reports a bad sweep
        return None


class SweepCallback(Callback):
    """``hydra.callbacks.sweep``: the sweep's MLflow parent run and its summary."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _exit_code, _active
        _exit_code = 0
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if (sweep_dir / SWEEP_FILE).exists():
            print(
                f"evalkit: error: hydra.sweep.dir: {sweep_dir} already holds a sweep; pick another directory",
                file=sys.stderr,
            )
            sys.exit(2)
        points = _expected_points(config)
        info: dict[str, Any] = {
            "sweep_id": sweep_dir.name,
            "sweep_dir": str(sweep_dir.resolve()),
            "started_at": _now(),
            "overrides": redact_overrides(list(config.hydra.overrides.task)),
            "points": [redact_overrides(p) for p in points] if points is not None else None,
            "suite": None,
            "tracking_uri": None,
            "experiment": None,
            "parent_run_id": None,
        }  # fmt: skip
        try:
            info["suite"] = config.run.get("suite")
        except Exception:  # noqa: BLE001 - a broken interpolation is the jobs' error to report
            pass
        info.update(make_observer(tracking_of(config)).sweep_started(sweep_dir, info))
        _write_json(sweep_dir / SWEEP_FILE, info)
        _active = sweep_dir
        if str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher"):
            session.begin()  # the jobs run here, one after another: they share Ray, servers and workers

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _exit_code, _active
        sweep_dir = Path(str(config.hydra.sweep.dir))
        _active = None
        session.end()
        summary = _finish(sweep_dir)
        failed = [j for j in summary["jobs"] if j["status"] != "complete"]
        for job in failed:
            print(
                f"evalkit: sweep {summary['sweep_id']}: job {job['num']} ({' '.join(job['point'] or job['overrides'])}) "
                f"{job['status']}: {printable(job.get('error') or 'no reason recorded')}",
                file=sys.stderr,
            )
        print(sweep_outcome_line(summary, len(failed), sweep_dir / SWEEP_SUMMARY), file=sys.stderr if failed else sys.stdout)
        if failed:
            _exit_code = 1


def sweep_outcome_line(summary: dict[str, Any], n_failed: int, path: Path) -> str:
    """The sweep's last console line: ``2 of 4 jobs failed → PATH`` (``n_failed`` of the
    summary's ``n_jobs``), else ``all 4 jobs complete → PATH`` (``1 job complete`` for one);
    nouns in the number English gives them (:func:`evalkit.errors.counted`). Jobs whose run
    completed but whose MLflow logging failed (:data:`UNTRACKED`, among the ``n_failed``) are
    said apart, with the one command that logs them all:
    ``1 of 4 jobs failed; 2 ran to the end but are NOT TRACKED in MLflow (log them with: …)``."""
    n_jobs = summary["n_jobs"]
    untracked = [j for j in summary.get("jobs") or [] if j.get("status") == UNTRACKED]
    if untracked:
        failed = n_failed - len(untracked)
        head = f"{failed} of {counted(n_jobs, 'job')} failed; {len(untracked)}" if failed else f"{len(untracked)} of {counted(n_jobs, 'job')}"
        dirs = [str(j["run_dir"]) for j in untracked if j.get("run_dir")]
        uri = summary.get("tracking_uri")
        how = (f"log them with: {shell_line('python', '-m', 'evalkit.track', '--tracking-uri', secrets.scrub(str(uri)), *dirs)}"
               if uri and dirs else "each job's line above names the command that logs it")  # fmt: skip
        return f"evalkit: sweep {summary['sweep_id']}: {head} ran to the end but NOT TRACKED in MLflow ({how}) → {path}"
    if n_failed:
        return f"evalkit: sweep {summary['sweep_id']}: {n_failed} of {counted(n_jobs, 'job')} failed → {path}"
    return f"evalkit: sweep {summary['sweep_id']}: {'all ' if n_jobs != 1 else ''}{counted(n_jobs, 'job')} complete → {path}"


def _finish(sweep_dir: Path, interrupted: bool = False) -> dict[str, Any]:
    """Write ``sweep_summary.json`` / ``sweep_report.md`` and end the parent run."""
    info = read_sweep_file(sweep_dir) or {"sweep_id": sweep_dir.name, "sweep_dir": str(sweep_dir.resolve())}
    summary = summarize(sweep_dir, info, interrupted)
    _write_json(sweep_dir / SWEEP_SUMMARY, summary)
    (sweep_dir / SWEEP_REPORT).write_text(secrets.scrub(report_markdown(summary)), encoding="utf-8")
    status = "KILLED" if interrupted else ("FINISHED" if summary["status"] == "complete" else "FAILED")
    try:
        sweep_observer(info).sweep_finished(sweep_dir, info, summary, status)
    except Exception as exc:  # noqa: BLE001 - the sweep's results are on disk regardless
        why = bound_hit(exc) or f"{type(exc).__name__}: {first_line(exc)}"  # a server that trickles or floods: its bound
        print(f"evalkit: warning: MLflow logging of the sweep failed ({printable(secrets.scrub(why))})", file=sys.stderr)
    return summary


def abort() -> None:
    """The sweep this process drives was interrupted (or Hydra gave up on it): record what
    ran, mark the rest ``not_run`` and end the parent run KILLED. No-op outside a sweep."""
    global _active
    if _active is None:
        return
    sweep_dir, _active = _active, None
    session.end()
    summary = _finish(sweep_dir, interrupted=True)
    print(
        f"evalkit: sweep {summary['sweep_id']}: stopped after {summary['n_jobs'] - summary['n_failed_jobs']} complete "
        f"of {summary['n_jobs']} jobs → {sweep_dir / SWEEP_SUMMARY}",
        file=sys.stderr,
    )


def summarize(sweep_dir: Path, info: dict[str, Any], interrupted: bool = False) -> dict[str, Any]:
    """``sweep_summary.json``: one entry per job, including the ones that left no record
    (status ``lost``: the job's process died; ``not_run``: the sweep was interrupted first)."""
    jobs: dict[int, dict[str, Any]] = {}
    for path in (sweep_dir / JOBS_DIR).glob("*.json"):
        try:
            rec = read_json(path, MAX_SUMMARY_BYTES, root=sweep_dir, follow=False, what="a job record", finite=False)
            jobs[int(rec["num"])] = rec
        except (DataError, ValueError, KeyError, TypeError):
            continue
    for num, point in enumerate(info.get("points") or []):
        if num not in jobs:
            status, why = ("not_run", "the sweep was interrupted") if interrupted else ("lost", "the job left no record (its process died)")
            jobs[num] = {"num": num, "overrides": point, "run_dir": None, "status": status, "exit_code": None,
                         "error": why, "headline": None, "headline_value": None}  # fmt: skip
    ordered = [jobs[k] for k in sorted(jobs)]
    swept = swept_keys([j.get("overrides") or [] for j in ordered])
    for j in ordered:  # what sets this job apart: its values of the swept keys
        j["point"] = swept_label(j.get("overrides") or [], swept).split()
    n_complete = sum(j["status"] == "complete" for j in ordered)
    paired = paired_headlines(ordered, swept)
    multiplicity = adjust_sweep(paired)
    return {
        "sweep_id": info.get("sweep_id"),
        "sweep_dir": info.get("sweep_dir"),
        "suite": info.get("suite"),
        "started_at": info.get("started_at"),
        "finished_at": _now(),
        "overrides": info.get("overrides") or [],
        "tracking_uri": info.get("tracking_uri"),
        "parent_run_id": info.get("parent_run_id"),
        "status": "complete" if ordered and n_complete == len(ordered) and not interrupted else "failed",
        "n_jobs": len(ordered),
        "n_complete_jobs": n_complete,
        "n_failed_jobs": len(ordered) - n_complete,
        "jobs": [{k: v for k, v in j.items() if k != "traceback"} for j in ordered],
        "paired": paired,
        "multiplicity": multiplicity,
    }


def adjust_sweep(paired: list[dict[str, Any]]) -> dict[str, Any]:
    """Holm and Benjamini–Hochberg adjusted p over the sweep's paired headline comparisons
    (the family: every comparison with a p-value), written into each entry as ``p_holm``
    and ``p_bh``; returns ``{"family", "family_size", "methods"}``."""
    ps = {str(i): p.get("p") for i, p in enumerate(paired)}
    adjusted = adjust(ps)
    for i, adj in adjusted.items():
        paired[int(i)]["p_holm"], paired[int(i)]["p_bh"] = adj["holm"], adj["bh"]
    return {"family": "every paired headline comparison of this sweep with a p-value", "family_size": len(adjusted),
            "methods": ["holm (family-wise error)", "bh (Benjamini–Hochberg, false discovery rate)"]}  # fmt: skip


def _point(job: dict[str, Any]) -> dict[str, str]:
    return dict(ov.partition("=")[::2] for ov in job.get("overrides") or [])


def _baseline_of(job: dict[str, Any], key: str, first: str | None, candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The job among ``candidates`` that differs from ``job`` only in ``key``, where ``key``
    has its first value ``first`` (``None`` when ``job`` is at that value itself)."""
    values = _point(job)
    if values.get(key) == first:
        return None
    for other in candidates:
        ov = _point(other)
        if ov.get(key) == first and all(ov.get(k) == v for k, v in values.items() if k != key):
            return other
    return None


def paired_headlines(jobs: list[dict[str, Any]], swept: set[str]) -> list[dict[str, Any]]:
    """For every complete job and swept key, the paired comparison of its headline with the
    job that differs only in that key, at the key's first value: ``{"key", "base", "job",
    "headline", "delta", "low", "high", "p", "test"}`` (:func:`evalkit.compare.paired_stats`)."""
    out: list[dict[str, Any]] = []
    done = [j for j in jobs if j.get("status") in ("complete", UNTRACKED) and j.get("run_dir")]
    firsts = {key: next((_point(j)[key] for j in jobs if key in _point(j)), None) for key in swept}
    plans: dict[Path, Any] = {}
    for job in done:
        for key in sorted(swept):
            base = _baseline_of(job, key, firsts[key], done)
            if base is None:
                continue
            try:
                run_a, run_b = load_run(base["run_dir"]), load_run(job["run_dir"])
                level = run_b.summary.ci_level
                result = paired_stats(run_a, run_b, level=level, plans=plans)
            except Exception as exc:  # noqa: BLE001 - the sweep's summary is written whatever a comparison meets
                out.append({"key": key, "base": base["num"], "job": job["num"], "error": f"{type(exc).__name__}: {first_line(exc)}"})
                continue
            m = (result.get("metrics") or {}).get(job.get("headline"))
            if m is None:
                out.append({"key": key, "base": base["num"], "job": job["num"], "error": result.get("error", "no paired headline")})
                continue
            out.append({"key": key, "base": base["num"], "job": job["num"], "headline": job["headline"], "level": level,
                        "notes": result.get("notes") or [], "flips": _flip_ids(run_a, run_b),
                        **({"instrument_changed": result["instrument_changed"]} if result.get("instrument_changed") else {}),
                        **{k: m.get(k) for k in ("delta", "low", "high", "p", "test", "n", "mde")}})  # fmt: skip
    return out


def _flip_ids(run_a: Any, run_b: Any) -> dict[str, Any]:
    """The flips of a sweep's paired comparison (:func:`evalkit.compare.flips`, BASE = ``a``):
    ``{"score", "a_better": [{"sample_id", "subset", "a", "b"}], "b_better": [...]}``, logged
    as the comparison's ``tables/flips.json``; ``{}`` when they cannot be told (no primary score)."""
    try:
        found = flips(run_a, run_b)
    except EvalkitError:
        return {}
    return {k: found[k] for k in ("score", "a_better", "b_better")}


def _shown(override: str) -> str:
    """``shots='3'`` → ``shots=3`` (the quotes are only for Hydra's grammar)."""
    key, _, value = override.partition("=")
    if len(value) >= 2 and value[0] == value[-1] == "'" and value[1:-1].isdigit():
        return f"{key}={value[1:-1]}"
    return override


#: a SHA-256 hex digest standing alone in a text (a prompt hash, a data fingerprint)
_DIGEST = re.compile(r"(?<![0-9a-fA-F])[0-9a-f]{64}(?![0-9a-fA-F])")


def short_hashes(text: str) -> str:
    """``text`` with each 64-hex digest in it cut to its first 12 characters and ``…``, as
    the other reports show them (``sweep_summary.json`` keeps them whole)."""
    return _DIGEST.sub(lambda m: m.group(0)[:12] + "…", text)


def report_markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"# Sweep {md_text(summary['sweep_id'])}",
        "",
        f"{summary['n_complete_jobs']} of {counted(summary['n_jobs'], 'job')} complete. Overrides: {md_code(' '.join(summary['overrides']))}",
        "",
        "| job | swept overrides | status | headline | value [interval] | run dir |",
        "|---|---|---|---|---|---|",
    ]
    for j in summary["jobs"]:
        value, ci = j.get("headline_value"), j.get("headline_ci")
        shown = with_interval(value, ci) if isinstance(value, (int, float)) else (j.get("error") or "")
        run = Path(j["run_dir"]).name if j.get("run_dir") else ""
        lines.append(f"| {j['num']} | {md_code(' '.join(j['point']) or ' '.join(j['overrides']), in_table=True)} | {j['status']} | {md_text(j.get('headline') or '')} | {md_text(shown)} | {md_text(run)} |")
    if summary.get("paired"):
        multi = summary.get("multiplicity") or {}
        lines += ["", "Paired against the first value of each swept key (Δ = job − base, over the samples scored in both; "
                  f"each row's interval at its runs' `run.ci_level`; p adjusted by Holm and Benjamini–Hochberg over "
                  f"{multi.get('family_size', 0)} comparisons, {multi.get('family', 'the sweep')}):", "",
                  "| key | base job | job | Δ headline [interval] | level | p | p Holm | p BH | test | notes |",
                  "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for p in summary["paired"]:
            if "error" in p:
                lines.append(f"| {md_text(p['key'])} | {p['base']} | {p['job']} | {md_text(short_hashes(p['error']))} | | | | | | |")
                continue
            shown = (f"{p['delta']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}]" if p.get("low") is not None
                     else "no paired samples" if p.get("delta") is None else f"{p['delta']:+.4f} (not estimable)")  # fmt: skip
            fmt = lambda x: f"{x:.4g}" if isinstance(x, (int, float)) else ""  # noqa: E731
            lines.append(f"| {md_text(p['key'])} | {p['base']} | {p['job']} | {shown} | {int(round(100 * p.get('level', 0.95)))}% | "
                         f"{fmt(p.get('p'))} | {fmt(p.get('p_holm'))} | {fmt(p.get('p_bh'))} | {md_text(p['test'])} | "
                         f"{md_text(short_hashes('; '.join(p.get('notes') or [])))} |")  # fmt: skip
    return "\n".join(lines) + "\n"

