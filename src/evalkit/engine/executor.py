"""Where units are solved: in-process (offline models) or on Ray actors (network models).

Scheduling rules of this module (the window and retries are in
:mod:`evalkit.engine.scheduling` and the models):

* network models run inside Ray actors (``runner.num_workers`` of them, each an async
  actor taking its share of the in-flight units); offline models (reference, replay,
  baselines) run in the driver's event loop — they do no I/O, so Ray would add nothing but
  latency;
* every unit goes through :func:`evalkit.engine.calls.solve_unit`: the benchmark's solver
  with cached, retried model calls, failures returned as data;
* units travel to an actor, and their results back, in batches (what is ready in one turn
  of the driver's event loop goes in one call; a collect call brings every result ready),
  because a Ray call costs more CPU than evalkit's own work on a unit; a result stays in
  the actor until the driver acknowledges it, so no failed call loses one;
* a Ray actor that dies (its process killed, out of memory) is restarted by Ray
  (``max_restarts``) and the units it had in flight are sent again by the driver (at most
  ``UNIT_MAX_RESENDS`` times each, then they are ``worker_died`` failures); an actor
  dead for good is left out of the run; nothing answered is lost, because results are
  journaled by the driver as they arrive.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import pickle
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol

from evalkit.engine.calls import Unit, open_cache, solve_unit
from evalkit.types import Failure, Trajectory, sha256_hex

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")  # "what is starting" lines (__main__ shows them)


class Executor(Protocol):
    """Solves units; ``submit`` never raises for a unit's own failure (it is in the
    trajectory's ``failure``)."""

    async def submit(self, unit: Unit) -> Trajectory:  # pragma: no cover - protocol
        ...

    def close(self) -> None:  # pragma: no cover - protocol
        ...


class LocalExecutor:
    """Solves units in the driver's event loop (offline models)."""

    def __init__(
        self,
        agents_factory: Callable[[], Any],
        solver: Any,
        cache_dir: str | Path | None,
        agent_params: dict[str, Any],
        user_params: dict[str, Any],
    ):
        self.agents = agents_factory()
        self.solver = solver
        self.cache = open_cache(cache_dir)
        self.agent_params = agent_params
        self.user_params = user_params

    async def submit(self, unit: Unit) -> Trajectory:
        return await solve_unit(self.solver, unit, self.agents, self.cache, self.agent_params, self.user_params)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


class ModelWorker:
    """A model worker (made a Ray actor by :func:`_worker_class`): it owns the model clients
    (built once, from ``agents_factory``) and a handle on the response cache. Each run that
    uses it registers its solver and parameters under a job key (:meth:`configure`, from the
    object store), so that the jobs of a sweep reuse one worker and litellm is imported once
    per worker process.

    Units arrive in batches (:meth:`submit`: ``(token, unit)`` pairs and the run's key) and
    are solved concurrently; results leave in batches (:meth:`collect`: every result not
    yet acknowledged, as soon as there is one). That is two Ray calls per batch instead of
    one per unit; each Ray call costs the driver and the worker about 0.35 ms of CPU.

    Nothing is lost with a call: a result stays here until a later :meth:`collect`
    acknowledges it, so a collect whose answer never reached the driver (Ray reported the
    call failed) costs nothing but a second answer; a unit sent twice under one token is
    started once. ``incarnation`` is new in every process, so the driver knows a restarted
    worker, which has lost every unit it held, from its answers.
    """

    def __init__(self, agents_factory: Callable[[], Any], cache_dir: str | None):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        self.agents = agents_factory()
        self.cache = open_cache(cache_dir)
        self.incarnation = uuid.uuid4().hex
        self.jobs: dict[str, _WorkerJob] = {}
        self.forgotten: set[str] = set()  # runs ended: a late configure must not register them

    async def configure(self, job: str, holder: list[Any]) -> int:
        """Register a run: ``holder`` wraps the object-store reference of its ``(solver,
        agent params, user params)`` (wrapped, so that Ray passes the reference, not the
        value). Returns this worker's process id."""
        if job not in self.jobs:
            solver, agent_params, user_params = await holder[0]
            if job not in self.forgotten:
                self.jobs.setdefault(job, _WorkerJob(solver, agent_params, user_params))
        return os.getpid()

    def forget(self, job: str) -> None:
        """Drop a run: its unfinished units are cancelled."""
        self.forgotten.add(job)
        state = self.jobs.pop(job, None)
        if state is not None:
            state.close()

    def ping(self) -> int:
        return os.getpid()

    def price(self, provider_model: str) -> Any:
        """litellm's price of ``provider_model`` (:func:`evalkit.providers.litellm_price`),
        asked here, where litellm is imported already, so the driver need not import it."""
        from evalkit.providers import litellm_price

        return litellm_price(provider_model)

    async def submit(self, job: str, units: list[tuple[int, Unit]]) -> str | None:
        """Start solving ``units`` (``(token, unit)`` pairs; a token started already is
        skipped) of run ``job``. Returns this process's incarnation, or ``None`` (nothing
        started) when the run is not registered here (a new process): the driver then
        registers it and sends the batch again."""
        state = self.jobs.get(job)
        if state is None:
            return None
        for token, unit in units:
            state.start(token, lambda unit=unit: solve_unit(state.solver, unit, self.agents, self.cache, state.agent_params, state.user_params))
        return self.incarnation

    async def collect(self, job: str, ack: list[int], wait_s: float) -> tuple[str, list[tuple[int, Any]]]:
        """Drop the results whose tokens are in ``ack`` (the driver has them), then return
        ``(incarnation, [(token, trajectory or the exception solving raised), ...])`` with
        every result left, waiting up to ``wait_s`` seconds for one when there is none (a
        run not registered here answers at once, with none)."""
        state = self.jobs.get(job)
        if state is None:
            await asyncio.sleep(min(wait_s, 0.05))  # a new process, before the driver registers the run
            return self.incarnation, []
        return self.incarnation, await state.take(ack, wait_s)


