"""The engine holds a bounded backlog (issue 46, items 3 and 4): answers that arrive faster than
they are journaled (an offline model answers at once) stop the dispatch at
:func:`~evalkit.engine.scheduling.held_bound` units, never every unit of the run. In process,
counted in units, never timed."""

from __future__ import annotations

import asyncio

from evalkit.engine.scheduling import MIN_HELD, held_bound, run_units
from evalkit.engine.work import WorkItem
from evalkit.types import Request, Sample, Trajectory


class _AtOnce:
    """An executor that answers every unit at once (what an offline model does)."""

    def __init__(self) -> None:
        self.submitted = 0

    async def submit(self, unit: WorkItem) -> Trajectory:
        self.submitted += 1
        return Trajectory(final_output="42")


def _units(n: int) -> list[WorkItem]:
    return [WorkItem(Sample(id=f"s{i}", subset="all", data={}), Request(f"s{i}", "all", messages=[])) for i in range(n)]


def test_dispatch_waits_for_the_journal_once_the_backlog_is_full():
    assert held_bound(4) == MIN_HELD and held_bound(1000) == 2000
    executor, journaled, most = _AtOnce(), [], 0

    async def main() -> dict:
        gate = asyncio.Event()

        async def on_result(unit: WorkItem, trajectory: Trajectory) -> None:
            nonlocal most
            most = max(most, executor.submitted - len(journaled))  # units dispatched and not yet journaled
            await gate.wait()  # the journal is slower than the answers
            journaled.append(unit.sample.id)

        async def release() -> None:
            while len(journaled) < 3 * MIN_HELD:
                await asyncio.sleep(0.01)
                gate.set()
                gate.clear()

        opener = asyncio.ensure_future(release())
        figures = await run_units(executor, _units(3 * MIN_HELD), 4, on_result)
        await opener
        return figures

    figures = asyncio.run(main())
    assert len(journaled) == 3 * MIN_HELD and sorted(journaled) == sorted(f"s{i}" for i in range(3 * MIN_HELD))
    assert MIN_HELD // 2 < most <= MIN_HELD  # the backlog filled, and no further
    assert figures["requests_wall_s"] >= 0
