"""Judge a finished run's answers with LLM judges, without asking the model under test again;
or qualify a judge against people's labels (``qualify``: :mod:`evalkit.qualify`).

    python -m evalkit.judge RUN judge=<model config> [judge_overrides=[...]] [run.KEY=VALUE ...]
                            [tracking=... | tracking.KEY=VALUE ...] [backend.concurrency=N]
    python -m evalkit.judge qualify judge=<model config> benchmark=<task> labels=FILE.jsonl [...]

**What runs.** A new run of RUN's benchmark (its ``config.yaml``: the task, its
scorers and selection — ``run.limit``, ``run.sample_ids``, ``run.repeats``, ``run.seed``,
``shots``) whose model is ``model=replay model.path=RUN``: each request is answered with the
answer RUN journaled for that sample and epoch (read through :mod:`evalkit.journal`; an
answer whose judges failed in RUN, a ``judge_error`` row of its ``failed.jsonl``, is replayed
too), and the judges named by ``judge=`` rate it. It goes through the engine like any run:
model workers, response cache, retries, budget (``run.max_cost_usd``, ``run.max_total_tokens``
count the judges' calls), ``failed.jsonl`` (``judge_error``), intervals, MLflow. The model
under test is never asked: a replay sends nothing.

**Where its results go.** A new run directory beside RUN, ``<RUN>.judged-<judge>[+<judge>…]``
(``run.dir=...`` chooses another). Its ``config.yaml`` records ``model.path`` = RUN and its
``summary.json`` ``replayed_run`` = RUN. Called again with the same judges, the command
resumes that directory (``run.resume``): only the answers not yet judged are judged.

**In MLflow** (issue 47): the re-judge goes to RUN's experiment (its ``tracking.experiment``,
unless ``tracking.experiment=`` is given) and to the store RUN was logged to (its
``tracking.json``) when a run directory may name it — ``MLFLOW_TRACKING_URI``'s, or a SQLite
file of RUN's own output root (:func:`judged_tracking`); any other store RUN names is not used
(it would be sent your credentials): one note line names it and the ``tracking.tracking_uri=``
that logs there. Its MLflow run is named ``<benchmark>-<RUN's model>-judged-by-<judge>`` and
tagged ``model`` = RUN's model, ``evalkit.answers_source=replay``, ``evalkit.judged_run_dir``
and ``evalkit.judged_run_id`` (RUN's MLflow run, when in the same store).

**Input.** RUN is untrusted: it is read without following a symbolic link (RUN itself, its
``config.yaml``, ``summary.json``, journal and side files), and no place it names is used
but as said above: the judged run's response cache is the project default (``outputs/`` here)
or what ``run.output_root`` and ``run.cache_dir`` say, and a selection by
``run.sample_ids_file`` must be given again. Nothing is written into RUN: a ``run.dir``, ``run.resume``, output root,
cache or local MLflow store that is RUN or inside it is refused. Only the overrides above are
accepted: what was asked comes from RUN, except ``benchmark.module``: a run directory never
makes evalkit import a module (the benchmark is built in, a YAML task or an entry point's).

``run.dry_run=true`` estimates what the judges would be sent (as a run's dry run: nothing is
sent or written, and no API key is needed).

Exit codes: 0 complete (or a dry run), 1 incomplete (failures in ``failed.jsonl``; call again to resume), 2 a
bad RUN or override (one line on stderr, nothing written), 130 interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from evalkit import secrets
from evalkit.cli import console_logging, finished_quietly, report_crash, report_error
from evalkit.compose import judged_config
from evalkit.errors import EvalkitError, RunDirError, interrupted_line, printable
from evalkit.job import outcome_line, run_judging
from evalkit.qualify import main as qualify_main
from evalkit.track import read_run
from evalkit.tracking import ledger
from evalkit.tracking.mlflow_tracking import is_server
from evalkit.tracking.permissions import server_of

USAGE = "usage: python -m evalkit.judge RUN judge=<model config> [judge_overrides=[...]] [run.KEY=VALUE ...] [tracking.KEY=VALUE ...]"


def checked_run(run: Path) -> Path:
    """RUN as an absolute path, checked to be a directory (never a link).

    Raises:
        RunDirError: RUN is not a directory, or is a symbolic link — one line.
    """
    run = Path(run).absolute()
    if run.is_symlink() or not run.is_dir():
        raise RunDirError(f"{printable(str(run), 300)}: not a run directory (a symbolic link is never followed)")
    return run


def main(argv: list[str] | None = None) -> int:
    """Judge RUN (``argv``: RUN and the overrides); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "qualify":
        return _qualify(args[1:])
    if not args or args[0] in ("-h", "--help") or "=" in args[0]:
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 2)[2], file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    return _guarded(lambda: _judge(args))


