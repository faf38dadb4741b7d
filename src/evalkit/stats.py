"""Uncertainty of every metric, and paired tests between runs.

A benchmark describes its metrics as a :class:`StatPlan` over its *independent units*
(an ACEBench record, a multi-turn dialogue or an agent rollout; a SOBHard question; a KE
item), each in a *stratum* (a category, a SOBHard family × difficulty cell):

* **base metrics** are means of a per-unit value over a subset of the units (``values``,
  ``mask``); with unit weights ``w`` (how often each unit is drawn) a base metric is
  ``Σ w·v·m / Σ w·m``, so one matrix product evaluates it on every resample at once;
* **derived metrics** (a group = the unweighted mean of its categories, the weighted
  OVERALL, SOBHard's ``balance_score``) are computed from the base metrics by the plan's
  ``derive`` function, which works on arrays (one value per resample).

With all weights 1 a plan gives the benchmark's point estimates: its reported metrics
(``Benchmark.aggregate``), the plan being each metric's one definition.

Intervals: the **percentile bootstrap** (BCa returns NaN when every score is equal, e.g. a
reference run at 1.0), resampling units **within each stratum** (n uniform draws with
replacement among a stratum's n units, so every stratum keeps its size and the weights of a
weighted aggregate are the headline's own), ``run.bootstrap_resamples`` resamples from
``run.seed``; ``stderr`` is the resamples' standard deviation. With repeats (epochs) a unit
carries all its epochs: metrics are computed per epoch and averaged, on every resample
(clustered by sample). ``scipy.stats.bootstrap`` is not used for these because it refuses
``paired=True`` for strata of unequal size and cannot recompute a stratified, weighted
aggregate.

Paired comparison of runs A and B over the units scored in both: Δ = B − A with a paired
bootstrap interval (the same draws for both runs); its p-value is the exact McNemar test
(``scipy.stats.binomtest`` on the discordant pairs; p = 1 when there are none) for a plain
mean of 0/1 scores, a paired sign-flip permutation test for a plain mean of graded scores,
and a two-sided paired-bootstrap p for every other metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use (0.4 s at start-up that a run's requests need
    not wait for: intervals are computed once they are done)."""
    from scipy import stats as sps

    return sps


#: kinds of metrics (what test a paired comparison uses)
BINARY, GRADED, DERIVED = "binary_mean", "graded_mean", "derived"


@dataclass
class Column:
    """A base metric: the mean of ``values`` over the units where ``mask`` is true, one row
    per epoch (shape ``(E, U)``); ``kind`` is :data:`BINARY` when every value is 0 or 1."""

    values: np.ndarray
    mask: np.ndarray
    kind: str = GRADED


@dataclass
class StatPlan:
    """A benchmark's metrics over its independent units (see the module docstring).

    Attributes:
        units: unit ids (stable across runs: pairing in compare matches them), length U.
        strata: the stratum of each unit (resampling keeps each stratum's size), length U.
        columns: base metric name → :class:`Column`.
        derive: ``{base name: array}`` → ``{derived name: array}``; arrays of one value per
            resample (``nan`` where undefined). Must use only numpy operations.
        kinds: kind of each derived metric (default :data:`DERIVED`).
        derived_n: how many units each derived metric covers (default: all of them).
        unit_label / stratum_label: what the units and a stratum are, in words (plural units,
            e.g. ``"questions"``; for ``method``).
    """

    units: list[str]
    strata: np.ndarray
    columns: dict[str, Column]
    derive: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
    kinds: dict[str, str] = field(default_factory=dict)
    derived_n: dict[str, int] = field(default_factory=dict)
    unit_label: str = "samples"
    stratum_label: str = "category"

    @property
    def n_epochs(self) -> int:
        return max((c.values.shape[0] for c in self.columns.values()), default=1)

    def evaluate(self, weights: np.ndarray, epoch_mean: bool = True) -> dict[str, np.ndarray]:
        """Every metric for each row of ``weights`` (shape ``(R, U)``): ``{name: (R,)}`` —
        per epoch, then averaged over epochs (``nan`` where a metric is undefined)."""
        names = list(self.columns)
        if not names:
            return {}
        per_epoch: list[dict[str, np.ndarray]] = []
        for e in range(self.n_epochs):
            values = np.stack([_row(self.columns[n].values, e) for n in names], axis=1)  # (U, M)
            mask = np.stack([_row(self.columns[n].mask, e) for n in names], axis=1).astype(float)
            num = weights @ (np.nan_to_num(values) * mask)
            den = weights @ mask
            with np.errstate(invalid="ignore", divide="ignore"):
                base = {n: np.where(den[:, i] > 0, num[:, i] / np.where(den[:, i] > 0, den[:, i], 1), np.nan) for i, n in enumerate(names)}
            out = dict(base)
            if self.derive is not None:
                out.update(self.derive(base))
            per_epoch.append(out)
        if len(per_epoch) == 1 or not epoch_mean:
            return per_epoch[0]
        with np.errstate(invalid="ignore"):
            return {n: np.nanmean(np.stack([p[n] for p in per_epoch]), axis=0) for n in per_epoch[0]}

    def point(self) -> dict[str, float]:
        """The point estimates (every unit weighs 1), ``nan`` dropped."""
        out = self.evaluate(np.ones((1, len(self.units))))
        return {k: float(v[0]) for k, v in out.items() if not math.isnan(float(v[0]))}

    def kind(self, name: str) -> str:
        return self.columns[name].kind if name in self.columns else self.kinds.get(name, DERIVED)


