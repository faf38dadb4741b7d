"""Where units are solved: in-process (offline models) or on Ray actors (network models).

Scheduling rules of this module (the window and retries are in
:mod:`evalkit.engine.scheduling` and the models, delivery in :mod:`evalkit.engine.delivery`):

* network models run inside Ray actors (``runner.num_workers`` of them, each an async
  actor taking its share of the in-flight units); offline models (reference, replay,
  baselines) run in the driver's event loop — they do no I/O, so Ray would add nothing but
  latency;
* every unit goes through :func:`evalkit.engine.solve.solve_unit`: the benchmark's solver
  with cached, retried model calls, failures returned as data;
* units travel to an actor in small batches, one call of its ``solve`` method each, a Ray
  streaming generator that yields each unit's result as it finishes
  (:class:`~evalkit.engine.delivery.Delivery` decides the batches, resends and duplicates);
* a Ray actor that dies (its process killed, out of memory) is restarted by Ray
  (``max_restarts``) and the units it had in flight are sent again by the driver; an actor
  dead for good is left out of the run; nothing answered is lost, because results are
  journaled by the driver as they arrive.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

from evalkit.engine.budget import Budget, RemoteBudget, keeper
from evalkit.engine.cache import WriteBehind, open_cache
from evalkit.engine.solve import solve_unit
from evalkit.engine.work import WorkItem
from evalkit.engine.delivery import Delivery
from evalkit.engine.protocol import Executor, ExecutorBase  # noqa: F401 - Executor: the protocol these implement
from evalkit.engine.ratelimit import AdaptiveWindow, EndpointGate, endpoint_key, shared_limits, throttled_count
from evalkit.types import Trajectory, sha256_hex

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")  # "what is starting" lines (__main__ shows them)


class LocalExecutor(ExecutorBase):
    """Solves units in the driver's event loop (offline models), under the driver's window."""

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

    async def submit(self, unit: WorkItem) -> Trajectory:
        self.check_draining()
        return await solve_unit(self.solver, unit, self.agents, self.cache, self.agent_params, self.user_params)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


class ModelWorker:
    """A model worker (made a Ray actor by :func:`_worker_class`): it owns the model clients
    (built once, from ``agents_factory``) and a handle on the response cache. Each run that
    uses it registers its solver and parameters (from the object store) under its
    *registration* (``RayExecutor.registration``: a random hex string per run, not the
    tracking ledger's run key), so that the runs of a sweep's jobs reuse one worker and
    litellm is imported once per worker process.

    Units arrive in batches (:meth:`solve`, a Ray streaming generator) and are solved
    concurrently; finished ones go back together (:class:`_Outbox`), their answers stored
    in the response cache first (:class:`~evalkit.engine.cache.WriteBehind`). The worker
    keeps nothing of a unit once it is yielded: resends and duplicates are the driver's
    (:class:`~evalkit.engine.delivery.Delivery`).
    """

    def __init__(self, agents_factory: Callable[[], Any], cache_dir: str | None):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        self.agents = agents_factory()
        cache = open_cache(cache_dir)
        self.cache = WriteBehind(cache) if cache is not None else None  # stored as results go back
        self.runs: dict[str, tuple[Any, dict[str, Any], dict[str, Any], Any]] = {}
        self.forgotten: set[str] = set()  # runs ended: a late call must not register them
        self.running: dict[str, set[asyncio.Future[Any]]] = {}
        self.windows: dict[str, AdaptiveWindow] = {}  # per run: its units in flight here (this worker's share)
        self.outboxes: dict[str, _Outbox] = {}  # per run: its finished units until a stream takes them
        self.leases_claimed = False  # the leases of the process this one replaced were given back

    async def configure(self, registration: str, holder: list[Any]) -> tuple[int, str]:
        """Register a run: ``holder`` wraps the object-store reference of its ``(solver,
        agent params, user params, limits)`` (wrapped, so that Ray passes the reference, not
        the value). Returns :meth:`ping`'s answer."""
        await self._registered(registration, holder)
        return self.ping()

    async def _registered(self, registration: str, holder: list[Any]) -> tuple[Any, dict[str, Any], dict[str, Any], Any] | None:
        if registration not in self.runs and holder:
            state = await holder[0]
            if registration not in self.forgotten and registration not in self.runs:
                if state[3] or self.leases_claimed:
                    await self._gate_models(state[3])
                self.runs[registration] = state
        return self.runs.get(registration)

    async def _gate_models(self, limits: dict[str, tuple[int, bool]] | None) -> None:
        """Give each network model a slot on its endpoint's shared window
        (:mod:`evalkit.engine.ratelimit`; ``limits``: ``{"agent" | "user": (concurrency,
        adaptive)}``), or none (``limits`` ``None``: the run is its endpoints' only caller).
        A process that replaces a lost one first gives back the leases its predecessor held."""
        models = {"agent": self.agents.agent, "user": self.agents.user}
        if not limits:
            for model in models.values():
                if hasattr(model, "gate"):
                    model.gate = None
            return
        import ray

        handle, holder = shared_limits(), ray.get_runtime_context().get_actor_id()
        if not self.leases_claimed:
            await handle.forget.remote(holder)
            self.leases_claimed = True
        for role, model in models.items():
            if role in limits and hasattr(model, "gate"):
                limit, adaptive = limits[role]
                key = endpoint_key(model.provider_model, model.api_base)
                model.gate = EndpointGate(handle, key, limit, adaptive, holder, model.timeout_s)

    def forget(self, registration: str) -> None:
        """Drop a run: its unfinished units are cancelled."""
        self.forgotten.add(registration)
        if self.cache is not None:
            self.cache.flush()
        self.runs.pop(registration, None)
        self.windows.pop(registration, None)
        self.outboxes.pop(registration, None)
        for task in self.running.pop(registration, set()):
            task.cancel()

    def ping(self) -> tuple[int, str | None]:
        """``(process id, Ray node id)`` of this worker (no node outside Ray)."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id() if ray.is_initialized() else None

    def endpoint_keys(self) -> list[str]:
        """The shared windows this worker's models hold slots on (:func:`~evalkit.engine.ratelimit.endpoint_key`)."""
        models = (self.agents.agent, self.agents.user)
        return [m.gate.key for m in models if getattr(m, "gate", None) is not None]

    def price(self, provider_model: str) -> Any:
        """litellm's price of ``provider_model`` (:func:`evalkit.providers.litellm_price`),
        asked here, where litellm is imported already, so the driver need not import it."""
        from evalkit.providers import litellm_price

        return litellm_price(provider_model)

    async def solve(self, registration: str, holder: list[Any], budget: Any, window: tuple[int, bool, int],
                    units: list[WorkItem]) -> AsyncIterator[list[tuple[Any, Any]]]:  # fmt: skip
        """Solve ``units`` of the run registered as ``registration`` (first from ``holder`` when this process
        does not know it: a restarted worker; the driver sends an empty ``holder`` to a
        worker it has not lost, as the run's object reference costs every call), yielding
        ``[(unit key, trajectory or the exception solving raised), ...]`` as units finish,
        ``least`` at a time or what finished within ``RESULTS_WAIT_S`` of the first, the
        results of this run's other calls here too (:class:`_Outbox`: one Ray message for many units; the driver asks for more than
        one only while units wait here ahead of the slots, which keep the slots busy, so this
        delays the driver's journal, not the next unit); nothing for a run that has ended or
        is not known here.

        ``window``: ``(share, adaptive, least)``, ``share`` this worker's share of ``backend.concurrency``:
        the run's units solve here at most ``share`` at a time, fewer while the provider
        throttles (an :class:`~evalkit.engine.ratelimit.AdaptiveWindow` per run, over every
        call of it), and the rest wait here in the order they came (the driver sends units
        ahead of free slots, :class:`~evalkit.engine.delivery.Delivery`). ``budget``: the
        run's :class:`~evalkit.engine.budget.BudgetKeeper` (``None``: no limits), asked
        before each model call."""
        state = await self._registered(registration, holder)
        if state is None:
            return
        solver, agent_params, user_params, _ = state
        gate = RemoteBudget(budget) if budget is not None else None
        slots = self.windows.get(registration) or self.windows.setdefault(registration, AdaptiveWindow(*window[:2]))
        box, mine = self.outboxes.setdefault(registration, _Outbox()), [len(units)]
        running = self.running.setdefault(registration, set())
        tasks = [asyncio.ensure_future(self._one(solver, unit, agent_params, user_params, gate, slots, box, mine)) for unit in units]
        running.update(tasks)
        try:
            async for results in box.stream(mine, window[2], RESULTS_WAIT_S):
                if self.cache is not None:
                    self.cache.flush()  # their answers are stored before they leave
                yield results
        finally:
            for task in tasks:
                task.cancel()
                running.discard(task)

    async def _one(self, solver: Any, unit: WorkItem, agent_params: dict[str, Any], user_params: dict[str, Any],
                   gate: Any, slots: AdaptiveWindow, box: "_Outbox", mine: list[int]) -> None:  # fmt: skip
        try:
            result = await self._in_slot(solver, unit, agent_params, user_params, gate, slots)
        except asyncio.CancelledError:  # wherever it struck: the unit's stream must not wait for it
            box.gone(mine)
            raise
        box.put((unit.key, result), mine)

    async def _in_slot(self, solver: Any, unit: WorkItem, agent_params: dict[str, Any], user_params: dict[str, Any],
                       gate: Any, slots: AdaptiveWindow) -> Any:  # fmt: skip
        seq, result = await slots.acquire(), None
        try:
            result = await solve_unit(solver, unit, self.agents, self.cache, agent_params, user_params, gate)
        except Exception as exc:  # noqa: BLE001 - solve_unit returns failures; this is a bug, re-raised in the driver
            result = _portable(exc)
        finally:
            await slots.release(seq, throttled_count(result) if isinstance(result, Trajectory) else 0)
        return result

    def window_stats(self, registration: str) -> dict[str, int] | None:
        """This worker's window of the run (:meth:`~evalkit.engine.ratelimit.AdaptiveWindow.stats`), or
        ``None`` (it solved nothing of the run in this process)."""
        window = self.windows.get(registration)
        return window.stats() if window is not None else None


def _worker_class() -> Any:
    """:class:`ModelWorker` as a Ray actor class. Its ``solve`` is a streaming generator with
    Ray's task retries off (Ray would re-run it after a worker died and drop items by
    position; the driver resends by unit key) and records no task events (they are for
    Ray's dashboard and state API, which evalkit does not use)."""
    import ray  # deferred: offline runs never import Ray

    ray.method(num_returns="streaming", max_task_retries=0, enable_task_events=False)(ModelWorker.solve)  # annotates in place
    return ray.remote(num_cpus=0)(ModelWorker)


def _portable(exc: Exception) -> Exception:
    """``exc``, or a ``RuntimeError`` naming it (with its traceback) when it would not survive
    the trip to the driver (an exception whose ``__init__`` needs arguments it does not keep
    in ``args``, as many of litellm's do): a result that cannot be read would fail the
    stream that carries it."""
    import traceback

    from ray import cloudpickle

    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - whatever pickling raises
        text = "".join(traceback.format_exception(exc))[-4000:]
        return RuntimeError(f"{type(exc).__name__}: {exc} (raised in a model worker)\n{text}")


#: the longest a model worker's finished unit waits for others to go to the driver with it
#: in one stream item (seconds): when results trickle in one by one, each would otherwise be
#: a Ray message of its own (``perf/engine_cpu.py``, docs/performance.md)
RESULTS_WAIT_S = 0.2


def _wake(waiters: Iterable[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


class _Outbox:
    """A run's finished units in a model worker until one of the run's open ``solve`` streams
    takes them: whichever stream wakes first yields every result ready, its own call's and
    the others' (one Ray message for the results of all the calls open in the worker),
    ``least`` at a time or what finished within ``within_s`` of the first. A stream ends
    once every unit of its own call is gone, on any stream (or cancelled): the driver takes
    a result from whichever stream brings it, and counts a unit its stream ended without as
    lost (:class:`~evalkit.engine.delivery.Delivery`)."""

    def __init__(self) -> None:
        self.ready: list[tuple[tuple[Any, Any], list[int]]] = []  # ((key, result), its call's units not yet gone)
        self.waiters: set[asyncio.Future[None]] = set()  # streams waiting to gather, or to end
        self.gathering: set[asyncio.Future[None]] = set()  # the stream gathering, waiting for more results
        self.collecting = False

    def put(self, result: tuple[Any, Any], mine: list[int]) -> None:
        """A finished unit of the call ``mine``. While a stream gathers, only it is woken (the
        others wait for the gathering to end): one wake per result, not one per open stream."""
        self.ready.append((result, mine))
        _wake(self.gathering if self.collecting else self.waiters)

    def gone(self, mine: list[int]) -> None:
        """A unit of the call ``mine`` counts ended without a result (cancelled)."""
        mine[0] -= 1
        _wake(self.waiters)

    @staticmethod
    async def _until(ok: Callable[[], bool], deadline: float | None, into: set[asyncio.Future[None]]) -> None:
        """Return once ``ok()`` holds or ``deadline`` (the loop's clock) has passed,
        checking each time a future put in ``into`` is woken."""
        loop = asyncio.get_running_loop()
        while not ok() and (deadline is None or loop.time() < deadline):
            waiter = loop.create_future()
            into.add(waiter)
            timer = None if deadline is None else loop.call_at(deadline, _wake, (waiter,))
            try:
                await waiter
            finally:
                into.discard(waiter)
                if timer is not None:
                    timer.cancel()

    async def stream(self, mine: list[int], least: int, within_s: float) -> AsyncIterator[list[tuple[Any, Any]]]:
        loop = asyncio.get_running_loop()
        while mine[0] > 0:
            await self._until(lambda: bool(self.ready) and not self.collecting or mine[0] <= 0, None, self.waiters)
            if mine[0] <= 0:
                return
            self.collecting = True  # one stream gathers at a time; the others wait for what comes after
            try:
                await self._until(lambda: len(self.ready) >= least, loop.time() + within_s, self.gathering)
            finally:
                self.collecting = False
                _wake(self.waiters)  # a stream closed while gathering leaves the others to it
            taken, self.ready = self.ready, []
            for _, owner in taken:
                owner[0] -= 1
            _wake(self.waiters)  # a stream whose units went here may end; another may gather
            if taken:
                yield [result for result, _ in taken]


#: the custom resource of the nodes meant for model workers (launchers/ray_local_cluster.sh
#: gives it to its worker nodes): when the cluster has it, every model worker needs it, so
#: the workers run there and the head keeps the driver
WORKER_RESOURCE = "evalkit_worker"

#: a dead actor is restarted this many times in its life (a run's, or a sweep's while it is
#: kept warm); a unit lost with its worker ``UNIT_MAX_TRIES`` times is a ``worker_died`` failure
ACTOR_MAX_RESTARTS = 3


def _pool_key(agents_factory: Callable[[], Any], cache: str | None, n: int, per_actor: int) -> str:
    """What makes workers reusable by another run: the same clients (model, endpoint,
    credentials), response cache, number of workers and per-worker concurrency."""
    return sha256_hex(pickle.dumps((agents_factory, cache, n, per_actor)))


class RayExecutor(ExecutorBase):
    """Spreads units over ``num_workers`` async Ray actors (:class:`ModelWorker`) through a
    :class:`~evalkit.engine.delivery.Delivery`: each actor solves its share of
    ``backend.concurrency`` at once (``shares``), and one with a share of 8 or more holds up
    to twice as many units again waiting (``ahead`` in all: such a unit waits only while
    every slot of its actor is taken); batches go to the live actors with the emptiest
    rooms; results come back on Ray streaming generators as they finish.

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
        limits: dict[str, tuple[int, bool]] | None = None,
        adaptive: bool = True,
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
            self.workers = self._start(agents_factory, cache, n, concurrency)
            if warm is not None:
                warm[key] = self.workers
        self.registration = uuid.uuid4().hex
        self._holder: list[Any] = []
        self._ready: list[Any] = [w.ping.remote() for w in self.workers]
        self.pids: list[int] = []
        self.shares = [concurrency // n + (i < concurrency % n) for i in range(n)]  # they sum to concurrency
        self.delivery = Delivery(self.workers, (self.registration, [], None), self.shares, adaptive,
                                 again_args=(self.registration, self._holder, None))  # fmt: skip
        self.keeps_window, self.ahead = True, self.delivery.ahead  # units the workers may hold beyond their free slots
        self.budget_keeper: Any = None
        self.limits = limits
        if limits:
            self.limits_actor = shared_limits()  # made here first: on the driver's node

    @staticmethod
    def _start(agents_factory: Callable[[], Any], cache: str | None, n: int, concurrency: int) -> list[Any]:
        import ray

        worker_cls = _worker_class()
        placed = ray.cluster_resources().get(WORKER_RESOURCE, 0) > 0
        status.info("starting %s%s…", "1 model worker (a Ray actor)" if n == 1 else f"{n} model workers (Ray actors)",
                    f" on the nodes offering {WORKER_RESOURCE}" if placed else "")  # fmt: skip
        return [
            worker_cls.options(
                max_concurrency=concurrency + 16,  # calls: a solve per unit at most (all of them, the others lost), pings, set-up
                max_restarts=ACTOR_MAX_RESTARTS,
                max_task_retries=-1,  # calls other than solve made while Ray restarts the actor wait for it
                scheduling_strategy="SPREAD",  # one actor per node first on a cluster
                resources={WORKER_RESOURCE: 1} if placed else None,
            ).remote(agents_factory, cache)
            for _ in range(n)
        ]

    def register(self, solver: Any, agent_params: dict[str, Any], user_params: dict[str, Any]) -> None:
        """Give the workers this run's solver, parameters and shared endpoint limits (through
        the object store)."""
        self._holder.append(self._ray.put((solver, agent_params, user_params, self.limits)))
        self._ready = [w.configure.remote(self.registration, self._holder) for w in self.workers]

    def wait_ready(self) -> None:
        """Wait until every worker has started and registered this run (idempotent);
        ``pids`` are then the workers' process ids and ``ready_s`` the seconds from the
        executor's creation."""
        if not self.pids:
            where = self._ray.get(self._ready)
            self.delivery.where = list(where)
            self.pids = [pid for pid, _ in where]
            self.ready_s = round(time.perf_counter() - self.started, 4)
            log.info("%d model workers ready (process ids %s%s) %.2f s after they were started", len(self.pids),
                     ", ".join(map(str, self.pids)), "; kept warm from an earlier run" if self.reused else "", self.ready_s)

    def figures(self) -> dict[str, Any]:
        """The cluster's part of ``summary.json`` → ``engine``: ``worker_pids``, ``reused_workers``
        (kept warm from an earlier run of a sweep), the ``workers_ready_s`` phase, ``nodes`` (per Ray node the
        model workers ran on: ``node_id``, ``units`` its workers delivered, their
        ``worker_pids``), ``driver_node``, ``delivery`` (units ``resent`` after a worker was
        lost, ``duplicates`` dropped, ``workers_lost`` for good), and with shared limits ``rate_limits`` (per
        endpoint: the shared window's figures over every caller since it was made,
        :meth:`~evalkit.engine.ratelimit.EndpointLimits.stats`)."""
        nodes: dict[str, dict[str, Any]] = {}
        for (_, where), units in sorted(self.delivery.served.items(), key=lambda kv: str(kv[0])):
            pid, node = where if where is not None else (None, "unknown")
            entry = nodes.setdefault(node, {"node_id": node, "units": 0, "worker_pids": []})
            entry["units"] += units
            if pid is not None and pid not in entry["worker_pids"]:
                entry["worker_pids"].append(pid)
        out: dict[str, Any] = {"nodes": list(nodes.values()), "driver_node": self._ray.get_runtime_context().get_node_id(),
                               "delivery": dict(self.delivery.stats), **self._window_stats()}  # fmt: skip
        out.update(worker_pids=self.pids, reused_workers=self.reused, phases={"workers_ready_s": self.ready_s or 0.0})
        if self.limits:
            out["rate_limits"] = self._limit_stats()
        return out

    def _window_stats(self, timeout_s: float = 30.0) -> dict[str, int]:
        """The workers' windows over this run's units, summed (each worker's own
        :meth:`~evalkit.engine.ratelimit.AdaptiveWindow.stats` over its share): ``concurrency``
        (the shares' sum, ``backend.concurrency``), ``peak_in_flight`` (the sum of each worker's
        peak: an upper bound of the units in flight at once), ``min_window`` (the sum of each
        worker's smallest window) and ``window_decreases``; empty when no worker answers."""
        try:
            stats = self._ray.get([w.window_stats.remote(self.registration) for w, up in zip(self.workers, self.delivery.live) if up],
                                  timeout=timeout_s)  # fmt: skip
        except Exception:  # noqa: BLE001 - a worker gone: the driver's figures stand
            log.warning("the model workers' window figures could not be read", exc_info=True)
            return {}
        stats = [s for s in stats if s is not None]
        keys = ("peak_in_flight", "min_window", "window_decreases")
        return {"concurrency": sum(self.shares), **({k: sum(s[k] for s in stats) for k in keys} if stats else {})}

    def _limit_stats(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """``{endpoint key: shared window figures}`` (empty when no worker or limits actor answers)."""
        for worker, up in zip(self.workers, self.delivery.live):
            if not up:
                continue
            try:
                keys = self._ray.get(worker.endpoint_keys.remote(), timeout=timeout_s)
                stats = self._ray.get([self.limits_actor.stats.remote(k) for k in keys], timeout=timeout_s)
            except Exception:  # noqa: BLE001 - a worker or the actor gone: no figures
                log.warning("the shared rate limits' figures could not be read", exc_info=True)
                return {}
            return {k: v for k, v in zip(keys, stats) if v is not None}
        return {}

    def litellm_price(self, provider_model: str) -> Any:
        """litellm's price of ``provider_model``, asked of a worker (waits for its start)."""
        return self._ray.get(self.workers[0].price.remote(provider_model))

    def set_budget(self, budget: Budget) -> None:
        """Have every model call of this run reserve against ``budget`` (limited), held by a
        :class:`~evalkit.engine.budget.BudgetKeeper` actor."""
        self.budget_keeper = keeper(budget)
        self.delivery.solve_args = (self.registration, [], self.budget_keeper)
        self.delivery.again_args = (self.registration, self._holder, self.budget_keeper)

    def budget_state(self, timeout_s: float = 10.0) -> Any:
        """The keeper's ``(cost_usd, tokens, outstanding)``, or ``None`` (no keeper, or no answer)."""
        if self.budget_keeper is None:
            return None
        try:
            return self._ray.get(self.budget_keeper.state.remote(), timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a keeper gone: nothing to read
            return None

    async def submit(self, unit: WorkItem) -> Trajectory:
        self.check_draining()
        return await self.delivery.submit(unit)

    def close(self) -> None:
        """Stop the workers, or (kept warm for later runs) drop this run's registration; a
        warm pool with a worker dead for good is stopped and dropped, so that a later run
        starts new workers."""
        self.delivery.close()
        if self.budget_keeper is not None:
            self._ray.kill(self.budget_keeper)
        if self.warm is not None and not all(self.delivery.live):
            self.warm.pop(self._key, None)
            self.warm = None
        for worker in self.workers:
            try:
                if self.warm is None:
                    self._ray.kill(worker)
                else:
                    worker.forget.remote(self.registration)
            except Exception:  # noqa: BLE001 - a dead worker is already gone
                pass

    # ---- the rest of the Executor protocol (evalkit.engine.protocol) ------------------------
    def cancel(self) -> Any:
        """Ctrl-C: the budget keeper's count (:meth:`budget_state`); the units in flight are
        abandoned when :meth:`close` stops the workers or forgets the run."""
        return self.budget_state()
