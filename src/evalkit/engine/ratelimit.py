"""How many requests may be in flight: the AIMD window, and one window per endpoint shared by
every process that calls the endpoint.

* :class:`AdaptiveWindow` — additive increase, multiplicative decrease (TCP's congestion
  rule, RFC 5681) on the provider's HTTP 429 answers, over units: the driver keeps one over
  a run's units (:func:`evalkit.engine.scheduling.run_units`).
* :class:`EndpointLimits` — a named, detached Ray actor (``evalkit-endpoint-limits`` in the
  Ray namespace ``evalkit``, got or made with ``get_if_exists``) holding one window per
  endpoint, keyed by :func:`endpoint_key` (``api_base`` + provider model: the agent and the
  user simulator are different endpoints with limits of their own). Every model worker of
  every run on the cluster asks it for a slot before each HTTP attempt to that endpoint
  and gives the slot back after (:class:`EndpointGate`), so the requests in flight to an
  endpoint, summed over runs, processes and nodes, stay at or below its limit at every
  instant, and a wave of 429s halves the total once.

Rules of the shared window:

* its limit is the smallest ``backend.concurrency`` any caller asked for that endpoint
  (``user.backend.concurrency`` for the user simulator); a window with nothing in flight
  and unused for ``IDLE_RESET_S`` is dropped, so a later run starts afresh;
* a slot is a *lease*, held by a model worker for one HTTP attempt and given back after it
  (its answer, error or cancellation); it is keyed by the Ray job id of the worker's driver,
  its actor id and its process. Leases whose process died are given back without evalkit's
  own liveness pings: a driver SIGKILLed takes its job and its workers with it, and the
  GCS reports the job dead, so its leases are given back within ``REAP_EVERY_S``
  (:meth:`EndpointLimits.reap`; a resume has the whole window at once); a worker that Ray
  restarted (its node lost) registers its new process with its first unit of the run, and
  its old process's leases are given back then (:meth:`EndpointLimits.register`);
* it is used by ``runner=cluster`` runs, where other runs may call the same endpoint; a
  ``runner=local`` run is its endpoints' only caller and keeps the driver's window alone
  (no actor on the hot path: each lease is two actor calls, about 2.7 ms of CPU against
  0.03 ms in process, perf/rate_limit_cost.py and docs/performance.md).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from evalkit.models.base import strip_credentials
from evalkit.types import Trajectory

#: the shared windows' actor: its name and Ray namespace
ACTOR_NAME = "evalkit-endpoint-limits"
NAMESPACE = "evalkit"
#: how often the GCS is asked which jobs are dead, while leases are out (seconds)
REAP_EVERY_S = 1.0
#: a window with nothing in flight and no request for this long is dropped: the next caller
#: starts a fresh one with its own limit (seconds)
IDLE_RESET_S = 30.0


class AdaptiveWindow:
    """How many units (or requests) may be in flight: additive increase, multiplicative
    decrease (AIMD, the congestion rule of TCP, RFC 5681) on the provider's HTTP 429 answers.

    Starts at ``limit`` (``backend.concurrency``), never exceeds it, never drops below 1.
    A unit that met a 429 (``throttled > 0``) halves the window — once per congestion
    event: only units dispatched after the last decrease can decrease it again, so one
    burst of 429s answering the same wave of requests counts once. Each ``window``
    consecutive unthrottled results add one. Deterministic: no clocks.
    """

    def __init__(self, limit: int, adaptive: bool = True):
        self.limit = limit
        self.adaptive = adaptive
        self.window = limit
        self.min_window = limit
        self.in_flight = 0
        self.peak_in_flight = 0
        self.decreases = 0
        self._dispatched = 0
        self._last_decrease_at = -1
        self._good = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> int:
        """Wait for a slot; returns the dispatch sequence number of the unit."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.in_flight < self.window)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            self._dispatched += 1
            return self._dispatched

    async def release(self, seq: int, throttled: int) -> None:
        async with self._cond:
            self.in_flight -= 1
            if self.adaptive and throttled and seq > self._last_decrease_at:
                self.window = max(1, self.window // 2)
                self.min_window = min(self.min_window, self.window)
                self.decreases += 1
                self._last_decrease_at = self._dispatched
                self._good = 0
            elif not throttled and self.window < self.limit:
                self._good += 1
                if self._good >= self.window:
                    self.window += 1
                    self._good = 0
            self._cond.notify(self.window - self.in_flight)  # as many waiters as slots are free, not all

    def lower(self, limit: int) -> None:
        """Lower the limit to ``limit`` (a caller asking for less); a higher one is ignored."""
        if limit < self.limit:
            self.limit = limit
            self.window = min(self.window, limit)
            self.min_window = min(self.min_window, self.window)

    def stats(self) -> dict[str, int]:
        return {
            "concurrency": self.limit,
            "peak_in_flight": self.peak_in_flight,
            "min_window": self.min_window,
            "window_decreases": self.decreases,
        }


def throttled_count(trajectory: Trajectory) -> int:
    """HTTP 429 answers met while solving a unit (every model call of a rollout): what an
    :class:`AdaptiveWindow` is released with."""
    own = trajectory.failure.throttled if trajectory.failure is not None else 0
    return own + sum(int(t.get("throttled", 0)) for t in trajectory.turns)


def endpoint_key(provider_model: str, api_base: str | None) -> str:
    """``<api_base>|<provider model>`` (``default`` for a provider's own endpoint), never a
    credential: what one shared window is kept for. The URL's scheme and host are lower-cased
    and its path's trailing slashes dropped (RFC 3986: case-insensitive; one server however
    spelt), so that two spellings of one endpoint share one window."""
    base = strip_credentials(api_base)
    if not base:
        return f"default|{provider_model}"
    parts = urlsplit(base)
    base = urlunsplit(parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower(), path=parts.path.rstrip("/")))
    return f"{base}|{provider_model}"


