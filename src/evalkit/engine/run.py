"""One run, as a line of stages (HELM's ``Runner.run_one``)::

    prepare → start → open → execute → finalize

* **prepare** (:mod:`evalkit.engine.plan`): data loaded and selected, one request per
  sample, models planned — nothing started, nothing written;
* **start**: the response cache checked, Ray reached (network models only), the observer
  told (a tracker checks its store) — an unreachable cluster or a bad store leaves nothing
  behind;
* **open** (:mod:`evalkit.engine.rundir`): the run directory made or reopened, logging into
  it, ``config.yaml`` written;
* **execute** (here): the journal read (what is already done), the pending units solved
  on Ray workers or in-process, each scored and journaled the moment it finishes;
* **finalize** (:mod:`evalkit.engine.finalize`): the journal read back, aggregated,
  ``summary.json``/``report.md`` written, the observer told.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evalkit import secrets
from evalkit.config import EvalConfig
from evalkit.engine.budget import Budget
from evalkit.engine.calls import Unit, all_cached, open_cache
from evalkit.engine.executor import Executor, LocalExecutor, RayExecutor
from evalkit.engine.finalize import finalize
from evalkit.engine.journal import read_journal
from evalkit.engine.plan import RunPlan, prepare
from evalkit.engine.ray_session import ensure_ray, shutdown_ray
from evalkit.engine.records import cap_record, failure_record, prediction_record, scored_view, write_transcript
from evalkit.engine.rundir import FAILED, PREDICTIONS, RunState, choose_run_dir, open_run
from evalkit.engine.scheduling import run_units
from evalkit.engine.scoring import Scorer
from evalkit.jsonl import JsonlAppender
from evalkit.tracking.base import NullObserver, Observer, RunInfo
from evalkit.types import Trajectory

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")  # "what is starting" lines (__main__ shows them)


@dataclass
class RunResult:
    """What a finished run left: its directory, its summary, and the process exit code
    (0 complete, 1 incomplete)."""

    run_dir: Path
    summary: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return 0 if self.summary["status"] == "complete" else 1


def run_evaluation(cfg: EvalConfig, observer: Observer | None = None) -> RunResult:
    """Execute one validated run end to end and return where it left its results.

    Raises:
        ConfigError / DataError / RunDirError / TrackingError: before anything is written
            (a tracker's failure after the run: its results are in the run directory).
        RunInterrupted: Ctrl-C once the run directory exists (resume it).
    """
    observer = observer or NullObserver()
    plan = prepare(cfg)
    with ExitStack() as stack:
        start(plan, stack)
        run_dir, resumed = choose_run_dir(cfg)
        observer.run_started(RunInfo(cfg, run_dir, resumed))
        state = stack.enter_context(open_run(cfg, run_dir, resumed))
        engine = execute(plan, state, observer)
        summary = finalize(plan, state, engine, observer)
    return RunResult(run_dir, summary)


def _cache_dir(cfg: EvalConfig) -> Path | None:
    """The response cache's directory (``run.cache_dir``, default ``<output_root>/cache``), or
    ``None`` with ``run.cache=false``."""
    return (cfg.run.cache_dir or cfg.run.output_root / "cache") if cfg.run.cache else None


def start(plan: RunPlan, stack: ExitStack) -> None:
    """Check an existing response cache (opening one writes nothing) and reach Ray for
    network models; a Ray instance started here is shut down when ``stack`` closes."""
    if plan.models.offline:
        return
    cache_dir = _cache_dir(plan.cfg)
    if cache_dir is not None and cache_dir.exists():
        open_cache(cache_dir).close()  # a corrupt cache: one line before anything runs
    if ensure_ray(plan.cfg.runner.address, plan.cfg.runner.num_cpus):
        stack.callback(shutdown_ray)


def execute(plan: RunPlan, state: RunState, observer: Observer) -> dict[str, Any] | None:
    """Solve every unit the journal does not hold yet (a resumed run: only what failed or
    never ran). Returns the engine figures of :func:`~evalkit.engine.scheduling.run_units`
    (plus ``units``), or ``None`` when nothing was pending."""
    journal = read_journal(state.run_dir / PREDICTIONS, plan.request_hashes())
    journal.warn()
    pending = [u for u in plan.units if u.key not in journal.rows]
    log.info("run %s: %d samples, %d already journaled, %d to run", state.run_dir, len(plan.units), len(journal.rows), len(pending))
    if not pending:
        return None
    plan.warn_unpriced()
    cfg = plan.cfg
    with ExitStack() as stack:
        scorer = stack.enter_context(Scorer(plan.bench))
        serve = not (plan.models.starts_servers and all_cached(_cache_dir(cfg), pending, plan.models.model_id))
        if not serve:  # the workers never call the model on a hit
            status.info("every request is in the response cache (%d): llama.cpp's server is not started", len(pending))
        agents_factory = stack.enter_context(plan.models.open(state.run_dir, serve=serve))
        executor = _executor(plan, agents_factory)
        stack.callback(executor.close)
        journaler = stack.enter_context(Journaler(plan, state, observer, scorer, len(pending)))
        budget = Budget.of_run(cfg, plan.prices, state.run_dir)
        engine = asyncio.run(run_units(executor, pending, cfg.backend.concurrency, journaler.on_result,
                                       cfg.backend.adaptive_concurrency, budget))  # fmt: skip
    engine["units"] = len(pending)
    return engine


def _executor(plan: RunPlan, agents_factory: Callable[[], Any]) -> Executor:
    """In-process for offline models (answered from tables or scripts: no response cache),
    Ray workers sharing the response cache for network models."""
    cfg = plan.cfg
    solver, agent_params, user_params = plan.bench.solver(), cfg.sent_params(), cfg.user_sent_params()
    if plan.models.offline:
        return LocalExecutor(agents_factory, solver, None, agent_params, user_params)
    return RayExecutor(agents_factory, solver, _cache_dir(cfg), agent_params, user_params,
                       num_workers=cfg.runner.num_workers, concurrency=cfg.backend.concurrency)  # fmt: skip


class Journaler:
    """Receives each solved unit in the driver: scores it (bounded in time and memory,
    :class:`~evalkit.engine.scoring.Scorer`) and appends its row to ``predictions.jsonl``,
    or its failure to ``failed.jsonl``; keeps the progress bar.

    Rows are journaled in the order their samples finish. Offline models answer at once,
    so their answers are scored one at a time in selection order (a replay's journal lists
    the samples as its selection does); network runs score while other units are in flight.
    """

    def __init__(self, plan: RunPlan, state: RunState, observer: Observer, scorer: Scorer, total: int):
        self.plan, self.state, self.observer, self.scorer = plan, state, observer, scorer
        self.info = RunInfo(plan.cfg, state.run_dir, state.resumed)
        self.stack = ExitStack()
        self.predictions = self.stack.enter_context(JsonlAppender(state.run_dir / PREDICTIONS, transform=secrets.scrub_obj))
        self.failed = self.stack.enter_context(JsonlAppender(state.run_dir / FAILED, transform=secrets.scrub_obj))
        self.in_order = asyncio.Lock() if plan.models.offline else None  # FIFO: units reach it in dispatch order
        self.progress = _progress(total, f"{plan.cfg.benchmark.name}/{plan.cfg.model.name}", plan.cfg.run.progress)
        self.stack.callback(self.progress.close)
        self.n_failed = 0

    def __enter__(self) -> "Journaler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    async def on_result(self, unit: Unit, trajectory: Trajectory) -> None:
        if self.in_order is None:
            await self._journal(unit, trajectory)
            return
        async with self.in_order:
            await self._journal(unit, trajectory)

    async def _journal(self, unit: Unit, trajectory: Trajectory) -> None:
        model_id, prices = self.plan.models.model_id, self.plan.prices
        if trajectory.failure is None:
            view, rule = scored_view(self.plan.bench, trajectory)
            scored = await self.scorer.score(unit.sample, view)
            row = cap_record(prediction_record(unit, model_id, view, scored, prices, rule), self.state.run_dir)
            if unit.rollout:
                write_transcript(self.state.run_dir, unit.sample.id, trajectory)
            self.predictions.append(row)
            self.observer.sample_journaled(self.info, row)
        else:
            self.n_failed += 1
            self.failed.append(failure_record(unit, model_id, trajectory, prices))
        self.progress.update(1)
        if self.n_failed:
            self.progress.set_postfix(failed=self.n_failed, refresh=False)


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="sample", file=sys.stderr, disable=not enabled or total == 0, dynamic_ncols=True)
