"""Log finished runs to MLflow, or complete their logging — for runs made with
``tracking=none``, or whose store could not be reached when they ended.

    python -m evalkit.track RUN_DIR [RUN_DIR ...] [--tracking-uri URI] [--experiment NAME]
                            [--artifact-root URI] [--no-traces]

Each run is logged by the same observer a run uses (:class:`~evalkit.tracking.MlflowObserver`)
into the run's own tracking settings (``config.yaml``'s ``tracking.*``; for a run made with
``tracking=none``, the default store ``sqlite:///<run.output_root>/mlflow.db``), unless the
options name another store. Logging is idempotent: the run's ``tracking.json`` records the
MLflow run and each trace logged, so a second call adds nothing (and a run resumed since
gets only its new samples). The selection and the prompts of the traces are rebuilt from
the benchmark's data, as the run built them; when the data cannot be read any more, the
traces carry no prompt (one note line says so).

Output: one line per run (``evalkit: tracked <dir> → MLflow run <id> (<store>)``) or one
error line. Exit code: 0 every run logged, 1 some run's logging failed, 2 a directory that
is not a finished run (no ``config.yaml`` or ``summary.json``) or a bad store.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from evalkit import secrets
from evalkit.benchmarks import get_benchmark_class
from evalkit.config import EvalConfig
from evalkit.engine.plan import prepare
from evalkit.errors import EvalkitError, RunDirError, first_line
from evalkit.journal import read_run_journal
from evalkit.summary import validate_summary
from evalkit.tracking import MlflowObserver
from evalkit.tracking.mlflow_tracking import artifact_root, tracking_uri


def read_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config.yaml, summary.json)`` of a finished run.

    Raises:
        RunDirError: either file is missing or unreadable, the summary does not validate
            (:class:`evalkit.summary.Summary`), or a journal row cannot count (:mod:`evalkit.journal`).
    """
    try:
        recorded = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        raw = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:
        raise RunDirError(f"{run_dir}: not a finished evalkit run (config.yaml and summary.json needed; {type(exc).__name__})") from None
    if not isinstance(recorded, dict) or not isinstance(raw, dict) or "status" not in raw:
        raise RunDirError(f"{run_dir}: not a finished evalkit run (config.yaml or summary.json malformed)")
    summary = validate_summary(raw, run_dir / "summary.json")
    read_run_journal(run_dir, summary.stale_lines)  # a row that cannot count: one line, before anything is logged
    return recorded, summary.record()


def run_config(recorded: dict[str, Any]) -> EvalConfig:
    """The run's config from ``config.yaml`` (resolved, format 2), without the checks of a
    new run (credentials need not be set to read the data again).

    Raises:
        Exception: pydantic's, when the recorded config no longer validates.
    """
    bench = get_benchmark_class(str(recorded["benchmark"]["name"])).settings_model(**recorded["benchmark"])
    return EvalConfig(**{**recorded, "benchmark": bench})


def requests_of(run_dir: Path, recorded: dict[str, Any]) -> list[Any] | None:
    """The run's requests as its plan built them, or ``None`` (with a note line) when the
    benchmark's data or the run's config can no longer be read."""
    try:
        return [u.request for u in prepare(run_config(recorded)).units]
    except Exception as exc:  # noqa: BLE001 - missing data, an unreadable replay file, an old config
        print(f"evalkit: note: {run_dir}: the run's data cannot be read again ({type(exc).__name__}: "
              f"{secrets.scrub(first_line(exc, 200))}); its traces carry no prompts", file=sys.stderr)  # fmt: skip
        return None


def observer_for(recorded: dict[str, Any], args: argparse.Namespace) -> MlflowObserver:
    """The observer of the run's tracking settings, overridden by the command's options."""
    tracking = {"tracking_uri": None, "experiment": "evalkit", "artifact_root": None, **(recorded.get("tracking") or {})}
    for key in ("tracking_uri", "experiment", "artifact_root"):
        if getattr(args, key):
            tracking[key] = getattr(args, key)
    run = recorded.get("run") or {}
    cfg = SimpleNamespace(tracking=SimpleNamespace(**tracking), run=SimpleNamespace(output_root=run.get("output_root") or "outputs"))
    sweep = None
    if run.get("sweep_dir"):
        try:
            sweep = json.loads((Path(run["sweep_dir"]) / "sweep.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            sweep = None
    traces = bool(tracking.get("traces", True)) and not args.no_traces
    return MlflowObserver(tracking_uri(cfg), str(tracking["experiment"]), artifact_root(cfg), run.get("suite"), sweep, traces)


def track(run_dir: Path, args: argparse.Namespace) -> str:
    """Log one finished run; returns its line of output.

    Raises:
        RunDirError / TrackingError: not a finished run, or the store cannot be used.
        Any MLflow error while logging.
    """
    recorded, summary = read_run(run_dir)
    observer = observer_for(recorded, args)
    observer.check()
    run_id = observer.log_run(run_dir, summary, requests_of(run_dir, recorded))
    return f"evalkit: tracked {run_dir} → MLflow run {run_id} ({observer.uri}, experiment {observer.experiment})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalkit.track", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    parser.add_argument("--tracking-uri", dest="tracking_uri", default=None, help="store (default: the run's tracking.tracking_uri)")
    parser.add_argument("--experiment", default=None, help="experiment (default: the run's tracking.experiment)")
    parser.add_argument("--artifact-root", dest="artifact_root", default=None, help="artifact location of a new experiment")
    parser.add_argument("--no-traces", action="store_true", help="no per-sample traces (as tracking.traces=false)")
    args = parser.parse_args(argv)
    code = 0
    for run_dir in args.run_dirs:
        try:
            print(track(run_dir, args))
        except EvalkitError as exc:
            print(f"evalkit: error: {exc}", file=sys.stderr)
            code = max(code, 2)
        except Exception as exc:  # noqa: BLE001 - one line per run; the others are still logged
            print(f"evalkit: error: {run_dir}: MLflow logging failed ({type(exc).__name__}: {secrets.scrub(first_line(exc))})", file=sys.stderr)
            code = max(code, 1)
    return code


if __name__ == "__main__":
    sys.exit(main())
