"""Stage 3 of a run, *open*: choose the run directory (a new one, or the run being resumed,
checked to be a run of the same settings), then make it, log into it and write
``config.yaml``. Rules of resuming live here.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from evalkit import secrets
from evalkit.config import CONFIG_FORMAT
from evalkit.errors import RunDirError, RunDirWriteError, RunInterrupted, printable, resume_arg
from evalkit.untrusted import read_run_yaml
from evalkit.specs import RunDirSpec

log = logging.getLogger("evalkit")

PREDICTIONS = "predictions.jsonl"
FAILED = "failed.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.yaml"

#: config parts a resumed run may change: the selection, where things go, and how requests
#: are scheduled and retried (none of these changes what a request asks); ``layers`` is
#: provenance (a value moved between layers without changing what is sent is no change)
#: what may change on resume: how the run is driven, never what is asked; the backend's
#: driving knobs hold for the user simulator's backend too (``user.backend``: the model under
#: test plays ACEBench's user by default, so ``backend.concurrency=…`` changes both)
#: ``judge_qualification`` says whether a run may rest on its judges, not what they are asked (a
#: run begun under ``require: gate`` resumes under ``headline`` — and is checked again)
RESUMABLE_KEYS = {"run", "tracking", "runner", "hydra", "layers", "judge_qualification", "benchmark.score_budget_s",
                  "model.tokens_per_second", "user.model.tokens_per_second"} | {
    f"{side}backend.{k}"
    for side in ("", "user.")
    for k in ("concurrency", "adaptive_concurrency", "timeout_s", "max_retries", "retry_initial_wait_s",
              "retry_max_wait_s", "retry_budget_s")
}  # fmt: skip


@dataclass
class RunState:
    """An open run directory: where, whether resumed, and when this attempt started
    (``started_at`` ISO 8601 UTC to the millisecond, ``t0`` a ``perf_counter`` reading)."""

    run_dir: Path
    resumed: bool
    started_at: str
    t0: float


def _first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if f"{prefix}{key}" in RESUMABLE_KEYS:
                continue
            diff = _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
            if diff:
                return diff
        return None
    return None if a == b else prefix.rstrip(".")


def recorded_config(spec: RunDirSpec) -> dict[str, Any]:
    """What ``config.yaml`` holds: the resolved config that runs, secrets redacted."""
    return secrets.redact_config(spec.record)


def _check_resumable(run_dir: Path, spec: RunDirSpec) -> None:
    """Raises RunDirError unless ``run_dir`` is a run of the same settings as ``spec``'s."""
    try:
        prev = read_run_yaml(run_dir / CONFIG)  # bounded (evalkit.untrusted.load_yaml): a crafted file is one line
    except RunDirError as exc:
        raise RunDirError(f"run.resume: {exc}") from None
    if not isinstance(prev, dict) or not isinstance(prev.get("benchmark"), dict) or not isinstance(prev.get("model"), dict):
        raise RunDirError(f"run.resume: {run_dir}/{CONFIG} is not an evalkit run config")
    for key, now in (("benchmark", spec.benchmark), ("model", spec.model)):
        was = prev[key].get("name")
        if was != now:
            raise RunDirError(f"run.resume: {run_dir} is a run of {key}={was}, not {key}={now}")
    if prev.get("config_format") != CONFIG_FORMAT:
        raise RunDirError(
            f"run.resume: {run_dir} was written by an earlier evalkit (config format {prev.get('config_format', 1)}: "
            f"raw configuration layers, requests identified without their extra_body); it cannot be resumed by this "
            f"one (config format {CONFIG_FORMAT}) — start a new run; python -m evalkit.rescore still reads it"
        )
    diff = _first_difference(prev, recorded_config(spec))
    if diff:
        raise RunDirError(
            f"run.resume: {diff} differs from the run being resumed ({run_dir}); "
            "only run.*, runner.*, tracking.*, benchmark.score_budget_s and backend.{concurrency, "
            "adaptive_concurrency, timeout_s, max_retries, retry_*} (and user.backend's) may change on resume"
        )


