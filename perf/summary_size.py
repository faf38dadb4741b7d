"""Time and peak memory of a run's summary at 10k, 30k and 100k samples, per benchmark
(issue 25, item 5: work linear in size; a 100k-sample summary within 30 s and 1 GB).

    .venv/bin/python perf/summary_size.py [--sizes 10000,30000,100000] [--benchmarks acebench,sobhard,ke]
        [--resamples 2000] [--data ../shared/data]

For each benchmark and size, a child process builds N samples by copying the benchmark's
own data under new ids (an ACEBench multi-turn dialogue stays one dialogue per copy), scores
each distinct sample once (reference answers, some cut in half so no interval is
degenerate) and journals a row per copy; then it times the finalize stage's summary work:
the benchmark's ``aggregate``, ``category_counts`` and every interval
(:func:`evalkit.report.figures.plan_figures`). Wall and CPU seconds are both printed (on a
shared machine the CPU time is the steadier figure). Peak memory is the child's peak resident set
above what it held before the summary began (scipy.stats already imported). Scoring and MLflow logging are not counted
(``perf/scoring_speed.py`` and ``perf/tracking_speed.py`` measure them).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from evalkit.types import Sample, Trajectory

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _bench(name: str, data: Path) -> Any:
    if name == "acebench":
        from evalkit.benchmarks.acebench import AceBench, AceBenchSettings

        return AceBench(AceBenchSettings(data_dir=data / "acebench", language="all"))
    if name == "sobhard":
        from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings

        return SOBHard(SOBHardSettings(data_dir=data / "sobhard"))
    from evalkit.benchmarks.ke import KE
    from evalkit.benchmarks.ke.settings import KESettings

    return KE(KESettings(pilot_path=data / "ke" / "pilot.jsonl", icl_path=data / "ke" / "icl_examples.jsonl"))


def _copy(sample: Sample, k: int) -> Sample:
    data = copy.copy(sample.data)
    prompt = data.get("prompt")
    if isinstance(prompt, dict) and isinstance(prompt.get("id"), str):  # ACEBench: a dialogue per copy
        head, _, tail = prompt["id"].rpartition("_")
        data["prompt"] = {**prompt, "id": f"{head}c{k}_{tail}" if head else f"{tail}c{k}"}
    return Sample(id=f"{sample.id}~{k}", subset=sample.subset, data=data)


def scored_rows(bench: Any, samples: list[Sample], seed: int = 0) -> dict[str, dict[str, Any]]:
    rnd = random.Random(seed)
    out = {}
    for s in samples:
        if getattr(bench, "is_rollout", lambda _: False)(s):
            out[s.id] = {"scores": {"accuracy": float(rnd.random() < 0.6), "process_acc": rnd.random()}}
            continue
        text = bench.reference_output(s)
        if rnd.random() < 0.3:
            text = text[: len(text) // 2]
        scored = bench.score_sample(s, Trajectory(final_output=text))
        out[s.id] = {"scores": scored.scores, "checks": scored.checks}
    return out


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def one(name: str, n: int, resamples: int, data: Path) -> dict[str, Any]:
    """The figures of one benchmark at ``n`` samples (run in a child process)."""
    from evalkit.report.figures import category_counts, plan_figures

    bench = _bench(name, data)
    base = bench.load()
    scored = scored_rows(bench, base)
    samples, rows = [], []
    for k in range(-(-n // len(base))):
        for s in base:
            if len(samples) == n:
                break
            c = _copy(s, k)
            samples.append(c)
            rows.append({"sample_id": c.id, "subset": c.subset, "epoch": 0, **copy.deepcopy(scored[s.id])})
    bench.load = lambda: samples  # noqa: E731 - the copies are this benchmark's data now
    epochs = [rows]
    run = SimpleNamespace(bootstrap_resamples=resamples, ci_level=0.95, seed=0)
    import scipy.stats  # noqa: F401 - imported once per process (seconds on a busy machine), not per summary

    before = _rss_mib()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    metrics = bench.aggregate(samples, rows)
    t1 = time.perf_counter()
    counts = category_counts(bench, samples, epochs)
    t2 = time.perf_counter()
    figs = plan_figures(bench, samples, epochs, run)
    t3 = time.perf_counter()
    cpu = time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"benchmark": name, "samples": n, "metrics": len(metrics), "intervals": len(figs["metrics_ci"]),
            "categories": len(counts), "aggregate_s": round(t1 - t0, 2), "counts_s": round(t2 - t1, 2),
            "intervals_s": round(t3 - t2, 2), "summary_s": round(t3 - t0, 2), "summary_cpu_s": round(cpu, 2), "peak_mib_above_start": round(peak - before, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,30000,100000")
    parser.add_argument("--benchmarks", default="acebench,sobhard,ke")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--one", nargs=2, metavar=("BENCHMARK", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.resamples, args.data)))
        return 0
    print(f"Summary work per run size ({args.resamples} resamples; peak = resident memory above the start of the summary)\n")
    print("| benchmark | samples | metrics | aggregate s | counts s | intervals s | summary s | summary CPU s | peak MiB |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for name in args.benchmarks.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            proc = subprocess.run([sys.executable, __file__, "--one", name, str(n), "--resamples", str(args.resamples), "--data", str(args.data)],
                                  capture_output=True, text=True)  # fmt: skip
            if proc.returncode != 0:
                print(f"| {name} | {n} | failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode} | | | | | | |")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"| {name} | {n} | {r['metrics']} | {r['aggregate_s']} | {r['counts_s']} | {r['intervals_s']} | {r['summary_s']} | {r['summary_cpu_s']} | {r['peak_mib_above_start']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
