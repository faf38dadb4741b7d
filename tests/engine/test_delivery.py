"""The driver's delivery rules (:mod:`evalkit.engine.delivery`) in-process, against a fake actor
handle (the one test double the engine allows: Ray's own delivery, its retries and restarts,
is run in tests/engine/test_crash_resume.py). No Ray is imported; each test takes well under
a second.

The fake's ``solve`` has the call shape of a Ray actor method: ``solve.remote(job, holder,
budget, unit)`` is an awaitable of ``(pickled trajectory, where)``. It plays Ray's part too: a
call in flight on a process that dies raises ``WorkerDied`` (Ray's ``RayActorError``: the
method has ``max_task_retries=0``), and the process is restarted; the driver sends the unit
again (``UNIT_MAX_TRIES`` sends in all). A worker whose restarts are spent is dead for good:
its calls and pings raise ``WorkerDied``.
"""

from __future__ import annotations

import ast
import asyncio
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalkit.engine import delivery, executor
from evalkit.engine.delivery import UNIT_MAX_TRIES, Delivery
from evalkit.engine.executor import pack
from evalkit.engine.scheduling import run_units
from evalkit.engine.work import WorkItem
from evalkit.types import Request, Sample, Trajectory


class WorkerDied(Exception):
    """What Ray raises from a call whose worker was lost (ray.exceptions.RayActorError)."""


class Unreachable(WorkerDied):
    """What Ray raises when a call's worker could not be reached (its node's raylet gone, the
    node not yet declared dead) and the call's retries are spent: ``ActorUnavailableError``."""


class _Method:
    def __init__(self, fn: Any):
        self.fn = fn

    def remote(self, *args: Any) -> Any:
        return asyncio.ensure_future(self.fn(*args))


class FakeWorker:
    """A model worker without Ray. ``latency(key)``: seconds a unit takes; ``kills``: the keys
    whose unit kills the process (every time it runs); ``restarts``: how many deaths it
    survives; ``result(key)``: what the unit returns (default an answer naming its sample)."""

    def __init__(self, latency: Any = lambda key: 0.0, kills: set = frozenset(), restarts: int = 3, result: Any = None):
        self.latency, self.kills, self.restarts, self.result = latency, set(kills), restarts, result
        self.runs: Counter = Counter()  # unit key -> times run
        self.deaths = 0
        self.process = 1000  # its pid: a new one per restart
        self.dead_for_good = False
        self.died: asyncio.Event | None = None
        self.solve, self.ping = _Method(self._solve), _Method(self._ping)
        self.running = self.peak_running = 0
        self.cancelled: list[Any] = []

    async def _ping(self) -> tuple[int, str]:
        if self.dead_for_good:
            raise WorkerDied("the actor is dead for good")
        return self.process, "node"

    def _die(self) -> None:
        self.deaths += 1
        assert self.died is not None
        self.died.set()  # every call in flight on this process is lost
        self.died = None
        if self.deaths > self.restarts:
            self.dead_for_good = True
        else:
            self.process += 1

    async def _solve(self, job: str, holder: list, budget: Any, unit: WorkItem) -> tuple[bytes, tuple[int, str]]:
        for _ in range(1):  # solve has max_task_retries=0: a call lost with the process is not run again by Ray
            if self.dead_for_good:
                raise WorkerDied("the actor is dead for good")
            if self.died is None:
                self.died = asyncio.Event()
            died, process = self.died, self.process
            self.runs[unit.key] += 1
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            try:
                if unit.key in self.kills:
                    await asyncio.sleep(0.001)
                    self._die()
                    continue
                work = asyncio.ensure_future(asyncio.sleep(self.latency(unit.key)))
                lost = asyncio.ensure_future(died.wait())
                try:
                    await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    lost.cancel()
                if not work.done():
                    work.cancel()
                    continue
            except asyncio.CancelledError:
                self.cancelled.append(unit.key)
                raise
            finally:
                self.running -= 1
            value = self.result(unit) if self.result else Trajectory(final_output=f"answer of {unit.sample.id}")
            return pack(value), (process, "node")
        raise WorkerDied("the worker's process was killed")


