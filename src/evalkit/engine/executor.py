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
from pathlib import Path
from typing import Any, Callable, Protocol

from evalkit.engine.calls import Unit, open_cache, solve_unit
from evalkit.types import Failure, Trajectory

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


def _worker_class() -> Any:
    import ray  # deferred: offline runs never import Ray

    @ray.remote(num_cpus=0)
    class ModelWorker:
        """A Ray actor that owns the run's model clients, the solver and a handle on the
        response cache."""

        def __init__(self, agents_factory: Callable[[], Any], solver: Any, cache_dir: str | None,
                     agent_params: dict[str, Any], user_params: dict[str, Any]):  # fmt: skip
            import os

            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            self.agents = agents_factory()
            self.solver = solver
            self.cache = open_cache(cache_dir)
            self.agent_params = agent_params
            self.user_params = user_params

        # no per-call task events: they are for Ray's dashboard/state API, which evalkit
        # does not use, and cost the GCS work on every request
        @ray.method(enable_task_events=False)
        async def solve(self, unit: Unit) -> Trajectory:
            return await solve_unit(self.solver, unit, self.agents, self.cache, self.agent_params, self.user_params)

        def ping(self) -> str:
            return "ok"

    return ModelWorker


#: a dead actor is restarted this many times per run; the units it had in flight are
#: re-sent this many times (a unit that kills its actor every time ends as a Failure)
ACTOR_MAX_RESTARTS = 3
ACTOR_MAX_TASK_RETRIES = 2


class RayExecutor:
    """Spreads units over ``num_workers`` async Ray actors, round robin.

    Each actor accepts up to ``ceil(concurrency / num_workers)`` concurrent units; the
    driver's window keeps the total at ``concurrency``.
    """

    def __init__(
        self,
        agents_factory: Callable[[], Any],
        solver: Any,
        cache_dir: str | Path | None,
        agent_params: dict[str, Any],
        user_params: dict[str, Any],
        num_workers: int,
        concurrency: int,
    ):
        import ray  # deferred: offline runs never import Ray

        worker_cls = _worker_class()
        n = max(1, min(num_workers, concurrency))
        per_actor = -(-concurrency // n)
        cache = str(cache_dir) if cache_dir else None
        status.info("starting %s…", "1 model worker (a Ray actor)" if n == 1 else f"{n} model workers (Ray actors)")
        self.workers = [
            worker_cls.options(
                max_concurrency=per_actor,
                max_restarts=ACTOR_MAX_RESTARTS,
                max_task_retries=ACTOR_MAX_TASK_RETRIES,
                scheduling_strategy="SPREAD",  # one actor per node first on a cluster
            ).remote(agents_factory, solver, cache, agent_params, user_params)
            for _ in range(n)
        ]
        ray.get([w.ping.remote() for w in self.workers])
        self._next = 0

    async def submit(self, unit: Unit) -> Trajectory:
        worker = self.workers[self._next]
        self._next = (self._next + 1) % len(self.workers)
        try:
            return await worker.solve.remote(unit)
        except _actor_errors() as exc:
            actor = "environment" if unit.rollout else "model"
            return Trajectory(failure=Failure("worker_died", f"{type(exc).__name__}: {exc}"[:500], actor=actor))

    def close(self) -> None:
        import ray

        for worker in self.workers:
            try:
                ray.kill(worker)
            except Exception:  # noqa: BLE001
                pass


def _actor_errors() -> tuple[type[BaseException], ...]:
    """Errors of a Ray call whose actor died and could not be restarted in time."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return (RayActorError, ActorDiedError, ActorUnavailableError)
