"""Reasoning models without a server: the reasoning rule each benchmark scores under and
``benchmark.strip_reasoning_prefix``, the reasoning controls and what litellm says a model
accepts, token counts, prices and costs, and the budget's arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.base import strip_reasoning_prefix
from evalkit.settings import GenerationParams, ReasoningEffort
from evalkit.benchmarks.ke import KE, KESettings
from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from evalkit.compose import compose, resolve
from evalkit.engine.budget import Budget
from evalkit.engine.records import reasoning_rule, scored_view, spend
from evalkit.errors import ConfigError
from evalkit.providers import Price, litellm_price, model_price, usage_counts
from evalkit.types import Failure, Request, Trajectory
from tests.conftest import REPO_ROOT, SHARED_DIR

THOUGHT = "reasoning text\n</think>\n\n"
DRAFT = '<think>\nLet me draft it first:\n```json\n{"draft": true}\n```\nstep_001 looks wrong\n</think>\n\n'


# ------------------------------------------------------------------------------------------
# the reasoning rule: each benchmark's own by default, strip_reasoning_prefix when asked
# ------------------------------------------------------------------------------------------
def _verdicts(bench, sample, output: str) -> tuple[dict, dict]:
    """(scores, row fields) of ``output`` scored through the engine's one reasoning rule."""
    view, rule = scored_view(bench, Trajectory(final_output=output))
    return bench.score_sample(sample, view).scores, rule


@pytest.fixture(scope="module")
def sobhard_pair(shared_data_dir: Path):
    off = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    on = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard", strip_reasoning_prefix=True))
    samples = off.load()
    assert [s.id for s in on.load()] == [s.id for s in samples]
    return off, on, samples


def test_strip_reasoning_prefix_keeps_the_text_after_the_last_closing_tag():
    assert strip_reasoning_prefix("a</think>b</think>\n\nanswer") == "\n\nanswer"
    assert strip_reasoning_prefix("no tag at all") is None
    once = strip_reasoning_prefix(THOUGHT + "x")
    assert once == "\n\nx" and strip_reasoning_prefix(once) is None  # idempotent


def test_sobhard_orphan_closing_tag_passes_only_with_the_prefix_stripped(sobhard_pair):
    """Spec §4 step 5 removes the lone tag but keeps the reasoning text around it: the
    answer fails as today; with strip_reasoning_prefix it is the reference, and passes."""
    off, on, samples = sobhard_pair
    for sample in samples[:3]:
        ref = off.reference_output(sample)
        scores, rule = _verdicts(off, sample, THOUGHT + ref)
        assert scores["sample_pass"] == 0.0 and off.score(sample, THOUGHT + ref).scores == scores  # today's verdict
        assert rule == {"reasoning_rule": off.reasoning_rule} and "§4 step 5" in rule["reasoning_rule"]
        scores, rule = _verdicts(on, sample, THOUGHT + ref)
        assert scores["sample_pass"] == 1.0
        assert rule["output_unstripped"] == THOUGHT + ref and rule["reasoning_rule"].startswith("strip_reasoning_prefix")


def test_sobhard_think_block_holding_a_fenced_draft(sobhard_pair):
    off, on, samples = sobhard_pair
    for sample in samples[:3]:
        answer = DRAFT + off.reference_output(sample)
        today = off.score(sample, answer).scores
        assert _verdicts(off, sample, answer)[0] == today and today["sample_pass"] == 0.0  # the draft fence is a block
        assert _verdicts(on, sample, answer)[0]["sample_pass"] == 1.0


