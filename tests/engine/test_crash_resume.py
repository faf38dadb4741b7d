"""Crash and resume beyond a killed driver (test_resume.py): a Ray worker SIGKILLed mid-run,
and a resume with another number of workers and another concurrency.

The promise in every case: no sample is lost or journaled twice, a journaled answer is
never requested again, and the finished run has the metrics of an uninterrupted one.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalkit.engine.journal import read_jsonl
from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd
from tests.engine.test_engine_faults import load_gold

pytestmark = pytest.mark.slow  # Ray, subprocess runs, process kills

IDS = [f"en/normal_atom_enum_{i}" for i in range(12)]


@pytest.fixture(scope="module")
def gold(acebench_dir: Path) -> dict[str, tuple[str, str]]:
    """{sample_id: (unique question text, gold answer)} for IDS."""
    return load_gold(acebench_dir, IDS)


@pytest.fixture(scope="module")
def uninterrupted(fake_openai, ray_address, acebench_dir, gold, tmp_path_factory) -> dict:
    """Metrics of one uninterrupted run of IDS answered with the gold answers."""
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    fake_openai.set_plan(_plan(gold, latency_s=0.0))
    root = tmp_path_factory.mktemp("uninterrupted")
    _, cfg = resolve(compose(base_overrides(root, acebench_dir) + _args(fake_openai)))
    result = run_validated(cfg)
    assert result.summary["status"] == "complete" and result.summary["n_scored"] == len(IDS)
    return result.summary["metrics"]


def _plan(gold, latency_s: float, **per_id) -> dict:
    rules = [{"match": q, "content": a, "latency_s": latency_s, **per_id.get(sid, {})} for sid, (q, a) in gold.items()]
    return {"rules": rules}


def _args(fake, *extra: str, ids: list[str] = IDS) -> list[str]:
    return [
        "model=openai_compatible",
        "model.provider_model=openai/fake",
        f"backend.api_base={fake.api_base}",
        "backend.retry_initial_wait_s=0.05",
        "run.cache=false",
        f"run.sample_ids=[{','.join(ids)}]",
        *extra,
    ]


def _asked(fake, gold, since: int = 0) -> Counter:
    """{sample_id: number of requests} in the server log from entry ``since`` on."""
    by_question = {q: sid for sid, (q, _) in gold.items()}
    out: Counter = Counter()
    for entry in fake.log[since:]:
        sids = [sid for q, sid in by_question.items() if q in entry["last"]]
        assert len(sids) == 1, entry["last"][-100:]
        out[sids[0]] += 1
    return out


def _live_model_workers(exclude_job: str) -> dict[str, int]:
    """{actor id: pid} of the ALIVE ModelWorker actors of other jobs in this Ray session
    (read from the GCS actor table; the state API needs the dashboard, which is off); the
    class name is matched on its last dotted part."""
    from ray._private import state

    return {
        aid: int(a["Pid"])
        for aid, a in state.actors().items()
        if a["ActorClassName"].split(".")[-1] == "ModelWorker" and a["State"] == "ALIVE" and a["JobID"] != exclude_job and a.get("Pid")
    }


def _wait_for_rows(preds: Path, n: int, alive: Any) -> None:
    """Wait for ``n`` journaled rows while the run is ``alive``: a guard against a hung run,
    no timing assertion (the run's start-up alone took over 120 s at load 27 on 2 cores)."""
    deadline = time.time() + 600
    while time.time() < deadline:
        if preds.exists() and len(list(read_jsonl(preds))) >= n:
            return
        alive()
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} rows journaled in {preds} after 600 s")


