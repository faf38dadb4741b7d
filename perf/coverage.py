"""Coverage of evalkit's intervals and size of its paired tests, simulated (issue 22, item 9).

    .venv/bin/python perf/coverage.py [--sims 1000] [--resamples 1000] [--seed 2026]

Every figure comes from the public statistics functions (:func:`evalkit.stats.intervals`,
:func:`evalkit.stats.paired`, :func:`evalkit.stats.adjust`) on plans built as the
benchmarks build them (SOBHard's and KE's ``stat_plan``), with data drawn from a known
truth at a fixed seed:

* **coverage** at a nominal 95 %: the share of simulated runs whose interval holds the true
  value, the share of zero-width intervals, and the methods the regimes chose;
* **paired-test size**: under no true difference, how often the paired test rejects at
  5 % and how often the Δ interval excludes 0 (the two must agree), and for a 7-point sweep
  how often at least one of its 6 comparisons is "significant", unadjusted and after Holm
  and Benjamini–Hochberg.

* **the paired 0/1 gate at its margin** (issue 37, item 0): for true Δ = −margin and each
  discordance pattern (one-sided, 5:1, 2:1, heavy), the probability that
  ``noninferior:margin`` PASSes and that the 95 % Δ interval covers, computed *exactly* by
  enumerating every outcome of n pairs (n = 22 takes the exact unconditional path, n ≥ 50
  Tango's); and the same through ``paired`` + ``gate``, simulated. Targets: false PASS
  ≤ 2.5 %, coverage ≥ 93 %; ≥ 93 % for the weighted small-stratum rows, ≥ 90 % for
  ``balance_score``.

It prints three tables (and ``--json`` the figures); ``--gate-n`` picks the gate rows. The whole script takes under 2 minutes
at the defaults; ``tests/test_statistics.py`` runs it with a few simulations.
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
from evalkit.stats import (BINARY, SMALL_PAIRED, TANGO_CC, Column, StatPlan, _outcomes, adjust, exact_tail, gate, intervals, paired,
                           paired_binary, tango_z)  # fmt: skip

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=1000, help="simulated runs per scenario (default 1000)")
    parser.add_argument("--boot-sims", type=int, default=300, help="simulated runs of the SOBHard bootstrap rows (default 300)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval (default 1000)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--gate-n", type=int, nargs="*", default=[n for n, _ in GATE_ROWS],
                        help="the paired-gate rows to compute, by n (default all: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    t0, cpu0 = time.perf_counter(), time.process_time()
    cov = coverage_table(args.sims, args.boot_sims, args.resamples, args.seed)
    sizes = size_table(args.sims, args.resamples, args.seed)
    sweep = sweep_size(args.sims, args.seed)
    gates = gate_table(tuple(r for r in GATE_ROWS if r[0] in args.gate_n))
    gate_sim = gate_simulated(200, 0.05, 0.05, 0.0, args.sims, args.seed)
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if args.json:
        print(json.dumps({"coverage": cov, "size": sizes, "sweep": sweep, "gates": gates, "gate_simulated": gate_sim, "seconds": took, "cpu_seconds": cpu}, indent=2))
        return 0

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
