"""Where units are solved: in-process (offline models) or on Ray actors (network models).

Scheduling rules of this module (the window and retries are in
:mod:`evalkit.engine.scheduling`, the driver's side of the workers in :mod:`evalkit.engine.delivery`):

* network models run inside Ray actors (``runner.num_workers`` of them, async actors);
  offline models (reference, replay, baselines) run in the driver's event loop — they do
  no I/O, so Ray would add nothing but latency;
* every unit goes through :func:`evalkit.engine.solve.solve_unit`: the benchmark's solver
  with cached, retried model calls, failures returned as data;
* a unit (a sample's single request or a whole agent rollout) is one call of a worker's
  :meth:`ModelWorker.solve`, awaited by the driver; a lost worker is Ray's to restart and
  its lost calls the driver's to send again (:mod:`evalkit.engine.delivery` says how far);
* a unit's images go to its worker by reference, each put in Ray's object store once per
  run (:class:`evalkit.images.ImageRefs` says why and how).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, Callable

from evalkit.engine.budget import Budget, RemoteBudget, keeper
from evalkit.engine.cache import WriteBehind, open_cache
from evalkit.engine.delivery import UNIT_MAX_TRIES, Delivery
from evalkit.engine.ratelimit import EndpointGate, endpoint_key, shared_limits
from evalkit.engine.solve import solve_unit
from evalkit.engine.work import WorkItem
from evalkit.engine.protocol import Executor, ExecutorBase  # noqa: F401 - Executor: the protocol these implement
from evalkit.errors import counted, host_load, within
from evalkit.images import ImageRefs, resolve_images
from evalkit.types import Failure, Trajectory, sha256_hex

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")  # "what is starting" lines (__main__ shows them)


class LocalExecutor(ExecutorBase):
    """Solves units in the driver's event loop (offline models), under the driver's window."""

    def __init__(self, agents_factory: Callable[[], Any], solver: Any, cache_dir: str | Path | None, agent_params: dict[str, Any],
                 user_params: dict[str, Any]):  # fmt: skip
        self.agents, self.solver, self.cache = agents_factory(), solver, open_cache(cache_dir)
        self.agent_params, self.user_params = agent_params, user_params

    async def submit(self, unit: WorkItem) -> Trajectory:
        self.check_draining()
        return await solve_unit(self.solver, unit, self.agents, self.cache, self.agent_params, self.user_params)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


class ModelWorker:
    """A model worker (a Ray actor, :func:`_worker_class`): it owns the model clients (built
    once) and the response cache, written behind the results (:class:`~evalkit.engine.cache.WriteBehind`).
    A unit is one call of :meth:`solve`, which carries the run's solver and parameters as an
    object-store reference, read once per process and run (``runs``, keyed by a random hex
    string per run): a sweep's runs share a worker; a process Ray restarted reads the run again."""

    def __init__(self, agents_factory: Callable[[], Any], cache_dir: str | None):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        self.agents = agents_factory()
        cache = open_cache(cache_dir)
        self.cache = WriteBehind(cache) if cache is not None else None
        self.runs: dict[str, asyncio.Future[tuple[Any, dict[str, Any], dict[str, Any], Any]]] = {}
        self.leases_claimed = False  # the leases of the process this one replaced were given back
        ray = sys.modules.get("ray")  # no node outside Ray
        self.where = os.getpid(), ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None

    async def _state(self, registration: str, holder: list[Any]) -> tuple[Any, dict[str, Any], dict[str, Any], Any]:
        """The run's ``(solver, agent params, user params, limits)``, read once from
        ``holder`` (the object-store reference, wrapped so that Ray passes the reference)."""
        if registration not in self.runs:
            self.runs[registration] = asyncio.ensure_future(self._load(holder[0]))
        return await asyncio.shield(self.runs[registration])  # a cancelled unit leaves the read to the others

    async def _load(self, ref: Any) -> tuple[Any, dict[str, Any], dict[str, Any], Any]:
        state = await ref
        if state[3] or self.leases_claimed:
            await self._gate_models(state[3])
        return state

    async def _gate_models(self, limits: dict[str, tuple[int, bool]] | None) -> None:
        """Give each network model a slot on its endpoint's shared window
        (:mod:`evalkit.engine.ratelimit`; ``limits``: ``{"agent" | "user": (concurrency,
        adaptive)}``), or none (``limits`` ``None``: the run is its endpoints' only caller).
        A process that replaces a lost one registers first: the leases its predecessor held
        are given back (:meth:`~evalkit.engine.ratelimit.EndpointLimits.register`)."""
        models = {"agent": self.agents.agent, "user": self.agents.user}
        if not limits:
            for model in models.values():
                if hasattr(model, "gate"):
                    model.gate = None
            return
        import ray

        context = ray.get_runtime_context()
        handle, holder = shared_limits(), (context.get_job_id(), context.get_actor_id(), context.get_worker_id())
        if not self.leases_claimed:
            await handle.register.remote(*holder[1:])
            self.leases_claimed = True
        for role, model in models.items():
            if role in limits and hasattr(model, "gate"):
                limit, adaptive = limits[role]
                key = endpoint_key(model.provider_model, model.api_base)
                model.gate = EndpointGate(handle, key, limit, adaptive, holder)

    def forget(self, registration: str) -> None:
        """Drop a run (a sweep's worker kept warm for the next one)."""
        if self.cache is not None:
            self.cache.flush()
        self.runs.pop(registration, None)

    def in_flight(self) -> tuple[int, int, float]:
        """This worker's model calls in flight: ``(attempts, chunks streamed so far, seconds
        the oldest has run)`` (:func:`evalkit.models.litellm_client.in_flight`; zeros when no
        model of this worker is a litellm one, whose module is then not imported)."""
        client = sys.modules.get("evalkit.models.litellm_client")
        return client.in_flight() if client is not None else (0, 0, 0.0)

    def ping(self) -> tuple[int, str | None]:
        """``(process id, Ray node id)`` of this worker (no node outside Ray)."""
        return self.where

    def endpoint_keys(self) -> list[str]:
        """The shared windows this worker's models hold slots on (:func:`~evalkit.engine.ratelimit.endpoint_key`)."""
        models = (self.agents.agent, self.agents.user)
        return [m.gate.key for m in models if getattr(m, "gate", None) is not None]

    def price(self, provider_model: str) -> Any:
        """litellm's price of ``provider_model`` (:func:`evalkit.providers.litellm_price`),
        asked here, where litellm is imported already, so the driver need not import it."""
        from evalkit.providers import litellm_price

        return litellm_price(provider_model)

    async def solve(self, registration: str, holder: list[Any], budget: Any, unit: WorkItem) -> tuple[bytes, tuple[int, str | None]]:
        """Solve one unit of the run ``registration``: ``(its trajectory, or the exception
        solving raised, as :func:`pack` packs it; :meth:`ping`'s answer)``. ``budget``: the
        run's :class:`~evalkit.engine.budget.BudgetKeeper` (``None``: no limits), asked
        before each model call. The unit's ``request.images`` may be object references
        (:meth:`RayExecutor.submit`): they are read back (awaited) before it is solved."""
        solver, agent_params, user_params, _ = await self._state(registration, holder)
        if unit.request.images:  # sent by reference (RayExecutor.submit): read from this node's object store
            unit = unit.with_images(await resolve_images(unit.request.images))
        gate = RemoteBudget(budget) if budget is not None else None
        try:
            result: Any = await solve_unit(solver, unit, self.agents, self.cache, agent_params, user_params, gate)
        except Exception as exc:  # noqa: BLE001 - solve_unit returns failures; this is a bug, re-raised in the driver
            result = exc
        return pack(result), self.where