@pytest.mark.slow
def test_killed_ray_worker_then_resume_loses_nothing(
    fake_openai, ray_address, acebench_dir, gold, uninterrupted, tmp_path, run_eval
):
    """evalkit in a subprocess, its actors in the session's Ray; one of its two ModelWorker
    processes is SIGKILLed once 3 of 12 samples are journaled. Whatever the run does then,
    nothing journaled is asked again or journaled twice, and resuming completes it with the
    metrics of an uninterrupted run."""
    import ray

    fake_openai.set_plan(_plan(gold, latency_s=0.3))
    run_dir = tmp_path / "run"
    preds = run_dir / "predictions.jsonl"
    extra = ["backend.concurrency=2", "runner.num_workers=2", f"runner.address={ray_address}"]
    proc = subprocess.Popen(
        evalkit_cmd(*base_overrides(tmp_path / "out", acebench_dir), *_args(fake_openai, *extra), f"run.dir={run_dir}"),
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip

    def alive() -> None:
        assert proc.poll() is None, proc.stdout.read().decode()

    try:
        _wait_for_rows(preds, 3, alive)
        workers = _live_model_workers(exclude_job=ray.get_runtime_context().get_job_id())
        assert len(workers) == 2, workers  # runner.num_workers of the run in the subprocess
        os.kill(sorted(workers.values())[0], signal.SIGKILL)
        n_log_at_kill = len(fake_openai.log)
        before = {r["sample_id"] for r in read_jsonl(preds)}  # journaled before (or at) the kill
        assert 3 <= len(before) < len(IDS)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not set(_asked(fake_openai, gold, n_log_at_kill)) & before, "a journaled sample was asked again"
    rows = list(read_jsonl(preds))
    journaled = Counter(r["sample_id"] for r in rows)
    assert set(journaled.values()) == {1}, "a sample journaled twice"

    # whatever the first run managed, resuming it finishes the job and asks only the rest
    n_log_before_resume = len(fake_openai.log)
    again = run_eval(_args(fake_openai, *extra, f"run.resume={run_dir}"), output_root=tmp_path / "out")
    assert again.run_dir == run_dir
    assert again.summary["status"] == "complete" and again.exit_code == 0
    assert again.summary["n_scored"] == len(IDS) and again.summary["n_failed"] == 0
    assert Counter(r["sample_id"] for r in read_jsonl(preds)) == Counter(IDS)  # each exactly once
    assert list(read_jsonl(run_dir / "failed.jsonl")) == []
    assert _asked(fake_openai, gold, n_log_before_resume) == Counter(set(IDS) - set(journaled))
    assert again.summary["metrics"] == uninterrupted


class _InThread:
    """A run in a thread of this process (so a crash is an exception out of
    ``run_evaluation`` rather than a traceback of a subprocess); ``alive()`` asserts it has
    not ended, ``join()`` returns its result."""

    def __init__(self, run_eval, args: list[str]):
        self.outcome: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._target, args=(run_eval, args), daemon=True)
        self.thread.start()

    def _target(self, run_eval, args: list[str]) -> None:
        try:
            self.outcome["result"] = run_eval(args)
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.outcome["error"] = exc

    def alive(self) -> None:
        assert self.thread.is_alive(), self.outcome

    def join(self) -> Any:
        self.thread.join(timeout=180)
        assert not self.thread.is_alive()
        assert "error" not in self.outcome, f"the run died: {self.outcome.get('error')!r}"
        return self.outcome["result"]


def _new_workers(known: set[str], n: int) -> dict[str, int]:
    """{actor id: pid} of the ``n`` ModelWorkers started since ``known`` was read."""
    deadline = time.time() + 60
    while time.time() < deadline:
        workers = {aid: pid for aid, pid in _live_model_workers(exclude_job="").items() if aid not in known}
        if len(workers) == n:
            return workers
        time.sleep(0.05)
    raise AssertionError(f"not {n} new model workers: {workers}")


def _kill_one_of_two_workers_mid_run(fake_openai, run_eval, gold, run_dir: Path, rows: int) -> tuple[set[str], int]:
    """Run IDS on two workers (concurrency 2, 0.3 s a request), SIGKILL one of them once
    ``rows`` samples are journaled, and check that the run completed with every sample
    journaled exactly once and no failure. Returns the samples journaled before the kill
    and the server log's length then."""
    fake_openai.set_plan(_plan(gold, latency_s=0.3))
    preds = run_dir / "predictions.jsonl"
    known = set(_live_model_workers(exclude_job=""))
    run = _InThread(run_eval, _args(fake_openai, "backend.concurrency=2", "runner.num_workers=2", f"run.dir={run_dir}"))
    _wait_for_rows(preds, rows, run.alive)
    os.kill(sorted(_new_workers(known, 2).values())[0], signal.SIGKILL)
    n_log_at_kill = len(fake_openai.log)
    before = {r["sample_id"] for r in read_jsonl(preds)}
    res = run.join()
    assert res.summary["status"] == "complete" and res.exit_code == 0, res.summary
    assert Counter(r["sample_id"] for r in read_jsonl(preds)) == Counter(IDS)
    assert list(read_jsonl(run_dir / "failed.jsonl")) == []
    return before, n_log_at_kill


