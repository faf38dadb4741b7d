"""The driver's side of the model workers: each unit is one call of a worker's ``solve``
method, awaited by the driver; Ray's own mechanisms handle a lost worker.

Rules (each tested in-process against a fake actor handle, tests/engine/test_delivery.py):

* a unit goes to the live worker with the fewest units in flight (a slow request holds
  back no other unit); the driver's window (:mod:`evalkit.engine.scheduling`) bounds how
  many are in flight in all;
* a worker that dies is restarted by Ray (the actor's ``max_restarts``); a call lost with
  it (``lost`` errors: Ray's ``RayActorError`` and its ``ActorDiedError``, or
  ``ActorUnavailableError``) is not retried by Ray (``max_task_retries=0`` on ``solve``).
  The driver sends each lost unit again at once, to the live worker with the fewest units
  in flight, and takes the lost worker out of the rotation until it answers a ping (a Ray
  call queued until Ray has restarted the actor; one that raises ``ActorDiedError``, the
  restarts spent, or stays silent for ``ping_timeout_s`` leaves the worker out of the
  run). So the units of a lost node go again to the surviving workers at the run's full
  concurrency while Ray restarts the node's worker (issue 46: they used to keep their
  slots until the ping answered); a unit waits for a restart only when no worker is in the
  rotation. A unit is sent ``UNIT_MAX_TRIES`` times at most, whatever lost it: then it is
  a ``worker_died`` failure. Why not Ray's task retries: a node's raylet stops answering
  some seconds before the GCS declares the node dead, and Ray spent a call's retries on
  those seconds (2 of 16 units became ``worker_died`` on the local cluster), and retried
  the call on the same (restarting) actor, while a unit that kills its worker would be sent
  up to ``UNIT_MAX_TRIES`` × retries times. A unit is idempotent through its request hash
  and the response cache. With no worker left, every unit is a ``worker_died`` failure;
* a worker still starting (:meth:`Delivery.join`, :meth:`Delivery.add`) joins the rotation
  when its start answers: the run's first unit waits for the first worker only;
* a call's result is that unit's alone: the worker returns it pickled
  (:func:`~evalkit.engine.executor.pack`), so a result that will not pickle, or will not
  load here, fails its own unit and no other;
* a cancelled ``submit`` (Ctrl-C, the run's end) cancels its call (``cancel``: Ray's
  ``ray.cancel``, which cancels the async actor's task; a cancelled task is never retried).
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from typing import Any, Callable

from evalkit.engine.work import WorkItem
from evalkit.errors import within
from evalkit.types import Actor, Failure, Trajectory

log = logging.getLogger("evalkit")

#: a unit lost with its worker this many times is a ``worker_died`` failure
UNIT_MAX_TRIES = 3
#: a worker that does not answer a ping within this after a loss (its restart included) is left out (seconds)
PING_TIMEOUT_S = 120.0


class Delivery:
    """Units to ``workers`` (Ray actor handles, or fakes with the same calls:
    ``solve.remote(*args, unit)`` an awaitable of ``(pickled trajectory or exception,
    where)``, ``where`` the worker's ``(process id, node id)``; ``ping.remote()`` an
    awaitable of ``where``). ``lost``: the exception types that mean the worker was lost
    with the call (Ray's ``RayActorError`` and ``ActorUnavailableError``); ``cancel(call)``
    cancels a call in flight."""

    def __init__(self, workers: list[Any], args: tuple[Any, ...], lost: tuple[type[BaseException], ...] = (),
                 cancel: Callable[[Any], None] | None = None, ping_timeout_s: float = PING_TIMEOUT_S):  # fmt: skip
        self.workers, self.args, self.lost, self.cancel = list(workers), args, lost, cancel
        self.ping_timeout_s = ping_timeout_s
        self.load, self.live = [0] * len(workers), [True] * len(workers)
        self.checking: dict[int, asyncio.Future[bool]] = {}
        #: ``{worker: awaitable of its where}``: workers still starting, in the rotation once it answers
        self.joining: dict[int, Any] = {}
        #: ``resent``: units sent again after their worker was left out or not reached; ``lost``: units
        #: that became ``worker_died`` failures; ``workers_lost``: workers left out;
        #: ``workers_restarted``: workers seen answering from a new process
        self.stats = {"resent": 0, "lost": 0, "workers_lost": 0, "workers_restarted": 0, "calls": 0}
        #: where each worker last answered from, and ``{where: units delivered there}``
        self.where: list[Any] = [None] * len(workers)
        #: where each worker first answered from (its process at the start; ``None``: not yet)
        self.first_where: list[Any] = [None] * len(workers)
        self.served: dict[Any, int] = {}

    def add(self, worker: Any, ready: Any) -> None:
        """A worker that joins the rotation once ``ready`` (an awaitable of its ``where``,
        awaited in the run's event loop, with no timeout: a worker's start-up) answers."""
        for column, value in ((self.load, 0), (self.live, True), (self.where, None), (self.first_where, None)):
            column.append(value)
        self.workers.append(worker)
        self.joining[len(self.workers) - 1] = ready

    def join(self, i: int, ready: Any) -> None:
        """Worker ``i`` is still starting: it joins the rotation once ``ready`` answers."""
        self.joining[i] = ready

    async def submit(self, unit: WorkItem) -> Trajectory:
        """``unit``'s trajectory; raises what solving it raised (a bug in the worker)."""
        for send in range(UNIT_MAX_TRIES):
            i = await self._pick()
            if i is None:
                return self._died(unit, "every model worker of this run died")
            self.load[i] += 1
            self.stats["calls"] += 1
            call = self.workers[i].solve.remote(*self.args, unit)
            try:
                payload, where = await call
            except asyncio.CancelledError:
                if self.cancel is not None:
                    self.cancel(call)
                raise
            except self.lost as exc:
                log.warning("model worker %d lost unit %r (%s)", i, unit.key, type(exc).__name__)
                self._check(i)  # out of the rotation until Ray has restarted it; the unit goes again now
                if send == UNIT_MAX_TRIES - 1:
                    return self._died(unit, f"{type(exc).__name__}: {exc}")
                self.stats["resent"] += 1
                continue
            finally:
                self.load[i] -= 1
            self.seen(i, where)
            self.served[where] = self.served.get(where, 0) + 1
            return _unpacked(payload)
        raise AssertionError("unreachable")  # pragma: no cover

    def in_rotation(self) -> list[int]:
        """The workers a unit may go to now: live, and not being restarted (no ping pending)."""
        return [i for i, up in enumerate(self.live) if up and i not in self.checking]

    async def _pick(self) -> int | None:
        """The worker in the rotation with the fewest units in flight; with none in the
        rotation, the first one back from its restart or start; ``None`` when every worker is left out."""
        for i, ready in list(self.joining.items()):  # the workers still starting: awaited in this loop
            del self.joining[i]
            if i not in self.checking:
                self.checking[i] = asyncio.ensure_future(self._ping(i, ready))
        while True:
            ready = self.in_rotation()
            if ready:
                return min(ready, key=self.load.__getitem__)
            if not self.checking:
                return None
            await asyncio.wait([asyncio.shield(f) for f in self.checking.values()], return_when=asyncio.FIRST_COMPLETED)

    def seen(self, i: int, where: Any) -> None:
        """Worker ``i`` answered from ``where`` (a new process: Ray restarted it)."""
        if self.where[i] is not None and self.where[i] != where:
            self.stats["workers_restarted"] += 1
        self.where[i] = where
        if self.first_where[i] is None:
            self.first_where[i] = where

    def _died(self, unit: WorkItem, message: str) -> Trajectory:
        self.stats["lost"] += 1
        actor = Actor.ENVIRONMENT if unit.rollout else Actor.AGENT
        return Trajectory(failure=Failure("worker_died", message[:500], actor=actor.value))

    def _check(self, i: int) -> None:
        """Take worker ``i`` out of the rotation and ping it in the background (one ping at
        a time per worker): it is back once it answers (Ray restarted it), left out of the
        run when the ping fails or stays silent."""
        if self.live[i] and i not in self.checking:
            self.checking[i] = asyncio.ensure_future(self._ping(i))

    async def _ping(self, i: int, ready: Any = None) -> bool:
        """Whether worker ``i`` answered (``ready``, its start's answer, else a ping within ``ping_timeout_s``)."""
        try:
            self.seen(i, await (ready if ready is not None else within(self.workers[i].ping.remote(), self.ping_timeout_s)))
            return True
        except Exception as exc:  # noqa: BLE001 - dead for good (ActorDiedError), or silent past the timeout
            log.warning("model worker %d is left out of this run (%s: %s)", i, type(exc).__name__, str(exc)[:200])
            self.live[i] = False
            self.stats["workers_lost"] += 1
            return False
        finally:
            del self.checking[i]


def _unpacked(payload: Any) -> Trajectory:
    """The trajectory a worker sent (a pickled one, or an exception solving raised, raised
    here); one that will not load is its unit's ``internal`` failure."""
    try:
        result = pickle.loads(payload) if isinstance(payload, bytes) else payload
    except Exception as exc:  # noqa: BLE001 - whatever unpickling raises: this unit's failure alone
        return Trajectory(failure=Failure("internal", f"the model worker's result did not load ({type(exc).__name__}: {exc})"[:500]))
    if isinstance(result, BaseException):
        raise result
    return result
