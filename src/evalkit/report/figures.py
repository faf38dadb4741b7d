"""Every figure of a run beside its metrics: repeats averaged, intervals, counts per
category, the aggregation rule of each metric, and the repeat statistics.

* **Repeats** (``run.repeats=K``): each epoch is aggregated by the benchmark's own rules
  (ACEBench scores a multi-turn dialogue within an epoch), then each metric is the mean over
  the epochs that have it.
* **Intervals** (``metrics_ci``): :func:`evalkit.stats.intervals` over the benchmark's
  :class:`~evalkit.stats.StatPlan`, at ``run.ci_level`` with ``run.bootstrap_resamples``
  resamples seeded by ``run.seed``.
* **pass@K and pass^K** (``K = run.repeats`` > 1, when the headline rests on 0/1 scores):
  each unit's unbiased pass@K estimator (and its pass^K, right in all K tries) from its K
  epochs, aggregated exactly as the headline is (categories, dialogues, weights;
  :func:`evalkit.stats.repeat_plan`), with intervals; ``within_sample_std``: the mean over
  units of the standard deviation (ddof = 1) of the headline's per-unit score across epochs;
  ``repeat_variance``: between-unit and within-unit (generation) variance of that score, the
  intraclass correlation and the effective number of units ``U·K / (1 + (K − 1)·ICC)``.
* **Not estimable** (``metrics_not_estimable``): metrics with no interval, and why.
"""

from __future__ import annotations

import fnmatch
import logging
from collections import defaultdict
from typing import Any

import numpy as np

from evalkit.stats import intervals, not_estimable, repeat_plan

log = logging.getLogger("evalkit")


def epoch_mean(per_epoch: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the epochs that have it (the metrics themselves for one epoch)."""
    if len(per_epoch) == 1:
        return dict(per_epoch[0])
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in per_epoch:
        for name, value in metrics.items():
            values[name].append(value)
    return {name: float(np.mean(v)) for name, v in values.items()}


def plan_figures(bench: Any, samples: list[Any], epochs: list[list[dict[str, Any]]], run: Any, prefix: str = "") -> dict[str, Any]:
    """The figures of the benchmark's :class:`~evalkit.stats.StatPlan`: ``{"repeat": {pass@K,
    pass^K, within_sample_std}, "metrics_ci": {prefix + metric: interval}, "not_estimable":
    {prefix + metric: why}, "repeat_variance": {...} or None}`` (empty when the benchmark has
    no plan; no intervals when ``run.bootstrap_resamples`` is 0). A zero-width interval is
    logged as a warning."""
    out: dict[str, Any] = {"repeat": {}, "metrics_ci": {}, "not_estimable": {}, "repeat_variance": None}
    if not any(epochs):
        return out
    plan = bench.stat_plan(samples, epochs)
    if plan is None:
        return out
    k, head = len(epochs), bench.headline_metric
    repeat_plans: dict[str, Any] = {}
    if k > 1:
        out["repeat"], out["repeat_variance"], repeat_plans = _repeat_figures(plan, head, k)
    if run.bootstrap_resamples > 0:
        ci = intervals(plan, run.ci_level, run.bootstrap_resamples, run.seed)
        for name, rplan in repeat_plans.items():
            got = intervals(rplan, run.ci_level, run.bootstrap_resamples, run.seed, [head]).get(head)
            if got is not None:
                ci[name] = got
        out["metrics_ci"] = {prefix + name: c for name, c in ci.items()}
        out["not_estimable"] = {prefix + name: why for name, why in not_estimable(plan).items()}
        for name, c in out["metrics_ci"].items():
            if c.get("warning"):
                log.warning("%s: %s", name, c["warning"])
    return out


def _repeat_figures(plan: Any, head: str, k: int) -> tuple[dict[str, float], dict[str, Any] | None, dict[str, Any]]:
    """pass@K / pass^K of the headline (when it rests on 0/1 scores), ``within_sample_std``
    and the variance decomposition of the headline's per-unit score (see the module docstring)."""
    deps = [head] if head in plan.columns else plan.dependencies().get(head, [])
    cols = [plan.columns[d] for d in deps if d in plan.columns]
    figures: dict[str, float] = {}
    plans: dict[str, Any] = {}
    if cols and all(np.all(np.isin(c.values[c.scored()], (0.0, 1.0))) for c in cols):
        for name, every in ((f"pass@{k}", False), (f"pass^{k}", True)):
            rplan = repeat_plan(plan, k, every)
            value = rplan.point().get(head)
            if value is not None:
                figures[name], plans[name] = value, rplan
    # the headline's per-unit score in each epoch: the mean of its base metrics' values there
    if not cols:
        return figures, None, plans
    mask = np.stack([c.scored() for c in cols])  # (C, E, U)
    vals = np.stack([np.nan_to_num(c.values) for c in cols]) * mask
    with np.errstate(invalid="ignore", divide="ignore"):
        per_epoch = vals.sum(axis=0) / mask.sum(axis=0)  # (E, U), nan where unscored
    full = per_epoch[:, ~np.isnan(per_epoch).any(axis=0)]
    if full.shape[1] < 2:
        return figures, None, plans
    within = float(np.mean(np.var(full, axis=0, ddof=1)))
    figures["within_sample_std"] = float(np.mean(np.std(full, axis=0, ddof=1)))
    between = max(float(np.var(full.mean(axis=0), ddof=1)) - within / k, 0.0)
    icc = between / (between + within) if between + within > 0 else 1.0
    n_units = int(full.shape[1])
    variance = {"score": f"per-unit score of {head}", "units": n_units, "epochs": k,
                "between_unit_variance": between, "within_unit_variance": within, "icc": icc,
                "effective_n": n_units * k / (1 + (k - 1) * icc)}  # fmt: skip
    return figures, variance, plans


