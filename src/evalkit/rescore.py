"""Re-score a finished run from its journal alone — no model, no network.

    python -m evalkit.rescore RUN_DIR [--data-dir DIR]

Reads ``config.yaml`` (the benchmark settings that ran: ``model.dataset_args`` applied) and
``predictions.jsonl``, scores every journaled trajectory again through the benchmark's one
scoring entry, as the run did, and prints, per metric, the recorded value, the recomputed
one, and the samples whose verdict changed.
Nothing in the run directory is modified. Exit code: 0 identical, 1 differences found,
2 the directory is not a usable run.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from pydantic import ValidationError
from tabulate import tabulate

from evalkit.benchmarks import get_benchmark_class
from evalkit.config import resolve_layers
from evalkit.engine.records import scored_view, trajectory_of_row
from evalkit.engine.scoring import Scorer
from evalkit.errors import ConfigError, EvalkitError, RunDirError, printable
from evalkit.journal import damaged_journal, read_run_journal
from evalkit.jsonl import SideFileError, read_run_text
from evalkit.report.figures import epoch_mean, plan_figures
from evalkit.summary import read_summary

log = logging.getLogger("evalkit")


def rescore(run_dir: Path, data_dir: Path | None = None) -> dict[str, Any]:
    """Recompute scores and metrics of ``run_dir``.

    Returns ``{"metrics": {...}, "recorded": {...}, "changed": [sample ids], "unreadable": [sample ids],
    "has_summary": bool}`` (``has_summary`` false: an interrupted run, whose ``recorded`` is empty):
    ``unreadable`` are the samples whose side file is missing or does not match its row's
    sha256 (each warned about; they keep their recorded scores and count as differences).

    Raises:
        RunDirError: no ``config.yaml`` / ``predictions.jsonl``, an unreadable or invalid
            ``summary.json`` (:class:`evalkit.summary.Summary`), a journal row that cannot
            count (:mod:`evalkit.journal`), or fewer readable predictions than its ``n_scored_rows``.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "predictions.jsonl").is_file():
        raise RunDirError(f"{run_dir}: not an evalkit run directory (config.yaml and predictions.jsonl needed)")
    bench = load_benchmark(run_dir, data_dir)
    by_id = {s.id: s for s in bench.load()}
    recorded_summary = read_summary(run_dir / "summary.json") if (run_dir / "summary.json").exists() else None
    journal = read_run_journal(run_dir, recorded_summary.stale_lines if recorded_summary else ())
    rows = journal.rows
    damage = recorded_summary and damaged_journal(journal.path, len(rows), recorded_summary.n_scored_rows, "n_scored_rows")
    if damage:
        raise RunDirError(damage)
    problems = journal.problems()
    if problems:
        print(f"evalkit: warning: {problems}", file=sys.stderr)
    selected = [by_id[sid] for sid in journal.sample_ids() if sid in by_id]
    repeats = max(journal.n_epochs(), 1)
    epochs: list[list[dict[str, Any]]] = [[] for _ in range(repeats)]
    changed: list[str] = []
    unreadable: list[str] = []
    with Scorer(bench) as scorer:  # the run's own bounds on time and memory per sample
        for (sid, epoch), row in rows.items():
            if sid not in by_id:
                continue
            row = dict(row)
            try:
                trajectory = trajectory_of_row(row, run_dir)
            except SideFileError as exc:  # never score the row's first characters as if they were the output
                log.warning("%s; the sample keeps its recorded scores and counts as a difference", exc)
                unreadable.append(sid if repeats == 1 else f"{sid}@{epoch}")
                epochs[epoch].append(row)
                continue
            view, _ = scored_view(bench, trajectory)  # the run's reasoning rule, as it ran
            scored = scorer.score_sync(by_id[sid], view)
            if scored.scores != row.get("scores"):
                changed.append(sid if repeats == 1 else f"{sid}@{epoch}")
            row["scores"] = scored.scores
            epochs[epoch].append(row)
    metrics = epoch_mean([bench.aggregate(selected, records) for records in epochs])
    metrics.update(plan_figures(bench, selected, epochs, _NO_INTERVALS)["repeat"])
    recorded = recorded_summary.shown_metrics()[0] if recorded_summary else {}
    return {"metrics": metrics, "recorded": recorded, "changed": changed, "unreadable": unreadable,
            "has_summary": recorded_summary is not None}