#: the largest result a unit may send back (bytes, pickled): a larger one is its unit's failure
MAX_RESULT_BYTES = 256 << 20


def pack(result: Any) -> bytes:
    """``result`` (a trajectory, or the exception solving raised) pickled for the driver,
    which loads each unit's result on its own (:mod:`evalkit.engine.delivery`). In its place:
    for an exception that would not load there (its ``__init__`` needs arguments it does not
    keep in ``args``, as litellm's), a ``RuntimeError`` naming it with its traceback; for a
    result that will not pickle (a judge verdict nested 900 deep) or passes
    ``MAX_RESULT_BYTES``, an ``internal`` failure of its unit."""
    raised = isinstance(result, BaseException)
    try:
        data = pickle.dumps(result, protocol=5)
        if raised:
            pickle.loads(data)
    except Exception as exc:  # noqa: BLE001 - whatever pickling raises (RecursionError, PicklingError, TypeError)
        if raised:
            text = "".join(traceback.format_exception(result))[-4000:]
            return pickle.dumps(RuntimeError(f"{type(result).__name__}: {result} (raised in a model worker)\n{text}"))
        message = f"the unit's result does not pickle ({type(exc).__name__}: {str(exc)[:300]})"
    else:
        if len(data) <= MAX_RESULT_BYTES:
            return data
        message = f"the unit's result is {len(data)} bytes pickled, over {MAX_RESULT_BYTES}"
    return pickle.dumps(Trajectory(failure=Failure("internal", message[:500])))


