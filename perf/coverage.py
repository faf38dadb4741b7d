"""Coverage of evalkit's intervals and size of its paired tests, simulated (issues 22, 37, 44).

    .venv/bin/python perf/coverage.py [--grid-reps 2000] [--sims 1000] [--resamples 1000] [--seed 2026]
    .venv/bin/python perf/coverage.py --only-grid [--grid-only TEXT]     # the grid alone

**The grid** (issue 44; :func:`grid_cells`): the paired gate in every regime — the issue's
cells (40 strata × 3 units at Δ = −0.2, 10 × 3 with the candidate winning 90 %, rare large
losses at n = 12 and 30, 2,000 identical units in 5 strata), cells derived from them
(strata of 1–1,000 units, weights 0.01–0.5, 0/1 and graded differences, one-sided, lopsided,
heavy and zero discordance, rare large losses and gains, clusters of 1–8 rows) and cells
derived from the docs alone (an ACEBench-like headline, ``run.limit`` over many categories,
KE-like F1, repeats). Each cell draws per-unit paired differences ``--grid-reps`` times and
reads them the way :func:`evalkit.stats.paired` does — Tango's interval for one stratum of
0/1 differences, else the score interval (:func:`evalkit.stats.score_bounds`, every
simulated comparison at once) — and the way it did before issue 44 (Tango; the paired t;
the stratified paired Wald below 30 units a stratum; the paired bootstrap t, as its limit),
in the same run: the false PASS of ``noninferior:margin`` at Δ = −margin (target ≤ 2.5 %),
the coverage of the 95 % interval (≥ 93 %) and its mean width (at n ≥ 200 on balanced
cells within 15 % of today's).

The other tables come from the public statistics functions (:func:`evalkit.stats.intervals`,
:func:`evalkit.stats.paired`, :func:`evalkit.stats.adjust`) on plans built as the
benchmarks build them, with data drawn from a known truth at a fixed seed:

* **coverage** at a nominal 95 %: the share of simulated runs whose interval holds the true
  value, the share of zero-width intervals, and the methods the regimes chose;
* **paired-test size**: under no true difference, how often the paired test rejects at
  5 % and how often the Δ interval excludes 0 (the two must agree), and for a 7-point sweep
  how often at least one of its 6 comparisons is "significant", unadjusted and after Holm
  and Benjamini–Hochberg;
* **the paired 0/1 gate at its margin** (issue 37, item 0): for true Δ = −margin and each
  discordance pattern (one-sided, 5:1, 2:1, heavy), the probability that
  ``noninferior:margin`` PASSes and that the 95 % Δ interval covers, computed *exactly* by
  enumerating every outcome of n pairs (n = 22 takes the exact unconditional path, n ≥ 50
  Tango's); and the same through ``paired`` + ``gate``, simulated.

It prints the tables (``--json``: the figures); ``--gate-n`` picks the exact gate rows.
``tests/test_statistics.py`` runs it reduced (a few simulations, the grid at a few
comparisons a cell).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from typing import Any, Callable

import numpy as np

from evalkit.benchmarks.ke.metrics import SCORE_NAMES
from evalkit.benchmarks.ke.metrics import stat_plan as ke_plan
from evalkit.benchmarks.sobhard.metrics import BALANCE_FLOOR
from evalkit.benchmarks.sobhard.metrics import stat_plan as sobhard_plan
from evalkit.stats import (BINARY, SMALL_PAIRED, TANGO_CC, BoundedMeans, Column, StatPlan, _outcomes, adjust, bounded_means, exact_tail,
                           gate, gate_reading, intervals, paired, paired_binary, score_bounds, tango_z)  # fmt: skip

LEVEL = 0.95


# ---- plans as the benchmarks build them ---------------------------------------------------
def rate_plan(v: np.ndarray) -> StatPlan:
    """A plain 0/1 rate over ``len(v)`` samples in one category."""
    n = len(v)
    return StatPlan([str(i) for i in range(n)], np.zeros(n, dtype=int), {"rate": Column(v[None, :].astype(float), np.ones((1, n), bool), BINARY)})


def ke_like(scores: np.ndarray, strata: int) -> StatPlan:
    """KE's plan: items with graded scores (every score name the same value), by difficulty."""
    rows = [(f"i{i}", f"d{i % strata}", {k: float(s) for k in SCORE_NAMES}) for i, s in enumerate(scores)]
    return ke_plan([rows])


def sobhard_like(passes: np.ndarray, cells: np.ndarray) -> StatPlan:
    """SOBHard's plan: questions with 0/1 ``sample_pass``, one family × difficulty cell each."""
    records, categories = [], {}
    for i, (p, c) in enumerate(zip(passes, cells)):
        sid = f"q{i:05d}"
        records.append({"sample_id": sid, "scores": {"sample_pass": float(p)}})
        categories[sid] = {"family": f"f{c:02d}", "difficulty": "d"}
    return sobhard_plan([], [records], categories)


class SobhardCells:
    """SOBHard's plan for ``balance_score`` alone, built by ``stat_plan`` once per layout of
    cells; each simulated run gets the same plan with new ``sample_pass`` values in its cell
    columns (the only columns ``balance_score`` depends on): what ``stat_plan`` would build,
    checked on the first run, at a fraction of its cost."""

    def __init__(self, cells: np.ndarray) -> None:
        self.cells = cells
        self.template: StatPlan | None = None
        self.checked = False

    def __call__(self, passes: np.ndarray) -> StatPlan:
        if self.template is None:
            self.template = sobhard_like(passes, self.cells)
            self.names = self.template.dependencies()["balance_score"]
            return self.template
        t = self.template
        cols = {n: Column(passes[None, :].astype(float), t.columns[n].mask, t.columns[n].kind) for n in self.names}
        plan = StatPlan(t.units, t.strata, cols, t.derive, t.kinds, {}, t.unit_label, t.stratum_label)
        if not self.checked:
            assert plan.point()["balance_score"] == sobhard_like(passes, self.cells).point()["balance_score"]
            self.checked = True
        return plan


def category_mean_plan(v: np.ndarray, strata: np.ndarray) -> StatPlan:
    """An ACEBench-like group: the unweighted mean of its categories' 0/1 rates."""
    n, cats = len(v), sorted(set(strata.tolist()))
    cols = {f"acc/{c}": Column(v[None, :].astype(float), (strata == c)[None, :], BINARY) for c in cats}

    def derive(base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"group": np.mean([base[f"acc/{c}"] for c in cats], axis=0)}

    return StatPlan([str(i) for i in range(n)], strata, cols, derive)