def _units(n: int) -> list[WorkItem]:
    return [WorkItem(Sample(f"s{i}", "x"), Request(f"s{i}", "x", messages=[{"role": "user", "content": str(i)}])) for i in range(n)]


def _run(workers: list[FakeWorker], units: list[WorkItem], concurrency: int = 8) -> tuple[dict, Counter, Delivery]:
    """Every unit through ``run_units`` over a Delivery of ``workers`` (as
    :class:`~evalkit.engine.executor.RayExecutor` makes it): ``({key: trajectory}, {key:
    times handed on}, delivery)``."""
    got: dict = {}
    handed: Counter = Counter()

    async def on_result(unit: WorkItem, trajectory: Trajectory) -> None:
        got[unit.key] = trajectory
        handed[unit.key] += 1

    async def main() -> Delivery:
        d = Delivery(workers, ("job", [], None), lost=(WorkerDied, Unreachable), ping_timeout_s=0.5)
        await asyncio.wait_for(run_units(d, units, concurrency, on_result), timeout=10)
        return d

    d = asyncio.run(main())
    return got, handed, d


def test_every_unit_is_one_call_answered_once_spread_over_the_workers():
    units = _units(40)
    workers = [FakeWorker(latency=lambda key: 0.002), FakeWorker(latency=lambda key: 0.002)]
    got, handed, d = _run(workers, units, concurrency=8)
    assert set(handed.values()) == {1} and len(got) == 40
    assert all(got[u.key].final_output == f"answer of {u.sample.id}" for u in units)
    assert sum((w.runs for w in workers), Counter()) == Counter(u.key for u in units)  # no resends
    assert [w.peak_running for w in workers] == [4, 4]  # the fewest in flight first: the window split evenly
    assert d.stats == {"resent": 0, "lost": 0, "workers_lost": 0, "workers_restarted": 0, "calls": 40}
    assert d.served == {(1000, "node"): 40}


def test_a_slow_unit_holds_back_no_other():
    """Two workers, two units in flight: while one worker holds the slow unit, every other
    unit goes to the other worker (the one with fewer in flight)."""
    units = _units(10)
    slow = units[0].key
    workers = [FakeWorker(latency=lambda key: 0.3 if key == slow else 0.001) for _ in range(2)]
    got, _, _ = _run(workers, units, concurrency=2)
    assert len(got) == 10
    holder = next(w for w in workers if slow in w.runs)
    assert sum(holder.runs.values()) == 1  # it ran the slow unit alone


def test_a_unit_that_kills_its_worker_every_time_fails_alone():
    """The killer's worker dies ``UNIT_MAX_TRIES`` times (the driver sends it again after
    each restart, Ray does not); the killer is a ``worker_died`` failure and the worker, restarted, answers the
    rest."""
    units = _units(12)
    killer = units[5].key
    worker = FakeWorker(latency=lambda key: 0.001, kills={killer}, restarts=10)
    got, handed, d = _run([worker], units, concurrency=1)
    assert set(handed.values()) == {1} and len(got) == 12
    assert {k for k, t in got.items() if t.failure is not None} == {killer}
    assert got[killer].failure.error_kind == "worker_died" and got[killer].failure.actor == "agent"
    assert worker.runs[killer] == UNIT_MAX_TRIES == worker.deaths
    assert d.live == [True] and d.stats["lost"] == 1 and d.stats["workers_restarted"] == worker.deaths  # each restart seen by its ping


def test_units_in_flight_when_a_worker_dies_run_again_and_are_answered_once():
    """A unit in flight with the killer on its first death is run again (Ray's retry) and
    answered, handed on once."""
    units = _units(6)
    killer = units[0].key
    worker = FakeWorker(latency=lambda key: 0.05 if key != units[1].key else 0.0, kills={killer}, restarts=10)
    original = worker._die

    def die_once() -> None:
        original()
        worker.kills.clear()  # it kills only once

    worker._die = die_once  # type: ignore[method-assign]
    got, handed, _ = _run([worker], units, concurrency=6)
    assert set(handed.values()) == {1} and all(t.failure is None for t in got.values())
    assert worker.runs[killer] == 2 and sum(n > 1 for n in worker.runs.values()) >= 2  # the killer and what it took down