def _row(a: np.ndarray, e: int) -> np.ndarray:
    return a[e] if a.shape[0] > e else np.zeros_like(a[0])


def stratified_weights(strata: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(resamples, U)`` draw counts: within each stratum of size n, n units drawn uniformly
    with replacement (the counts are a multinomial over the stratum's units)."""
    strata = np.asarray(strata)
    weights = np.zeros((resamples, len(strata)))
    offsets = np.arange(resamples)[:, None]
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        n = len(idx)
        draws = rng.integers(0, n, size=(resamples, n)) + offsets * n
        weights[:, idx] = np.bincount(draws.ravel(), minlength=resamples * n).reshape(resamples, n)
    return weights


def intervals(plan: StatPlan, level: float, resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """``{metric: {low, high, stderr, n, method}}`` for every metric of ``plan`` with a
    point estimate (percentile bootstrap; see the module docstring). ``n`` is the number of
    units the metric's base metrics cover."""
    point = plan.point()
    if resamples <= 0 or not plan.units:
        return {}
    rng = np.random.default_rng(seed)
    draws = plan.evaluate(stratified_weights(plan.strata, resamples, rng))
    alpha = (1 - level) / 2
    method = (f"percentile bootstrap: {resamples} resamples of the {plan.unit_label} within each {plan.stratum_label}"
              + (", clustered by sample over epochs" if plan.n_epochs > 1 else ""))  # fmt: skip
    n_all = len(plan.units)
    out: dict[str, dict[str, Any]] = {}
    for name in point:
        d = draws[name][~np.isnan(draws[name])]
        if d.size == 0:
            continue
        col = plan.columns.get(name)
        n = int(np.any(col.mask, axis=0).sum()) if col is not None else plan.derived_n.get(name, n_all)
        low, high = np.quantile(d, [alpha, 1 - alpha])
        out[name] = {"low": float(low), "high": float(high), "stderr": float(d.std(ddof=1)) if d.size > 1 else 0.0,
                     "n": n, "method": method}  # fmt: skip
    return out


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate (scipy's ``binomtest(...).proportion_ci``)."""
    if n == 0:
        return (math.nan, math.nan)
    ci = _scipy_stats().binomtest(successes, n).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


# ------------------------------------------------------------------------------------------
# paired comparison
# ------------------------------------------------------------------------------------------
def align(a: StatPlan, b: StatPlan) -> tuple[StatPlan, StatPlan, int]:
    """The two plans restricted to the units both have (in one order), and how many units
    of either were left out."""
    common = [u for u in a.units if u in set(b.units)]
    excluded = len(set(a.units) | set(b.units)) - len(common)
    return _restrict(a, common), _restrict(b, common), excluded


def _restrict(plan: StatPlan, units: list[str]) -> StatPlan:
    pos = {u: i for i, u in enumerate(plan.units)}
    idx = np.array([pos[u] for u in units], dtype=int)
    cols = {n: Column(c.values[:, idx], c.mask[:, idx], c.kind) for n, c in plan.columns.items()}
    return StatPlan(units, plan.strata[idx], cols, plan.derive, plan.kinds, {}, plan.unit_label, plan.stratum_label)


def mcnemar(a: np.ndarray, b: np.ndarray) -> tuple[int, int, float]:
    """Exact McNemar test of paired 0/1 scores: ``(b_count, c_count, p)`` where ``b_count``
    pairs are right in A only and ``c_count`` right in B only; p = 1 when both are 0."""
    only_a = int(np.sum((a >= 0.5) & (b < 0.5)))
    only_b = int(np.sum((a < 0.5) & (b >= 0.5)))
    if only_a + only_b == 0:
        return only_a, only_b, 1.0
    return only_a, only_b, float(_scipy_stats().binomtest(only_a, only_a + only_b, 0.5).pvalue)


def sign_flip(a: np.ndarray, b: np.ndarray, permutations: int, rng: np.random.Generator) -> float:
    """Two-sided paired permutation (sign-flip) test of the mean difference ``b − a``
    (``scipy.stats.permutation_test``, ``permutation_type="samples"``); p = 1 when every
    difference is 0."""
    d = b - a
    if not np.any(d) or d.size < 2:  # one pair: both signs give |d|, p = 1
        return 1.0
    res = _scipy_stats().permutation_test((a, b), lambda x, y, axis: np.mean(y - x, axis=axis), permutation_type="samples",
                               n_resamples=permutations, alternative="two-sided", random_state=rng, vectorized=True)  # fmt: skip
    return float(min(1.0, res.pvalue))


def paired(a: StatPlan, b: StatPlan, level: float, resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """``{metric: {a, b, delta, low, high, p, test, n, n_paired, n_excluded[, only_a, only_b]}}``
    for every metric both runs have, over the units scored in both (see the module
    docstring for the tests): ``n`` units the metric covers, ``n_paired`` units scored in
    both runs, ``n_excluded`` units scored in one run only."""
    a, b, excluded = align(a, b)
    pa, pb = a.point(), b.point()
    rng = np.random.default_rng(seed)
    weights = stratified_weights(a.strata, resamples, rng) if resamples > 0 and a.units else np.ones((1, len(a.units)))
    da, db = a.evaluate(weights), b.evaluate(weights)
    alpha = (1 - level) / 2
    out: dict[str, dict[str, Any]] = {}
    for name in [n for n in pa if n in pb]:
        delta = pb[name] - pa[name]
        diffs = db[name] - da[name]
        diffs = diffs[~np.isnan(diffs)]
        n = len(a.units)
        if name in a.columns and name in b.columns:
            n = int(np.sum(np.any(a.columns[name].mask, axis=0) & np.any(b.columns[name].mask, axis=0)))
        entry: dict[str, Any] = {"a": pa[name], "b": pb[name], "delta": delta, "n": n, "n_paired": len(a.units), "n_excluded": excluded}
        low, high = (np.quantile(diffs, [alpha, 1 - alpha]) if diffs.size else (delta, delta))
        entry.update(low=float(low), high=float(high))
        entry.update(_p_value(name, a, b, diffs, delta, rng))
        out[name] = entry
    return out


def _p_value(name: str, a: StatPlan, b: StatPlan, diffs: np.ndarray, delta: float, rng: np.random.Generator) -> dict[str, Any]:
    kind = a.kind(name)
    if kind in (BINARY, GRADED) and a.n_epochs == 1 and b.n_epochs == 1:
        ca, cb = a.columns[name], b.columns[name]
        both = ca.mask[0] & cb.mask[0]
        va, vb = ca.values[0][both], cb.values[0][both]
        if kind == BINARY:
            only_a, only_b, p = mcnemar(va, vb)
            return {"p": p, "test": "exact McNemar", "only_a": only_a, "only_b": only_b}
        return {"p": sign_flip(va, vb, 9999, rng), "test": "paired sign-flip permutation"}
    if delta == 0 and (diffs.size == 0 or not np.any(diffs)):
        return {"p": 1.0, "test": "paired bootstrap"}
    # two-sided: how often the resampled difference falls on the other side of 0
    p = 2 * min(np.mean(diffs <= 0), np.mean(diffs >= 0)) if diffs.size else 1.0
    return {"p": float(min(1.0, max(p, 1.0 / (diffs.size + 1)))), "test": "paired bootstrap"}


# ------------------------------------------------------------------------------------------
# repeats
# ------------------------------------------------------------------------------------------
def pass_at_k(correct: np.ndarray, n: np.ndarray, k: int) -> float:
    """Mean over samples of the unbiased pass@k estimator ``1 − C(n−c, k)/C(n, k)`` (Chen et
    al. 2021) from ``c`` correct of ``n`` tries per sample; samples with ``n < k`` are left out."""
    vals = [1.0 - (math.comb(int(ni) - int(ci), k) / math.comb(int(ni), k)) for ci, ni in zip(correct, n) if ni >= k]
    return float(np.mean(vals)) if vals else math.nan


# ------------------------------------------------------------------------------------------
# display
# ------------------------------------------------------------------------------------------
def with_interval(value: float | None, ci: dict[str, Any] | None, digits: int = 4) -> str:
    """``0.5440 [0.4900, 0.6000]`` (the value alone when it has no interval)."""
    if value is None:
        return ""
    if not ci:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]"


def scored_of(counts: dict[str, int] | None) -> str:
    """``12`` when every requested sample of a category was scored, else ``3 of 4``;
    multi-turn categories add their dialogues (``9 of 10 dialogues``)."""
    if not counts:
        return ""
    scored, requested = counts.get("n_scored", 0), counts.get("n_requested", 0)
    text = str(scored) if scored == requested else f"{scored} of {requested}"
    if "dialogues_requested" in counts:
        d_scored, d_req = counts["dialogues_scored"], counts["dialogues_requested"]
        text += f" ({d_scored} dialogues)" if d_scored == d_req else f" ({d_scored} of {d_req} dialogues)"
    return text