class EndpointLimits:
    """The shared windows (made a Ray actor by :func:`shared_limits`): ``{endpoint key:
    AdaptiveWindow}`` and the leases given out, ``{lease id: (key, seq, job, actor, process)}``:
    the Ray job id of the driver whose model worker holds the lease, that worker's actor id,
    and the id of its process (Ray's worker id). ``dead_jobs``: the ids of the jobs the GCS
    reports dead (:func:`dead_jobs`; a test passes its own)."""

    def __init__(self, dead_jobs: Any = None) -> None:
        self.windows: dict[str, AdaptiveWindow] = {}
        self.leases: dict[int, tuple[str, int, str, str, str]] = {}
        self.process: dict[str, str] = {}  # actor id: the process that registered last (Ray restarted the others)
        self.requests: dict[str, int] = {}
        self.used: dict[str, float] = {}  # key: time.monotonic() of its last acquire
        self.reclaimed = 0
        self.dead_jobs = dead_jobs or _dead_jobs
        self._next = 0
        self._reaper: asyncio.Future[None] | None = None

    async def acquire(self, key: str, limit: int, adaptive: bool, holder: tuple[str, str, str]) -> int:
        """Wait for a slot of endpoint ``key`` (its window made with ``limit`` and
        ``adaptive`` when new, lowered to ``limit`` when that is less) for ``holder`` (``(job
        id, actor id, process id)``); returns the lease id. A lease granted to a process its
        actor's restart replaced (its call waited here while it died) is given back at once."""
        if self._reaper is None:
            self._reaper = asyncio.ensure_future(self._reap())
        window = self.windows.get(key)
        if window is None:
            window = self.windows[key] = AdaptiveWindow(limit, adaptive)
        window.lower(limit)
        self.used[key] = time.monotonic()
        seq = await window.acquire()
        self._next += 1
        self.leases[self._next] = (key, seq, *holder)
        self.requests[key] = self.requests.get(key, 0) + 1
        if self.process.get(holder[1], holder[2]) != holder[2]:
            self.reclaimed += 1
            await self.release(self._next, False)
        return self._next

    async def release(self, lease: int, throttled: bool) -> None:
        """Give lease ``lease`` back; ``throttled``: its attempt was answered HTTP 429. A lease
        reclaimed already is ignored."""
        held = self.leases.pop(lease, None)
        if held is not None:
            await self.windows[held[0]].release(held[1], int(throttled))

    async def register(self, actor: str, process: str) -> int:
        """``process`` is now model worker ``actor``'s process (Ray restarted it): give back
        every lease an earlier process of that actor held; returns how many."""
        self.process[actor] = process
        mine = [lease for lease, held in self.leases.items() if held[3] == actor and held[4] != process]
        for lease in mine:
            await self.release(lease, False)
        self.reclaimed += len(mine)
        return len(mine)

    def stats(self, key: str) -> dict[str, int] | None:
        """The window of ``key``: ``concurrency`` (its limit), ``peak_in_flight``,
        ``min_window``, ``window_decreases``, ``in_flight`` and ``requests`` (leases given),
        over every caller since the actor started; ``None`` for an endpoint never asked."""
        window = self.windows.get(key)
        if window is None:
            return None
        return {**window.stats(), "in_flight": window.in_flight, "requests": self.requests.get(key, 0)}

    async def reap(self) -> int:
        """Give back the leases of the jobs the GCS reports dead (a SIGKILLed driver's: its
        model workers died with it); returns how many."""
        holders = {held[2] for held in self.leases.values()}
        if not holders:
            return 0
        dead = holders & set(self.dead_jobs())  # one GCS read (milliseconds), while leases are out
        lost = [lease for lease, held in self.leases.items() if held[2] in dead]
        for lease in lost:
            await self.release(lease, False)
        self.reclaimed += len(lost)
        return len(lost)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                await self.reap()
            except Exception:  # noqa: BLE001 - the GCS busy or restarting: asked again next time
                pass
            now = time.monotonic()
            for key in [k for k, w in self.windows.items() if w.in_flight == 0 and self.used.get(k, now) < now - IDLE_RESET_S]:
                del self.windows[key]
                self.requests.pop(key, None)


