"""Time to compute every interval of a full ACEBench run (prints figures; not a test).

    .venv/bin/python perf/ci_speed.py [--data ../shared/data] [--resamples 2000] [--repeats 1] [--limit N]

The run is ``benchmark.language=all``: 2,040 samples over 17 categories and two languages,
with the weighted OVERALL, answered by a mixed-quality model (reference answers, some cut
in half) so that no interval is degenerate. Times the plan's construction and the
interval of every metric, by regime (:func:`evalkit.report.figures.plan_figures`), the
work a run does once, after its requests.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from types import SimpleNamespace

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.report.figures import plan_figures
from evalkit.types import Trajectory


def records(bench: AceBench, samples: list, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for s in samples:
        if bench.is_rollout(s):
            out.append({"sample_id": s.id, "subset": s.subset, "scores": {"accuracy": float(rnd.random() < 0.6), "process_acc": rnd.random()}})
            continue
        text = bench.reference_output(s)
        if rnd.random() < 0.3:
            text = text[: len(text) // 2]
        out.append({"sample_id": s.id, "subset": s.subset, "scores": bench.score_sample(s, Trajectory(final_output=text)).scores})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=1, help="epochs of the run (intervals cluster by sample)")
    parser.add_argument("--limit", type=int, default=None, help="the first N samples only (a quick check)")
    args = parser.parse_args()
    bench = AceBench(AceBenchSettings(data_dir=args.data / "acebench", language="all"))
    samples = bench.load()[: args.limit]
    epochs = [records(bench, samples, seed) for seed in range(args.repeats)]
    run = SimpleNamespace(bootstrap_resamples=args.resamples, ci_level=0.95, seed=0)
    t0 = time.perf_counter()
    plan = bench.stat_plan(samples, epochs)
    t1 = time.perf_counter()
    ci = plan_figures(bench, samples, epochs, run)["metrics_ci"]
    t2 = time.perf_counter()
    print(f"ACEBench language=all: {len(samples)} samples x {args.repeats} epochs, {len(plan.units)} units, "
          f"{len(ci)} metrics with intervals, {args.resamples} resamples")
    print(f"  plan: {t1 - t0:.3f} s; plan + every interval: {t2 - t1:.3f} s (target: at most 2 s)")
    print(f"  overall = [{ci['overall']['low']:.4f}, {ci['overall']['high']:.4f}] ({ci['overall']['method']})")


if __name__ == "__main__":
    main()