@pytest.mark.slow
def test_killed_ray_worker_run_still_completes(fake_openai, ray_address, gold, tmp_path, run_eval):
    """The run survives the loss of a worker by itself: the actor comes back, the units it
    had in flight are sent again, every sample is journaled exactly once and nothing
    journaled before the kill is asked again."""
    before, n_log_at_kill = _kill_one_of_two_workers_mid_run(fake_openai, run_eval, gold, tmp_path / "run", rows=3)
    assert 3 <= len(before) < len(IDS)
    assert not set(_asked(fake_openai, gold, n_log_at_kill)) & before


@pytest.mark.slow
def test_a_worker_dead_for_good_leaves_the_run_to_the_others(fake_openai, ray_address, gold, tmp_path, run_eval, monkeypatch):
    """A worker that Ray will not restart (``max_restarts`` 0 here, as when its restarts are
    spent) is left out of the run: the unit it held and every later one go to the other
    worker, and the run completes with no failure (a dispatch that still chose the dead
    worker, the one with fewest units, would fail them as ``worker_died``)."""
    from evalkit.engine import executor

    monkeypatch.setattr(executor, "ACTOR_MAX_RESTARTS", 0)
    _kill_one_of_two_workers_mid_run(fake_openai, run_eval, gold, tmp_path / "run", rows=2)
    log_text = (tmp_path / "run" / "evalkit.log").read_text()
    assert re.search(r"model worker [01] is left out of this run \(ActorDiedError", log_text), log_text[-2000:]


@pytest.mark.slow
def test_a_run_whose_only_worker_dies_for_good_ends_with_failures_and_the_next_job_starts_anew(
    fake_openai, ray_address, gold, tmp_path, run_eval, monkeypatch
):
    """In a sweep's session, one worker that Ray will not restart is killed mid-run: the
    run ends (not a crash) with every sample not yet journaled a ``worker_died`` failure,
    each sample in exactly one of the two files; the next job of the session does not
    reuse the dead pool (its workers are new) and completes."""
    from evalkit.engine import executor, session

    monkeypatch.setattr(executor, "ACTOR_MAX_RESTARTS", 0)
    fake_openai.set_plan(_plan(gold, latency_s=0.3))
    args = [*_args(fake_openai, "backend.concurrency=1", "runner.num_workers=1"), "tracking=none"]
    shared = session.begin()
    in_session = functools.partial(run_eval, shared=shared)
    try:
        known = set(_live_model_workers(exclude_job=""))
        run = _InThread(in_session, [*args, f"run.dir={tmp_path / 'first'}"])
        _wait_for_rows(tmp_path / "first" / "predictions.jsonl", 2, run.alive)
        os.kill(next(iter(_new_workers(known, 1).values())), signal.SIGKILL)
        first = run.join()
        assert first.summary["status"] != "complete" and first.exit_code != 0
        journaled = [r["sample_id"] for r in read_jsonl(tmp_path / "first" / "predictions.jsonl")]
        failed = list(read_jsonl(tmp_path / "first" / "failed.jsonl"))
        assert {f["error_kind"] for f in failed} == {"worker_died"} and len(journaled) >= 2
        assert sorted(journaled + [f["sample_id"] for f in failed]) == sorted(IDS)
        second = in_session([*args, f"run.dir={tmp_path / 'second'}"])
        assert second.summary["status"] == "complete", second.summary
        assert second.summary["engine"]["reused_workers"] is False
        assert set(second.summary["engine"]["worker_pids"]).isdisjoint(first.summary["engine"]["worker_pids"])
    finally:
        session.end()


