"""A 429 storm: the provider serves at most a few requests at a time and rejects the rest
with HTTP 429 (the fake server's ``capacity``). The engine's AIMD window
(``evalkit.engine.executor.AdaptiveWindow``) must back off, every sample must finish, and
the 429s evalkit counts must be exactly the ones the server sent.

The window is over units (one Ray call each) and learns of a 429 only when its unit ends:
the first ``CONCURRENCY`` units are all dispatched before any answer, and their retries are
the model client's backoff, out of any window's reach. Over 40 units the window acted on
the last 16 alone, a gain (about 10 % fewer 429s in a simulation of this storm) within the
run-to-run noise: one run of 40 saw 63 rejections adaptive against 51 fixed. Over 80 units
the halved window holds for most of the run (about 30 % fewer in the same simulation).
"""

from __future__ import annotations

import asyncio

import pytest

from evalkit.engine.scheduling import AdaptiveWindow
from evalkit.engine.journal import read_jsonl

N = 80
CONCURRENCY = 24
CAPACITY = 3


def _storm_args(fake, *extra: str) -> list[str]:
    return [
        "model=openai_compatible",
        "model.provider_model=openai/fake",
        f"backend.api_base={fake.api_base}",
        f"backend.concurrency={CONCURRENCY}",
        "runner.num_workers=2",
        "backend.max_retries=60",
        "backend.retry_initial_wait_s=0.05",
        "backend.retry_max_wait_s=0.4",
        "run.cache=false",
        "benchmark.subsets=[normal_atom_bool,normal_atom_enum]",
        f"run.limit={N}",
        *extra,
    ]


def _storm(fake, run_eval, *extra: str):
    fake.set_plan({"default": {"content": "[]", "latency_s": 0.15}, "capacity": CAPACITY})
    res = run_eval(_storm_args(fake, *extra))
    rejected = sum(1 for r in fake.log if r["status"] == 429)
    return res, rejected


@pytest.mark.slow
def test_429_storm_backs_off_and_every_sample_finishes(fake_openai, ray_address, run_eval):
    res, rejected = _storm(fake_openai, run_eval)
    assert res.summary["status"] == "complete" and res.exit_code == 0
    assert res.summary["n_scored"] == N and res.summary["n_failed"] == 0
    assert list(read_jsonl(res.run_dir / "failed.jsonl")) == []
    engine = res.summary["engine"]
    assert engine["units"] == N and engine["concurrency"] == CONCURRENCY
    assert engine["window_decreases"] >= 1
    assert engine["min_window"] <= CONCURRENCY // 2
    # what evalkit counted is exactly what the server sent, in total and per sample
    assert engine["throttled"] == rejected > 0
    preds = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert sum(p["throttled"] for p in preds) == rejected
    assert sum(p["attempts"] for p in preds) == len(fake_openai.log)
    assert fake_openai.max_in_flight <= CAPACITY
    adaptive_rejected = rejected

    # the same storm with a fixed window: the window never moves and the server has to
    # turn away more requests
    res, rejected = _storm(fake_openai, run_eval, "backend.adaptive_concurrency=false")
    assert res.summary["status"] == "complete" and res.summary["n_scored"] == N
    engine = res.summary["engine"]
    assert engine["window_decreases"] == 0 and engine["min_window"] == CONCURRENCY
    assert engine["throttled"] == rejected
    assert adaptive_rejected < rejected


def test_window_halves_once_per_congestion_event_and_grows_back():
    """AIMD by itself: a wave of throttled results dispatched before the first decrease
    counts once; a later throttled unit halves again; unthrottled results add one per
    window."""

    async def scenario() -> list[int]:
        w = AdaptiveWindow(16)
        seqs = [await w.acquire() for _ in range(16)]
        seen = [w.window]
        for seq in seqs[:8]:  # eight 429s of the same wave
            await w.release(seq, 1)
        seen.append(w.window)  # 8: halved once
        for seq in seqs[8:]:
            await w.release(seq, 0)
        later = await w.acquire()  # dispatched after the decrease
        await w.release(later, 2)
        seen.append(w.window)  # 4: a new congestion event
        for _ in range(4 + 5):  # a window of 4 successes -> 5, then 5 more -> 6
            await w.release(await w.acquire(), 0)
        seen.append(w.window)
        seen.append(w.min_window)
        seen.append(w.decreases)
        return seen

    assert asyncio.run(scenario()) == [16, 8, 4, 6, 4, 2]


def test_fixed_window_ignores_429():
    async def scenario() -> tuple[int, int]:
        w = AdaptiveWindow(4, adaptive=False)
        for _ in range(3):
            await w.release(await w.acquire(), 1)
        return w.window, w.decreases

    assert asyncio.run(scenario()) == (4, 0)


@pytest.mark.parametrize("limit", [1, 2])
def test_window_never_drops_below_one(limit):
    async def scenario() -> int:
        w = AdaptiveWindow(limit)
        for _ in range(5):
            await w.release(await w.acquire(), 1)
        return w.window

    assert asyncio.run(scenario()) == 1


@pytest.mark.slow
def test_a_run_on_its_own_local_ray_records_the_workers_windows(fake_openai, acebench_dir, tmp_path):
    """The windows are the model workers' (each over its share): their figures are read while
    the workers are up, before the run stops them and its own Ray. A run with a Ray instance
    of its own (``python -m evalkit``, no ``runner.address``) read them after, from killed
    actors, warned, and its summary had no window figures (a race: a new user's
    `model=smollm2` run met it; this run did not, before the fix, on this machine)."""
    import json
    import subprocess

    from tests.conftest import base_overrides, evalkit_cmd

    fake_openai.set_plan({"default": {"content": "[]", "latency_s": 0.05}})
    root = tmp_path / "out"
    args = [*base_overrides(root, acebench_dir), *_storm_args(fake_openai)]
    proc = subprocess.run(evalkit_cmd(*args), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = [p.parent for p in root.rglob("summary.json")]
    engine = json.loads((run_dir / "summary.json").read_text())["engine"]
    assert (engine["concurrency"], engine["min_window"], engine["window_decreases"]) == (CONCURRENCY, CONCURRENCY, 0)
    assert 0 < engine["peak_in_flight"] <= CONCURRENCY
    assert "window figures could not be read" not in proc.stderr + (run_dir / "evalkit.log").read_text()