def test_sobhard_fixture_answers_without_a_closing_tag_score_the_same_either_way(sobhard_pair):
    off, on, samples = sobhard_pair
    by_id = {s.id: s for s in samples}
    rows = [json.loads(line) for line in (SHARED_DIR / "data" / "sobhard" / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    plain = [r for r in rows if "</think>" not in r["answer"]]
    assert len(plain) == len(rows) - 2  # the two think_preamble cases hold one
    for r in plain:
        sample = by_id[str(r["id"])]
        scores_on, rule_on = _verdicts(on, sample, r["answer"])
        assert scores_on == _verdicts(off, sample, r["answer"])[0]
        assert rule_on == {"reasoning_rule": reasoning_rule(on)}  # nothing stripped, nothing kept aside


@pytest.fixture(scope="module")
def ke_pair(shared_data_dir: Path):
    d = shared_data_dir / "ke"
    off = KE(KESettings(pilot_path=d / "pilot.jsonl", icl_path=d / "icl_examples.jsonl"))
    on = KE(KESettings(pilot_path=d / "pilot.jsonl", icl_path=d / "icl_examples.jsonl", strip_reasoning_prefix=True))
    samples = off.load()
    assert [s.id for s in on.load()] == [s.id for s in samples]
    return off, on, samples


def test_ke_rule_r3_already_keeps_the_text_after_the_last_closing_tag(ke_pair):
    """KE's own rule R3 is the same cut: both answers score 1 with the option off and on;
    only the record differs (rule named, whole answer kept)."""
    off, on, samples = ke_pair
    for sample in samples[:3]:
        ref = off.reference_output(sample)
        for answer in (THOUGHT + ref, DRAFT + ref):
            scores_off, rule_off = _verdicts(off, sample, answer)
            scores_on, rule_on = _verdicts(on, sample, answer)
            assert scores_off == off.score(sample, answer).scores and scores_off["f1"] == 1.0
            assert scores_on == scores_off
            assert "output_unstripped" not in rule_off and rule_on["output_unstripped"] == answer
            assert "R3" in rule_off["reasoning_rule"] and "R3" in rule_on["reasoning_rule"]


def test_ke_fixture_answers_score_the_same_with_the_prefix_stripped(ke_pair):
    off, on, samples = ke_pair
    by_id = {s.id: s for s in samples}
    rows = [json.loads(line) for line in (SHARED_DIR / "data" / "ke" / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    for r in rows:
        if r["mode"] != "chat":
            continue
        assert _verdicts(on, by_id[r["sample_id"]], r["raw"])[0] == _verdicts(off, by_id[r["sample_id"]], r["raw"])[0], r["case"]


def test_acebench_first_closing_tag_by_default_last_with_the_prefix_stripped(acebench_dir: Path):
    settings = {"data_dir": acebench_dir, "subsets": ["normal_atom_bool"]}
    off = AceBench(AceBenchSettings(**settings))
    on = AceBench(AceBenchSettings(**settings, strip_reasoning_prefix=True))
    sample = off.load()[0]
    on.load()
    answer = "I will think.</think> maybe [wrong()]? no.\n</think>\n" + off.reference_output(sample)
    assert _verdicts(off, sample, answer)[0]["accuracy"] == 0.0 == off.score(sample, answer).scores["accuracy"]
    assert _verdicts(on, sample, answer)[0]["accuracy"] == 1.0
    assert _verdicts(off, sample, THOUGHT + off.reference_output(sample))[0]["accuracy"] == 1.0  # one tag: same cut


# ------------------------------------------------------------------------------------------
# reasoning controls: sent as litellm takes them, refused where the model cannot take them
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_reasoning_efforts_are_the_ones_litellm_accepts():
    from litellm.types.llms.openai import REASONING_EFFORT

    assert typing.get_args(ReasoningEffort) == typing.get_args(REASONING_EFFORT)


def test_thinking_budget_is_sent_in_anthropic_form_and_hashed():
    gen = GenerationParams(max_tokens=4000, thinking_budget_tokens=1024, reasoning_effort="low")
    assert gen.as_params() == {"max_tokens": 4000, "thinking_budget_tokens": 1024, "reasoning_effort": "low"}
    assert gen.sent_params() == {"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 1024}, "reasoning_effort": "low"}
    msgs = [{"role": "user", "content": "hi"}]
    hashes = {Request("s", "x", messages=msgs, params=GenerationParams(**kw).sent_params()).request_hash("m")
              for kw in ({}, {"reasoning_effort": "low"}, {"reasoning_effort": "high"}, {"thinking_budget_tokens": 10})}  # fmt: skip
    assert len(hashes) == 4


def _cfg(*overrides: str):
    server = ["backend.api_base=http://127.0.0.1:9/v1"] if "model=openai_compatible" in overrides else []  # required by it
    return resolve(compose([f"benchmark.data_dir={SHARED_DIR / 'data' / 'acebench'}", *overrides, *server]))[1]


def test_reasoning_settings_fold_like_any_generation_parameter():
    cfg = _cfg("model=openai_compatible", "benchmark.generation.reasoning_effort=high",
               "+model.dataset_args.acebench.generation.reasoning_effort=low")  # fmt: skip
    assert cfg.generation.reasoning_effort == "low" and cfg.sent_params()["reasoning_effort"] == "low"
    assert cfg.record()["generation"]["reasoning_effort"] == "low"
    assert _cfg("model=openai_compatible", "+model.generation.reasoning_effort=medium").sent_params()["reasoning_effort"] == "medium"


@pytest.mark.parametrize(
    "model, override, message",
    [
        ("gpt4o", "+model.generation.reasoning_effort=high", "generation.reasoning_effort: openai model gpt-4o-2024-11-20 does not accept reasoning_effort"),
        ("openai_compatible", "benchmark.generation.thinking_budget_tokens=512", "generation.thinking_budget_tokens: openai model model does not accept thinking"),
        ("dsv4_reasoner", "model.generation.thinking_budget_tokens=512", "generation.thinking_budget_tokens: deepseek model deepseek-reasoner takes no thinking budget"),
        ("openai_compatible", "benchmark.generation.thinking_budget_tokens=2000", "generation.thinking_budget_tokens: 2000 is not below generation.max_tokens=1200"),
        ("openai_compatible", "+generation.reasoning_effort=high", "generation: the run's generation block is folded from its layers"),
        ("openai_compatible", "+model.generation.reasoning_effort=extreme", "model.generation.reasoning_effort: Input should be"),
    ],
)
def test_an_unsupported_reasoning_setting_is_one_config_line(monkeypatch, model, override, message):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test")
    with pytest.raises(ConfigError) as err:
        _cfg(f"model={model}", override)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_dsv4_stays_the_chat_endpoint_and_dsv4_reasoner_takes_an_effort(monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test")
    assert _cfg("model=dsv4").model.provider_model == "deepseek/deepseek-chat"
    cfg = _cfg("model=dsv4_reasoner", "model.generation.reasoning_effort=high")
    assert cfg.model.provider_model == "deepseek/deepseek-reasoner"
    assert cfg.sent_params() == {"temperature": 0.0, "max_tokens": 32768, "reasoning_effort": "high"}
    assert model_price(cfg.model, cfg.backend.kind).source == "litellm"


@pytest.mark.slow
def test_the_command_line_says_it_in_one_line_with_exit_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-test", "PYTHONPATH": f"{REPO_ROOT / 'src'}:{REPO_ROOT}", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "evalkit", "model=gpt4o", "+model.generation.reasoning_effort=high",
                           f"benchmark.data_dir={SHARED_DIR / 'data' / 'acebench'}", f"run.output_root={tmp_path / 'o'}"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "evalkit: error: generation.reasoning_effort: openai model gpt-4o-2024-11-20 does not accept reasoning_effort "
        "(not among litellm's supported parameters for it) (model=gpt4o); remove it or pick another model"
    ]
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------
# tokens, prices, cost
# ------------------------------------------------------------------------------------------
def test_usage_counts_of_a_litellm_usage_block():
    from litellm.types.utils import CompletionTokensDetailsWrapper, PromptTokensDetailsWrapper, Usage

    full = Usage(prompt_tokens=1000, completion_tokens=500, total_tokens=1500,
                 prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=200),
                 completion_tokens_details=CompletionTokensDetailsWrapper(reasoning_tokens=300))  # fmt: skip
    assert usage_counts(full) == {"prompt_tokens": 1000, "completion_tokens": 500, "reasoning_tokens": 300, "cached_prompt_tokens": 200}
    assert usage_counts(Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10)) == {"prompt_tokens": 7, "completion_tokens": 3}
    assert usage_counts(Usage()) is None  # litellm's zeros for a response without usage: not reported
    assert usage_counts(None) is None


USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "reasoning_tokens": 300, "cached_prompt_tokens": 200}


def test_cost_counts_cached_and_reasoning_tokens_once(monkeypatch):
    """(prompt − cached)·input + cached·cached_input + completion·output; reasoning tokens are
    inside completion tokens; an unset cached price is the input price."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = _cfg("model=openai_compatible", "+model.pricing.input_per_mtok=2", "+model.pricing.output_per_mtok=8",
               "+model.pricing.cached_input_per_mtok=0.5")  # fmt: skip
    price = model_price(cfg.model, cfg.backend.kind)
    assert price.source == "model.pricing"
    assert price.cost(USAGE) == pytest.approx((800 * 2 + 200 * 0.5 + 500 * 8) / 1e6, rel=1e-12)
    no_cached = Price("model.pricing", "openai/x", 2e-6, 8e-6)
    assert no_cached.cost(USAGE) == pytest.approx((1000 * 2 + 500 * 8) / 1e6, rel=1e-12)
    assert no_cached.cost(None) is None
    gpt4o = model_price(_cfg("model=gpt4o").model, "api")  # litellm's price map
    assert gpt4o.cost(USAGE) == pytest.approx(800 * 2.5e-6 + 200 * 1.25e-6 + 500 * 1e-5, rel=1e-9)
    overridden = _cfg("model=gpt4o", "+model.pricing.input_per_mtok=1", "+model.pricing.output_per_mtok=1")
    assert model_price(overridden.model, "api").cost(USAGE) == pytest.approx(1500 / 1e6, rel=1e-12)


def test_free_and_unknown_prices():
    assert model_price(_cfg("model=reference").model, "offline").cost(None) == 0.0
    assert model_price(_cfg("model=smollm2").model, "llamacpp").cost(USAGE) == 0.0
    assert litellm_price("openai/evalkit-unknown-model") is None


def test_a_zero_price_registered_by_the_client_is_never_read_as_a_price():
    from evalkit.models.litellm_client import LiteLLMModel

    LiteLLMModel(provider_model="openai/evalkit-registered-at-zero")  # registers it at zero cost (speed)
    assert litellm_price("openai/evalkit-registered-at-zero") is None


def test_max_cost_needs_a_price_before_anything_runs(monkeypatch):
    with pytest.raises(ConfigError, match=r"^run.max_cost_usd: model openai_compatible \(openai/model\) has no price"):
        _cfg("model=openai_compatible", "run.max_cost_usd=1")
    assert _cfg("model=openai_compatible", "run.max_cost_usd=1", "+model.pricing.input_per_mtok=1",
                "+model.pricing.output_per_mtok=1").run.max_cost_usd == 1  # fmt: skip
    assert _cfg("model=smollm2", "run.max_cost_usd=1").run.max_cost_usd == 1  # the embedded model is free


def test_spend_counts_sent_calls_and_failed_answers_by_actor():
    agent, user = Price("model.pricing", "a", 1e-6, 2e-6), Price("model.pricing", "u", 10e-6, 10e-6)
    turns = [
        {"actor": "agent", "usage": {"prompt_tokens": 100, "completion_tokens": 10}, "cached": False},
        {"actor": "user", "usage": {"prompt_tokens": 50, "completion_tokens": 5}, "cached": False},
        {"actor": "agent", "usage": {"prompt_tokens": 999, "completion_tokens": 99}, "cached": True},  # a cache hit
    ]
    failed = Failure("truncated_empty", "reasoning only", actor="agent", usage={"prompt_tokens": 20, "completion_tokens": 300})
    got = spend(Trajectory(turns=turns, failure=failed), {"agent": agent, "user": user})
    assert got["spent_tokens"] == 110 + 55 + 320
    assert got["cost_usd"] == pytest.approx((100 + 20 + 2 * 310) / 1e6 + 55 * 10 / 1e6, rel=1e-12)
    unpriced = spend(Trajectory(turns=turns[:2]), {"agent": agent, "user": None})
    assert unpriced == {"cost_usd": None, "spent_tokens": 165}
    unreported = spend(Trajectory(turns=[{"actor": "agent", "usage": None, "cached": False}]), {"agent": agent})
    assert unreported == {"cost_usd": None, "spent_tokens": None}


def test_budget_is_reached_at_its_limit_and_when_the_spend_is_unknown():
    price = Price("model.pricing", "a", 1e-6, 1e-6)
    one_call = Trajectory(turns=[{"actor": "agent", "usage": {"prompt_tokens": 900, "completion_tokens": 100}}])
    budget = Budget(max_cost_usd=0.0025, max_total_tokens=None, prices={"agent": price})
    budget.charge(one_call)
    budget.charge(one_call)
    assert not budget.exhausted() and budget.cost_usd == pytest.approx(0.002)
    budget.charge(one_call)
    assert budget.exhausted() and "spent $0.003 of run.max_cost_usd=0.0025" in budget.reason()
    tokens = Budget(None, 1500, {"agent": price}, tokens=1000)
    assert not tokens.exhausted()
    tokens.charge(Trajectory(turns=[{"actor": "agent", "usage": None}]))  # in a run, the keeper charged its reservation
    assert not tokens.exhausted() and tokens.tokens == 1000
    unknown = Budget(None, 10**9, {"agent": price}, tokens=None)  # an earlier attempt journaled an unmeasured answer
    assert unknown.exhausted() and "run.max_total_tokens cannot be checked" in unknown.reason()
    assert not Budget(None, None, {"agent": None}, cost_usd=None, tokens=None).exhausted()  # no limit: never reached


def test_a_sweep_is_not_dry_run():
    from evalkit.cli import precheck_sweep

    with pytest.raises(ConfigError, match=r"^run.dry_run: a sweep \(-m\) is not dry-run"):
        precheck_sweep([f"benchmark.data_dir={SHARED_DIR / 'data' / 'acebench'}", "model=reference", "tracking=none",
                        "run.dry_run=true", "run.limit=1,2"])  # fmt: skip
