"""One run, as a line of stages (HELM's ``Runner.run_one``)::

    start → prepare → open → execute → finalize

* **start**: first the observer's :meth:`~evalkit.tracking.base.Observer.preflight` (a tracking
  server's credentials and the user's write permission, issue 47: a refusal is one line
  before Ray or any worker starts); then Ray reached (network models only) and, when no server of evalkit's must start
  first, the model workers started, warming up in their own processes during what follows;
* **prepare** (:mod:`evalkit.engine.plan`): data loaded and selected, one request per
  sample, models planned — nothing written; the observer is told (a tracker checks its
  store) — an unreachable cluster or a bad store leaves nothing behind;
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
import shutil
import time
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from evalkit import secrets
from evalkit.errors import ConfigError, counted
from evalkit.engine.batch import BatchExecutor
from evalkit.engine.budget import UNJOURNALED, Budget, journal_spend
from evalkit.engine.cache import all_cached, trim_cache
from evalkit.engine.work import WorkItem, WorkList
from evalkit.engine.executor import LocalExecutor, RayExecutor
from evalkit.engine.finalize import finalize
from evalkit.engine.plan import RunPlan, prepare, run_prices
from evalkit.engine.phases import Phases
from evalkit.engine.protocol import Executor
from evalkit.engine.ray_session import ensure_ray, shutdown_ray
from evalkit.engine.records import cap_record, failure_record, kept_answers, prediction_record, scored_view, write_transcript
from evalkit.engine.rundir import FAILED, PREDICTIONS, RunState, choose_run_dir, open_run
from evalkit.engine.scheduling import run_units
from evalkit.engine import sequential
from evalkit.engine.scoring import Scorer
from evalkit.engine.session import Session
from evalkit.models.factory import Endpoints, network_endpoints, serverless_agents
from evalkit.journal import read_journal
from evalkit.jsonl import JsonlAppender
from evalkit.specs import ExecutionSpec, RunSpecs
from evalkit.summary import Summary
from evalkit.tracking.base import NullObserver, Observer, RunInfo
from evalkit.types import Failure, Trajectory

#: the ``error_kind`` of an answer not scored because the run's scoring budget was spent
SCORE_BUDGET_EXCEEDED = "score_budget_exceeded"
#: the exit code of a run that submitted its batches and returned (``run.batch_detach``)
DETACHED_EXIT_CODE = 3

#: the progress bar asks the executor what is in flight every this many seconds
LIVE_EVERY_S = 2.0

T = TypeVar("T")

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")  # "what is starting" lines (__main__ shows them)


@dataclass
class RunResult:
    """What a finished run left: its directory, its summary and the process exit code (0
    complete, 1 incomplete, 3 batches submitted and left running: ``run.batch_detach``).

    ``typed`` is the summary (:class:`~evalkit.summary.Summary`), what evalkit reads;
    ``summary`` is the same as the JSON record written. A detached batch run has no summary
    yet: ``typed`` is ``None`` and ``summary`` holds ``status: batch_submitted``,
    ``benchmark``, ``model`` and the ``batch_ids`` left running."""

    run_dir: Path
    summary: dict[str, Any]
    typed: Summary | None = None
    #: the observer's line when tracking the finished run failed (the run keeps its exit
    #: code; a sweep reports the job as not tracked), else ``None``
    tracking_failure: str | None = None

    @property
    def exit_code(self) -> int:
        if self.typed is None:
            return DETACHED_EXIT_CODE
        return 0 if self.typed.complete else 1


def run_evaluation(specs: RunSpecs, observer: Observer | None = None, phases: Phases | None = None,
                   shared: Session | None = None) -> RunResult:  # fmt: skip
    """Execute one run end to end and return where it left its results. ``specs``: the
    run's specs, built once from its validated config (:func:`evalkit.specs.build`); each
    stage takes its own part. ``phases``: the run's timings so far (the compose), started where the run started;
    ``shared``: the :class:`~evalkit.engine.session.Session` of a sweep whose jobs run in
    this process (Ray, servers and warm workers kept between its runs), ``None`` for a run
    that starts and stops what it needs.

    Raises:
        ConfigError / DataError / RunDirError / TrackingError: before anything is written
            (a tracker's failure after the run: its results are in the run directory).
        RunInterrupted: Ctrl-C once the run directory exists (resume it).
    """
    observer = observer or NullObserver()
    phases = phases or Phases()
    with ExitStack() as stack:
        run_dir, resumed = choose_run_dir(specs.run_dir)
        if resumed and not specs.execution.batch:  # before Ray starts
            BatchExecutor.refuse_live_resume(run_dir)  # a batch still running would answer what a live run buys again
        info = RunInfo(run_dir, resumed, specs.report)
        observer.preflight(info)  # a tracking server's credentials and write permission, before Ray or a worker starts
        ray_stack = stack.enter_context(ExitStack())  # Ray started for this run and its early workers
        plan, early = start(specs, ray_stack, phases, shared)
        observer.run_started(info)
        refused: list[bool] = []
        stack.callback(_remove_refused, run_dir, _existing(run_dir), refused)  # after open_run has closed its log
        state = stack.enter_context(open_run(specs.run_dir, run_dir, resumed))
        try:
            engine = execute(plan, state, phases, early, shared)
        except ConfigError:  # refused before anything was sent (a batch over the budget)
            refused.append(not resumed)
            raise
        if engine is not None and engine.get("batch", {}).get("detached"):  # no summary: the run goes on at the provider
            batches = [e["batch_id"] for e in engine["batch"]["batches"] if not e["collected"]]
            return RunResult(run_dir, {"status": "batch_submitted", "benchmark": specs.report.benchmark,
                                       "model": specs.report.model, "batch_ids": batches})  # fmt: skip
        ray_stack.close()  # the model workers and this run's Ray are stopped before the summary, not held through it
        sequential.narrow(plan, run_dir)  # run.stop_when: a decided run's selection is what it dispatched
        summary = finalize(plan, state, engine, observer, phases)
    return RunResult(run_dir, summary.record(), summary, observer.failure)


def _existing(path: Path) -> Path:
    """The nearest of ``path`` and its parents that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _remove_refused(run_dir: Path, existed: Path, refused: list[bool]) -> None:
    """A new run refused in its execute stage (:class:`~evalkit.errors.ConfigError`: nothing
    was sent) leaves no directory behind when it journaled nothing: ``run_dir`` is removed,
    and the parents made for it (below ``existed``, the nearest that existed before) once
    empty."""
    if not (refused and refused[0]) or any(_has_rows(run_dir / name) for name in (PREDICTIONS, FAILED)):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in run_dir.parents:
        if parent == existed or existed not in parent.parents:
            break
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break


def _has_rows(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0


def start(specs: RunSpecs, stack: ExitStack, phases: Phases, shared: Session | None = None) -> tuple[RunPlan, RayExecutor | None]:
    """For a network model (or a network judge): check an existing response cache and trim it to its size bound
    (:func:`~evalkit.engine.cache.trim_cache`, which evicts only past that bound),
    reach Ray and — when no server of evalkit's must start first — start the model workers
    at once, so that their start-up (litellm's import, in their own processes) runs while
    this process loads the data; then :func:`~evalkit.engine.plan.prepare` (which writes
    nothing) and register the run's solver with the early workers. A Ray instance started
    here is shut down when ``stack`` closes, or, in a sweep's
    :mod:`~evalkit.engine.session`, when the sweep ends."""
    early = None
    execution, models = specs.execution, specs.models
    endpoints = network_endpoints(models)  # built once: for the early workers and the plan
    networked = models.networked  # a network judge too
    if networked:
        cache_dir = execution.cache_dir
        if cache_dir is not None and cache_dir.exists():
            trim_cache(cache_dir)  # a corrupt cache: one line before anything runs; within its size bound
    if networked and not execution.batch:  # a batch run waits in this process: no Ray
        with phases.timed("ray_start_s"):
            started = ensure_ray(execution.address, execution.num_cpus)
        if started and shared is not None:
            shared.ray_started = True
        elif started:
            stack.callback(shutdown_ray)
        early = _early_workers(specs, endpoints, stack, shared, one_first=started and not execution.address)
    with phases.timed("data_load_s"):
        plan = prepare(specs, priced=early is None, endpoints=endpoints)
    if execution.batch:
        BatchExecutor.check(plan)
    if early is not None:
        early.register(plan.bench.solver(), models.agent.sent_params, models.user_sent_params)
        # litellm's prices asked of a worker, which imports litellm anyway: the driver need not
        # import it before the first request (a priced answer's cost imports it as results arrive)
        plan.prices = run_prices(models, plan.with_user, early.litellm_price, specs.run.max_cost_usd)
    return plan, early


def _early_workers(specs: RunSpecs, endpoints: Endpoints, stack: ExitStack, shared: Session | None,
                   one_first: bool = False) -> RayExecutor | None:  # fmt: skip
    """The Ray workers of a network model whose endpoints need no server of evalkit's,
    started at once (their start-up, litellm's import included, overlaps the data load);
    ``one_first``: the Ray instance was started by this run, on this machine's cores: the
    first worker starts alone, the others once it has answered (:class:`RayExecutor`)."""
    factory = serverless_agents(specs.models, endpoints)
    if factory is None:
        return None
    executor = _ray_executor(specs.execution, factory, shared, one_first)
    stack.callback(executor.close)
    return executor


def _ray_executor(execution: ExecutionSpec, agents_factory: Callable[[], Any], shared: Session | None,
                  one_first: bool = False) -> RayExecutor:  # fmt: skip
    """The one place a run's Ray workers are made: ``backend.concurrency`` per run over
    ``runner.num_workers`` workers sharing the response cache; in a sweep's session, the
    warm workers of an earlier run with the same endpoints and cache are reused. A
    ``runner=cluster`` run's requests go through one window per endpoint shared by every run
    on the cluster (``execution.limits``, :mod:`evalkit.engine.ratelimit`); ``runner=local``
    has none (the run is its endpoints' only caller: the driver's window suffices)."""
    return RayExecutor(agents_factory, execution.cache_dir, execution.num_workers, execution.concurrency,
                       warm=shared.workers if shared else None, limits=execution.limits, one_first=one_first)  # fmt: skip


def execute(plan: RunPlan, state: RunState, phases: Phases, early: Executor | None = None,
            shared: Session | None = None) -> dict[str, Any] | None:  # fmt: skip
    """The *execute* stage of a run (the only meaning of "execute" in evalkit; one model
    call is :func:`evalkit.engine.solve.call_model`): solve every unit the journal does not
    hold yet (a resumed run: only what failed or never ran) on ``early`` (workers already
    started) or on new ones. Returns the engine
    figures of :func:`~evalkit.engine.scheduling.run_units` (plus ``units``, the workers'
    ``worker_pids`` and whether they were ``reused_workers`` of an earlier run of a sweep),
    or ``None`` when nothing was pending."""
    journal = read_journal(state.run_dir / PREDICTIONS, plan.request_hashes())
    journal.warn()
    pending = plan.units.without(journal.rows)  # built one by one as they are dispatched
    if state.resumed:  # judge_error samples: their kept answers go to the judges again, the model is not asked
        pending = pending.keeping(kept_answers(state.run_dir, plan.request_hashes()))
    monitor = sequential.start(plan, state.run_dir)  # run.stop_when: the gate, rebuilt from the journal
    if monitor is not None and monitor.decided:
        return None
    log.info("run %s: %s, %d already journaled, %d to run", state.run_dir, counted(len(plan.units), "sample"), len(journal.rows), len(pending))
    if not pending:
        return None
    plan.warn_unpriced()
    execution = plan.specs.execution
    with ExitStack() as stack:
        scorer = stack.enter_context(Scorer(plan.bench, budget_s=plan.bench.settings.score_budget_s))
        executor = early or _open_executor(plan, state, stack, pending, shared)
        store = getattr(plan.bench, "image_store", None)  # a task's images: Ray's store holds as much as the driver
        if store is not None:
            executor.bound_images(store.max_bytes)
        budget = Budget.of_run(plan.specs.run, plan.prices, state.run_dir)
        if budget.limited:
            executor.set_budget(budget)
        executor.wait_ready()
        journaler = stack.enter_context(Journaler(plan, state, scorer, len(pending)))
        journaler.monitor = monitor
        try:
            adaptive = execution.adaptive and not execution.limits  # else the cluster's window adapts
            gated = (monitor.executor(executor, execution.concurrency), monitor.gated(pending), monitor.on_result(journaler.on_result)) \
                if monitor else (executor, pending, journaler.on_result)  # run.stop_when: nothing sent once decided  # fmt: skip
            engine = asyncio.run(journaler.watching(executor, run_units(gated[0], gated[1], execution.concurrency, gated[2],
                                                                        adaptive, budget)))  # fmt: skip
        except KeyboardInterrupt:
            _note_unjournaled(executor.cancel(), state.run_dir)
            raise
        phases.add("scoring_s", journaler.scoring_s)
        phases.add("scoring_tail_s", journaler.scoring_tail_s())
        engine.update(executor.figures())  # read while its workers are up (the stack stops them)
    for name, seconds in engine.pop("phases", {}).items():
        phases.add(name, seconds)
    first = engine.pop("first_dispatch_perf")
    if first is not None:
        phases.since_start("to_first_request_s", first)
    phases.add("requests_s", engine["requests_wall_s"])
    engine["units"] = len(pending)
    return engine


def _note_unjournaled(state: Any, run_dir: Path) -> None:
    """At Ctrl-C, append to ``unjournaled.jsonl`` what the budget's keeper counted spent or
    still reserved beyond the journal (answers paid for but not journaled, calls in flight at
    their upper bound), so that a resume's budget counts them. ``state``: what the
    executor's :meth:`~evalkit.engine.protocol.Executor.cancel` returned."""
    journal_cost, journal_tokens = journal_spend(run_dir)
    if state is None or journal_cost is None and journal_tokens is None:
        return
    cost, tokens, outstanding = state
    row = {
        "cost_usd": None if cost is None or journal_cost is None else max(0.0, cost - journal_cost) + outstanding["cost_usd"],
        "spent_tokens": None if tokens is None or journal_tokens is None else max(0, tokens - journal_tokens) + outstanding["spent_tokens"],
        "note": "answered or in flight at an interruption, not journaled (calls in flight at their upper bound)",
    }  # fmt: skip
    if row["cost_usd"] or row["spent_tokens"]:
        with JsonlAppender(run_dir / UNJOURNALED) as out:
            out.append(row)


def _open_executor(plan: RunPlan, state: RunState, stack: ExitStack, pending: WorkList, shared: Session | None) -> Executor:
    """The models opened (evalkit's own servers started, unless every request is in the
    response cache; in a sweep's session, from its server pool) and their executor; for
    ``run.batch``, the :class:`~evalkit.engine.batch.BatchExecutor` (no model opened: the
    provider answers)."""
    execution = plan.specs.execution
    if execution.batch:
        executor: Executor = BatchExecutor(plan, state.run_dir, list(pending), execution.cache_dir)
        stack.callback(executor.close)
        return executor
    serve = not (plan.models.starts_servers and all_cached(execution.cache_dir, pending, plan.models.model_id))
    if not serve:  # the workers never call the model on a hit
        status.info("every request is in the response cache (%d): llama.cpp's server is not started for the model%s",
                    len(pending), " (a judge's is: its requests come after the answers)" if plan.models.judged_by_own_server else "")
    agents_factory = stack.enter_context(plan.models.open(state.run_dir, pool=shared.servers if shared else None, serve=serve))
    executor = _executor(plan, agents_factory, shared)
    stack.callback(executor.close)
    return executor


def _executor(plan: RunPlan, agents_factory: Callable[[], Any], shared: Session | None) -> Executor:
    """In-process for offline models (answered from tables or scripts: no response cache),
    Ray workers sharing the response cache for network models."""
    models = plan.specs.models
    solver, agent_params, user_params = plan.bench.solver(), models.agent.sent_params, models.user_sent_params
    if plan.models.offline:
        return LocalExecutor(agents_factory, solver, None, agent_params, user_params)
    executor = _ray_executor(plan.specs.execution, agents_factory, shared)
    executor.register(solver, agent_params, user_params)
    return executor


class Journaler:
    """Receives each solved unit in the driver: scores it (bounded in time and memory,
    :class:`~evalkit.engine.scoring.Scorer`) and appends its row to ``predictions.jsonl``,
    or its failure to ``failed.jsonl``; keeps the progress bar.

    Rows are journaled in the order their samples finish. Offline models answer at once,
    so their rows are journaled in selection order (a replay's journal lists the samples as
    its selection does), each scored as soon as it is answered (answers that arrive together
    go to the scoring workers together); network runs score while other units are in flight.
    """

    def __init__(self, plan: RunPlan, state: RunState, scorer: Scorer, total: int):
        self.plan, self.state, self.scorer = plan, state, scorer
        self.stack = ExitStack()
        self.predictions = self.stack.enter_context(JsonlAppender(state.run_dir / PREDICTIONS, transform=secrets.scrub_obj))
        self.failed = self.stack.enter_context(JsonlAppender(state.run_dir / FAILED, transform=secrets.scrub_obj))
        self.in_order = plan.models.offline  # rows journaled in dispatch order (units reach on_result in it)
        self.tail: asyncio.Future[None] | None = None  # the last row asked for, done once journaled (in_order)
        self.scoring_s, self.scoring_since = 0.0, 0.0
        self.last_answer = self.last_journaled = 0.0
        report = plan.specs.report
        self.progress = _progress(total, f"{report.benchmark}/{report.model}", plan.specs.execution.progress)
        self.stack.callback(self.progress.close)
        self.n_failed = 0
        self.monitor: sequential.Monitor | None = None  # run.stop_when: told each row and failure
        self.n_scoring = 0
        self.drawn_at = 0.0
        self.budget_said = False
        self.live: tuple[int, int, float] | None = None  # the executor's calls in flight (Executor.live)

    def __enter__(self) -> "Journaler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    async def watching(self, executor: Executor, work: Awaitable[T], every_s: float = LIVE_EVERY_S) -> T:
        """Await ``work`` (the run's units) while asking ``executor`` every ``every_s``
        seconds what is in flight (:meth:`~evalkit.engine.protocol.Executor.live`) and
        showing it on the bar, which is redrawn then (its elapsed time moves on even while no
        sample finishes)."""

        async def watch() -> None:
            while True:
                await asyncio.sleep(every_s)
                self.live = await executor.live()
                self._postfix()

        watcher = asyncio.ensure_future(watch()) if not self.progress.disable else None
        try:
            return await work
        finally:
            if watcher is not None:
                watcher.cancel()

    async def on_result(self, unit: WorkItem, trajectory: Trajectory) -> None:
        self.last_answer = time.perf_counter()
        if not self.in_order:
            await self._journal(unit, trajectory, self._scored(unit, trajectory))
            return
        # offline: every answer is scored at once (those that arrive together, together), and
        # journaled in dispatch order: each row waits for the row before it
        before, mine = self.tail, asyncio.get_running_loop().create_future()
        self.tail = mine
        scored = asyncio.ensure_future(self._scored(unit, trajectory))
        try:
            if before is not None:
                await asyncio.shield(before)  # shielded: a cancelled row never cancels the one before it
            await self._journal(unit, trajectory, scored)
        finally:
            if not scored.done():
                scored.cancel()
            mine.set_result(None)

    async def _scored(self, unit: WorkItem, trajectory: Trajectory) -> tuple[Any, Any, Any]:
        """``(view, reasoning rule, verdict)`` of a solved unit (the verdict ``None``: the
        scoring budget is spent); ``(None, None, None)`` for a failure (nothing scored)."""
        if trajectory.failure is not None:
            return None, None, None
        view, rule = scored_view(self.plan.bench, trajectory)
        if not self.n_scoring:
            self.scoring_since = time.perf_counter()
        self.n_scoring += 1
        self._postfix()  # the bar says answers are being scored (one may take score_timeout_s)
        try:
            scored = await self.scorer.score(unit.sample, view)
        finally:
            self.n_scoring -= 1
            if not self.n_scoring:  # the seconds some verdict was awaited: overlapping waits counted once
                self.scoring_s += time.perf_counter() - self.scoring_since
        return view, rule, scored

    async def _journal(self, unit: WorkItem, trajectory: Trajectory, scoring: Awaitable[tuple[Any, Any, Any]]) -> None:
        model_id, prices = self.plan.models.model_id, self.plan.prices
        view, rule, scored = await scoring
        if trajectory.failure is None:
            if scored is None:  # the run's scoring budget is spent: a failure of its own kind, never a zero
                self._not_scored(unit, trajectory)
                return
            row = cap_record(prediction_record(unit, model_id, view, scored, prices, rule), self.state.run_dir)
            if unit.rollout:
                write_transcript(self.state.run_dir, unit.sample.id, unit.request.epoch, trajectory)
            self.predictions.append(row)
            if self.monitor is not None:
                self.monitor.row(row)
        else:
            self.n_failed += 1
            self.failed.append(failure_record(unit, model_id, trajectory, prices))
            if self.monitor is not None:
                self.monitor.failure(unit.key)
        self._advance()

    def scoring_tail_s(self) -> float:
        """Seconds from the last answer's arrival to the last row journaled (0.0 when none
        came): the scoring and journaling left after the requests (issue 46, item 4)."""
        return max(0.0, self.last_journaled - self.last_answer) if self.last_answer else 0.0

    def _advance(self) -> None:
        self.last_journaled = time.perf_counter()
        self._postfix(refresh=False)
        self.progress.update(1)

    def _postfix(self, refresh: bool = True) -> None:
        """The bar's postfix (:func:`bar_postfix`), redrawn at most once a second here (the
        bar's own updates redraw it too)."""
        shown = bar_postfix(self.live, self.n_scoring, self.n_failed)
        now = time.monotonic()
        refresh = refresh and now - self.drawn_at >= 1.0
        self.drawn_at = now if refresh else self.drawn_at
        self.progress.set_postfix(shown, refresh=refresh)

    def _not_scored(self, unit: WorkItem, trajectory: Trajectory) -> None:
        """Journal an answer left unscored once ``benchmark.score_budget_s`` is spent as a
        ``score_budget_exceeded`` failure (its tokens and cost kept; a resume scores it)."""
        budget = self.plan.specs.benchmark.score_budget_s
        if not self.budget_said:
            self.budget_said = True
            log.warning("scoring budget spent (benchmark.score_budget_s=%g s): answers not yet scored are failures of kind "
                        "%s; resume the run (with a larger budget) to score them", budget, SCORE_BUDGET_EXCEEDED)  # fmt: skip
        failure = Failure(SCORE_BUDGET_EXCEEDED, f"not scored: the run's scoring budget benchmark.score_budget_s={budget:g} s was spent",
                          attempts=sum(t.get("attempts", 0) for t in trajectory.turns), actor="scorer")  # fmt: skip
        self.n_failed += 1
        self.failed.append(failure_record(unit, self.plan.models.model_id, replace(trajectory, failure=failure), self.plan.prices))
        self._advance()


def bar_postfix(live: tuple[int, int, float] | None, scoring: int, failed: int) -> dict[str, Any]:
    """The progress bar's postfix, each part only when there is some: the model calls in
    flight, the tokens their streamed answers have brought so far and how long the oldest
    has run (from 10 s on) — ``live``, :meth:`~evalkit.engine.protocol.Executor.live`'s
    answer —, the answers being scored now and the failures so far."""
    shown: dict[str, Any] = {}
    if live is not None and live[0]:
        calls, chunks, oldest = live
        shown["in flight"] = calls
        if chunks:
            shown["streamed"] = f"{chunks} tok"
        if oldest >= 10:
            shown["longest"] = f"{oldest:.0f} s"
    shown.update({k: v for k, v in (("scoring", scoring), ("failed", failed)) if v})
    return shown


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="sample", file=sys.stderr, disable=not enabled or total == 0, dynamic_ncols=True)