def test_units_of_a_lost_node_are_sent_again_at_full_concurrency():
    """A node lost: its raylet stops answering seconds before the GCS declares the node dead,
    and Ray spends a call's retries on those seconds (``ActorUnavailableError``). Each unit
    in flight there is sent again to the restarted worker, all at once, and answered; none
    is a ``worker_died`` failure (2 of 16 were, on the local cluster, before)."""
    units = _units(6)
    worker = FakeWorker(latency=lambda key: 0.05)
    calls = []
    solve = worker._solve

    async def lost_node(job: str, holder: list, budget: Any, unit: WorkItem) -> Any:
        calls.append(unit.key)
        if len(calls) <= 4:  # the first 4 units sent: in flight when the node went
            await asyncio.sleep(0.02)
            if worker.process == 1000:
                worker.process += 1  # Ray restarts the actor on another node
            raise Unreachable("the actor is temporarily unavailable")
        return await solve(job, holder, budget, unit)

    worker.solve = _Method(lost_node)
    got, handed, d = _run([worker], units, concurrency=6)
    assert set(handed.values()) == {1} and all(t.failure is None for t in got.values())
    assert d.stats["resent"] == 4 and d.stats["lost"] == 0 and d.live == [True]
    assert worker.peak_running >= 4  # the four sent again together, not one at a time


def test_a_worker_dead_for_good_leaves_its_units_to_the_other(caplog):
    units = _units(20)
    killer = units[2].key
    doomed = FakeWorker(latency=lambda key: 0.002, kills={killer}, restarts=0)
    healthy = FakeWorker(latency=lambda key: 0.002)
    got, handed, d = _run([doomed, healthy], units, concurrency=4)
    assert set(handed.values()) == {1} and len(got) == 20
    assert d.live == [False, True] and d.stats["workers_lost"] == 1 and d.stats["resent"] >= 1
    assert "model worker 0 is left out of this run (WorkerDied" in caplog.text
    assert all(t.failure is None for t in got.values())  # the killer too: it kills only the doomed worker


def test_with_every_worker_dead_for_good_the_rest_fail():
    units = _units(10)
    worker = FakeWorker(latency=lambda key: 0.002, kills={units[1].key}, restarts=0)
    got, handed, d = _run([worker], units, concurrency=2)
    assert set(handed.values()) == {1} and len(got) == 10
    kinds = Counter(t.failure.error_kind for t in got.values() if t.failure is not None)
    assert kinds["worker_died"] >= 9 and d.live == [False]


def test_a_silent_worker_is_left_out_when_its_ping_does_not_answer():
    """The hung worker's ping never answers: it gets no unit after its loss, and is left out
    once the ping's timeout (0.5 s) has passed (the other worker's units last longer than that)."""
    units = _units(6)
    hung = FakeWorker(latency=lambda key: 0.01, kills={units[0].key}, restarts=10)

    async def never() -> int:
        await asyncio.sleep(3600)
        return 0

    hung.ping = _Method(never)
    got, handed, d = _run([hung, FakeWorker(latency=lambda key: 0.4)], units, concurrency=4)
    assert set(handed.values()) == {1} and d.live == [False, True] and d.stats["workers_lost"] == 1
    assert all(t.failure is None for t in got.values())  # the killer too, on the other worker
    assert sum(hung.runs.values()) == 2  # the two units in flight there when it died; none after


