"""Where model calls run: in-process (offline models) or on Ray actors (network models).

Scheduling rules (all here, none in benchmarks):

* at most ``concurrency`` requests are in flight for a backend (driver-side semaphore);
* network models run inside Ray actors (``runner.num_workers`` of them, each an async
  actor taking its share of the in-flight requests); offline models (reference, replay)
  run in the driver's event loop — they do no I/O, so Ray would add nothing but latency;
* every call goes through :func:`execute`: response cache lookup, the model's own retry
  policy, and conversion of any error into a :class:`~evalkit.types.Failure`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable

from evalkit.models.base import ModelCallError
from evalkit.types import Completion, Failure, Request, Sample, Trajectory

log = logging.getLogger(__name__)

Result = Completion | Failure


def open_cache(cache_dir: str | Path | None) -> Any:
    """A process-safe on-disk response cache (diskcache, SQLite-backed), or ``None``."""
    if cache_dir is None:
        return None
    import diskcache

    return diskcache.Cache(str(cache_dir), size_limit=2**34)


async def execute(model: Any, request: Request, cache: Any = None) -> Result:
    """One request through cache → model (with its retries) → Completion or Failure.

    Only successful, non-empty completions are cached; the key is
    ``request.request_hash(model.model_id)`` (model id + generation params + exact prompt),
    so changing any generation parameter misses.
    """
    key = request.request_hash(model.model_id) if cache is not None else None
    if key is not None:
        hit = cache.get(key)
        if hit is not None:
            completion = Completion(**hit)
            completion.cached = True
            completion.attempts = 0
            completion.latency_s = 0.0
            return completion
    try:
        completion = await model.generate(request)
    except ModelCallError as exc:
        return exc.failure
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a model must not kill the run
        log.exception("model raised unexpectedly")
        return Failure("internal", f"{type(exc).__name__}: {exc}"[:500])
    if key is not None:
        stored = completion.to_dict()
        stored["cached"] = False
        cache.set(key, stored)
    return completion


class ActorModel:
    """A model as seen from inside a rollout: generation params filled in, every call
    through :func:`execute` (cache, retries, failure conversion), per-call statistics
    appended to ``turns``; a failed call raises :class:`ModelCallError` naming ``actor``."""

    def __init__(self, model: Any, cache: Any, actor: str, params: dict[str, Any], turns: list[dict[str, Any]]):
        self.model = model
        self.cache = cache
        self.actor = actor
        self.params = params
        self.turns = turns
        self.model_id = getattr(model, "model_id", actor)

    async def generate(self, request: Request) -> Completion:
        if not request.params:
            request.params = dict(self.params)
        result = await execute(self.model, request, self.cache)
        if isinstance(result, Failure):
            result.actor = self.actor
            raise ModelCallError(result)
        self.turns.append(
            {
                "actor": self.actor,
                "latency_s": round(result.latency_s, 4),
                "usage": result.usage,
                "attempts": result.attempts,
                "cached": result.cached,
                "finish_reason": result.finish_reason,
            }
        )
        return result


async def execute_rollout(
    runner: Any, sample: Sample, agent: Any, user: Any | None, cache: Any, agent_params: dict[str, Any], user_params: dict[str, Any]
) -> Trajectory:
    """One whole rollout. A failed model call ends it with ``failure.actor`` = ``agent`` /
    ``user``; any other exception is an ``environment`` failure. Never raises."""
    turns: list[dict[str, Any]] = []
    wrapped_agent = ActorModel(agent, cache, "agent", agent_params, turns)
    wrapped_user = ActorModel(user, cache, "user", user_params, turns) if user is not None else None
    try:
        trajectory = await runner.run(sample, wrapped_agent, wrapped_user)
    except ModelCallError as exc:
        trajectory = Trajectory(failure=exc.failure)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a crashing environment must not kill the run
        log.exception("rollout of %s raised", sample.id)
        trajectory = Trajectory(failure=Failure("environment", f"{type(exc).__name__}: {exc}"[:500], actor="environment"))
    trajectory.turns = turns
    return trajectory


# ------------------------------------------------------------------------------------------
# executors
# ------------------------------------------------------------------------------------------
class LocalExecutor:
    """Runs requests and rollouts in the driver's event loop (offline models).

    ``rollout_models(sample) -> (agent, user)`` supplies per-sample scripted models (the
    reference agent of a benchmark)."""

    def __init__(
        self,
        model: Any,
        cache_dir: str | Path | None,
        runner: Any = None,
        rollout_models: Callable[[Sample], tuple[Any, Any]] | None = None,
        agent_params: dict[str, Any] | None = None,
        user_params: dict[str, Any] | None = None,
    ):
        self.model = model
        self.cache = open_cache(cache_dir)
        self.runner = runner
        self.rollout_models = rollout_models
        self.agent_params = agent_params or {}
        self.user_params = user_params or {}

    async def submit(self, request: Request) -> Result:
        return await execute(self.model, request, self.cache)

    async def submit_rollout(self, sample: Sample) -> Trajectory:
        assert self.runner is not None and self.rollout_models is not None
        agent, user = self.rollout_models(sample)
        return await execute_rollout(self.runner, sample, agent, user, self.cache, self.agent_params, self.user_params)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def _worker_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class ModelWorker:
        """A Ray actor that owns one model client and a handle on the response cache."""

        def __init__(
            self,
            model_factory: Callable[[], Any],
            cache_dir: str | None,
            user_factory: Callable[[], Any] | None = None,
            runner: Any = None,
            agent_params: dict[str, Any] | None = None,
            user_params: dict[str, Any] | None = None,
        ):
            import os

            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            self.model = model_factory()
            self.user = user_factory() if user_factory is not None else None
            self.cache = open_cache(cache_dir)
            self.runner = runner
            self.agent_params = agent_params or {}
            self.user_params = user_params or {}

        async def run(self, request: Request) -> Result:
            return await execute(self.model, request, self.cache)

        async def rollout(self, sample: Sample) -> Trajectory:
            return await execute_rollout(
                self.runner, sample, self.model, self.user, self.cache, self.agent_params, self.user_params
            )

        def ping(self) -> str:
            return "ok"

    return ModelWorker


class RayExecutor:
    """Spreads requests over ``num_workers`` async Ray actors, round robin.

    Each actor accepts up to ``ceil(concurrency / num_workers)`` concurrent calls; the
    driver's semaphore keeps the total at ``concurrency``.
    """

    def __init__(
        self,
        model_factory: Callable[[], Any],
        cache_dir: str | Path | None,
        num_workers: int,
        concurrency: int,
        user_factory: Callable[[], Any] | None = None,
        runner: Any = None,
        agent_params: dict[str, Any] | None = None,
        user_params: dict[str, Any] | None = None,
    ):
        worker_cls = _worker_class()
        n = max(1, min(num_workers, concurrency))
        per_actor = -(-concurrency // n)
        cache = str(cache_dir) if cache_dir else None
        self.workers = [
            worker_cls.options(max_concurrency=per_actor).remote(
                model_factory, cache, user_factory, runner, agent_params, user_params
            )
            for _ in range(n)
        ]
        import ray

        ray.get([w.ping.remote() for w in self.workers])
        self._next = 0

    def _pick(self) -> Any:
        worker = self.workers[self._next]
        self._next = (self._next + 1) % len(self.workers)
        return worker

    async def submit(self, request: Request) -> Result:
        return await self._pick().run.remote(request)

    async def submit_rollout(self, sample: Sample) -> Trajectory:
        return await self._pick().rollout.remote(sample)

    def close(self) -> None:
        import ray

        for worker in self.workers:
            try:
                ray.kill(worker)
            except Exception:  # noqa: BLE001
                pass


async def run_units(
    executor: Any,
    units: list[tuple[Sample, Request, bool]],
    concurrency: int,
    on_result: Callable[[Sample, Request, Result | Trajectory], None],
) -> None:
    """Execute units ``(sample, request, is_rollout)`` with at most ``concurrency`` in
    flight (a rollout counts as one); ``on_result`` is called in the driver as soon as
    each one finishes (it journals the sample)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(sample: Sample, request: Request, rollout: bool) -> None:
        async with sem:
            result = await (executor.submit_rollout(sample) if rollout else executor.submit(request))
        on_result(sample, request, result)

    tasks = [asyncio.ensure_future(one(*u)) for u in units]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()


def ensure_ray(address: str | None, num_cpus: int | None) -> bool:
    """Connect to Ray (an existing cluster when ``address`` is set, else a local instance;
    reuse the one this process already has). Returns True if this call started it."""
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = dict(
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        configure_logging=True,
    )
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(num_cpus=num_cpus, object_store_memory=256 * 1024 * 1024, **kwargs)
    return True


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