def _dead_jobs() -> list[str]:
    """The hex ids of the Ray jobs the GCS's job table marks dead. Read from the GCS itself
    (Ray's ``GlobalState.job_table``), not ``ray.util.state.list_jobs``: the state API is
    served by the dashboard, which evalkit's Ray instances run without
    (:mod:`evalkit.engine.ray_session`)."""
    from ray._private import state

    return [entry["JobID"] for entry in state.state.job_table() if entry["IsDead"]]


def shared_limits() -> Any:
    """The handle of the cluster's :class:`EndpointLimits` actor, made when no run made it yet
    (detached: it outlives the run that made it, so that runs that overlap share it; it holds
    no CPU) and pinned to the node of the process that makes it: the driver's, as
    :class:`~evalkit.engine.executor.RayExecutor` asks for it before any of its model workers.

    Pinned, not preferred (Ray's ``NodeAffinitySchedulingStrategy(node, soft=False)``): the
    windows never move. A crash of the actor's process restarts it on its node
    (``max_restarts``). When the node itself is lost, the actor is lost with it and Ray does
    not make it again elsewhere: a window made afresh on another node, knowing none of the
    leases still out, would let more than the limit through at once until they ended (it did
    so with a soft preference). The driver that made it ran on that node and is lost too; its
    model workers (owned by it) end with it, and ``run.resume=<run dir>`` makes the actor
    again on the resuming driver's node, its windows then empty with no lease of the lost run
    out. Another run still going that shared it (its driver elsewhere) finds the actor gone:
    its attempts fail (Ray's ``ActorDiedError``, not retried), are journaled in
    ``failed.jsonl`` (kind ``internal``), and its resume makes a new actor the same way.
    (:func:`evalkit.engine.budget.keeper` pins the budget's actor the same way.)
    """
    import ray  # deferred: offline runs never import Ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor = ray.remote(EndpointLimits).options(
        name=ACTOR_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=100_000,  # every waiting acquire is a call in progress
        max_restarts=-1,
        max_task_retries=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
    )
    return actor.remote()


class EndpointGate:
    """A model worker's slot on one endpoint's shared window: ``await acquire()`` before an
    HTTP attempt, ``release(lease, throttled)`` after it (not awaited). ``limit``,
    ``adaptive``: the run's ``backend.concurrency`` / ``adaptive_concurrency`` of that
    endpoint; ``holder``: ``(Ray job id, actor id, process id)`` of the worker."""

    def __init__(self, handle: Any, key: str, limit: int, adaptive: bool, holder: tuple[str, str, str]):
        self.handle, self.key, self.limit, self.adaptive, self.holder = handle, key, limit, adaptive, holder

    async def acquire(self) -> Any:
        ref = self.handle.acquire.remote(self.key, self.limit, self.adaptive, self.holder)
        try:
            return await ref
        except asyncio.CancelledError:
            self.handle.release.remote(ref, False)  # Ray passes the lease once granted: given back then
            raise

    def release(self, lease: Any, throttled: bool) -> None:
        self.handle.release.remote(lease, throttled)
