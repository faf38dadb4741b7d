"""Budgets through whole runs against the fake server (Ray model workers): a token budget worth
10 samples holds at concurrency 1, 16, 64 and 256; an offline ACEBench run with agent_multi_turn
costs exactly 0 under a token budget. (The reservation rules in-process: test_budget.py.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evalkit.engine.journal import read_jsonl
from tests.engine.test_engine_faults import load_gold

pytestmark = pytest.mark.slow  # Ray, the fake server through whole runs

SUBSET = "normal_atom_bool"
N = 40


@pytest.fixture(scope="module")
def sized(acebench_dir: Path) -> dict[str, tuple[str, int, int]]:
    """{sample id: (unique question text, the prompt's token_counter estimate, its reservation in
    tokens)} of the first N samples of SUBSET, with the run's max_tokens."""
    from evalkit.compose import compose, resolve
    from evalkit.engine.budget import Budget
    from evalkit.engine.plan import prepare
    from evalkit.specs import build
    from evalkit.providers import estimate_prompt_tokens

    _, cfg = resolve(compose([f"benchmark.data_dir={acebench_dir}", "model=openai_compatible", "model.provider_model=openai/fake",
                              "backend.api_base=http://127.0.0.1:9/v1", f"benchmark.subsets=[{SUBSET}]", f"run.limit={N}"]))  # fmt: skip
    plan = prepare(build(cfg))
    ids = [u.sample.id for u in plan.units]
    gold = load_gold(acebench_dir, ids)
    out = {}
    for u in plan.units:
        estimate = estimate_prompt_tokens("openai/fake", u.request.messages, u.request.prompt)
        out[u.sample.id] = (gold[u.sample.id][0], estimate, Budget(None, 1, {}).bound("model", estimate, u.request.params.get("max_tokens"))[1])
    return out


@pytest.mark.parametrize("concurrency", [1, 16, 64, 256])
def test_a_token_budget_worth_10_samples_holds_at_any_concurrency(fake_openai, ray_address, sized, run_eval, tmp_path, concurrency):
    """Each answer reports a prompt count of estimate / 0.947 (the measured ratio of litellm's
    token_counter to a provider's count) and 150 completion tokens. With run.max_total_tokens
    worth 10 such samples, the run spends at most the budget and less than one request's
    reservation below it, at every concurrency (the rule it replaces overshot 6.4× at 64)."""
    rules = [{"match": q, "content": "[]", "usage": {"prompt_tokens": math.ceil(est / 0.947), "completion_tokens": 150}}
             for q, est, _ in sized.values()]  # fmt: skip
    fake_openai.set_plan({"rules": rules})
    worth = sorted(math.ceil(est / 0.947) + 150 for _, est, _ in sized.values())
    limit = sum(worth[:10])
    res = run_eval(["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
                    f"benchmark.subsets=[{SUBSET}]", f"run.limit={N}", "run.cache=false", f"backend.concurrency={concurrency}",
                    "runner.num_workers=2", f"run.max_total_tokens={limit}"], output_root=tmp_path)  # fmt: skip
    spent = res.summary["spent_tokens"]
    assert spent == sum(r["spent_tokens"] for r in read_jsonl(res.run_dir / "predictions.jsonl"))
    assert spent <= limit, (spent, limit)
    assert limit - spent < max(r for _, _, r in sized.values()), (spent, limit)
    assert len(fake_openai.log) == res.summary["n_scored"] < N
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert {f["error_kind"] for f in failed} == {"budget_exceeded"} and all(f["attempts"] == 0 for f in failed)
    assert res.summary["n_scored"] + len(failed) == N


def test_an_offline_multi_turn_run_under_a_token_budget_costs_exactly_zero(run_eval, tmp_path):
    res = run_eval(["model=reference", "benchmark.subsets=[agent_multi_turn]", "run.limit=3", "run.max_total_tokens=1000"])
    assert res.summary["status"] == "complete", res.summary
    assert res.summary["cost_usd"] == 0.0 and res.summary["spent_tokens"] == 0
    assert all(r["cost_usd"] == 0.0 for r in read_jsonl(res.run_dir / "predictions.jsonl"))


def test_a_dry_run_whose_estimate_exceeds_the_budget_says_so(acebench_dir, sized):
    """Five requests of about 9,100 prompt tokens in all (max_tokens 1200 each): a token budget
    of 1,000 is passed by the prompts alone, one of 12,000 only if the answers used max_tokens,
    one of 100,000 not at all."""
    from evalkit.compose import compose, resolve
    from evalkit.job import dry_run

    def lines(limit: int) -> list[str]:
        _, cfg = resolve(compose([f"benchmark.data_dir={acebench_dir}", "model=openai_compatible", "model.provider_model=openai/fake",
                                  "backend.api_base=http://127.0.0.1:9/v1", f"benchmark.subsets=[{SUBSET}]", "run.limit=5",
                                  "run.dry_run=true", f"run.max_total_tokens={limit}"]))  # fmt: skip
        return dry_run(cfg).lines

    prompts = sum(est for _, est, _ in list(sized.values())[:5])
    assert 1000 < prompts < 12_000 < prompts + 5 * 1200 < 100_000
    assert lines(1000)[-1].startswith(f"evalkit: dry run: the estimate exceeds run.max_total_tokens=1000 by the prompt tokens alone ({prompts:,} tokens)")
    assert lines(12_000)[-1].startswith("evalkit: dry run: the estimate may exceed run.max_total_tokens=12000 (")
    assert not any("run.max_total_tokens" in line for line in lines(100_000))
