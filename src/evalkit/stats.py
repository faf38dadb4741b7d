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

**Intervals by regime** (:func:`intervals`; every interval's ``method`` names the method and
why it was chosen; the thresholds are the constants below; coverage is simulated by
``perf/coverage.py``):

* a mean whose every unit scores 0 (or every unit 1), any score in [0, 1]: the exact
  binomial (Clopper–Pearson) bound on the n units — never a zero-width interval (for a
  score in [0, 1] with mean μ, P(all n at 1) ≤ μⁿ, so the bound holds for graded scores);
* a mean of 0/1 scores (one epoch): Clopper–Pearson when it has fewer than
  :data:`TAIL_COUNT` successes or failures, else Wilson;
* a mean of graded scores (or of 0/1 scores averaged over epochs, clustered by unit): a t
  interval on the per-unit means (a plain mean needs no resampling; ignoring the strata
  only widens it, and it keeps a 100k-sample summary's work to the derived metrics);
* a derived metric: the stratified percentile bootstrap, or a t interval with the
  bootstrap's standard error below :data:`SMALL_N` units; a **linear** combination of
  disjoint strata (ACEBench's weighted OVERALL, a group) with a stratum of fewer than
  :data:`SMALL_N` units — the path chosen by each stratum's own n, not the total — a
  stratified Wald interval with +1/+1 per 0/1 stratum and a t quantile with
  Welch–Satterthwaite df (:func:`_stratified_interval`: 96.4–98.5 % simulated at three seeds
  for strata of 3/10/40/200/600 units, the 3-unit one weighing 0.15, where the z version
  covered 91.5–95.4 % and the bootstrap 78–88 %); a biased non-linear one (kind :data:`NONLINEAR`, SOBHard's
  geometric-mean ``balance_score``) the *basic* bootstrap (which removes the percentile
  interval's bias) and *not estimable* when a stratum has fewer than
  :data:`NONLINEAR_MIN_PER_STRATUM` units (simulated coverage 80 % at 5 a cell, 91.5–95.5 %
  from 8 to 20), or when a stratum it depends on scores 0 (the 0.01 floor then sets that
  cell's value: with cells near 0 the interval covered 80–83 % at any size).

The bootstrap resamples units **within each stratum** (n draws with replacement among a
stratum's n units); strata with fewer than 2 units are pooled (into one, or into the
smallest other stratum), since a one-unit stratum would add no variance; ``stderr`` is the
resamples' standard deviation. The resampling weights are drawn in chunks of rows
(:func:`weight_chunks`), so memory is linear in the number of units. A zero-width interval
carries a ``warning``.

**Paired comparison** of runs A and B (:func:`paired`): for each metric, over the units
scored in both runs where the metric is defined in both (one n), Δ = B − A with its
interval and p-value from **one procedure**, so that the interval excludes 0 exactly when
p < 1 − level:

* a mean of per-unit 0/1 scores (one epoch, or epochs whose per-unit means are still 0 or 1:
  the binary method whatever the layout): Tango's unconditional score test and the interval
  that inverts it (:func:`paired_binary`; Tango 1998, Stat Med 17:891–908; continuity
  correction :data:`TANGO_CC`), or below :data:`SMALL_PAIRED` units the exact unconditional
  test on Tango's statistic (its tail maximised over the nuisance parameter). No discordant
  pair gives an interval of honest width (±0.164 at n = 22), never [0, 0]. The exact McNemar
  p (``p_mcnemar_exact``) is a labelled secondary figure; :func:`newcombe_paired` a
  cross-check. At a true Δ of exactly −margin a ``noninferior`` gate PASSes ≤ 2.5 % for every
  discordance pattern (``perf/coverage.py`` computes it exactly);
* a mean of graded scores (or of epochs): a paired t on the per-unit differences (a warning
  when n < :data:`SKEW_SMALL_N` and the differences are strongly skewed);
* a derived metric: a t on the paired stratified bootstrap's standard error.

When the differences do not vary (se = 0: identical graded scores) there is no interval and
p = 1, with a ``note``: a gate is then INCONCLUSIVE, never PASS. |Δ| (and each per-unit
difference) below :data:`DELTA_TOL` = 1e-9 is 0, the numeric tolerance, so round-off never
reads as significance. Intervals of metrics in [0, 1] are clipped to Δ's range [−1, 1]. The
minimum detectable effect at 80 % power is given beside it (:func:`mde`). Holm and
Benjamini–Hochberg adjust a family of p-values (:func:`adjust`); :func:`gate` turns the
headline's Δ into PASS / FAIL / INCONCLUSIVE.
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

    def unit_means(self) -> tuple[np.ndarray, np.ndarray]:
        """``(covered, means)``: whether each unit is scored in some epoch (``(U,)`` bool)
        and its mean over those epochs (``nan`` where not covered)."""
        count = self.mask.sum(axis=0)
        total = (np.nan_to_num(self.values) * self.mask).sum(axis=0)
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
            for e in range(self.n_epochs):
                mask = np.stack([_row(self.columns[n].mask, e) for n in names], axis=1).astype(float)
                values = np.stack([_row(self.columns[n].values, e) for n in names], axis=1)
                out.append((np.nan_to_num(values) * mask, mask))
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
            out |= np.any(self.columns[c].mask, axis=0)
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


def stratified_weights(strata: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """All ``(resamples, U)`` draw counts at once (:func:`weight_chunks` concatenated; for
    small plans — the engine evaluates chunk by chunk)."""
    chunks = list(weight_chunks(strata, resamples, rng))
    return np.concatenate(chunks) if chunks else np.zeros((0, len(strata)))


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


def _in_unit_range(plan: StatPlan, names: list[str]) -> bool:
    for n in names:
        if n not in plan.columns:  # a base metric one run of a pair lacks (other cells selected)
            continue
        v = plan.columns[n].values[plan.columns[n].mask]
        if v.size and (np.nanmin(v) < 0 or np.nanmax(v) > 1):
            return False
    return True


def _base_interval(plan: StatPlan, name: str, point: float, level: float, units: str) -> dict[str, Any] | None:
    """The analytic interval of base metric ``name`` when its regime calls for one, else
    ``None`` (the bootstrap's)."""
    col = plan.columns[name]
    covered, means = col.unit_means()
    m = means[covered]
    n = int(m.size)
    bounded = _in_unit_range(plan, [name])
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
    need_boot = []
    for name, value in point.items():
        if name in skip:
            continue
        entry = _base_interval(plan, name, value, level, units) if name in plan.columns else None
        if entry is None:
            need_boot.append(name)
        else:
            out[name] = entry
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
    bounded = _in_unit_range(plan, deps)
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
    strat = _stratified_interval(plan, name, value, level) if name not in plan.columns else None
    if strat is not None:
        return strat
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


def _stratified_interval(plan: StatPlan, name: str, value: float, level: float) -> dict[str, Any] | None:
    """The small-stratum path of a linear derived metric Σ w_k·mean_k over disjoint base
    metrics (strata), chosen when one of them has fewer than :data:`SMALL_N` units: a
    stratified Wald interval with +1/+1 per 0/1 stratum (each rate (x + 1)/(n + 2), its
    variance p̃(1 − p̃)/(n + 2); Agresti & Caffo 2000's adjustment per stratum) and the
    per-unit variance s²/n of a graded one; a t quantile with Welch–Satterthwaite df over
    all strata (n + 1 df for a 0/1 stratum: a heavy 3-unit stratum leaves few, and the z
    quantile covered 91.5 % there), widened where needed to hold the estimate ``value``
    itself. ``None`` when the
    metric is not such a combination, a stratum is large enough for all, or a graded
    stratum has fewer than 2 units (the bootstrap's then)."""
    if plan.n_epochs != 1:
        return None
    weights = linear_weights(plan, name)
    if not weights:
        return None
    masks = [plan.columns[d].mask[0] for d in weights]
    if np.any(np.sum(masks, axis=0) > 1):
        return None
    sizes = [int(m.sum()) for m in masks]
    if min(sizes) >= SMALL_N or min(sizes) == 0:
        return None
    centre = sum(weights[d] * float(np.dot(plan.columns[d].values[0], m)) / max(int(m.sum()), 1) for d, m in zip(weights, masks))
    var, ws_num, ws_den, graded = 0.0, 0.0, 0.0, False
    adjusted = value - centre
    for d, m in zip(weights, masks):
        v = plan.columns[d].values[0][m]
        w, n_k = weights[d], v.size
        if np.all(np.isin(v, (0.0, 1.0))):
            pt = (v.sum() + 1) / (n_k + 2)
            var_k = pt * (1 - pt) / (n_k + 2)
            adjusted += w * pt
            ws_den += (w * w * var_k) ** 2 / (n_k + 1)  # Welch–Satterthwaite, the +2 pseudo-units counted
        else:
            if n_k < 2:
                return None
            graded = True
            var_k = float(np.var(v, ddof=1)) / n_k
            adjusted += w * float(v.mean())
            ws_den += (w * w * var_k) ** 2 / (n_k - 1)
        var += w * w * var_k
        ws_num += w * w * var_k
    se = math.sqrt(var)
    if ws_den > 0:  # t with Welch–Satterthwaite df: a heavy stratum of 3 units has few df (92 % → ≥ 93 %)
        df = ws_num**2 / ws_den
        low, high = t_interval(adjusted, se, df, level)
    else:
        q = _z((1 + level) / 2)
        low, high = adjusted - q * se, adjusted + q * se
    # +1/+1 pulls each stratum's centre towards ½; near 0 or 1 over many small strata the
    # shifted interval can miss the estimate itself (ACEBench zh reference: 0.9971 [0.9639,
    # 0.9880]): it is widened to hold it (coverage can only rise)
    low, high = min(low, value), max(high, value)
    if _in_unit_range(plan, list(weights)):
        low, high = max(low, 0.0), min(high, 1.0)
    small = ", ".join(f"{n_k}" for n_k in sorted(sizes)[:3])
    return _entry(low, high, se, sum(sizes), f"stratified Wald with +1/+1 per 0/1 {plan.stratum_label} (Agresti–Caffo per stratum), "
                  f"t with Welch–Satterthwaite df: "
                  f"a linear combination of {len(sizes)} strata, the smallest of {small} {plan.unit_label} "
                  f"(fewer than {SMALL_N}: the bootstrap undercovers)")  # fmt: skip


def _stratified_paired(a: StatPlan, b: StatPlan, name: str, level: float) -> dict[str, Any] | None:
    """The small-stratum path of a paired Δ of a linear derived metric Σ w_k·mean_k over
    disjoint base metrics (aligned, intersected plans), chosen when one stratum has fewer
    than :data:`SMALL_N` units: per 0/1 stratum the Wald interval of the paired difference
    with ½ added to each of its 2×2 cells (Agresti & Min 2005, per stratum), per graded
    stratum the per-unit differences' s²/n; Δ's interval Σ w_k·Δ̃_k ± z·se and its p from the
    same z (they agree). ``None`` when the metric is no such combination or every stratum is
    large (the paired bootstrap t's then)."""
    weights = linear_weights(a, name)
    if not weights:
        return None
    covered = [a.columns[d].unit_means()[0] & b.columns[d].unit_means()[0] for d in weights]
    if np.any(np.sum([a.columns[d].mask.any(axis=0) for d in weights], axis=0) > 1):
        return None
    sizes = [int(c.sum()) for c in covered]
    if min(sizes) >= SMALL_N or min(sizes) == 0:
        return None
    centre, var = 0.0, 0.0
    for d, c in zip(weights, covered):
        va, vb = a.columns[d].unit_means()[1][c], b.columns[d].unit_means()[1][c]
        w, n_k = weights[d], int(c.sum())
        if np.all(np.isin(va, (0.0, 1.0))) and np.all(np.isin(vb, (0.0, 1.0))):
            only_a, only_b, _ = mcnemar(va, vb)
            qa, qb = (only_a + 0.5) / (n_k + 2), (only_b + 0.5) / (n_k + 2)
            centre += w * (qb - qa)
            var += w * w * (qa + qb - (qb - qa) ** 2) / (n_k + 2)
        else:
            if n_k < 2:
                return None
            diff = np.where(np.abs(vb - va) < DELTA_TOL, 0.0, vb - va)
            centre += w * float(diff.mean())
            var += w * w * float(np.var(diff, ddof=1)) / n_k
    se = math.sqrt(var)
    if not se > 0:
        return None
    q = _z((1 + level) / 2)
    p = float(2 * _scipy_stats().norm.sf(abs(centre) / se))
    small = ", ".join(str(k) for k in sorted(sizes)[:3])
    return {"low": centre - q * se, "high": centre + q * se, "p": p, "se": se, "df": None, "test": "stratified paired Wald",
            "method": f"stratified Wald on the paired differences, ½ added to each 2×2 cell per 0/1 {a.stratum_label} "
                      f"(Agresti–Min per stratum): a linear combination of {len(sizes)} strata, the smallest of {small} "
                      f"{a.unit_label} (fewer than {SMALL_N}: the bootstrap undercovers)"}  # fmt: skip


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

    No discordant pair still gives an interval of honest width (±0.149 at n = 22). Returns
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


def newcombe_paired(only_a: int, only_b: int, both: int, n: int, level: float) -> tuple[float, float]:
    """Newcombe's method 10 (Stat Med 1998, 17:2635; Wilson intervals of the two marginal
    rates with a correlation correction): a cross-check only — it inverts no test, so it may
    disagree with :func:`paired_binary`'s p. ``both``: units right in both runs."""
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson(both + only_a, n, level)
    l2, u2 = wilson(both + only_b, n, level)
    neither = n - both - only_a - only_b
    denom = (both + only_a) * (neither + only_b) * (both + only_b) * (neither + only_a)
    num = both * neither - only_a * only_b
    phi = 0.0 if denom == 0 else (num - n / 2 if num > n / 2 else 0.0 if num >= 0 else num) / math.sqrt(denom)
    d = p2 - p1
    low = d - math.sqrt(max((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2, 0.0))
    high = d + math.sqrt(max((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2, 0.0))
    return max(-1.0, low), min(1.0, high)


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
    pairs are right in A only and ``c_count`` right in B only; p = 1 when both are 0. At
    rate 1/2 the binomial is symmetric, so the two-sided p is twice the smaller tail: the
    test the Clopper–Pearson interval of :func:`paired` inverts."""
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


def _t_entry(delta: float, se: float, df: float, level: float, test: str, method: str) -> dict[str, Any]:
    """A t interval and p of Δ with standard error ``se``; with ``se`` 0 (no variation in
    the differences: round-off or identical scores) no interval and p = 1, with a ``note``:
    a zero-width interval would PASS any gate on no evidence."""
    if se > 0:
        low, high = t_interval(delta, se, df, level)
        p = float(2 * _scipy_stats().t.sf(abs(delta) / se, df))
        return {"low": low, "high": high, "p": p, "se": se, "df": df, "test": test, "method": method}
    return {"low": None, "high": None, "p": 1.0, "se": 0.0, "df": df, "test": test, "method": method,
            "note": "no variation in the per-unit differences (se = 0): no interval, p = 1 (a gate is INCONCLUSIVE)"}  # fmt: skip


#: a paired t on fewer units than this with skewed differences may reject far more often
#: than its level (28 % at n = 12 with strongly skewed differences): the entry warns
SKEW_SMALL_N = 30
#: |sample skewness| of the differences above which that warning is given
SKEW_LIMIT = 1.0


def _skew_warning(d: np.ndarray, level: float) -> str:
    """A warning for a paired t on fewer than :data:`SKEW_SMALL_N` differences whose sample
    skewness exceeds :data:`SKEW_LIMIT` in size (``""`` otherwise)."""
    if d.size >= SKEW_SMALL_N or d.size < 3 or np.std(d) == 0:
        return ""
    g = float(_scipy_stats().skew(d))
    if abs(g) <= SKEW_LIMIT:
        return ""
    return (f"paired t on {d.size} strongly skewed differences (skewness {g:+.2f}): its p and interval may be far "
            f"from their nominal level at this n, and so may the MDE")


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
    skip = {**not_estimable(a), **not_estimable(b)}
    strata, note = resampling_strata(a.strata) if a.units else (np.zeros(0, dtype=int), "")
    n_strata = len(np.unique(strata))
    draws: list[dict[str, np.ndarray]] | None = None
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        n = int((a.covered(name) & b.covered(name)).sum()) if a.units else 0
        entry: dict[str, Any] = {"n": n, "n_paired": len(a.units), "n_excluded": excluded}
        if n == 0 or name not in pa or name not in pb:
            out[name] = {**entry, "n": 0, "a": None, "b": None, "delta": None, "low": None, "high": None, "p": None,
                         "test": "none", "method": "none", "mde": None, "note": "no paired samples"}  # fmt: skip
            continue
        delta = pb[name] - pa[name]
        if abs(delta) < DELTA_TOL:
            delta = 0.0
        entry.update(a=pa[name], b=pb[name], delta=delta)
        deps = [name] if name in a.columns else a.dependencies().get(name, [])
        bounded = bool(deps) and _in_unit_range(a, deps) and _in_unit_range(b, deps)
        if name in skip:
            entry.update(low=None, high=None, p=None, se=None, df=None, test="none", method="none", note=skip[name])
        elif name in a.columns:
            ca, cb = a.columns[name], b.columns[name]
            both = ca.unit_means()[0] & cb.unit_means()[0]
            ma, mb = ca.unit_means()[1][both], cb.unit_means()[1][both]
            if bounded and np.all(np.isin(ma, (0.0, 1.0))) and np.all(np.isin(mb, (0.0, 1.0))):
                entry.update(_binary_entry(ma, mb, level))
                if not single:
                    entry["method"] += " (every unit's epochs agree: its mean is 0 or 1)"
                entry["delta"] = delta
            else:
                d = mb - ma
                d = np.where(np.abs(d) < DELTA_TOL, 0.0, d)
                se = float(np.std(d, ddof=1) / math.sqrt(n)) if n > 1 else 0.0
                entry.update(_t_entry(delta, se, max(n - 1, 1), level, "paired t",
                                      "paired t on the per-unit differences" + (" (epochs averaged per sample)" if not single else "")))
                skew = _skew_warning(d, level)
                if skew:
                    entry["warning"] = skew
        elif single and (strat := _stratified_paired(a, b, name, level)) is not None:
            entry.update(strat)
        else:
            if draws is None:
                draws = bootstrap_draws([a, b], strata, resamples, seed) if resamples > 0 else [{}, {}]
            diffs = draws[1].get(name, np.zeros(0)) - draws[0].get(name, np.zeros(0))
            diffs = diffs[~np.isnan(diffs)]
            se = float(diffs.std(ddof=1)) if diffs.size > 1 else 0.0
            if se < DELTA_TOL:
                se = 0.0
            df = max(n - n_strata, 1)
            if n > n_strata:
                se *= math.sqrt(n / (n - n_strata))
            entry.update(_t_entry(delta, se, df, level, "paired bootstrap t",
                                  f"t (df {df}) on the standard error of {resamples} paired stratified resamples{note}"))
        if bounded and entry.get("low") is not None:
            entry["low"], entry["high"] = max(entry["low"], -1.0), min(entry["high"], 1.0)
        entry["mde"] = mde(entry.get("se"), entry.get("df"), level)
        out[name] = entry
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
#: exit code of each gate verdict
GATE_EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}


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


def gate(entry: dict[str, Any] | None, kind: str, margin: float, level: float, metric: str) -> dict[str, Any]:
    """The verdict on a paired entry's Δ (new − base): ``{"gate", "verdict", "exit", "line"}``.

    With the entry's two-sided interval at ``level`` ([low, high], each side a one-sided
    test at (1 − level)/2):

    * ``noninferior:δ``: PASS when low > −δ, FAIL when high < −δ (shown inferior), else
      INCONCLUSIVE;
    * ``superior``: PASS when low > 0, FAIL when high < 0, else INCONCLUSIVE;
    * ``equivalent:δ`` (two one-sided tests, TOST): PASS when −δ < low and high < δ, FAIL
      when the interval lies wholly outside (−δ, δ), else INCONCLUSIVE.

    No interval (no paired samples, not estimable, se = 0) is INCONCLUSIVE. A paired 0/1
    headline's interval is :func:`paired_binary`'s, unconditional: no discordant pair still
    gives one of honest width, so 22 agreeing answers cannot PASS ``equivalent:0.02``.
    """
    name = f"{kind}:{margin:g}" if kind != "superior" else kind
    side = f"one-sided α = {(1 - level) / 2:.3g} each side" if kind == "equivalent" else f"one-sided α = {(1 - level) / 2:.3g}"
    if not entry or entry.get("low") is None:
        why = (entry or {}).get("note") or "no paired comparison"
        return {"gate": name, "verdict": "INCONCLUSIVE", "exit": GATE_EXIT["INCONCLUSIVE"],
                "line": f"gate {name}: INCONCLUSIVE — {metric}: {why}"}  # fmt: skip
    low, high = entry["low"], entry["high"]
    if kind == "noninferior":
        verdict = "PASS" if low > -margin else "FAIL" if high < -margin else "INCONCLUSIVE"
    elif kind == "superior":
        verdict = "PASS" if low > 0 else "FAIL" if high < 0 else "INCONCLUSIVE"
    else:
        verdict = "PASS" if -margin < low and high < margin else "FAIL" if (low >= margin or high <= -margin) else "INCONCLUSIVE"
    test = "TOST" if kind == "equivalent" else "one-sided test"
    line = (f"gate {name}: {verdict} — {metric} Δ {entry['delta']:+.4f}, {int(round(100 * level))}% interval "
            f"[{low:+.4f}, {high:+.4f}] ({test} on the paired Δ, {side}; {entry['test']}, n={entry['n']})")  # fmt: skip
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
        m = col.mask
        v = np.nan_to_num(col.values)
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
