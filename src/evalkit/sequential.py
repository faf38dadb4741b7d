"""Anytime-valid paired gates: a confidence sequence for a weighted headline's Δ, sampled
without replacement from a finite stratified benchmark (issue 37, items 1–3).

**What is estimated.** A benchmark's gate population is ``N`` units (a question, a dialogue,
a rollout: the statistics' unit, :class:`evalkit.stats.StatPlan`) in ``K`` strata of sizes
``N_k``; each unit has a paired difference ``d = score_new − score_base`` in [−1, 1]; the
headline's Δ is ``Σ_k w_k μ_k`` with ``μ_k`` the mean of ``d`` over stratum ``k``'s ``N_k``
units and ``w_k`` the headline's weight of that stratum (``N_k / N`` for a plain mean).

**Sampling.** Units are drawn in one seeded order (:func:`stratified_order`): within each
stratum a uniformly random permutation (sampling without replacement), and the strata
interleaved by a deterministic schedule that keeps each stratum's share of the draws at
its weight (so that stopping early does not bias the mix). The schedule is fixed before
any answer, so which stratum the ``t``-th draw comes from is predictable.

**The confidence sequence.** Per stratum, the hedged betting capital process for sampling
without replacement of Waudby-Smith & Ramdas (*Confidence sequences for sampling without
replacement*, NeurIPS 2020, §3; *Estimating means of bounded random variables by betting*,
JRSS-B 2024, §4–5: predictable plug-in bets, hedged capital ``½K⁺ + ½K⁻``): with ``y = (d + 1)/2``
in [0, 1] and a candidate stratum mean ``m``, the draw's conditional mean under ``m`` is
``m_t = (N_k m − S)/(N_k − n)`` (``S`` the sum of the ``n`` draws so far), and

    K⁺_t(m) = Π (1 + λ⁺_i (y_i − m_i)),  K⁻_t(m) = Π (1 − λ⁻_i (y_i − m_i)),

with ``λ_i`` predictable (the WSR "PrPl" rule: ``√(2 log(2/α) / (σ̂²_{i−1} i log(1 + i)))``,
truncated to ``c/m_i`` and ``c/(1 − m_i)``, ``c`` = :data:`TRUNCATION`). Under the true ``m``
each is a non-negative martingale with mean 1; since the schedule is predictable, the
product over strata of ``½K⁺ + ½K⁻`` is one too, for the true vector ``(μ_1 … μ_K)``. By
Ville's inequality the set of vectors whose product stays below ``1/α`` holds the truth at
every look at once with probability ≥ 1 − α (simultaneous coverage, valid at any stopping
time), and its projection on ``Σ w_k μ_k`` is the interval of Δ. The projection's ends are
computed by Lagrangian duality (weak duality: any multiplier gives a bound that is never too
narrow) on a grid of :data:`GRID` candidate means per stratum, each end padded by one grid
step. A stratum not yet drawn contributes its whole range (±w_k); an exhausted one its exact
mean. A candidate mean that the draws already rule out (the unseen units could not reach it)
is excluded outright.

**The gate** (:func:`decide`): the language of ``compare --gate`` (``noninferior:δ``,
``superior``, ``equivalent:δ``) on the interval at each look: PASS / FAIL as
:func:`evalkit.stats.gate` reads an interval, *futility* when the verdict can no longer be
PASS within the run's cap (a projection of the interval's half-width to the cap, see
:func:`decide`), else *continue*. The interval's miscoverage is ``1 − level`` over all looks
together, so a false PASS at a true Δ of −δ is bounded by ``1 − level`` at any stopping
rule; ``perf/sequential.py`` measures it (well below the one-sided ``(1 − level)/2``).

Pure numpy: the base layer (no engine, no benchmarks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from evalkit.stats import beyond, gate_reading, shown

#: candidate stratum means (on y = (d + 1)/2 in [0, 1]) at which the capital is kept
GRID = 401
#: the bets' truncation (WSR's c: at most this fraction of the capital is bet)
TRUNCATION = 0.5
#: multipliers tried in the projection's dual (log-spaced; each one gives a valid bound)
_NUS = np.geomspace(1e-3, 1e2, 41)


class StratumCS:
    """One stratum's hedged WoR betting capital over the grid of candidate means.

    ``size``: the stratum's population ``N_k`` (≥ 1); ``alpha``: the level the bets are tuned
    for (any predictable bet is valid; this only shapes their size). Observations are ``d``
    in [−1, 1], fed in draw order by :meth:`add`."""

    def __init__(self, size: int, alpha: float) -> None:
        if size < 1:
            raise ValueError("a stratum needs at least one unit")
        self.size, self.alpha = int(size), float(alpha)
        self.grid = np.linspace(0.0, 1.0, GRID)
        self.log_plus = np.zeros(GRID)
        self.log_minus = np.zeros(GRID)
        self.n, self.total = 0, 0.0
        self._mean_hat, self._var_sum = 0.5, 0.25

    def add(self, d: float) -> None:
        """One more draw ``d`` (in [−1, 1]; clipped) of this stratum.

        Raises:
            ValueError: the stratum is already exhausted (all ``N_k`` drawn), or ``d`` is
                not a finite number (NaN would be clipped to an answer nobody gave)."""
        if self.n >= self.size:
            raise ValueError("stratum exhausted: every unit was drawn")
        if not math.isfinite(d):
            raise ValueError(f"a draw must be a finite number in [-1, 1], got {d!r}")
        y = min(1.0, max(0.0, (float(d) + 1.0) / 2.0))
        t = self.n + 1
        var_hat = self._var_sum / t  # σ̂²_{t−1} (WSR: (¼ + Σ (y_i − μ̂_i)²)/t)
        lam = math.sqrt(2.0 * math.log(2.0 / self.alpha) / (var_hat * t * math.log(1.0 + t)))
        remaining = self.size - self.n
        with np.errstate(divide="ignore", invalid="ignore"):
            m_t = (self.size * self.grid - self.total) / remaining
            ok = (m_t > 0.0) & (m_t < 1.0)
            safe = np.where(ok, m_t, 0.5)
            lam_p = np.minimum(lam, TRUNCATION / safe)
            lam_m = np.minimum(lam, TRUNCATION / (1.0 - safe))
            self.log_plus = np.where(ok, self.log_plus + np.log1p(lam_p * (y - safe)), self.log_plus)
            self.log_minus = np.where(ok, self.log_minus + np.log1p(-lam_m * (y - safe)), self.log_minus)
        self._var_sum += (y - self._mean_hat) ** 2
        self.n, self.total = t, self.total + y
        self._mean_hat = (0.5 + self.total) / (t + 1)

    @property
    def exhausted(self) -> bool:
        return self.n >= self.size

    def feasible(self) -> tuple[float, float]:
        """``(lo, hi)`` on the y scale: the stratum means the draws still allow (the unseen
        ``N_k − n`` units anywhere in [0, 1])."""
        return self.total / self.size, (self.total + self.size - self.n) / self.size

    def log_capital(self) -> np.ndarray:
        """``log(½K⁺ + ½K⁻)`` at each grid mean; ``inf`` where the draws rule the mean out."""
        lo, hi = self.feasible()
        h = 1.0 / (GRID - 1)
        out = np.logaddexp(self.log_plus, self.log_minus) - math.log(2.0)
        return np.where((self.grid >= lo - h) & (self.grid <= hi + h), out, np.inf)


def _upper(strata: list[StratumCS], weights: np.ndarray, threshold: float, sign: float) -> float:
    """The largest (``sign`` = 1) or, negated, smallest (``sign`` = −1) Σ w_k μ_k (d scale)
    over the vectors whose summed log capital is below ``threshold`` — bounded from outside
    by the Lagrangian dual, ``min_ν ν·threshold + Σ_k max_m (±w_k·d(m) − ν g_k(m))``."""
    fixed, parts = 0.0, []
    h = 2.0 / (GRID - 1)  # one grid step on the d scale
    for s, w in zip(strata, weights):
        if w == 0:
            continue
        if s.exhausted:  # its mean is known exactly
            fixed += sign * w * (2.0 * s.total / s.size - 1.0)
            continue
        if s.n == 0:  # nothing drawn: any mean
            fixed += abs(w)
            continue
        g = s.log_capital()
        lo, hi = s.feasible()
        d = 2.0 * np.clip(s.grid, lo, hi) - 1.0
        parts.append((sign * w * d + abs(w) * h, g))
    if not parts:
        return fixed
    total = _NUS * threshold
    for val, g in parts:  # (multipliers × grid) at once
        total = total + np.max(val[None, :] - _NUS[:, None] * g[None, :], axis=1)
    return fixed + float(np.min(total))


@dataclass
class Look:
    """The interval at one look: ``n`` units used, Δ's point estimate
    (:meth:`ConfidenceSequence.estimate`), ``[low, high]``."""

    n: int
    delta: float
    low: float
    high: float

    def record(self) -> dict[str, Any]:
        return {"n": self.n, "delta": round(self.delta, 6), "low": round(self.low, 6), "high": round(self.high, 6)}


@dataclass
class ConfidenceSequence:
    """The confidence sequence of Δ = Σ w_k μ_k over strata of ``sizes`` with headline
    ``weights`` (normalised to sum 1 only if they are given as sizes; used as given), at
    ``level`` (simultaneous over all looks). Feed draws with :meth:`add`, read
    :meth:`interval` at any time."""

    sizes: Sequence[int]
    weights: Sequence[float]
    level: float = 0.95
    strata: list[StratumCS] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.weights) or not self.sizes:
            raise ValueError("one weight per stratum, at least one stratum")
        if not 0.0 < self.level < 1.0:
            raise ValueError("level must lie in (0, 1)")
        self.alpha = 1.0 - self.level
        self.w = np.asarray(self.weights, dtype=float)
        self.strata = [StratumCS(n, self.alpha) for n in self.sizes]

    @property
    def n(self) -> int:
        return sum(s.n for s in self.strata)

    def add(self, stratum: int, d: float) -> None:
        self.strata[stratum].add(d)

    def estimate(self) -> float:
        """Δ's point estimate: the weighted mean of the drawn strata's means, renormalised
        over the strata drawn so far (0 before any draw)."""
        drawn = [(w, s) for w, s in zip(self.w, self.strata) if s.n]
        total = sum(w for w, _ in drawn)
        if not drawn or total <= 0:
            return 0.0
        return float(sum(w * (2.0 * s.total / s.n - 1.0) for w, s in drawn) / total * float(self.w.sum()))

    def interval(self) -> Look:
        """The interval of Δ now (clipped to [−Σ|w|, Σ|w|])."""
        c = math.log(1.0 / self.alpha)
        span = float(np.abs(self.w).sum())
        high = min(span, _upper(self.strata, self.w, c, 1.0))
        low = max(-span, -_upper(self.strata, self.w, c, -1.0))
        est = self.estimate()
        return Look(self.n, est, min(low, est), max(high, est))


def stratified_order(strata: Sequence[int], weights: dict[int, float], seed: int) -> list[int]:
    """The draw order: positions into ``strata`` (the stratum of each unit), a seeded uniform
    permutation within each stratum, the strata interleaved so that after ``t`` draws each
    stratum has had about ``t·w_k/Σw`` of them (largest deficit first; ties by stratum);
    an exhausted stratum drops out. Deterministic for a seed: a resume draws the same order."""
    rng = np.random.default_rng(seed)
    keys = sorted(set(strata))
    members = {k: [i for i, s in enumerate(strata) if s == k] for k in keys}
    queues = {k: list(np.asarray(members[k])[rng.permutation(len(members[k]))]) for k in keys}
    total_w = sum(max(weights.get(k, 0.0), 0.0) for k in keys) or 1.0
    share = {k: max(weights.get(k, 0.0), 0.0) / total_w for k in keys}
    taken = {k: 0 for k in keys}
    order: list[int] = []
    for t in range(1, len(strata) + 1):
        open_ = [k for k in keys if taken[k] < len(queues[k])]
        k = max(open_, key=lambda k: (t * share[k] - taken[k], -keys.index(k)))
        order.append(int(queues[k][taken[k]]))
        taken[k] += 1
    return order


def fixed_n(margin: float, discordance: float, level: float = 0.95, power: float = 0.9) -> int:
    """The fixed-n paired design's size for ``noninferior:margin`` with ``power`` at a true
    Δ of 0 (one-sided test at (1 − level)/2; variance of a paired 0/1 difference at Δ = 0 is
    the discordance rate): ``⌈(z_{1−α/2} + z_power)² · discordance / margin²⌉``."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf((1 + level) / 2) + NormalDist().inv_cdf(power)
    return math.ceil(z * z * discordance / (margin * margin))


