"""The model worker's own rules, without Ray: one call solves one unit, the run's state is
read once, and what it sends back when solving raises (tests/engine/test_crash_resume.py runs it in Ray)."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys

from evalkit.engine.executor import ModelWorker, pack
from evalkit.types import Trajectory


class NeedsTwo(Exception):
    """Like many of litellm's exceptions: ``__init__`` needs arguments ``args`` does not keep."""

    def __init__(self, message: str, provider: str):
        super().__init__(message)
        self.provider = provider


def test_an_exception_that_cannot_be_read_back_travels_as_a_runtime_error_naming_it():
    try:
        raise NeedsTwo("quota gone", "acme")
    except NeedsTwo as exc:
        portable = pickle.loads(pack(exc))
    assert isinstance(portable, RuntimeError)
    assert str(portable).startswith("NeedsTwo: quota gone (raised in a model worker)")
    assert "raise NeedsTwo" in str(portable)  # its traceback
    plain = pickle.loads(pack(ValueError("bad")))
    assert type(plain) is ValueError and plain.args == ("bad",)


class _Slow:
    """A model at the network edge: each answer once every sample of ``delays`` has been
    asked (at most 60 s), then after ``delays[sample id]`` seconds; counts how many requests
    it holds at once."""

    model_id = "slow@test"

    def __init__(self, delays: dict[str, float]):
        self.delays, self.now, self.peak = delays, 0, 0

    async def generate(self, request):
        from evalkit.types import Completion

        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            # held until every request is in (or 60 s): the peak then counts the calls the
            # worker lets run at once, whatever the host's load (a 0-10 ms answer could end
            # before a slow host had started the next call)
            for _ in range(6000):
                if self.peak >= len(self.delays):
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(self.delays[request.sample_id])
        finally:
            self.now -= 1
        return Completion(text="ok", finish_reason="stop", usage={"prompt_tokens": 3, "completion_tokens": 1})


def _worker_run(delays: dict[str, float]) -> tuple[list[tuple[str, Trajectory]], _Slow, ModelWorker]:
    """Every sample of ``delays`` sent to one in-process ModelWorker, one ``solve`` call
    each, all at once: ``(each call's (sample id, trajectory), the model, the worker)``."""
    from evalkit.benchmarks.base import Generate
    from evalkit.engine.work import WorkItem
    from evalkit.models.factory import Agents
    from evalkit.types import Request, Sample

    model = _Slow(delays)
    units = [WorkItem(Sample(i, "x"), Request(i, "x", messages=[{"role": "user", "content": i}])) for i in delays]
    worker = ModelWorker(lambda: Agents(model), None)
    loads: list[int] = []

    async def state():
        loads.append(1)
        await asyncio.sleep(0.01)
        return Generate(), {}, {}, None

    async def scenario() -> list:
        holder = [asyncio.ensure_future(state())]
        answers = await asyncio.gather(*(worker.solve("job", holder, None, u) for u in units))
        return [(u.sample.id, pickle.loads(payload)) for u, (payload, _) in zip(units, answers)]

    out = asyncio.run(scenario())
    assert loads == [1]  # the run's state is read once per process, however many calls wait for it
    return out, model, worker


def test_each_call_solves_its_own_unit_and_returns_it_pickled_with_where_it_ran():
    out, model, worker = _worker_run({f"s{i}": 0.01 * (i % 3) for i in range(8)})
    assert [(sid, t.final_output) for sid, t in out] == [(f"s{i}", "ok") for i in range(8)]
    assert model.peak == 8  # calls run at once: the driver's window bounds them
    ray = sys.modules.get("ray")  # Ray's node when this process runs Ray (another test started it), else none
    assert worker.ping() == (os.getpid(), ray.get_runtime_context().get_node_id() if ray and ray.is_initialized() else None)
    assert list(worker.runs) == ["job"]
    worker.forget("job")
    assert worker.runs == {}
