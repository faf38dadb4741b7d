"""The model worker's own rules, without Ray: what it keeps of a run that has ended, and
what it sends back when solving raises (tests/engine/test_crash_resume.py runs it in Ray)."""

from __future__ import annotations

import asyncio
import pickle

from evalkit.engine.executor import ModelWorker, _portable


class NeedsTwo(Exception):
    """Like many of litellm's exceptions: ``__init__`` needs arguments ``args`` does not keep."""

    def __init__(self, message: str, provider: str):
        super().__init__(message)
        self.provider = provider


def test_an_exception_that_cannot_be_read_back_travels_as_a_runtime_error_naming_it():
    try:
        raise NeedsTwo("quota gone", "acme")
    except NeedsTwo as exc:
        portable = _portable(exc)
    assert isinstance(portable, RuntimeError)
    assert str(portable).startswith("NeedsTwo: quota gone (raised in a model worker)")
    assert "raise NeedsTwo" in str(portable)  # its traceback
    assert isinstance(pickle.loads(pickle.dumps(portable)), RuntimeError)
    plain = ValueError("bad")
    assert _portable(plain) is plain


def test_a_run_forgotten_while_it_registers_stays_forgotten():
    """``configure`` waits for the run's object; the run ends (``forget``) meanwhile: the
    worker must not register it afterwards (in a sweep it would be kept for the sweep's life)."""

    async def scenario() -> dict:
        worker = ModelWorker(lambda: None, None)
        loop = asyncio.get_running_loop()
        payload: asyncio.Future = loop.create_future()
        configuring = asyncio.ensure_future(worker.configure("job-1", [payload]))
        await asyncio.sleep(0)
        worker.forget("job-1")
        payload.set_result((object(), {}, {}, None))
        await configuring
        await worker.configure("job-2", [asyncio.sleep(0, result=(object(), {}, {}, None))])
        return worker.runs

    assert set(asyncio.run(scenario())) == {"job-2"}


class _Slow:
    """A model at the network edge: each answer after ``delays[sample id]`` seconds; counts
    how many requests it holds at once."""

    model_id = "slow@test"

    def __init__(self, delays: dict[str, float]):
        self.delays, self.now, self.peak = delays, 0, 0

    async def generate(self, request):
        from evalkit.types import Completion

        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(self.delays[request.sample_id])
        finally:
            self.now -= 1
        return Completion(text="ok", finish_reason="stop", usage={"prompt_tokens": 3, "completion_tokens": 1})


def _worker_run(delays: dict[str, float], share: int, least: int = 1) -> tuple[list[list[str]], _Slow]:
    """Every sample of ``delays`` sent to one in-process ModelWorker in one ``solve`` call:
    ``(the sample ids of each list it yielded, the model)``."""
    from evalkit.benchmarks.base import Generate
    from evalkit.engine.work import WorkItem
    from evalkit.models.factory import Agents
    from evalkit.types import Request, Sample

    model = _Slow(delays)
    units = [WorkItem(Sample(i, "x"), Request(i, "x", messages=[{"role": "user", "content": i}])) for i in delays]

    async def scenario() -> list[list[str]]:
        worker = ModelWorker(lambda: Agents(model), None)
        await worker.configure("job", [asyncio.sleep(0, result=(Generate(), {}, {}, None))])
        return [[key[0] for key, _ in item] async for item in worker.solve("job", [], None, (share, True, least), units)]

    return asyncio.run(scenario()), model


def test_a_worker_solves_at_most_its_share_at_once_and_holds_the_rest_in_order():
    """Units sent ahead of the worker's free slots wait in it: at most ``share`` requests
    reach the model at once, and every unit is answered once."""
    items, model = _worker_run({f"s{i}": 0.01 for i in range(12)}, share=3)
    assert model.peak == 3
    assert sorted(k for item in items for k in item) == sorted(f"s{i}" for i in range(12))


def test_finished_units_go_back_least_at_a_time_or_within_the_wait():
    """``least`` 2: results go back 2 at a time, not one Ray message each; a unit finishing
    alone (the last, long after the others) goes back on its own after at most
    ``RESULTS_WAIT_S``."""
    delays = {f"s{i}": 0.02 * (i + 1) for i in range(8)}  # one finishes every 20 ms
    delays["late"] = 1.0
    items, _ = _worker_run(delays, share=8, least=2)
    assert [len(item) for item in items] == [2, 2, 2, 2, 1] and items[-1] == ["late"]
    assert items[0] == ["s0", "s1"]


def test_the_results_of_two_calls_go_back_together_on_either_stream_once_each():
    """Two ``solve`` calls of one run open in a worker at once: a stream yields the results
    ready of both calls (one Ray message for both), every unit comes back exactly once over
    the two streams, and each stream ends once its own units are all gone."""
    from evalkit.benchmarks.base import Generate
    from evalkit.engine.work import WorkItem
    from evalkit.models.factory import Agents
    from evalkit.types import Request, Sample

    delays = {f"s{i}": 0.01 * (1 + i % 5) for i in range(20)}
    model = _Slow(delays)
    units = [WorkItem(Sample(i, "x"), Request(i, "x", messages=[{"role": "user", "content": i}])) for i in delays]

    async def scenario() -> list[list[list[str]]]:
        worker = ModelWorker(lambda: Agents(model), None)
        await worker.configure("job", [asyncio.sleep(0, result=(Generate(), {}, {}, None))])

        async def stream(part: list) -> list[list[str]]:
            return [[key[0] for key, _ in item] async for item in worker.solve("job", [], None, (8, True, 4), part)]

        return list(await asyncio.wait_for(asyncio.gather(stream(units[:10]), stream(units[10:])), 10))

    first, second = asyncio.run(scenario())
    came = [sid for items in (first, second) for item in items for sid in item]
    assert sorted(came) == sorted(delays)  # each once
    mixed = [item for items in (first, second) for item in items if {int(s[1:]) < 10 for s in item} == {True, False}]
    assert mixed, (first, second)  # some item carried results of both calls
    assert model.peak == 8


def test_a_run_forgotten_mid_call_ends_its_streams_without_hanging():
    """``forget`` cancels the run's units, those still waiting for a slot too: each open stream
    then ends (the driver counts the units it did not bring back as lost) instead of waiting
    for results that will never come."""
    from evalkit.benchmarks.base import Generate
    from evalkit.engine.work import WorkItem
    from evalkit.models.factory import Agents
    from evalkit.types import Request, Sample

    model = _Slow({f"s{i}": 30.0 for i in range(6)})
    units = [WorkItem(Sample(f"s{i}", "x"), Request(f"s{i}", "x", messages=[{"role": "user", "content": "q"}])) for i in range(6)]

    async def scenario() -> list:
        worker = ModelWorker(lambda: Agents(model), None)
        await worker.configure("job", [asyncio.sleep(0, result=(Generate(), {}, {}, None))])

        async def stream() -> list:
            return [item async for item in worker.solve("job", [], None, (2, True, 1), units)]

        running = asyncio.ensure_future(stream())
        await asyncio.sleep(0.05)
        worker.forget("job")
        return await asyncio.wait_for(running, 5)

    assert asyncio.run(scenario()) == []
