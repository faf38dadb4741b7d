"""run.batch=true end to end against the fake server's Files and Batches endpoints (KE, 12
graded samples): the same predictions and scores as a live run at the batch price, a killed
driver resumed without a second submission (counted at the server), an expired batch
resumed with only its unanswered requests, splitting, cancel, budgets, refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from evalkit.compose import compose, resolve
from evalkit.engine.journal import read_jsonl
from evalkit.errors import ConfigError, RunDirError
from evalkit.job import dry_run, run_validated
from tests.conftest import evalkit_cmd
from tests.support.host import time_limit

pytestmark = pytest.mark.slow

MODEL = "openai/gpt-4o-2024-11-20"  # litellm's price map: 2.5e-6 / 1e-5 live, 1.25e-6 / 5e-6 batched
FAST_POLL = ["run.batch_poll_s=0.01", "run.batch_poll_max_s=0.05"]


@pytest.fixture(scope="module")
def ke_dir(shared_data_dir: Path) -> Path:
    return shared_data_dir / "ke"


@pytest.fixture(scope="module")
def rules(ke_dir: Path) -> list[dict]:
    """Gold answers for half the samples, a wrong-ish one for the other half (so that the
    scores are not all 1: a batch run must reproduce each one)."""
    out = []
    rows = [json.loads(x) for x in (ke_dir / "pilot.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    for i, r in enumerate(rows):
        gold = r["gold_step_ids"]
        answer = gold if i % 2 == 0 else gold[:1] + ["step_001"]
        out.append({"match": "Task: " + r["user_task"] + "\n\nTrajectory Steps:", "content": ", ".join(answer)})
    return out


def _args(ke_dir: Path, fake, root: Path, *extra: str) -> list[str]:
    return [
        "benchmark=ke", f"benchmark.pilot_path={ke_dir / 'pilot.jsonl'}", f"benchmark.icl_path={ke_dir / 'icl_examples.jsonl'}",
        "model=openai_compatible", f"model.provider_model={MODEL}", f"backend.api_base={fake.api_base}",
        f"run.output_root={root}", "tracking=none", "run.progress=false", "backend.max_retries=0", *extra,
    ]  # fmt: skip


def _run(args: list[str]):
    _, cfg = resolve(compose(args))
    return run_validated(cfg)


def _rows(run_dir: Path, name: str = "predictions.jsonl") -> dict[str, dict]:
    return {r["sample_id"]: r for r in read_jsonl(run_dir / name)}


def _ledger(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "batch" / "batches.json").read_text(encoding="utf-8"))["batches"]


def test_batch_run_gives_the_live_run_s_predictions_at_the_batch_price(fake_openai, ray_address, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules})
    live = _run(_args(ke_dir, fake_openai, tmp_path / "live", f"runner.address={ray_address}"))
    live_log = list(fake_openai.log)
    fake_openai.set_plan({"rules": rules})
    batched = _run(_args(ke_dir, fake_openai, tmp_path / "batch", "run.batch=true", *FAST_POLL))
    assert fake_openai.log == [], "a batch run sent a live request"
    assert fake_openai.batch_submissions == 1
    assert live.summary["status"] == batched.summary["status"] == "complete"
    assert 0 < batched.summary["metrics"]["f1_macro"] < 1
    assert batched.summary["metrics"] == live.summary["metrics"]
    a, b = _rows(live.run_dir), _rows(batched.run_dir)
    assert len(a) == 12
    for sid, row in a.items():
        for key in ("output", "parsed", "scores", "status", "request_hash", "prompt_hash", "usage"):
            assert b[sid][key] == row[key], (sid, key)
    # what the batch sent is what the live run sent: each body carries the live request's parameters
    (sub,) = fake_openai.batch_log
    assert sorted(sub["custom_ids"]) == sorted(r["request_hash"] for r in a.values())
    live_params = sorted(json.dumps(e["params"], sort_keys=True) for e in live_log)
    params = ("temperature", "max_tokens", "top_p", "stop", "seed")
    assert sorted(json.dumps({k: body.get(k) for k in params}, sort_keys=True) for body in sub["bodies"]) == live_params
    assert sorted(json.dumps(body["messages"]) for body in sub["bodies"]) == sorted(json.dumps(e["messages"]) for e in live_log)
    # cost: every row at litellm's batch price, the live run at the live price
    for sid, row in b.items():
        u = row["usage"]
        assert row["cost_usd"] == pytest.approx(u["prompt_tokens"] * 1.25e-6 + u["completion_tokens"] * 5e-6, rel=1e-9)
        assert a[sid]["cost_usd"] == pytest.approx(2 * row["cost_usd"], rel=1e-9)
    assert batched.summary["cost_usd"] == pytest.approx(live.summary["cost_usd"] / 2, rel=1e-9)
    engine = batched.summary["engine"]
    assert engine["batch"]["batched"] is True and engine["batch"]["requests_batched"] == 12
    (entry,) = engine["batch"]["batches"]
    assert entry["batch_id"] == sub["batch_id"] and entry["status"] == "completed" and entry["submitted_at"]
    assert "batch_wait_s" in engine["phases"] and "ray_start_s" not in engine["phases"]


def test_live_cache_hits_are_not_put_in_the_batch(fake_openai, ray_address, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules})
    root = tmp_path / "out"
    live = _run(_args(ke_dir, fake_openai, root, f"runner.address={ray_address}", "run.limit=4"))
    bought = {r["request_hash"] for r in _rows(live.run_dir).values()}
    batched = _run(_args(ke_dir, fake_openai, root, "run.batch=true", *FAST_POLL))
    assert batched.summary["status"] == "complete"
    (sub,) = fake_openai.batch_log
    assert len(sub["custom_ids"]) == 8 and not bought & set(sub["custom_ids"])
    rows = _rows(batched.run_dir)
    assert sum(r["cached"] for r in rows.values()) == 4 and batched.summary["engine"]["batch"]["cache_hits"] == 4
    assert all(rows[s]["cost_usd"] == 0 for s in rows if rows[s]["request_hash"] in bought)


def test_killed_driver_resumes_the_same_batch_without_a_second_submission(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"hold": True}})
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, f"run.dir={run_dir}", "run.cache=false")
    proc = subprocess.Popen(evalkit_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + time_limit(120)
        while time.time() < deadline and not (fake_openai.batch_submissions and _polled(fake_openai)):
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
        ids = [e["batch_id"] for e in _ledger(run_dir)]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert fake_openai.batch_submissions == 1 and ids == [fake_openai.batch_log[0]["batch_id"]]
    fake_openai.set_batch_plan({})
    again = _run(args[:-2] + [f"run.resume={run_dir}", "run.cache=false"])
    assert again.summary["status"] == "complete" and len(_rows(run_dir)) == 12
    assert fake_openai.batch_submissions == 1, "the resume submitted the batch again"
    assert [e["batch_id"] for e in _ledger(run_dir)] == ids


def test_ctrl_c_leaves_the_batch_running_and_names_the_resume(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"hold": True}})
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, f"run.dir={run_dir}", "run.cache=false")
    proc = subprocess.Popen(evalkit_cmd(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + time_limit(120)
        while time.time() < deadline and not (fake_openai.batch_submissions and _polled(fake_openai)):
            assert proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=time_limit(60))  # a hang guard, scaled by the host's load (issue 35 item 13)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.decode()
    assert proc.returncode == 130, text
    (batch_id,) = list(fake_openai.batches)
    assert f"batches left running at the provider: {batch_id}" in text and f"run.resume={run_dir}" in text
    assert fake_openai.batches[batch_id]["status"] == "in_progress"  # not cancelled
    assert [e["batch_id"] for e in _ledger(run_dir)] == [batch_id]


def test_a_live_resume_of_an_expired_batch_run_asks_only_what_is_missing(fake_openai, ray_address, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"expire_after": 9}})
    run_dir = tmp_path / "run"
    common = _args(ke_dir, fake_openai, tmp_path / "out", "run.cache=false")
    first = _run(common + ["run.batch=true", *FAST_POLL, f"run.dir={run_dir}"])
    assert first.summary["status"] == "incomplete" and len(_rows(run_dir)) == 9
    missing = {r["request_hash"] for r in _rows(run_dir, "failed.jsonl").values()}
    again = _run(common + [f"run.resume={run_dir}", f"runner.address={ray_address}"])
    assert again.summary["status"] == "complete" and 0 < again.summary["metrics"]["f1_macro"] < 1
    assert len(fake_openai.log) == 3 and fake_openai.batch_submissions == 1
    assert {r["request_hash"] for r in _rows(run_dir).values() if r["latency_s"] > 0} == missing  # the live answers


def _polled(fake) -> bool:
    return any(n >= 2 for n in fake.batch_polls.values())


def test_detach_exits_3_and_a_batch_created_but_not_recorded_is_found_not_made_again(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules})
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, "run.cache=false",
                 "backend.api_key=sk-batch-secret-4242")  # fmt: skip
    first = _run(args + [f"run.dir={run_dir}", "run.batch_detach=true"])
    assert first.exit_code == 3 and first.summary["status"] == "batch_submitted"
    assert not (run_dir / "summary.json").exists() and fake_openai.batch_submissions == 1
    (entry,) = _ledger(run_dir)
    assert entry["file_id"] and entry["batch_id"] == fake_openai.batch_log[0]["batch_id"] and len(entry["input_sha256"]) == 64
    # a driver killed between the provider's create and the record: the file id is all it kept
    entry.update(batch_id=None, status="uploaded")
    (run_dir / "batch" / "batches.json").write_text(json.dumps({"batches": [entry]}), encoding="utf-8")
    again = _run(args + [f"run.resume={run_dir}"])
    assert again.summary["status"] == "complete" and again.exit_code == 0
    assert fake_openai.batch_submissions == 1 and len(fake_openai.files) == 2  # the input and the output: no second input
    assert _ledger(run_dir)[0]["batch_id"] == fake_openai.batch_log[0]["batch_id"]
    assert not [p for p in run_dir.rglob("*") if p.is_file() and b"sk-batch-secret-4242" in p.read_bytes()]


def test_expired_batch_leaves_failures_and_a_resume_sends_only_those(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"expire_after": 5}})
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, "run.cache=false")
    first = _run(args + [f"run.dir={run_dir}"])
    s = first.summary
    assert s["status"] == "incomplete" and first.exit_code == 1 and not s["metrics"]
    failed = _rows(run_dir, "failed.jsonl")
    assert len(_rows(run_dir)) == 5 and len(failed) == 7
    assert {r["error_kind"] for r in failed.values()} == {"batch_expired"}
    assert all(r["cost_usd"] == 0 for r in failed.values())
    fake_openai.set_batch_plan({})
    again = _run(args + [f"run.resume={run_dir}"])
    assert again.summary["status"] == "complete" and 0 < again.summary["metrics"]["f1_macro"] < 1
    assert fake_openai.batch_submissions == 2
    assert sorted(fake_openai.batch_log[1]["custom_ids"]) == sorted(r["request_hash"] for r in failed.values())


def test_completion_mode_is_batched_on_the_completions_endpoint(fake_openai, ke_dir, tmp_path) -> None:
    rows = [json.loads(x) for x in (ke_dir / "pilot.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    rules = []
    for r in rows:  # the prompt ends in '- step_': the continuation is the rest of the gold list
        gold = r["gold_step_ids"]
        rules.append({"match": "Task: " + r["user_task"] + "\n\nTrajectory Steps:",
                      "content": gold[0][len("step_"):] + "".join(f"\n- {g}" for g in gold[1:])})  # fmt: skip
    fake_openai.set_plan({"rules": rules})
    res = _run(_args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, "run.cache=false",
                     "model.api=completion", "shots=0"))  # fmt: skip
    assert res.summary["status"] == "complete" and res.summary["metrics"]["f1_macro"] == 1.0
    (sub,) = fake_openai.batch_log
    assert sub["endpoint"] == "/v1/completions" and all(b["prompt"].endswith("- step_") for b in sub["bodies"])
    row = _rows(res.run_dir)["code_ke_834b34a9"]
    assert row["raw_output"] == "000\n- step_004\n- step_005" and row["output"].endswith("step_000\n- step_004\n- step_005")


def test_partial_failure_and_a_failed_batch_are_failures_never_scores(fake_openai, rules, ke_dir, tmp_path) -> None:
    ids = [json.loads(x)["sample_id"] for x in (ke_dir / "pilot.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    broken = [dict(rules[ids.index("code_ke_834b34a9")], always_status=400)] + rules  # the first matching rule wins
    fake_openai.set_plan({"rules": broken})
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, "run.cache=false")
    res = _run(args + [f"run.dir={tmp_path / 'a'}"])
    assert res.summary["status"] == "incomplete" and not res.summary["metrics"]
    (failed,) = _rows(res.run_dir, "failed.jsonl").values()
    assert failed["error_kind"] == "batch_failed" and failed["message"] == "HTTP 400: scripted 400"
    assert len(_rows(res.run_dir)) == 11
    fake_openai.set_plan({"rules": rules, "batch": {"fail_validation": True}})
    res = _run(args + [f"run.dir={tmp_path / 'b'}"])
    failed = _rows(res.run_dir, "failed.jsonl")
    assert len(failed) == 12 and {r["error_kind"] for r in failed.values()} == {"batch_failed"}
    assert all("ended failed" in r["message"] and "invalid_request" in r["message"] for r in failed.values())
    assert not (res.run_dir / "predictions.jsonl").read_text()


def test_a_batch_over_the_provider_s_limits_is_split(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"max_requests": 5}})
    res = _run(_args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, "run.cache=false",
                     "run.batch_max_requests=5"))  # fmt: skip
    assert res.summary["status"] == "complete"
    assert [len(b["custom_ids"]) for b in fake_openai.batch_log] == [5, 5, 2]
    assert len({h for b in fake_openai.batch_log for h in b["custom_ids"]}) == 12


def test_cancel_cancels_the_provider_s_batches(fake_openai, ray_address, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules, "batch": {"hold": True}})
    run_dir = tmp_path / "run"
    args = _args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", *FAST_POLL, "run.cache=false")
    assert _run(args + [f"run.dir={run_dir}", "run.batch_detach=true"]).exit_code == 3
    with pytest.raises(RunDirError, match="batches not yet collected"):  # a live resume would buy them twice
        _run(args[:-len(FAST_POLL) - 2] + ["run.cache=false", f"run.resume={run_dir}", f"runner.address={ray_address}"])
    res = _run(args + [f"run.resume={run_dir}", "run.batch_cancel=true"])
    (batch,) = fake_openai.batches.values()
    assert batch["status"] == "cancelled" and fake_openai.batch_submissions == 1
    assert res.summary["status"] == "incomplete"
    assert {r["error_kind"] for r in _rows(run_dir, "failed.jsonl").values()} == {"batch_cancelled"}


def test_a_batch_over_budget_is_refused_before_anything_is_sent(fake_openai, rules, ke_dir, tmp_path) -> None:
    fake_openai.set_plan({"rules": rules})
    with pytest.raises(ConfigError, match=r"^run.max_cost_usd: a batch of 12 requests may cost up to"):
        _run(_args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true", "run.max_cost_usd=0.001"))
    assert fake_openai.batch_submissions == 0 and fake_openai.files == {}


def test_refusals_are_one_line_before_anything_is_written(fake_openai, ke_dir, tmp_path, acebench_dir, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-sent")
    root = tmp_path / "out"
    with pytest.raises(ConfigError, match="run.batch: provider deepseek .*DeepSeek has no batch API"):
        _run(_args(ke_dir, fake_openai, root, "run.batch=true", "model.provider_model=deepseek/deepseek-chat"))
    agent = ["benchmark=acebench", f"benchmark.data_dir={acebench_dir}", "benchmark.subsets=[agent_multi_turn]",
             "model=openai_compatible", f"model.provider_model={MODEL}", f"backend.api_base={fake_openai.api_base}",
             "benchmark.user_model=gpt4o", f"run.output_root={root}", "tracking=none", "run.batch=true"]  # fmt: skip
    with pytest.raises(ConfigError, match="run.batch: .* multi-turn agent rollouts"):
        _run(agent)
    assert not root.exists()


def test_dry_run_prints_the_batched_estimate_beside_the_live_one(fake_openai, ke_dir, tmp_path) -> None:
    _, cfg = resolve(compose(_args(ke_dir, fake_openai, tmp_path / "out", "run.batch=true")))  # KE: max_tokens=1024
    dry = dry_run(cfg)
    live, batched = dry.lines[0], dry.lines[1]
    assert batched.startswith("evalkit: dry run: batched (")
    assert "estimated cost ≥ $" in live and "$1.25 in / $5 out per Mtok (litellm.batch)" in batched
    assert "max_tokens=1024" in batched
    low_live = float(live.split("estimated cost ≥ $")[1].split(" ")[0])
    low_batch = float(batched.split("estimated cost ≥ $")[1].split(",")[0])
    assert low_batch == pytest.approx(low_live / 2, abs=1e-4)
    assert not (tmp_path / "out").exists()
