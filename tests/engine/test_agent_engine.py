"""ACEBench agent rollouts through the real engine: reference in process, scripted HTTP
models on Ray, failed actors recorded, concurrency-independent results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.engine.journal import read_jsonl
from evalkit.jsonl import unit_file_name

AGENT = "benchmark.subsets=[agent_multi_step,agent_multi_turn]"


@pytest.mark.slow
def test_reference_agent_scores_one_on_all_100_rollouts(run_eval):
    res = run_eval(["model=reference", AGENT, "benchmark.language=all"])
    m = res.summary["metrics"]
    assert res.summary["status"] == "complete" and res.summary["n_scored"] == 100
    for lang in ("en", "zh"):
        for cat in ("agent_multi_step", "agent_multi_turn"):
            assert m[f"accuracy/{lang}/{cat}"] == 1.0
            assert m[f"process_acc/{lang}/{cat}"] == 1.0
    assert m["overall"] == 1.0
    rows = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert len(rows) == 100 and all(r["trajectory"]["data"]["end_state"] for r in rows)
    assert len(list((res.run_dir / "trajectories").glob("*.json"))) == 100
    report = (res.run_dir / "report.md").read_text()
    assert "agent_multi_turn" in report and "process_acc" in report


def _opening_line(acebench_dir: Path) -> str:
    prompts = json.loads((acebench_dir / "prompts.json").read_text())["prompts"]
    return prompts["model_inference/multi_turn/APIModel_user.py::APIUSER.get_init_prompt.first_user_turn.en"]


def _http_models(fake, *extra: str) -> list[str]:
    return [
        "model=openai_compatible",
        "model.provider_model=openai/fake",
        f"backend.api_base={fake.api_base}",
        "backend.retry_initial_wait_s=0.01",
        "benchmark.user_model=openai_compatible",
        f"benchmark.user_overrides=['model.provider_model=openai/fake-user','backend.api_base={fake.api_base}']",
        "benchmark.max_dialog_turns=8",
        "run.cache=false",
        *extra,
    ]


IDS = "run.sample_ids=[en/agent_multi_step_0,en/agent_multi_step_3,en/agent_multi_turn_0,en/agent_multi_turn_5]"


@pytest.mark.slow
def test_failing_user_simulator_is_recorded_as_a_user_failure(fake_openai, ray_address, acebench_dir, run_eval):
    fake_openai.set_plan(
        {"default": {"content": "[turn_on_wifi()]"}, "rules": [{"match": _opening_line(acebench_dir), "always_status": 400}]}
    )
    res = run_eval(_http_models(fake_openai, IDS))
    failed = {f["sample_id"]: f for f in read_jsonl(res.run_dir / "failed.jsonl")}
    assert {sid: (f["actor"], f["error_kind"]) for sid, f in failed.items()} == {
        "en/agent_multi_turn_0": ("user", "client_error"),
        "en/agent_multi_turn_5": ("user", "client_error"),
    }
    scored = {r["sample_id"] for r in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert scored == {"en/agent_multi_step_0", "en/agent_multi_step_3"}
    assert res.summary["status"] == "incomplete" and "overall" not in res.summary["metrics"]


@pytest.mark.slow
def test_failing_agent_is_recorded_as_an_agent_failure(fake_openai, ray_address, run_eval):
    fake_openai.set_plan({"default": {"content": "[turn_on_wifi()]", "always_status": 500}})
    res = run_eval(_http_models(fake_openai, "backend.max_retries=1", "run.sample_ids=[en/agent_multi_step_0]"))
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["actor"], f["error_kind"], f["attempts"]) for f in failed] == [
        ("en/agent_multi_step_0", "agent", "server_error", 2)
    ]


@pytest.mark.slow
def test_concurrency_1_and_8_give_identical_rollouts(fake_openai, ray_address, run_eval):
    fake_openai.set_plan({"default": {"content": "[turn_on_wifi(), login_device()]", "latency_s": 0.01}})
    outcomes = []
    for conc in (1, 8):
        res = run_eval(_http_models(fake_openai, IDS, f"backend.concurrency={conc}"))
        assert res.summary["status"] == "complete"
        rows = sorted(read_jsonl(res.run_dir / "predictions.jsonl"), key=lambda r: r["sample_id"])
        outcomes.append([(r["sample_id"], r["scores"], r["parsed"], len(r["trajectory"]["messages"])) for r in rows])
        assert all(r["n_turns"] > 1 for r in rows)
    assert outcomes[0] == outcomes[1]
    assert len(outcomes[0]) == 4


@pytest.mark.slow
@pytest.mark.llm
def test_smollm2_agent_rollouts_leave_transcripts(llama_api_base, ray_address, run_eval):
    """The embedded model as agent and as user simulator (short budgets to stay fast): one
    multi-turn sample, where both act (a multi-step sample, the agent alone, took CI another
    90 s; the tests above run multi-step samples against the fake server)."""
    res = run_eval(
        [
            "model=smollm2",
            f"backend.api_base={llama_api_base}",
            "benchmark.user_model=smollm2",
            f"benchmark.user_overrides=['backend.api_base={llama_api_base}','model.dataset_args.acebench.generation.max_tokens=8']",
            "benchmark.max_dialog_turns=4",
            "model.dataset_args.acebench.generation.max_tokens=8",
            "run.sample_ids=[en/agent_multi_turn_0]",
        ]
    )
    assert res.summary["status"] == "complete", res.summary
    rows = {r["sample_id"]: r for r in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert set(rows) == {"en/agent_multi_turn_0"}
    for row in rows.values():
        traj = json.loads((res.run_dir / "trajectories" / unit_file_name(row["sample_id"], 0)).read_text())
        assert traj["turns"] and all(t["usage"]["completion_tokens"] <= 8 for t in traj["turns"])
        assert len(traj["messages"]) >= 2
    actors = {t["actor"] for t in rows["en/agent_multi_turn_0"]["trajectory"]["turns"]}
    assert actors == {"agent", "user"}


@pytest.mark.slow
def test_reference_full_benchmark_en_is_one_everywhere(run_eval):
    """`python -m evalkit benchmark=acebench model=reference benchmark.language=en`: all 17."""
    res = run_eval(["model=reference", "benchmark.language=en"])
    m = res.summary["metrics"]
    assert res.summary["n_samples"] == 1023 and res.summary["status"] == "complete"
    accuracies = {k: v for k, v in m.items() if k.startswith(("accuracy/", "process_acc/"))}
    assert len(accuracies) == 17 + 6 + 4  # categories, groups, process_acc of 2 multi-turn + 2 agent
    assert set(accuracies.values()) == {1.0}
    assert m["overall"] == pytest.approx(1.0, abs=1e-12) and m["overall_upstream_rounded"] == 1.0


@pytest.mark.slow
def test_reference_full_benchmark_zh_fails_exactly_the_three_unsatisfiable(run_eval):
    res = run_eval(["model=reference", "benchmark.language=zh"])
    rows = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    failed = sorted(r["sample_id"] for r in rows if r["scores"]["accuracy"] != 1.0)
    assert failed == ["zh/normal_atom_object_short_1", "zh/normal_similar_api_2", "zh/normal_similar_api_22"]
    m = res.summary["metrics"]
    assert m["accuracy/normal_similar_api"] == pytest.approx(0.96)
    assert m["accuracy/normal_atom_object_short"] == pytest.approx(0.98)
    assert m["accuracy/AGENT"] == 1.0 and m["accuracy/SPECIAL"] == 1.0
