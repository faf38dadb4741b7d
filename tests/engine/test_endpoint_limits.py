"""The shared per-endpoint window (evalkit.engine.ratelimit.EndpointLimits) by itself, in
process: what the Ray actor does for every caller on a cluster (the cluster runs are in
tests/test_cluster_runs.py)."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.engine import ratelimit
from evalkit.engine.ratelimit import EndpointLimits, endpoint_key

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
        a = [await limits.acquire(AGENT, 4, True, "worker-a", 60) for _ in range(2)]
        b = [await limits.acquire(AGENT, 4, True, "worker-b", 60) for _ in range(2)]
        waiting = await _blocked(limits.acquire(AGENT, 4, True, "worker-a", 60))  # a 5th: over the limit
        user = [await limits.acquire(USER, 2, True, "worker-b", 60) for _ in range(2)]  # another endpoint
        await limits.release(b[0], False)
        await asyncio.wait_for(waiting, 5)
        stats = limits.stats(AGENT)
        assert stats is not None and stats["in_flight"] == 4 and stats["requests"] == 5
        del a, user
        return stats["peak_in_flight"], limits.stats(USER)["peak_in_flight"]  # type: ignore[index]

    assert asyncio.run(scenario()) == (4, 2)


def test_a_wave_of_429_from_every_caller_halves_the_window_once():
    async def scenario() -> dict:
        limits = EndpointLimits()
        leases = [await limits.acquire(AGENT, 8, True, f"worker-{i % 2}", 60) for i in range(8)]
        for lease in leases:  # the whole wave answered 429, half from each process
            await limits.release(lease, True)
        return limits.stats(AGENT)  # type: ignore[return-value]

    stats = asyncio.run(scenario())
    assert (stats["min_window"], stats["window_decreases"], stats["in_flight"]) == (4, 1, 0)


def test_the_smallest_limit_asked_for_an_endpoint_holds():
    async def scenario() -> int:
        limits = EndpointLimits()
        await limits.acquire(AGENT, 8, True, "run-1", 60)
        await limits.acquire(AGENT, 2, True, "run-2", 60)
        await _blocked(limits.acquire(AGENT, 8, True, "run-1", 60))
        return limits.stats(AGENT)["concurrency"]  # type: ignore[index]

    assert asyncio.run(scenario()) == 2


def test_a_replaced_workers_leases_are_given_back():
    async def scenario() -> tuple[int, int]:
        limits = EndpointLimits()
        for _ in range(2):
            await limits.acquire(AGENT, 2, True, "lost-worker", 60)
        waiting = await _blocked(limits.acquire(AGENT, 2, True, "other", 60))
        freed = await limits.forget("lost-worker")  # its restarted process registers
        await asyncio.wait_for(waiting, 5)
        await limits.release(999, True)  # a lease given back already: ignored
        return freed, limits.stats(AGENT)["window_decreases"]  # type: ignore[index]

    assert asyncio.run(scenario()) == (2, 0)


def test_a_lease_past_its_deadline_is_reclaimed(monkeypatch):
    monkeypatch.setattr(ratelimit, "REAP_EVERY_S", 0.02)

    async def scenario() -> int:
        limits = EndpointLimits()
        await limits.acquire(AGENT, 1, True, "dead-driver's-worker", 0.1)  # never released
        await asyncio.wait_for(limits.acquire(AGENT, 1, True, "resumed", 60), 5)
        limits._reaper.cancel()  # type: ignore[union-attr]
        return limits.reclaimed

    assert asyncio.run(scenario()) == 1


@pytest.mark.parametrize("adaptive, expected", [(True, 1), (False, 0)])
def test_a_fixed_window_ignores_429(adaptive, expected):
    async def scenario() -> int:
        limits = EndpointLimits()
        await limits.release(await limits.acquire(AGENT, 4, adaptive, "w", 60), True)
        return limits.stats(AGENT)["window_decreases"]  # type: ignore[index]

    assert asyncio.run(scenario()) == expected
