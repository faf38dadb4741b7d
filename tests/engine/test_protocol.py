"""The executor protocol (issue 34 item 3): the three executors implement it, the execute
stage asks no executor its type, and ``drain`` stops the dispatch while the units in flight
are journaled."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path

import pytest

import evalkit.engine.run as engine_run
from evalkit.engine.batch import BatchExecutor
from evalkit.engine.executor import LocalExecutor, RayExecutor
from evalkit.engine.protocol import Drained, Executor, ExecutorBase
from evalkit.engine.scheduling import run_units
from evalkit.engine.work import WorkItem
from evalkit.types import Request, Sample, Trajectory

METHODS = ("submit", "wait_ready", "set_budget", "figures", "drain", "cancel", "close")


@pytest.mark.parametrize("cls", [LocalExecutor, RayExecutor, BatchExecutor])
def test_each_executor_has_every_method_of_the_protocol(cls) -> None:
    for name in METHODS:
        assert callable(getattr(cls, name, None)), (cls.__name__, name)
        assert name in dir(Executor)
    assert inspect.iscoroutinefunction(cls.submit)
    assert issubclass(cls, ExecutorBase)


def test_the_execute_stage_asks_no_executor_its_type() -> None:
    tree = ast.parse(Path(engine_run.__file__).read_text(encoding="utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) in ("isinstance", "type")]
    assert not calls, [ast.unparse(c) for c in calls]


class _Held(ExecutorBase):
    """Answers each unit once ``release`` is set; counts what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.release = asyncio.Event()

    async def submit(self, unit: WorkItem) -> Trajectory:
        self.check_draining()
        self.asked.append(unit.sample.id)
        await self.release.wait()
        return Trajectory(final_output="ok")


def test_drain_stops_the_dispatch_and_the_units_in_flight_are_journaled() -> None:
    units = [WorkItem(Sample(f"s{i}", "q"), Request(f"s{i}", "q", messages=[{"role": "user", "content": "q"}])) for i in range(6)]
    executor, journaled = _Held(), []

    async def on_result(unit: WorkItem, trajectory: Trajectory) -> None:
        journaled.append(unit.sample.id)

    async def main() -> dict:
        run = asyncio.ensure_future(run_units(executor, units, 2, on_result, adaptive=False))
        while len(executor.asked) < 2:
            await asyncio.sleep(0)
        executor.drain()  # an early stop: two units in flight, four not dispatched
        executor.release.set()
        return await asyncio.wait_for(run, 60)

    figures = asyncio.run(main())
    assert executor.asked == ["s0", "s1"] and sorted(journaled) == ["s0", "s1"]
    assert "not_sent_budget" not in figures
    with pytest.raises(Drained):
        asyncio.run(executor.submit(units[2]))
