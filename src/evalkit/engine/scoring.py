"""Scoring hostile model output with a bound on each sample's time and memory.

A scorer reads text written by the model under evaluation, and that text may be
adversarial, broken, or simply looping. The engine therefore never calls
``Benchmark.score_sample`` in its own process. :class:`Scorer` sends each sample to a
small pool of worker processes (pebble's ``ProcessPool``), and every worker:

* scores one sample at a time under a wall-clock limit, ``benchmark.score_timeout_s``
  (answers that arrive together go in one task under one sample's limit for them all; a
  task past it is no verdict, and each of its answers is scored again alone, so every
  verdict stays one sample's under its own limit; a task stops starting answers once its
  own seconds reach what the run's scoring budget had left).
  A sample that runs past it gets its worker killed and replaced. That is the one bound
  that holds for pure-Python loops, the regular-expression engine (a signal cannot
  interrupt it in the same thread) and C-level parsers alike;
* runs with its address space capped at what it had after start-up plus
  ``benchmark.score_memory_mb`` (``RLIMIT_AS``), so an alias bomb or a repetition bomb
  ends in a ``MemoryError`` inside the worker, never in the run;
* returns a verdict of bounded size (:func:`evalkit.benchmarks.bounds.bounded`: ``detail``
  at most 2,000 characters, a ``parsed`` value over 256 KiB of JSON replaced by its size
  and digest).

A sample that hits one of these limits is recorded with status ``scorer_limit`` (a
benchmark's own guard reports a ``MemoryError`` the same way). Under the
failure protocol it is a non-empty answer that could not be scored, so it is a wrong
answer and every score is 0 (:meth:`~evalkit.benchmarks.base.Benchmark.limit_score`).
``report.md`` names it. Runs and ``rescore`` score through the same :class:`Scorer`.

A run's scoring as a whole is bounded too (``benchmark.score_budget_s``): the seconds its
workers spend scoring are summed, and once they reach the budget no further answer is
scored (one not yet started in a worker is not started): :meth:`Scorer.score` answers
``None``, which the engine journals as a failure of kind ``score_budget_exceeded`` (the
answer may be harmless, so it is no zero; a resume scores it). ``rescore`` is unbounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import pickle
import resource
import time
from typing import Any

from evalkit.benchmarks.base import Benchmark
from evalkit.benchmarks.bounds import bounded
from evalkit.types import Sample, SampleScore, Trajectory

#: worker processes of the pool (scoring is CPU-bound; more than the cores buys nothing)
WORKERS = max(1, min(2, os.cpu_count() or 1))

#: the most answers in one scoring task
MAX_TOGETHER = 64

_BENCH: Benchmark | None = None


def _address_space_bytes() -> int:
    """This process's current virtual memory size (``VmSize``), in bytes."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _init_worker(bench_bytes: bytes, memory_mb: int) -> None:
    """Runs once in each worker: load the benchmark, cap the address space."""
    global _BENCH
    _BENCH = pickle.loads(bench_bytes)
    if memory_mb > 0:
        cap = _address_space_bytes() + memory_mb * 1024 * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)  # a cap set on evalkit as a whole stays the ceiling
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def _score_in_worker(sample: Sample, trajectory: Trajectory) -> tuple[str, Any, float]:
    """``("ok", SampleScore, seconds)``, or ``("memory" | "error", message, seconds)``:
    never raises; ``seconds``: the scoring's own wall time in the worker."""
    started = time.perf_counter()
    kind, value = _score(sample, trajectory)
    return kind, value, time.perf_counter() - started


