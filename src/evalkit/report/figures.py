"""Every figure of a run beside its metrics: repeats averaged, intervals, counts per
category, the aggregation rule of each metric, and the repeat statistics.

* **Repeats** (``run.repeats=K``): each epoch is aggregated by the benchmark's own rules
  (ACEBench scores a multi-turn dialogue within an epoch), then each metric is the mean over
  the epochs that have it.
* **Intervals** (``metrics_ci``): :func:`evalkit.stats.intervals` over the benchmark's
  :class:`~evalkit.stats.StatPlan`, at ``run.ci_level`` with ``run.bootstrap_resamples``
  resamples seeded by ``run.seed``.
* **pass@K and pass^K** (``K = run.repeats`` > 1, when the benchmark's primary per-sample
  score is 0/1): the unbiased pass@K estimator and the share of samples right in every
  epoch, over samples scored in all K epochs; ``within_sample_std``: the mean over samples
  of the standard deviation of the primary score across epochs.
"""

from __future__ import annotations

import fnmatch
import math
from collections import defaultdict
from typing import Any

import numpy as np

from evalkit.stats import intervals, pass_at_k


def epoch_mean(per_epoch: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the epochs that have it (the metrics themselves for one epoch)."""
    if len(per_epoch) == 1:
        return dict(per_epoch[0])
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in per_epoch:
        for name, value in metrics.items():
            values[name].append(value)
    return {name: float(np.mean(v)) for name, v in values.items()}


def metric_intervals(bench: Any, samples: list[Any], epochs: list[list[dict[str, Any]]], run: Any, prefix: str = "") -> dict[str, Any]:
    """``{prefix + metric: {low, high, stderr, n, method}}`` (``{}`` when the benchmark has no
    plan or intervals are off)."""
    if run.bootstrap_resamples <= 0 or not any(epochs):
        return {}
    plan = bench.stat_plan(samples, epochs)
    if plan is None:
        return {}
    return {prefix + name: ci for name, ci in intervals(plan, run.ci_level, run.bootstrap_resamples, run.seed).items()}


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
        ("pass@*", "share of samples right at least once in K tries (unbiased pass@k estimator, Chen et al. 2021)"),
        ("pass^*", "share of samples right in every one of the K epochs"),
        ("within_sample_std", "mean over samples of the standard deviation of the primary score across epochs"),
    ]
    out = {}
    for name in names:
        bare = name.removeprefix("partial_")
        line = next((text for pattern, text in rules if fnmatch.fnmatchcase(bare, pattern)), None)
        if line is not None:
            out[name] = line
    return out


def repeat_figures(bench: Any, epochs: list[list[dict[str, Any]]]) -> dict[str, float]:
    """``pass@K``, ``pass^K`` and ``within_sample_std`` of the primary score (see the module
    docstring); ``{}`` with one epoch."""
    k = len(epochs)
    if k < 2:
        return {}
    values: dict[str, list[float]] = defaultdict(list)
    for rows in epochs:
        for r in rows:
            v = (r.get("scores") or {}).get(bench.primary_score)
            if isinstance(v, (int, float)):
                values[r["sample_id"]].append(float(v))
    full = [v for v in values.values() if len(v) == k]
    out: dict[str, float] = {}
    if not full:
        return out
    out["within_sample_std"] = float(np.mean([np.std(v) for v in full]))
    if all(x in (0.0, 1.0) for v in full for x in v):
        correct = np.array([sum(v) for v in full])
        value = pass_at_k(correct, np.full(len(full), k), k)
        if not math.isnan(value):
            out[f"pass@{k}"] = value
        out[f"pass^{k}"] = float(np.mean([all(x == 1.0 for x in v) for v in full]))
    return out
