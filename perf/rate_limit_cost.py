"""What one request's slot on an endpoint's shared rate limit costs (prints figures; not a test).

    .venv/bin/python perf/rate_limit_cost.py [--n 4000] [--concurrency 16] [--callers 1 2]

Three ways of holding a slot per request, each ``--n`` acquire/release pairs at
``--concurrency`` outstanding, with no request in between (so the figures are the slot's
own cost):

* ``in-process``: :class:`evalkit.engine.ratelimit.AdaptiveWindow` in the caller's event
  loop (the driver's window; what a run on a Ray instance of its own uses);
* ``shared actor``: :class:`~evalkit.engine.ratelimit.EndpointGate` → the
  :class:`~evalkit.engine.ratelimit.EndpointLimits` actor, from ``--callers`` caller actors
  (model workers stand-ins, each a process of its own) at once, on a local Ray instance.

CPU is read from each process (``time.process_time`` in the callers, psutil for the limits
actor); per request = CPU seconds / requests. Wall per request: the caller's wall time of
all its pairs / its pairs (with ``--concurrency`` outstanding).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from evalkit.engine.ratelimit import AdaptiveWindow, EndpointGate, EndpointLimits  # noqa: E402


async def _pairs(acquire, release, n: int, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            lease = await acquire()
            release(lease)

    await asyncio.gather(*(one() for _ in range(n)))


def in_process(n: int, concurrency: int) -> dict[str, float]:
    async def go() -> None:
        window = AdaptiveWindow(concurrency)
        pending: set[asyncio.Task] = set()

        def release(seq: int) -> None:
            task = asyncio.ensure_future(window.release(seq, 0))
            pending.add(task)
            task.add_done_callback(pending.discard)

        await _pairs(window.acquire, release, n, concurrency)
        await asyncio.gather(*pending)

    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(go())
    return {"caller_cpu_ms": (time.process_time() - cpu) / n * 1e3, "wall_ms": (time.perf_counter() - wall) / n * 1e3}


class Caller:
    """A model worker stand-in: ``n`` slots through an :class:`EndpointGate`."""

    async def run(self, limits, n: int, concurrency: int) -> tuple[float, float]:
        import ray

        context = ray.get_runtime_context()
        gate = EndpointGate(limits, "http://127.0.0.1:1/v1|openai/fake", concurrency, True,
                            (context.get_job_id(), context.get_actor_id(), context.get_worker_id()))  # fmt: skip
        await _pairs(gate.acquire, lambda lease: gate.release(lease, False), 10, concurrency)  # warm
        cpu, wall = time.process_time(), time.perf_counter()
        await _pairs(gate.acquire, lambda lease: gate.release(lease, False), n, concurrency)
        return time.process_time() - cpu, time.perf_counter() - wall


def shared(n: int, concurrency: int, callers: int) -> dict[str, float]:
    import psutil
    import ray

    limits = ray.remote(EndpointLimits).options(num_cpus=0, max_concurrency=100_000).remote()
    pid = ray.get(limits.__ray_call__.remote(lambda self: __import__("os").getpid()))
    actors = [ray.remote(num_cpus=0)(Caller).remote() for _ in range(callers)]
    proc = psutil.Process(pid)
    before = sum(proc.cpu_times()[:2])
    out = ray.get([a.run.remote(limits, n, concurrency) for a in actors])
    limits_cpu = sum(proc.cpu_times()[:2]) - before
    total = n * callers
    for a in [*actors, limits]:
        ray.kill(a)
    return {
        "caller_cpu_ms": sum(c for c, _ in out) / total * 1e3,
        "limits_actor_cpu_ms": limits_cpu / total * 1e3,
        "wall_ms": max(w for _, w in out) / n * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="acquire/release pairs per caller")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--callers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    import ray

    local = in_process(args.n, args.concurrency)
    print(f"in-process window: {local['caller_cpu_ms']:.4f} ms CPU per request, {local['wall_ms']:.4f} ms wall per request")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        for callers in args.callers:
            fig = shared(args.n, args.concurrency, callers)
            print(f"shared actor, {callers} caller process(es): {fig['caller_cpu_ms']:.3f} ms CPU per request in the caller "
                  f"+ {fig['limits_actor_cpu_ms']:.3f} ms in the limits actor = "
                  f"{fig['caller_cpu_ms'] + fig['limits_actor_cpu_ms']:.3f} ms; {fig['wall_ms']:.3f} ms wall per request "
                  f"at {args.concurrency} outstanding per caller")  # fmt: skip
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