def _worker_class() -> Any:
    """:class:`ModelWorker` as a Ray actor class. Ray does not retry a lost ``solve`` call (the
    driver sends the unit again, :mod:`evalkit.engine.delivery`) nor record its task events."""
    import ray  # deferred: offline runs never import Ray

    ray.method(max_task_retries=0, enable_task_events=False)(ModelWorker.solve)  # annotates in place
    return ray.remote(num_cpus=0)(ModelWorker)


#: the custom resource of the nodes meant for model workers (launchers/ray_local_cluster.sh
#: gives it to its worker nodes): when the cluster has it, every model worker needs it, so
#: the workers run there and the head keeps the driver
WORKER_RESOURCE = "evalkit_worker"

#: at the end of a run, how long :attr:`RayExecutor.pids` waits for a worker still starting (seconds;
#: before issue 46 a run waited for every worker's start, unbounded, before its first unit)
START_WAIT_S = 600.0

#: the console says how the first worker's start goes every this many seconds until it has started
STARTING_EVERY_S = 15.0

#: a dead actor is restarted this many times in its life (a run's, or a sweep's while it is
#: kept warm); a unit lost with its worker ``UNIT_MAX_TRIES`` times is a ``worker_died`` failure
ACTOR_MAX_RESTARTS = 3


