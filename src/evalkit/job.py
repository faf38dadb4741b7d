"""One job: run a composed or validated config with the observer its ``tracking`` names,
and say the outcome in one line; or, with ``run.dry_run=true``, build its requests and
estimate them without sending or writing anything (:func:`dry_run`). What the command
line and the sweep's jobs share; it sits below both (neither imports the other for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from evalkit.compose import resolve
from evalkit.config import EvalConfig
from evalkit.engine.plan import prepare
from evalkit.engine.phases import Phases
from evalkit.engine.run import RunResult, run_evaluation
from evalkit.providers import estimate_prompt_tokens
from evalkit.report.summary import headline_text
from evalkit.summary import Summary
from evalkit.tracking import make_observer


def run_validated(cfg: EvalConfig, sweep: dict[str, Any] | None = None, phases: Phases | None = None) -> RunResult:
    """Run a validated config (``sweep``: the ``sweep.json`` of the sweep it is a job of;
    ``phases``: the timings of the run so far, from its compose).

    Raises:
        EvalkitError: a configuration, data, run directory or tracking error.
    """
    return run_evaluation(cfg, make_observer(cfg, sweep), phases)


def outcome_line(result: RunResult) -> str:
    """The one line a finished run prints: its headline, or why there is none."""
    s = result.summary
    if s["status"] == "complete":
        return f"evalkit: complete: {s['benchmark']} × {s['model']}: {headline_text(s)}; {_cost(s)} → {result.run_dir}"
    kinds = ", ".join(f"{k}: {v}" for k, v in s["failed_by_kind"].items()) or "never ran"
    return (
        f"evalkit: INCOMPLETE: {Summary.model_validate(s).count_line()} ({kinds}); "
        f"no headline score; {_cost(s)}. Resume: run.resume={result.run_dir}"
    )


def _cost(summary: dict[str, Any]) -> str:
    """``cost $0.0123`` of a summary (``cost unknown`` without a price or usage)."""
    cost = summary.get("cost_usd")
    return f"cost ${cost:.4f}" if isinstance(cost, (int, float)) else "cost unknown"


def run_composed(cfg: DictConfig, sweep: dict[str, Any] | None = None) -> RunResult | DryRun:
    """Validate and run one composed config (or dry-run it, ``run.dry_run=true``); prints
    the one-line outcome.

    Raises:
        EvalkitError: a configuration, data, run directory or tracking error.
    """
    phases = Phases()
    with phases.timed("compose_validate_s"):
        _, validated = resolve(cfg)
    if validated.run.dry_run:
        dry = dry_run(validated)
        print(dry.line)
        return dry
    result = run_validated(validated, sweep, phases)
    print(outcome_line(result))
    return result


@dataclass
class DryRun:
    """What ``run.dry_run=true`` found: the requests a run would send first (one per
    sample), their prompt tokens estimated by litellm's ``token_counter``, the estimated
    cost (USD, ``None`` without a price), how many of them open an agent rollout (counted
    by their first turn only: a lower bound), and the line printed. Its exit code is 0."""

    requests: int
    prompt_tokens: int | None
    cost_usd: float | None
    rollouts: int
    line: str
    exit_code: int = 0


def dry_run(cfg: EvalConfig) -> DryRun:
    """Build every request of ``cfg`` (:func:`evalkit.engine.plan.prepare`, which starts and
    writes nothing) and estimate them; nothing is sent and nothing is written: no run
    directory, no MLflow run, no response cache.

    Raises:
        ConfigError / DataError: as the run itself would, before anything runs.
    """
    plan = prepare(cfg)
    units, price = plan.units, plan.prices.get("agent")
    rollouts = sum(1 for u in units if u.rollout)
    head = f"evalkit: dry run: {cfg.benchmark.name} × {cfg.model.name}: {len(units)} requests"
    if cfg.model.kind != "litellm":
        line = f"{head} answered offline by model={cfg.model.name} (nothing is sent to a provider; cost 0); nothing sent, nothing written"
        return DryRun(len(units), None, 0.0, rollouts, line)
    tokens = sum(estimate_prompt_tokens(str(cfg.model.provider_model), u.request.messages, u.request.prompt) for u in units)
    cost = price.cost({"prompt_tokens": tokens, "completion_tokens": 0}) if price is not None else None
    shown = "cost unknown (no price: set model.pricing)" if cost is None else f"estimated cost ≥ ${cost:.4f} (prompt tokens only)"
    max_tokens = cfg.generation.max_tokens
    if cost is not None and max_tokens and price is not None and not rollouts:
        upper = price.cost({"prompt_tokens": tokens, "completion_tokens": max_tokens * len(units)})
        shown += f", ≤ ${upper:.4f} if every answer used max_tokens={max_tokens}"
    lower = f"; {rollouts} of them open agent rollouts, counted by their first turn only: a lower bound" if rollouts else ""
    line = f"{head}, ~{tokens:,} prompt tokens{lower}; {shown}; nothing sent, nothing written"
    return DryRun(len(units), tokens, cost, rollouts, line)