def weighted_plan(v: np.ndarray, strata: np.ndarray, weights: np.ndarray) -> StatPlan:
    """An ACEBench-like headline: Σ weight·(stratum's 0/1 rate) over its strata."""
    n, cats = len(v), sorted(set(strata.tolist()))
    cols = {f"acc/{c}": Column(v[None, :].astype(float), (strata == c)[None, :], BINARY) for c in cats}

    def derive(base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"headline": sum(w * base[f"acc/{c}"] for w, c in zip(weights, cats))}

    return StatPlan([str(i) for i in range(n)], strata, cols, derive)


def balance_truth(rates: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(np.maximum(rates, BALANCE_FLOOR)))))


def graded(rng: np.random.Generator, n: int) -> np.ndarray:
    """KE-like per-item scores: 30 % at 1, 20 % at 0, the rest uniform (mean 0.55)."""
    u = rng.random(n)
    return np.where(u < 0.3, 1.0, np.where(u < 0.5, 0.0, rng.random(n)))


# ---- coverage -----------------------------------------------------------------------------
def coverage(name: str, truth: float, metric: str, draw: Callable[[np.random.Generator], StatPlan],
             sims: int, resamples: int, seed: int) -> dict[str, Any]:  # fmt: skip
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    covered = zero = none = 0
    methods: Counter[str] = Counter()
    for i in range(sims):
        ci = intervals(draw(rng), LEVEL, resamples, seed + i, [metric]).get(metric)
        if ci is None:
            none += 1
            continue
        methods[ci["method"].split(":")[0]] += 1
        covered += ci["low"] <= truth <= ci["high"]
        zero += ci["high"] <= ci["low"]
    est = sims - none
    return {"scenario": name, "truth": truth, "sims": sims, "seconds": round(time.perf_counter() - t0, 2), "coverage": covered / est if est else None,
            "zero_width": zero / est if est else None, "not_estimable": none / sims, "methods": dict(methods)}  # fmt: skip


