"""Scoring budget: N slow hostile SOBHard answers end within ``benchmark.score_budget_s`` plus
a margin, with a summary (issue 25 item 6; prints figures).

    .venv/bin/python perf/score_budget.py [--n 500] [--kb 250] [--budget 60] [--data ../shared/data/sobhard] [--out DIR]

The answer: a YAML mapping of ``--kb`` KB (``key_<i>: <i>`` lines in a ```yaml fence) for
SOBHard question 15, whose target notation is YAML (its reference is a 16-key mapping), so the
scorer parses and compares the whole document — the kind of answer issue 25 measured at about
9.5 s (250 KB). One answer is first scored alone (a run of one sample, generous budget) to
give its scoring seconds. Then the replay file holds that answer for sample 15 and the run
asks it ``--n`` times (``run.repeats=N``; replay is keyed by sample id, so every epoch gets
the same answer):

    python -m evalkit benchmark=sobhard model=replay model.path=FILE run.sample_ids=[15] \\
        run.repeats=N benchmark.data_dir=DATA benchmark.score_budget_s=BUDGET tracking=none

Printed: the run's wall seconds (the subprocess, start-up included) against the budget, its
``engine.phases`` (``scoring_s``, ``summary_report_s``), status, ``n_scored`` and
``failed_by_kind``; and what scoring all N would have cost without the budget (N × one
answer's seconds; scored one at a time here, as the scoring pool does per answer). Not a test:
nothing is asserted beyond the summary being written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = "15"  # SOBHard: target notation YAML


def slow_answer(kb: int) -> str:
    """A YAML mapping of about ``kb`` KB in a ```yaml fence (well formed, wrong: not the reference)."""
    lines, size, i = [], 0, 0
    while size < kb * 1024:
        line = f"key_{i:07d}: {i}"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "```yaml\n" + "\n".join(lines) + "\n```"


def run(out: Path, replay: Path, data: Path, repeats: int, budget: float) -> tuple[float, dict]:
    """One ``python -m evalkit`` run; returns (wall seconds, its summary.json)."""
    run_dir = out / f"run-{repeats}-{budget:g}"
    cmd = [sys.executable, "-m", "evalkit", "benchmark=sobhard", "model=replay", f"model.path={replay}",
           f"run.sample_ids=[{SAMPLE}]", f"run.repeats={repeats}", f"benchmark.data_dir={data}",
           f"benchmark.score_budget_s={budget:g}", "tracking=none", f"run.output_root={out}", f"run.dir={run_dir}"]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "EVALKIT_QUIET": "1"})
    wall = time.perf_counter() - started
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        sys.exit(f"no summary (exit {proc.returncode}): {proc.stderr[-2000:]}")
    print(f"  exit {proc.returncode}: {proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ''}")
    return wall, json.loads(summary_path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="slow answers in the run (run.repeats)")
    parser.add_argument("--kb", type=int, default=250, help="size of each answer (KB)")
    parser.add_argument("--budget", type=float, default=60.0, help="benchmark.score_budget_s (seconds)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "sobhard")
    parser.add_argument("--out", type=Path, default=None, help="output root (default: a temporary directory)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="evalkit-score-budget-"))
    out.mkdir(parents=True, exist_ok=True)
    replay = out / "replay.jsonl"
    answer = slow_answer(args.kb)
    replay.write_text(json.dumps({"sample_id": SAMPLE, "output": answer}) + "\n", encoding="utf-8")
    print(f"answer: {len(answer.encode()) / 1024:.0f} KB of YAML for SOBHard sample {SAMPLE}; load average {os.getloadavg()[0]:.2f}")

    print("one answer scored alone (budget 3600 s):")
    _, one = run(out, replay, args.data, 1, 3600)
    per_answer = one["engine"]["phases"].get("scoring_s", float("nan"))
    print(f"  scoring_s {per_answer:.2f} s; status {one['status']}; failed_by_kind {one.get('failed_by_kind')}")

    print(f"{args.n} answers, benchmark.score_budget_s={args.budget:g}:")
    wall, summary = run(out, replay, args.data, args.n, args.budget)
    phases = summary["engine"]["phases"]
    print(f"  wall {wall:.1f} s (budget {args.budget:g} s: {wall - args.budget:+.1f} s past it, start-up and summary included)")
    print(f"  scoring_s {phases.get('scoring_s', 0):.1f} s, summary_report_s {phases.get('summary_report_s', 0):.2f} s, "
          f"to_first_request_s {phases.get('to_first_request_s', 0):.2f} s")  # fmt: skip
    print(f"  status {summary['status']}; n_scored {summary.get('n_scored')}; n_failed {summary.get('n_failed')}; "
          f"failed_by_kind {summary.get('failed_by_kind')}")  # fmt: skip
    print(f"  without the budget: about {args.n * per_answer / 60:.1f} min of scoring ({args.n} × {per_answer:.2f} s)")
    print(f"run directories under {out}")


if __name__ == "__main__":
    main()