def judged_tracking(run: Path, recorded: dict[str, Any], overrides: list[str]) -> tuple[dict[str, str], str | None]:
    """Where the re-judge of RUN is logged, from RUN (issue 47): ``({tracking key: value},
    note line or None)``. Its experiment is RUN's ``tracking.experiment`` (unless
    ``tracking.experiment=`` is given); its store is the one RUN was logged to (its
    ``tracking.json``) when a run directory may name it
    (:func:`~evalkit.tracking.ledger.store_a_run_may_name`: ``MLFLOW_TRACKING_URI``'s, or a
    SQLite file of RUN's own output root) and no ``tracking.tracking_uri=`` is given; any
    other store RUN names is not used (it would get the user's credentials), and the note
    says which and the override that logs there.

    Raises:
        RunDirError: RUN's ``tracking.json`` is bad (one line).
    """
    given = {ov.lstrip("+~").partition("=")[0] for ov in overrides}
    if "tracking" in given:  # tracking=none, or another tracking config: as asked
        return {}, None
    was = recorded.get("tracking") if isinstance(recorded.get("tracking"), dict) else {}
    chosen: dict[str, str] = {}
    experiment = was.get("experiment")
    if "tracking.experiment" not in given and isinstance(experiment, str) and 0 < len(experiment) <= 500:
        chosen["experiment"] = experiment
    state = ledger.read_file(run / ledger.FILE)
    logged = state.tracking_uri if state is not None else None
    if "tracking.tracking_uri" in given or not logged:
        return chosen, None
    if ledger.store_a_run_may_name(logged, (run,)):
        chosen["tracking_uri"] = logged
        return chosen, None
    shown = printable(server_of(logged) if is_server(logged) else secrets.scrub(logged), 300)
    return chosen, (f"evalkit: note: {printable(str(run), 300)} was logged to {shown}, which a run directory cannot choose "
                    f"(evalkit would send it your MLflow credentials); this re-judge logs to tracking.tracking_uri's store — "
                    f"add tracking.tracking_uri={shown} (or set MLFLOW_TRACKING_URI) to log it beside the judged run")  # fmt: skip


def _judge(args: list[str]) -> int:
    run = checked_run(Path(args[0]))
    recorded, _ = read_run(run)
    tracking, note = judged_tracking(run, recorded, args[1:])
    cfg = judged_config(run, recorded, args[1:], tracking)
    if note:  # once the config is valid (tracking=... given: no note)
        print(note, file=sys.stderr)
    result = run_judging(cfg, args[0])
    if result is None:  # a dry run: its line printed
        return 0
    print(outcome_line(result))
    code = 0 if result.typed is not None and result.typed.complete else 1
    finished_quietly(code, result.run_dir)
    return code


def _qualify(args: list[str]) -> int:
    """``python -m evalkit.judge qualify ...`` (:mod:`evalkit.qualify`): its exit code."""
    return _guarded(lambda: qualify_main(args))


def _guarded(command: Callable[[], int]) -> int:
    """``command()``'s exit code; an error as one line (exit 2), Ctrl-C as the interrupted
    line (130), a bug as one line naming the log of its traceback (1)."""
    try:
        return command()
    except EvalkitError as exc:
        return report_error(exc)
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc), file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug: one line naming the log that holds the traceback
        return report_crash(exc)


if __name__ == "__main__":
    console_logging()
    sys.exit(main())