def _worker_class() -> Any:
    """:class:`ModelWorker` as a Ray actor class. Its ``submit`` and ``collect`` calls record
    no task events (they are for Ray's dashboard and state API, which evalkit does not use,
    and cost the GCS work on every call)."""
    import ray  # deferred: offline runs never import Ray

    for method in (ModelWorker.submit, ModelWorker.collect):
        ray.method(enable_task_events=False)(method)  # annotates in place
    return ray.remote(num_cpus=0)(ModelWorker)


class _WorkerJob:
    """A run's side of a model worker: its solver and parameters, the tokens started, and
    the results not yet acknowledged."""

    def __init__(self, solver: Any, agent_params: dict[str, Any], user_params: dict[str, Any]):
        self.solver, self.agent_params, self.user_params = solver, agent_params, user_params
        self.started: set[int] = set()
        self.done: dict[int, Any] = {}
        self.ready = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, token: int, solving: Callable[[], Awaitable[Trajectory]]) -> None:
        if token in self.started:
            return
        self.started.add(token)
        task = asyncio.ensure_future(self._finish(token, solving))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish(self, token: int, solving: Callable[[], Awaitable[Trajectory]]) -> None:
        try:
            result: Any = await solving()
        except Exception as exc:  # noqa: BLE001 - solve_unit returns failures; this is a bug, re-raised in the driver
            result = _portable(exc)
        self.done[token] = result
        self.ready.set()

    async def take(self, ack: list[int], wait_s: float) -> list[tuple[int, Any]]:
        for token in ack:
            self.done.pop(token, None)
            self.started.discard(token)
        if not self.done:
            self.ready.clear()
            try:
                await asyncio.wait_for(self.ready.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        return list(self.done.items())

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        self.done.clear()


def _portable(exc: Exception) -> Exception:
    """``exc``, or a ``RuntimeError`` naming it (with its traceback) when it would not survive
    the trip to the driver (an exception whose ``__init__`` needs arguments it does not keep
    in ``args``, as many of litellm's do): a result that cannot be read would fail every
    collect that carries it."""
    import traceback

    from ray import cloudpickle

    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - whatever pickling raises
        text = "".join(traceback.format_exception(exc))[-4000:]
        return RuntimeError(f"{type(exc).__name__}: {exc} (raised in a model worker)\n{text}")


#: a dead actor is restarted this many times in its life (a run's, or a sweep's while it is
#: kept warm); a unit is sent again this many times after the worker holding it died (a unit
#: that kills its worker every time ends as a ``worker_died`` Failure)
ACTOR_MAX_RESTARTS = 3
UNIT_MAX_RESENDS = 2  # the driver's count: Ray itself retries a call for as long as it restarts the actor
#: a collect call waits this long for a result before answering with none
COLLECT_WAIT_S = 5.0
#: a worker whose calls fail this many times in a row (errors other than its death, which
#: Ray reports at once) is given up for this run: the units it held go to the others
MAX_CALL_FAILURES = 8


def _pool_key(agents_factory: Callable[[], Any], cache: str | None, n: int, per_actor: int) -> str:
    """What makes workers reusable by another run: the same clients (model, endpoint,
    credentials), response cache, number of workers and per-worker concurrency."""
    return sha256_hex(pickle.dumps((agents_factory, cache, n, per_actor)))


@dataclass
class _Sent:
    """A unit handed to a worker: its result's future, the worker (lane; -1 while it waits
    to be sent again), the incarnation that accepted it (``None`` while its batch is on the
    way) and the number of times it was sent."""

    unit: Unit
    future: asyncio.Future[Trajectory]
    lane: int = -1
    incarnation: str | None = None
    sends: int = 0


@dataclass
class _Lane:
    """The driver's view of one worker: the units it holds, those waiting for the next
    batch, the task collecting its results, the tokens to acknowledge on the next collect,
    its current incarnation and those known gone, and whether it was given up."""

    tokens: set[int] = field(default_factory=set)
    outbox: list[int] = field(default_factory=list)
    collector: asyncio.Future[None] | None = None
    ack: list[int] = field(default_factory=list)
    incarnation: str | None = None
    gone: set[str] = field(default_factory=set)
    failures: int = 0
    dead: bool = False


class RayExecutor:
    """Spreads units over ``num_workers`` async Ray actors (:class:`ModelWorker`), each unit to
    the live actor with the fewest units in flight.

    The driver's window keeps the total in flight at ``concurrency``, so no actor holds
    more than ``ceil(concurrency / num_workers)``, and a unit never waits behind a slow
    request on one actor while another has fewer (round robin would queue it there).
    Units that become ready in the same turn of the event loop go to an actor in one
    batch, and results come back in batches, each result handed on the moment its batch
    arrives.

    A worker that dies is restarted by Ray (``max_restarts``; Ray holds and retries the
    calls made meanwhile); its first answer after that carries a new incarnation, and the
    units the old one held are sent again, to another worker if there is one (at most
    ``UNIT_MAX_RESENDS`` times each, then they are ``worker_died`` failures). A worker
    that Ray reports dead for good, or whose calls keep failing, is left out of the run and
    its units go to the others; with none left, units are ``worker_died`` failures at once.

    Creating the executor starts the workers without waiting (they need only the model
    clients: the engine starts them while the benchmark's data loads); :meth:`register`
    gives them the run's solver and parameters, and :meth:`wait_ready` waits for both (the
    engine calls it before the first request). With ``warm`` (a sweep session's ``{key:
    actors}``), workers of an earlier run with the same key are reused, and new ones are
    kept there for later runs instead of being stopped.
    """

    def __init__(
        self,
        agents_factory: Callable[[], Any],
        cache_dir: str | Path | None,
        num_workers: int,
        concurrency: int,
        warm: dict[str, list[Any]] | None = None,
    ):
        import ray  # deferred: offline runs never import Ray

        self._ray = ray
        self.started = time.perf_counter()
        self.ready_s: float | None = None
        n = max(1, min(num_workers, concurrency))
        per_actor = -(-concurrency // n)
        cache = str(cache_dir) if cache_dir else None
        key = _pool_key(agents_factory, cache, n, per_actor)
        self.warm, self._key = warm, key
        self.reused = warm is not None and key in warm
        if self.reused:
            self.workers = warm[key]  # type: ignore[index]
        else:
            self.workers = self._start(agents_factory, cache, n)
            if warm is not None:
                warm[key] = self.workers
        self.job = uuid.uuid4().hex
        self._holder: list[Any] = []
        self._ready: list[Any] = [w.ping.remote() for w in self.workers]
        self.pids: list[int] = []
        self._lanes = [_Lane() for _ in self.workers]
        self._sent: dict[int, _Sent] = {}
        self._tokens = itertools.count()
        self._flush_soon = False
        self._tasks: set[asyncio.Future[None]] = set()

    @staticmethod
    def _start(agents_factory: Callable[[], Any], cache: str | None, n: int) -> list[Any]:
        worker_cls = _worker_class()
        status.info("starting %s…", "1 model worker (a Ray actor)" if n == 1 else f"{n} model workers (Ray actors)")
        return [
            worker_cls.options(
                max_concurrency=64,  # calls, not units: a collect waiting, submits, the set-up calls
                max_restarts=ACTOR_MAX_RESTARTS,
                max_task_retries=-1,  # calls made while Ray restarts the actor wait for it
                scheduling_strategy="SPREAD",  # one actor per node first on a cluster
            ).remote(agents_factory, cache)
            for _ in range(n)
        ]

    def register(self, solver: Any, agent_params: dict[str, Any], user_params: dict[str, Any]) -> None:
        """Give the workers this run's solver and parameters (through the object store)."""
        self._holder = [self._ray.put((solver, agent_params, user_params))]
        self._ready = [w.configure.remote(self.job, self._holder) for w in self.workers]

    def wait_ready(self) -> None:
        """Wait until every worker has started and registered this run (idempotent);
        ``pids`` are then the workers' process ids and ``ready_s`` the seconds from the
        executor's creation."""
        if not self.pids:
            self.pids = self._ray.get(self._ready)
            self.ready_s = round(time.perf_counter() - self.started, 4)

    def litellm_price(self, provider_model: str) -> Any:
        """litellm's price of ``provider_model``, asked of a worker (waits for its start)."""
        return self._ray.get(self.workers[0].price.remote(provider_model))

    async def submit(self, unit: Unit) -> Trajectory:
        token = next(self._tokens)
        future: asyncio.Future[Trajectory] = asyncio.get_running_loop().create_future()
        self._sent[token] = _Sent(unit, future)
        self._dispatch(token)  # may resolve it at once (no live worker)
        return await future

    # -- the driver's side of the batches ------------------------------------------------------
    def _dispatch(self, token: int, avoid: int | None = None) -> None:
        """Queue a unit for the least-loaded live worker (other than ``avoid``, if there is
        another); its batch leaves at the next turn of the event loop, and that worker's
        collector runs while it holds units. With no live worker, the unit is a failure."""
        live = [k for k, lane in enumerate(self._lanes) if not lane.dead]
        if not live:
            self._fail(token, RuntimeError("every model worker of this run died"))
            return
        i = min([k for k in live if k != avoid] or live, key=lambda k: len(self._lanes[k].tokens))
        lane, sent = self._lanes[i], self._sent[token]
        sent.lane, sent.incarnation, sent.sends = i, None, sent.sends + 1
        lane.tokens.add(token)
        lane.outbox.append(token)
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)
        if lane.collector is None or lane.collector.done():
            lane.collector = self._spawn(self._collect(i))

    def _spawn(self, work: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _flush(self) -> None:
        self._flush_soon = False
        for i, lane in enumerate(self._lanes):
            if lane.outbox:
                batch, lane.outbox = lane.outbox, []
                self._spawn(self._send(i, [(t, self._sent[t].sends) for t in batch if self._holds(i, t)]))

    def _holds(self, i: int, token: int, sends: int | None = None) -> bool:
        """Whether worker ``i`` is (still) the one a unit was sent to (that time)."""
        sent = self._sent.get(token)
        return sent is not None and sent.lane == i and (sends is None or sent.sends == sends)

    async def _send(self, i: int, batch: list[tuple[int, int]]) -> None:
        units = [(t, self._sent[t].unit) for t, s in batch if self._holds(i, t, s)]
        if not units:
            return
        worker = self.workers[i]
        try:
            incarnation = await worker.submit.remote(self.job, units)
            if incarnation is None:  # a new process of the worker: register the run, send again
                await worker.configure.remote(self.job, self._holder)
                incarnation = await worker.submit.remote(self.job, units)
        except Exception as exc:  # noqa: BLE001 - any failed call: the units are sent again
            incarnation, lost = None, exc
        else:
            lost = RuntimeError("the model worker was restarted")
        held = [t for t, s in batch if self._holds(i, t, s)]  # not answered or moved meanwhile
        if incarnation is None or incarnation in self._lanes[i].gone:  # failed, or restarted (again) meanwhile
            self._lost(i, held, lost)
            return
        for token in held:
            self._sent[token].incarnation = incarnation

    async def _collect(self, i: int) -> None:
        """Collect worker ``i``'s results while it holds units: hand each on, acknowledge it
        on the next call, and send again the units of an incarnation that is gone."""
        lane = self._lanes[i]
        while lane.tokens and not lane.dead:
            try:
                incarnation, done = await self.workers[i].collect.remote(self.job, lane.ack, COLLECT_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - any failed call: try again, or give the worker up
                await self._call_failed(i, exc)
                continue
            lane.failures, lane.ack = 0, [token for token, _ in done]
            if incarnation != lane.incarnation:
                if lane.incarnation is not None:
                    lane.gone.add(lane.incarnation)
                lane.incarnation = incarnation
            for token, result in done:
                self._resolve(token, result)
            # accepted by another process of this worker (one gone: it held them; in the rare
            # case of a newer one whose answer this is not, sending again costs a duplicate)
            stale = [t for t in lane.tokens if self._sent[t].incarnation not in (None, incarnation)]
            self._lost(i, stale, RuntimeError("the model worker was restarted"))

    async def _call_failed(self, i: int, exc: BaseException) -> None:
        """A collect call of worker ``i`` failed: give the worker up when Ray says it is dead
        for good or its calls keep failing (its units go to the others), else pause."""
        from ray.exceptions import ActorDiedError

        lane = self._lanes[i]
        lane.failures += 1
        if isinstance(exc, ActorDiedError) or lane.failures >= MAX_CALL_FAILURES:
            log.warning("model worker %d is left out of this run (%s: %s)", i, type(exc).__name__, str(exc)[:200])
            lane.dead = True
            self._lost(i, list(lane.tokens), exc)
        else:
            await asyncio.sleep(min(0.05 * 2**lane.failures, 2.0))

    def _lost(self, i: int, tokens: list[int], exc: BaseException) -> None:
        """Units worker ``i`` lost (its process, or the call carrying them): each is sent
        again after a pause that lets Ray restart the worker, or is a failure past the limit."""
        tokens = [t for t in tokens if self._holds(i, t)]
        if tokens:
            log.warning("model worker %d lost %d unit(s) in flight (%s); sending them again", i, len(tokens), type(exc).__name__)
        for token in tokens:
            sent = self._sent[token]
            self._lanes[i].tokens.discard(token)
            sent.lane = -1  # in no worker's hands until sent again
            if sent.sends > UNIT_MAX_RESENDS:
                self._fail(token, exc)
            else:
                self._spawn(self._send_again(token, i, 0.2 * sent.sends))

    async def _send_again(self, token: int, avoid: int, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if self._holds(-1, token):
            self._dispatch(token, avoid)

    def _fail(self, token: int, exc: BaseException) -> None:
        actor = "environment" if self._sent[token].unit.rollout else "model"
        self._resolve(token, Trajectory(failure=Failure("worker_died", f"{type(exc).__name__}: {exc}"[:500], actor=actor)))

    def _resolve(self, token: int, result: Any) -> None:
        sent = self._sent.pop(token, None)
        if sent is None:  # answered already (sent twice around a restart)
            return
        if sent.lane >= 0:
            self._lanes[sent.lane].tokens.discard(token)
        if sent.future.done():
            return
        if isinstance(result, BaseException):
            sent.future.set_exception(result)
        else:
            sent.future.set_result(result)

    def close(self) -> None:
        """Stop the workers, or (kept warm for later runs) drop this run's registration; a
        warm pool with a worker dead for good is stopped and dropped, so that a later run
        starts new workers."""
        for task in list(self._tasks):
            task.cancel()
        if self.warm is not None and any(lane.dead for lane in self._lanes):
            self.warm.pop(self._key, None)
            self.warm = None
        for worker in self.workers:
            try:
                if self.warm is None:
                    self._ray.kill(worker)
                else:
                    worker.forget.remote(self.job)
            except Exception:  # noqa: BLE001 - a dead worker is already gone
                pass

