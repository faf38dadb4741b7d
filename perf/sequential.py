"""The sequential gate, simulated (issue 37, item 3): ``run.stop_when`` under continuous monitoring.

    .venv/bin/python perf/sequential.py [--sims 200] [--seed 2026] [--json]

A finite benchmark of ``--population`` paired units in 4 equal strata (weights ∝ sizes),
paired 0/1 outcomes with discordance ``--discordance`` (B-only-right and A-only-right rates
``(q ± Δ)/2``), gate ``noninferior:--margin``, looks after every ``--batch`` units from
``--min-samples`` on (:func:`evalkit.sequential.simulate`, the function the engine's monitor
uses). The run is capped (``run.limit``) at the fixed-n design with 90 % power at Δ = 0
(:func:`evalkit.sequential.fixed_n`), so it never uses more than that design plus the batch
in flight. Three tables:

* **false PASS** at a true Δ = −margin, monitored at every look: ≤ the nominal (1 − level)/2;
* **simultaneous coverage** of the confidence sequence over all looks (to twice the fixed
  n, no stopping), at Δ = −margin, 0, +margin: ≥ level;
* **samples used** (mean n / fixed n) and the verdicts at Δ = 0, ±margin, ±2×margin, −3×margin.
  Targets: ≤ 50 % at +2×margin and −3×margin, never > fixed n + one batch.

A few CPU-minutes at the defaults; ``tests/test_sequential.py`` runs it reduced.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from evalkit.sequential import fixed_n, simulate


def population(n: int, delta: float, discordance: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` paired differences d ∈ {−1, 0, 1}: P(d = 1) = (q + Δ)/2, P(d = −1) = (q − Δ)/2,
    then shifted so that the finite population's mean is Δ to within one unit."""
    pb, pc = (discordance + delta) / 2, (discordance - delta) / 2
    u = rng.random(n)
    d = np.where(u < pb, 1.0, np.where(u < pb + pc, -1.0, 0.0))
    # the population's own Δ is what the sequence estimates; keep it at the target exactly-ish
    want = int(round(delta * n))
    have = int(d.sum())
    idx = rng.permutation(n)
    for i in idx:
        if have == want:
            break
        if have > want and d[i] > -1:
            d[i] -= 1
            have -= 1
        elif have < want and d[i] < 1:
            d[i] += 1
            have += 1
    return d


def measure(sims: int, seed: int, n_pop: int, margin: float, discordance: float, batch: int, min_samples: int,
            level: float = 0.95) -> dict[str, Any]:  # fmt: skip
    rng = np.random.default_rng(seed)
    strata = np.arange(n_pop) % 4
    weights = {k: 0.25 for k in range(4)}
    cap = fixed_n(margin, discordance, level)
    out: dict[str, Any] = {"fixed_n": cap, "population": n_pop, "margin": margin, "discordance": discordance,
                           "batch": batch, "min_samples": min_samples, "sims": sims, "level": level, "rows": {}}  # fmt: skip
    for mult in (-3, -2, -1, 0, 1, 2):
        delta = mult * margin
        verdicts: dict[str, int] = {}
        used, covered = [], 0
        for r in range(sims):
            d = population(n_pop, delta, discordance, rng)
            got = simulate(d, strata, weights, "noninferior", margin, cap, batch, min_samples, int(rng.integers(1 << 30)), level)
            verdicts[got["verdict"]] = verdicts.get(got["verdict"], 0) + 1
            used.append(got["n"])
        out["rows"][f"{mult:+d}x"] = {"delta": delta, "verdicts": verdicts, "mean_fraction": float(np.mean(used)) / cap,
                                      "max_fraction": float(np.max(used)) / cap, "pass_rate": verdicts.get("PASS", 0) / sims}  # fmt: skip
    cover = {}
    for mult in (-1, 0, 1):
        ok = 0
        for r in range(max(1, sims // 2)):
            d = population(n_pop, mult * margin, discordance, rng)
            got = simulate(d, strata, weights, "noninferior", margin, min(n_pop, 2 * cap), batch, min_samples,
                           int(rng.integers(1 << 30)), level, stop=False)  # fmt: skip
            ok += got["covered"]
        cover[f"{mult:+d}x"] = ok / max(1, sims // 2)
    out["coverage"] = cover
    out["false_pass_at_margin"] = out["rows"]["-1x"]["pass_rate"]
    return out


def render(res: dict[str, Any]) -> str:
    lines = [f"noninferior:{res['margin']:g}, population {res['population']} in 4 strata, discordance {res['discordance']}, "
             f"looks every {res['batch']} from {res['min_samples']}; fixed-n design (90% power at Δ=0): {res['fixed_n']}; "
             f"{res['sims']} runs per row", "",
             "| true Δ | PASS | FAIL | futile | undecided | mean n / fixed n | max n / fixed n |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, row in res["rows"].items():
        v, s = row["verdicts"], res["sims"]
        lines.append(f"| {row['delta']:+.3f} ({key}) | {v.get('PASS', 0) / s:.1%} | {v.get('FAIL', 0) / s:.1%} | {v.get('FUTILE', 0) / s:.1%} "
                     f"| {v.get('INCONCLUSIVE', 0) / s:.1%} | {row['mean_fraction']:.1%} | {row['max_fraction']:.1%} |")  # fmt: skip
    lines += ["", f"false PASS at Δ = −margin under continuous monitoring: {res['false_pass_at_margin']:.2%} "
              f"(nominal one-sided {(1 - res['level']) / 2:.1%})",
              "simultaneous coverage over all looks to 2 × fixed n: " + ", ".join(f"{k}: {v:.1%}" for k, v in res["coverage"].items())]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sims", type=int, default=200)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--population", type=int, default=4000)
    p.add_argument("--margin", type=float, default=0.05)
    p.add_argument("--discordance", type=float, default=0.2)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--min-samples", type=int, default=50)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    started = time.perf_counter()
    res = measure(args.sims, args.seed, args.population, args.margin, args.discordance, args.batch, args.min_samples)
    res["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(res, indent=2) if args.json else render(res) + f"\n({res['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
