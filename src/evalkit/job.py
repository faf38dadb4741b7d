"""One job: run a composed or validated config with the observer its ``tracking`` names,
and say the outcome in one line; or, with ``run.dry_run=true``, build its requests and
estimate them without sending or writing anything (:func:`dry_run`). What the command
line and the sweep's jobs share; it sits below both (neither imports the other for it).

A *job* is one run of one config: what ``python -m evalkit`` does once, and what each point
of a sweep (a Hydra multirun job, :mod:`evalkit.sweep`) does. That is the only meaning of
the word in evalkit (a run's registration on the model workers is
``RayExecutor.registration``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from evalkit.benchmarks.task.qualification import judge_digest, refusal, run_qualification
from evalkit.compose import resolve
from evalkit.config import EvalConfig
from evalkit.engine import estimate
from evalkit.engine.batch import dry_run_section
from evalkit.engine.journal import read_journal
from evalkit.engine.plan import RunPlan, prepare
from evalkit.engine.rundir import PREDICTIONS, choose_run_dir
from evalkit.engine.phases import Phases
from evalkit.engine.run import RunResult, run_evaluation
from evalkit.engine.session import Session
from evalkit.errors import ConfigError, counted, host_load, printable, resume_arg
from evalkit.providers import estimate_prompt_tokens
from evalkit.report.summary import headline_text
from evalkit.specs import build
from evalkit.stats import plan_power
from evalkit.summary import Summary, headline_judge_note, read_summary
from evalkit.tracking import make_observer


def run_validated(cfg: EvalConfig, sweep: dict[str, Any] | None = None, phases: Phases | None = None,
                  shared: Session | None = None) -> RunResult:  # fmt: skip
    """Run a validated config (``sweep``: the ``sweep.json`` of the sweep it is a job of;
    ``phases``: the timings of the run so far, from its compose; ``shared``: the sweep's
    engine session, when its jobs run in this process).

    Raises:
        EvalkitError: a configuration, data, run directory or tracking error.
    """
    qualification = judge_qualification(cfg)  # issue 45: a gate or headline resting on an unqualified judge refuses
    why = refusal(qualification, gated=cfg.run.stop_when is not None, benchmark=cfg.benchmark.name)
    if why is not None:
        raise ConfigError(why)
    specs = build(cfg)  # once: each stage takes its own part (evalkit.specs)
    if qualification:
        specs = replace(specs, report=replace(specs.report, judge_qualification=qualification))
    return run_evaluation(specs, make_observer(specs.tracking, sweep), phases, shared)


def judge_qualification(cfg: EvalConfig) -> dict[str, Any]:
    """The qualification of the run's network judges, read from their records now
    (:func:`evalkit.benchmarks.task.qualification.run_qualification`); ``{}`` without one."""
    judges = [(j.model.name, judge_digest(j.model, cfg.judge_sent_params(j))) for j in cfg.judge if j.model.kind == "litellm"]
    scorers = [s for s in getattr(cfg.benchmark, "scorers", None) or [] if getattr(s, "kind", None) == "llm_judge"]
    if not judges or not scorers:
        return {}
    metrics = getattr(cfg.benchmark, "metrics", None)
    headline = getattr(metrics, "headline", None) or cfg.benchmark.scorers[0].score_name  # type: ignore[attr-defined]
    return run_qualification(judges, scorers, cfg.benchmark.name, headline, cfg.judge_qualification, cfg.run.output_root)


def run_judging(cfg: EvalConfig, label: str) -> RunResult | None:
    """``python -m evalkit.judge``'s run of its judged config (:func:`evalkit.compose.judged_config`;
    ``label``: RUN as given): with ``run.dry_run``, its dry-run line printed and ``None`` (what
    the judges would be sent, estimated: nothing sent or written, no key needed); else one line
    naming the judges and the directory, then the run.

    Raises:
        EvalkitError: as :func:`run_validated`.
    """
    if cfg.run.dry_run:
        print(dry_run(cfg).line)
        return None
    print(f"evalkit: judging the answers of {printable(label, 300)} with {', '.join(j.model.name for j in cfg.judge)} "
          f"→ {cfg.run.resume or cfg.run.dir}" + (" (resumed)" if cfg.run.resume else ""), file=sys.stderr)  # fmt: skip
    return run_validated(cfg)


def outcome_line(result: RunResult) -> str:
    """The one line a finished run prints: its headline, or why there is none (counts as
    :class:`~evalkit.summary.Summary` defines them: samples, and answers with repeats), its
    cost, and its scoring and tracking seconds apart (:func:`time_part`)."""
    typed = result.typed
    if typed is None:  # a detached batch run: no summary yet
        s = result.summary
        return (f"evalkit: batch submitted: {s['benchmark']} × {s['model']}: batches {', '.join(s['batch_ids'])} left "
                f"running at the provider; collect them with {resume_arg(result.run_dir)} run.batch=true")  # fmt: skip
    cost = f"cost ${typed.cost_usd:.4f}" if typed.cost_usd is not None else "cost unknown"
    cost += time_part(typed)
    if typed.complete and not _computed(typed.headline_value):
        return (f"evalkit: complete, but NO HEADLINE: {typed.benchmark} × {typed.model}: the headline {typed.headline} could not be "
                f"computed (the benchmark gave it no value; its other metrics are in summary.json); {cost} → {result.run_dir}")  # fmt: skip
    if typed.complete and typed.status == "decided":  # run.stop_when: the gate's verdict and the units it used
        g = getattr(typed, "sequential", None) or {}
        return (f"evalkit: decided: {typed.benchmark} × {typed.model}: gate {g.get('gate')} {g.get('verdict')} ({g.get('why')}) "
                f"after {g.get('n_used')} of {g.get('n_cap')} paired units; {headline_text(typed)}; {cost} → {result.run_dir}")  # fmt: skip
    if typed.complete:
        return f"evalkit: complete: {typed.benchmark} × {typed.model}: {headline_text(typed)}; {cost} → {result.run_dir}"
    kinds = ", ".join(f"{k}: {v}" for k, v in typed.failed_by_kind.items()) or "never ran"
    load = host_load() if "timeout" in typed.failed_by_kind else ""
    kinds += f"; {load}, the likely cause of the timeouts" if load else ""
    return f"evalkit: INCOMPLETE: {typed.count_line()} ({kinds}); no headline score; {cost}. Resume: {resume_arg(result.run_dir)}"


def _computed(value: Any) -> bool:
    """A headline value that is a number (not ``None``, not NaN)."""
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


#: the score every scorer of a YAML task gives a right answer: a reference run's headline
TASK_MAXIMUM = 1.0


def reference_shortfall(cfg: EvalConfig, result: RunResult) -> str | None:
    """The line of a ``model=reference`` run of a YAML task whose headline is below the
    maximum (:data:`TASK_MAXIMUM`): the task's extraction or scorers refuse its own
    reference answers, i.e. the task is mis-specified; ``None`` otherwise."""
    typed = result.typed
    if cfg.model.kind != "reference" or getattr(cfg.benchmark, "kind", None) != "task" or typed is None or not typed.complete:
        return None
    value = typed.headline_value
    if not _computed(value) or value >= TASK_MAXIMUM - 1e-9:
        return None
    return (f"evalkit: warning: model=reference scored {typed.headline} = {value:.4f}, below the maximum {TASK_MAXIMUM:g}: "
            f"the task does not accept its own reference answers (check benchmark.extract, the scorers and prompt.answer_template; "
            f"predictions.jsonl in {result.run_dir} shows each)")


def time_part(summary: Summary) -> str:
    """``; scoring X s, tracking Y s``: the run's ``engine.phases`` ``scoring_s`` and
    ``tracking_s`` (seconds; counted apart, see :mod:`evalkit.engine.phases`), or ``""``
    when the summary has neither."""
    phases = (summary.engine.phases if summary.engine is not None else None) or {}
    shown = [f"{name} {phases[f'{name}_s']:.1f} s" for name in ("scoring", "tracking") if isinstance(phases.get(f"{name}_s"), (int, float))]
    return f"; {', '.join(shown)}" if shown else ""


def run_composed(cfg: DictConfig, sweep: dict[str, Any] | None = None, shared: Session | None = None,
                 finished: Callable[[RunResult], None] | None = None) -> RunResult | DryRun:  # fmt: skip
    """Validate and run one composed config (or dry-run it, ``run.dry_run=true``); prints
    the one-line outcome. ``shared``: the sweep's engine session (:func:`run_validated`);
    ``finished``: called with the result before the outcome line is printed (the command
    line's quiet Ctrl-C handler, so that no Ctrl-C after the line finds the run unfinished).

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
    result = run_validated(validated, sweep, phases, shared)
    if finished is not None:
        finished(result)
    print(outcome_line(result))
    shortfall = reference_shortfall(validated, result)
    if shortfall:
        print(shortfall)
    return result


@dataclass
class DryRun:
    """What ``run.dry_run=true`` found: the requests a run would send now (one per sample
    and epoch; with ``run.resume``, only those its journal does not hold yet), their prompt
    tokens estimated by litellm's ``token_counter``, the estimated cost (USD, ``None``
    without a price), how many of them open an agent rollout (counted by their first turn
    only: a lower bound), how many a resumed run already holds, and the text printed: the
    first line, then one line per further section (:func:`dry_run_lines`). Its exit code is 0."""

    requests: int
    prompt_tokens: int | None
    cost_usd: float | None
    rollouts: int
    lines: list[str]
    journaled: int = 0
    exit_code: int = 0
    #: the judges' calls (``judge=...``): how many, their prompt tokens around an empty
    #: answer, their cost (USD, ``None`` without a price) and the most their answers and
    #: the judged answers can add (tokens); 0 without judges or for offline ones
    judge_requests: int = 0
    judge_prompt_tokens: int = 0
    judge_cost_usd: float | None = 0.0
    judge_completion_bound: int = 0

    @property
    def line(self) -> str:
        """The printed text (its first line is the summary; sections follow, one a line)."""
        return "\n".join(self.lines)


def dry_run(cfg: EvalConfig) -> DryRun:
    """Build every request of ``cfg`` (:func:`evalkit.engine.plan.prepare`, which starts and
    writes nothing) and estimate those a run would send; nothing is sent and nothing is
    written: no run directory, no MLflow run, no response cache. With ``run.resume``, the
    run directory is checked as the resume itself checks it (a changed config is refused)
    and only the requests its journal does not hold are counted.

    Raises:
        ConfigError / DataError / RunDirError: as the run itself would, before anything runs.
    """
    specs = build(cfg)
    plan = prepare(specs)
    pending = plan.units
    if cfg.run.resume is not None:
        run_dir, _ = choose_run_dir(specs.run_dir)  # the real resume's checks (RunDirError on a changed config)
        journal = read_journal(run_dir / PREDICTIONS, plan.request_hashes())
        pending = plan.units.without(journal.rows)
    dry = DryRun(len(pending), None, 0.0, sum(1 for u in pending if u.rollout), [], len(plan.units) - len(pending))
    if cfg.model.kind == "litellm" and pending:
        price = plan.prices.get("agent")
        dry.prompt_tokens = sum(estimate_prompt_tokens(str(cfg.model.provider_model), u.request.messages, u.request.prompt)
                                for u in pending)  # fmt: skip
        dry.cost_usd = price.cost({"prompt_tokens": dry.prompt_tokens, "completion_tokens": 0}) if price is not None else None
    elif cfg.model.kind == "litellm":
        dry.prompt_tokens = 0
    _estimate_judges(cfg, plan, pending, dry)
    dry.lines = dry_run_lines(cfg, plan, dry)
    return dry


def _estimate_judges(cfg: EvalConfig, plan: RunPlan, pending: Any, dry: DryRun) -> None:
    """The network judges' share of the estimate: each judge's calls per sample
    (:meth:`~evalkit.benchmarks.base.Benchmark.judge_prompts`, prompts around an empty
    answer: a lower bound) counted by its own tokenizer and priced by its own price; the
    answers judged add up to the model's ``max_tokens`` each, a judge's answer up to its own."""
    judges = [j for j in cfg.judge if j.model.kind == "litellm"]
    if not judges or not pending:
        return
    samples = {s.id: s for s in plan.samples}
    keys = list(pending.keys())  # no request built
    prompts = {sid: plan.bench.judge_prompts(samples[sid]) for sid in dict.fromkeys(sid for sid, _ in keys)}
    per_sample = [prompts[sid] for sid, _ in keys]
    for judge in judges:
        tokens = sum(estimate_prompt_tokens(str(judge.model.provider_model), msgs, None) for calls in per_sample for msgs in calls)
        calls = sum(len(c) for c in per_sample)
        price = plan.prices.get(f"judge:{judge.model.name}")
        dry.judge_requests += calls
        dry.judge_prompt_tokens += tokens
        dry.judge_completion_bound += calls * ((judge.generation.max_tokens or 0) + (cfg.generation.max_tokens or 0))
        cost = price.cost({"prompt_tokens": tokens, "completion_tokens": 0}) if price is not None else None
        dry.judge_cost_usd = None if dry.judge_cost_usd is None or cost is None else dry.judge_cost_usd + cost


def dry_run_lines(cfg: EvalConfig, plan: RunPlan, dry: DryRun) -> list[str]:
    """The one place the dry run's text is built: the summary line (requests, tokens, cost),
    then one line per section that has something to say. A new section is one more entry
    appended here (e.g. a resumed run's progress, a power estimate, a batch estimate)."""
    head = f"evalkit: dry run: {cfg.benchmark.name} × {cfg.model.name}: {counted(dry.requests, 'request')}"
    if cfg.model.kind != "litellm":
        lines = [f"{head} answered offline by model={cfg.model.name} (nothing is sent to a provider; cost 0); nothing sent, nothing written"]
    else:
        lines = [f"{head}, ~{dry.prompt_tokens:,} prompt tokens{_rollouts_part(dry)}; {_cost_part(cfg, plan, dry)}; nothing sent, nothing written"]
    if dry.judge_requests:
        cost = f"estimated cost ≥ ${dry.judge_cost_usd:.4f}" if dry.judge_cost_usd is not None else "cost unknown (a judge without a price)"
        lines.append(f"evalkit: dry run: judges ({', '.join(j.model.name for j in cfg.judge)}): {counted(dry.judge_requests, 'request')}, "
                     f"~{dry.judge_prompt_tokens:,} prompt tokens around an empty answer (each judged answer adds its own); {cost}")  # fmt: skip
    if cfg.run.batch and cfg.model.kind == "litellm":
        lines.append(f"evalkit: dry run: {dry_run_section(plan, dry.prompt_tokens or 0, dry.requests)}")
    if cfg.model.kind == "litellm" and dry.requests:
        lines.append(f"evalkit: dry run: {_time_part(cfg, plan, dry)}")
    if cfg.run.resume is not None:
        lines.append(f"evalkit: dry run: resuming {cfg.run.resume}: {dry.journaled} of {counted(len(plan.units), 'request')} "
                     f"already journaled, {dry.requests} to send")
    qualified = qualification_line(cfg)
    if qualified:
        lines.append(qualified)
    budget = _budget_line(cfg, plan, dry)
    if budget:
        lines.append(budget)
    power = power_line(cfg, len(plan.samples))
    if power:
        lines.append(power)
    return lines


def qualification_line(cfg: EvalConfig) -> str | None:
    """The dry run's line on the judges' qualification (``None`` without a network judge):
    what the run would do with them — refuse, with the line it would refuse with; run with its
    headline marked ``judge not qualified``; or run on qualified judges
    (:func:`judge_qualification`, :func:`evalkit.benchmarks.task.qualification.refusal`)."""
    qualification = judge_qualification(cfg)
    if not qualification:
        return None
    require = qualification.get("require")
    head = f"evalkit: dry run: judge qualification (judge_qualification.require={require}):"
    why = refusal(qualification, gated=cfg.run.stop_when is not None, benchmark=cfg.benchmark.name)
    if why is not None:
        return f"{head} the run would be REFUSED: {why}"
    note = headline_judge_note(qualification)
    if note:
        return f"{head} the run would go on, its headline marked '{note}'"
    scorer = qualification.get("headline_scorer")
    if scorer is None:
        return f"{head} the headline is no judge's; {'; '.join(_status_words(qualification))}"
    return f"{head} every judge of the headline ({scorer}) is qualified; {'; '.join(_status_words(qualification))}"


def _status_words(qualification: dict[str, Any]) -> list[str]:
    return [f"{judge} on {scorer}: {st.get('status')}" for judge, per in qualification["judges"].items() for scorer, st in per.items()]


def _budget_line(cfg: EvalConfig, plan: RunPlan, dry: DryRun) -> str | None:
    """A line when the estimate passes ``run.max_total_tokens`` / ``run.max_cost_usd``: by the
    prompt tokens alone (the run will stop short), or only if answers used ``max_tokens``
    (it may); the judges' calls count in both (:func:`_estimate_judges`). A resume's
    estimate does not count what its journal spent already."""
    if not dry.judge_requests and (cfg.model.kind != "litellm" or not dry.requests or dry.prompt_tokens is None):
        return None
    dry = dry if dry.prompt_tokens is not None else replace(dry, prompt_tokens=0, requests=0)  # an offline model: its judges only
    max_tokens = cfg.generation.max_tokens or 0
    lower_tokens = dry.prompt_tokens + dry.judge_prompt_tokens
    upper_tokens = lower_tokens + max_tokens * dry.requests + dry.judge_completion_bound
    price = plan.prices.get("agent")
    checks = []
    if cfg.run.max_total_tokens is not None:
        checks.append(("run.max_total_tokens", cfg.run.max_total_tokens, lower_tokens, upper_tokens, "{:,} tokens"))
    if cfg.run.max_cost_usd is not None and dry.cost_usd is not None and price is not None and dry.judge_cost_usd is not None:
        # with judges, only the lower bound is checked (each judge's answers have a price of their own)
        upper_cost = None if dry.judge_requests else price.cost({"prompt_tokens": dry.prompt_tokens, "completion_tokens": max_tokens * dry.requests})
        checks.append(("run.max_cost_usd", cfg.run.max_cost_usd, dry.cost_usd + dry.judge_cost_usd, upper_cost, "${:.4f}"))
    for key, limit, lower, upper, shown in checks:
        if lower > limit:
            return (f"evalkit: dry run: the estimate exceeds {key}={limit:g} by the prompt tokens alone ({shown.format(lower)}): "
                    "the run will stop short, its unsent requests failed as budget_exceeded (resume with a larger budget)")
        if upper is not None and upper > limit and not dry.rollouts:
            return (f"evalkit: dry run: the estimate may exceed {key}={limit:g} ({shown.format(upper)} if every answer used "
                    f"max_tokens={max_tokens}): requests whose upper bound does not fit are not sent")
    return None


def _time_part(cfg: EvalConfig, plan: RunPlan, dry: DryRun) -> str:
    """How long the requests would take (:func:`evalkit.engine.estimate.time_line`): at the
    rate ``model.tokens_per_second`` states, else at the rate the newest earlier run of the
    model measured in ``run.output_root``; ``backend.concurrency`` at a time."""
    if cfg.model.tokens_per_second is not None:
        rate = estimate.stated(cfg.model.tokens_per_second)
    else:
        rate = estimate.measured(Path(cfg.run.output_root), cfg.model.name, plan.models.model_id)
    return estimate.time_line(dry.prompt_tokens or 0, dry.requests, cfg.generation.max_tokens, cfg.backend.concurrency, rate,
                              dry.rollouts)  # fmt: skip


def _rollouts_part(dry: DryRun) -> str:
    if not dry.rollouts:
        return ""
    return f"; {dry.rollouts} of them open agent rollouts, counted by their first turn only: a lower bound"


def _cost_part(cfg: EvalConfig, plan: RunPlan, dry: DryRun) -> str:
    price = plan.prices.get("agent")
    if dry.cost_usd is None:
        return "cost unknown (no price: set model.pricing)"
    shown = f"estimated cost ≥ ${dry.cost_usd:.4f} (prompt tokens only)"
    max_tokens = cfg.generation.max_tokens
    if max_tokens and price is not None and not dry.rollouts:
        upper = price.cost({"prompt_tokens": dry.prompt_tokens or 0, "completion_tokens": max_tokens * dry.requests})
        shown += f", ≤ ${upper:.4f} if every answer used max_tokens={max_tokens}"
    return shown


def power_line(cfg: EvalConfig, n_samples: int) -> str:
    """The dry run's power line (``""`` without ``run.baseline``): for ``n_samples`` and the
    baseline rate (``run.baseline``: a rate, or a run directory whose headline is the rate),
    the minimum detectable effect of comparing two runs and, with ``run.target_effect``, the
    samples needed (:func:`evalkit.stats.plan_power`).

    Raises:
        ConfigError: the baseline run's summary has no usable headline (one line).
    """
    run = cfg.run
    if run.baseline is None:
        return ""
    rate, source = run.baseline, "stated"
    if isinstance(rate, str):
        summary_path = Path(rate) / "summary.json"
        summary = read_summary(summary_path, ConfigError)  # no link followed, bounded, validated: one line
        rate = summary.shown_metrics()[0].get(summary.headline) if summary.headline else None
        if not isinstance(rate, (int, float)) or not 0 < rate < 1:
            raise ConfigError(f"run.baseline: {summary_path} has no headline strictly between 0 and 1 to plan with")
        source = f"the headline of {run.baseline}"
    got = plan_power(n_samples, float(rate), run.ci_level, run.target_effect)
    text = (f"evalkit: dry run: power: at a baseline rate of {rate:.4f} ({source}) and {n_samples} samples, a comparison of two "
            f"runs could detect |Δ| ≥ {got['mde']:.4f} (80% power, two-sided α = {1 - run.ci_level:.2g}; runs treated as independent)")  # fmt: skip
    if got["n_needed"] is not None:
        text += f"; detecting |Δ| = {run.target_effect:g} needs about {got['n_needed']:,} samples"
    return text
