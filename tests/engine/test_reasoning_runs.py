"""Reasoning models end to end against the fake server: reasoning kept apart and never sent
back, token totals and costs, reasoning_effort in the request identity, the budget that
holds across a resume, the dry run, and strip_reasoning_prefix in a run's records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.engine.journal import read_jsonl
from evalkit.job import outcome_line
from tests.conftest import REPO_ROOT
from tests.engine.test_engine_faults import load_gold

PRICING = ["+model.pricing.input_per_mtok=3", "+model.pricing.output_per_mtok=15", "+model.pricing.cached_input_per_mtok=0.3"]


def _check_schema(summary: dict) -> None:
    import jsonschema

    schema = json.loads((REPO_ROOT / "src" / "evalkit" / "report" / "summary.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(summary)


def _cost(usage: dict) -> float:
    """USD of one answer under PRICING (cached prompt tokens at the cached price)."""
    cached = usage.get("cached_prompt_tokens", 0)
    return ((usage["prompt_tokens"] - cached) * 3 + cached * 0.3 + usage["completion_tokens"] * 15) / 1e6


def _api(fake, *extra: str) -> list[str]:
    return ["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake.api_base}",
            "backend.retry_initial_wait_s=0.01", *extra]  # fmt: skip


def _as_row_usage(server_usage: dict) -> dict:
    out = {"prompt_tokens": server_usage["prompt_tokens"], "completion_tokens": server_usage["completion_tokens"]}
    if "completion_tokens_details" in server_usage:
        out["reasoning_tokens"] = server_usage["completion_tokens_details"]["reasoning_tokens"]
    if "prompt_tokens_details" in server_usage:
        out["cached_prompt_tokens"] = server_usage["prompt_tokens_details"]["cached_tokens"]
    return out


IDS = ["en/normal_atom_bool_0", "en/normal_atom_enum_1", "en/special_irrelevant_2"]


@pytest.fixture(scope="module")
def gold(acebench_dir: Path) -> dict[str, tuple[str, str]]:
    return load_gold(acebench_dir, IDS)


@pytest.mark.slow
def test_reasoning_tokens_and_cost_are_recorded_apart_from_the_answer(fake_openai, ray_address, gold, run_eval, tmp_path):
    """The server reasons in reasoning_content and reports reasoning and cached tokens: the
    answers carry the reasoning apart, the totals are the server's sums, the costs follow the
    model's pricing, and MLflow and the console's last line show them."""
    from mlflow.tracking import MlflowClient

    rules = [{"match": q, "content": a, "reasoning_content": f"thinking about {sid}",
              "usage": {"completion_tokens": 40 + 10 * k, "reasoning_tokens": 30 + 10 * k, "cached_tokens": 8 * k}}
             for k, (sid, (q, a)) in enumerate(sorted(gold.items()))]  # fmt: skip
    fake_openai.set_plan({"rules": rules})
    root = tmp_path / "out"
    res = run_eval(_api(fake_openai, f"run.sample_ids=[{','.join(IDS)}]", "run.cache=false", "tracking=mlflow", *PRICING), output_root=root)
    assert res.summary["status"] == "complete" and res.summary["metrics"]["overall"] == 1.0
    served = {e["last"]: _as_row_usage(e["usage"]) for e in fake_openai.log}
    assert len(fake_openai.log) == 3
    rows = {r["sample_id"]: r for r in read_jsonl(res.run_dir / "predictions.jsonl")}
    for sid, (question, answer) in gold.items():
        row = rows[sid]
        assert row["output"] == answer and row["reasoning"] == f"thinking about {sid}"
        assert "thinking" not in row["output"]
        usage = next(u for last, u in served.items() if question in last)
        assert row["usage"] == usage and set(usage) == {"prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_prompt_tokens"}
        assert row["cost_usd"] == pytest.approx(_cost(usage), rel=1e-9)
        assert row["spent_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    totals = {k: sum(u[k] for u in served.values()) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_prompt_tokens")}
    assert res.summary["usage"] == totals and totals["reasoning_tokens"] == 30 + 40 + 50
    assert res.summary["cost_usd"] == pytest.approx(sum(_cost(u) for u in served.values()), rel=1e-6)
    assert res.summary["spent_tokens"] == totals["prompt_tokens"] + totals["completion_tokens"]
    assert res.summary["prices"]["agent"].endswith("(model.pricing)")
    assert res.summary["reasoning"]["n_with_reasoning"] == 3 and res.summary["reasoning"]["strip_reasoning_prefix"] is False
    by_subset = res.summary["usage_by_subset"]["normal_atom_enum"]
    assert by_subset["n"] == 1 and by_subset["reasoning_tokens"] == rows["en/normal_atom_enum_1"]["usage"]["reasoning_tokens"]
    assert f"cost ${res.summary['cost_usd']:.4f}" in outcome_line(res)
    _check_schema(res.summary)
    run_id = json.loads((res.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    metrics = MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}").get_run(run_id).data.metrics
    assert metrics["tokens/reasoning_tokens"] == 120 and metrics["cost_usd"] == pytest.approx(res.summary["cost_usd"])


@pytest.mark.slow
def test_an_orphan_closing_tag_from_a_served_model_is_stripped_when_asked(fake_openai, ray_address, gold, run_eval):
    """A served reasoning model whose chat template swallowed <think>: its content starts
    with the reasoning and an orphan </think>."""
    sid = "en/normal_atom_enum_1"
    question, answer = gold[sid]
    fake_openai.set_plan({"rules": [{"match": question, "content": answer, "think_prefix": "Let me see. [wrong_call()]"}]})
    res = run_eval(_api(fake_openai, f"run.sample_ids=[{sid}]", "run.cache=false", "benchmark.strip_reasoning_prefix=true"))
    row = next(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert row["output_unstripped"] == f"Let me see. [wrong_call()]\n</think>\n\n{answer}"
    assert row["output"] == f"\n\n{answer}" and row["scores"]["accuracy"] == 1.0
    assert row["reasoning_rule"].startswith("strip_reasoning_prefix") and res.summary["reasoning"]["n_stripped"] == 1


@pytest.mark.slow
def test_a_provider_without_usage_gives_null_never_zero(fake_openai, ray_address, gold, run_eval):
    fake_openai.set_plan({"default": {"content": "[]", "no_usage": True}})
    res = run_eval(_api(fake_openai, "run.sample_ids=[en/normal_atom_bool_0]", "run.cache=false", *PRICING))
    row = next(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert row["usage"] is None and row["cost_usd"] is None and row["spent_tokens"] is None
    assert res.summary["usage"] == {} and res.summary["cost_usd"] is None
    assert "cost unknown" in outcome_line(res)


@pytest.mark.slow
def test_reasoning_effort_reaches_the_server_and_is_part_of_the_request_identity(fake_openai, ray_address, run_eval, tmp_path):
    fake_openai.set_plan({"default": {"content": "[]"}})
    root = tmp_path / "out"
    base = _api(fake_openai, "benchmark.subsets=[normal_atom_bool]", "run.limit=2")
    run_eval([*base, "benchmark.generation.reasoning_effort=high"], output_root=root)
    assert [e["reasoning"] for e in fake_openai.log] == [{"reasoning_effort": "high"}] * 2
    fake_openai.set_plan({"default": {"content": "[]"}})
    run_eval([*base, "benchmark.generation.reasoning_effort=high"], output_root=root)
    assert fake_openai.log == []  # the same effort: answered from the cache
    res = run_eval([*base, "benchmark.generation.reasoning_effort=low"], output_root=root)
    assert [e["reasoning"] for e in fake_openai.log] == [{"reasoning_effort": "low"}] * 2  # another effort: a miss
    assert res.summary["generation_params"]["reasoning_effort"] == "low"
    assert all(r["cost_usd"] is None for r in read_jsonl(res.run_dir / "predictions.jsonl"))  # openai/fake has no price


@pytest.mark.slow
def test_no_request_carries_an_earlier_turns_reasoning(fake_openai, ray_address, run_eval, shared_data_dir):
    """ACEBench rollouts (agent and user simulator) and a SOBHard session: the server
    reasons on every answer; no later request holds that reasoning, as text or as field."""
    mark = "SECRET-REASONING-7f3a"
    fake_openai.set_plan({"default": {"content": "Is there anything else I can do?", "reasoning_content": mark}})  # routed to the user
    ace = run_eval(_api(fake_openai, "benchmark.user_model=openai_compatible", "benchmark.max_dialog_turns=6", "run.cache=false",
                        f"benchmark.user_overrides=['model.provider_model=openai/fake-user','backend.api_base={fake_openai.api_base}']",
                        "run.sample_ids=[en/agent_multi_step_0,en/agent_multi_turn_0]"))  # fmt: skip
    ace_log = list(fake_openai.log)
    fake_openai.set_plan({"default": {"content": "```json\n[]\n```", "reasoning_content": mark}})
    sob = run_eval(_api(fake_openai, "benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}",
                        "run.sample_ids=[22]", "run.cache=false"))  # fmt: skip
    sob_log = list(fake_openai.log)
    assert ace.summary["status"] == sob.summary["status"] == "complete"
    history = [e for e in ace_log if e["model"] == "fake-user" and len(e["messages"]) > 2]
    assert len(ace_log) >= 6 and history  # the user simulator's requests hold its earlier replies (role system)
    assert len(sob_log) == 1 and [m["role"] for m in sob_log[0]["messages"]].count("assistant") >= 1  # replayed turns
    for entry in ace_log + sob_log:
        assert mark not in json.dumps(entry["messages"], ensure_ascii=False)
        assert all(set(m) <= {"role", "content"} for m in entry["messages"])
    rows = list(read_jsonl(ace.run_dir / "predictions.jsonl")) + list(read_jsonl(sob.run_dir / "predictions.jsonl"))
    assert all(r["reasoning"] and mark in r["reasoning"] for r in rows)  # kept in the record, apart
    rollout = next(r for r in rows if r["sample_id"] == "en/agent_multi_turn_0")
    assert set(rollout["usage_by_actor"]) == {"agent", "user"} and rollout["usage_by_actor"]["user"]["prompt_tokens"] > 0


@pytest.mark.slow
def test_a_budget_stops_the_run_and_a_resume_with_a_larger_one_completes_it(fake_openai, ray_address, acebench_dir, run_eval, tmp_path):
    """Six samples at the same cost c each, run one at a time under a run.max_cost_usd that
    has room for three answers and the upper bound of a fourth request, not for four answers
    and a fifth bound: three are sent, the three others fail as budget_exceeded (nothing
    sent), the run is incomplete; resumed with a larger budget it sends exactly those three
    and ends with the metrics of the same run without a budget, its spend counted across both
    attempts. (A request's upper bound here: its prompt estimate ×1.25 + 64 tokens and
    max_tokens=1200, between $0.0232 and $0.0271; c = $0.018.)"""
    ids = [f"en/normal_atom_bool_{i}" for i in range(6)]
    gold = load_gold(acebench_dir, ids)
    usage = {"prompt_tokens": 1000, "completion_tokens": 1000, "reasoning_tokens": 600}
    rules = [{"match": q, "content": a, "usage": usage} for sid, (q, a) in gold.items() if int(sid[-1]) % 2 == 0]
    plan = {"default": {"content": "[]", "usage": usage}, "rules": rules}
    c = _cost(usage)
    limit = 2 * c + 0.03  # 2c + any bound fits; 3c + any bound does not
    base = _api(fake_openai, f"run.sample_ids=[{','.join(ids)}]", "run.cache=false", "backend.concurrency=1", *PRICING)
    fake_openai.set_plan(plan)
    free = run_eval(base, output_root=tmp_path / "free")
    assert free.summary["status"] == "complete" and free.summary["metrics"]["overall"] == 0.5
    fake_openai.set_plan(plan)
    first = run_eval([*base, f"run.max_cost_usd={limit}"], output_root=tmp_path / "budget")
    assert first.exit_code == 1 and first.summary["status"] == "incomplete" and first.summary["metrics"] == {}
    assert {sid for sid, (q, _) in gold.items() for e in fake_openai.log if q in e["last"]} == set(ids[:3])
    assert len(fake_openai.log) == 3
    failed = list(read_jsonl(first.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"], f["attempts"]) for f in failed] == [(sid, "budget_exceeded", 0) for sid in ids[3:]]
    assert "run.max_cost_usd" in failed[0]["message"] and f"run.resume={first.run_dir}" in failed[0]["message"]
    assert first.summary["budget"] == {"max_cost_usd": limit, "max_total_tokens": None, "reached": True, "not_sent": 3}
    assert first.summary["cost_usd"] == pytest.approx(3 * c, rel=1e-6) and first.summary["cost_usd"] <= limit
    assert "budget_exceeded: 3" in outcome_line(first)
    _check_schema(first.summary)
    fake_openai.set_plan(plan)
    second = run_eval([*base, f"run.max_cost_usd={100 * c}", f"run.resume={first.run_dir}"], output_root=tmp_path / "budget")
    assert len(fake_openai.log) == 3 and second.exit_code == 0
    assert {sid for sid, (q, _) in gold.items() for e in fake_openai.log if q in e["last"]} == set(ids[3:])
    assert second.summary["metrics"] == free.summary["metrics"]
    assert second.summary["cost_usd"] == pytest.approx(6 * c, rel=1e-6) and second.summary["budget"]["reached"] is False


@pytest.mark.slow
def test_a_token_budget_already_spent_sends_nothing_more(fake_openai, ray_address, run_eval, tmp_path):
    """Two answers fit the token budget, not a third request's upper bound (the bounds of the
    first three: 3,428, 2,933 and 3,431 tokens); a resume under the same budget sends nothing,
    as the spend is counted across attempts."""
    fake_openai.set_plan({"default": {"content": "[]", "usage": {"prompt_tokens": 700, "completion_tokens": 300}}})
    base = _api(fake_openai, "benchmark.subsets=[normal_atom_bool]", "run.limit=4", "run.cache=false", "backend.concurrency=1")
    first = run_eval([*base, "run.max_total_tokens=5000"])
    assert len(fake_openai.log) == 2 and first.summary["spent_tokens"] == 2000
    assert first.summary["failed_by_kind"] == {"budget_exceeded": 2}
    fake_openai.set_plan({"default": {"content": "[]"}})
    again = run_eval([*base, "run.max_total_tokens=5000", f"run.resume={first.run_dir}"])
    assert fake_openai.log == [] and again.summary["failed_by_kind"] == {"budget_exceeded": 2}  # spent across resumes


@pytest.mark.slow
def test_a_resume_past_an_unmeasured_spend_says_what_to_do(fake_openai, ray_address, acebench_dir, run_eval, tmp_path):
    """A first attempt without a budget journals answers without usage (spend unknown) and one
    failure; a resume with a token budget, even 1e9, cannot check the spend and says exactly
    how to go on."""
    ids = [f"en/normal_atom_bool_{i}" for i in range(3)]
    gold = load_gold(acebench_dir, ids)
    fake_openai.set_plan({"default": {"content": "[]", "no_usage": True}, "rules": [{"match": gold[ids[0]][0], "always_status": 503}]})
    base = _api(fake_openai, f"run.sample_ids=[{','.join(ids)}]", "run.cache=false", "backend.concurrency=1", "backend.max_retries=0")
    first = run_eval(base)
    assert first.summary["spent_tokens"] is None and first.summary["n_failed"] == 1
    again = run_eval([*base, "run.max_total_tokens=1000000000", f"run.resume={first.run_dir}"])
    failed = list(read_jsonl(first.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"]) for f in failed] == [(ids[0], "budget_exceeded")]
    assert "run.max_total_tokens cannot be checked" in failed[0]["message"] and "run.max_total_tokens=null" in failed[0]["message"]
    assert again.exit_code == 1


@pytest.mark.slow
def test_dry_run_sends_and_writes_nothing(fake_openai, ray_address, acebench_dir, tmp_path, capsys):
    from evalkit.cli import run_config
    from evalkit.compose import compose
    from evalkit.job import dry_run, run_composed
    from tests.conftest import base_overrides

    fake_openai.set_plan({"default": {"content": "[]"}})
    root = tmp_path / "out"
    args = [*base_overrides(root, acebench_dir), "tracking=mlflow", *_api(fake_openai, "benchmark.subsets=[normal_atom_bool,agent_multi_step]",
            "run.dry_run=true", *PRICING)]  # fmt: skip
    assert run_config(compose(args)) == 0
    line = capsys.readouterr().out.strip()
    dry = run_composed(compose([*args, "run.limit=7"]))
    n_selected = 50 + 20  # normal_atom_bool, agent_multi_step (en)
    assert line.startswith(f"evalkit: dry run: acebench × openai_compatible: {n_selected} requests, ~")
    assert "20 of them open agent rollouts, counted by their first turn only: a lower bound" in line
    assert "nothing sent, nothing written" in line and "estimated cost ≥ $" in line
    assert dry.requests == 7 and dry.rollouts == 0 and dry.prompt_tokens > 7 * 100
    assert dry.cost_usd == pytest.approx(dry.prompt_tokens * 3 / 1e6, rel=1e-9)
    assert fake_openai.log == [] and not root.exists()  # no run directory, no MLflow store, no cache
    from evalkit.compose import resolve

    offline = dry_run(resolve(compose([*base_overrides(root, acebench_dir), "model=reference", "run.limit=3", "run.dry_run=true"]))[1])
    assert offline.requests == 3 and offline.cost_usd == 0.0 and not root.exists()


@pytest.mark.slow
def test_strip_reasoning_prefix_in_a_run_its_summary_report_and_rescore(run_eval, shared_data_dir, tmp_path):
    """SOBHard replay of 'reasoning text, </think>, the reference answer': 0 under the
    official rule, 1 with the prefix stripped; the records and the report say which."""
    from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
    from evalkit.rescore import rescore

    bench = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    samples = bench.load()[:3]
    replay = tmp_path / "outputs.jsonl"
    outputs = {s.id: "reasoning text\n</think>\n\n" + bench.reference_output(s) for s in samples}
    replay.write_text("".join(json.dumps({"sample_id": k, "output": v}) + "\n" for k, v in outputs.items()), encoding="utf-8")
    args = ["benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}", "model=replay", f"model.path={replay}",
            f"run.sample_ids=[{','.join(outputs)}]"]  # fmt: skip
    off = run_eval(args)
    on = run_eval([*args, "benchmark.strip_reasoning_prefix=true"])
    assert off.summary["metrics"]["sample_pass_rate"] == 0.0 and on.summary["metrics"]["sample_pass_rate"] == 1.0
    off_rows, on_rows = list(read_jsonl(off.run_dir / "predictions.jsonl")), list(read_jsonl(on.run_dir / "predictions.jsonl"))
    assert all("output_unstripped" not in r and r["output"] == outputs[r["sample_id"]] for r in off_rows)
    assert all(r["output_unstripped"] == outputs[r["sample_id"]] and "</think>" not in r["output"] for r in on_rows)
    assert {r["reasoning_rule"] for r in off_rows} == {bench.reasoning_rule}
    assert {r["reasoning_rule"] for r in on_rows} == {f"strip_reasoning_prefix (text up to the last </think> removed), then {bench.reasoning_rule}"}
    assert on.summary["reasoning"] == {"rule": on_rows[0]["reasoning_rule"], "strip_reasoning_prefix": True, "n_stripped": 3, "n_with_reasoning": 0}
    assert "Reasoning prefix stripped" in (on.run_dir / "report.md").read_text(encoding="utf-8")
    assert "Reasoning prefix stripped" not in (off.run_dir / "report.md").read_text(encoding="utf-8")
    assert on.summary["cost_usd"] == 0.0  # offline: free by declaration
    for run in (off, on):
        result = rescore(run.run_dir)
        assert result["changed"] == [] and result["metrics"] == result["recorded"]