def _score_all_in_worker(samples: list[Sample], trajectories: list[Trajectory],
                         budget_left_s: float | None = None) -> list[tuple[str, Any, float]]:  # fmt: skip
    """:func:`_score_in_worker` of each pair, one after the other, in one task; once the
    task's own scoring seconds reach ``budget_left_s`` (what the run's scoring budget had
    left when the task was sent; ``None``: no budget), the pairs left are not started:
    ``("budget", None, 0.0)`` each."""
    out: list[tuple[str, Any, float]] = []
    spent = 0.0
    for sample, trajectory in zip(samples, trajectories):
        if budget_left_s is not None and spent >= budget_left_s:
            out.append(("budget", None, 0.0))
            continue
        out.append(_score_in_worker(sample, trajectory))
        spent += out[-1][2]
    return out


def _score(sample: Sample, trajectory: Trajectory) -> tuple[str, Any]:
    assert _BENCH is not None
    try:
        return "ok", bounded(_BENCH.score_sample(sample, trajectory))
    except MemoryError:
        return "memory", "scoring ran out of its memory limit"
    except RecursionError:
        return "error", "scoring recursed too deeply"
    except Exception as exc:  # noqa: BLE001 - a scorer bug is a verdict, never a dead run
        return "error", f"scoring raised {type(exc).__name__}: {str(exc)[:300]}"


