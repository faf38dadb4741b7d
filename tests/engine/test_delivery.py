"""The driver's delivery rules (:mod:`evalkit.engine.delivery`) in-process, against a fake actor
handle (the one test double the engine allows: Ray's own delivery is run in
tests/engine/test_crash_resume.py). No Ray is imported; each test takes well under a second.

The fake's ``solve`` has the call shape of a Ray actor method with ``num_returns="streaming"``:
``solve.options(num_returns="streaming").remote(job, holder, (share, adaptive), units)`` is an
async iterable of awaitables of ``[(unit key, trajectory), ...]``; like a model worker, it solves
at most ``share`` units at once over all its calls (the rest wait in it);
``ping.remote()`` is an awaitable. A worker "dies" by
raising from its stream (every stream it runs at that moment fails, as when its process is
killed); it "restarts" unless its restarts are spent, after which a ping fails.
"""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalkit.engine import delivery
from evalkit.engine.work import WorkItem
from evalkit.engine.delivery import UNIT_MAX_TRIES, Delivery
from evalkit.engine.scheduling import run_units
from evalkit.types import Request, Sample, Trajectory


class WorkerDied(Exception):
    """What Ray raises into a stream whose worker died (ray.exceptions.ActorDiedError)."""


class _Method:
    def __init__(self, fn: Any):
        self.fn = fn

    def options(self, **opts: Any) -> "_Method":
        assert opts == {"num_returns": "streaming"}
        return self

    def remote(self, *args: Any) -> Any:
        return self.fn(*args)


def _done(value: Any) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


class FakeWorker:
    """A model worker without Ray. ``latency(key)``: seconds a unit takes; ``kills``: the keys
    whose unit kills the process (every time it starts); ``restarts``: how many deaths it
    survives; ``twice``: the keys whose result it delivers twice."""

    def __init__(self, latency: Any = lambda key: 0.0, kills: set = frozenset(), restarts: int = 3, twice: set = frozenset()):
        self.latency, self.kills, self.restarts, self.twice = latency, set(kills), restarts, set(twice)
        self.batches: list[list[Any]] = []
        self.holders: list[list] = []
        self.deaths = 0
        self.epoch = 0  # one per process: a death fails every stream of the process it hit
        self.dead_for_good = False
        self.solve, self.ping = _Method(self._solve), _Method(self._ping)
        self.slots: asyncio.Semaphore | None = None
        self.running = self.peak_running = 0

    async def _ping(self) -> int:
        if self.dead_for_good:
            raise WorkerDied("the actor is dead for good")
        return 1234

    def _die(self) -> None:
        self.deaths += 1
        self.epoch += 1
        if self.deaths > self.restarts:
            self.dead_for_good = True

    async def _solve(self, job: str, holder: list, window: tuple[int, bool], units: list[WorkItem]):
        self.share = window[0]
        if self.slots is None:
            self.slots = asyncio.Semaphore(window[0])
        if self.dead_for_good:
            raise WorkerDied("the actor is dead for good")
        epoch = self.epoch
        self.batches.append([u.key for u in units])
        self.holders.append(holder)
        if any(u.key in self.kills for u in units):
            await asyncio.sleep(0.001)
            self._die()
            raise WorkerDied("the worker's process was killed")
        pending = {asyncio.ensure_future(self._one(u)) for u in units}
        while pending:
            done, pending = await asyncio.wait(pending, timeout=0.001, return_when=asyncio.FIRST_COMPLETED)
            if self.epoch != epoch:
                raise WorkerDied("the worker's process was killed")
            ready = [task.result() for task in done]
            if ready:
                yield _done(ready)
            again = [(key, result) for key, result in ready if key in self.twice]
            if again:
                yield _done(again)

    async def _one(self, unit: WorkItem) -> tuple[Any, Trajectory]:
        async with self.slots:  # type: ignore[union-attr]
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            try:
                await asyncio.sleep(self.latency(unit.key))
            finally:
                self.running -= 1
        return unit.key, Trajectory(final_output=f"answer of {unit.sample.id}")


def _units(n: int) -> list[WorkItem]:
    return [WorkItem(Sample(f"s{i}", "x"), Request(f"s{i}", "x", messages=[{"role": "user", "content": str(i)}])) for i in range(n)]