#: the run settings :func:`plan_figures` reads, with intervals off (rescore compares metrics only)
_NO_INTERVALS = SimpleNamespace(bootstrap_resamples=0, ci_level=0.95, seed=0)


def load_benchmark(run_dir: Path, data_dir: Path | None = None) -> Any:
    """The benchmark a run used, rebuilt from its ``config.yaml`` (``data_dir`` replaces
    where its data was found).

    Raises:
        RunDirError: the config cannot be read, names no known benchmark, or its settings
            do not validate (one line naming the key).
    """
    try:
        cfg = yaml.safe_load(read_run_text(Path(run_dir) / "config.yaml"))
    except yaml.YAMLError as exc:
        raise RunDirError(f"{run_dir}/config.yaml cannot be read ({type(exc).__name__})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("benchmark"), dict) or "name" not in cfg["benchmark"]:
        raise RunDirError(f"{run_dir}/config.yaml is not an evalkit run config (no benchmark.name)")
    bench_raw = _benchmark_settings(run_dir, cfg)
    if data_dir is not None:
        bench_raw["data_dir"] = str(data_dir)
    try:
        bench_cls = get_benchmark_class(str(bench_raw["name"]), kind=bench_raw.get("kind"))  # never a module: see evalkit.benchmarks
    except KeyError as exc:
        raise RunDirError(f"{run_dir}/config.yaml: {exc.args[0]}") from None
    try:
        settings = bench_cls.settings_model(**bench_raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        raise RunDirError(f"{run_dir}/config.yaml: benchmark.{'.'.join(map(str, err['loc']))}: {msg}") from None
    return bench_cls(settings)


def _benchmark_settings(run_dir: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """The benchmark settings a run used: ``benchmark`` of a resolved ``config.yaml``
    (format 2), or of an earlier one (format 1: raw layers) with its model's
    ``dataset_args`` applied as that run applied them."""
    if cfg.get("config_format") is not None:
        return dict(cfg["benchmark"])
    try:
        return dict(resolve_layers(cfg, get_benchmark_class)["benchmark"])
    except ConfigError as exc:
        raise RunDirError(f"{run_dir}/config.yaml: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalkit.rescore", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data-dir", type=Path, default=None, help="benchmark data (if not where the run found it)")
    args = parser.parse_args(argv)
    try:
        result = rescore(args.run_dir, args.data_dir)
    except EvalkitError as exc:
        print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
        return 2
    names = sorted(set(result["metrics"]) | set(result["recorded"]))
    if not result.get("has_summary", True):  # interrupted: no recorded metrics to differ from
        print(f"evalkit: {printable(str(args.run_dir))} has no summary.json (the run did not finish; run.resume finishes "
              "it): its metrics are not compared, only each sample's verdict", file=sys.stderr)  # fmt: skip
    rows = []
    for name in names:
        new, old = result["metrics"].get(name), result["recorded"].get(name)
        same = old is not None and new is not None and abs(new - old) < 1e-12
        rows.append([name, old, new, "" if same or not result.get("has_summary", True) else "DIFFERS"])
    print(tabulate(rows, headers=["metric", "recorded", "rescored", ""], tablefmt="github", floatfmt=".4f"))
    if result["changed"]:
        print(f"{len(result['changed'])} sample verdicts changed: {printable(', '.join(result['changed'][:20]))}")
    if result["unreadable"]:
        print(f"{len(result['unreadable'])} samples not rescored (side file unreadable or not as recorded): "
              f"{printable(', '.join(result['unreadable'][:20]))}")  # fmt: skip
    differs = bool(result["changed"]) or bool(result["unreadable"]) or any(r[3] for r in rows)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
