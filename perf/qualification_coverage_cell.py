"""One cell of perf/qualification_coverage.py, simulated alone and for κ only: the coverage of
Cohen's κ's BCa interval (as ``python -m evalkit.judge qualify`` computes it) at 200 labels,
binary labels with p = 0.5, at a true κ of KAPPA, over SIMS simulations from SEED; it prints the
coverage and on which side the misses fell. It measures; it asserts nothing.

    .venv/bin/python perf/qualification_coverage_cell.py SEED SIMS KAPPA     # e.g. 7 600 0.9
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qualification_coverage import draw  # noqa: E402  (the same draw as the table's)

from evalkit.stats import COHEN_KAPPA, agreement  # noqa: E402


def main() -> None:
    seed, sims, a = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    rng = np.random.default_rng(seed)
    marginal, n = np.array([0.5, 0.5]), 200
    hits = done = below = above = 0
    started = time.perf_counter()
    for k in range(sims):
        labels = draw(rng, n, marginal, a)
        out = agreement(labels, np.arange(n), 0.95, 1000, seed + k, method=COHEN_KAPPA, interval="bca")
        if out["ci"] is None:
            continue
        done += 1
        if out["ci"]["low"] > a:
            below += 1
        elif out["ci"]["high"] < a:
            above += 1
        else:
            hits += 1
    print(f"binary p=0.5 kappa {a}: cover {hits / done:.3f} of {done} (truth below interval {below}, above {above}); "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