def _run(workers: list[FakeWorker], units: list[WorkItem], concurrency: int = 8, **kw: Any) -> tuple[dict, Counter, Delivery]:
    """Every unit through ``run_units`` over a Delivery whose workers share ``concurrency``
    (as :class:`~evalkit.engine.executor.RayExecutor` splits it, and with its ``ahead``):
    ``({key: trajectory}, {key: times handed on}, delivery)``."""
    got: dict = {}
    handed: Counter = Counter()

    async def on_result(unit: WorkItem, trajectory: Trajectory) -> None:
        got[unit.key] = trajectory
        handed[unit.key] += 1

    async def main() -> Delivery:
        n = len(workers)
        d = Delivery(workers, ("job", []), [concurrency // n + (i < concurrency % n) for i in range(n)], **kw)

        class Executor:
            submit = staticmethod(d.submit)
            keeps_window, ahead = True, d.ahead

        await asyncio.wait_for(run_units(Executor(), units, concurrency, on_result), timeout=10)
        d.close()
        return d

    d = asyncio.run(main())
    return got, handed, d


def test_every_unit_is_answered_once_in_batches_to_the_least_loaded_worker():
    units = _units(40)
    workers = [FakeWorker(), FakeWorker()]
    got, handed, d = _run(workers, units, concurrency=8)
    assert set(handed.values()) == {1} and len(got) == 40
    assert all(got[u.key].final_output == f"answer of {u.sample.id}" for u in units)
    sent = [k for w in workers for b in w.batches for k in b]
    assert Counter(sent) == Counter(u.key for u in units)  # no resends
    assert len(workers[0].batches[0]) == len(workers[1].batches[0]) == 4  # the first window, split evenly
    assert max(len(b) for w in workers for b in w.batches) <= 4  # a share of 4 holds no units ahead
    assert [w.peak_running for w in workers] == [4, 4]  # never more than its share at once
    assert {k: d.stats[k] for k in ("resent", "duplicates", "workers_lost")} == {"resent": 0, "duplicates": 0, "workers_lost": 0}
    assert d.stats["calls"] == sum(len(w.batches) for w in workers)


def test_when_results_trickle_in_a_call_still_carries_about_a_share_of_units():
    """Results one by one (random latencies), a share of 8: the worker holds up to 24 units
    (16 waiting ahead of its slots) and is refilled once it has room for 8, so a call
    carries about 8 units (a unit whose freed slot the driver has not refilled yet at the
    flush waits for the next call), never one unit per freed slot."""
    import random

    rng = random.Random(7)
    delays = {f"s{i}": rng.lognormvariate(-5.5, 1.0) for i in range(200)}
    worker = FakeWorker(latency=lambda key: delays[key[0] if isinstance(key, tuple) else key])
    got, handed, _ = _run([worker], _units(200), concurrency=8)
    assert len(got) == 200 and set(handed.values()) == {1}
    sizes = [len(b) for b in worker.batches]
    assert sizes[0] == 24 and sorted(sizes)[len(sizes) // 2] >= 8, str(sizes)
    assert len(sizes) <= 200 // 6 and worker.peak_running == 8, str(sizes)  # a call per freed slot: 177


def test_a_batch_never_exceeds_max_batch():
    workers = [FakeWorker()]
    got, _, _ = _run(workers, _units(20), concurrency=20, max_batch=6)
    assert len(got) == 20 and [len(b) for b in workers[0].batches[:4]] == [6, 6, 6, 2]
    got, _, _ = _run(workers := [FakeWorker()], _units(50), concurrency=20, max_batch=6)
    assert len(got) == 50 and [len(b) for b in workers[0].batches[:9]] == [6] * 8 + [2]  # a room of 60


def test_a_result_delivered_twice_is_handed_on_once():
    units = _units(10)
    twice = {units[3].key, units[7].key}
    got, handed, d = _run([FakeWorker(twice=twice)], units)
    assert set(handed.values()) == {1} and len(got) == 10
    assert d.stats["duplicates"] == 2


def test_a_worker_dying_mid_batch_has_its_unfinished_units_sent_again():
    """The killer unit's worker dies after the others in its batch started; each of them is
    sent again (alone, as a suspect) and answered; only the killer, lost UNIT_MAX_TRIES
    times, is a ``worker_died`` failure."""
    units = _units(12)
    killer = units[5].key
    worker = FakeWorker(latency=lambda key: 0.005, kills={killer}, restarts=10)
    got, handed, d = _run([worker], units, concurrency=12)
    assert set(handed.values()) == {1} and len(got) == 12
    failed = {k for k, t in got.items() if t.failure is not None}
    assert failed == {killer}
    assert got[killer].failure.error_kind == "worker_died" and got[killer].failure.actor == "agent"
    sends = Counter(k for b in worker.batches for k in b)
    assert sends[killer] == UNIT_MAX_TRIES
    assert worker.deaths == UNIT_MAX_TRIES
    later = [b for b in worker.batches[1:] if killer in b]
    assert len(later) == UNIT_MAX_TRIES - 1 and all(b == [killer] for b in later)  # after its first loss, alone


def test_a_worker_lost_once_is_told_the_run_again_on_every_later_call():
    """The run's object reference travels only to a worker that was lost before (a new
    process must register the run; on every other call it would cost the trip)."""
    units = _units(8)
    worker = FakeWorker(latency=lambda key: 0.002, kills={units[0].key}, restarts=10)
    got, _, _ = _run([worker], units, concurrency=8, again_args=("job", ["the run"]))
    assert len(got) == 8
    assert worker.holders[0] == [] and all(h == ["the run"] for h in worker.holders[1:]) and len(worker.holders) > 1


def test_an_innocent_unit_sharing_the_worker_with_a_killer_never_ends_worker_died():
    """Many units share one worker with a unit that kills it every time; across the killer's
    three deaths, every other unit is answered (the same holds on two workers)."""
    for n_workers in (1, 2):
        units = _units(30)
        killer = units[0].key
        workers = [FakeWorker(latency=lambda key: 0.003, kills={killer}, restarts=10) for _ in range(n_workers)]
        got, handed, _ = _run(workers, units, concurrency=16)
        assert set(handed.values()) == {1} and len(got) == 30
        assert {k for k, t in got.items() if t.failure is not None} == {killer}, n_workers


def test_a_worker_dead_for_good_leaves_its_units_to_the_other(caplog):
    units = _units(20)
    killer = units[2].key
    doomed = FakeWorker(latency=lambda key: 0.002, kills={killer}, restarts=0)
    healthy = FakeWorker(latency=lambda key: 0.002)
    got, handed, d = _run([doomed, healthy], units, concurrency=4)
    assert set(handed.values()) == {1} and len(got) == 20
    assert d.live == [False, True] and d.stats["workers_lost"] == 1
    assert "model worker 0 is left out of this run (WorkerDied" in caplog.text
    # the killer went on to kill the healthy worker too (it kills every worker): it alone failed
    assert {k for k, t in got.items() if t.failure is not None} <= {killer}


def test_with_every_worker_dead_for_good_the_rest_fail_at_once():
    units = _units(10)
    worker = FakeWorker(latency=lambda key: 0.002, kills={units[1].key}, restarts=0)
    got, handed, d = _run([worker], units, concurrency=2)
    assert set(handed.values()) == {1} and len(got) == 10
    kinds = Counter(t.failure.error_kind for t in got.values() if t.failure is not None)
    assert kinds["worker_died"] >= 9
    assert d.live == [False]


def test_a_silent_worker_is_pinged_and_left_out_when_it_does_not_answer():
    """A worker that hangs (its process stopped): the stream is silent past ``liveness_s``,
    the ping gets no answer within ``ping_timeout_s``, the worker is left out and its units
    go to the other. No wait is unbounded."""
    units = _units(6)
    hung = FakeWorker(latency=lambda key: 3600.0)

    async def never() -> int:
        await asyncio.sleep(3600)
        return 0

    hung.ping = _Method(never)
    got, handed, d = _run([hung, FakeWorker()], units, concurrency=4, liveness_s=0.05, ping_timeout_s=0.05)
    assert set(handed.values()) == {1} and all(t.failure is None for t in got.values())
    assert d.live == [False, True]


def test_a_slow_stream_of_a_live_worker_is_waited_for():
    units = _units(3)
    worker = FakeWorker(latency=lambda key: 0.2)
    got, _, d = _run([worker], units, concurrency=3, liveness_s=0.02)
    assert all(t.failure is None for t in got.values()) and d.live == [True]
    assert sum(len(b) for b in worker.batches) == 3  # no resend


def test_the_driver_side_is_small_and_imports_no_ray():
    """The delivery module runs without Ray (this file's fake proves its rules), and stays
    small enough to read in one sitting (issue 23: at most ~200 lines of code)."""
    probe = "import sys, evalkit.engine.delivery; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"
    source = Path(delivery.__file__).read_text(encoding="utf-8")
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = [ln for n, ln in enumerate(source.splitlines(), 1) if ln.strip() and not ln.strip().startswith("#") and n not in docstrings]
    assert len(code) <= 200, len(code)


@pytest.mark.parametrize("n", [1, 64])
def test_no_unit_waits_when_nothing_is_lost(n):
    units = _units(n)
    got, handed, _ = _run([FakeWorker(), FakeWorker(), FakeWorker()], units, concurrency=64)
    assert len(got) == n and set(handed.values()) == {1}
