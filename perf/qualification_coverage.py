"""Coverage of a judge qualification's agreement intervals (issue 45 target: >= 93 % at a true κ of
0.4, 0.7 and 0.9), simulated: :func:`evalkit.stats.agreement` on a person's labels and a judge's
verdicts drawn from a known truth, as ``python -m evalkit.judge qualify`` computes them.

    .venv/bin/python perf/qualification_coverage.py [--sims 400] [--resamples 1000] [--n 200] [--seed 2026]
                                                    [--interval bca|percentile]

The person labels n answers on a scale of ``c`` categories with the marginal ``p`` (binary:
pass with probability ``p``; five: the 1-5 scale with more weight at the ends); the judge copies
the label with probability ``a`` and otherwise draws anew from the same marginal, so the
population Cohen's κ is exactly ``a`` — and so is Krippendorff's α's population value, as both
raters share one marginal — and the population percent agreement is ``a + (1 − a)·Σ p_c²``.
Each row prints, at a nominal 95 %, the share of simulated qualifications whose interval holds
the truth, for κ, α and percent agreement, and the mean width of κ's interval; ``--interval``
picks the bootstrap interval (qualification's: BCa).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from evalkit.stats import COHEN_KAPPA, KRIPPENDORFF_ALPHA, PERCENT_AGREEMENT, agreement

MARGINALS = {"binary p=0.5": np.array([0.5, 0.5]), "binary p=0.8": np.array([0.2, 0.8]),
             "1-5 scale": np.array([0.3, 0.1, 0.1, 0.15, 0.35])}  # fmt: skip


def draw(rng: np.random.Generator, n: int, marginal: np.ndarray, a: float) -> np.ndarray:
    """``(n, 2)`` labels (person, judge) whose population κ is ``a`` (module docstring)."""
    cats = np.arange(len(marginal), dtype=float)
    person = rng.choice(cats, size=n, p=marginal)
    fresh = rng.choice(cats, size=n, p=marginal)
    return np.stack([person, np.where(rng.random(n) < a, person, fresh)], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=400)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--n", type=int, nargs="+", default=[200])
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--interval", choices=["bca", "percentile"], default="bca")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'labels':>6} {'marginal':>13} {'kappa':>6} {'cover κ':>8} {'cover α':>8} {'cover %agr':>10} {'width κ':>8}")
    started = time.perf_counter()
    for n in args.n:
        for name, marginal in MARGINALS.items():
            for a in (0.4, 0.7, 0.9):
                truth = {COHEN_KAPPA: a, KRIPPENDORFF_ALPHA: a, PERCENT_AGREEMENT: a + (1 - a) * float((marginal**2).sum())}
                hits = {m: 0 for m in truth}
                done = {m: 0 for m in truth}
                width = 0.0
                for k in range(args.sims):
                    labels = draw(rng, n, marginal, a)
                    for method, value in truth.items():
                        out = agreement(labels, np.arange(n), 0.95, args.resamples, args.seed + k, method=method, interval=args.interval)
                        if out["ci"] is None:
                            continue
                        done[method] += 1
                        hits[method] += out["ci"]["low"] <= value <= out["ci"]["high"]
                        if method == COHEN_KAPPA:
                            width += out["ci"]["high"] - out["ci"]["low"]
                cover = {m: hits[m] / max(done[m], 1) for m in truth}
                print(f"{n:>6} {name:>13} {a:>6} {cover[COHEN_KAPPA]:>8.3f} {cover[KRIPPENDORFF_ALPHA]:>8.3f} "
                      f"{cover[PERCENT_AGREEMENT]:>10.3f} {width / max(done[COHEN_KAPPA], 1):>8.3f}")  # fmt: skip
    print(f"({args.sims} simulations per row, {args.resamples} resamples each; {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
