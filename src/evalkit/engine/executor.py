"""Where units are solved: in-process (offline models) or on Ray actors (network models).

Scheduling rules of this module (the window and retries are in
:mod:`evalkit.engine.scheduling` and the models):

* network models run inside Ray actors (``runner.num_workers`` of them, each an async
  actor taking its share of the in-flight units); offline models (reference, replay,
  baselines) run in the driver's event loop — they do no I/O, so Ray would add nothing but
  latency;
* every unit goes through :func:`evalkit.engine.calls.solve_unit`: the benchmark's solver
  with cached, retried model calls, failures returned as data;
* a Ray actor that dies (its process killed, out of memory) is restarted and the units it
  had in flight are sent again (``max_restarts`` / ``max_task_retries``); nothing it had
  answered is lost, because results are journaled by the driver as they arrive.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Protocol

from evalkit.engine.calls import Unit, open_cache, solve_unit
from evalkit.types import Failure, Trajectory, sha256_hex

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


class UnknownJob(Exception):
    """A model worker was asked to solve a unit of a run it has not registered (it was
    restarted after a crash); the driver registers the run and sends the unit again."""


def _worker_class() -> Any:
    import ray  # deferred: offline runs never import Ray

    @ray.remote(num_cpus=0)
    class ModelWorker:
        """A Ray actor that owns model clients (built once, from ``agents_factory``) and a
        handle on the response cache. Each run using it registers its solver and parameters
        under a job key, so that the jobs of a sweep reuse one worker (litellm is imported
        once per worker process); a worker restarted after a crash answers
        :class:`UnknownJob` and the driver registers the run again from the object store
        (so a unit's call carries only the job key and the unit, not an object reference,
        whose borrowing Ray would track on every call)."""

        def __init__(self, agents_factory: Callable[[], Any], cache_dir: str | None):
            import os

            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            self.agents = agents_factory()
            self.cache = open_cache(cache_dir)
            self.jobs: dict[str, tuple[Any, dict[str, Any], dict[str, Any]]] = {}

        async def configure(self, job: str, holder: list[Any]) -> int:
            """Register a run: ``holder`` wraps the object-store reference of its ``(solver,
            agent params, user params)`` (wrapped, so that Ray passes the reference, not the
            value). Returns this worker's process id."""
            if job not in self.jobs:
                self.jobs[job] = await holder[0]
            return os.getpid()

        def forget(self, job: str) -> None:
            self.jobs.pop(job, None)

        def ping(self) -> int:
            return os.getpid()

        def price(self, provider_model: str) -> Any:
            """litellm's price of ``provider_model`` (:func:`evalkit.providers.litellm_price`),
            asked here, where litellm is imported already, so the driver need not import it."""
            from evalkit.providers import litellm_price

            return litellm_price(provider_model)

        # no per-call task events: they are for Ray's dashboard/state API, which evalkit
        # does not use, and cost the GCS work on every request
        @ray.method(enable_task_events=False)
        async def solve(self, job: str, unit: Unit) -> Trajectory:
            if job not in self.jobs:  # a worker restarted after a crash: the driver registers the run again
                raise UnknownJob(job)
            solver, agent_params, user_params = self.jobs[job]
            return await solve_unit(solver, unit, self.agents, self.cache, agent_params, user_params)

    return ModelWorker


#: a dead actor is restarted this many times per run; the units it had in flight are
#: re-sent this many times (a unit that kills its actor every time ends as a Failure)
ACTOR_MAX_RESTARTS = 3
ACTOR_MAX_TASK_RETRIES = 2


def _pool_key(agents_factory: Callable[[], Any], cache: str | None, n: int, per_actor: int) -> str:
    """What makes workers reusable by another run: the same clients (model, endpoint,
    credentials), response cache, number of workers and per-worker concurrency."""
    return sha256_hex(pickle.dumps((agents_factory, cache, n, per_actor)))


class RayExecutor:
    """Spreads units over ``num_workers`` async Ray actors, each unit to the actor with the
    fewest units in flight.

    Each actor accepts up to ``ceil(concurrency / num_workers)`` concurrent units; the
    driver's window keeps the total at ``concurrency``, so the least-loaded actor always has
    a free slot when the window lets a unit go (round robin would queue a unit behind a slow
    request on a full actor while another actor had a slot free). Creating the executor starts the
    workers without waiting (they need only the model clients: the engine starts them while
    the benchmark's data loads); :meth:`register` gives them the run's solver and
    parameters, and :meth:`wait_ready` waits for both (the engine calls it before the first
    request, so worker start-up overlaps the rest of the set-up). With ``warm`` (a sweep
    session's ``{key: actors}``), workers of an earlier run with the same key are reused,
    and new ones are kept there for later runs instead of being stopped.
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
        self.warm = warm
        self.reused = warm is not None and key in warm
        if self.reused:
            self.workers = warm[key]  # type: ignore[index]
        else:
            self.workers = self._start(agents_factory, cache, n, per_actor)
            if warm is not None:
                warm[key] = self.workers
        self.job = uuid.uuid4().hex
        self._holder: list[Any] = []
        self._ready: list[Any] = [w.ping.remote() for w in self.workers]
        self.pids: list[int] = []
        self._in_flight = [0] * len(self.workers)

    @staticmethod
    def _start(agents_factory: Callable[[], Any], cache: str | None, n: int, per_actor: int) -> list[Any]:
        worker_cls = _worker_class()
        status.info("starting %s…", "1 model worker (a Ray actor)" if n == 1 else f"{n} model workers (Ray actors)")
        return [
            worker_cls.options(
                max_concurrency=per_actor,
                max_restarts=ACTOR_MAX_RESTARTS,
                max_task_retries=ACTOR_MAX_TASK_RETRIES,
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
        i = min(range(len(self.workers)), key=self._in_flight.__getitem__)
        self._in_flight[i] += 1
        worker = self.workers[i]
        try:
            try:
                return await worker.solve.remote(self.job, unit)
            except UnknownJob:  # restarted after a crash: register the run again, then send the unit again
                await worker.configure.remote(self.job, self._holder)
                return await worker.solve.remote(self.job, unit)
        except _actor_errors() as exc:
            actor = "environment" if unit.rollout else "model"
            return Trajectory(failure=Failure("worker_died", f"{type(exc).__name__}: {exc}"[:500], actor=actor))
        finally:
            self._in_flight[i] -= 1

    def close(self) -> None:
        """Stop the workers, or (kept warm for later runs) drop this run's registration."""
        for worker in self.workers:
            try:
                if self.warm is None:
                    self._ray.kill(worker)
                else:
                    worker.forget.remote(self.job)
            except Exception:  # noqa: BLE001 - a dead worker is already gone
                pass


def _actor_errors() -> tuple[type[BaseException], ...]:
    """Errors of a Ray call whose actor died and could not be restarted in time."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return (RayActorError, ActorDiedError, ActorUnavailableError)
