"""Issue 34 item 1, through real Ray model workers: a unit whose result will not pickle (a
verdict nested far deeper than pickle goes) fails alone. Before one call per unit, a worker
streamed its units' results together, the transfer raised Ray's ``PicklingError``, and the
worker's other units in flight were re-sent (and that one became ``worker_died``)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from evalkit.types import Completion, Trajectory

#: the sample whose result nests this deep (pickle's recursion limit is about 1,000)
DEEP_ID, DEPTH = "s3", 100_000
#: every model call made, by sample id, in the worker's process (read through ``Calls``)
CALLS: Counter = Counter()


class Echo:
    """A network model (no ``offline`` flag: it runs in the Ray workers) answering after a
    short wait, so that every unit is in flight at once."""

    model_id = "echo@test"

    async def generate(self, request):
        CALLS[request.sample_id] += 1
        await asyncio.sleep(0.3)
        return Completion(text="ok", finish_reason="stop", usage={"prompt_tokens": 1, "completion_tokens": 1})


class DeepVerdict:
    """A solver whose ``DEEP_ID`` trajectory carries a verdict nested ``DEPTH`` deep."""

    async def solve(self, sample, request, agent, user):
        completion = await agent.generate(request)
        if sample.id != DEEP_ID:
            return Trajectory(final_output=completion.text)
        deep: list = []
        for _ in range(DEPTH):
            deep = [deep]
        return Trajectory(final_output=completion.text, data={"verdict": deep})


def _agents():
    from evalkit.models.factory import Agents

    return Agents(Echo())


def _calls() -> dict[str, int]:
    return dict(CALLS)


@pytest.mark.slow
def test_a_result_that_will_not_pickle_fails_its_own_unit_and_nothing_is_resent(ray_address):
    import ray

    from evalkit.engine.executor import RayExecutor
    from evalkit.engine.scheduling import run_units
    from evalkit.engine.work import WorkItem
    from evalkit.types import Request, Sample

    units = [WorkItem(Sample(f"s{i}", "x"), Request(f"s{i}", "x", messages=[{"role": "user", "content": str(i)}])) for i in range(6)]
    executor = RayExecutor(_agents, None, num_workers=1, concurrency=6)
    got: dict[str, Trajectory] = {}
    handed: Counter = Counter()

    async def on_result(unit, trajectory):
        got[unit.key], handed[unit.key] = trajectory, handed[unit.key] + 1

    try:
        executor.register(DeepVerdict(), {}, {})
        executor.wait_ready()
        figures = asyncio.run(run_units(executor, units, 6, on_result))
        calls = ray.get(executor.workers[0].__ray_call__.remote(lambda self: _calls()))
    finally:
        executor.close()
    assert figures["peak_in_flight"] == 6  # the deep one was in flight with the five others
    bad = got[units[3].key].failure
    assert bad is not None and bad.error_kind == "internal" and "does not pickle (RecursionError" in bad.message
    assert all(got[u.key].failure is None and got[u.key].final_output == "ok" for u in units if u is not units[3])
    assert set(handed.values()) == {1} and len(handed) == 6
    assert executor.delivery.stats["resent"] == 0 and executor.delivery.stats["lost"] == 0
    assert executor.delivery.stats["workers_restarted"] == 0
    assert calls == {f"s{i}": 1 for i in range(6)}  # each sample's request went out once