def category_counts(bench: Any, samples: list[Any], epochs: list[list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """The benchmark's per-category counts summed over epochs (a sample asked K times counts K)."""
    total: dict[str, dict[str, int]] = {}
    for rows in epochs:
        for name, counts in bench.category_counts(samples, rows).items():
            into = total.setdefault(name, {})
            for k, v in counts.items():
                into[k] = into.get(k, 0) + v
    return total


def aggregation(bench: Any, names: list[str]) -> dict[str, str]:
    """``{metric: the one-line rule of how it aggregates}`` from the benchmark's
    ``aggregation_rules`` (first matching pattern); repeat figures have their own."""
    rules = list(bench.aggregation_rules) + [
        ("pass@*", "the headline with each unit's unbiased pass@K (right at least once in K tries; Chen et al. 2021), aggregated as the headline"),
        ("pass^*", "the headline with each unit right in every one of the K epochs, aggregated as the headline"),
        ("within_sample_std", "mean over units of the standard deviation (ddof = 1) of the headline's per-unit score across epochs"),
    ]
    out = {}
    for name in names:
        bare = name.removeprefix("partial_")
        line = next((text for pattern, text in rules if fnmatch.fnmatchcase(bare, pattern)), None)
        if line is not None:
            out[name] = line
    return out


def worst_case_bounds(bench: Any, samples: list[Any], epochs: list[list[dict[str, Any]]], missing: list[tuple[str, int]]) -> dict[str, list[float]]:
    """``{metric: [low, high]}``: each metric with every unscored answer (``missing``:
    ``(sample id, epoch)``) counted as 0 on every per-sample score, and as 1 — the range the
    metric could take whatever the failed answers would have scored (``{}`` when nothing is
    missing or the benchmark cannot aggregate such rows)."""
    if not missing:
        return {}
    keys = sorted({k for rows in epochs for r in rows for k in (r.get("scores") or {})})
    by_id = {s.id: s for s in samples}
    filled: list[dict[str, float]] = []
    for value in (0.0, 1.0):
        rows_by_epoch = [list(rows) for rows in epochs]
        for sid, epoch in missing:
            if sid in by_id and epoch < len(rows_by_epoch):
                rows_by_epoch[epoch].append({"sample_id": sid, "subset": by_id[sid].subset, "epoch": epoch,
                                             "scores": {k: value for k in keys}, "checks": {}})  # fmt: skip
        order = {s.id: i for i, s in enumerate(samples)}
        for rows in rows_by_epoch:
            rows.sort(key=lambda r: order.get(r["sample_id"], 0))
        try:
            filled.append(epoch_mean([bench.aggregate(samples, rows) for rows in rows_by_epoch]))
        except (KeyError, TypeError, ValueError):  # a benchmark whose rows need more than scores
            return {}
    low, high = filled
    return {n: [min(low[n], high[n]), max(low[n], high[n])] for n in low if n in high}
