"""Scoring speed of each benchmark's scorer: seconds per 1,000 samples (prints figures).

    .venv/bin/python perf/scoring_speed.py [--data ../shared/data] [--no-isolated] [--limit N]

Two figures per benchmark: the scorer called in this process (``bench.score``), and the
scorer as a run calls it — through :class:`evalkit.engine.scoring.Scorer`, a pool of worker
processes bounded in time and memory per sample, 8 samples in flight as a run's window
allows (the pool's start-up is timed apart).

ACEBench: every normal and special record (en and zh) scored on its reference answer and
on a wrong-format answer, offline, no model. KE: the fixture answers, reference and rule
baselines. SOBHard: the 22 fixture rows x their 118 answers plus reference and echo
answers. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc
from pathlib import Path

from evalkit.benchmarks import get_benchmark_class
from evalkit.engine.scoring import Scorer
from evalkit.types import Trajectory

ISOLATED = True
#: the first N answers of each benchmark (``--limit``; None: all)
LIMIT: int | None = None


def measure(label: str, bench, outputs: list, repeat: int = 1) -> None:
    """Print seconds per 1,000 answers for ``bench.score`` over ``outputs`` (``repeat`` times),
    timed without tracemalloc; a second pass over the distinct answers measures peak memory."""
    outputs = outputs[:LIMIT]
    timed = outputs * repeat
    t0 = time.perf_counter()
    for sample, text in timed:
        bench.score(sample, text)
    elapsed = time.perf_counter() - t0
    tracemalloc.start()
    for sample, text in outputs:
        bench.score(sample, text)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{label}: {len(timed)} answers ({len(outputs)} distinct x {repeat}) in {elapsed:.3f} s -> "
          f"{1000 * elapsed / len(timed):.3f} s per 1,000 answers; peak traced memory {peak / 2**20:.1f} MiB")
    if ISOLATED:
        measure_isolated(label, bench, timed)


def measure_isolated(label: str, bench, timed: list, in_flight: int = 8) -> None:
    """Print seconds per 1,000 answers scored as a run scores them (:class:`Scorer`)."""
    t0 = time.perf_counter()
    scorer = Scorer(bench)
    asyncio.run(scorer.score(*timed[0][:1], Trajectory(final_output=timed[0][1])))  # the pool is up
    started = time.perf_counter() - t0

    async def all_of() -> None:
        gate = asyncio.Semaphore(in_flight)

        async def one(sample, text) -> None:
            async with gate:
                await scorer.score(sample, Trajectory(final_output=text))

        await asyncio.gather(*(one(s, t) for s, t in timed))

    t0 = time.perf_counter()
    with scorer:
        asyncio.run(all_of())
    elapsed = time.perf_counter() - t0
    print(f"{label}, isolated (process pool, {in_flight} in flight): {1000 * elapsed / len(timed):.3f} s per 1,000 "
          f"answers; pool start-up {started:.2f} s")


def acebench(data: Path) -> None:
    cls = get_benchmark_class("acebench")
    bench = cls(cls.settings_model(name="acebench", data_dir=data / "acebench", language="all",
                                   subsets=[c for c in cls.all_subsets if not c.startswith("agent")]))
    samples = bench.load()
    outputs = [(s, bench.reference_output(s)) for s in samples] + [(s, "Sure! " + s.id) for s in samples]
    measure("acebench normal+special", bench, outputs)


def ke(data: Path) -> None:
    """KE: the fixture answers (answers.jsonl, completion outputs with the engine's prefix),
    the reference and every rule baseline, scored 50 times over, offline."""
    import json

    from evalkit.benchmarks.ke.prompts import ANSWER_PREFIX

    cls = get_benchmark_class("ke")
    bench = cls(cls.settings_model(name="ke", pilot_path=data / "ke" / "pilot.jsonl",
                                   icl_path=data / "ke" / "icl_examples.jsonl"))
    by_id = {s.id: s for s in bench.load()}
    outputs = [(s, bench.reference_output(s)) for s in by_id.values()]
    outputs += [(s, bench.baseline_output(b, s)) for b in cls.baselines for s in by_id.values()]
    for line in (data / "ke" / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if case["raw"].strip():
            prefix = ANSWER_PREFIX if case["mode"] == "completion" else ""
            outputs.append((by_id[case["sample_id"]], prefix + case["raw"]))
    measure("ke fixtures", bench, outputs, repeat=50)


def sobhard(data: Path, repeat: int = 20) -> None:
    """SOBHard: the fixture answers (answers.jsonl, 118 over 22 rows) plus the reference and
    the echo baseline of every row, scored ``repeat`` times over, offline."""
    import json

    cls = get_benchmark_class("sobhard")
    bench = cls(cls.settings_model(name="sobhard", data_dir=data / "sobhard"))
    by_id = {s.id: s for s in bench.load()}
    outputs = [(s, bench.reference_output(s)) for s in by_id.values()]
    outputs += [(s, bench.baseline_output("echo", s)) for s in by_id.values()]
    for line in (data / "sobhard" / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            case = json.loads(line)
            outputs.append((by_id[str(case["id"])], case["answer"]))
    measure("sobhard fixtures", bench, outputs, repeat=repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    parser.add_argument("--no-isolated", action="store_true", help="only the in-process figure")
    parser.add_argument("--limit", type=int, default=None, help="the first N answers of each benchmark (a quick check)")
    args = parser.parse_args()
    global ISOLATED, LIMIT
    ISOLATED = not args.no_isolated
    LIMIT = args.limit
    acebench(args.data)
    ke(args.data)
    sobhard(args.data)


if __name__ == "__main__":
    main()
