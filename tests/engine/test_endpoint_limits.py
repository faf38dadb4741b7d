"""The shared per-endpoint window (evalkit.engine.ratelimit.EndpointLimits) by itself, in
process: what the Ray actor does for every caller on a cluster (the cluster runs are in
tests/test_cluster_runs.py)."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.engine import ratelimit
from evalkit.engine.ratelimit import EndpointLimits, endpoint_key
from tests.support.host import time_limit

#: how long a waiter granted its slot is waited for: a hang guard, 5 s on an idle host, scaled by the host's slowness
LIMIT_S = time_limit(5)

def _holder(name: str) -> tuple[str, str, str]:
    """A model worker's ``(job id, actor id, process id)``: ``name``'s own job, actor and process."""
    return f"job-{name}", name, f"proc-{name}"


AGENT = endpoint_key("openai/fake", "http://127.0.0.1:9/v1")
USER = endpoint_key("openai/user", "http://127.0.0.1:9/v1")


async def _blocked(coro, wait_s: float = 0.05) -> asyncio.Task:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(wait_s)
    assert not task.done(), "should wait for a slot"
    return task


def test_key_names_the_endpoint_and_model_never_a_credential():
    assert endpoint_key("openai/m", "http://u:secret@h:1/v1") == "http://h:1/v1|openai/m"
    assert endpoint_key("deepseek/deepseek-chat", None) == "default|deepseek/deepseek-chat"


def test_one_endpoint_spelt_two_ways_is_one_window():
    """A trailing slash or an upper-case scheme or host is the same server: two spellings in
    two runs were two windows, so the endpoint saw twice its limit in flight."""
    key = endpoint_key("openai/m", "http://h:1/v1")
    assert endpoint_key("openai/m", "http://h:1/v1/") == key
    assert endpoint_key("openai/m", "HTTP://H:1/v1") == key
    assert endpoint_key("openai/m", "http://u:secret@H:1/v1//") == key
    assert endpoint_key("openai/m", "http://h:1/v2") != key and endpoint_key("openai/M", "http://h:1/v1") != key


def test_callers_of_one_endpoint_share_its_limit_and_other_endpoints_have_their_own():
    async def scenario() -> tuple[int, int]:
        limits = EndpointLimits()
        a = [await limits.acquire(AGENT, 4, True, _holder("worker-a")) for _ in range(2)]
        b = [await limits.acquire(AGENT, 4, True, _holder("worker-b")) for _ in range(2)]
        waiting = await _blocked(limits.acquire(AGENT, 4, True, _holder("worker-a")))  # a 5th: over the limit
        user = [await limits.acquire(USER, 2, True, _holder("worker-b")) for _ in range(2)]  # another endpoint
        await limits.release(b[0], False)
        await asyncio.wait_for(waiting, LIMIT_S)
        stats = limits.stats(AGENT)
        assert stats is not None and stats["in_flight"] == 4 and stats["requests"] == 5
        del a, user
        return stats["peak_in_flight"], limits.stats(USER)["peak_in_flight"]  # type: ignore[index]

    assert asyncio.run(scenario()) == (4, 2)


def test_a_wave_of_429_from_every_caller_halves_the_window_once():
    async def scenario() -> dict:
        limits = EndpointLimits()
        leases = [await limits.acquire(AGENT, 8, True, _holder(f"worker-{i % 2}")) for i in range(8)]
        for lease in leases:  # the whole wave answered 429, half from each process
            await limits.release(lease, True)
        return limits.stats(AGENT)  # type: ignore[return-value]

    stats = asyncio.run(scenario())
    assert (stats["min_window"], stats["window_decreases"], stats["in_flight"]) == (4, 1, 0)


def test_the_smallest_limit_asked_for_an_endpoint_holds():
    async def scenario() -> int:
        limits = EndpointLimits()
        await limits.acquire(AGENT, 8, True, _holder("run-1"))
        await limits.acquire(AGENT, 2, True, _holder("run-2"))
        await _blocked(limits.acquire(AGENT, 8, True, _holder("run-1")))
        return limits.stats(AGENT)["concurrency"]  # type: ignore[index]

    assert asyncio.run(scenario()) == 2


def test_a_restarted_workers_old_leases_are_given_back():
    """Ray restarted a worker (its node lost): its new process registers with its first unit,
    and the leases of the old one, and any granted to it after (its call waited here while it
    died), are given back; the new process's own leases stay."""

    async def scenario() -> tuple[int, int, int]:
        limits = EndpointLimits()
        await limits.register("actor-1", "proc-old")
        for _ in range(2):
            await limits.acquire(AGENT, 3, True, ("job", "actor-1", "proc-old"))
        await limits.acquire(AGENT, 3, True, ("job", "actor-2", "proc-b"))
        late = await _blocked(limits.acquire(AGENT, 3, True, ("job", "actor-1", "proc-old")))  # a 4th: waits
        freed = await limits.register("actor-1", "proc-new")  # the restarted process, on another node
        await asyncio.wait_for(late, LIMIT_S)  # granted to the dead process: given back at once
        await limits.acquire(AGENT, 3, True, ("job", "actor-1", "proc-new"))
        await limits.release(999, True)  # a lease given back already: ignored
        stats = limits.stats(AGENT)
        return freed, limits.reclaimed, stats["in_flight"]  # type: ignore[index]

    assert asyncio.run(scenario()) == (2, 3, 2)


def test_a_dead_drivers_leases_are_freed_and_a_fresh_driver_has_the_whole_window(monkeypatch):
    """A driver SIGKILLed mid-run: its job's leases (its workers' attempts, never given back)
    are freed as soon as the GCS reports the job dead, not after a lease timeout (605 s before),
    so its resume has every slot at once."""
    monkeypatch.setattr(ratelimit, "REAP_EVERY_S", 0.02)
    dead: list[str] = []

    async def scenario() -> tuple[int, int]:
        limits = EndpointLimits(dead_jobs=lambda: list(dead))
        for i in range(4):
            await limits.acquire(AGENT, 4, True, ("job-killed", f"actor-{i % 2}", f"proc-{i % 2}"))
        waiting = await _blocked(limits.acquire(AGENT, 4, True, ("job-resume", "actor-9", "proc-9")), 0.1)  # alive: kept
        dead.append("job-killed")
        await asyncio.wait_for(waiting, LIMIT_S)
        resumed = [await asyncio.wait_for(limits.acquire(AGENT, 4, True, ("job-resume", "actor-9", "proc-9")), LIMIT_S) for _ in range(3)]
        limits._reaper.cancel()  # type: ignore[union-attr]
        return len(resumed) + 1, limits.reclaimed

    assert asyncio.run(scenario()) == (4, 4)


@pytest.mark.parametrize("adaptive, expected", [(True, 1), (False, 0)])
def test_a_fixed_window_ignores_429(adaptive, expected):
    async def scenario() -> int:
        limits = EndpointLimits()
        await limits.release(await limits.acquire(AGENT, 4, adaptive, _holder("w")), True)
        return limits.stats(AGENT)["window_decreases"]  # type: ignore[index]

    assert asyncio.run(scenario()) == expected