def choose_run_dir(spec: RunDirSpec) -> tuple[Path, bool]:
    """The run directory and whether it is resumed; nothing is created yet.

    New runs go to ``<output_root>/runs/<benchmark>/<model>/<YYYYmmdd-HHMMSS>-<pid>``
    (``-2``, ``-3``… appended if a run of the same process started in the same second),
    or to ``run.dir``, which must not exist. A resumed run must have the same benchmark,
    model, generation and backend settings as the run it continues (:data:`RESUMABLE_KEYS`
    may change, e.g. a larger ``run.limit``).

    Raises:
        RunDirError: the directory exists, or the resume target is not a run of this
            configuration (or was written in an older config format), or holds a symbolic
            link (a resumed run writes its files again and never through a link).
    """
    if spec.resume is not None:
        run_dir = Path(spec.resume)
        _check_no_links(run_dir)
        _check_resumable(run_dir, spec)
        return run_dir, True
    if spec.dir is not None:
        run_dir = Path(spec.dir)
        if run_dir.exists():
            raise RunDirError(f"run.dir: {run_dir} already exists; use {resume_arg(run_dir)} to continue it")
        return run_dir, False
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    parent = spec.output_root / "runs" / spec.benchmark / spec.model
    run_dir = parent / f"{stamp}-{os.getpid()}"
    k = 2
    while run_dir.exists():
        run_dir = parent / f"{stamp}-{os.getpid()}-{k}"
        k += 1
    return run_dir, False


def _check_no_links(run_dir: Path) -> None:
    """Refuse to resume a run directory holding a symbolic link anywhere in it (a link
    planted as ``config.yaml``, ``evalkit.log`` or ``predictions.jsonl`` would have the
    resumed run write outside the directory): one line naming the first, nothing written.

    Raises:
        RunDirError: a link was found.
    """
    for top, dirs, files in os.walk(run_dir, followlinks=False):
        for name in sorted(dirs + files):
            if (Path(top) / name).is_symlink():
                raise RunDirError(f"run.resume: {printable(str(Path(top) / name))} is a symbolic link; evalkit never "
                                  "writes through links in a run directory (remove it to resume)")  # fmt: skip


def _setup_file_logging(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "evalkit.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(secrets.ScrubFilter())
    logging.getLogger().addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


def _keep_earlier_failures(run_dir: Path) -> None:
    """A resumed run retries the failures of earlier attempts: they become history
    (``failed.prev-<k>.jsonl``) and this attempt starts a new ``failed.jsonl``."""
    if (run_dir / FAILED).exists():
        k = 1
        while (run_dir / f"failed.prev-{k}.jsonl").exists():
            k += 1
        shutil.move(str(run_dir / FAILED), str(run_dir / f"failed.prev-{k}.jsonl"))
    (run_dir / FAILED).touch()


@contextmanager
def open_run(spec: RunDirSpec, run_dir: Path, resumed: bool) -> Iterator[RunState]:
    """Make (or reopen) ``run_dir``, log into its ``evalkit.log``, write ``config.yaml`` (on
    every attempt: it describes the latest one). Ctrl-C inside becomes
    :class:`~evalkit.errors.RunInterrupted` naming the directory to resume.

    Raises:
        RunDirError: the directory cannot be created.
        RunDirWriteError: a file of it could not be written later (its ``run_dir`` set here,
            so that its line names the resume).
    """
    if not resumed:
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            key = "run.dir" if spec.dir is not None else "run.output_root"
            raise RunDirError(f"{key}: cannot create {run_dir} ({exc.strerror or type(exc).__name__})") from None
    handler = _setup_file_logging(run_dir)
    try:
        text = yaml.safe_dump(recorded_config(spec), sort_keys=False, allow_unicode=True)
        (run_dir / CONFIG).write_text(text, encoding="utf-8")
        _keep_earlier_failures(run_dir)
        started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
        yield RunState(run_dir, resumed, started_at, time.perf_counter())
    except KeyboardInterrupt as exc:
        if isinstance(exc, RunInterrupted):
            raise
        log.info("interrupted; resume with run.resume=%s", run_dir)  # evalkit.log; the console gets one line
        raise RunInterrupted(run_dir) from exc
    except RunDirWriteError as exc:  # a full disk, an I/O error: one line naming the file and the resume
        exc.run_dir = run_dir
        raise
    except Exception as exc:  # a bug: __main__.report_crash appends its traceback to this run's evalkit.log
        exc.evalkit_run_dir = run_dir  # type: ignore[attr-defined]
        raise
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
