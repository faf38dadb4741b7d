"""Uncertainty of every metric, paired tests between runs, multiplicity, power and gates.

A benchmark describes its metrics as a :class:`StatPlan` over its *independent units*
(an ACEBench record, a multi-turn dialogue or an agent rollout; a SOBHard question; a KE
item), each in a *stratum* (a category, a SOBHard family × difficulty cell):

* **base metrics** are means of a per-unit value over a subset of the units (``values``,
  ``mask``); with unit weights ``w`` (how often each unit is drawn) a base metric is
  ``Σ w·v·m / Σ w·m``, so one matrix product evaluates it on many resamples at once;
* **derived metrics** (a group = the unweighted mean of its categories, the weighted
  OVERALL, SOBHard's ``balance_score``) are computed from the base metrics by the plan's
  ``derive`` function, which works on arrays (one value per resample).

With all weights 1 a plan gives the benchmark's point estimates: its reported metrics
(``Benchmark.aggregate``), the plan being each metric's one definition. With repeats
(epochs) a unit carries all its epochs: metrics are computed per epoch and averaged
(clustered by sample).

**One interval family for bounded means** (issue 44; :func:`score_bounds`): Δ = Σ w_k·μ_k, a
weighted mean of strata (a category, a group, ACEBench's OVERALL) of per-unit values in
[lo, hi] (differences of scores: [−1, 1]), each unit the benchmark's own (a dialogue, a
sample's epochs averaged: clustered). Its interval holds the Δ0 that a score test does not
reject: the null is the distribution, per stratum, over the values seen *and the bounds*
that is likeliest given Σ w_k·μ_k = Δ0 (for paired 0/1 differences Tango's constrained MLE,
for one 0/1 rate Wilson's null), so unseen large losses stay possible; each stratum's
variance × N/(N − 1) (Miettinen–Nurminen) with :data:`END_UNITS` at each end of the values
seen; the critical value raised for the null's skewness where it makes a false PASS likelier
(Gart–Nam); half the largest step one unit makes as continuity correction. Strata of one
unit are pooled. Simulated by ``perf/coverage.py`` in every regime (strata of 1–1,000 units,
weights 0.01–0.5, rare large losses): false PASS at the margin ≤ 2.5 %, coverage ≥ 93 %.

**Intervals of one run** (:func:`intervals`; each ``method`` names its method):

* a mean whose every unit scores 0 (or every unit 1), any score in [0, 1]: the exact
  binomial (Clopper–Pearson) bound on the n units (for a score in [0, 1] with mean μ,
  P(all n at 1) ≤ μⁿ); a mean of 0/1 scores: Clopper–Pearson with fewer than
  :data:`TAIL_COUNT` successes or failures, else Wilson; a mean of graded scores (or of
  epochs): a t interval on the per-unit means;
* a weighted mean of disjoint strata (a group, OVERALL): the score interval (values in [0, 1]);
* another derived metric: the stratified percentile bootstrap (a t interval with the
  bootstrap's standard error below :data:`SMALL_N` units); a biased non-linear one (kind
  :data:`NONLINEAR`, SOBHard's ``balance_score``) the *basic* bootstrap, *not estimable* with
  a stratum of fewer than :data:`NONLINEAR_MIN_PER_STRATUM` units or a stratum at 0.

The bootstrap resamples units within each stratum (strata of one unit pooled), in chunks of
rows (:func:`weight_chunks`: memory linear in the units). A zero-width interval carries a
``warning``.

**Paired comparison** of runs A and B (:func:`paired`): for each metric, over the units
scored in both runs where it is defined in both (one n), Δ = B − A with its interval and p
from **one test** (the interval excludes 0 exactly when p < 1 − level): a mean of per-unit
0/1 scores (epochs whose unit means stay 0 or 1 too) gets Tango's unconditional score
interval (:func:`paired_binary`; exact unconditional below :data:`SMALL_PAIRED` units; no
discordant pair gives ±0.164 at n = 22, never [0, 0]); a mean of graded scores and a
weighted mean of strata the score interval on the per-unit differences (a total loss
FAILs; identical runs get an honest width); another derived metric a t on the paired
stratified bootstrap's standard error (*not estimable* when the resamples do not vary).
|Δ| (and a per-unit difference) below :data:`DELTA_TOL` is 0. The minimum detectable effect
at 80 % power is beside it (:func:`mde`); Holm and Benjamini–Hochberg adjust a family
(:func:`adjust`); :func:`gate` reads the headline's interval as PASS / FAIL / INCONCLUSIVE,
every comparison with a margin within :data:`MARGIN_RTOL`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use (0.4 s at start-up that a run's requests need
    not wait for: intervals are computed once they are done)."""
    from scipy import stats as sps

    return sps


#: kinds of metrics (what interval and test they get)
BINARY, GRADED, DERIVED = "binary_mean", "graded_mean", "derived"
#: a derived metric that is a biased non-linear function of stratum means (basic bootstrap)
NONLINEAR = "nonlinear"

#: below this many units a derived metric gets a t interval with the bootstrap's standard
#: error, not the percentile interval
SMALL_N = 30
#: a 0/1 rate with fewer successes (or failures) than this gets Clopper–Pearson
TAIL_COUNT = 10
#: a NONLINEAR metric with a stratum of fewer units than this is not estimable
NONLINEAR_MIN_PER_STRATUM = 15
#: power at which :func:`mde` states the minimum detectable effect
POWER = 0.8
#: most cells (resamples × units) of one chunk of bootstrap weights (8 bytes each)
CHUNK_CELLS = 1 << 22


@dataclass
class Column:
    """A base metric: the mean of ``values`` over the units where ``mask`` is true, one row
    per epoch (shape ``(E, U)``); ``kind`` is :data:`BINARY` when every value is 0 or 1."""

    values: np.ndarray
    mask: np.ndarray
    kind: str = GRADED

    def scored(self) -> np.ndarray:
        """``mask`` less the cells whose value is not a finite number: a NaN marked as scored
        is not scored (never read as 0)."""
        return self.mask & np.isfinite(self.values)

    def unit_means(self) -> tuple[np.ndarray, np.ndarray]:
        """``(covered, means)``: whether each unit is scored in some epoch (``(U,)`` bool)
        and its mean over those epochs (``nan`` where not covered)."""
        mask = self.scored()
        count = mask.sum(axis=0)
        total = np.where(mask, self.values, 0.0).sum(axis=0)
        covered = count > 0
        return covered, np.where(covered, total / np.maximum(count, 1), np.nan)


@dataclass
class StatPlan:
    """A benchmark's metrics over its independent units (see the module docstring).

    Attributes:
        units: unit ids (stable across runs: pairing in compare matches them), length U.
        strata: the stratum of each unit (resampling keeps each stratum's size), length U.
        columns: base metric name → :class:`Column`.
        derive: ``{base name: array}`` → ``{derived name: array}``; arrays of one value per
            resample (``nan`` where undefined). Must use only numpy operations.
        kinds: kind of each derived metric (default :data:`DERIVED`; :data:`NONLINEAR` for a
            biased non-linear aggregate such as a geometric mean).
        derived_n: how many units each derived metric covers (default: the units its base
            metrics cover, :meth:`covered`).
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
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def n_epochs(self) -> int:
        return max((c.values.shape[0] for c in self.columns.values()), default=1)

    def _matrices(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per epoch ``(values × mask, mask)`` as ``(U, M)`` float matrices (built once)."""
        if "matrices" not in self._cache:
            names = list(self.columns)
            out = []
            shape = (len(self.units), len(names))
            for e in range(self.n_epochs):
                mask, values = np.empty(shape), np.empty(shape)  # filled a column at a time: no stacked copies
                for j, n in enumerate(names):
                    mask[:, j] = _row(self.columns[n].scored(), e)
                    values[:, j] = _row(self.columns[n].values, e)
                np.nan_to_num(values, copy=False)
                values *= mask
                out.append((values, mask))
            self._cache["matrices"] = out
        return self._cache["matrices"]

    def evaluate(self, weights: np.ndarray, epoch_mean: bool = True) -> dict[str, np.ndarray]:
        """Every metric for each row of ``weights`` (shape ``(R, U)``): ``{name: (R,)}`` —
        per epoch, then averaged over epochs (``nan`` where a metric is undefined)."""
        names = list(self.columns)
        if not names:
            return {}
        per_epoch: list[dict[str, np.ndarray]] = []
        for vm, mask in self._matrices():
            num = weights @ vm
            den = weights @ mask
            with np.errstate(invalid="ignore", divide="ignore"):
                base = {n: np.where(den[:, i] > 0, num[:, i] / np.where(den[:, i] > 0, den[:, i], 1), np.nan) for i, n in enumerate(names)}
            out = dict(base)
            if self.derive is not None:
                with np.errstate(invalid="ignore", divide="ignore"):
                    out.update(self.derive(base))
            per_epoch.append(out)
        if len(per_epoch) == 1 or not epoch_mean:
            return per_epoch[0]
        with np.errstate(invalid="ignore"), _quiet_nanmean():
            return {n: np.nanmean(np.stack([p[n] for p in per_epoch]), axis=0) for n in per_epoch[0]}

    def point(self) -> dict[str, float]:
        """The point estimates (every unit weighs 1), ``nan`` dropped."""
        out = self.evaluate(np.ones((1, len(self.units))))
        return {k: float(v[0]) for k, v in out.items() if not math.isnan(float(v[0]))}

    def kind(self, name: str) -> str:
        return self.columns[name].kind if name in self.columns else self.kinds.get(name, DERIVED)

    def dependencies(self) -> dict[str, list[str]]:
        """``{derived metric: the base metrics it depends on}``, found by moving each base
        metric in turn (one call of ``derive`` on ``M + 1`` rows)."""
        if "deps" in self._cache:
            return self._cache["deps"]
        names = list(self.columns)
        deps: dict[str, list[str]] = {}
        if self.derive is not None and names:
            base0 = self.evaluate(np.ones((1, len(self.units))))
            rows = {n: np.repeat(base0[n], len(names) + 1) for n in names}
            for i, n in enumerate(names):
                v = rows[n][i + 1]
                rows[n][i + 1] = 0.5 if math.isnan(v) else (v + 0.37 if v < 0.5 else v - 0.37)
            with np.errstate(invalid="ignore", divide="ignore"):
                derived = self.derive(rows)
            for d, arr in derived.items():
                ref = arr[0]
                deps[d] = [n for i, n in enumerate(names) if not _same(arr[i + 1], ref)]
        self._cache["deps"] = deps
        return deps

    def covered(self, name: str) -> np.ndarray:
        """``(U,)`` bool: the units metric ``name`` rests on (a base metric's scored units;
        a derived metric's: those of the base metrics it depends on)."""
        cols = [name] if name in self.columns else self.dependencies().get(name, list(self.columns))
        out = np.zeros(len(self.units), dtype=bool)
        for c in cols:
            out |= np.any(self.columns[c].scored(), axis=0)
        return out

    def n_of(self, name: str) -> int:
        """How many units metric ``name`` rests on (``derived_n`` when the plan gives it)."""
        if name not in self.columns and name in self.derived_n:
            return int(self.derived_n[name])
        return int(self.covered(name).sum())


