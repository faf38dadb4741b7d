"""``summary.json`` (the record other tools read) and ``report.md`` (the one a person reads).

summary.json fields (ARCHITECTURE.md, extend don't rename; typed and validated by
:class:`evalkit.summary.Summary`, which says what each count counts with repeats):
``status`` complete|incomplete, ``benchmark``, ``model``, ``n_samples``, ``n_scored``,
``n_failed`` (samples), ``n_scored_rows``, ``n_failed_rows`` (sample × epoch), ``metrics`` (withheld —
empty — when incomplete), ``partial_metrics`` (only when incomplete, every name prefixed
``partial_``), ``headline`` (name of the headline metric), what the benchmark declares for the tools
that read a run (``primary_score``, ``tracked_metrics``, ``data_source``:
:meth:`~evalkit.benchmarks.base.Benchmark.declared`), ``data_fingerprint``,
``prompt_hash``, ``instrument`` (:func:`instrument`), ``code_version``, ``started_at``, ``finished_at``, plus failure counts by
kind, timings and token usage.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from tabulate import tabulate

from evalkit.errors import counted, printable
from evalkit.report.markdown import md_cells, md_code, md_text
from evalkit.specs import ReportSpec
from evalkit.stats import with_interval
from evalkit.summary import SCHEMA_VERSION, Summary


def instrument(bench: Any, spec: ReportSpec | None = None) -> dict[str, Any]:
    """The run's ``instrument`` fingerprint entry, built here only: what measured the run
    besides the model under test — the benchmark's scoring rules
    (:meth:`~evalkit.benchmarks.base.Benchmark.instrument`, e.g. ``{"scoring": "evalscope"}``)
    and, for a judged task, the judges' identity under ``judge`` (:func:`judge_identity`,
    of ``spec``'s judges and ``llm_judge`` scorers). ``compare`` names any difference between two
    runs' instruments as it names a prompt change (:func:`evalkit.compare.comparability`)."""
    out = dict(bench.instrument())
    judge = judge_identity(spec.judges, spec.judge_scorers) if spec is not None else {}
    if judge:
        out["judge"] = judge
    return out


