"""The driver's side of the model workers: units out in small batches, results back on Ray's
streaming generators (``num_returns="streaming"``), each unit journaled once.

Rules (each tested in-process against a fake actor handle, tests/engine/test_delivery.py):

* worker ``i`` solves at most ``shares[i]`` units at a time (its share of
  ``backend.concurrency``; the worker keeps that window); with a share of ``AHEAD_FROM``
  or more it holds up to ``ROOM`` times its share, the rest waiting there, so that a slot
  freed there is refilled without a call. The units queued within ``FLUSH_DELAY_S`` go to
  the live workers with the emptiest rooms, but only to a worker with a free slot or, when
  it holds units ahead, room for half of them, which is then filled: when results trickle
  in one by one, a call still carries about a share of units, not one; at most
  ``max_batch`` units go in one call of its ``solve`` generator, which yields ``[(unit
  key, result), ...]`` as units finish (half a share at a time for a worker holding units
  ahead, else each at once);
* the generator runs with Ray's task retries off: after a worker dies Ray would re-run it
  from the start and drop its first items *by position* (some units would come back twice,
  others never). The driver resends by unit key instead, and takes the first result of
  each key (a second one is dropped and counted);
* a stream that fails (the worker died, the call failed) or ends without some of its units
  costs each of them a try; the worker is then pinged (a restarted worker answers; one Ray
  reports dead for good, or silent for ``ping_timeout_s``, is left out of the run) and the
  units go back as *suspects*: one suspect at a time, alone in its batch, so that a unit
  that kills its worker takes a unit it merely shared the worker with down once at most; a
  unit lost ``UNIT_MAX_TRIES`` times is a ``worker_died`` failure, and so is every unit
  once no worker is left;
* no wait is unbounded: a stream silent for ``liveness_s`` pings its worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, Hashable

from evalkit.engine.work import WorkItem
from evalkit.types import Actor, Failure, Trajectory

log = logging.getLogger("evalkit")

#: a unit lost with its worker this many times is a ``worker_died`` failure
UNIT_MAX_TRIES = 3
#: the most units in one ``solve`` call
MAX_BATCH = 64
#: units queued within this long of the first go out together (seconds)
FLUSH_DELAY_S = 0.005
#: a worker with a share of at least ``AHEAD_FROM`` holds up to ``ROOM`` times its share:
#: its share solving, the rest waiting there (with a smaller share a few slow requests
#: would hold up every unit waiting behind them, so it holds only its share)
ROOM, AHEAD_FROM = 3, 8
#: a stream with no result for this long pings its worker (seconds)
LIVENESS_S = 30.0
#: a worker that does not answer a ping within this (its restart included) is left out (seconds)
PING_TIMEOUT_S = 120.0


@dataclass
class _Held:
    """A unit the driver holds until its result is in: its future, the worker that has it
    (-1 while queued), the number of times it was lost and the number of its current send."""

    unit: WorkItem
    future: asyncio.Future[Trajectory]
    worker: int = -1
    tries: int = 0
    send: int = 0


class Delivery:
    """Units to ``workers`` (Ray actor handles, or fakes with the same calls:
    ``solve.options(num_returns="streaming").remote(*solve_args, (share, adaptive, least), units)``
    iterating awaitables of ``[(key, trajectory or exception), ...]`` (the results ready
    together), and ``ping.remote()``); ``submit`` is awaited once per unit, with a unique
    ``unit.key``, at most ``sum(shares) + ahead`` at a time. A worker that lost units once gets
    ``again_args`` instead of ``solve_args`` from then on (a restarted process must be told
    the run again)."""

    def __init__(self, workers: list[Any], solve_args: tuple[Any, ...], shares: list[int], adaptive: bool = True,
                 max_batch: int = MAX_BATCH, liveness_s: float = LIVENESS_S, ping_timeout_s: float = PING_TIMEOUT_S,
                 again_args: tuple[Any, ...] | None = None, flush_delay_s: float = FLUSH_DELAY_S):  # fmt: skip
        self.flush_delay_s, self.shares, self.adaptive = flush_delay_s, shares, adaptive
        self.rooms = [share * ROOM if share >= AHEAD_FROM else share for share in shares]
        self.ahead = sum(self.rooms) - sum(shares)  # units the workers may hold beyond their free slots
        #: each worker's ``(share, adaptive, results per stream item)``: half its share with
        #: units waiting ahead (they keep its slots busy meanwhile), else each result at once
        self.windows = [(sh, adaptive, max(1, sh // 2) if room > sh else 1) for sh, room in zip(shares, self.rooms)]
        self.workers, self.solve_args, self.max_batch = workers, solve_args, max_batch
        self.again_args = again_args  # the arguments of a call to a worker lost before (it may be a new process)
        self.liveness_s, self.ping_timeout_s = liveness_s, ping_timeout_s
        self.load, self.live, self.lost_before = [0] * len(workers), [True] * len(workers), [False] * len(workers)
        self.checking: dict[int, asyncio.Future[bool]] = {}
        self.held: dict[Hashable, _Held] = {}  # the units not answered yet
        self.queue: list[Hashable] = []  # and of them, those waiting here
        self.suspects: deque[Hashable] = deque()
        self.suspect_out = self.flush_soon = False
        self.tasks: set[asyncio.Future[Any]] = set()
        self.stats = {"resent": 0, "duplicates": 0, "workers_lost": 0, "calls": 0, "items": 0}
        #: where each worker runs now, as its ``ping`` answers (set again after it was lost:
        #: Ray may restart it elsewhere), and ``{(worker, where): units it delivered there}``
        self.where: list[Any] = [None] * len(workers)
        self.served: dict[tuple[int, Any], int] = {}

    async def submit(self, unit: WorkItem) -> Trajectory:
        if unit.key in self.held:
            raise ValueError(f"unit {unit.key!r} is in flight already")
        held = self.held[unit.key] = _Held(unit, asyncio.get_running_loop().create_future())
        self.queue.append(unit.key)
        self._flush_later()
        return await held.future

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    # -- sending ------------------------------------------------------------------------------
    def _flush_later(self) -> None:
        if not self.flush_soon:  # what is queued meanwhile goes in the same calls
            self.flush_soon = True
            asyncio.get_running_loop().call_later(self.flush_delay_s, self._flush)

    def _flush(self) -> None:
        self.flush_soon = False
        if not any(self.live):
            for key in [*self.queue, *self.suspects]:
                self._fail(key, "every model worker of this run died")
            self.queue, self.suspects = [], deque()
            return
        usable = [i for i, up in enumerate(self.live) if up and i not in self.checking]
        if not usable:
            return  # a check under way flushes again when it ends
        if self.suspects and not self.suspect_out:
            self.suspect_out = True
            self._send(min(usable, key=self._fill), [self.suspects.popleft()], suspect=True)
        batches: dict[int, list[Hashable]] = {}
        open_ = [i for i in usable if self._open(i)]
        while self.queue and open_:  # one unit at a time to the emptiest, until every room is full
            i = min(open_, key=self._fill)
            self.load[i] += 1  # counted now, so the next unit sees it; _send counts it again
            batches.setdefault(i, []).append(self.queue.pop(0))
            if self._fill(i) >= 1:
                open_.remove(i)
        for i, keys in batches.items():
            self.load[i] -= len(keys)
            for start in range(0, len(keys), self.max_batch):
                self._send(i, keys[start : start + self.max_batch])

    def _fill(self, i: int) -> float:
        """How full worker ``i``'s room is: 0 empty, 1 full."""
        return self.load[i] / self.rooms[i]

    def _open(self, i: int) -> bool:
        """Whether worker ``i`` is sent units: a free slot, or with units ahead, room for half of them."""
        return self.rooms[i] - self.load[i] >= max(1, (self.rooms[i] - self.shares[i]) // 2)

    def _send(self, i: int, keys: list[Hashable], suspect: bool = False) -> None:
        for key in keys:
            self.held[key].worker, self.held[key].send = i, self.held[key].send + 1
        sends = [(key, self.held[key].send) for key in keys]
        self.load[i], self.stats["calls"] = self.load[i] + len(keys), self.stats["calls"] + 1
        task = asyncio.ensure_future(self._stream(i, sends, suspect))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _stream(self, i: int, sends: list[tuple[Hashable, int]], suspect: bool) -> None:
        """One ``solve`` call: each result handed on as it arrives; the units it did not
        bring back are lost with the worker (a try each)."""
        error: BaseException | None = None
        watch = _Watch(self, i, asyncio.current_task())  # type: ignore[arg-type]
        try:
            units = [self.held[key].unit for key, _ in sends if key in self.held]
            args = self.again_args if self.lost_before[i] and self.again_args is not None else self.solve_args
            async for ref in self.workers[i].solve.options(num_returns="streaming").remote(*args, self.windows[i], units):
                ready = await ref
                watch.last, self.stats["items"] = watch.loop.time(), self.stats["items"] + 1
                for key, result in ready:
                    if self._resolve(key, result):
                        self.served[(i, self.where[i])] = self.served.get((i, self.where[i]), 0) + 1
        except asyncio.CancelledError:
            if not watch.silent:
                raise
            error = RuntimeError(f"model worker {i} does not answer")
        except Exception as exc:  # noqa: BLE001 - the worker died, or the call failed: its units are sent again
            error = exc
        finally:
            watch.stop()
            if suspect:
                self.suspect_out = False
                self._flush_later()
        lost = [key for key, send in sends if key in self.held and self.held[key].worker == i and self.held[key].send == send]
        if lost:
            await self._lost(i, lost, error or RuntimeError("the model worker's stream ended without these units"))

    async def _lost(self, i: int, keys: list[Hashable], error: BaseException) -> None:
        log.warning("model worker %d lost %d unit(s) in flight (%s); sending them again", i, len(keys), type(error).__name__)
        self.lost_before[i] = True
        again = []
        for key in keys:
            held = self.held[key]
            held.worker, held.tries = -1, held.tries + 1
            self.load[i] -= 1
            if held.tries >= UNIT_MAX_TRIES:
                self._fail(key, f"{type(error).__name__}: {error}")
            else:
                again.append(key)
        await self._check(i)
        self.stats["resent"] += len(again)
        self.suspects.extend(key for key in again if key in self.held)
        self._flush_later()

    async def _check(self, i: int) -> bool:
        """Whether worker ``i`` answers a ping (Ray restarts a dead one first); one ping at a
        time per worker. A worker that does not answer is left out of the run."""
        if not self.live[i]:
            return False
        if i not in self.checking:
            self.checking[i] = asyncio.ensure_future(self._ping(i))
        return await asyncio.shield(self.checking[i])

    async def _ping(self, i: int) -> bool:
        try:
            self.where[i] = await asyncio.wait_for(self.workers[i].ping.remote(), self.ping_timeout_s)
            return True
        except Exception as exc:  # noqa: BLE001 - dead for good (ActorDiedError), or silent past the timeout
            log.warning("model worker %d is left out of this run (%s: %s)", i, type(exc).__name__, str(exc)[:200])
            self.live[i] = False
            self.stats["workers_lost"] += 1
            return False
        finally:
            del self.checking[i]
            self._flush_later()

    # -- results ------------------------------------------------------------------------------
    def _resolve(self, key: Hashable, result: Any) -> bool:
        """Hand ``result`` on; False for a second delivery of a unit (dropped, counted)."""
        held = self.held.pop(key, None)
        if held is None:  # answered already: a second delivery of the same unit
            self.stats["duplicates"] += 1
            return False
        if held.worker >= 0:
            self.load[held.worker] -= 1
            if self.queue and self._open(held.worker):  # only then can a flush send it more
                self._flush_later()
        if held.future.done():
            return False
        if isinstance(result, BaseException):
            held.future.set_exception(result)
        else:
            held.future.set_result(result)
        return True

    def _fail(self, key: Hashable, message: str) -> None:
        held = self.held.get(key)
        if held is not None:
            held.worker = -1
            actor = Actor.ENVIRONMENT if held.unit.rollout else Actor.AGENT
            self._resolve(key, Trajectory(failure=Failure("worker_died", message[:500], actor=actor.value)))


class _Watch:
    """A stream's liveness: once it has brought nothing for ``liveness_s``, its worker is
    pinged, and a worker that does not answer has the stream cancelled (``silent``)."""

    def __init__(self, delivery: Delivery, i: int, task: asyncio.Task[Any]):
        self.delivery, self.i, self.task, self.silent = delivery, i, task, False
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()
        self.probe: asyncio.Future[None] | None = None
        self.handle = self.loop.call_later(delivery.liveness_s, self._fire)

    def _fire(self) -> None:
        idle = self.loop.time() - self.last
        if idle < self.delivery.liveness_s:
            self.handle = self.loop.call_later(self.delivery.liveness_s - idle, self._fire)
        else:
            self.probe = asyncio.ensure_future(self._ping())

    async def _ping(self) -> None:
        if await self.delivery._check(self.i):
            self.last = self.loop.time()
            self.handle = self.loop.call_later(self.delivery.liveness_s, self._fire)
        else:
            self.silent = True
            self.task.cancel()

    def stop(self) -> None:
        self.handle.cancel()
        if self.probe is not None and self.probe is not asyncio.current_task():
            self.probe.cancel()