class Scorer:
    """The engine's one scoring entry: ``await score(sample, trajectory)`` (a run) or
    ``score_sync`` (``rescore``), each bounded by ``benchmark.score_timeout_s`` seconds and
    ``benchmark.score_memory_mb`` MiB; with ``budget_s`` (a run's ``benchmark.score_budget_s``)
    at most about that many scoring seconds in all (``spent_s``; past it :meth:`score`
    answers ``None``). Use it as a context manager, which stops the pool."""

    def __init__(self, bench: Benchmark, timeout_s: float | None = None, memory_mb: int | None = None,
                 budget_s: float | None = None):  # fmt: skip
        from pebble import ProcessPool  # deferred: only runs and rescore score

        self.bench = bench
        self.budget_s = budget_s
        self.spent_s = 0.0
        self.timeout_s = timeout_s if timeout_s is not None else bench.settings.score_timeout_s
        self.memory_mb = memory_mb if memory_mb is not None else bench.settings.score_memory_mb
        # forkserver: workers are forked from a clean server process, never from a driver
        # that runs Ray's threads
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["evalkit.benchmarks"])
        self._waiting: list[tuple[Sample, Trajectory, asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Future[Any]] = set()
        self.pool = ProcessPool(
            max_workers=WORKERS, context=context, initializer=_init_worker, initargs=(pickle.dumps(bench), self.memory_mb)
        )
        # starts the workers now, while the run starts, not at its first answer
        self._started = self.pool.schedule(os.getpid)

    def _schedule(self, sample: Sample, trajectory: Trajectory) -> concurrent.futures.Future:
        return self.pool.schedule(_score_in_worker, args=(sample, trajectory), timeout=self.timeout_s)

    @property
    def budget_spent(self) -> bool:
        """True once the scoring seconds reached ``budget_s`` (never without a budget)."""
        return self.budget_s is not None and self.spent_s >= self.budget_s

    def _outcome(self, future: concurrent.futures.Future) -> Any:
        """The task's result, or ``("time" | "crash", message, seconds)`` when it was stopped
        past its time or its worker died."""
        try:
            return future.result()
        except concurrent.futures.TimeoutError:
            return "time", f"scoring ran past benchmark.score_timeout_s={self.timeout_s:g} s and was stopped", self.timeout_s
        except Exception as exc:  # noqa: BLE001 - pebble's ProcessExpired: the worker died (killed, crashed)
            return "crash", f"the scoring process died ({type(exc).__name__}: {str(exc)[:200]})", 0.0

    def _verdict(self, sample: Sample, outcome: tuple[str, Any, float]) -> SampleScore:
        kind, value, seconds = outcome
        self.spent_s += seconds
        if kind == "ok":
            return value
        if kind == "memory":
            value = f"{value} (benchmark.score_memory_mb={self.memory_mb})"
        return self.bench.limit_score(sample, value)

    async def score(self, sample: Sample, trajectory: Trajectory) -> SampleScore | None:
        """The verdict on ``sample``, computed in a worker; ``None`` when the run's scoring
        budget is spent before a worker started on it; never raises.

        Answers asked for in one turn of the event loop (those that arrived together: the
        model workers send results several at a time) go to a worker in one task (one round
        trip for many), under one sample's time limit for them all: a task that runs past it, or
        whose worker dies, is not a verdict on any of them; each is then scored again alone
        under its own limit, so every verdict is one sample's, as if scored alone."""
        if self.budget_spent:
            return None
        loop = asyncio.get_running_loop()
        if not self._waiting:
            loop.call_soon(self._send)  # after the answers that arrived with this one asked too
        verdict: asyncio.Future[SampleScore | None] = loop.create_future()
        self._waiting.append((sample, trajectory, verdict))
        return await verdict

    def _send(self) -> None:
        for start in range(0, len(self._waiting), MAX_TOGETHER):
            task = asyncio.ensure_future(self._score_together(self._waiting[start : start + MAX_TOGETHER]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._waiting = []

    async def _score_together(self, asked: list[tuple[Sample, Trajectory, asyncio.Future[Any]]]) -> None:
        if len(asked) > 1:
            left = None if self.budget_s is None else self.budget_s - self.spent_s
            future = self.pool.schedule(_score_all_in_worker, args=([a[0] for a in asked], [a[1] for a in asked], left),
                                        timeout=self.timeout_s)  # fmt: skip
            if not await self._finished(future):
                return self._answer(asked, [None] * len(asked))
            outcome = self._outcome(future)
            if isinstance(outcome, list):  # an answer left unstarted by the budget: no verdict (None)
                return self._answer(asked, [None if o[0] == "budget" else self._verdict(a[0], o) for a, o in zip(asked, outcome)])
            self.spent_s += outcome[2]  # the task's own time, spent on no verdict
        verdicts = await asyncio.gather(*(self._alone(sample, trajectory) for sample, trajectory, _ in asked))
        self._answer(asked, list(verdicts))

    @staticmethod
    def _answer(asked: list[tuple[Sample, Trajectory, asyncio.Future[Any]]], verdicts: list[SampleScore | None]) -> None:
        for (_, _, waiting), verdict in zip(asked, verdicts):
            if not waiting.done():
                waiting.set_result(verdict)

    async def _alone(self, sample: Sample, trajectory: Trajectory) -> SampleScore | None:
        if self.budget_spent:
            return None
        future = self._schedule(sample, trajectory)
        return self._verdict(sample, self._outcome(future)) if await self._finished(future) else None

    async def _finished(self, future: concurrent.futures.Future) -> bool:
        """Wait for a scoring task; False when it was cancelled, still queued behind others,
        because the run's scoring budget ran out."""
        waiting = asyncio.wrap_future(future)
        while not (await asyncio.wait([waiting], timeout=0.25))[0]:
            if self.budget_spent and not future.running() and future.cancel():
                return False
        if not waiting.cancelled():
            waiting.exception()  # retrieved: the verdict reads the outcome from ``future``
        return True

    def score_sync(self, sample: Sample, trajectory: Trajectory) -> SampleScore:
        """:meth:`score` for callers without an event loop (one sample at a time)."""
        future = self._schedule(sample, trajectory)
        concurrent.futures.wait([future])
        return self._verdict(sample, self._outcome(future))

    def close(self) -> None:
        """Stop the workers (every verdict asked for has been awaited by then). A run that ends
        within moments of its start (a few cached answers) first waits, at most 10 s, for the
        workers it started to come up: a worker stopped while it still unpickles its start-up
        arguments outlives the pool's semaphores and prints a ``SemLock`` traceback."""
        concurrent.futures.wait([self._started], timeout=10)
        self.pool.stop()
        self.pool.join(timeout=10)

    def __enter__(self) -> "Scorer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
