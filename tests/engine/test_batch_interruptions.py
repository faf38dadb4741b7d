"""Issue 35 item 10, batch runs behind the executor protocol: a driver killed during the
upload does not upload again, an upload that never answers ends at ``backend.timeout_s``,
an interrupted process skips the interpreter's final collections, a budget refusal leaves
no run directory, and a live resume of a detached batch is refused before Ray starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalkit.errors import ConfigError, RunDirError
from tests.conftest import evalkit_cmd
from tests.engine.test_batch_runs import FAST_POLL, _args, _ledger, _rows, _run, ke_dir, rules  # noqa: F401 - fixtures
from tests.support.host import time_limit

pytestmark = pytest.mark.slow


def _inputs(fake) -> list[dict]:
    return [f for f in fake.files.values() if f["filename"].startswith("evalkit-")]


def test_a_driver_killed_during_the_upload_finds_the_file_instead_of_uploading_again(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"upload_hold_s": 900}})  # kept, never answered
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, f"run.dir={run_dir}", "run.cache=false")
    proc = subprocess.Popen(evalkit_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + time_limit(120)
        while time.time() < deadline and not _inputs(fake_openai):
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
        assert _inputs(fake_openai), "the driver never uploaded"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (entry,) = _ledger(run_dir)
    assert entry["status"] == "uploading" and entry["file_id"] is None  # the intent, recorded before the upload
    fake_openai.set_batch_plan({})
    again = _run(args[:-2] + [f"run.resume={run_dir}", "run.cache=false"])
    assert again.summary["status"] == "complete" and len(_rows(run_dir)) == 12
    (uploaded,) = _inputs(fake_openai)  # found by its digest-bearing name, not uploaded a second time
    assert _ledger(run_dir)[0]["file_id"] == uploaded["id"] == fake_openai.batch_log[0]["input_file_id"]
    assert fake_openai.batch_submissions == 1


def test_an_upload_that_never_answers_ends_at_backend_timeout(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"upload_hold_s": 900}})
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, f"run.dir={run_dir}", "run.cache=false",
                 "backend.timeout_s=2")  # fmt: skip
    proc = subprocess.Popen(evalkit_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=time_limit(90))  # a hang guard far above 2 s, scaled by the host's load
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = err.decode()
    assert proc.returncode == 1, text
    assert "did not answer (upload) within 2 s (backend.timeout_s)" in text and f"run.resume={run_dir}" in text
    fake_openai.set_batch_plan({})


_INTERRUPTED = """
import atexit, gc, os, sys
import evalkit.__main__ as entry

def interrupted(cfg):
    raise KeyboardInterrupt
entry.run_config = interrupted
atexit.register(lambda: print("atexit ran", file=sys.stderr, flush=True))

class Cycle:  # freed only by a garbage collection
    def __del__(self, write=os.write):
        write(2, b"collected after the line\\n")
c = Cycle(); c.self = c
del c
gc.disable()  # no collection runs before the line: one that frees the cycle is the interpreter's exit
sys.argv = ["evalkit", *sys.argv[1:]]
entry.main()
"""


def test_an_interrupted_run_exits_without_the_interpreter_s_final_collections(ke_dir, tmp_path) -> None:
    """The lines of an interrupted run came within 0.3 s but the process took 8-11 s more to
    exit: the interpreter's final garbage collections over litellm's and pydantic's heap.
    After the line, atexit handlers run and no collection does."""
    args = ["benchmark=ke", f"benchmark.pilot_path={ke_dir / 'pilot.jsonl'}", "model=reference", "tracking=none",
            f"run.output_root={tmp_path}"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED, *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=time_limit(120))  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert "evalkit: interrupted" in proc.stderr and "atexit ran" in proc.stderr
    assert "collected after the line" not in proc.stderr, proc.stderr


def test_a_budget_refusal_leaves_no_run_directory(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules})
    root = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"^run.max_cost_usd: a batch of 12 requests may cost up to"):
        _run(_args(ke_dir, fake_openai, root, "run.batch=true", "run.max_cost_usd=0.001", "run.cache=false"))
    assert not (root / "runs").exists() or not [p for p in (root / "runs").rglob("*") if p.is_dir() and not any(p.iterdir())]
    assert not list(root.rglob("config.yaml")) and not list(root.rglob("evalkit.log"))
    assert fake_openai.files == {}


def test_a_live_resume_of_a_detached_batch_is_refused_before_ray_starts(fake_openai, rules, ke_dir, tmp_path, monkeypatch) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"hold": True}})
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.cache=false")
    assert _run(args + ["run.batch=true", *FAST_POLL, f"run.dir={run_dir}", "run.batch_detach=true"]).exit_code == 3
    import evalkit.engine.run as engine_run

    started = []
    monkeypatch.setattr(engine_run, "ensure_ray", lambda *a, **k: started.append(a) or pytest.fail("Ray started"))
    with pytest.raises(RunDirError, match="batches not yet collected"):
        _run(args + [f"run.resume={run_dir}"])
    assert started == []
    fake_openai.set_batch_plan({})