def judge_identity(judges: Sequence[Any], scorers: Sequence[Any] = ()) -> dict[str, Any]:
    """Who judged a run (issue 32 item 5): ``{"judges": [{"name", "model", "provider"}, …],
    "rubric": "sha256:<16 hex>"}`` — each judge (its :class:`~evalkit.config.ModelConfig`,
    ``judge.model`` in the order named; a panel: several): its model config's name, the provider model it asks (``provider/model``,
    litellm's spelling; ``reference`` for the reference judge, which reads the gold
    verdicts) and the provider (the part before ``/``; the model kind when there is none);
    ``rubric``: a digest of every ``llm_judge`` scorer's name, rubric, system prompt and
    verdict settings (``scorers``: the ``llm_judge`` ones of ``benchmark.scorers``), so that a
    reworded rubric is a new instrument. ``{}`` for a run without judges. Never an address or
    a key."""
    if not judges:
        return {}
    who = []
    for model in judges:
        asked = model.provider_model or model.kind
        who.append({"name": model.name, "model": asked,
                    "provider": asked.split("/", 1)[0] if model.provider_model and "/" in asked else model.kind})  # fmt: skip
    rules = [{"name": s.score_name, "rubric": s.rubric, "system": s.system,
              **{k: s.judge_setting(k) for k in ("mode", "verdict", "scale_min", "scale_max", "against", "panel")}}
             for s in scorers]  # fmt: skip
    digest = hashlib.sha256(json.dumps(rules, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()
    return {"judges": who, "rubric": f"sha256:{digest[:16]}"}


def build_summary(
    *,
    spec: ReportSpec,
    bench: Any,
    samples: list[Any],
    records: list[dict[str, Any]],
    failures: dict[Any, dict[str, Any]],
    missing: list[Any],
    metrics: dict[str, float],
    fingerprint: str,
    prompt_hash: str,
    code_version: str,
    model_id: str,
    started_at: str,
    finished_at: str,
    wall_s: float,
    figures: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary dict. A run is complete only when every selected sample was scored in
    every epoch. ``missing``: the ``(sample id, epoch)`` of every unscored unit;
    ``figures``: intervals, counts, aggregation and repeat figures
    (:mod:`evalkit.report.figures`), merged in."""
    complete = not missing
    failed_ids = list(dict.fromkeys(sid for sid, _ in missing))
    usage = Counter()
    latencies = []
    for r in records:
        usage.update({k: int(v) for k, v in (r.get("usage") or {}).items() if isinstance(v, (int, float))})
        if not r.get("cached") and r.get("latency_s"):
            latencies.append(float(r["latency_s"]))
    statuses = Counter(r.get("status", "ok") for r in records)
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete" if complete else "incomplete",
        "benchmark": spec.benchmark,
        "model": spec.model,
        "model_id": model_id,
        "user_model": spec.user_model,
        "shots": spec.shots,
        "mode": spec.mode,
        "pid": os.getpid(),
        "n_samples": len(samples),
        "repeats": spec.repeats,
        "n_requested": len(samples) * spec.repeats,
        "n_scored": len(samples) - len(failed_ids),
        "n_failed": len(failed_ids),
        "n_scored_rows": len(records),
        "n_failed_rows": len(missing),
        "failed_by_kind": dict(Counter(f.get("error_kind", "unknown") for f in failures.values())),
        "failed_ids": failed_ids,
        "status_counts": dict(statuses),
        "scorer_limit_ids": [r["sample_id"] for r in records if r.get("status") == "scorer_limit"],
        "headline": bench.headline_metric,
        **bench.declared(),
        "metrics": metrics if complete else {},
        "data_fingerprint": fingerprint,
        "data_files_fingerprint": bench.data_fingerprints(),
        "prompt_hash": prompt_hash,
        "prompt_template_hash": bench.prompt_fingerprint(),
        "instrument": instrument(bench, spec),
        "code_version": code_version,
        "generation_params": dict(spec.generation_params),
        "usage": dict(usage),
        "mean_latency_s": round(sum(latencies) / len(latencies), 4) if latencies else None,
        "wall_s": round(wall_s, 3),
        "started_at": started_at,
        "finished_at": finished_at,
    }
    if not complete:
        summary["partial_metrics"] = {f"partial_{k}": v for k, v in metrics.items()}
    summary.update(figures or {})
    return summary


def headline_text(summary: Summary) -> str:
    """``f1_macro = 0.5440 [0.4900, 0.6000] (n=170)``: the headline with its interval and the
    number of units it rests on (a complete run's; ``""`` otherwise); a headline a judge scored
    that was not qualified when the run started is followed by ``— judge not qualified: obey
    below_floor, judge_qualification.require=never`` (:meth:`~evalkit.summary.Summary.headline_judge_note`)."""
    head = summary.headline
    value = summary.metrics.get(head) if head else None
    note = summary.headline_judge_note()
    note = f" — {printable(note, 400)}" if note else ""
    if not summary.complete or not isinstance(value, (int, float)):
        return f"{head} = {_fmt(value)}{note}"
    ci = summary.metrics_ci.get(head)
    n = ci["n"] if ci else summary.n_scored
    return f"{head} = {with_interval(value, ci)} (n={n}){scoring_label(summary)}{note}"


def scoring_label(summary: Summary) -> str:
    """``", scored by evalscope rules"``: which rules scored the run, for a benchmark that
    has several (its ``instrument`` names ``scoring``); ``""`` otherwise."""
    scoring = summary.instrument.get("scoring")
    return f", scored by {scoring} rules" if isinstance(scoring, str) and scoring else ""


def write_report(run_dir: Path, summary: Summary, bench: Any, generates: bool = True) -> Path:
    """``report.md``: status line with the headline and its interval, counts, the
    benchmark's tables (with intervals and scored-of-requested counts; partial when
    incomplete), how each metric aggregates, the answers stopped by the scoring bounds.
    The generation parameters are shown only when ``generates`` (a model that is sent
    requests; offline models — reference, replay, baselines — send nothing)."""
    complete = summary.complete
    lines = [f"# {md_text(summary.benchmark)} × {md_text(summary.model)}", ""]
    head_value = summary.metrics.get(summary.headline) if summary.headline else None
    if complete and not (isinstance(head_value, (int, float)) and math.isfinite(head_value)):
        lines.append(f"**Status: complete, but the headline could not be computed**: {md_code(str(summary.headline))} has "
                     "no value (the scored answers give it nothing to compute from, e.g. a derived metric over no "
                     "valid rows). No headline score is published; the figures below are the run's.")  # fmt: skip
    elif complete:
        lines.append(f"**Status: complete.** Headline `{headline_text(summary)}`")
    else:
        lines.append(
            f"**Status: INCOMPLETE** — {summary.n_failed_rows} of "
            f"{counted(summary.n_requested, 'answer') if summary.n_requested is not None else '? answers'} "
            f"{'is' if summary.n_failed_rows == 1 else 'are'} not scored "
            f"(see `failed.jsonl`). No headline score is published; figures below are partial."
        )
    lines += qualification_lines(summary)
    lines += _facts(summary, generates)
    lines += spend_lines(summary)
    prefix = "" if complete else "partial_"
    metrics = summary.shown_metrics()[0]
    ci = {k.removeprefix(prefix): v for k, v in summary.metrics_ci.items()}
    for title, headers, rows in bench.report_tables(metrics, ci, summary.category_counts):
        table = tabulate(md_cells(rows), headers=md_cells([headers])[0], tablefmt="github", floatfmt=".4f")
        lines += [f"## {md_text(title)}{'' if complete else ' (partial)'}", "", table, ""]
    lines += caveat_lines(summary)
    lines += agreement_lines(summary)
    lines += invalid_lines(summary)
    lines += _repeats_and_rules(summary, metrics, ci)
    lines += _limited(summary.scorer_limit_ids)
    lines += image_lines(run_dir)
    plots = sorted((Path(run_dir) / "plots").glob("*.png")) if (Path(run_dir) / "plots").is_dir() else []
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    path = Path(run_dir) / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


#: images report.md names one by one (the rest are counted; all are in the run's images/ folder)
REPORT_IMAGES = 50


def image_lines(run_dir: Path) -> list[str]:
    """report.md's section on the run's images (a task's ``dataset.fields.images``): each
    stored image of ``images/`` named by its SHA-256 digest, with its file and size (at most
    :data:`REPORT_IMAGES`; the journal's rows say which sample sent which, ``images``)."""
    folder = Path(run_dir) / "images"
    if not folder.is_dir() or folder.is_symlink():
        return []
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink())
    if not files:
        return []
    total = sum(p.stat().st_size for p in files)
    rows = [[f"`{p.stem}`", f"[{p.name[:16]}…](images/{p.name})", p.stat().st_size] for p in files[:REPORT_IMAGES]]
    lines = ["## Images", "", f"{len(files)} images sent ({total} bytes), stored once by SHA-256 digest in `images/`; "
             "each row of predictions.jsonl names its sample's (`images`).", ""]  # fmt: skip
    lines += [tabulate(rows, headers=["sha256", "file", "bytes"], tablefmt="github"), ""]
    if len(files) > REPORT_IMAGES:
        lines += [f"… and {len(files) - REPORT_IMAGES} more in `images/`.", ""]
    return lines


def agreement_lines(summary: Summary) -> list[str]:
    """report.md's section on the agreement between a panel's judges (``judge_agreement``,
    :mod:`evalkit.benchmarks.task.agreement`): one table row per scorer and pair of judges
    (and per scorer's whole panel), each figure with its interval and method."""
    rows = []
    for scorer, entry in summary.judge_agreement.items():
        figures = [(" & ".join(p["judges"]), p) for p in entry.get("pairs") or []]
        if entry.get("panel"):
            figures.append((f"panel ({len(entry.get('judges') or [])} judges)", entry["panel"]))
        for who, fig in figures:
            ci = fig.get("ci")
            value = "undefined (one category only)" if fig.get("value") is None else with_interval(fig["value"], ci, 3)
            rows.append([scorer, who, fig.get("method"), value, fig.get("n_items"), fig.get("n_excluded")])
    if not rows:
        return []
    table = tabulate(md_cells(rows), headers=["scorer", "judges", "method", "value [interval]", "answers", "left out"], tablefmt="github")
    interval = next((f["ci"]["method"] for e in summary.judge_agreement.values() for f in e.get("pairs") or [] if f.get("ci")), None)
    note = ("Nominal agreement of the judges' values for each answer (an invalid verdict leaves the answer out of its pair)"
            + (f"; intervals: {interval}" if interval else "") + ".")  # fmt: skip
    return ["## Agreement between judges", "", md_text(note), "", table, ""]


def qualification_text(qualification: Any) -> list[str]:
    """One line per judge and scorer: ``judge_a on quality: qualified (κ 0.812 [0.740, 0.870],
    worst steer rate 0, 2026-…)`` or why not — what report.md and ``compare`` show beside the
    judge-scored numbers (``qualification``: a summary's ``judge_qualification``, read as
    untrusted: a field of another shape is shown as ``?``)."""

    def num(x: Any) -> str:
        return f"{x:.3f}" if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else "?"

    out = []
    judges = qualification.get("judges") if isinstance(qualification, dict) else None
    for judge, per in (judges if isinstance(judges, dict) else {}).items():
        for scorer, st in (per if isinstance(per, dict) else {}).items():
            st = st if isinstance(st, dict) else {}
            if st.get("status") == "qualified":
                ci = st.get("kappa_ci") if isinstance(st.get("kappa_ci"), dict) else {}
                interval = f" [{num(ci.get('low'))}, {num(ci.get('high'))}]" if ci else ""
                out.append(f"{judge} on {scorer}: qualified (κ {num(st.get('kappa'))}{interval}, worst steer rate "
                           f"{num(st.get('steer_rate'))}, {str(st.get('date'))[:10]})")  # fmt: skip
            else:
                out.append(f"{judge} on {scorer}: {str(st.get('status')).upper().replace('_', ' ')}: {st.get('line')}")
    return out


def qualification_lines(summary: Summary) -> list[str]:
    """report.md's lines on the judges' qualification, beside the headline they score
    (``judge_qualification``: :func:`evalkit.benchmarks.task.qualification.run_qualification`)."""
    shown = qualification_text(summary.judge_qualification)
    if not shown:
        return []
    require = summary.judge_qualification.get("require")
    return ["", f"Judge qualification (judge_qualification.require={md_text(require)}; docs/judges.md):", ""] + [f"- {md_text(t)}" for t in shown]


def invalid_lines(summary: Summary) -> list[str]:
    """report.md's section on invalid verdicts (``judge_invalid``,
    :func:`evalkit.benchmarks.task.agreement.invalid_verdicts`): per scorer the panel's policy,
    and per judge the answers it gave no valid verdict on and why."""
    rows, policies = [], []
    for scorer, entry in summary.judge_invalid.items():
        policies.append(f"{scorer}: invalid_verdict: {entry.get('policy')}")
        for judge, fig in (entry.get("judges") or {}).items():
            reasons = "; ".join(f"{why} ({n})" for why, n in (fig.get("reasons") or {}).items()) or "none"
            rows.append([scorer, judge, fig.get("samples"), reasons])
    if not rows or not any(r[2] for r in rows):
        return []
    table = tabulate(md_cells(rows), headers=["scorer", "judge", "answers invalidated", "why"], tablefmt="github")
    note = ("Answers a judge gave no valid verdict on (invalid JSON, a duplicate key, a verdict copied from the answer, a "
            "failed call ...). With invalid_verdict: fail (the default) each such answer is a judge_error failure; with "
            "exclude, the panel's other judges score it. Policy: " + ", ".join(policies) + ".")  # fmt: skip
    return ["## Invalid verdicts by judge", "", md_text(note), "", table, ""]


def _facts(summary: Summary, generates: bool) -> list[str]:
    kinds = summary.failed_by_kind
    repeats = f" × {summary.repeats} repeats" if summary.repeats > 1 else ""
    return [
        "",
        f"- samples: {summary.n_samples}{repeats}, scored: {summary.n_scored}, failed: {summary.n_failed}"
        + (f" (answers: {summary.n_scored_rows} scored, {summary.n_failed_rows} not)" if repeats else "")
        + (f" ({', '.join(f'{k}: {v}' for k, v in kinds.items())})" if kinds else ""),
        f"- data fingerprint: `{str(summary.data_fingerprint)[:16]}`, prompt hash: `{str(summary.prompt_hash)[:16]}`, "
        f"code: `{summary.code_version}`",
        f"- statuses of the scored answers: {_counts(summary.status_counts)}",
        *([f"- generation: `{summary.generation_params}`"] if generates else []),
        f"- intervals: {int(round(100 * summary.ci_level))}%, seed {summary.seed}, method by regime: "
        + (interval_methods(summary.metrics_ci) or "none computed"),
        f"- wall time: {summary.wall_s} s; tokens: {summary.usage or 'n/a'}",
        "",
    ]


def interval_methods(cis: dict[str, Any]) -> str:
    """``percentile bootstrap (12 metrics), Wilson score (3 metrics)``: the interval methods
    a run used (``cis``: a summary's ``metrics_ci``; each method's name, before its reasons,
    as :func:`evalkit.stats.intervals` chose it by regime); ``""`` when none was computed."""
    counts: dict[str, int] = {}
    for ci in cis.values():
        name = str(ci.get("method", "")).split(":")[0]
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ({n} metric{'s' if n > 1 else ''})" for name, n in counts.items())


def caveat_lines(summary: Summary) -> list[str]:
    """report.md's section on what the intervals do not cover: zero-width intervals (a
    warning), metrics that are not estimable, and — for an incomplete run — the assumption
    under which failures are left out, with the worst-case bounds."""
    cis = summary.metrics_ci
    zero = [md_code(name) for name, ci in cis.items() if ci.get("warning")]
    lines: list[str] = []
    if zero:
        lines.append(f"- **Warning: zero-width intervals** for {', '.join(zero[:10])}"
                     + (f" and {len(zero) - 10} more" if len(zero) > 10 else "")
                     + ": the data show no variation, so the interval understates the uncertainty "
                     "(unless these units are the whole population).")  # fmt: skip
    for name, why in summary.metrics_not_estimable.items():
        lines.append(f"- {md_code(name)} has no interval: {md_text(why)}.")
    if not summary.complete:
        lines.append("- Failed answers are left out of the partial figures, which assumes they are missing at random "
                     "(as likely to be right as the scored ones). The worst case counts every failure as 0 or as 1:")  # fmt: skip
        for name, (low, high) in list(summary.partial_bounds.items())[:12]:
            value = (summary.partial_metrics or {}).get(name)
            shown = with_interval(value, cis.get(name)) if isinstance(value, (int, float)) else ""
            lines.append(f"  - {md_code(name)} {shown}: worst case [{low:.4f}, {high:.4f}]")
    return ["## What the intervals do not cover", "", *lines, ""] if lines else []


def _repeats_and_rules(summary: Summary, metrics: dict[str, float], ci: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    repeat = [[k, with_interval(v, ci.get(k))] for k, v in metrics.items() if k.startswith(("pass@", "pass^", "within_sample"))]
    if repeat:
        lines += [f"## Repeats ({summary.repeats} epochs)", "", tabulate(repeat, headers=["figure", "value"], tablefmt="github"), ""]
    rules: dict[str, list[str]] = {}
    for name, rule in summary.aggregation.items():
        rules.setdefault(rule, []).append(name.removeprefix("partial_"))
    if rules:
        rows = [[", ".join(f"`{n}`" for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else ""), rule]
                for rule, names in rules.items()]  # fmt: skip
        lines += ["## How the figures aggregate", "", tabulate(rows, headers=["metrics", "rule"], tablefmt="github"), ""]
    return lines


def _limited(limited: list[str]) -> list[str]:
    if not limited:
        return []
    return [
        "## Answers whose scoring hit a limit",
        "",
        f"{len(limited)} answers were stopped by the scoring bounds (`benchmark.score_timeout_s`, "
        "`benchmark.score_memory_mb`) and scored 0 as wrong answers (status `scorer_limit`; the reason is each "
        "row's `detail` in `predictions.jsonl`): " + ", ".join(md_code(sid) for sid in limited[:50])
        + (f" and {len(limited) - 50} more" if len(limited) > 50 else ""),
        "",
    ]


# ---- reasoning, tokens, cost and budget (issue 15) -------------------------------------------
def spend_fields(
    *,
    records: list[dict[str, Any]],
    spent: tuple[float | None, int | None],
    prices: dict[str, str | None],
    limits: dict[str, Any],
    not_sent: int,
    rule: str,
    strip_prefix: bool,
) -> dict[str, Any]:
    """The summary's fields on reasoning, tokens, cost and budget (``usage``, the token
    totals of the scored answers, is :func:`build_summary`'s).

    ``usage_by_subset``: ``{subset: {"n": answers that reported usage, <usage key>: mean
    tokens per such answer}}``; ``usage_by_actor`` (when rows split their usage: rollouts,
    judged answers): ``{actor: {<usage key>: tokens summed over the scored answers}}`` —
    ``judge`` holds the judges' tokens; ``cost_usd`` (USD) and ``spent_tokens`` (prompt + completion):
    what the run spent across its attempts, read back from its journal (``spent``), ``null``
    when unknown — a model taking part has no price (whether its answers were sent or all came
    from the response cache), or an answer's usage was not reported; ``prices``: each model's price (``null``: none known); ``budget`` (when
    ``run.max_cost_usd`` / ``run.max_total_tokens`` is set): the limits, whether the spend
    reached one or a request was kept back for want of room, and ``not_sent`` (samples failed as ``budget_exceeded``); ``reasoning``:
    the rule the scored outputs went through, whether ``benchmark.strip_reasoning_prefix``
    was on (scores are then not the official rule's), how many answers it stripped, and
    how many carried reasoning in the provider's separate field.
    """
    by_subset: dict[str, Counter] = {}
    counted: Counter = Counter()
    for r in records:
        usage = r.get("usage")
        if isinstance(usage, dict):
            by_subset.setdefault(r.get("subset", "?"), Counter()).update({k: int(v) for k, v in usage.items() if isinstance(v, int)})
            counted[r.get("subset", "?")] += 1
    by_actor: dict[str, Counter] = {}
    for r in records:
        for actor, usage in (r.get("usage_by_actor") or {}).items() if isinstance(r.get("usage_by_actor"), dict) else ():
            totals = by_actor.setdefault(str(actor), Counter())
            totals.update({k: int(v) for k, v in (usage or {}).items() if isinstance(v, int)} if isinstance(usage, dict) else {})
    cost, tokens = spent
    if cost is not None and any(v is None for v in prices.values()):
        cost = None  # issue 47: a model without a price costs "unknown", also when every answer came from the cache ($0 spent)
    out: dict[str, Any] = {
        "usage_by_subset": {
            sub: {"n": counted[sub], **{k: round(v / counted[sub], 2) for k, v in sorted(sums.items())}}
            for sub, sums in sorted(by_subset.items())
        },
        "cost_usd": round(cost, 8) if cost is not None else None,
        "spent_tokens": tokens,
        "prices": prices,
        **({"usage_by_actor": {a: dict(sorted(c.items())) for a, c in sorted(by_actor.items())}} if by_actor else {}),
        "reasoning": {
            "rule": rule,
            "strip_reasoning_prefix": strip_prefix,
            "n_stripped": sum(1 for r in records if r.get("output_unstripped") is not None),
            "n_with_reasoning": sum(1 for r in records if r.get("reasoning")),
        },
    }
    if limits.get("max_cost_usd") is not None or limits.get("max_total_tokens") is not None:
        reached = bool(not_sent) or (limits.get("max_cost_usd") is not None and (cost is None or cost >= limits["max_cost_usd"])) or (
            limits.get("max_total_tokens") is not None and (tokens is None or tokens >= limits["max_total_tokens"])
        )
        out["budget"] = {**limits, "reached": reached, "not_sent": not_sent}
    return out


def spend_lines(summary: Summary) -> list[str]:
    """``report.md``'s lines on reasoning, cost and budget (after the counts)."""
    lines: list[str] = []
    reasoning = summary.reasoning
    if reasoning.get("strip_reasoning_prefix"):
        lines.append(
            f"**Reasoning prefix stripped** (`benchmark.strip_reasoning_prefix=true`): {reasoning.get('n_stripped', 0)} "
            "answers were scored without their text up to the last `</think>` (each keeps it as `output_unstripped`); "
            "these scores are not the benchmark's official rule's."
        )
    if summary.has("cost_usd"):
        cost = summary.cost_usd
        shown = f"${cost:.4f}" if isinstance(cost, (int, float)) else "unknown (a model without a price, or usage not reported)"
        prices = ", ".join(f"{k}: {v or 'no price'}" for k, v in summary.prices.items())
        lines.append(f"- cost: {shown}; tokens spent: {summary.spent_tokens if summary.has('spent_tokens') else 'n/a'} ({prices})")
    budget = summary.budget
    if budget:
        limits = ", ".join(f"run.{k}={budget[k]}" for k in ("max_cost_usd", "max_total_tokens") if budget.get(k) is not None)
        state = f"spent; {budget['not_sent']} samples not sent (`budget_exceeded`)" if budget.get("reached") else "not reached"
        lines.append(f"- budget: {limits}: {state}")
    if reasoning.get("rule"):
        lines.append(f"- reasoning rule: {reasoning['rule']}; {reasoning.get('n_with_reasoning', 0)} answers came with separate reasoning (kept, never scored)")
    return lines + [""] if lines else []


def _counts(counts: dict[str, int]) -> str:
    """``ok: 8, format_error: 2`` (``none`` when nothing was scored)."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else str(value)
