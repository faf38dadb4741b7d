"""Log finished runs to MLflow, or complete their logging — for runs made with
``tracking=none``, or whose store could not be reached when they ended.

    python -m evalkit.track RUN_DIR [RUN_DIR ...] [--tracking-uri URI] [--experiment NAME]
                            [--artifact-root URI] [--no-traces]
                            [--request-deadline-s S] [--max-response-bytes N]

Each run is logged by the same observer a run uses (:class:`~evalkit.tracking.MlflowObserver`).

Which store: the one ``--tracking-uri`` names, else the project default
(``sqlite:///outputs/mlflow.db`` under the current directory, artifacts in
``outputs/mlartifacts``) — never an address read from the run directory (its
``config.yaml``'s ``tracking.tracking_uri`` / ``artifact_root``): a run directory is
untrusted input, and a shared one must not choose where its contents are sent. When the
directory names another store, a note line says so. The experiment is ``--experiment``, else
the run's ``tracking.experiment``. Before logging, one line on stderr names the store.

Whose run: a directory's ``tracking.json`` (checked against its schema) may name the MLflow
run it was logged to; that run is written only if it belongs to the directory (its
``evalkit.run_key_sha256`` tag is the digest of the directory's run key, or, for a run
logged before run keys, its ``run_dir`` tag names the directory). Otherwise nothing is
written, one error line says why, and the exit code is 2. Logging is idempotent: a second
call adds nothing (and a run resumed since gets only its new samples). No symbolic link in
the directory is followed or uploaded. The selection and the prompts of the traces are
rebuilt from the benchmark's data, as the run built them; when the data cannot be read any
more, the traces carry no prompt (one note line says so). Which samples get a trace follows the run's
``tracking.traces`` (``sample``, ``all``, ``none``; a config written before issue 46 says
``true`` / ``false``: ``all`` / ``none``), ``tracking.traces_per_category``, ``run.baseline``
(its flips) and ``tracking.max_traces`` with its ``run.seed``: the same seeded sample the run
logged.

Each HTTP call to a tracking server ends within ``--request-deadline-s`` (retries and waits
included) and reads at most ``--max-response-bytes`` of its answer (the defaults of
``tracking.request_deadline_s`` / ``tracking.max_response_bytes``; never the run directory's
values): :mod:`evalkit.tracking.http_bounds`.

Output: one line per run (``evalkit: tracked <dir> → MLflow run <id> (<store>)``) or one
error line; when the logging failed or the server cannot be reached (down, or a bound hit:
one that trickles or floods), the line ends with the command that logs the run later,
shell-quoted. Before a run is logged to a tracking server, the preflight a run has
(:meth:`~evalkit.tracking.MlflowObserver.check`: credentials, the experiment, the user's write
permission, :mod:`evalkit.tracking.permissions`). Exit code: 0 every run logged, 1 some run's logging failed (or its tracking server
cannot be reached, or a bound was hit), 2 a directory that
is not a finished run (no ``config.yaml`` or ``summary.json``), a bad ``tracking.json`` or ``sweep.json``, an
MLflow run of another directory, a bad store, or a server that refused the user (a wrong
password, no write permission in the experiment: no "later" command, trying again would not help).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evalkit import secrets
from evalkit.benchmarks.task.template import TemplateRefused
from evalkit.compose import recorded_run_config
from evalkit.config import TRACES_PER_CATEGORY, traces_policy
from evalkit.engine.plan import prepare
from evalkit.errors import EvalkitError, RunDirError, first_line, printable
from evalkit.journal import read_run_journal
from evalkit.untrusted import read_run_yaml
from evalkit.specs import TrackingSpec, build
from evalkit.summary import MAX_SUMMARY_BYTES, Summary, read_json_record, read_summary_record, validate_summary
from evalkit.tracking import MlflowObserver, ledger
from evalkit.tracking.store import add_http_bound_options
from evalkit.tracking.mlflow_tracking import artifact_root, bound_hit, is_server, track_command, tracking_uri


def read_run(run_dir: Path) -> tuple[dict[str, Any], Summary]:
    """``(config.yaml, summary.json)`` of a finished run (the summary typed), each opened
    without following a symbolic link.

    Raises:
        RunDirError: either file is missing, a link or unreadable, the summary does not
            validate (:class:`evalkit.summary.Summary`), or a journal row cannot count
            (:mod:`evalkit.journal`).
    """
    try:
        recorded = read_run_yaml(run_dir / "config.yaml")  # bounded: an alias bomb is one line, not a hang
    except RunDirError as exc:
        raise RunDirError(f"{run_dir}: not a finished evalkit run ({exc})") from None
    try:
        raw = read_summary_record(run_dir / "summary.json")  # no link followed, at most MAX_SUMMARY_BYTES
    except RunDirError as exc:
        raise RunDirError(f"{run_dir}: not a finished evalkit run (config.yaml and summary.json needed, not links; {exc})") from None
    if not isinstance(recorded, dict) or not isinstance(raw, dict) or "status" not in raw:
        raise RunDirError(f"{run_dir}: not a finished evalkit run (config.yaml or summary.json malformed)")
    summary = validate_summary(raw, run_dir / "summary.json")
    read_run_journal(run_dir, summary.stale_lines)  # a row that cannot count: one line, before anything is logged
    return recorded, summary


def requests_of(run_dir: Path, recorded: dict[str, Any]) -> list[Any] | None:
    """The run's requests as its plan built them, or ``None`` (with a note line) when the
    benchmark's data or the run's config can no longer be read."""
    try:
        return [u.request for u in prepare(build(recorded_run_config(recorded))).units]
    except TemplateRefused as exc:  # a crafted config.yaml (a looping template): the run is refused, exit 2
        raise RunDirError(f"{run_dir}/config.yaml: {first_line(exc, 300)}") from None
    except Exception as exc:  # noqa: BLE001 - missing data, an unreadable replay file, an old config
        print(f"evalkit: note: {run_dir}: the run's data cannot be read again ({type(exc).__name__}: "
              f"{secrets.scrub(first_line(exc, 200))}); its traces carry no prompts", file=sys.stderr)  # fmt: skip
        return None


def default_store() -> tuple[str, str]:
    """The project default ``(tracking URI, artifact root)``: what ``python -m evalkit`` run
    here with the default config uses (``run.output_root=outputs``, ``tracking=mlflow``)."""
    spec = TrackingSpec()
    return tracking_uri(spec), artifact_root(spec)


def beside_store(uri: str, default: str) -> str:
    """The artifact root of a new experiment in the file store ``uri`` names: ``mlartifacts``
    beside a ``sqlite:///<path>`` database (so logging to a store elsewhere writes nothing
    under the current directory); ``default`` for any other URI."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if parts.scheme == "sqlite" and parts.path not in ("", "/", "/:memory:"):
        db = Path(parts.path[1:])  # sqlite:///rel.db → rel.db; sqlite:////abs/x.db → /abs/x.db
        return (db.expanduser().resolve().parent / "mlartifacts").as_uri()
    return default