def _same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or x == y


class _quiet_nanmean:
    """Silence numpy's "Mean of empty slice" (an all-``nan`` column is ``nan``, as meant)."""

    def __enter__(self) -> None:
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: Any) -> None:
        self._w.__exit__(*exc)


def _row(a: np.ndarray, e: int) -> np.ndarray:
    return a[e] if a.shape[0] > e else np.zeros_like(a[0])


# ------------------------------------------------------------------------------------------
# resampling
# ------------------------------------------------------------------------------------------
def resampling_strata(strata: np.ndarray) -> tuple[np.ndarray, str]:
    """The strata the bootstrap resamples within, and a note: strata of fewer than 2 units
    are pooled into one (or, when only one is that small, into the smallest other stratum),
    since resampling one unit among itself adds no variance."""
    strata = np.asarray(strata)
    keys, inverse, counts = np.unique(strata, return_inverse=True, return_counts=True)
    small = np.flatnonzero(counts < 2)
    if small.size == 0 or keys.size < 2:
        return inverse, ""
    out = inverse.copy()
    if small.size == 1:
        others = np.flatnonzero(counts >= 2)
        target = others[np.argmin(counts[others])]
        out[inverse == small[0]] = target
        return out, "; a stratum of one unit pooled with the smallest other"
    out[np.isin(inverse, small)] = small[0]
    return out, f"; {small.size} strata of one unit pooled into one"