#: a decision and what it means
VERDICTS = ("PASS", "FAIL", "FUTILE", "CONTINUE")


def decide(look: Look, kind: str, margin: float, n_cap: int, min_samples: int = 0, population: int | None = None,
           span: float = 1.0) -> tuple[str, str]:  # fmt: skip
    """``(verdict, why)`` of the gate at one look: PASS / FAIL as :func:`evalkit.stats.gate`
    reads an interval (:func:`evalkit.stats.gate_reading`: ``noninferior:δ`` PASS when
    low > −δ, FAIL when high < −δ — a stop whose interval lies below −δ is a FAIL —;
    ``superior``: low > 0 / high < 0; ``equivalent:δ``: inside (−δ, δ) / wholly outside;
    each comparison within a relative 1e-9); FUTILE — only when the cap is below the
    ``population`` (``run.limit``; a census always reaches the exact Δ) — when PASS is out of
    reach by ``n_cap`` units: with the half-width projected to the cap as ``h·√(n/n_cap)``
    (the rate of a CS's width), an estimate at the interval's favourable end would still not
    clear the margin (FUTILE never PASSes, so it cannot raise the false-PASS rate); its
    ``why`` says what the interval excludes (within Δ's range ±``span``) and what it still
    holds. CONTINUE otherwise, and always before ``min_samples``."""
    if look.n < min_samples:
        return "CONTINUE", f"below run.min_samples={min_samples}"
    if population is not None and n_cap >= population:
        n_cap = look.n  # no futility: PASS stays reachable until the census
    low, high = look.low, look.high
    verdict, why = gate_reading(kind, margin, low, high)
    if verdict != "INCONCLUSIVE":
        return verdict, why
    half = (high - low) / 2.0
    h_cap = half * math.sqrt(look.n / max(n_cap, look.n)) if look.n else half
    if look.n < n_cap:
        if kind == "noninferior" and beyond(high - h_cap, -margin) <= 0:
            return "FUTILE", _futile(f"non-inferiority within {margin:g}", n_cap, low, high, span, -margin)
        if kind == "superior" and beyond(high - h_cap, 0.0) <= 0:
            return "FUTILE", _futile("superiority", n_cap, low, high, span, 0.0)
        if kind == "equivalent" and (h_cap >= margin or beyond(low + h_cap, margin) >= 0 or beyond(high - h_cap, -margin) <= 0):
            return "FUTILE", _futile(f"equivalence within ±{margin:g}", n_cap, low, high, span, -margin, margin)
    return "CONTINUE", "undecided"