def chosen_store(args: argparse.Namespace) -> tuple[str, str]:
    """``(tracking URI, artifact root)`` the command line chooses: ``--tracking-uri`` (with
    ``--artifact-root``), else the project default (:func:`default_store`)."""
    uri, root = default_store()
    if args.tracking_uri:
        uri, root = args.tracking_uri, ("" if is_server(args.tracking_uri) else beside_store(args.tracking_uri, root))
    return uri, args.artifact_root or root


def observer_for(run_dir: Path, recorded: dict[str, Any], args: argparse.Namespace) -> MlflowObserver:
    """The observer of the store ``--tracking-uri`` names, or of the project default
    (:func:`chosen_store`) — never of an address read from the run directory (a note line
    names the one its ``config.yaml`` holds, when it differs), with the HTTP bounds of
    ``--request-deadline-s`` / ``--max-response-bytes`` (never the directory's: a run
    directory cannot lift them)."""
    tracking = recorded.get("tracking") if isinstance(recorded.get("tracking"), dict) else {}
    uri, root = chosen_store(args)
    named = tracking.get("tracking_uri")
    if named and str(named) != uri:
        print(f"evalkit: note: {run_dir}: its config.yaml names the tracking store {printable(secrets.scrub(str(named)), 300)}, "
              "which is not used (give --tracking-uri to choose the store)", file=sys.stderr)  # fmt: skip
    experiment = args.experiment or tracking.get("experiment") or "evalkit"
    if not isinstance(experiment, str) or len(experiment) > 500:
        raise RunDirError(f"{run_dir}/config.yaml: tracking.experiment: not a name of at most 500 characters")
    run = recorded.get("run") if isinstance(recorded.get("run"), dict) else {}
    try:  # a key absent: a config older than the key, whose default was a trace per sample
        traces = "none" if args.no_traces else traces_policy(tracking.get("traces", True))
    except ValueError as exc:
        raise RunDirError(f"{run_dir}/config.yaml: {exc}") from None
    max_traces, seed = tracking.get("max_traces"), run.get("seed", 0)
    per_category, baseline = tracking.get("traces_per_category", TRACES_PER_CATEGORY), run.get("baseline")
    if max_traces is not None and (type(max_traces) is not int or max_traces < 1):
        raise RunDirError(f"{run_dir}/config.yaml: tracking.max_traces: not a positive integer or null")
    if type(per_category) is not int or not 0 <= per_category <= 1_000_000:
        raise RunDirError(f"{run_dir}/config.yaml: tracking.traces_per_category: not an integer from 0 to 1000000")
    if type(seed) is not int:
        raise RunDirError(f"{run_dir}/config.yaml: run.seed: not an integer")
    return MlflowObserver(uri, experiment, root, run.get("suite"), _sweep_of(run_dir, run), traces, max_traces, seed,
                          args.request_deadline_s, args.max_response_bytes, per_category,
                          baseline if isinstance(baseline, str) and baseline else None)  # fmt: skip


