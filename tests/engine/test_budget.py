"""The budget's reservations in-process (:mod:`evalkit.engine.budget`): a call is sent only
while spent + reserved + its upper bound fits, at any concurrency; what an answer without
usage is charged; offline runs cost exactly 0; the user simulator's price is asked only for
selected rollouts. (Through whole runs against the fake server: test_budget_runs.py.)"""

from __future__ import annotations

import asyncio
import random

import pytest

from evalkit.engine.budget import PROMPT_MARGIN, PROMPT_SLACK_TOKENS, Budget
from evalkit.engine.solve import ActorModel
from evalkit.engine.records import spend
from evalkit.errors import ConfigError
from evalkit.models.base import ModelCallError
from evalkit.providers import Price, estimate_prompt_tokens
from evalkit.types import Completion, Request, Trajectory
from tests.support.host import time_limit

PRICE = Price("model.pricing", "m", 3e-6, 15e-6)


async def _calls(budget: Budget, n: int, concurrency: int, seed: int) -> tuple[int, list[int]]:
    """``n`` calls, ``concurrency`` at a time, each reserving a bound for a prompt of 500-3000
    estimated tokens and max_tokens 400, then spending at most that bound (a real count up to
    1/0.947 of the estimate, as measured against litellm's token_counter, and 10-400 completion
    tokens). Returns (calls sent, their reservations' token bounds)."""
    rng = random.Random(seed)
    plans = [(rng.randint(500, 3000), rng.randint(10, 400)) for _ in range(n)]
    sent, bounds = 0, []
    gate = asyncio.Semaphore(concurrency)

    async def one(estimate: int, completion: int) -> None:
        nonlocal sent
        async with gate:
            held = await budget.reserve("agent", estimate, 400)
            if held is None:
                return
            sent += 1
            bounds.append(held[1])
            await asyncio.sleep(rng.random() * 0.002)
            usage = {"prompt_tokens": int(estimate / 0.947), "completion_tokens": completion}
            await budget.settle(held, "agent", usage, measured=True)

    await asyncio.gather(*(one(e, c) for e, c in plans))
    return sent, bounds


@pytest.mark.parametrize("concurrency", [1, 16, 64, 256])
def test_a_token_budget_holds_within_one_request_at_any_concurrency(concurrency):
    """A budget worth about 10 calls, 300 calls offered: the spend never passes the budget and
    stops less than one reservation below it, whatever the concurrency. (The rule it replaces,
    charging a unit when it finishes, sent all 64 first requests at concurrency 64.)"""
    limit = 20_000
    budget = Budget(None, limit, {"agent": PRICE})
    sent, bounds = asyncio.run(_calls(budget, 300, concurrency, seed=concurrency))
    assert 0 < budget.tokens <= limit
    assert limit - budget.tokens < max(bounds)
    assert budget.reserved_tokens == 0 and budget.in_flight == 0 and budget.refused
    assert sent < 20


@pytest.mark.slow  # litellm's import (pricing, token_counter)
def test_a_cost_budget_holds_and_reservations_are_priced():
    limit = 0.05
    budget = Budget(limit, None, {"agent": PRICE})
    asyncio.run(_calls(budget, 300, 64, seed=1))
    assert budget.cost_usd <= limit
    assert limit - budget.cost_usd < PRICE.cost({"prompt_tokens": int(3000 * PROMPT_MARGIN) + PROMPT_SLACK_TOKENS,
                                                 "completion_tokens": 400})  # fmt: skip


@pytest.mark.slow  # litellm's import (pricing, token_counter)
def test_the_reservation_bounds_the_estimate_and_max_tokens():
    budget = Budget(1.0, 10**6, {"agent": PRICE})
    cost, tokens = budget.bound("agent", 1000, 200)
    assert tokens == 1250 + PROMPT_SLACK_TOKENS + 200
    assert cost == pytest.approx((1250 + PROMPT_SLACK_TOKENS) * 3e-6 + 200 * 15e-6)
    assert budget.bound("agent", 1000, None)[1] > 10_000  # no max_tokens sent: a wide completion bound
    assert Budget(None, 10**6, {"agent": PRICE}).bound("agent", 1000, 200)[0] == 0.0  # no cost limit: not priced


def test_an_answer_without_usage_is_charged_its_reservation_and_a_cache_hit_nothing():
    async def scenario() -> Budget:
        budget = Budget(None, 100_000, {"agent": PRICE})
        held = await budget.reserve("agent", 1000, 100)
        await budget.settle(held, "agent", None, measured=False)
        hit = await budget.reserve("agent", 1000, 100)
        await budget.settle(hit, "agent", None, measured=True)
        return budget

    budget = asyncio.run(scenario())
    assert budget.tokens == 1250 + PROMPT_SLACK_TOKENS + 100 and budget.reserved_tokens == 0


def test_a_call_that_does_not_fit_waits_for_the_calls_in_flight_then_goes():
    limit_s = time_limit(1)

    async def scenario() -> list[str]:
        budget = Budget(None, 4500, {"agent": PRICE})
        order: list[str] = []
        first = await budget.reserve("agent", 2000, 100)  # 2664 reserved
        waiting = asyncio.ensure_future(budget.reserve("agent", 2000, 100))  # does not fit beside it
        await asyncio.sleep(0.01)
        order.append("waiting" if not waiting.done() else "went")
        await budget.settle(first, "agent", {"prompt_tokens": 1000, "completion_tokens": 10}, measured=True)
        second = await asyncio.wait_for(waiting, limit_s)  # a hang guard
        order.append("went" if second is not None else "refused")
        await budget.settle(second, "agent", {"prompt_tokens": 1000, "completion_tokens": 10}, measured=True)
        third = await budget.reserve("agent", 2000, 100)  # 2020 spent + 2664 > 4500, nothing in flight: refused
        order.append("refused" if third is None else "went")
        return order

    assert asyncio.run(scenario()) == ["waiting", "went", "refused"]