def _futile(what: str, n_cap: int, low: float, high: float, span: float, *edges: float) -> str:
    """The line of a FUTILE stop: what cannot be shown, what the interval excludes (within
    Δ's range ±``span``) and the margin point it still holds (so neither PASS nor FAIL)."""
    held = " and ".join(f"{e:+g}" for e in edges if low <= e <= high) or " and ".join(f"{e:+g}" for e in edges)
    lo, hi = shown(low, edges[0]), shown(high, edges[-1])
    out = [f"Δ < {lo}"] * (beyond(low, -span) > 0) + [f"Δ > {hi}"] * (beyond(high, span) < 0)
    return (f"{what} cannot be shown within {n_cap} units: the interval [{lo}, {hi}] excludes {' and '.join(out) or 'nothing'}, "
            f"but still holds {held} (not shown worse either)")


def simulate(population: np.ndarray, strata: np.ndarray, weights: dict[int, float], kind: str, margin: float,
             n_cap: int, batch: int, min_samples: int, seed: int, level: float = 0.95, stop: bool = True) -> dict[str, Any]:  # fmt: skip
    """One monitored run over a population of paired differences (``population[i]`` in
    [−1, 1], stratum ``strata[i]``): draw in :func:`stratified_order`, look after every
    ``batch`` draws, stop at the first decision (``stop``; else look to the end, for
    coverage) or at ``n_cap``. Returns ``{"verdict", "n",
    "covered"}`` — ``covered``: the true Δ inside the interval at every look."""
    keys = sorted(set(strata.tolist()))
    sizes = [int((strata == k).sum()) for k in keys]
    w = [weights[k] for k in keys]
    truth = sum(weights[k] * float(population[strata == k].mean()) for k in keys)
    cs = ConfidenceSequence(sizes, w, level)
    index = {k: i for i, k in enumerate(keys)}
    order = stratified_order(strata.tolist(), weights, seed)
    covered, verdict = True, "CONTINUE"
    for t, i in enumerate(order[:n_cap], start=1):
        cs.add(index[int(strata[i])], float(population[i]))
        if t % batch and t != min(n_cap, len(order)):
            continue
        look = cs.interval()
        covered = covered and look.low - 1e-12 <= truth <= look.high + 1e-12
        if verdict != "CONTINUE":
            continue  # decided already (stop=False): coverage only
        verdict, _ = decide(look, kind, margin, n_cap, min_samples, len(order), float(np.abs(cs.w).sum()))
        if verdict != "CONTINUE" and stop:
            return {"verdict": verdict, "n": t, "covered": covered}
    return {"verdict": "INCONCLUSIVE" if verdict == "CONTINUE" else verdict, "n": min(n_cap, len(order)), "covered": covered}