def weight_chunks(strata: np.ndarray, resamples: int, rng: np.random.Generator, max_cells: int = CHUNK_CELLS) -> Iterator[np.ndarray]:
    """``(r, U)`` draw counts, in chunks of rows totalling ``resamples``: within each stratum
    of size n, n units drawn uniformly with replacement (a multinomial over its units).
    Each chunk holds at most ``max_cells`` cells, so memory is linear in U."""
    strata = np.asarray(strata)
    n_units = len(strata)
    if n_units == 0:
        return
    order = np.argsort(strata, kind="stable")
    sorted_strata = strata[order]
    _, first, counts = np.unique(sorted_strata, return_index=True, return_counts=True)
    size = np.repeat(counts, counts)
    start = np.repeat(first, counts)
    rows = max(1, max_cells // n_units)
    done = 0
    while done < resamples:
        r = min(rows, resamples - done)
        pos = start[None, :] + (rng.random((r, n_units)) * size[None, :]).astype(np.int64)
        flat = (np.arange(r, dtype=np.int64)[:, None] * n_units + pos).ravel()
        counts_sorted = np.bincount(flat, minlength=r * n_units).reshape(r, n_units)
        chunk = np.empty((r, n_units))
        chunk[:, order] = counts_sorted
        done += r
        yield chunk


def bootstrap_draws(plans: list[StatPlan], strata: np.ndarray, resamples: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Every metric of each plan on the same ``resamples`` stratified resamples (plans over
    the same units, in one order): ``[{name: (resamples,)}]``, evaluated chunk by chunk."""
    rng = np.random.default_rng(seed)
    parts: list[list[dict[str, np.ndarray]]] = [[] for _ in plans]
    for chunk in weight_chunks(strata, resamples, rng):
        for i, plan in enumerate(plans):
            parts[i].append(plan.evaluate(chunk))
    return [{n: np.concatenate([p[n] for p in ps]) for n in ps[0]} if ps else {} for ps in parts]


# ------------------------------------------------------------------------------------------
# intervals
# ------------------------------------------------------------------------------------------
def clopper_pearson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper–Pearson) interval of a binomial rate: beta quantiles, the bounds of
    scipy's ``binomtest(k, n).proportion_ci(method="exact")`` without its root finding."""
    if n == 0:
        return (math.nan, math.nan)
    beta, a = _scipy_stats().beta, (1 - level) / 2
    low = 0.0 if successes == 0 else float(beta.ppf(a, successes, n - successes + 1))
    high = 1.0 if successes == n else float(beta.ppf(1 - a, successes + 1, n - successes))
    return low, high


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate (the closed form of scipy's
    ``binomtest(k, n).proportion_ci(method="wilson")``)."""
    if n == 0:
        return (math.nan, math.nan)
    z = _z((1 + level) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def t_interval(mean: float, se: float, df: float, level: float) -> tuple[float, float]:
    """``mean ± t_{(1+level)/2, df} · se``."""
    q = float(_scipy_stats().t.ppf((1 + level) / 2, max(df, 1)))
    return mean - q * se, mean + q * se


def _range(plans: list[StatPlan], names: list[str]) -> tuple[float, float]:
    """``(low, high)``: the values of base metrics ``names`` in ``plans`` — [0, 1] for scores,
    else the range they were scored in (the bound a score interval then assumes)."""
    vals = [p.columns[n].values[p.columns[n].scored()] for p in plans for n in names if n in p.columns]
    vals = [v for v in vals if v.size]
    if not vals or all(np.nanmin(v) >= 0 and np.nanmax(v) <= 1 for v in vals):
        return 0.0, 1.0
    return float(min(np.nanmin(v) for v in vals)), float(max(np.nanmax(v) for v in vals))


def _base_interval(plan: StatPlan, name: str, point: float, level: float, units: str) -> dict[str, Any] | None:
    """The analytic interval of base metric ``name`` when its regime calls for one, else
    ``None`` (the bootstrap's)."""
    col = plan.columns[name]
    covered, means = col.unit_means()
    m = means[covered]
    n = int(m.size)
    bounded = _range([plan], [name]) == (0.0, 1.0)
    if bounded and (np.all(m == 1.0) or np.all(m == 0.0)):
        k = n if m[0] == 1.0 else 0
        low, high = clopper_pearson(k, n, level)
        return _entry(low, high, 0.0, n, f"exact binomial (Clopper–Pearson): every one of the {n} {units} scores {int(m[0])}"
                      " (valid for any score in [0, 1])")  # fmt: skip
    binary = bounded and bool(np.all((m == 0.0) | (m == 1.0)))
    if binary:
        k = int(m.sum())
        se = math.sqrt(max(point * (1 - point), 0.0) / n)
        if min(k, n - k) < TAIL_COUNT:
            low, high = clopper_pearson(k, n, level)
            return _entry(low, high, se, n, f"exact binomial (Clopper–Pearson): {k} of {n} {units}, fewer than {TAIL_COUNT} "
                          f"{'successes' if k < TAIL_COUNT else 'failures'}")  # fmt: skip
        low, high = wilson(k, n, level)
        return _entry(low, high, se, n, f"Wilson score: {k} of {n} {units}")
    if n < 2:
        return None
    se = float(np.std(m, ddof=1) / math.sqrt(n))
    low, high = t_interval(point, se, n - 1, level)
    if bounded:
        low, high = max(low, 0.0), min(high, 1.0)
    return _entry(low, high, se, n, f"t interval: on the per-unit means of {n} {units}"
                  + (" (epochs averaged per unit)" if plan.n_epochs > 1 else ""))  # fmt: skip


def _entry(low: float, high: float, se: float, n: int, method: str) -> dict[str, Any]:
    return {"low": float(low), "high": float(high), "stderr": float(se), "n": int(n), "method": method}


def intervals(plan: StatPlan, level: float, resamples: int, seed: int, metrics: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{metric: {low, high, stderr, n, method[, warning]}}`` for every metric of ``plan``
    (or of ``metrics``) with a point estimate and an estimable interval, the method chosen by
    regime (see the module docstring). ``n`` is the number of units the metric rests on;
    ``warning`` marks a zero-width interval. Metrics left out are those of
    :func:`not_estimable`."""
    point = plan.point()
    if metrics is not None:
        point = {n: v for n, v in point.items() if n in metrics}
    if resamples <= 0 or not plan.units:
        return {}
    units = plan.unit_label
    skip = not_estimable(plan)
    out: dict[str, dict[str, Any]] = {}
    need_boot, jobs = [], []
    for name, value in point.items():
        if name in skip:
            continue
        entry = _base_interval(plan, name, value, level, units) if name in plan.columns else None
        linear = _linear_strata([plan], name) if entry is None and name not in plan.columns else None
        if entry is not None:
            out[name] = entry
        elif linear and _range([plan], list(linear[0])) == (0.0, 1.0):
            weights, covered = linear
            values = [plan.columns[d].unit_means()[1][c] for d, c in zip(weights, covered)]
            jobs.append((name, len(weights), (values, list(weights.values()), (0.0, 1.0))))
        else:
            need_boot.append(name)
    for (name, k, job), got in zip(jobs, _bounded_entries([j[2] for j in jobs], level, False)):
        mean = min(job[1]) >= 0 and abs(math.fsum(job[1]) - 1) < 1e-9  # a weighted mean of scores: within [0, 1]
        low, high = min(got["low"], point[name]), max(got["high"], point[name])
        out[name] = _entry(max(low, 0.0) if mean else low, min(high, 1.0) if mean else high, got["se"], plan.n_of(name),
                           score_method(units, k, 0.0, 1.0, got["note"] + (", epochs averaged per unit" if plan.n_epochs > 1 else "")))  # fmt: skip
    if need_boot:
        strata, note = resampling_strata(plan.strata)
        (draws,) = bootstrap_draws([_only(plan, need_boot)], strata, resamples, seed)
        boot = (f"{resamples} resamples of the {units} within each {plan.stratum_label}{note}"
                + (", clustered by sample over epochs" if plan.n_epochs > 1 else ""))  # fmt: skip
        n_strata = len(np.unique(strata))
        for name in need_boot:
            entry = _boot_interval(plan, name, point[name], draws[name], level, boot, n_strata)
            if entry is not None:
                out[name] = entry
    for name, entry in out.items():
        if entry["high"] - entry["low"] <= 0:
            entry["warning"] = (f"zero-width interval ({entry['method']}): the data show no variation; "
                                "it understates the uncertainty unless these units are the whole population")  # fmt: skip
    return {n: out[n] for n in point if n in out}


class _NanBase(dict):
    """Base metrics for ``derive`` with the columns a sub-plan left out read as ``nan``."""

    def __init__(self, base: dict[str, np.ndarray], rows: int) -> None:
        super().__init__(base)
        self.rows = rows

    def __missing__(self, key: str) -> np.ndarray:
        return np.full(self.rows, np.nan)


def _only(plan: StatPlan, names: list[str]) -> StatPlan:
    """``plan`` with only the base columns ``names`` rest on (the bootstrap's matrix
    products then cost only those); its ``derive`` reads the others as ``nan``."""
    deps = dict.fromkeys(c for n in names for c in ([n] if n in plan.columns else plan.dependencies().get(n, [])))
    if not deps or len(deps) == len(plan.columns):
        return plan
    derive = plan.derive

    def sub_derive(base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(next(iter(base.values()))) if base else 1
        return derive(_NanBase(base, rows)) if derive is not None else {}

    cols = {n: plan.columns[n] for n in deps}
    return StatPlan(plan.units, plan.strata, cols, sub_derive if derive is not None else None, plan.kinds, plan.derived_n,
                    plan.unit_label, plan.stratum_label)  # fmt: skip


def _boot_interval(plan: StatPlan, name: str, value: float, d: np.ndarray, level: float, boot: str, n_strata: int) -> dict[str, Any] | None:
    d = d[~np.isnan(d)]
    if d.size == 0:
        return None
    n = plan.n_of(name)
    alpha = (1 - level) / 2
    se = float(d.std(ddof=1)) if d.size > 1 else 0.0
    kind = plan.kind(name)
    deps = [name] if name in plan.columns else plan.dependencies().get(name, [])
    bounded = _range([plan], deps) == (0.0, 1.0)
    if se == 0.0 and bounded and value in (0.0, 1.0):
        low, high = clopper_pearson(n if value == 1.0 else 0, n, level)
        return _entry(low, high, 0.0, n, f"exact binomial (Clopper–Pearson): every one of the {n} {plan.unit_label} scores "
                      f"{int(value)} (a weighted aggregate's effective n is smaller: the interval is then too narrow)")  # fmt: skip
    q_low, q_high = (float(x) for x in np.quantile(d, [alpha, 1 - alpha]))
    if kind == NONLINEAR:
        low, high = 2 * value - q_high, 2 * value - q_low
        if bounded:
            low, high = max(low, 0.0), min(high, 1.0)
        return _entry(low, high, se, n, f"basic bootstrap (a biased non-linear aggregate): {boot}")
    if name not in plan.columns and n < SMALL_N and n > n_strata:
        se_t = se * math.sqrt(n / (n - n_strata))
        low, high = t_interval(value, se_t, n - n_strata, level)
        if bounded:
            low, high = max(low, 0.0), min(high, 1.0)
        return _entry(low, high, se_t, n, f"t interval with the bootstrap's standard error: df {n - n_strata}, fewer than "
                      f"{SMALL_N} {plan.unit_label}; {boot}")  # fmt: skip
    return _entry(q_low, q_high, se, n, f"percentile bootstrap: {boot}")


def linear_weights(plan: StatPlan, name: str) -> dict[str, float] | None:
    """``{base metric: weight}`` when derived metric ``name`` is a fixed linear combination
    of its base metrics (checked by moving each, and all at once, by two amounts), else
    ``None``."""
    deps = plan.dependencies().get(name, [])
    if not deps or plan.derive is None:
        return None
    base0 = plan.evaluate(np.ones((1, len(plan.units))))
    names = list(plan.columns)
    rows = {n: np.repeat(base0[n], 2 * len(deps) + 2) for n in names}
    for i, dname in enumerate(deps):
        rows[dname][1 + 2 * i] -= 0.1
        rows[dname][2 + 2 * i] -= 0.3
    for j, dname in enumerate(deps):
        rows[dname][-1] -= 0.05 * (j + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = plan.derive(rows).get(name)
    if out is None or np.any(np.isnan(out)):
        return None
    w = {dname: float((out[0] - out[1 + 2 * i]) / 0.1) for i, dname in enumerate(deps)}
    ok = all(abs((out[0] - out[2 + 2 * i]) - 0.3 * w[dname]) < 1e-9 for i, dname in enumerate(deps))
    ok = ok and abs((out[0] - out[-1]) - sum(0.05 * (j + 1) * w[d] for j, d in enumerate(deps))) < 1e-9
    return w if ok else None


def not_estimable(plan: StatPlan) -> dict[str, str]:
    """``{metric: why it has no interval}``: a :data:`NONLINEAR` metric with a stratum of
    fewer than :data:`NONLINEAR_MIN_PER_STRATUM` units (its estimator's bias is then
    beyond any bootstrap's repair)."""
    out: dict[str, str] = {}
    nonlinear = [n for n, k in plan.kinds.items() if k == NONLINEAR]
    if not nonlinear or not plan.units:
        return out
    for name in nonlinear:
        covered = plan.covered(name)
        _, counts = np.unique(np.asarray(plan.strata)[covered], return_counts=True)
        if counts.size and counts.min() < NONLINEAR_MIN_PER_STRATUM:
            out[name] = (f"not estimable: a {plan.stratum_label} has {int(counts.min())} {plan.unit_label} (fewer than "
                         f"{NONLINEAR_MIN_PER_STRATUM}), too few for this non-linear aggregate's bias to be corrected")  # fmt: skip
            continue
        point = plan.point()
        zero = [d for d in plan.dependencies().get(name, []) if d in point and point[d] <= 0.0]
        if zero:
            out[name] = (f"not estimable: {len(zero)} {plan.stratum_label}(s) score 0 (e.g. {zero[0]}): the aggregate's floor "
                         "sets their value, a bias no bootstrap repairs (simulated coverage 80–83 % with cells near 0)")  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------
# paired 0/1 differences: Tango's score interval and test, exact unconditional below SMALL_PAIRED
# ------------------------------------------------------------------------------------------
#: below this many paired units a 0/1 difference gets the exact unconditional interval
#: (Tango's statistic, its tail maximised over the nuisance parameter) instead of Tango's
#: asymptotic one (which false-PASSes 2.8 % at n = 22, margin 0.15, one-sided discordance)
SMALL_PAIRED = 50
#: |Δ| (and a per-unit difference) below this is 0: the numeric tolerance, so that round-off
#: (1 − 1/3·3 ≈ 1e-16) never reads as a difference
DELTA_TOL = 1e-9
#: continuity correction of the asymptotic Tango test (on b − a − nΔ0): without it, the
#: test's size at the margin is 2.5–2.7 % for heavy discordance at every n from 50 to 1000
#: (lattice effects, computed exactly by ``perf/coverage.py``); with ½ at most 2.42 %
TANGO_CC = 0.5
#: points of the nuisance grid over which the exact unconditional tail is maximised
NUISANCE_GRID = 120


def tango_nuisance(only_a: Any, only_b: Any, n: int, delta0: float) -> Any:
    """Constrained MLE of ``q_a`` = P(A right, B wrong) under H0: Δ = ``delta0`` (Δ = B − A
    = ``q_b − q_a``), the larger root of Tango's quadratic (Tango 1998, Stat Med 17:891,
    eq. 5): ``2n q² + (−(a + b) + (2n + a − b)Δ0)·q − a·Δ0(1 − Δ0) = 0`` with ``a`` =
    ``only_a``, ``b`` = ``only_b`` (arrays broadcast)."""
    a, b = np.asarray(only_a, dtype=float), np.asarray(only_b, dtype=float)
    big_a = 2.0 * n
    big_b = -(a + b) + (2.0 * n + a - b) * delta0
    big_c = -a * delta0 * (1.0 - delta0)
    disc = np.maximum(big_b * big_b - 4.0 * big_a * big_c, 0.0)
    return np.clip((-big_b + np.sqrt(disc)) / (2.0 * big_a), max(0.0, -delta0), (1.0 - delta0) / 2.0)


def tango_z(only_a: Any, only_b: Any, n: int, delta0: float, cc: float = 0.0) -> Any:
    """Tango's score statistic of H0: Δ = ``delta0`` (Δ = B − A), large when B does better:
    ``(b − a − nΔ0) / sqrt(n(2q̃ + Δ0 − Δ0²))`` with ``q̃`` :func:`tango_nuisance`; at
    Δ0 = 0 it is McNemar's ``(b − a)/sqrt(a + b)``; 0 where both numerator and variance
    vanish (arrays broadcast). ``cc``: a continuity correction, the numerator moved that
    much towards 0 (:data:`TANGO_CC`)."""
    a, b = np.asarray(only_a, dtype=float), np.asarray(only_b, dtype=float)
    q = tango_nuisance(a, b, n, delta0)
    var = n * (2.0 * q + delta0 - delta0 * delta0)
    num = b - a - n * delta0
    num = np.sign(num) * np.maximum(np.abs(num) - cc, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = num / np.sqrt(np.maximum(var, 0.0))
        return np.where(var > 1e-300, z, np.where(np.abs(num) < 1e-12, 0.0, np.copysign(np.inf, num)))


@functools.lru_cache(maxsize=64)
def _outcomes(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every paired outcome of ``n`` units: ``(a, b, log multinomial coefficient)`` over the
    ``a + b ≤ n`` discordant counts."""
    from scipy.special import gammaln

    a, b = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = a + b <= n
    a, b = a[keep].astype(float), b[keep].astype(float)
    return a, b, gammaln(n + 1) - gammaln(a + 1) - gammaln(b + 1) - gammaln(n - a - b + 1)


def exact_tail(only_a: int, only_b: int, n: int, delta0: float, upper: bool) -> float:
    """Exact unconditional one-sided p of H0: Δ = ``delta0`` against Δ > Δ0 (``upper``) or
    Δ < Δ0: the probability that Tango's statistic is at least as extreme as observed,
    maximised over the nuisance ``q_a`` on a grid of :data:`NUISANCE_GRID` points (and its
    constrained MLE) — the unconditional exact test (Basu/Boschloo's maximisation, Berger &
    Boos 1994 without the confidence-set restriction)."""
    a, b, logc = _outcomes(n)
    z = tango_z(a, b, n, delta0)
    z_obs = float(tango_z(only_a, only_b, n, delta0))
    extreme = z >= z_obs - 1e-9 if upper else z <= z_obs + 1e-9
    lo, hi = max(0.0, -delta0), (1.0 - delta0) / 2.0
    q = np.unique(np.r_[np.linspace(lo, hi, NUISANCE_GRID), float(tango_nuisance(only_a, only_b, n, delta0))])
    qa, qb = q[:, None], q[:, None] + delta0
    qr = np.clip(1.0 - qa - qb, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = logc[None, extreme] + _xlogy(a[extreme], qa) + _xlogy(b[extreme], qb) + _xlogy(n - a[extreme] - b[extreme], qr)
    return float(min(1.0, np.exp(logp).sum(axis=1).max()))


def _xlogy(k: np.ndarray, p: np.ndarray) -> np.ndarray:
    from scipy.special import xlogy

    return xlogy(k[None, :], np.maximum(p, 0.0))


def _bisect(f: Callable[[float], bool], lo: float, hi: float, tol: float = 1e-4) -> float:
    """The boundary between ``f`` true at ``lo`` and false at ``hi`` (either order)."""
    for _ in range(60):
        if abs(hi - lo) < tol:
            break
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) else (lo, mid)
    return (lo + hi) / 2


def paired_binary(only_a: int, only_b: int, n: int, level: float) -> dict[str, Any]:
    """See :func:`_paired_binary` (the result for each ``(a, b, n, level)`` computed once: a
    benchmark's breakdowns share their counts)."""
    return dict(_paired_binary(int(only_a), int(only_b), int(n), float(level)))


@functools.lru_cache(maxsize=4096)
def _paired_binary(only_a: int, only_b: int, n: int, level: float) -> dict[str, Any]:
    """Δ = (b − a)/n of paired 0/1 scores (``only_a`` units right in A only, ``only_b`` in B
    only, of ``n``) with its interval at ``level`` and a two-sided p from **one test**, so
    that the interval excludes Δ0 exactly when that test rejects Δ0:

    * n ≥ :data:`SMALL_PAIRED`: Tango's unconditional score interval (Tango 1998, "Equivalence
      test and confidence interval for the difference in proportions for the paired-sample
      design", Stat Med 17:891–908): the Δ0 whose score test (:func:`tango_z`) does not reject,
      bounds by ``scipy.optimize.brentq``; p from the same test at Δ0 = 0;
    * n < :data:`SMALL_PAIRED`: the exact unconditional test on Tango's statistic
      (:func:`exact_tail`, each side at (1 − level)/2), its bounds by bisection; p twice
      the smaller one-sided exact p at Δ0 = 0.

    No discordant pair still gives an interval of honest width (±0.164 at n = 22). Returns
    ``{delta, low, high, p, se, only_a, only_b, p_mcnemar_exact, test, method}``: the exact
    McNemar p is a labelled secondary figure (conditional on a + b; not what the interval
    inverts)."""
    from scipy.optimize import brentq

    alpha = (1 - level) / 2
    d = (only_b - only_a) / n
    m = only_a + only_b
    p_mcnemar = 1.0 if m == 0 else float(_scipy_stats().binomtest(only_a, m, 0.5).pvalue)
    edge = 1 - 1e-9
    if n >= SMALL_PAIRED:
        zc = _z(1 - alpha)

        def f(x: float) -> float:
            return float(tango_z(only_a, only_b, n, x, TANGO_CC))

        low = -1.0 if f(-edge) <= zc else brentq(lambda x: f(x) - zc, -edge, min(d, edge), xtol=1e-10)
        high = 1.0 if f(edge) >= -zc else brentq(lambda x: f(x) + zc, max(d, -edge), edge, xtol=1e-10)
        z0 = f(0.0)
        p = 1.0 if m == 0 else float(min(1.0, 2 * _scipy_stats().norm.sf(abs(z0))))
        test = "Tango score"
        method = (f"Tango's unconditional score interval on the paired 0/1 differences (Stat Med 1998; continuity "
                  f"correction {TANGO_CC:g}): the Δ0 its score test does not reject; {only_a} right in A only, {only_b} in B only, of {n}")  # fmt: skip
    else:
        low = -1.0 if exact_tail(only_a, only_b, n, -edge, True) > alpha else _bisect(
            lambda x: exact_tail(only_a, only_b, n, x, True) <= alpha, -edge, min(d, edge))
        high = 1.0 if exact_tail(only_a, only_b, n, edge, False) > alpha else _bisect(
            lambda x: exact_tail(only_a, only_b, n, x, False) > alpha, max(d, -edge), edge)
        p = 1.0 if m == 0 else min(1.0, 2 * min(exact_tail(only_a, only_b, n, 0.0, True), exact_tail(only_a, only_b, n, 0.0, False)))
        test = "exact unconditional (Tango's statistic)"
        method = (f"exact unconditional test on Tango's score statistic, its tail maximised over the nuisance "
                  f"parameter (fewer than {SMALL_PAIRED} paired units, where Tango's asymptotic interval undercovers); "
                  f"{only_a} right in A only, {only_b} in B only, of {n}")  # fmt: skip
    low, high = max(-1.0, min(low, d)), min(1.0, max(high, d))
    se = math.sqrt(max(m / n - d * d, 0.0) / n)
    return {"delta": d, "low": float(low), "high": float(high), "p": float(p), "se": se, "df": None,
            "only_a": int(only_a), "only_b": int(only_b), "p_mcnemar_exact": p_mcnemar, "test": test, "method": method}  # fmt: skip


# ------------------------------------------------------------------------------------------
# bounded means: one score interval for every regime (issue 44)
# ------------------------------------------------------------------------------------------
#: pseudo-units at each end of the values seen that a stratum's null variance counts, so that
#: a stratum whose few units agree never has variance 0 (40 strata of 3 units, one-sided:
#: false PASS 2.7 % without, 1.0 % with; 1,000 simulated runs)
END_UNITS = 0.25
#: bisection steps on the tilt's logarithm (over e^±30: the ends exact to ~1e-10)
TILT_STEPS = 40
#: relative tolerance of every comparison with a margin (no verdict by round-off)
MARGIN_RTOL = 1e-9


def _tilt(x: np.ndarray, n: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, a: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Per stratum, the distribution over the observed values ``x`` (counts ``n``, shape
    ``(B, K, L)``) and the bounds ``lo``, ``hi`` that maximises the likelihood Σ n·log p less
    ``s``·(its mean) (``s``: ``(B, K)``, the tilt): ``p_j = n_j / (a + s·x_j)``, the bound on
    the side of the tilt taking what is left (Tango's constrained MLE, for any bounded
    values). Returns its mean, variance and third central moment ``(B, K)`` and ``a``."""
    amin = np.maximum(-s * lo, -s * hi) + 0.0  # + 0.0: never −0 (whose 1/−0 would read as at the bound)
    total = n.sum(-1)
    seen, tilt = n > 0, s[..., None]

    def f(av: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        den = np.where(seen, av[..., None] + tilt * x, 1.0)
        q = np.where(seen, n / den, 0.0)
        return q.sum(-1) - 1.0, -(q / den).sum(-1)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_bound = (s != 0) & (f(amin)[0] <= 0.0)
        av = amin + total if a is None else np.where(a > amin, a, amin + total)
        for _ in range(60):  # Newton on a convex decreasing f; a step past amin is halved back
            fa, da = f(av)
            new = av - fa / da
            av = np.where((new > amin) & np.isfinite(new), new, 0.5 * (av + amin))
            if np.all(at_bound | (np.abs(fa) < 1e-12)):
                break
        av = np.where(at_bound, amin, av)
        p = np.where(seen, n / np.where(seen, av[..., None] + tilt * x, 1.0), 0.0)
    p = p / np.maximum(p.sum(-1), 1.0)[..., None]
    rest = np.clip(1.0 - p.sum(-1), 0.0, 1.0)
    bound = np.where(s > 0, lo, hi)
    mean = (p * x).sum(-1) + rest * bound
    dev, bdev = x - mean[..., None], bound - mean
    return mean, (p * dev**2).sum(-1) + rest * bdev**2, (p * dev**3).sum(-1) + rest * bdev**3, av


@dataclass
class BoundedMeans:
    """``B`` weighted stratified means of bounded per-unit values (the metrics of a comparison,
    or simulated runs), as :func:`score_bounds` reads them. Per stratum: the distinct values
    ``x`` and their counts ``n`` ``(B, K, L)`` (padded with count 0), its weight ``w`` in
    Δ = Σ w·μ, the estimate's stratum mean ``m``, Σ c² and Σ c³ over its units' weights c
    (Δ̂ = Σ c·value) ``(B, K)`` (0 where padded); ``cc`` ``(B,)``, the continuity correction;
    values in [``lo``, ``hi``] ``(B, 1)``."""

    x: np.ndarray
    n: np.ndarray
    w: np.ndarray
    m: np.ndarray
    c2: np.ndarray
    c3: np.ndarray
    cc: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def estimate(self) -> np.ndarray:
        return (self.w * self.m).sum(-1)

    @property
    def df(self) -> np.ndarray:
        """``(B,)`` the degrees of freedom of the variance: Σ (N_k − 1), at least 1."""
        return np.maximum((self.n.sum(-1) - 1).clip(0).sum(-1), 1)

    def statistic(self, eta: np.ndarray, a: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """At tilt η·w ``(B,)``: the null's Δ0, the score statistic Z, γ, se, and ``a``."""
        mean, var, k3, a = _tilt(self.x, self.n, eta[..., None] * self.w, self.lo, self.hi, a)
        size = self.n.sum(-1)
        widest = (self.hi - mean) * (mean - self.lo)  # a lone unit's variance: the largest possible
        var = np.where(size >= 2, var * size / np.maximum(size - 1, 1), widest)
        seen = self.n > 0  # a quarter unit at each end of the values seen (in any stratum)
        ends = (np.where(seen, self.x, np.inf).min((-1, -2))[:, None], np.where(seen, self.x, -np.inf).max((-1, -2))[:, None])
        var = (size * var + END_UNITS * ((ends[0] - mean) ** 2 + (ends[1] - mean) ** 2)) / (size + 2 * END_UNITS)
        total = (self.c2 * var).sum(-1)
        delta0 = (self.w * mean).sum(-1)
        num = self.estimate - delta0
        num = np.sign(num) * np.maximum(np.abs(num) - self.cc, 0.0)
        se = np.sqrt(total)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, num / se, np.where(np.abs(num) < 1e-12, 0.0, np.sign(num) * np.inf))
            skew = np.where(total > 0, (self.c3 * k3).sum(-1) / total**1.5, 0.0)
        return delta0, z, skew, se, a

    def solve(self, side: np.ndarray, done: Callable[..., np.ndarray]) -> tuple[np.ndarray, ...]:
        """``(Δ0, u, g)`` where ``done(Δ0, u, g)`` turns true on ``side`` (+1: towards ``lo``),
        u = side·Z, g = max(side·γ, 0); bisection on log η over e^±30 × Σ units / Σ |w|."""
        scale = side * self.n.sum((-1, -2)) / np.maximum(np.abs(self.w).sum(-1), 1e-300)
        left, right = np.full(scale.shape, -30.0), np.full(scale.shape, 30.0)
        a = None
        for step in range(TILT_STEPS + 1):
            mid = right if step == TILT_STEPS else 0.5 * (left + right)
            delta0, z, skew, _, a = self.statistic(scale * np.exp(mid), a)
            u, g = side * z, np.maximum(side * skew, 0.0)
            if step < TILT_STEPS:
                hit = done(delta0, u, g)
                left, right = np.where(hit, left, mid), np.where(hit, mid, right)
        return delta0, u, g


def score_bounds(data: BoundedMeans, level: float) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` ``(B,)``: the Δ0 whose one-sided score test at (1 − level)/2 does not
    reject. The test: Z = (Δ̂ − Δ0 ∓ cc)/se(Δ0), se from the null fit at Δ0 (:func:`_tilt`;
    each stratum's variance × N/(N − 1), with :data:`END_UNITS` at each end of the values
    seen), rejecting when side·Z ≥ t + g(t² − 1)/6 — t the quantile of Student's t with
    Σ (N_k − 1) df, g the null's skewness where it makes a false rejection likelier, else 0
    (Cornish–Fisher: the skewness-corrected score test of Gart & Nam 1988, only ever raised)."""
    z = _scipy_stats().t.ppf((1 + level) / 2, data.df)
    ones = np.ones(data.estimate.shape)

    def rejects(_: np.ndarray, u: np.ndarray, g: np.ndarray) -> np.ndarray:
        return u >= z + g * (z * z - 1) / 6

    low = data.solve(ones, rejects)[0]
    high = data.solve(-ones, rejects)[0]
    est = data.estimate
    floor = np.array([math.fsum(r) for r in np.minimum(data.w * data.lo, data.w * data.hi)])  # Δ's range, summed exactly
    ceiling = np.array([math.fsum(r) for r in np.maximum(data.w * data.lo, data.w * data.hi)])
    return np.clip(np.minimum(low, est), floor, ceiling), np.clip(np.maximum(high, est), floor, ceiling)


def score_p(data: BoundedMeans) -> np.ndarray:
    """``(B,)`` the two-sided p of Δ = 0 by the test :func:`score_bounds` inverts: twice the
    one-sided level α whose critical value t_α + g(t_α² − 1)/6 equals the statistic at Δ0 = 0
    on Δ̂'s side; so the interval at ``level`` excludes 0 exactly when p < 1 − level."""
    est = data.estimate
    side = np.where(est < 0, -1.0, 1.0)
    _, u, g = data.solve(side, lambda d0, _u, _g: side * d0 <= 0)
    g6 = g / 6
    with np.errstate(invalid="ignore", divide="ignore"):
        root = np.where(g6 > 1e-12, (np.sqrt(np.maximum(1 + 4 * g6 * (g6 + u), 0.0)) - 1) / (2 * g6), u)
    p = np.minimum(1.0, 2 * _scipy_stats().t.sf(root, data.df))
    return np.where(np.abs(est) < DELTA_TOL, 1.0, p)


def continuity(values: list[np.ndarray], c: list[np.ndarray]) -> float:
    """The continuity correction of Δ̂ = Σ c·value: half the largest step one unit can make it
    take — max over strata of c × the widest gap between the values seen there (Tango's ½
    on a 0/1 count; for graded values the lumpiness of rare far values, which a lattice
    of their small steps would miss: rare large losses false-PASSed 3.4 % without)."""
    gaps = [float(np.max(np.abs(ck))) * float(np.diff(np.unique(v)).max(initial=0.0)) for v, ck in zip(values, c)]
    return 0.5 * max(gaps, default=0.0)


def bounded_means(problems: list[tuple[list[np.ndarray], list[float], tuple[float, float]]]) -> tuple[BoundedMeans, list[str]]:
    """``B`` problems ``(per-stratum unit values, stratum weights, (lo, hi))`` as one
    :class:`BoundedMeans`, and a note per problem. Strata of one unit are pooled as the
    bootstrap pools them (:func:`resampling_strata`: one unit has no variance of its own)."""
    built, notes = [], []
    for values, weights, bounds in problems:
        v = np.concatenate([np.asarray(x, dtype=float) for x in values])
        c = np.concatenate([np.full(len(x), wk / len(x)) for x, wk in zip(values, weights)])
        of = np.repeat(np.arange(len(values)), [len(x) for x in values])
        strata, note = resampling_strata(of)
        groups = [(v[strata == k], c[strata == k], math.fsum(weights[j] for j in np.unique(of[strata == k]))) for k in np.unique(strata)]
        built.append((groups, bounds, continuity([g for g, *_ in groups], [ck for _, ck, _ in groups])))
        notes.append(note)
    shape = (len(built), max(len(g) for g, *_ in built), max(np.unique(v).size for g, *_ in built for v, *_ in g))
    x, n = np.zeros(shape), np.zeros(shape)
    w, m, c2, c3 = (np.zeros(shape[:2]) for _ in range(4))
    for i, (groups, *_) in enumerate(built):
        for j, (v, c, wk) in enumerate(groups):
            vals, counts = np.unique(v, return_counts=True)
            x[i, j, : vals.size], n[i, j, : vals.size] = vals, counts
            w[i, j], m[i, j], c2[i, j], c3[i, j] = wk, float(c @ v) / c.sum(), float(c @ c), float(c**2 @ c)
    bounds = np.array([b for _, b, _ in built], dtype=float)
    return BoundedMeans(x, n, w, m, c2, c3, np.array([cc for *_, cc in built]), bounds[:, :1], bounds[:, 1:]), notes


# ------------------------------------------------------------------------------------------
# paired comparison
# ------------------------------------------------------------------------------------------
def align(a: StatPlan, b: StatPlan) -> tuple[StatPlan, StatPlan, int]:
    """The two plans restricted to the units both have (in one order), and how many units
    of either were left out."""
    in_b = set(b.units)
    common = [u for u in a.units if u in in_b]
    excluded = len(set(a.units) | in_b) - len(common)
    return _restrict(a, common), _restrict(b, common), excluded


def _restrict(plan: StatPlan, units: list[str]) -> StatPlan:
    pos = {u: i for i, u in enumerate(plan.units)}
    idx = np.array([pos[u] for u in units], dtype=int)
    cols = {n: Column(c.values[:, idx], c.mask[:, idx], c.kind) for n, c in plan.columns.items()}
    return StatPlan(units, np.asarray(plan.strata)[idx], cols, plan.derive, plan.kinds, {}, plan.unit_label, plan.stratum_label)


def _intersect(a: StatPlan, b: StatPlan) -> tuple[StatPlan, StatPlan]:
    """Aligned plans with each base metric's mask cut to the units it covers in *both*
    (a metric one run lacks covers none), so every metric rests on the same units in both."""
    def cut(p: StatPlan, other: StatPlan) -> StatPlan:
        cols = {}
        for n, c in p.columns.items():
            keep = other.columns[n].unit_means()[0] if n in other.columns else np.zeros(len(p.units), dtype=bool)
            cols[n] = Column(c.values, c.mask & keep[None, :], c.kind)
        return StatPlan(p.units, p.strata, cols, p.derive, p.kinds, {}, p.unit_label, p.stratum_label)

    return cut(a, b), cut(b, a)


def mcnemar(a: np.ndarray, b: np.ndarray) -> tuple[int, int, float]:
    """Exact McNemar test of paired 0/1 scores: ``(b_count, c_count, p)`` where ``b_count``
    pairs are right in A only and ``c_count`` right in B only; p = 1 when both are 0 (the
    labelled secondary p beside Tango's interval: conditional on the discordant pairs)."""
    only_a = int(np.sum((a >= 0.5) & (b < 0.5)))
    only_b = int(np.sum((a < 0.5) & (b >= 0.5)))
    m = only_a + only_b
    if m == 0:
        return only_a, only_b, 1.0
    return only_a, only_b, float(_scipy_stats().binomtest(only_a, m, 0.5).pvalue)


def _z(q: float) -> float:
    return float(_scipy_stats().norm.ppf(q))


def mde(se: float | None, df: float | None, level: float, power: float = POWER) -> float | None:
    """Minimum detectable effect of a two-sided test at ``1 − level`` with ``power``:
    ``(q_{1−α/2} + q_{power}) · se`` (t quantiles with ``df``, normal ones without);
    ``None`` when ``se`` is unknown or 0."""
    if se is None or not se > 0:
        return None
    if df is None:
        return (_z((1 + level) / 2) + _z(power)) * se
    t = _scipy_stats().t
    return float((t.ppf((1 + level) / 2, df) + t.ppf(power, df)) * se)


def _binary_entry(va: np.ndarray, vb: np.ndarray, level: float) -> dict[str, Any]:
    """:func:`paired_binary` of per-unit 0/1 scores ``va``, ``vb`` (A, B)."""
    only_a, only_b, _ = mcnemar(va, vb)
    return paired_binary(only_a, only_b, int(va.size), level)


def _linear_strata(plans: list[StatPlan], name: str) -> tuple[dict[str, float], list[np.ndarray]] | None:
    """``(weights, covered)`` when derived metric ``name`` is Σ w_k·(base metric k) over base
    metrics on disjoint units, each covered by some unit in every plan (``covered``: a
    ``(U,)`` mask per base metric, its units covered in all ``plans``); else ``None``."""
    weights = linear_weights(plans[0], name)
    if not weights or any(d not in p.columns for p in plans for d in weights):
        return None
    covered = [np.logical_and.reduce([p.columns[d].unit_means()[0] for p in plans]) for d in weights]
    if np.any(np.sum(covered, axis=0) > 1) or min(int(c.sum()) for c in covered) == 0:
        return None
    return weights, covered


def _bounded_entries(jobs: list[tuple[list[np.ndarray], list[float], tuple[float, float]]], level: float, with_p: bool) -> list[dict[str, Any]]:
    """:func:`score_bounds` (and :func:`score_p`) of every job at once: ``[{low, high, se, p, note}]``."""
    data, notes = bounded_means(jobs) if jobs else (None, [])
    if data is None:
        return []
    (low, high), se = score_bounds(data, level), data.statistic(np.zeros(len(jobs)))[3]
    p = score_p(data) if with_p else np.full(len(jobs), np.nan)
    return [{"low": float(lo), "high": float(hi), "se": float(e), "p": float(q), "note": nt} for lo, hi, e, q, nt in zip(low, high, se, p, notes)]


#: the score interval's test, as a paired entry names it
SCORE_TEST = "score (bounded)"


def score_method(units: str, strata: int, lo: float, hi: float, note: str) -> str:
    """How :func:`score_bounds` was applied, in words (an entry's ``method``)."""
    where = f"{strata} strata" if strata > 1 else "one stratum"
    return (f"score interval on the per-unit values in [{lo:g}, {hi:g}] ({where} of {units}{note}): the Δ0 its test does "
            f"not reject, the null fitted by constrained maximum likelihood over the values seen and the bounds, "
            f"skewness-corrected (Gart–Nam), valid at any n by simulation (perf/coverage.py)")  # fmt: skip


def paired(a: StatPlan, b: StatPlan, level: float, resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """``{metric: {a, b, delta, low, high, p, test, method, n, n_paired, n_excluded, se, df,
    mde[, only_a, only_b][, note]}}`` for every metric both runs have: ``a``, ``b``, Δ, its
    interval and p over the **same** units — those scored in both runs where the metric is
    defined in both (``n`` of them; see the module docstring for the procedures).
    ``n_paired``: units scored in both runs; ``n_excluded``: units scored in one run only.
    A metric with no paired unit has ``n`` 0, ``note`` "no paired samples" and no Δ;
    a metric that is not estimable has Δ but ``low``/``high``/``p`` ``None`` and a ``note``."""
    full_a, full_b = a.point(), b.point()
    names = [n for n in full_a if n in full_b]
    a, b, excluded = align(a, b)
    a, b = _intersect(a, b)
    pa, pb = a.point(), b.point()
    single = a.n_epochs == 1 and b.n_epochs == 1
    epochs = "" if single else ", epochs averaged per unit"
    skip = {**not_estimable(a), **not_estimable(b)}
    strata, note = resampling_strata(a.strata) if a.units else (np.zeros(0, dtype=int), "")
    n_strata = len(np.unique(strata))
    draws: list[dict[str, np.ndarray]] | None = None
    jobs: list[tuple[str, int, tuple[float, float], tuple[list[np.ndarray], list[float], tuple[float, float]]]] = []
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        n = int((a.covered(name) & b.covered(name)).sum()) if a.units else 0
        entry: dict[str, Any] = {"n": n, "n_paired": len(a.units), "n_excluded": excluded}
        out[name] = entry
        if n == 0 or name not in pa or name not in pb:
            entry.update(n=0, a=None, b=None, delta=None, low=None, high=None, p=None, test="none", method="none", mde=None,
                         note="no paired samples")  # fmt: skip
            continue
        delta = pb[name] - pa[name]
        entry.update(a=pa[name], b=pb[name], delta=0.0 if abs(delta) < DELTA_TOL else delta)
        deps = [name] if name in a.columns else a.dependencies().get(name, [])
        lo, hi = _range([a, b], deps)
        linear = None if name in a.columns or name in skip else _linear_strata([a, b], name)
        if name in skip:
            entry.update(low=None, high=None, p=None, se=None, df=None, test="none", method="none", note=skip[name])
        elif name in a.columns or linear:
            weights, covered = linear or ({name: 1.0}, [a.columns[name].unit_means()[0] & b.columns[name].unit_means()[0]])
            diffs = [b.columns[d].unit_means()[1][c] - a.columns[d].unit_means()[1][c] for d, c in zip(weights, covered)]
            diffs = [np.where(np.abs(v) < DELTA_TOL, 0.0, v) for v in diffs]
            ma, mb = (np.concatenate([p.columns[d].unit_means()[1][c] for d, c in zip(weights, covered)]) for p in (a, b))
            if name in a.columns and (lo, hi) == (0.0, 1.0) and np.all(np.isin(ma, (0.0, 1.0))) and np.all(np.isin(mb, (0.0, 1.0))):
                entry.update(_binary_entry(ma, mb, level), delta=entry["delta"])
                if not single:
                    entry["method"] += " (every unit's epochs agree: its mean is 0 or 1)"
            else:
                jobs.append((name, len(weights), (lo - hi, hi - lo), (diffs, list(weights.values()), (lo - hi, hi - lo))))
        else:
            if draws is None:
                draws = bootstrap_draws([a, b], strata, resamples, seed) if resamples > 0 else [{}, {}]
            diffs_b = draws[1].get(name, np.zeros(0)) - draws[0].get(name, np.zeros(0))
            diffs_b = diffs_b[~np.isnan(diffs_b)]
            se = float(diffs_b.std(ddof=1)) * math.sqrt(n / max(n - n_strata, 1)) if diffs_b.size > 1 else 0.0
            df = max(n - n_strata, 1)
            entry.update(test="paired bootstrap t", df=df, se=se,
                         method=f"t (df {df}) on the standard error of {resamples} paired stratified resamples{note} (a non-linear aggregate)")
            if se > DELTA_TOL:
                low, high = t_interval(entry["delta"], se, df, level)
                entry.update(low=max(low, lo - hi), high=min(high, hi - lo), p=float(2 * _scipy_stats().t.sf(abs(entry["delta"]) / se, df)))
            else:
                entry.update(low=None, high=None, p=None, se=None,
                             note="not estimable: the paired resamples of this non-linear aggregate do not vary")  # fmt: skip
    for (name, k, (lo, hi), job), got in zip(jobs, _bounded_entries([j[3] for j in jobs], level, True)):
        entry, d = out[name], out[name]["delta"]
        mean = min(job[1]) >= 0 and abs(math.fsum(job[1]) - 1) < 1e-9  # a weighted mean: Δ within [lo, hi]
        low, high = min(got["low"], d), max(got["high"], d)
        entry.update(low=max(low, lo) if mean else low, high=min(high, hi) if mean else high, p=got["p"], se=got["se"], df=None, test=SCORE_TEST,
                     method=score_method(a.unit_label, k, lo, hi, got["note"] + epochs))  # fmt: skip
    for entry in out.values():
        if "mde" not in entry:
            entry["mde"] = mde(entry.get("se"), entry.get("df"), level)
    return out


# ------------------------------------------------------------------------------------------
# multiplicity and gates
# ------------------------------------------------------------------------------------------
def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def adjust(pvalues: dict[str, float | None]) -> dict[str, dict[str, float]]:
    """``{name: {"holm": p, "bh": p}}`` for the names with a p-value: Holm (family-wise
    error) and Benjamini–Hochberg (false discovery rate, ``scipy.stats.false_discovery_control``)
    over that family."""
    names = [n for n, p in pvalues.items() if isinstance(p, (int, float)) and not math.isnan(p)]
    if not names:
        return {}
    ps = [float(pvalues[n]) for n in names]  # type: ignore[arg-type]
    bh = _scipy_stats().false_discovery_control(ps, method="bh")
    return {n: {"holm": h, "bh": float(q)} for n, h, q in zip(names, holm(ps), bh)}


GATES = ("noninferior", "superior", "equivalent")
#: exit code of each gate verdict (FUTILE: a sequential run stopped with PASS out of reach)
GATE_EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3, "FUTILE": 3}


def parse_gate(text: str) -> tuple[str, float]:
    """``noninferior:0.02`` → ``("noninferior", 0.02)``; ``superior`` → ``("superior", 0.0)``.

    Raises:
        ValueError: an unknown gate or a margin that is not a number ≥ 0 (> 0 for
            ``equivalent``; one line).
    """
    kind, _, margin = text.partition(":")
    if kind not in GATES:
        raise ValueError(f"--gate {text!r}: expected noninferior:MARGIN, superior or equivalent:MARGIN")
    if kind == "superior":
        if margin:
            raise ValueError(f"--gate {text!r}: superior takes no margin")
        return kind, 0.0
    try:
        value = float(margin)
    except ValueError:
        raise ValueError(f"--gate {text!r}: the margin must be a number, e.g. {kind}:0.02") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"--gate {text!r}: the margin must be a positive number")
    return kind, value


def beyond(x: float, bound: float) -> int:
    """+1 when ``x`` > ``bound``, −1 when ``x`` < ``bound``, 0 when they agree within the
    relative tolerance :data:`MARGIN_RTOL` (absolute 1e-12 near 0): round-off never decides."""
    if math.isclose(x, bound, rel_tol=MARGIN_RTOL, abs_tol=1e-12):
        return 0
    return 1 if x > bound else -1


def shown(x: float, bound: float) -> str:
    """``x`` with 4 decimals, or as many more (up to 12) as it takes for the printed number to
    stand on the same side of ``bound`` as ``x`` does (never "−0.0200 < −0.02")."""
    for digits in range(4, 13):
        text = f"{x:+.{digits}f}"
        if beyond(float(text), bound) == beyond(x, bound):
            return text
    return f"{x:+.12f}"


def gate_reading(kind: str, margin: float, low: float, high: float) -> tuple[str, str]:
    """``(verdict, why)`` of an interval [``low``, ``high``] of Δ under a gate, each comparison
    with the margin within :data:`MARGIN_RTOL`, ``why`` the inequality that decided, its
    numbers printed so that they agree with it (:func:`shown`):

    * ``noninferior:δ``: PASS when low > −δ, FAIL when high < −δ;
    * ``superior``: PASS when low > 0, FAIL when high < 0;
    * ``equivalent:δ`` (two one-sided tests): PASS when −δ < low and high < δ, FAIL when the
      interval lies wholly outside (−δ, δ);

    else INCONCLUSIVE, ``why`` saying which point the interval holds."""
    m = f"{margin:g}"
    if kind in ("noninferior", "superior"):
        edge, label = (-margin, f"−{m}") if kind == "noninferior" else (0.0, "0")
        if beyond(low, edge) > 0:
            return "PASS", f"lower bound {shown(low, edge)} > {label}"
        if beyond(high, edge) < 0:
            return "FAIL", f"upper bound {shown(high, edge)} < {label}"
        return "INCONCLUSIVE", f"the interval [{shown(low, edge)}, {shown(high, edge)}] holds {label}"
    if kind != "equivalent":
        raise ValueError(f"unknown gate {kind!r}")
    if beyond(low, -margin) > 0 and beyond(high, margin) < 0:
        return "PASS", f"interval [{shown(low, -margin)}, {shown(high, margin)}] inside (−{m}, {m})"
    if beyond(low, margin) >= 0:
        return "FAIL", f"lower bound {shown(low, margin)} ≥ {m}: outside (−{m}, {m})"
    if beyond(high, -margin) <= 0:
        return "FAIL", f"upper bound {shown(high, -margin)} ≤ −{m}: outside (−{m}, {m})"
    return "INCONCLUSIVE", f"the interval [{shown(low, -margin)}, {shown(high, margin)}] reaches past ±{m}"


def gate_name(kind: str, margin: float) -> str:
    return f"{kind}:{margin:g}" if kind != "superior" else kind


def gate(entry: dict[str, Any] | None, kind: str, margin: float, level: float, metric: str) -> dict[str, Any]:
    """The verdict on a paired entry's Δ (new − base): ``{"gate", "verdict", "exit", "line"}``,
    read from the entry's two-sided interval at ``level`` ([low, high], each side a one-sided
    test at (1 − level)/2) by :func:`gate_reading`; the anytime interval of a run that
    ``run.stop_when`` stopped as FUTILE under the same gate (its ``stopped``) is FUTILE, exit 3,
    with the run's line saying what the interval excludes. No interval (no paired samples, not
    estimable) is INCONCLUSIVE. Every interval has an honest width: a paired 0/1 headline's
    is Tango's, unconditional, so 22 agreeing answers cannot PASS ``equivalent:0.02``; a
    total loss (every difference −1) FAILs."""
    name = gate_name(kind, margin)
    side = f"one-sided α = {(1 - level) / 2:.3g} each side" if kind == "equivalent" else f"one-sided α = {(1 - level) / 2:.3g}"
    if not entry or entry.get("low") is None:
        why = (entry or {}).get("note") or "no paired comparison"
        return {"gate": name, "verdict": "INCONCLUSIVE", "exit": GATE_EXIT["INCONCLUSIVE"],
                "line": f"gate {name}: INCONCLUSIVE — {metric}: {why}"}  # fmt: skip
    verdict, why = gate_reading(kind, margin, entry["low"], entry["high"])
    stopped = entry.get("stopped") or {}
    if verdict == "INCONCLUSIVE" and stopped.get("verdict") == "FUTILE" and stopped.get("gate") == name:
        verdict, why = "FUTILE", str(stopped.get("why"))  # a sequential run's stop, read as the run read it
    test = "TOST" if kind == "equivalent" else "one-sided test"
    edges = (-margin, margin) if kind == "equivalent" else (-margin, -margin) if kind == "noninferior" else (0.0, 0.0)
    line = (f"gate {name}: {verdict} — {why}; {metric} Δ {entry['delta']:+.4f}, {int(round(100 * level))}% interval "
            f"[{shown(entry['low'], edges[0])}, {shown(entry['high'], edges[1])}] ({test} on the paired Δ, {side}; "
            f"{entry['test']}, n={entry['n']})")  # fmt: skip
    return {"gate": name, "verdict": verdict, "exit": GATE_EXIT[verdict], "line": line}


def plan_power(n: int, baseline: float, level: float, target: float | None = None, power: float = POWER) -> dict[str, Any]:
    """Planning a comparison of two runs on the same ``n`` samples with a 0/1 headline at
    rate ``baseline``: ``{"mde": the smallest |Δ| detectable with ``power`` by a two-sided
    test at 1 − ``level``, "n_needed": samples to detect ``target`` (or None)}``. The two
    runs are treated as independent (variance ``2p(1 − p)/n``): conservative, as pairing
    removes the variance of the answers both runs share."""
    zsum = _z((1 + level) / 2) + _z(power)
    var = 2 * baseline * (1 - baseline)
    need = math.ceil(zsum**2 * var / target**2) if target else None
    return {"mde": zsum * math.sqrt(var / n) if n > 0 else None, "n_needed": need}


# ------------------------------------------------------------------------------------------
# repeats
# ------------------------------------------------------------------------------------------
def pass_at_k(correct: np.ndarray, n: np.ndarray, k: int) -> float:
    """Mean over samples of the unbiased pass@k estimator ``1 − C(n−c, k)/C(n, k)`` (Chen et
    al. 2021) from ``c`` correct of ``n`` tries per sample; samples with ``n < k`` are left out."""
    vals = [1.0 - (math.comb(int(ni) - int(ci), k) / math.comb(int(ni), k)) for ci, ni in zip(correct, n) if ni >= k]
    return float(np.mean(vals)) if vals else math.nan


def repeat_plan(plan: StatPlan, k: int, every: bool) -> StatPlan:
    """A one-epoch plan whose 0/1 base metrics hold each unit's pass@k (``every=False``:
    ``1 − C(n−c, k)/C(n, k)``) or pass^k (``every=True``: ``C(c, k)/C(n, k)``, right in all
    k tries), from its ``c`` right of ``n ≥ k`` scored epochs; units with fewer epochs and
    graded metrics are left out. Its derived metrics are then aggregated exactly as the
    headline is (categories, dialogues, weights)."""
    from scipy.special import comb

    cols: dict[str, Column] = {}
    for name, col in plan.columns.items():
        m = col.scored()
        v = np.where(m, col.values, 0.0)
        tries = m.sum(axis=0)
        right = (v * m).sum(axis=0)
        binary = bool(np.all(np.isin(v[m], (0.0, 1.0))))
        ok = (tries >= k) & binary
        with np.errstate(invalid="ignore", divide="ignore"):
            total = comb(tries, k)
            value = comb(right, k) / total if every else 1.0 - comb(tries - right, k) / total
        cols[name] = Column(np.where(ok, value, 0.0)[None, :], ok[None, :], GRADED)
    return StatPlan(plan.units, plan.strata, cols, plan.derive, plan.kinds, {}, plan.unit_label, plan.stratum_label)


# ------------------------------------------------------------------------------------------
# display
# ------------------------------------------------------------------------------------------
def with_interval(value: float | None, ci: dict[str, Any] | None, digits: int = 4) -> str:
    """``0.5440 [0.4900, 0.6000]`` (the value alone when it has no interval; a zero-width
    interval is marked ``(zero width!)``)."""
    if value is None:
        return ""
    if not ci:
        return f"{value:.{digits}f}"
    mark = " (zero width!)" if ci.get("warning") else ""
    return f"{value:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]{mark}"


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


# ------------------------------------------------------------------------------------------
# agreement between raters (the judges of a panel)
# ------------------------------------------------------------------------------------------
#: the methods of :func:`agreement`: Cohen's κ for two raters, Krippendorff's α for more (or
#: two, when asked), and the share of items two raters put in the same category
COHEN_KAPPA, KRIPPENDORFF_ALPHA, PERCENT_AGREEMENT = "cohen_kappa", "krippendorff_alpha_nominal", "percent_agreement"
#: below this many samples an agreement interval says that it undercovers (simulated by
#: ``perf/agreement_coverage.py``: 0.80-0.95 at 20 samples, 0.90-0.93 at 50, 0.93-0.96 at 200)
AGREEMENT_SMALL_N = 50


def _category_index(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(categories, index)``: the distinct finite labels (values rounded to 9 decimals,
    so that 0.1 + 0.2 and 0.3 are one category) and each label's category (−1: missing)."""
    rounded = np.round(np.asarray(labels, dtype=float), 9)
    finite = np.isfinite(rounded)
    categories = np.unique(rounded[finite])
    index = np.full(rounded.shape, -1, dtype=np.int64)
    index[finite] = np.searchsorted(categories, rounded[finite])
    return categories, index


def cohen_kappa_of(table: np.ndarray) -> np.ndarray:
    """Cohen's κ (Cohen 1960) of ``(..., C, C)`` joint counts (rater 1's category × rater 2's):
    ``(p_o − p_e) / (1 − p_e)``, ``p_o`` the share on the diagonal, ``p_e = Σ_c p_1(c)·p_2(c)``
    from the margins. NaN where undefined (no items, or ``p_e = 1``: one category only)."""
    table = np.asarray(table, dtype=float)
    n = table.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_o = np.trace(table, axis1=-2, axis2=-1) / n
        p_e = (table.sum(axis=-1) * table.sum(axis=-2)).sum(axis=-1) / n**2
        out = (p_o - p_e) / (1 - p_e)
    return np.where((n > 0) & (p_e < 1 - 1e-12), out, np.nan)


def krippendorff_alpha_of(coincidence: np.ndarray) -> np.ndarray:
    """Krippendorff's α for nominal data (Krippendorff 2011, "Computing Krippendorff's
    alpha-reliability", §C) of ``(..., C, C)`` coincidence matrices ``o``:
    ``1 − (n − 1)·(n − Σ_c o_cc) / (n² − Σ_c n_c²)``, ``n_c`` the row sums and ``n`` their
    total (pairable values). NaN where undefined (fewer than 2 pairable values, or one
    category only)."""
    o = np.asarray(coincidence, dtype=float)
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    expected = n**2 - (n_c**2).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 1 - (n - 1) * (n - np.trace(o, axis1=-2, axis2=-1)) / expected
    return np.where((n >= 2) & (expected > 1e-12), out, np.nan)


def percent_agreement_of(table: np.ndarray) -> np.ndarray:
    """The share of ``(..., C, C)`` joint counts on the diagonal (NaN for no items)."""
    table = np.asarray(table, dtype=float)
    n = table.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.trace(table, axis1=-2, axis2=-1) / n
    return np.where(n > 0, out, np.nan)


def _item_tables(index: np.ndarray, n_categories: int, method: str) -> np.ndarray:
    """``(I, C, C)``: each item's joint count (two raters, both labelled; else zeros) or its
    coincidence matrix (``(v vᵀ − diag v) / (m − 1)`` over the item's ``m ≥ 2`` labels,
    ``v`` its counts per category; else zeros). Both sum over items into the whole table."""
    n_items = index.shape[0]
    tables = np.zeros((n_items, n_categories, n_categories))
    if method in (COHEN_KAPPA, PERCENT_AGREEMENT):
        both = (index[:, 0] >= 0) & (index[:, 1] >= 0)
        rows = np.flatnonzero(both)
        tables[rows, index[rows, 0], index[rows, 1]] = 1.0
        return tables
    counts = np.zeros((n_items, n_categories))
    for rater in range(index.shape[1]):
        rows = np.flatnonzero(index[:, rater] >= 0)
        np.add.at(counts, (rows, index[rows, rater]), 1.0)
    m = counts.sum(axis=1)
    pairable = m >= 2
    outer = counts[:, :, None] * counts[:, None, :] - counts[:, :, None] * np.eye(n_categories)[None]
    tables[pairable] = outer[pairable] / (m[pairable] - 1)[:, None, None]
    return tables


def _bca_quantiles(draws: np.ndarray, value: float, jackknife: np.ndarray, alpha: float) -> list[float]:
    """The BCa interval's quantiles of ``draws`` (Efron 1987): bias correction ``z0`` from the
    share of draws below ``value``, acceleration from the ``jackknife`` values (NaN ones left
    out); the percentile quantiles where either is undefined."""
    from scipy.stats import norm

    share = (np.sum(draws < value) + 0.5 * np.sum(draws == value)) / draws.size
    jack = jackknife[~np.isnan(jackknife)]
    if not 0.0 < share < 1.0 or jack.size < 2:
        return [alpha, 1 - alpha]
    z0 = float(norm.ppf(share))
    d = jack.mean() - jack
    denom = 6.0 * float(np.sum(d**2)) ** 1.5
    accel = float(np.sum(d**3)) / denom if denom > 0 else 0.0
    out = []
    for q in (alpha, 1 - alpha):
        z = z0 + norm.ppf(q)
        out.append(float(norm.cdf(z0 + z / (1 - accel * z))))
    return out


def agreement(labels: np.ndarray, groups: np.ndarray, level: float, resamples: int, seed: int,
              method: str | None = None, interval: str = "percentile") -> dict[str, Any]:  # fmt: skip
    """Agreement of raters labelling the same items, with a bootstrap interval.

    ``labels``: ``(I, R)`` floats, item × rater, NaN where a rater gave no label (an invalid
    verdict); each distinct value is a category (nominal: 0.5 is as far from 0 as 1 is).
    ``groups``: ``(I,)`` the independent unit of each item (its sample: the epochs of a
    sample are resampled together). Two raters: Cohen's κ over the items both labelled;
    more: Krippendorff's α (nominal), which uses every item with at least 2 labels. ``method``
    asks for one of :data:`COHEN_KAPPA` (two raters), :data:`KRIPPENDORFF_ALPHA` (two raters
    or more) or :data:`PERCENT_AGREEMENT` (two raters: the share of items both put in one
    category) instead of the default by the number of raters.

    Interval: the percentile bootstrap over groups (``resamples`` draws of the groups with
    replacement, seeded by ``seed``; each resample's table is the sum of its groups' item
    tables, so the statistic is recomputed exactly); resamples where the statistic is
    undefined (one category only) are left out and counted. Coverage is simulated by
    ``perf/agreement_coverage.py``: near 95 % from 50 samples on, lower below (to 0.80 at
    20 samples with skewed categories), which the interval's ``method`` then says.
    ``interval="bca"``: the bias-corrected and accelerated bootstrap (Efron 1987) on the same
    draws, its acceleration from the jackknife over groups — near a bound (κ 0.9) the
    percentile interval undercovers (0.89-0.91 at 200 samples), BCa holds 0.935-0.975
    (``perf/qualification_coverage.py``); judge qualification uses it.

    Returns ``{"method", "value" (None when undefined), "ci" ({"low", "high", "level",
    "method", "undefined_resamples"} or None), "n_items" (items used), "n_excluded"
    (items with too few labels), "categories"}``.
    """
    labels = np.asarray(labels, dtype=float)
    method = method or (COHEN_KAPPA if labels.shape[1] == 2 else KRIPPENDORFF_ALPHA)
    statistic = {COHEN_KAPPA: cohen_kappa_of, KRIPPENDORFF_ALPHA: krippendorff_alpha_of, PERCENT_AGREEMENT: percent_agreement_of}[method]
    categories, index = _category_index(labels)
    used = (index >= 0).sum(axis=1) >= 2 if method == KRIPPENDORFF_ALPHA else (index >= 0).all(axis=1)
    tables = _item_tables(index, max(len(categories), 1), method)
    _, group_of = np.unique(np.asarray(groups), return_inverse=True)
    n_groups = int(group_of.max()) + 1 if group_of.size else 0
    per_group = np.zeros((n_groups, *tables.shape[1:]))
    np.add.at(per_group, group_of, tables)
    value = float(statistic(per_group.sum(axis=0)))
    out: dict[str, Any] = {"method": method, "value": None if math.isnan(value) else round(value, 6), "ci": None,
                           "n_items": int(used.sum()), "n_excluded": int((~used).sum()),
                           "categories": [float(c) for c in categories]}  # fmt: skip
    if out["value"] is None or n_groups < 2:
        return out
    flat = per_group.reshape(n_groups, -1)
    draws = np.concatenate([statistic((chunk @ flat).reshape(-1, *tables.shape[1:]))
                            for chunk in weight_chunks(np.zeros(n_groups, dtype=int), resamples, np.random.default_rng(seed))])  # fmt: skip
    defined = draws[~np.isnan(draws)]
    if defined.size == 0:
        return out
    alpha = (1 - level) / 2
    quantiles = [alpha, 1 - alpha]
    if interval == "bca":
        quantiles = _bca_quantiles(defined, value, statistic(per_group.sum(axis=0)[None] - per_group), alpha)
    low, high = (float(x) for x in np.quantile(defined, quantiles))
    kind = "BCa bootstrap" if interval == "bca" else "percentile bootstrap"
    method = f"{kind} over {n_groups} samples ({resamples} resamples, seed {seed})"
    if n_groups < AGREEMENT_SMALL_N:
        method += f"; below {AGREEMENT_SMALL_N} samples it undercovers (simulated 0.80-0.95 at 20 samples)"
    out["ci"] = {"low": round(low, 6), "high": round(high, 6), "level": level, "method": method,
                 "undefined_resamples": int(draws.size - defined.size)}  # fmt: skip
    return out
