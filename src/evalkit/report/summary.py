"""``summary.json`` (the record other tools read) and ``report.md`` (the one a person reads).

summary.json fields (ARCHITECTURE.md, extend don't rename): ``status`` complete|incomplete,
``benchmark``, ``model``, ``n_samples``, ``n_scored``, ``n_failed``, ``metrics`` (withheld —
empty — when incomplete), ``partial_metrics`` (only when incomplete, every name prefixed
``partial_``), ``headline`` (name of the headline metric), ``data_fingerprint``,
``prompt_hash``, ``code_version``, ``started_at``, ``finished_at``, plus failure counts by
kind, timings and token usage.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from tabulate import tabulate

SCHEMA_VERSION = 1


def build_summary(
    *,
    cfg: Any,
    bench: Any,
    samples: list[Any],
    records: list[dict[str, Any]],
    failures: dict[str, dict[str, Any]],
    missing: list[str],
    metrics: dict[str, float],
    fingerprint: str,
    prompt_hash: str,
    code_version: str,
    model_id: str,
    started_at: str,
    finished_at: str,
    wall_s: float,
) -> dict[str, Any]:
    """The summary dict. A run is complete only when every selected sample was scored."""
    complete = not missing
    usage = Counter()
    latencies = []
    for r in records:
        usage.update({k: int(v) for k, v in (r.get("usage") or {}).items() if isinstance(v, (int, float))})
        if not r.get("cached") and r.get("latency_s"):
            latencies.append(float(r["latency_s"]))
    statuses = Counter(r.get("status", "ok") for r in records)
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete" if complete else "incomplete",
        "benchmark": cfg.benchmark.name,
        "model": cfg.model.name,
        "model_id": model_id,
        "user_model": cfg.user.model.name if getattr(cfg, "user", None) is not None else None,
        "shots": cfg.shots.n,
        "mode": cfg.model.api,
        "pid": os.getpid(),
        "n_samples": len(samples),
        "n_scored": len(records),
        "n_failed": len(missing),
        "failed_by_kind": dict(Counter(f.get("error_kind", "unknown") for f in failures.values())),
        "failed_ids": missing,
        "status_counts": dict(statuses),
        "scorer_limit_ids": [r["sample_id"] for r in records if r.get("status") == "scorer_limit"],
        "headline": bench.headline_metric,
        "metrics": metrics if complete else {},
        "data_fingerprint": fingerprint,
        "data_files_fingerprint": bench.data_fingerprints(),
        "prompt_hash": prompt_hash,
        "prompt_template_hash": bench.prompt_fingerprint(),
        "code_version": code_version,
        "generation_params": cfg.generation_params(),
        "usage": dict(usage),
        "mean_latency_s": round(sum(latencies) / len(latencies), 4) if latencies else None,
        "wall_s": round(wall_s, 3),
        "started_at": started_at,
        "finished_at": finished_at,
    }
    if not complete:
        summary["partial_metrics"] = {f"partial_{k}": v for k, v in metrics.items()}
    return summary


def write_report(run_dir: Path, summary: dict[str, Any], bench: Any, generates: bool = True) -> Path:
    """``report.md``: status line, counts, the benchmark's tables (partial when incomplete).
    The generation parameters are shown only when ``generates`` (a model that is sent
    requests; offline models — reference, replay, baselines — send nothing)."""
    complete = summary["status"] == "complete"
    lines = [f"# {summary['benchmark']} × {summary['model']}", ""]
    if complete:
        head = summary["headline"]
        value = summary["metrics"].get(head)
        lines.append(f"**Status: complete.** Headline `{head}` = **{_fmt(value)}**")
    else:
        lines.append(
            f"**Status: INCOMPLETE** — {summary['n_failed']} of {summary['n_samples']} samples have no scored "
            f"answer (see `failed.jsonl`). No headline score is published; figures below are partial."
        )
    lines += [
        "",
        f"- samples: {summary['n_samples']}, scored: {summary['n_scored']}, failed: {summary['n_failed']}"
        + (f" ({', '.join(f'{k}: {v}' for k, v in summary['failed_by_kind'].items())})" if summary["failed_by_kind"] else ""),
        f"- data fingerprint: `{summary['data_fingerprint'][:16]}`, prompt hash: `{summary['prompt_hash'][:16]}`, "
        f"code: `{summary['code_version']}`",
        f"- statuses of the scored answers: {_counts(summary.get('status_counts') or {})}",
        *([f"- generation: `{summary['generation_params']}`"] if generates else []),
        f"- wall time: {summary['wall_s']} s; tokens: {summary['usage'] or 'n/a'}",
        "",
    ]
    metrics = summary["metrics"] if complete else {k[len("partial_") :]: v for k, v in summary.get("partial_metrics", {}).items()}
    for title, headers, rows in bench.report_tables(metrics):
        lines += [f"## {title}{'' if complete else ' (partial)'}", "", tabulate(rows, headers=headers, tablefmt="github", floatfmt=".4f"), ""]
    limited = summary.get("scorer_limit_ids") or []
    if limited:
        lines += [
            "## Answers whose scoring hit a limit",
            "",
            f"{len(limited)} answers were stopped by the scoring bounds (`benchmark.score_timeout_s`, "
            "`benchmark.score_memory_mb`) and scored 0 as wrong answers (status `scorer_limit`; the reason is each "
            "row's `detail` in `predictions.jsonl`): " + ", ".join(f"`{sid}`" for sid in limited[:50])
            + (f" and {len(limited) - 50} more" if len(limited) > 50 else ""),
            "",
        ]
    plots = sorted((Path(run_dir) / "plots").glob("*.png")) if (Path(run_dir) / "plots").is_dir() else []
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    path = Path(run_dir) / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _counts(counts: dict[str, int]) -> str:
    """``ok: 8, format_error: 2`` (``none`` when nothing was scored)."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else str(value)
