"""The observer protocol: what the engine and the sweep announce, and a tracker hears.

The engine calls, for one run: :meth:`Observer.preflight` (before Ray or any worker starts),
:meth:`Observer.run_started` (the run is about to write its
directory: a tracker checks its store here, and raising :class:`~evalkit.errors.TrackingError`
stops the run before anything is written) and :meth:`Observer.run_finished` with the summary
(a tracker reads the rows from the journal then; a per-row hook had no implementer and was
removed, issue 34 item 4). The
sweep calls :meth:`Observer.sweep_started` (what it returns is kept in ``sweep.json``, where
the sweep's jobs find it, e.g. a parent run id) and :meth:`Observer.sweep_finished`.

inspect_ai's hooks and lm-eval's ``evaluation_tracker`` are the shapes this follows. MLflow
(:mod:`evalkit.tracking.mlflow_tracking`) is one observer, :class:`NullObserver`
(``tracking=none``) the null one. Observers never import the engine, the sweep or the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from evalkit.specs import ReportSpec
from evalkit.summary import Summary
from evalkit.types import Request


@dataclass
class RunInfo:
    """What an observer knows of a run: its directory (about to be made, or the one being
    resumed), whether it is resumed, what the summary says of it besides its results
    (:class:`~evalkit.specs.ReportSpec`: names, shots, repeats, judges; ``None`` when the
    caller has none) and, for :meth:`Observer.run_finished`, its ``requests``: the
    selection in order, each with its prompt (built as they are read), and
    ``request_hashes``: ``{(sample id, epoch): request hash}`` of the plan (what identifies
    each journal row; ``None`` when the caller has none)."""

    run_dir: Path
    resumed: bool = False
    spec: ReportSpec | None = None
    requests: Iterable[Request] | None = None
    request_hashes: dict[tuple[str, int], str] | None = None


class Observer:
    """Base observer: every hook does nothing (subclass and override what you need).

    ``failure``: after :meth:`run_finished`, the one line of a tracking failure that did not
    fail the run (its results are in the run directory; the line names the command that logs
    them later), else ``None`` — a sweep reports such a job as not tracked, never complete.
    """

    failure: str | None = None

    def preflight(self, run: RunInfo) -> None:
        """Before anything starts (Ray, model workers, servers): what can be checked of the
        tracker at once — a tracking server's credentials and write permission. May raise
        ``TrackingError`` (one line)."""

    def run_started(self, run: RunInfo) -> None:
        """Before the run writes anything. May raise ``TrackingError`` (one line)."""

    def run_finished(self, run: RunInfo, summary: Summary) -> None:
        """``summary.json`` (``summary``, typed) and ``report.md`` are written. May raise
        ``TrackingError``."""

    def sweep_started(self, sweep_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
        """A sweep starts (``info``: its ``sweep.json`` so far). Returns fields to add to it."""
        return {}

    def sweep_finished(self, sweep_dir: Path, info: dict[str, Any], summary: dict[str, Any], status: str) -> None:
        """A sweep ended (``status``: FINISHED, FAILED or KILLED) with its summary written."""


class NullObserver(Observer):
    """``tracking=none``: nothing is recorded anywhere but the run directory."""