def test_units_of_a_lost_node_go_to_the_surviving_worker_without_waiting_for_its_restart():
    """Issue 46, item 5: two workers, a window of 8 (4 on each). Worker 1's node is lost with
    its 4 units in flight, and Ray's restart of it takes until the test releases it: only
    once every unit has been answered. The 4 lost units are sent again at once to worker 0,
    which then has the whole window in flight (8), and every unit is answered before the
    restart; worker 1 gets no unit while it is being restarted. Before, each lost unit kept
    its slot until the dead worker's ping answered (the run would hang here)."""
    units = _units(24)
    survivor, lost = FakeWorker(latency=lambda key: 0.05), FakeWorker(latency=lambda key: 0.05)
    events: list[tuple[str, Any]] = []
    restart = asyncio.Event | None
    solve = lost._solve

    async def lost_node(job: str, holder: list, budget: Any, unit: WorkItem) -> Any:
        if lost.process == 1000:  # the node: gone while its first units are in flight
            await asyncio.sleep(0.02)
            if len(lost.runs) < 4:
                lost.runs[unit.key] += 1
                if len(lost.runs) == 4:
                    lost.process = 1001  # Ray will start it again elsewhere
                else:
                    while lost.process == 1000:
                        await asyncio.sleep(0.001)
                events.append(("lost", unit.key))
                raise Unreachable("the actor is temporarily unavailable")
        events.append(("sent to the restarted worker", unit.key))
        return await solve(job, holder, budget, unit)

    async def restarted() -> tuple[int, str]:
        await restart.wait()
        events.append(("restarted", None))
        return lost.process, "node"

    lost.solve, lost.ping = _Method(lost_node), _Method(restarted)
    got: dict = {}

    async def on_result(unit: WorkItem, trajectory: Trajectory) -> None:
        got[unit.key] = trajectory
        events.append(("answered", unit.key))
        if len(got) == len(units):
            restart.set()

    async def main() -> Delivery:
        nonlocal restart
        restart = asyncio.Event()
        d = Delivery([survivor, lost], ("job", [], None), lost=(WorkerDied, Unreachable), ping_timeout_s=60)
        await asyncio.wait_for(run_units(d, units, 8, on_result), timeout=15)
        await asyncio.wait_for(restart.wait(), timeout=30)
        await asyncio.sleep(0.01)  # the ping's answer
        return d

    d = asyncio.run(main())
    lost_keys = [k for what, k in events if what == "lost"]
    assert len(lost_keys) == 4 and len(got) == 24 and all(t.failure is None for t in got.values())
    assert [what for what, _ in events].index("restarted") == len(events) - 1  # every unit answered before the restart
    assert not any(what == "sent to the restarted worker" for what, _ in events)
    assert all(survivor.runs[k] == 1 for k in lost_keys)  # each lost unit answered by the survivor
    assert survivor.peak_running == 8  # the whole window in flight on the survivor while the other restarts
    assert d.stats["resent"] == 4 and d.stats["lost"] == 0 and d.live == [True, True]
    assert d.where[1] == (1001, "node")  # back in the rotation, from its new process


def test_a_result_that_will_not_pickle_fails_its_own_unit_alone():
    """A verdict nested far deeper than pickle goes: that unit is an ``internal`` failure
    naming the cause; the units beside it on the same worker are answered."""
    units = _units(6)
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]

    def result(unit: WorkItem) -> Trajectory:
        return Trajectory(final_output="x", turns=[{"verdict": deep}] if unit.key == units[3].key else [])

    got, handed, d = _run([FakeWorker(latency=lambda key: 0.001, result=result)], units, concurrency=6)
    assert set(handed.values()) == {1}
    bad = got[units[3].key].failure
    assert bad is not None and bad.error_kind == "internal" and "does not pickle (RecursionError" in bad.message
    assert all(got[u.key].failure is None for u in units if u.key != units[3].key)
    assert d.stats["lost"] == 0 and d.live == [True]


def test_a_result_over_the_size_bound_fails_its_own_unit(monkeypatch):
    monkeypatch.setattr(executor, "MAX_RESULT_BYTES", 1000)
    failure = pickle.loads(pack(Trajectory(final_output="y" * 2000))).failure
    assert failure.error_kind == "internal" and "over 1000" in failure.message
    assert pickle.loads(pack(Trajectory(final_output="y"))).final_output == "y"


