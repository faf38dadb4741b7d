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
from evalkit.types import Completion, Failure, Request

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


# ------------------------------------------------------------------------------------------
# executors
# ------------------------------------------------------------------------------------------
class LocalExecutor:
    """Runs requests in the driver's event loop (offline models)."""

    def __init__(self, model: Any, cache_dir: str | Path | None):
        self.model = model
        self.cache = open_cache(cache_dir)

    async def submit(self, request: Request) -> Result:
        return await execute(self.model, request, self.cache)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def _worker_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class ModelWorker:
        """A Ray actor that owns one model client and a handle on the response cache."""

        def __init__(self, model_factory: Callable[[], Any], cache_dir: str | None):
            import os

            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            self.model = model_factory()
            self.cache = open_cache(cache_dir)

        async def run(self, request: Request) -> Result:
            return await execute(self.model, request, self.cache)

        def ping(self) -> str:
            return "ok"

    return ModelWorker


class RayExecutor:
    """Spreads requests over ``num_workers`` async Ray actors, round robin.

    Each actor accepts up to ``ceil(concurrency / num_workers)`` concurrent calls; the
    driver's semaphore keeps the total at ``concurrency``.
    """

    def __init__(self, model_factory: Callable[[], Any], cache_dir: str | Path | None, num_workers: int, concurrency: int):
        worker_cls = _worker_class()
        n = max(1, min(num_workers, concurrency))
        per_actor = -(-concurrency // n)
        self.workers = [
            worker_cls.options(max_concurrency=per_actor).remote(model_factory, str(cache_dir) if cache_dir else None)
            for _ in range(n)
        ]
        import ray

        ray.get([w.ping.remote() for w in self.workers])
        self._next = 0

    async def submit(self, request: Request) -> Result:
        worker = self.workers[self._next]
        self._next = (self._next + 1) % len(self.workers)
        return await worker.run.remote(request)

    def close(self) -> None:
        import ray

        for worker in self.workers:
            try:
                ray.kill(worker)
            except Exception:  # noqa: BLE001
                pass


async def run_requests(
    executor: Any,
    requests: list[Request],
    concurrency: int,
    on_result: Callable[[Request, Result], None],
) -> None:
    """Execute ``requests`` with at most ``concurrency`` in flight; ``on_result`` is called
    in the driver as soon as each one finishes (it journals the sample)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(request: Request) -> None:
        async with sem:
            result = await executor.submit(request)
        on_result(request, result)

    tasks = [asyncio.ensure_future(one(r)) for r in requests]
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