class _Answers:
    model_id = "m@local"
    provider_model = "openai/m"

    def __init__(self):
        self.sent = 0

    async def generate(self, request: Request) -> Completion:
        self.sent += 1
        return Completion(text="ok", usage={"prompt_tokens": 10, "completion_tokens": 2})


@pytest.mark.slow  # litellm's import (pricing, token_counter)
def test_the_model_wrapper_asks_the_budget_before_each_call_of_a_rollout():
    """Each call of a rollout reserves first: the third call of a rollout the budget has no
    room for is not sent, and the failure is budget_exceeded."""

    messages = [{"role": "user", "content": "hello there"}]
    reservation = Budget(None, 1, {}).bound("agent", estimate_prompt_tokens("openai/m", messages, None), 16)[1]

    async def scenario() -> tuple[int, str, Budget]:
        model = _Answers()
        budget = Budget(None, reservation + 12 + 5, {"agent": PRICE})  # room for two calls of 12 tokens, not three
        wrapped = ActorModel(model, None, "agent", {"max_tokens": 16}, [], budget=budget)
        kinds = ""
        for _ in range(3):
            try:
                await wrapped.generate(Request("s", "x", messages=list(messages)))
            except ModelCallError as exc:
                kinds = exc.failure.error_kind
        return model.sent, kinds, budget

    sent, kind, budget = asyncio.run(scenario())
    assert sent == 2 and kind == "budget_exceeded" and budget.tokens == 24


def test_an_offline_run_costs_exactly_zero_with_its_scripted_user(tmp_path):
    """model=reference with ACEBench's agent_multi_turn: the scripted user's turns are free too."""
    from evalkit.engine.plan import run_prices
    from evalkit.specs import build

    cfg = _cfg("model=reference", "benchmark.subsets=[agent_multi_turn]", "run.max_total_tokens=1000")
    prices = run_prices(build(cfg).models, with_user=False, rollouts=True)
    turns = [{"actor": "agent", "usage": None, "cached": False}, {"actor": "user", "usage": None, "cached": False}]
    assert spend(Trajectory(turns=turns), prices) == {"cost_usd": 0.0, "spent_tokens": 0}


def test_an_offline_run_without_rollouts_records_no_user_simulator_price():
    """Issue 48 item 8: ``user: free (offline)`` was recorded for tasks with no user simulator."""
    from evalkit.engine.plan import prepare
    from evalkit.specs import build

    plan = prepare(build(_cfg("model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=2")))
    assert {k: p.describe() for k, p in plan.prices.items()} == {"agent": "free (offline)"}
    rollouts = prepare(build(_cfg("model=reference", "benchmark.subsets=[agent_multi_turn]", "run.limit=1")))
    assert {k: p.describe() for k, p in rollouts.prices.items()} == {"agent": "free (offline)", "user": "free (offline)"}


@pytest.mark.slow  # litellm's import (the user simulator's price)
def test_a_cost_budget_asks_the_user_simulator_price_only_for_selected_rollouts():
    from evalkit.engine.plan import run_prices
    from evalkit.specs import build

    unpriced_user = ["benchmark.user_model=openai_compatible", "benchmark.user_overrides=['backend.api_base=http://127.0.0.1:9/v1']",
                     "run.max_cost_usd=1", "model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1",
                     "+model.pricing.input_per_mtok=1", "+model.pricing.output_per_mtok=1"]  # fmt: skip
    cfg = _cfg(*unpriced_user, "benchmark.subsets=[normal_atom_bool]")  # validation no longer refuses it
    models = build(cfg).models
    assert "user" not in run_prices(models, with_user=False, max_cost_usd=cfg.run.max_cost_usd)
    with pytest.raises(ConfigError, match=r"^run.max_cost_usd: the user simulator's model openai_compatible .* has no price"):
        run_prices(models, with_user=True, max_cost_usd=cfg.run.max_cost_usd)


def _cfg(*overrides: str):
    from evalkit.compose import compose, resolve
    from tests.test_reasoning import SHARED_DIR

    return resolve(compose([f"benchmark.data_dir={SHARED_DIR / 'data' / 'acebench'}", *overrides]))[1]


def test_at_ctrl_c_what_was_answered_or_in_flight_but_not_journaled_counts(tmp_path):
    """The keeper counted 3,000 tokens spent (1,000 of them journaled) and 2,000 reserved by
    calls in flight when the run was interrupted: a resume's budget starts from 5,000."""
    import json

    from evalkit.engine.budget import journal_spend
    from evalkit.engine.run import _note_unjournaled

    (tmp_path / "predictions.jsonl").write_text(json.dumps({"sample_id": "a", "cost_usd": 0.01, "spent_tokens": 1000}) + "\n")

    keeper_state = (0.03, 3000, {"cost_usd": 0.02, "spent_tokens": 2000})  # what RayExecutor.cancel() returns

    assert journal_spend(tmp_path) == (0.01, 1000)
    _note_unjournaled(keeper_state, tmp_path)
    cost, tokens = journal_spend(tmp_path)
    assert tokens == 5000 and cost == pytest.approx(0.05)