def test_a_result_that_will_not_load_in_the_driver_fails_its_own_unit():
    from evalkit.engine.delivery import _unpacked

    failure = _unpacked(b"not a pickle").failure
    assert failure.error_kind == "internal" and "did not load" in failure.message


def test_an_exception_solving_raised_is_raised_in_the_driver():
    from evalkit.engine.delivery import _unpacked

    with pytest.raises(ValueError, match="a bug"):
        _unpacked(pack(ValueError("a bug")))


def test_a_cancelled_submit_cancels_its_call():
    """Ctrl-C cancels the driver's task: the call in flight is cancelled too (``cancel``:
    ray.cancel) and the worker's task ends."""
    worker = FakeWorker(latency=lambda key: 3600.0)
    cancelled: list = []

    async def main() -> None:
        d = Delivery([worker], ("job", [], None), lost=(WorkerDied,), cancel=lambda call: (cancelled.append(call), call.cancel()))
        task = asyncio.ensure_future(d.submit(_units(1)[0]))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.01)
        assert d.load == [0]

    asyncio.run(main())
    assert len(cancelled) == 1 and worker.cancelled == [_units(1)[0].key]


def test_the_driver_side_is_small_and_imports_no_ray():
    """The delivery module runs without Ray (this file's fake proves its rules), and
    executor.py and delivery.py stay small enough to read in one sitting (issue 34: at most
    400 lines of code together)."""
    probe = "import sys, evalkit.engine.delivery; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"
    total = 0
    for module in (delivery, executor):
        source = Path(module.__file__).read_text(encoding="utf-8")
        docstrings = set()
        for node in ast.walk(ast.parse(source)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
        total += sum(1 for n, ln in enumerate(source.splitlines(), 1) if ln.strip() and not ln.strip().startswith("#") and n not in docstrings)
    assert total <= 400, total


@pytest.mark.parametrize("n", [1, 64])
def test_nothing_is_resent_when_nothing_is_lost(n):
    got, handed, d = _run([FakeWorker(), FakeWorker(), FakeWorker()], _units(n), concurrency=64)
    assert len(got) == n and set(handed.values()) == {1}
    assert d.stats["resent"] == d.stats["lost"] == 0 and d.stats["calls"] == n


def test_a_worker_still_starting_joins_the_rotation_when_its_start_answers():
    """Issue 46, item 6: the run starts with the first worker up; the second, still starting
    (its start released by the test once 8 units are answered), gets no unit before, and
    its share of the window after; a third whose start fails is left out."""
    units = _units(32)
    first, second, broken = FakeWorker(latency=lambda key: 0.01), FakeWorker(latency=lambda key: 0.01), FakeWorker()
    got: dict = {}
    second_runs_at_start: list[int] = []

    async def main() -> Delivery:
        started = asyncio.Event()

        async def start() -> tuple[int, str]:
            await started.wait()
            second_runs_at_start.append(sum(second.runs.values()))
            return 2000, "node"

        async def failed_start() -> tuple[int, str]:
            raise WorkerDied("the actor's constructor raised")

        async def on_result(unit: WorkItem, trajectory: Trajectory) -> None:
            got[unit.key] = trajectory
            if len(got) == 8:
                started.set()

        d = Delivery([first], ("job", [], None), lost=(WorkerDied,), ping_timeout_s=60)
        d.seen(0, (1000, "node"))
        d.add(second, start())
        d.add(broken, failed_start())
        await asyncio.wait_for(run_units(d, units, 4, on_result), timeout=15)
        return d

    d = asyncio.run(main())
    assert len(got) == 32 and all(t.failure is None for t in got.values())
    assert second_runs_at_start == [0] and sum(first.runs.values()) >= 8  # nothing sent to it before its start answered
    assert sum(second.runs.values()) > 0 and sum(broken.runs.values()) == 0  # the second took its share once up
    assert d.live == [True, True, False] and d.first_where == [(1000, "node"), (2000, "node"), None]
    assert d.stats["workers_lost"] == 1 and d.stats["resent"] == 0