@pytest.mark.slow
def test_a_unit_that_kills_its_worker_every_time_ends_as_a_failure(fake_openai, ray_address, gold, tmp_path, run_eval):
    """One worker, one unit in flight; the worker is SIGKILLed whenever the poison sample's
    request reaches the server. The sample is sent three times (the first send and
    two more, alone, each to the restarted worker: ``UNIT_MAX_TRIES`` in all), then it is a
    ``worker_died`` failure; every other sample is answered by the restarted worker and
    journaled once, and the run ends incomplete instead of hanging."""
    from evalkit.engine.delivery import UNIT_MAX_TRIES

    poison = IDS[0]
    fake_openai.set_plan(_plan(gold, latency_s=0.0, **{poison: {"latency_s": 5.0}}))
    since = len(fake_openai.log)
    run_dir = tmp_path / "run"
    known = set(_live_model_workers(exclude_job=""))
    run = _InThread(run_eval, _args(fake_openai, "backend.concurrency=1", "runner.num_workers=1", f"run.dir={run_dir}"))
    kills, deadline = 0, time.time() + 150
    while run.thread.is_alive() and kills < UNIT_MAX_TRIES:
        assert time.time() < deadline, f"the run hangs after {kills} kill(s)"
        if _asked(fake_openai, gold, since)[poison] > kills:  # the poison sample is in flight: kill its worker
            os.kill(next(iter(_new_workers(known, 1).values())), signal.SIGKILL)
            kills += 1
        time.sleep(0.02)
    res = run.join()
    assert kills == UNIT_MAX_TRIES
    assert res.summary["status"] != "complete" and res.exit_code != 0, res.summary
    failed = list(read_jsonl(run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"]) for f in failed] == [(poison, "worker_died")], failed
    assert Counter(r["sample_id"] for r in read_jsonl(run_dir / "predictions.jsonl")) == Counter(IDS[1:])
    assert _asked(fake_openai, gold, since)[poison] == UNIT_MAX_TRIES


@pytest.mark.slow
def test_a_slow_request_holds_back_no_other_unit(fake_openai, ray_address, gold, tmp_path, run_eval):
    """Two workers, concurrency 2 (one unit in flight per worker), the first sample slow:
    while it holds one worker every other unit goes to the other, the one with fewer in
    flight, instead of queueing behind the slow request (round robin sends every second
    unit to the busy worker, which then holds back the whole run). The server answers the
    slow sample only once every other sample has been answered, so the check is on order
    and counts, not on time. Every other sample is answered only once two requests have
    arrived, so the first one sent (by whichever worker started first) waits for the slow
    one however late its worker starts: the slow sample is among the first two to arrive,
    the other ten were sent after it, and it was released by that count, not by the
    server's 120 s cap (a unit queued behind it could never be answered before it)."""
    slow = IDS[0]
    others = {sid: {"hold_until_arrived": 2, "hold_s": 120} for sid in IDS if sid != slow}
    fake_openai.set_plan(_plan(gold, latency_s=0.0, **others, **{slow: {"hold_until_answered": len(IDS) - 1, "hold_s": 120}}))
    since = len(fake_openai.log)
    run_dir = tmp_path / "run"
    res = run_eval(_args(fake_openai, "backend.concurrency=2", "runner.num_workers=2", f"run.dir={run_dir}"))
    assert res.summary["status"] == "complete"
    arrival = list(_asked(fake_openai, gold, since))  # a Counter keeps the order of first sight
    assert arrival.index(slow) < 2, arrival
    question = gold[slow][0]
    assert [e.get("released_by") for e in fake_openai.log[since:] if question in e["last"]] == ["count"]
    journaled = [r["sample_id"] for r in read_jsonl(run_dir / "predictions.jsonl")]
    assert sorted(journaled) == sorted(IDS), journaled


@pytest.mark.slow
def test_resume_with_more_workers_finishes_the_failed_samples(fake_openai, ray_address, gold, uninterrupted, run_eval, tmp_path):
    """One worker, one request at a time, four prompts failing; the resume gets three
    workers and asks only those four again."""
    doomed = IDS[1:12:3]
    fake_openai.set_plan(_plan(gold, 0.05, **{sid: {"always_status": 503} for sid in doomed}))
    root = tmp_path / "out"
    first = run_eval(_args(fake_openai, "backend.max_retries=0", "backend.concurrency=1", "runner.num_workers=1"), output_root=root)
    assert first.summary["status"] == "incomplete" and first.exit_code == 1
    assert sorted(f["sample_id"] for f in read_jsonl(first.run_dir / "failed.jsonl")) == sorted(doomed)
    assert fake_openai.max_in_flight == 1

    fake_openai.set_plan(_plan(gold, 0.3))
    again = run_eval(
        _args(fake_openai, "backend.max_retries=0", "backend.concurrency=1", "runner.num_workers=3",
              f"run.resume={first.run_dir}"),  # fmt: skip
        output_root=root,
    )
    assert again.run_dir == first.run_dir
    assert again.summary["status"] == "complete" and again.exit_code == 0
    assert _asked(fake_openai, gold) == Counter(doomed)
    rows = list(read_jsonl(first.run_dir / "predictions.jsonl"))
    assert Counter(r["sample_id"] for r in rows) == Counter(IDS)
    assert list(read_jsonl(first.run_dir / "failed.jsonl")) == []
    assert sorted(f["sample_id"] for f in read_jsonl(first.run_dir / "failed.prev-1.jsonl")) == sorted(doomed)
    assert again.summary["metrics"] == uninterrupted


@pytest.mark.slow
def test_resume_with_another_concurrency(fake_openai, ray_address, gold, uninterrupted, run_eval, tmp_path):
    """``backend.concurrency`` decides how many requests are in flight, not what they
    answer: a run started with 1 may be resumed with 3."""
    first_ids = IDS[:4]
    fake_openai.set_plan(_plan(gold, 0.05))
    root = tmp_path / "out"
    first = run_eval(_args(fake_openai, "backend.concurrency=1", "runner.num_workers=1", "run.limit=4"), output_root=root)
    assert first.summary["status"] == "complete" and first.summary["n_scored"] == len(first_ids)
    assert fake_openai.max_in_flight == 1

    fake_openai.set_plan(_plan(gold, 0.3))
    again = run_eval(
        _args(fake_openai, "backend.concurrency=3", "runner.num_workers=3", f"run.resume={first.run_dir}"),
        output_root=root,
    )
    assert again.summary["status"] == "complete" and again.exit_code == 0
    assert _asked(fake_openai, gold) == Counter(IDS[4:])
    assert fake_openai.max_in_flight <= 3
    rows = list(read_jsonl(first.run_dir / "predictions.jsonl"))
    assert Counter(r["sample_id"] for r in rows) == Counter(IDS)
    assert again.summary["metrics"] == uninterrupted


@pytest.mark.slow
def test_ctrl_c_names_the_run_directory_to_resume(fake_openai, ray_address, acebench_dir, gold, uninterrupted, tmp_path, run_eval):
    """SIGINT (Ctrl-C) a run whose directory evalkit chose: exit 130, the last stderr line
    names that directory for run.resume (and evalkit.log records it), and resuming exactly
    that directory completes the run with an uninterrupted run's metrics (0.8 s a request:
    the 9 samples left when the signal goes take 3.6 s or more, so a loaded machine that is
    slow to send it does not see the run end first)."""
    fake_openai.set_plan(_plan(gold, latency_s=0.8))
    out = tmp_path / "out"
    extra = ["backend.concurrency=2", "runner.num_workers=1", f"runner.address={ray_address}"]
    proc = subprocess.Popen(
        evalkit_cmd(*base_overrides(out, acebench_dir), *_args(fake_openai, *extra)),
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 120
        preds: list[Path] = []
        while time.time() < deadline and proc.poll() is None:
            preds = list((out / "runs").glob("acebench/openai_compatible/*/predictions.jsonl"))
            if preds and len(list(read_jsonl(preds[0]))) >= 3:
                break
            time.sleep(0.05)
        assert len(preds) == 1 and proc.poll() is None, "the run ended or journaled nothing"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_dir = preds[0].parent
    assert proc.returncode == 130, err
    assert "ray.kill" not in err and "Unhandled error" not in err, err  # Ray's lines about the workers evalkit stopped
    assert err.strip().splitlines()[-1] == f"evalkit: interrupted; finished samples are journaled — resume with run.resume={run_dir}"
    assert f"interrupted; resume with run.resume={run_dir}" in (run_dir / "evalkit.log").read_text(encoding="utf-8")
    assert not (run_dir / "summary.json").exists()

    fake_openai.set_plan(_plan(gold, latency_s=0.0))
    again = run_eval(_args(fake_openai, *extra, f"run.resume={run_dir}"), output_root=out)
    assert again.run_dir == run_dir
    assert again.summary["status"] == "complete" and again.summary["n_scored"] == len(IDS)
    assert again.summary["metrics"] == uninterrupted
