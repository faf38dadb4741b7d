"""Where model calls run: in-process (offline models) or on Ray actors (network models).

Scheduling rules (all here, none in benchmarks):

* at most ``concurrency`` requests are in flight for a backend, and fewer while the
  provider throttles: an AIMD window (:class:`AdaptiveWindow`) halves on a unit that met
  HTTP 429 and grows back by one per window of unthrottled results;
* network models run inside Ray actors (``runner.num_workers`` of them, each an async
  actor taking its share of the in-flight requests); offline models (reference, replay)
  run in the driver's event loop — they do no I/O, so Ray would add nothing but latency;
* every call goes through :func:`execute`: response cache lookup, the model's own retry
  policy, and conversion of any error into a :class:`~evalkit.types.Failure`;
* a Ray actor that dies (its process killed, out of memory) is restarted and the calls it
  had in flight are sent again (``max_restarts`` / ``max_task_retries``); nothing it had
  answered is lost, because results are journaled by the driver as they arrive.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from evalkit.errors import ConfigError
from evalkit.models.base import ModelCallError
from evalkit.types import Completion, Failure, Request, Sample, Trajectory

log = logging.getLogger(__name__)

Result = Completion | Failure


def open_cache(cache_dir: str | Path | None) -> Any:
    """A process-safe on-disk response cache (diskcache, SQLite-backed), or ``None``.

    Raises:
        ConfigError: ``cache_dir`` is not a cache diskcache can open (one line).
    """
    if cache_dir is None:
        return None
    import diskcache

    try:
        return diskcache.Cache(str(cache_dir), size_limit=2**34)
    except Exception as exc:  # noqa: BLE001 - sqlite3.DatabaseError, OSError, ...
        raise ConfigError(
            f"run.cache_dir: {cache_dir} is not a usable response cache ({type(exc).__name__}: {exc}); "
            "move it away, point run.cache_dir elsewhere or set run.cache=false"
        ) from None


def _cache_get(cache: Any, key: str) -> dict[str, Any] | None:
    """A cached completion, or ``None`` — also for an entry that cannot be read (a
    corrupt entry is a miss; the fresh answer then replaces it)."""
    try:
        hit = cache.get(key)
        return hit if isinstance(hit, dict) else None
    except Exception as exc:  # noqa: BLE001 - unpickling and SQLite errors alike
        log.warning("response cache: entry %s unreadable (%s: %s); asking the model", key[:16], type(exc).__name__, exc)
        return None


def _cache_set(cache: Any, key: str, value: dict[str, Any]) -> None:
    try:
        cache.set(key, value)
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs reuse, not the answer
        log.warning("response cache: cannot store %s (%s: %s)", key[:16], type(exc).__name__, exc)


async def execute(model: Any, request: Request, cache: Any = None) -> Result:
    """One request through cache → model (with its retries) → Completion or Failure.

    Only successful, non-empty completions are cached; the key is
    ``request.request_hash(model.model_id)`` (model id + generation params + exact prompt),
    so changing any generation parameter misses.
    """
    key = request.request_hash(model.model_id) if cache is not None else None
    if key is not None:
        hit = _cache_get(cache, key)
        try:
            completion = Completion(**hit) if hit is not None else None
        except TypeError:  # an entry of another shape: a miss
            completion = None
        if completion is not None:
            completion.cached = True
            completion.attempts = completion.throttled = 0
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
        _cache_set(cache, key, stored)
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
                "throttled": result.throttled,
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

        # no per-call task events: they are for Ray's dashboard/state API, which evalkit
        # does not use, and cost the GCS work on every request
        @ray.method(enable_task_events=False)
        async def run(self, request: Request) -> Result:
            return await execute(self.model, request, self.cache)

        @ray.method(enable_task_events=False)
        async def rollout(self, sample: Sample) -> Trajectory:
            return await execute_rollout(
                self.runner, sample, self.model, self.user, self.cache, self.agent_params, self.user_params
            )

        def ping(self) -> str:
            return "ok"

    return ModelWorker


#: a dead actor is restarted this many times per run; the calls it had in flight are
#: re-sent this many times (a call that kills its actor every time ends as a Failure)
ACTOR_MAX_RESTARTS = 3
ACTOR_MAX_TASK_RETRIES = 2


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
            worker_cls.options(
                max_concurrency=per_actor,
                max_restarts=ACTOR_MAX_RESTARTS,
                max_task_retries=ACTOR_MAX_TASK_RETRIES,
                scheduling_strategy="SPREAD",  # one actor per node first on a cluster
            ).remote(model_factory, cache, user_factory, runner, agent_params, user_params)
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
        try:
            return await self._pick().run.remote(request)
        except _actor_errors() as exc:
            return Failure("worker_died", f"{type(exc).__name__}: {exc}"[:500])

    async def submit_rollout(self, sample: Sample) -> Trajectory:
        try:
            return await self._pick().rollout.remote(sample)
        except _actor_errors() as exc:
            return Trajectory(failure=Failure("worker_died", f"{type(exc).__name__}: {exc}"[:500], actor="environment"))

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


class AdaptiveWindow:
    """How many units may be in flight: additive increase, multiplicative decrease (AIMD,
    the congestion rule of TCP, RFC 5681) on the provider's HTTP 429 answers.

    Starts at ``limit`` (``backend.concurrency``), never exceeds it, never drops below 1.
    A unit that met a 429 (``throttled > 0``) halves the window — once per congestion
    event: only units dispatched after the last decrease can decrease it again, so one
    burst of 429s answering the same wave of requests counts once. Each ``window``
    consecutive unthrottled results add one. Deterministic: no clocks.
    """

    def __init__(self, limit: int, adaptive: bool = True):
        self.limit = limit
        self.adaptive = adaptive
        self.window = limit
        self.min_window = limit
        self.in_flight = 0
        self.peak_in_flight = 0
        self.decreases = 0
        self._dispatched = 0
        self._last_decrease_at = -1
        self._good = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> int:
        """Wait for a slot; returns the dispatch sequence number of the unit."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.in_flight < self.window)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            self._dispatched += 1
            return self._dispatched

    async def release(self, seq: int, throttled: int) -> None:
        async with self._cond:
            self.in_flight -= 1
            if self.adaptive and throttled and seq > self._last_decrease_at:
                self.window = max(1, self.window // 2)
                self.min_window = min(self.min_window, self.window)
                self.decreases += 1
                self._last_decrease_at = self._dispatched
                self._good = 0
            elif not throttled and self.window < self.limit:
                self._good += 1
                if self._good >= self.window:
                    self.window += 1
                    self._good = 0
            self._cond.notify_all()

    def stats(self) -> dict[str, int]:
        return {
            "concurrency": self.limit,
            "peak_in_flight": self.peak_in_flight,
            "min_window": self.min_window,
            "window_decreases": self.decreases,
        }


def throttled_count(result: Result | Trajectory) -> int:
    """HTTP 429 answers met while producing ``result`` (all model calls of a rollout)."""
    if isinstance(result, Trajectory):
        own = result.failure.throttled if result.failure is not None else 0
        return own + sum(int(t.get("throttled", 0)) for t in result.turns)
    return result.throttled


async def run_units(
    executor: Any,
    units: list[tuple[Sample, Request, bool]],
    concurrency: int,
    on_result: Callable[[Sample, Request, Result | Trajectory], None],
    adaptive: bool = True,
) -> dict[str, Any]:
    """Execute units ``(sample, request, is_rollout)`` with at most ``concurrency`` in
    flight (a rollout counts as one; fewer while throttled, see :class:`AdaptiveWindow`);
    ``on_result`` is called in the driver as soon as each one finishes (it journals the
    sample).

    Returns the engine figures of the run: ``requests_wall_s`` (first dispatch to last
    result, seconds), ``throttled`` (HTTP 429 answers), and the window's statistics.
    """
    window = AdaptiveWindow(concurrency, adaptive)
    throttled = 0

    async def one(seq: int, sample: Sample, request: Request, rollout: bool) -> None:
        nonlocal throttled
        result: Any = Failure("internal", "not run")
        try:
            result = await (executor.submit_rollout(sample) if rollout else executor.submit(request))
        finally:
            n = throttled_count(result)
            throttled += n
            await window.release(seq, n)
        on_result(sample, request, result)

    start = time.perf_counter()
    running: set[asyncio.Future[None]] = set()
    crashed: list[BaseException] = []

    def finished(task: asyncio.Future[None]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            crashed.append(task.exception())  # type: ignore[arg-type]

    try:
        for unit in units:  # units are dispatched in order, one waiter at a time
            if crashed:  # journaling failed (a full disk): stop dispatching
                break
            seq = await window.acquire()
            task = asyncio.ensure_future(one(seq, *unit))
            running.add(task)
            task.add_done_callback(finished)
        await asyncio.gather(*list(running))
        if crashed:
            raise crashed[0]
    finally:
        for task in list(running):
            task.cancel()
    return {"requests_wall_s": round(time.perf_counter() - start, 3), "throttled": throttled, **window.stats()}


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
        _check_reachable(address)
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as exc:
            from evalkit.errors import ConfigError

            hint = ""
            if os.environ.get("RAY_AUTH_MODE") != "token":
                hint = "; if the cluster uses token authentication, export RAY_AUTH_MODE=token (and RAY_AUTH_TOKEN)"
            first = (str(exc).strip().splitlines() or ["connection refused"])[0][:200]
            raise ConfigError(f"runner.address: cannot connect to the Ray cluster at {address} ({first}){hint}") from None
    else:
        ray.init(num_cpus=num_cpus, object_store_memory=256 * 1024 * 1024, **kwargs)
    return True


def _check_reachable(address: str) -> None:
    """Fail in seconds, not minutes, when nothing listens at a ``HOST:PORT`` cluster address
    (``ray.init`` keeps retrying an unreachable GCS for minutes). ``auto`` and ``ray://``
    client addresses are left to Ray.

    Raises:
        ConfigError: the address is not ``HOST:PORT`` or the port does not accept connections.
    """
    import socket

    from evalkit.errors import ConfigError

    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"runner.address: {address!r} is not HOST:PORT (or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(
            f"runner.address: no Ray cluster answers at {address} ({exc.strerror or exc}); start one "
            "(launchers/ray_local_cluster.sh start) or fix the address"
        ) from None


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