class RayExecutor(ExecutorBase):
    """Spreads units over ``num_workers`` async Ray actors (:class:`ModelWorker`) through a
    :class:`~evalkit.engine.delivery.Delivery`: one call per unit, to the live actor with
    the fewest units in flight, under the driver's window. The workers start when the
    executor is made (while the benchmark's data loads). With ``warm`` (a sweep session's
    ``{key: actors}``), workers of an earlier run with the same key are reused, and new
    ones are kept there for later runs instead of being stopped.
    """

    def __init__(self, agents_factory: Callable[[], Any], cache_dir: str | Path | None, num_workers: int, concurrency: int,
                 warm: dict[str, list[Any]] | None = None, limits: dict[str, tuple[int, bool]] | None = None,
                 one_first: bool = False):  # fmt: skip
        import ray  # deferred: offline runs never import Ray

        self._ray, self.started, self.ready_s = ray, time.perf_counter(), None
        n = max(1, min(num_workers, concurrency))
        cache = str(cache_dir) if cache_dir else None
        # what lets another run reuse the workers: the same clients (model, endpoint, credentials), cache and shares
        key = sha256_hex(pickle.dumps((agents_factory, cache, n, -(-concurrency // n))))
        self.warm, self._key = warm, key
        self.reused = warm is not None and key in warm
        self._later: Callable[[], Any] | None = None  # starts one more worker (the ones after the first, locally)
        self.workers = warm[key] if self.reused else self._start(agents_factory, cache, n, concurrency, one_first)  # type: ignore[index]
        if warm is not None:
            warm[key] = self.workers
        self.registration, self._holder, self._told = uuid.uuid4().hex, [], False
        self._ready = [w.ping.remote() for w in self.workers]
        self.delivery = Delivery(self.workers, (self.registration, self._holder, None), cancel=ray.cancel,
                                 lost=(ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError))  # fmt: skip
        self.budget_keeper, self.limits = None, limits
        self.images = ImageRefs(ray.put)  # each image put once; calls carry references (submit)
        if limits:
            self.limits_actor = shared_limits()  # made here first: on the driver's node

    def _start(self, agents_factory: Callable[[], Any], cache: str | None, n: int, concurrency: int, one_first: bool) -> list[Any]:
        """The workers started now: all ``n``, or with ``one_first`` (a Ray instance the run
        started, on this machine's cores) and no worker nodes (``WORKER_RESOURCE``) the first
        alone, the others once it has answered (:meth:`wait_ready`), so that the first does
        not share the host's cores with the others' start-up (litellm's import) while the
        driver loads the data (issue 46 item 6: on 2 cores, two workers starting together
        were ready seconds after one alone). A run that joins a Ray instance (a cluster, a
        sweep's or a test session's) starts them all at once."""
        import ray

        worker_cls = _worker_class()
        placed = ray.cluster_resources().get(WORKER_RESOURCE, 0) > 0
        status.info("starting %s%s…", "1 model worker (a Ray actor)" if n == 1 else f"{n} model workers (Ray actors)",
                    f" on the nodes offering {WORKER_RESOURCE}" if placed else "")  # fmt: skip
        # max_concurrency: a call per unit (all of them, the other workers lost), pings; max_task_retries: calls other than
        # solve made while Ray restarts the actor wait for it; SPREAD: one actor per node first on a cluster
        options = {"max_concurrency": concurrency + 16, "max_restarts": ACTOR_MAX_RESTARTS, "max_task_retries": -1,
                   "scheduling_strategy": "SPREAD", "resources": {WORKER_RESOURCE: 1} if placed else None}  # fmt: skip
        start = worker_cls.options(**options)
        self._later, self._n_later = (lambda: start.remote(agents_factory, cache)), (n - 1 if one_first and not placed else 0)
        return [start.remote(agents_factory, cache) for _ in range(n - self._n_later)]

    def register(self, solver: Any, agent_params: dict[str, Any], user_params: dict[str, Any]) -> None:
        """Give the workers this run's solver, parameters and shared endpoint limits (through
        the object store: a worker reads them with its first unit of the run)."""
        self._holder.append(self._ray.put((solver, agent_params, user_params, self.limits)))

    def wait_ready(self) -> None:
        """Wait until the first worker has started (idempotent); ``ready_s`` is then the
        seconds from the executor's creation. The others join the rotation as each answers
        (:meth:`Delivery.join <evalkit.engine.delivery.Delivery.join>`); the ones still to
        start (:meth:`_start`) are started now."""
        if self.ready_s is not None:
            return
        first = self._await_first()
        i = self._ready.index(first)
        self.delivery.seen(i, self._ray.get(first))
        self.ready_s = round(time.perf_counter() - self.started, 4)
        for j, ready in enumerate(self._ready):
            if j != i:
                self.delivery.join(j, ready)
        for _ in range(self._n_later if self._later is not None else 0):
            worker = self._later()  # type: ignore[misc]
            self.workers.append(worker)  # the warm pool's list too
            self._ready.append(worker.ping.remote())
            self.delivery.add(worker, self._ready[-1])
        if not self.reused:
            if len(self.workers) == 1:
                status.info("1 worker ready in %.1f s", self.ready_s)
            else:  # the run starts with the first (issue 46); the others join the rotation as each answers
                status.info("first of %d workers ready in %.1f s; the others join as they start", len(self.workers), self.ready_s)
        log.info("model worker %d ready (process id %s%s) %.2f s after it was started; %d more joining as they start", i,
                 self.delivery.where[i][0], "; kept warm from an earlier run" if self.reused else "", self.ready_s,
                 len(self.workers) - 1)  # fmt: skip

    @property
    def pids(self) -> list[int]:
        """The process ids the workers started as, waiting up to ``START_WAIT_S`` for the
        ones still starting (``[]`` before :meth:`wait_ready`)."""
        if self.ready_s is None:
            return []
        waiting = [j for j, where in enumerate(self.delivery.first_where) if where is None and self.delivery.live[j]]
        if waiting:
            done, _ = self._ray.wait([self._ready[j] for j in waiting], num_returns=len(waiting), timeout=START_WAIT_S)
            for j in waiting:
                if self._ready[j] in done:
                    try:
                        self.delivery.seen(j, self._ray.get(self._ready[j]))
                    except Exception:  # noqa: BLE001 - a worker that did not start: no process id
                        pass
        pids = [where[0] for where in self.delivery.first_where if where is not None]
        if not self._told:
            self._told = True
            log.info("%d model workers ready (process ids %s) by the end of the run; the first %.2f s after it was started", len(pids),
                     ", ".join(map(str, pids)), self.ready_s)  # fmt: skip
        return pids

    def _await_first(self, every_s: float = STARTING_EVERY_S) -> Any:
        """Wait for the first worker's start, saying every ``every_s`` seconds how long the
        console has waited (and the host's load when it is the likely cause): a start that
        takes minutes on a loaded host is never silent. Returns the first ready ref."""
        while True:
            done, _ = self._ray.wait(self._ready, num_returns=1, timeout=every_s)
            if done:
                return done[0]
            load = host_load()
            status.info("0 of %s started after %.0f s%s…", counted(len(self._ready), "worker"), time.perf_counter() - self.started,
                        f" ({load})" if load else "")  # fmt: skip

    async def live(self, timeout_s: float = 5.0) -> tuple[int, int, float] | None:
        """The run's model calls in flight now, summed over the workers that answer within
        ``timeout_s``: ``(attempts, chunks streamed so far, seconds the oldest has run)``
        (:meth:`ModelWorker.in_flight`); ``None`` when none answers."""
        asked = [w.in_flight.remote() for w, up in zip(self.workers, self.delivery.live) if up]
        try:
            answers = await within(asyncio.gather(*asked), timeout_s)
        except Exception:  # noqa: BLE001 - a worker lost or slow: the bar keeps its last figures
            return None
        return sum(a[0] for a in answers), sum(a[1] for a in answers), max((a[2] for a in answers), default=0.0)

    def figures(self) -> dict[str, Any]:
        """``summary.json`` → ``engine``'s Ray part: ``nodes`` (per node the workers ran on:
        ``node_id``, ``units`` delivered, ``worker_pids``), ``driver_node``, ``delivery``
        (``Delivery.stats``), ``rate_limits`` (shared limits: per endpoint key, the window's
        figures) and ``images_by_reference`` (``put`` once each, their ``bytes``)."""
        nodes: dict[str, dict[str, Any]] = {}
        for (pid, node), units in sorted(self.delivery.served.items(), key=str):
            entry = nodes.setdefault(node or "unknown", {"node_id": node or "unknown", "units": 0, "worker_pids": []})
            entry["units"] += units
            if pid not in entry["worker_pids"]:
                entry["worker_pids"].append(pid)
        out: dict[str, Any] = {"nodes": list(nodes.values()), "driver_node": self._ray.get_runtime_context().get_node_id(),
                               "delivery": dict(self.delivery.stats), "worker_pids": self.pids, "reused_workers": self.reused,
                               "phases": {"workers_ready_s": self.ready_s or 0.0}}  # fmt: skip
        if self.limits:
            out["rate_limits"] = self._limit_stats()
        if self.images.n_put:
            out["images_by_reference"] = {"put": self.images.n_put, "bytes": self.images.bytes_put}
        return out

    def _limit_stats(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """``{endpoint key: shared window figures}`` (empty when no worker or limits actor answers)."""
        try:
            worker = next(w for w, up in zip(self.workers, self.delivery.live) if up)
            keys = self._ray.get(worker.endpoint_keys.remote(), timeout=timeout_s)
            stats = self._ray.get([self.limits_actor.stats.remote(k) for k in keys], timeout=timeout_s)
        except Exception:  # noqa: BLE001 - no worker left, or a worker or the actor gone: no figures
            log.warning("the shared rate limits' figures could not be read", exc_info=True)
            return {}
        return {k: v for k, v in zip(keys, stats) if v is not None}

    def litellm_price(self, provider_model: str) -> Any:
        """litellm's price of ``provider_model``, asked of the first worker up (waits for its start)."""
        self.wait_ready()
        i = next(j for j, where in enumerate(self.delivery.where) if where is not None)
        return self._ray.get(self.workers[i].price.remote(provider_model))

    def bound_images(self, max_bytes: int) -> None:
        """Hold at most ``max_bytes`` of the run's images in Ray's object store at once."""
        self.images.max_bytes = max_bytes

    def set_budget(self, budget: Budget) -> None:
        """Have every model call of this run reserve against ``budget`` (limited), held by a ``BudgetKeeper`` actor."""
        self.budget_keeper = keeper(budget)
        self.delivery.args = (self.registration, self._holder, self.budget_keeper)

    async def submit(self, unit: WorkItem) -> Trajectory:
        self.check_draining()
        if unit.request.images:  # each image by reference, put once per run (ModelWorker.solve reads it back)
            unit = unit.with_images(self.images.by_reference(unit.request.images))
        return await self.delivery.submit(unit)

    def close(self) -> None:
        """Drop this run's state in the workers (their answers stored in the response cache
        first) and stop them, unless they are kept warm for later runs; a warm pool with a
        worker dead for good is stopped and dropped, so that a later run starts new workers."""
        if self.budget_keeper is not None:
            self._ray.kill(self.budget_keeper)
        self.images.refs.clear()  # the run's images leave the object store once no call holds them
        if self.warm is not None and not all(self.delivery.live):
            self.warm.pop(self._key, None)
            self.warm = None
        forgot = [w.forget.remote(self.registration) for w, up in zip(self.workers, self.delivery.live) if up]
        try:
            if self.warm is None:
                self._ray.wait(forgot, num_returns=len(forgot), timeout=10.0)
                for worker in self.workers:
                    self._ray.kill(worker)
        except Exception:  # noqa: BLE001 - a dead worker is already gone
            pass

    def cancel(self, timeout_s: float = 10.0) -> Any:
        """Ctrl-C: the budget keeper's ``(cost_usd, tokens, outstanding)``, or ``None`` (no
        keeper, or no answer); the units in flight are abandoned when :meth:`close` stops the
        workers or forgets the run."""
        if self.budget_keeper is None:
            return None
        try:
            return self._ray.get(self.budget_keeper.state.remote(), timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a keeper gone: nothing to read
            return None
