"""Command-line plumbing of ``python -m evalkit`` (and ``python -m evalkit.judge``): secrets
moved off the command line, the pre-check of a sweep's points, the console's logging, and the
one-line reports of an error and of a crash.

Every configuration mistake — an unknown key or group option, a wrong type, a broken
override, a missing mandatory value or credential, a missing data directory — ends as one
line ``evalkit: error: <key>: <reason>`` on stderr and exit code 2, before anything runs.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig

from evalkit import secrets
from evalkit.compose import compose, composition_error, quote_numeric_groups, resolve
from evalkit.errors import ConfigError, EvalkitError, first_line, printable
from evalkit.job import run_composed
from evalkit.specs import tracking_of
from evalkit.sweep import expand_sweep, swept_label, points_to_check, swept_keys
from evalkit.tracking import MlflowObserver
from evalkit.tracking.mlflow_tracking import StoreUnreachable


class _OneLineFormatter(logging.Formatter):
    """Console lines without tracebacks: those go to the run's ``evalkit.log`` only."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def report_crash(exc: BaseException) -> int:
    """Report an unexpected exception (a bug, not a config or data error) as one line on
    stderr and return exit code 1. The traceback is never printed: it is appended, secrets
    scrubbed, to the run's ``evalkit.log`` when the run had its directory (engine/run.py
    tags the exception with ``evalkit_run_dir``), else to a new ``evalkit-crash-*.log`` in
    the temporary directory; the line names that file."""
    run_dir = getattr(exc, "evalkit_run_dir", None)
    text = secrets.scrub("".join(traceback.format_exception(exc)))
    entry = f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR evalkit: unexpected error; the run stopped\n{text}"
    if run_dir is not None and Path(run_dir).is_dir():
        where = Path(run_dir) / "evalkit.log"
        with where.open("a", encoding="utf-8") as fh:
            fh.write(entry)
    else:
        with tempfile.NamedTemporaryFile("w", prefix="evalkit-crash-", suffix=".log", delete=False, encoding="utf-8") as fh:
            fh.write(entry)
        where = Path(fh.name)
    what = printable(secrets.scrub(f"{type(exc).__name__}: {first_line(exc, 200)}"))
    print(f"evalkit: error: unexpected error ({what}); the traceback is in {where}", file=sys.stderr)
    return 1


def console_logging() -> None:
    """The console of a command: WARNING lines without tracebacks (those go to the run's
    ``evalkit.log`` only), and ``evalkit: <message>`` status lines (what is starting: Ray,
    model workers, llama.cpp's server; INFO only), which also propagate to ``evalkit.log``."""
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    console.setFormatter(_OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[console])
    status = logging.StreamHandler(sys.stderr)
    status.addFilter(lambda record: record.levelno < logging.WARNING)
    status.setFormatter(_OneLineFormatter("evalkit: %(message)s"))
    logging.getLogger("evalkit.status").addHandler(status)
    logging.getLogger("evalkit.status").setLevel(logging.INFO)


def hide_secret_overrides(args: Sequence[str], environ: Any = None) -> list[str]:
    """Move secret values given on the command line (``backend.api_key=sk-...``) into
    environment variables and leave an ``${oc.env:...}`` interpolation in their place, so
    that Hydra's own records of the overrides (``multirun.yaml``, sweep configs) never
    hold the value. The value is registered for scrubbing as well."""
    environ = os.environ if environ is None else environ
    out = []
    for i, arg in enumerate(args):
        key, sep, value = arg.partition("=")
        leaf = key.lstrip("+~").rsplit(".", 1)[-1]
        if sep and value and not value.startswith("${") and secrets.is_secret_key(leaf):
            var = f"EVALKIT_SECRET_{i}"
            environ[var] = value
            secrets.register(value)
            out.append(f"{key}=${{oc.env:{var}}}")
        else:
            out.append(arg)
    return out


def run_config(cfg: DictConfig) -> int:
    """Validate and run one composed config; returns the process exit code.

    0 complete, 1 incomplete (failures recorded in failed.jsonl), 2 configuration or data
    error (nothing was run), 3 batches submitted and left running (``run.batch_detach``:
    :data:`evalkit.engine.run.DETACHED_EXIT_CODE`), 130 interrupted (the journal is kept;
    resume it)."""
    outcome = run_composed(cfg, finished=lambda result: finished_quietly(result.exit_code, result.run_dir))
    finished_quietly(outcome.exit_code, getattr(outcome, "run_dir", None))  # a dry run's too
    return outcome.exit_code


def finished_quietly(code: int, run_dir: Any = None) -> None:
    """Once the outcome line is printed, a Ctrl-C (while Python, Ray and MLflow shut down)
    ends the process with one line and the run's own exit code ``code``: the run has
    finished, nothing is lost (it once gave exit 130 and no message). Main thread only."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def _stop(signum: int, frame: Any) -> None:
        sys.stdout.flush()
        kept = f"; its results are in {run_dir}" if run_dir is not None else ""
        print(f"evalkit: interrupted after the run finished{kept}", file=sys.stderr, flush=True)
        os._exit(code)

    signal.signal(signal.SIGINT, _stop)


def _sweep_points(overrides: Sequence[str]) -> list[list[str]]:
    try:
        return expand_sweep(quote_numeric_groups(overrides))
    except Exception as exc:  # noqa: BLE001 - parse errors and unsupported sweep types
        raise ConfigError(composition_error(overrides, exc)) from None


def precheck_sweep(overrides: Sequence[str]) -> int:
    """Compose and validate the points of a sweep (all of a small one; of a large one the
    first point and each distinct value) so that a bad override is one line before any job
    runs; then check each distinct tracking store once (this may create it: only once every
    point is valid). Returns the number of points checked.

    Raises:
        ConfigError / TrackingError: naming the point and the problem.
    """
    points = _sweep_points(overrides)
    checked = points_to_check(points)
    swept = swept_keys(points)

    def at_point(exc: EvalkitError, point: list[str]) -> EvalkitError:
        label = swept_label(point, swept)
        return type(exc)(f"{exc}{f' (sweep point {label})' if label else ''}")

    valid: list[tuple[list[str], Any]] = []
    for point in checked:
        try:
            valid.append((point, resolve(compose(point))[1]))
            if valid[-1][1].run.dry_run:
                raise ConfigError("run.dry_run: a sweep (-m) is not dry-run; dry-run its points one at a time (without -m)")
        except ConfigError as exc:
            raise at_point(exc, point) from None
    stores: set[tuple[str, str, str]] = set()
    for point, validated in valid:
        if validated.tracking.kind != "mlflow":
            continue
        observer = MlflowObserver.from_spec(tracking_of(validated))
        store = (observer.uri, observer.experiment, observer.artifact_root)
        if store in stores:
            continue
        stores.add(store)
        try:
            observer.check()
        except StoreUnreachable:
            continue  # a server that is down does not stop the sweep: each job says so and how to log it later
        except EvalkitError as exc:
            raise at_point(exc, point) from None
    return len(checked)


def report_error(exc: EvalkitError) -> int:
    """Print ``evalkit: error: <one line>`` on stderr (data in it escaped,
    :func:`~evalkit.errors.printable`); returns the exit code (2)."""
    print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
    return exc.exit_code