#: the largest ``sweep.json`` read: it holds the sweep's id, directory, start time, command-line
#: overrides, one override list per job (``points``) and its MLflow parent run — kilobytes for
#: any real sweep; the bound a run's own ``summary.json`` has (which holds more per job) is ample.
MAX_SWEEP_BYTES = MAX_SUMMARY_BYTES


def _sweep_of(run_dir: Path, run: dict[str, Any]) -> dict[str, Any] | None:
    """``sweep.json`` of the sweep the run is a job of: only the run directory's own parent
    (a job's directory is ``<sweep dir>/<job>``), read by :func:`~evalkit.summary.read_json_record`
    (no link followed, a regular file of at most :data:`MAX_SWEEP_BYTES`). ``None``: not a
    job of a sweep, or the sweep directory has no ``sweep.json`` (the run is logged without a
    parent run).

    Raises:
        RunDirError (exit 2): ``sweep.json`` is a link, not a regular file, over the bound,
            not JSON or not a JSON object (one line naming it).
    """
    sweep_dir = run.get("sweep_dir")
    if not sweep_dir or Path(str(sweep_dir)).resolve() != Path(run_dir).resolve().parent:
        return None
    path = Path(str(sweep_dir)) / "sweep.json"
    try:
        sweep = read_json_record(path, MAX_SWEEP_BYTES, "a sweep.json")
    except FileNotFoundError:
        return None
    if not isinstance(sweep, dict):
        raise RunDirError(f"{printable(str(path))}: not a JSON object; not read")
    return sweep


def track(run_dir: Path, args: argparse.Namespace) -> str:
    """Log one finished run; returns its line of output.

    Raises:
        RunDirError / TrackingError: not a finished run, or the store cannot be used.
        Any MLflow error while logging.
    """
    recorded, summary = read_run(run_dir)
    ledger.read_file(run_dir / ledger.FILE)  # a bad tracking.json: one line before the store is opened
    requests = requests_of(run_dir, recorded)  # a crafted config.yaml (a looping template): refused before the store is opened
    observer = observer_for(run_dir, recorded, args)
    print(f"evalkit: sending {run_dir} to the MLflow store {printable(secrets.scrub(observer.uri), 300)} "
          f"(experiment {printable(observer.experiment, 200)})", file=sys.stderr)  # fmt: skip
    observer.check()
    run_id = observer.log_run(run_dir, summary, requests)
    return f"evalkit: tracked {run_dir} → MLflow run {run_id} ({observer.uri}, experiment {observer.experiment})"


STORE_RULE = (
    "The store is --tracking-uri, or the project default; never an address read from the run directory's "
    "config.yaml (a note names it when it differs). An MLflow run named by the directory's tracking.json is "
    "written only if its run key or run_dir tag matches the directory; otherwise exit 2 and nothing is written. "
    "Symbolic links in the directory are never followed or uploaded. Each HTTP call to a tracking server ends within "
    "--request-deadline-s and reads at most --max-response-bytes of its answer; a server that trickles or floods is "
    "one error line naming the bound and the command that logs the run later (exit 1)."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalkit.track", description=__doc__.splitlines()[0],
                                     epilog=STORE_RULE)  # fmt: skip
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    parser.add_argument("--tracking-uri", dest="tracking_uri", default=None,
                        help="store (default: the project default sqlite:///outputs/mlflow.db here; never the run directory's)")
    parser.add_argument("--experiment", default=None, help="experiment (default: the run's tracking.experiment)")
    parser.add_argument("--artifact-root", dest="artifact_root", default=None,
                        help="artifact location of a new experiment (default: outputs/mlartifacts here, or mlartifacts beside "
                             "a --tracking-uri sqlite database; "
                             "a tracking server's own, for an http(s) --tracking-uri)")  # fmt: skip
    parser.add_argument("--no-traces", action="store_true", help="no per-sample traces (as tracking.traces=none)")
    add_http_bound_options(parser)
    args = parser.parse_args(argv)
    code = 0
    for run_dir in args.run_dirs:
        later = f"log {printable(str(run_dir))} later with: {printable(track_command(chosen_store(args)[0], run_dir))}"
        try:
            print(track(run_dir, args))
        except EvalkitError as exc:  # exit 1: a server down, trickling, flooding or answering garbage: the same command, later
            print(f"evalkit: error: {printable(exc)}{f'; {later}' if exc.exit_code == 1 else ''}", file=sys.stderr)
            code = max(code, exc.exit_code)
        except Exception as exc:  # noqa: BLE001 - one line per run; the others are still logged
            why = bound_hit(exc) or f"{type(exc).__name__}: {first_line(exc)}"
            print(f"evalkit: error: {printable(str(run_dir))}: MLflow logging failed ({printable(secrets.scrub(why))}); {later}",
                  file=sys.stderr)  # fmt: skip
            code = max(code, 1)
    return code


if __name__ == "__main__":
    sys.exit(main())
