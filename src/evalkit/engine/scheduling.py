"""Scheduling rules: how many units are in flight, and in what order they are dispatched.

* at most ``backend.concurrency`` units are in flight, and fewer while the provider
  throttles: an AIMD window (:class:`~evalkit.engine.ratelimit.AdaptiveWindow`) halves on a unit that met HTTP 429
  and grows back by one per window of unthrottled results; the executor's workers keep
  no window of their own (a unit is one call, :mod:`evalkit.engine.delivery`). With
  ``runner=cluster`` the endpoint's one adaptive window is the cluster's
  (:class:`~evalkit.engine.ratelimit.EndpointLimits`, shared by every driver, a lease per
  HTTP attempt), and the driver's stays fixed at ``backend.concurrency``, a bound on its
  units in flight: one AIMD window per endpoint either way;
* units are dispatched in selection order, and each result is handed to the driver's
  ``on_result`` (which journals it) the moment it arrives; at most :func:`held_bound` units
  are held at once, in flight or with their result not yet journaled, so that a scorer
  slower than the answers (or an offline model, which answers at once) holds a bounded
  backlog, not every unit of the run (issue 46: driver memory flat in the number of samples);
* no unit is dispatched once the run's budget is spent or refused a call
  (:mod:`evalkit.engine.budget`: each model call reserves its upper bound first), or once
  the executor is draining (:meth:`~evalkit.engine.protocol.Executor.drain`); a unit it
  will not solve (:class:`~evalkit.engine.protocol.Drained`) is left out, not journaled.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from evalkit.engine.budget import Budget
from evalkit.engine.solve import BUDGET_EXCEEDED
from evalkit.engine.work import WorkItem
from evalkit.engine.protocol import Drained, Executor
from evalkit.engine.ratelimit import AdaptiveWindow, throttled_count
from evalkit.types import Failure, Trajectory


#: the fewest units :func:`run_units` holds at once (in flight or awaiting ``on_result``)
MIN_HELD = 256


def held_bound(concurrency: int) -> int:
    """The most units :func:`run_units` holds at once, in flight or with a result awaiting
    ``on_result`` (scored and journaled): twice the concurrency, at least :data:`MIN_HELD`
    (answers that arrive together are scored together, up to 64 in one task)."""
    return max(2 * concurrency, MIN_HELD)


class _Solving:
    """One unit solved: its throttling counted, the budget charged, its slot freed, then
    its result handed to ``on_result``; its hold on ``held`` released once that returned."""

    def __init__(self, executor: Executor, window: AdaptiveWindow, on_result: Callable[[WorkItem, Trajectory], Awaitable[None]],
                 budget: Budget | None, held: asyncio.Semaphore):  # fmt: skip
        self.executor, self.window, self.on_result, self.budget, self.held = executor, window, on_result, budget, held
        self.throttled = 0

    async def one(self, seq: int, unit: WorkItem) -> None:
        try:
            await self._one(seq, unit)
        finally:
            self.held.release()

    async def _one(self, seq: int, unit: WorkItem) -> None:
        result, drained = Trajectory(failure=Failure("internal", "not run")), False
        try:
            result = await self.executor.submit(unit)
        except Drained:  # not solved in this attempt: neither answered nor failed, not journaled
            drained = True
        finally:
            n = throttled_count(result)
            self.throttled += n
            if self.budget is not None:
                self.budget.charge(result)  # before the slot is freed: the next dispatch sees it
                if result.failure is not None and result.failure.error_kind == BUDGET_EXCEEDED and not result.turns:
                    result = self.budget.not_sent()  # refused at its first call: the run's whole reason
            await self.window.release(seq, n)
        if not drained:
            await self.on_result(unit, result)


async def run_units(
    executor: Executor,
    units: list[WorkItem],
    concurrency: int,
    on_result: Callable[[WorkItem, Trajectory], Awaitable[None]],
    adaptive: bool = True,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """Solve ``units`` with at most ``concurrency`` in flight (a rollout counts as one; fewer
    while throttled, see :class:`AdaptiveWindow`); ``on_result`` is awaited in the driver as
    soon as each one finishes (it scores and journals the sample; the unit's slot is free
    by then, so scoring overlaps the next units' requests), with at most
    :func:`held_bound` units held at once, in flight or awaiting their ``on_result``. With a
    ``budget``, each unit is charged before its slot is freed, and once the budget is spent no further unit is
    dispatched: each one left is handed to ``on_result`` as a ``budget_exceeded`` failure.

    Returns the engine figures of the run: ``requests_wall_s`` (first dispatch to last
    result, seconds), ``throttled`` (HTTP 429 answers), the window's statistics (plus
    ``not_sent_budget`` when the budget stopped the run), and ``first_dispatch_perf`` (the
    ``perf_counter`` reading of the first dispatch, for the run's phases).
    """
    held = asyncio.Semaphore(held_bound(concurrency))
    solving = _Solving(executor, AdaptiveWindow(concurrency, adaptive), on_result, budget, held)
    window, not_sent = solving.window, []
    start = time.perf_counter()
    running: set[asyncio.Future[None]] = set()
    crashed: list[BaseException] = []

    def finished(task: asyncio.Future[None]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            crashed.append(task.exception())  # type: ignore[arg-type]

    try:
        for i, unit in enumerate(units):  # units are dispatched in order, one waiter at a time
            await held.acquire()  # a bounded backlog: results not yet journaled count
            if crashed or getattr(executor, "draining", False):  # journaling failed (a full disk), or an early stop: stop dispatching
                held.release()
                break
            seq = await window.acquire()
            if budget is not None and budget.exhausted():
                await window.release(seq, 0)
                held.release()
                not_sent = units[i:]
                break
            task = asyncio.ensure_future(solving.one(seq, unit))
            running.add(task)
            task.add_done_callback(finished)
        for unit in not_sent:
            await on_result(unit, budget.not_sent())  # type: ignore[union-attr]
        await asyncio.gather(*list(running))
        if crashed:
            raise crashed[0]
    finally:
        for task in list(running):
            task.cancel()
    figures = {"requests_wall_s": round(time.perf_counter() - start, 3), "throttled": solving.throttled,
               **window.stats(), "first_dispatch_perf": start}  # fmt: skip
    return {**figures, "not_sent_budget": len(not_sent)} if not_sent else figures