def coverage_table(sims: int, boot_sims: int, resamples: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for n, p in ((100, 0.99), (50, 0.02), (20, 0.9), (200, 0.3)):
        rows.append(coverage(f"0/1 rate, n = {n}, p = {p}", p, "rate", lambda r, n=n, p=p: rate_plan(r.random(n) < p), sims, resamples, seed))
    rows.append(coverage("KE-like, 12 items in 3 strata (f1_macro)", 0.55, "f1_macro",
                         lambda r: ke_like(graded(r, 12), 3), sims, resamples, seed))  # fmt: skip
    rates = np.linspace(0.25, 0.9, 33)
    cells = np.repeat(np.arange(33), 25)
    plan25 = SobhardCells(cells)
    rows.append(coverage("SOBHard balance_score, 33 cells × 25 questions", balance_truth(rates), "balance_score",
                         lambda r: plan25(r.random(cells.size) < rates[cells]), boot_sims, resamples, seed))  # fmt: skip
    low = np.concatenate([np.full(5, 0.02), np.linspace(0.3, 0.9, 28)])
    plan_low = SobhardCells(cells)
    rows.append(coverage("SOBHard balance_score, 5 of 33 cells near 0", balance_truth(low), "balance_score",
                         lambda r: plan_low(r.random(cells.size) < low[cells]), boot_sims, resamples, seed))  # fmt: skip
    cells15 = np.repeat(np.arange(33), 15)
    plan15 = SobhardCells(cells15)
    rows.append(coverage("SOBHard balance_score, 33 cells × 15 questions (the estimable minimum)", balance_truth(rates), "balance_score",
                         lambda r: plan15(r.random(cells15.size) < rates[cells15]), boot_sims, resamples, seed))  # fmt: skip
    sizes, weights = [3, 10, 40, 200, 600], np.array([0.15, 0.2, 0.2, 0.2, 0.25])
    strata = np.repeat(np.arange(5), sizes)
    for truth_rates in (np.array([0.9, 0.7, 0.5, 0.8, 0.65]), np.array([0.97, 0.95, 0.9, 0.9, 0.9])):
        rows.append(coverage(f"weighted headline, strata of {'/'.join(map(str, sizes))} units (weights {'/'.join(f'{w:g}' for w in weights)}), "
                             f"rates {'/'.join(f'{p:g}' for p in truth_rates)}", float(weights @ truth_rates), "headline",
                             lambda r, t=truth_rates: weighted_plan(r.random(strata.size) < t[strata], strata, weights),
                             boot_sims, resamples, seed))  # fmt: skip
    plan1 = SobhardCells(np.arange(33))
    rows.append(coverage("SOBHard balance_score, 1 question per cell", balance_truth(rates), "balance_score",
                         lambda r: plan1(r.random(33) < rates), sims, resamples, seed))  # fmt: skip
    return rows


# ---- paired-test size under no difference -------------------------------------------------
def size(name: str, metric: str, draw: Callable[[np.random.Generator], tuple[StatPlan, StatPlan]],
         sims: int, resamples: int, seed: int) -> dict[str, Any]:  # fmt: skip
    rng = np.random.default_rng(seed)
    rejected = excludes = disagree = done = 0
    tests: Counter[str] = Counter()
    for i in range(sims):
        a, b = draw(rng)
        m = paired(a, b, LEVEL, resamples, seed + i).get(metric)
        if m is None or m.get("p") is None:
            continue
        done += 1
        tests[m["test"]] += 1
        rej, exc = m["p"] < 1 - LEVEL, not (m["low"] <= 0 <= m["high"])
        rejected += rej
        excludes += exc
        disagree += rej != exc
    return {"scenario": name, "sims": done, "rejects": rejected / done if done else None,
            "interval_excludes_0": excludes / done if done else None, "disagree": disagree, "tests": dict(tests)}  # fmt: skip


def sweep_size(sims: int, seed: int, n: int = 200, points: int = 7) -> dict[str, Any]:
    """A sweep of ``points`` runs of one 0/1 rate (p = 0.6, runs independent given the
    samples' difficulty), each compared with the first: how often ≥ 1 comparison is
    significant at 5 %, unadjusted, Holm and BH."""
    rng = np.random.default_rng(seed)
    raw = holm = bh = 0
    for _ in range(sims):
        difficulty = rng.random(n)
        runs = [rate_plan(rng.random(n) < 0.3 + 0.6 * difficulty) for _ in range(points)]
        ps = {str(j): paired(runs[0], runs[j], LEVEL, 0, 0)["rate"]["p"] for j in range(1, points)}
        adj = adjust(ps)
        raw += any(p < 0.05 for p in ps.values())
        holm += any(a["holm"] < 0.05 for a in adj.values())
        bh += any(a["bh"] < 0.05 for a in adj.values())
    return {"scenario": f"{points}-point sweep, n = {n}, no true difference", "sims": sims,
            "any_significant": raw / sims, "holm": holm / sims, "bh": bh / sims}  # fmt: skip


def size_table(sims: int, resamples: int, seed: int) -> list[dict[str, Any]]:
    def same_binary(r: np.random.Generator, n: int) -> tuple[StatPlan, StatPlan]:
        d = r.random(n)
        return rate_plan(r.random(n) < d), rate_plan(r.random(n) < d)

    def same_ke(r: np.random.Generator) -> tuple[StatPlan, StatPlan]:
        base = graded(r, 12)
        noise = lambda: np.clip(base + r.normal(0, 0.2, 12), 0, 1)  # noqa: E731 - the same item, a new answer
        return ke_like(noise(), 3), ke_like(noise(), 3)

    strata = np.repeat(np.arange(8), 5)

    def same_groups(r: np.random.Generator) -> tuple[StatPlan, StatPlan]:
        d = r.random(40)
        return category_mean_plan(r.random(40) < d, strata), category_mean_plan(r.random(40) < d, strata)

    return [
        size("0/1 rate, n = 100 (Tango score)", "rate", lambda r: same_binary(r, 100), sims, resamples, seed),
        size("KE-like precision_macro, 12 items in 3 strata", "precision_macro", same_ke, sims, resamples, seed),
        size("group of 8 categories × 5 units (derived)", "group", same_groups, sims, resamples, seed),
    ]


# ---- the paired 0/1 gate at its margin (issue 37, item 0) --------------------------------
#: discordance patterns at a true Δ = B − A of −margin: (name, P(A right only), P(B right only))
PATTERNS = (("one-sided (B only loses)", 1.0, 0.0), ("5:1", 1.25, 0.25), ("2:1", 2.0, 1.0), ("heavy (20 % + margin : 20 %)", None, None))
#: (n paired units, margin) of each gate row
GATE_ROWS = ((22, 0.15), (50, 0.10), (200, 0.05), (1000, 0.02))


def _cells(pattern: tuple[str, float | None, float | None], margin: float) -> tuple[float, float]:
    _, fa, fb = pattern
    return (0.2 + margin, 0.2) if fa is None else (fa * margin, fb * margin)  # type: ignore[operator]


def gate_at_margin(n: int, margin: float, q_a: float, q_b: float) -> dict[str, Any]:
    """Exact (by enumerating every outcome, no simulation) false-PASS probability of
    ``noninferior:margin`` and of ``equivalent:margin`` when the true Δ is −margin, and the
    coverage of the two-sided 95 % Δ interval, for the test :func:`evalkit.stats.paired_binary`
    chooses at this n. PASS ⟺ the one-sided test at Δ0 = −margin rejects at 2.5 % (the
    interval's lower bound is the Δ0 where it stops rejecting)."""
    a, b, logc = _outcomes(n)
    from scipy.special import xlogy

    prob = np.exp(logc + xlogy(a, q_a) + xlogy(b, q_b) + xlogy(n - a - b, 1 - q_a - q_b))
    alpha = (1 - LEVEL) / 2
    truth = q_b - q_a
    if n >= SMALL_PAIRED:
        from scipy.stats import norm

        zc = norm.ppf(1 - alpha)
        passes = tango_z(a, b, n, -margin, TANGO_CC) > zc
        covered = np.abs(tango_z(a, b, n, truth, TANGO_CC)) <= zc
    else:
        live = prob > 1e-12
        passes = np.zeros(a.size, bool)
        covered = np.ones(a.size, bool)
        for i in np.flatnonzero(live):
            ai, bi = int(a[i]), int(b[i])
            if (bi - ai) / n > -margin:
                passes[i] = exact_tail(ai, bi, n, -margin, True) <= alpha
            covered[i] = exact_tail(ai, bi, n, truth, True) > alpha and exact_tail(ai, bi, n, truth, False) > alpha
    return {"n": n, "margin": margin, "q_a": q_a, "q_b": q_b, "false_pass": float(prob[passes].sum()),
            "coverage": float(prob[covered].sum()), "method": "Tango score" if n >= SMALL_PAIRED else "exact unconditional"}  # fmt: skip


def gate_table(rows: tuple[tuple[int, float], ...] = GATE_ROWS) -> list[dict[str, Any]]:
    out = []
    for n, margin in rows:
        for pattern in PATTERNS:
            q_a, q_b = _cells(pattern, margin)
            out.append({"scenario": f"n = {n}, noninferior:{margin:g}, {pattern[0]}", **gate_at_margin(n, margin, q_a, q_b)})
    return out


def gate_simulated(n: int, margin: float, q_a: float, q_b: float, sims: int, seed: int) -> dict[str, Any]:
    """The same false PASS through the code path a ``compare --gate`` takes (``paired`` on
    two plans, then ``gate``), simulated: it must agree with :func:`gate_at_margin`."""
    rng = np.random.default_rng(seed)
    passes = covered = 0
    for _ in range(sims):
        u = rng.random(n)
        a = np.where(u < q_a, 1.0, np.where(u < q_a + q_b, 0.0, (rng.random(n) < 0.5).astype(float)))
        b = np.where(u < q_a, 0.0, np.where(u < q_a + q_b, 1.0, a))
        m = paired(rate_plan(a), rate_plan(b), LEVEL, 0, 0)["rate"]
        passes += gate(m, "noninferior", margin, LEVEL, "rate")["verdict"] == "PASS"
        covered += m["low"] <= q_b - q_a <= m["high"]
    return {"n": n, "margin": margin, "sims": sims, "false_pass": passes / sims, "coverage": covered / sims}


# ---- the grid: every regime of the paired gate (issue 44) ---------------------------------
class Cell:
    """One cell of the grid: strata of ``sizes`` units with headline ``weights`` (Δ = Σ w·μ),
    per-unit paired differences drawn by ``draw(rng, reps, size, stratum)`` → ``(reps, size)``
    in [−1, 1]; the true Δ ``truth`` (None: from a million draws); ``margin``: the gate
    ``noninferior:margin`` whose false PASS is counted (the cell sits at Δ = −margin), or
    None (coverage only); ``kind``: "0/1" or "graded"; ``width``: a balanced cell of ≥ 200
    units, where the width is held against today's; ``source``: the issue, derived, or
    derived from the docs alone."""

    def __init__(self, name: str, sizes: list[int], weights: list[float], draw: Callable[..., np.ndarray], truth: float | None,
                 margin: float | None, kind: str, width: bool = False, source: str = "derived") -> None:  # fmt: skip
        self.name, self.sizes, self.weights, self.draw, self.truth = name, sizes, weights, draw, truth
        self.margin, self.kind, self.width, self.source = margin, kind, width, source


def discrete(levels: list[float], probs: list[float] | Callable[[int], list[float]]) -> Callable[..., np.ndarray]:
    """Units whose difference is one of ``levels`` with ``probs`` (a list, or per stratum)."""
    lv = np.asarray(levels, dtype=float)

    def draw(rng: np.random.Generator, reps: int, size: int, k: int) -> np.ndarray:
        p = probs(k) if callable(probs) else probs
        return lv[rng.choice(lv.size, size=(reps, size), p=np.asarray(p) / np.sum(p))]

    return draw


def clustered(rows: int, types: list[tuple[float, float, float]]) -> Callable[..., np.ndarray]:
    """Units of ``rows`` rows each (a dialogue's turns, a sample's epochs): a unit's type —
    ``(share, P(A right only), P(B right only))`` per row — is drawn once, its rows then
    independently; the unit's difference is the mean of its rows' (in steps of 1/rows)."""
    share = np.array([t[0] for t in types])
    qa, qb = np.array([t[1] for t in types]), np.array([t[2] for t in types])

    def draw(rng: np.random.Generator, reps: int, size: int, k: int) -> np.ndarray:
        kind = rng.choice(len(types), size=(reps, size), p=share / share.sum())
        u = rng.random((reps, size, rows))
        d = np.where(u < qb[kind][..., None], 1.0, np.where(u < (qa + qb)[kind][..., None], -1.0, 0.0))
        return d.mean(axis=-1)

    return draw


def cluster_truth(types: list[tuple[float, float, float]]) -> float:
    share = np.array([t[0] for t in types])
    return float(share @ np.array([t[2] - t[1] for t in types]) / share.sum())


def _zero_one(q_a: float, q_b: float) -> Callable[..., np.ndarray]:
    draw = discrete([-1.0, 0.0, 1.0], [q_a, 1 - q_a - q_b, q_b])
    draw.q = (q_a, q_b)  # type: ignore[attr-defined]  # one stratum of these: Tango's figures computed exactly too
    return draw


#: rare large losses (the issue's): small gains +0.01…+0.03 (mean +0.02) 90 %, −0.68 10 %: Δ = −0.05;
#: rare large gains, its mirror: −0.14…−0.12 90 %, +0.67 10 %: Δ = −0.05
RARE_LOSS = discrete([round(0.01 + 0.001 * i, 3) for i in range(21)] + [-0.68], [0.9 / 21] * 21 + [0.1])
RARE_GAIN = discrete([round(-0.14 + 0.001 * i, 3) for i in range(21)] + [0.67], [0.9 / 21] * 21 + [0.1])

#: ACEBench-like layout (derived from the README's description only): 17 categories of 5–200
#: units in 3 groups, the headline 0.578·NORMAL + 0.2676·SPECIAL + 0.1545·AGENT of group means
ACE_SIZES = [200, 120, 80, 60, 40, 30, 20, 12, 8, 100, 60, 40, 20, 10, 6, 5, 5]
ACE_GROUPS = [0] * 9 + [1] * 5 + [2] * 3
ACE_WEIGHTS = [(0.578, 0.2676, 0.1545)[g] / ACE_GROUPS.count(g) for g in ACE_GROUPS]


def grid_cells() -> list[Cell]:
    """Every cell: the issue's, the derived ones (strata of 1–1,000 units, weights 0.01–0.5,
    0/1 and graded, one-sided, lopsided and zero discordance, rare large losses and gains,
    clusters of 1–8 rows) and a few derived from the docs alone."""
    cells = [
        Cell("issue: 40 strata × 3 units, Δ = −0.2, one-sided", [3] * 40, [1 / 40] * 40, _zero_one(0.2, 0.0), -0.2, 0.2, "0/1", source="issue"),
        Cell("issue: 10 × 3 units, candidate winning 90 %", [3] * 10, [0.1] * 10, _zero_one(0.0, 0.9), 0.9, None, "0/1", source="issue"),
        Cell("issue: rare large losses, n = 12 (+0.01…+0.03 90 %, −0.68 10 %)", [12], [1.0], RARE_LOSS, -0.05, 0.05, "graded", source="issue"),
        Cell("issue: rare large losses, n = 30", [30], [1.0], RARE_LOSS, -0.05, 0.05, "graded", source="issue"),
        Cell("issue: 2,000 units in 5 strata, no discordance (Δ = 0)", [400] * 5, [0.2] * 5, _zero_one(0.0, 0.0), 0.0, None, "0/1", source="issue"),
    ]
    for n in (100, 300, 1000):
        cells.append(Cell(f"rare large losses, n = {n}", [n], [1.0], RARE_LOSS, -0.05, 0.05, "graded"))
    for n in (12, 30, 100, 300):
        cells.append(Cell(f"rare large gains, n = {n} (−0.14…−0.12 90 %, +0.67 10 %)", [n], [1.0], RARE_GAIN, -0.05, 0.05, "graded"))
    for n in (50, 200, 1000):
        cells.append(Cell(f"very rare gains of +1, n = {n} (−0.07 98 %, +1 2 %)", [n], [1.0], discrete([-0.07, 1.0], [0.98, 0.02]), -0.0486, 0.0486, "graded"))
    for k, n, q_a, q_b, label in ((40, 3, 0.45, 0.25, "heavy"), (40, 3, 0.25, 0.05, "5:1"), (100, 1, 0.2, 0.0, "one-sided"),
                                  (30, 2, 0.2, 0.0, "one-sided"), (10, 10, 0.2, 0.0, "one-sided"), (10, 30, 0.3, 0.1, "2:1")):  # fmt: skip
        cells.append(Cell(f"{k} strata × {n} units, 0/1 {label}, Δ = −{q_a - q_b:g}", [n] * k, [1 / k] * k, _zero_one(q_a, q_b), q_b - q_a,
                          q_a - q_b, "0/1"))  # fmt: skip
    rates = lambda k: [0.05 + 0.1 * (k % 4), 0.95 - 0.1 * (k % 4), 0.0]  # noqa: E731 - strata that differ
    cells.append(Cell("40 strata × 3 units, one-sided, rates 0.05–0.35 by stratum", [3] * 40, [1 / 40] * 40,
                      discrete([-1.0, 0.0, 1.0], rates), -float(np.mean([rates(k)[0] for k in range(40)])),
                      float(np.mean([rates(k)[0] for k in range(40)])), "0/1"))  # fmt: skip
    w5, s5 = [0.5, 0.3, 0.1, 0.09, 0.01], [3, 10, 40, 200, 1000]
    cells.append(Cell("weights 0.5–0.01 on strata of 3–1,000 units, 0/1 one-sided", s5, w5, _zero_one(0.1, 0.0), -0.1, 0.1, "0/1"))
    cells.append(Cell("weights 0.01–0.5 on strata of 3–1,000 units, 0/1 2:1", s5, w5[::-1], _zero_one(0.1, 0.05), -0.05, 0.05, "0/1"))
    cells.append(Cell("weights 0.15/0.2/0.2/0.2/0.25 on 3/10/40/200/600 units, 0/1 heavy", [3, 10, 40, 200, 600], [0.15, 0.2, 0.2, 0.2, 0.25],
                      _zero_one(0.25, 0.2), -0.05, 0.05, "0/1"))  # fmt: skip
    cells.append(Cell("2 strata: 1 unit (weight 0.3) + 200, 0/1 5:1", [1, 200], [0.3, 0.7], _zero_one(0.125, 0.025), -0.1, 0.1, "0/1"))
    for rows in (1, 2, 4, 8):
        types = [(0.5, 0.05, 0.05), (0.3, 0.3, 0.1), (0.2, 0.1, 0.3)]
        truth = cluster_truth(types)
        cells.append(Cell(f"clusters of {rows} rows, 10 strata × 20 units", [20] * 10, [0.1] * 10, clustered(rows, types), truth, -truth, "graded"))
    one_sided = [(1.0, 0.1, 0.0)]
    cells.append(Cell("clusters of 8 rows, one-sided, 5 strata × 6 units", [6] * 5, [0.2] * 5, clustered(8, one_sided), -0.1, 0.1, "graded"))
    # balanced cells of ≥ 200 units: the width against today's
    cells += [
        Cell("balanced: 4 × 50 units, 0/1, 20 % discordance 2:1", [50] * 4, [0.25] * 4, _zero_one(0.1333, 0.0667), -0.0667, 0.0667, "0/1", width=True),
        Cell("balanced: 4 × 250 units, 0/1, 5 % discordance 5:2", [250] * 4, [0.25] * 4, _zero_one(0.0357, 0.0143), -0.0214, 0.0214, "0/1", width=True),
        Cell("balanced: 4 × 250 units, 0/1, 40 % discordance", [250] * 4, [0.25] * 4, _zero_one(0.225, 0.175), -0.05, 0.05, "0/1", width=True),
        Cell("balanced: 8 × 125 units, graded (clusters of 4 rows)", [125] * 8, [0.125] * 8, clustered(4, [(0.5, 0.05, 0.05), (0.5, 0.2, 0.1)]),
             -0.05, 0.05, "graded", width=True),  # fmt: skip
        Cell("balanced: 500 units, graded (scores in steps of 0.05)", [500], [1.0], discrete(list(np.round(np.linspace(-1, 1, 41), 2)),
             list(np.exp(-((np.linspace(-1, 1, 41) + 0.05) / 0.3) ** 2))), None, None, "graded", width=True),  # fmt: skip
        Cell("balanced: 1 stratum of 1,000 units, 0/1 2:1", [1000], [1.0], _zero_one(0.04, 0.02), -0.02, 0.02, "0/1", width=True),
    ]
    # derived from the docs alone (the README and docs/performance.md, not the code)
    cells += [
        Cell("docs: ACEBench-like headline (17 categories of 5–200 units, group weights), 0/1 2:1", ACE_SIZES, ACE_WEIGHTS,
             _zero_one(0.1, 0.05), -0.05, 0.05, "0/1", source="docs"),  # fmt: skip
        Cell("docs: run.limit=50 over 17 categories (2–3 units each), one-sided", [3] * 16 + [2], [1 / 17] * 17, _zero_one(0.15, 0.0), -0.15,
             0.15, "0/1", source="docs"),  # fmt: skip
        Cell("docs: KE-like F1 (3 difficulties × 4 items, graded)", [4] * 3, [1 / 3] * 3, discrete([-0.5, -0.2, 0.0, 0.1, 0.3], [0.15, 0.2, 0.4, 0.15, 0.1]),
             None, None, "graded", source="docs"),  # fmt: skip
        Cell("docs: SOBHard-like, 22 questions, 3 broken (one-sided)", [22], [1.0], _zero_one(0.15, 0.0), -0.15, 0.15, "0/1", source="docs"),
        Cell("docs: repeats=3 averaged (clusters of 3), 200 units, lopsided", [200], [1.0], clustered(3, [(0.7, 0.02, 0.0), (0.3, 0.2, 0.05)]),
             cluster_truth([(0.7, 0.02, 0.0), (0.3, 0.2, 0.05)]), -cluster_truth([(0.7, 0.02, 0.0), (0.3, 0.2, 0.05)]), "graded", source="docs"),  # fmt: skip
    ]
    for c in cells:
        if c.truth is None:
            c.truth = _truth(c)
    return cells


def _truth(cell: Cell) -> float:
    """A cell's Δ from a million draws per stratum (cells whose Δ has no closed form here)."""
    rng = np.random.default_rng(0)
    return float(sum(w * cell.draw(rng, 1, 1_000_000, k).mean() for k, w in enumerate(cell.weights)))


def _today(values: list[np.ndarray], weights: list[float], zero_one: bool, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Today's interval (before issue 44), ``(reps,)`` each: Tango's for one stratum of 0/1
    differences, the paired t for one graded stratum, the stratified paired Wald (½ per 2×2
    cell of a 0/1 stratum, z) when a stratum has fewer than 30 units, else the paired
    bootstrap t — here its limit as the resamples grow (the plug-in stratified standard
    error × √(n/(n − K)), t with n − K df)."""
    from scipy import stats as sps

    reps = values[0].shape[0]
    n = sum(v.shape[1] for v in values)
    k = len(values)
    if k == 1 and zero_one:
        out = [paired_binary(int((v == -1).sum()), int((v == 1).sum()), v.size, level) for v in values[0]]
        return np.array([o["low"] for o in out]), np.array([o["high"] for o in out])
    est = sum(w * v.mean(axis=1) for v, w in zip(values, weights))
    if k == 1:  # the paired t: no interval where the differences do not vary (se = 0 → p = 1)
        se = values[0].std(axis=1, ddof=1) / math.sqrt(n)
        se = np.where(se > 1e-9, se, np.nan)
        q = sps.t.ppf((1 + level) / 2, max(n - 1, 1))
    elif min(v.shape[1] for v in values) < 30:
        centre, var = np.zeros(reps), np.zeros(reps)
        for v, w in zip(values, weights):
            nk = v.shape[1]
            if zero_one:
                qa, qb = ((v == -1).sum(1) + 0.5) / (nk + 2), ((v == 1).sum(1) + 0.5) / (nk + 2)
                centre += w * (qb - qa)
                var += w * w * (qa + qb - (qb - qa) ** 2) / (nk + 2)
            else:
                centre += w * v.mean(1)
                var += w * w * (v.var(axis=1, ddof=1) if nk > 1 else 0.0) / nk
        q = sps.norm.ppf((1 + level) / 2)
        return centre - q * np.sqrt(var), centre + q * np.sqrt(var)
    else:
        se = np.sqrt(sum(w * w * v.var(axis=1) / v.shape[1] for v, w in zip(values, weights)) * n / (n - k))
        q = sps.t.ppf((1 + level) / 2, n - k)
    return np.maximum(est - q * se, -1.0), np.minimum(est + q * se, 1.0)


def batch(values: list[np.ndarray], weights: list[float]) -> BoundedMeans:
    """:func:`evalkit.stats.bounded_means` of every simulated comparison (``values``: per
    stratum ``(reps, size)``) at once, built with numpy from each stratum's few distinct
    values; a cell with a stratum of
    one unit goes through ``bounded_means`` itself (its pooling). The first 3 comparisons
    are checked against ``bounded_means``."""
    reps = values[0].shape[0]
    problems = lambda rows: [([v[r] for v in values], weights, (-1.0, 1.0)) for r in rows]  # noqa: E731
    if min(v.shape[1] for v in values) < 2:
        return bounded_means(problems(range(reps)))[0]
    levels = [np.unique(v) for v in values]
    width = max(lv.size for lv in levels)
    x = np.zeros((reps, len(values), width))
    n = np.zeros_like(x)
    for k, (v, lv) in enumerate(zip(values, levels)):
        x[:, k, : lv.size] = lv
        n[:, k, : lv.size] = (v[:, :, None] == lv[None, None, :]).sum(axis=1)
    sizes = np.array([v.shape[1] for v in values], dtype=float)
    w = np.asarray(weights, dtype=float)
    gaps = np.where(n > 0, x, np.nan)
    gaps = np.nan_to_num(np.nanmax(np.diff(np.sort(gaps, axis=-1), axis=-1), axis=-1, initial=0.0)) if width > 1 else np.zeros((reps, len(values)))
    cc = 0.5 * (gaps * np.abs(w / sizes)).max(axis=-1)
    data = BoundedMeans(x, n, np.tile(w, (reps, 1)), (x * n).sum(-1) / sizes, np.tile(w**2 / sizes, (reps, 1)),
                        np.tile(w**3 / sizes**2, (reps, 1)), cc, np.full((reps, 1), -1.0), np.full((reps, 1), 1.0))  # fmt: skip
    ref = bounded_means(problems(range(min(3, reps))))[0]
    for r in range(ref.w.shape[0]):
        got = [data.x[r][data.n[r] > 0], data.n[r][data.n[r] > 0], data.w[r], data.m[r], data.c2[r], data.c3[r], data.cc[r]]
        want = [ref.x[r][ref.n[r] > 0], ref.n[r][ref.n[r] > 0], ref.w[r], ref.m[r], ref.c2[r], ref.c3[r], ref.cc[r]]
        assert all(np.allclose(g, h, rtol=1e-12, atol=1e-15) for g, h in zip(got, want)), "batch() differs from bounded_means()"
    return data


def grid_cell(cell: Cell, reps: int, seed: int, level: float = LEVEL) -> dict[str, Any]:
    """The cell's false PASS (``noninferior:margin`` at Δ = −margin, read by :func:`gate`'s
    :func:`evalkit.stats.gate_reading`), coverage and mean width for the method ``paired``
    takes (Tango for one stratum of 0/1 differences, else the score interval, all reps at
    once) and for today's, from ``reps`` simulated comparisons."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    values = [cell.draw(rng, reps, size, k) for k, size in enumerate(cell.sizes)]
    zero_one = all(np.all(np.isin(v, (-1.0, 0.0, 1.0))) for v in values) and cell.kind == "0/1"
    exact = None
    if len(values) == 1 and zero_one:
        low, high = _today(values, cell.weights, True, level)
        method = "Tango"
        q = getattr(cell.draw, "q", None)
        if q is not None and cell.margin is not None and cell.sizes[0] >= SMALL_PAIRED:
            exact = gate_at_margin(cell.sizes[0], cell.margin, *q)
    else:
        low, high = score_bounds(batch(values, cell.weights), level)
        method = "score"
    t_low, t_high = _today(values, cell.weights, zero_one, level)
    out: dict[str, Any] = {"cell": cell.name, "source": cell.source, "reps": reps, "truth": cell.truth, "margin": cell.margin, "method": method}
    for tag, lo, hi in (("", low, high), ("today_", t_low, t_high)):
        if cell.margin is not None:
            out[f"{tag}false_pass"] = float(np.mean([not np.isnan(a) and gate_reading("noninferior", cell.margin, a, b)[0] == "PASS"
                                                     for a, b in zip(lo, hi)]))  # fmt: skip
        out[f"{tag}coverage"] = float(np.mean((lo <= cell.truth + 1e-12) & (cell.truth - 1e-12 <= hi)))
        out[f"{tag}width"] = float(np.nanmean(hi - lo)) if np.any(~np.isnan(hi - lo)) else None
    out["width_ratio"] = out["width"] / out["today_width"] if cell.width and out["today_width"] else None
    if exact:
        out["exact_false_pass"], out["exact_coverage"] = exact["false_pass"], exact["coverage"]
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def betting_fixed_n(values: np.ndarray, level: float = LEVEL, grid: int = 2001, c: float = 0.5) -> np.ndarray:
    """Widths ``(reps,)`` of the fixed-n hedged betting interval for a bounded mean
    (Waudby-Smith & Ramdas, JRSS-B 2024, §4: capital ½K⁺ + ½K⁻ below 1/α, bets
    λ_i = √(2 log(2/α) / (n σ̂²_{i−1})) truncated at c/m and c/(1 − m)) of one stratum of
    differences ``(reps, n)`` — the candidate the issue suggested, measured for the choice."""
    alpha = 1 - level
    y = (values + 1) / 2
    reps, n = y.shape
    m = np.linspace(0, 1, grid)
    steps = np.arange(1, n + 1)
    mu = np.concatenate([np.full((reps, 1), 0.5), (0.5 + np.cumsum(y, 1)) / (steps + 1)], 1)[:, :-1]
    var = np.concatenate([np.full((reps, 1), 0.25), (0.25 + np.cumsum((y - mu) ** 2, 1)) / (steps + 1)], 1)[:, :-1]
    lam = np.sqrt(2 * math.log(2 / alpha) / (n * var))
    widths = np.empty(reps)
    with np.errstate(divide="ignore", invalid="ignore"):
        for r in range(reps):
            lp, lm = np.minimum(lam[r][:, None], c / m), np.minimum(lam[r][:, None], c / (1 - m))
            dev = y[r][:, None] - m
            log_k = np.logaddexp(np.log1p(lp * dev).sum(0), np.log1p(-lm * dev).sum(0)) - math.log(2)
            kept = m[log_k < math.log(1 / alpha)]
            widths[r] = 2 * (kept.max() - kept.min()) if kept.size else 0.0
    return widths


def betting_table(reps: int, seed: int) -> list[dict[str, Any]]:
    """Mean widths on the balanced cells of ≥ 200 units (equal weights ∝ sizes): today's, the
    score interval's and the fixed-n betting interval's (:func:`betting_fixed_n` on the
    pooled differences, in a random order) — why the score interval was chosen."""
    out = []
    for i, cell in enumerate(c for c in grid_cells() if c.width):
        rng = np.random.default_rng(seed + i)
        values = [cell.draw(rng, reps, size, k) for k, size in enumerate(cell.sizes)]
        zero_one = cell.kind == "0/1"
        t_low, t_high = _today(values, cell.weights, zero_one, LEVEL)
        low, high = score_bounds(batch(values, cell.weights), LEVEL)
        pooled = betting_fixed_n(rng.permutation(np.concatenate(values, axis=1), axis=1))  # equal weights ∝ sizes: the plain mean
        out.append({"cell": cell.name, "reps": reps, "today": float(np.mean(t_high - t_low)), "score": float(np.mean(high - low)),
                    "betting": float(np.mean(pooled))})  # fmt: skip
    return out


def grid_table(reps: int, seed: int, only: str | None = None) -> list[dict[str, Any]]:
    return [grid_cell(c, reps, seed + i) for i, c in enumerate(grid_cells()) if not only or only in c.name]


#: two-point cells whose statistic depends on the count alone, computed exactly: (name, loss or
#: gain value, its share, the other value, the margin at Δ = −margin)
TWO_POINT = (("rare large losses (+0.02 90 %, −0.68 10 %)", -0.68, 0.1, 0.02, 0.05),
             ("rare large gains (−0.13 90 %, +0.67 10 %)", 0.67, 0.1, -0.13, 0.05),
             ("very rare gains of +1 (−0.07 98 %, +1 2 %)", 1.0, 0.02, -0.07, 0.0486))  # fmt: skip


def two_point_exact(ns: tuple[int, ...] = (12, 30, 100, 300, 1000, 2000), level: float = LEVEL) -> list[dict[str, Any]]:
    """The false PASS and coverage of the score interval when every unit's difference is one
    of two values, **computed exactly**: the interval depends on the count of the rarer value
    alone, so every count 0…n is evaluated (at once) and weighed by its binomial probability."""
    from scipy.stats import binom

    out = []
    for name, rare, share, common, margin in TWO_POINT:
        for n in ns:
            counts = np.arange(n + 1)
            data, _ = bounded_means([([np.r_[np.full(k, rare), np.full(n - k, common)]], [1.0], (-1.0, 1.0)) for k in counts])
            low, high = score_bounds(data, level)
            prob = binom.pmf(counts, n, share)
            truth = rare * share + common * (1 - share)
            passes = np.array([gate_reading("noninferior", margin, a, b)[0] == "PASS" for a, b in zip(low, high)])
            out.append({"cell": name, "n": n, "false_pass": float(prob[passes].sum()),
                        "coverage": float(prob[(low <= truth + 1e-12) & (truth - 1e-12 <= high)].sum())})  # fmt: skip
    return out


def grid_markdown(grid: list[dict[str, Any]], exact: list[dict[str, Any]], betting: list[dict[str, Any]], args: argparse.Namespace,
                  took: float | None, cpu: float | None) -> str:  # fmt: skip
    """The grid (and the two-point cells computed exactly) as the markdown tables of
    docs/performance.md."""

    def pct(x: float | None, digits: int = 2) -> str:
        return "—" if x is None else f"{100 * x:.{digits}f} %"

    lines = [f"The paired gate in every regime ({args.grid_reps} simulated comparisons per cell, seed {args.seed}; "
             f"false PASS of noninferior:margin at Δ = −margin, coverage of the 95 % interval; today = before issue 44)", "",
             "| cell | from | method | false PASS | coverage | width | today: false PASS | today: coverage | today: width | width ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in grid:
        ratio = f"{r['width_ratio']:.3f}" if r["width_ratio"] else "—"
        method = r["method"] + (f" (exact: {pct(r['exact_false_pass'])}, {pct(r['exact_coverage'], 1)})" if "exact_false_pass" in r else "")
        tw = f"{r['today_width']:.4f}" if r["today_width"] is not None else "—"
        lines.append(f"| {r['cell']} | {r['source']} | {method} | {pct(r.get('false_pass'))} | {pct(r['coverage'], 1)} | {r['width']:.4f} "
                     f"| {pct(r.get('today_false_pass'))} | {pct(r['today_coverage'], 1)} | {tw} | {ratio} |")  # fmt: skip
    worst_fp = max((r for r in grid if "false_pass" in r), key=lambda r: r["false_pass"], default=None)
    worst_cov = min(grid, key=lambda r: r["coverage"], default=None)
    ratios = [r["width_ratio"] for r in grid if r["width_ratio"]]
    if worst_fp and worst_cov:
        lines += ["", f"Worst false PASS {pct(worst_fp['false_pass'])} ({worst_fp['cell']}); worst coverage {pct(worst_cov['coverage'], 1)} "
                      f"({worst_cov['cell']}); width ratio at n ≥ 200 on balanced cells {min(ratios, default=0):.3f}–{max(ratios, default=0):.3f}."]  # fmt: skip
    if exact:
        lines += ["", "Two-point cells, computed exactly (every count of the rarer value weighed by its binomial probability):", "",
                  "| cell | n | false PASS | coverage |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {r['cell']} | {r['n']} | {pct(r['false_pass'])} | {pct(r['coverage'], 1)} |" for r in exact]
    if betting:
        lines += ["", f"Mean width on the balanced cells ({betting[0]['reps']} simulated comparisons each): today's, the score "
                      "interval's and the fixed-n betting interval's (WSR 2024), and their ratios to today's:", "",
                  "| cell | today | score | betting | score / today | betting / today |", "|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {r['cell']} | {r['today']:.4f} | {r['score']:.4f} | {r['betting']:.4f} | {r['score'] / r['today']:.3f} "
                  f"| {r['betting'] / r['today']:.3f} |" for r in betting]  # fmt: skip
    if took is not None:
        lines.append(f"{took:.1f} s wall, {cpu:.1f} s CPU")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=1000, help="simulated runs per scenario (default 1000)")
    parser.add_argument("--boot-sims", type=int, default=300, help="simulated runs of the SOBHard bootstrap rows (default 300)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval (default 1000)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--gate-n", type=int, nargs="*", default=[n for n, _ in GATE_ROWS],
                        help="the paired-gate rows to compute, by n (default all: %(default)s)")
    parser.add_argument("--grid-reps", type=int, default=2000, help="simulated comparisons per cell of the grid (default 2000; 0: no grid)")
    parser.add_argument("--grid-only", default=None, help="only the grid's cells whose name holds this text")
    parser.add_argument("--only-grid", action="store_true", help="the grid alone (none of the other tables)")
    parser.add_argument("--betting-reps", type=int, default=200, help="simulated comparisons per balanced cell for the betting widths (default 200)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    t0, cpu0 = time.perf_counter(), time.process_time()
    grid = grid_table(args.grid_reps, args.seed, args.grid_only) if args.grid_reps > 0 else []
    exact = two_point_exact() if args.grid_reps > 0 and not args.grid_only else []
    betting = betting_table(args.betting_reps, args.seed) if args.grid_reps > 0 and args.betting_reps > 0 and not args.grid_only else []
    if args.only_grid:
        took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        print(json.dumps({"grid": grid, "two_point": exact, "betting": betting, "seconds": took, "cpu_seconds": cpu}, indent=2) if args.json
              else grid_markdown(grid, exact, betting, args, took, cpu))  # fmt: skip
        return 0
    cov = coverage_table(args.sims, args.boot_sims, args.resamples, args.seed)
    sizes = size_table(args.sims, args.resamples, args.seed)
    sweep = sweep_size(args.sims, args.seed)
    gates = gate_table(tuple(r for r in GATE_ROWS if r[0] in args.gate_n))
    gate_sim = gate_simulated(200, 0.05, 0.05, 0.0, args.sims, args.seed)
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if args.json:
        print(json.dumps({"grid": grid, "two_point": exact, "betting": betting, "coverage": cov, "size": sizes, "sweep": sweep, "gates": gates, "gate_simulated": gate_sim,
                          "seconds": took, "cpu_seconds": cpu}, indent=2))  # fmt: skip
        return 0
    if grid:
        print(grid_markdown(grid, exact, betting, args, None, None) + "\n")

    def pct(x: float | None) -> str:
        return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"

    print(f"Coverage at a nominal {LEVEL:.0%} ({args.sims} simulated runs each, {args.boot_sims} for the bootstrap rows of "
          f"SOBHard; {args.resamples} resamples; seed {args.seed})\n")
    print("| scenario | coverage | zero width | not estimable | methods (runs) | s |\n|---|---|---|---|---|---|")
    for r in cov:
        methods = ", ".join(f"{m} ({c})" for m, c in r["methods"].items()) or "—"
        print(f"| {r['scenario']} | {pct(r['coverage'])} | {pct(r['zero_width'])} | {pct(r['not_estimable'])} | {methods} | {r['seconds']} |")
    print(f"\nPaired tests under no true difference (rejections at {1 - LEVEL:.0%})\n")
    print("| scenario | test rejects | Δ interval excludes 0 | disagreements | tests |\n|---|---|---|---|---|")
    for r in sizes:
        tests = ", ".join(f"{t} ({c})" for t, c in r["tests"].items())
        print(f"| {r['scenario']} | {pct(r['rejects'])} | {pct(r['interval_excludes_0'])} | {r['disagree']} | {tests} |")
    print(f"| {sweep['scenario']}: ≥ 1 significant | unadjusted {pct(sweep['any_significant'])} | Holm {pct(sweep['holm'])} | BH {pct(sweep['bh'])} | |")
    print(f"\nThe paired 0/1 gate at a true Δ of exactly −margin (exact, every outcome enumerated; target: false PASS "
          f"≤ {(1 - LEVEL) / 2:.1%}, coverage ≥ 93 %)\n")
    print("| scenario | test | false PASS | 95 % Δ interval coverage |\n|---|---|---|---|")
    for r in gates:
        print(f"| {r['scenario']} | {r['method']} | {100 * r['false_pass']:.2f} % | {pct(r['coverage'])} |")
    print(f"| n = 200, noninferior:0.05, one-sided, through paired() and gate(), {gate_sim['sims']} simulated | "
          f"| {pct(gate_sim['false_pass'])} | {pct(gate_sim['coverage'])} |")
    print(f"\n{took:.1f} s wall, {cpu:.1f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
