"""One job: run a composed or validated config with the observer its ``tracking`` names,
and say the outcome in one line. What the command line and the sweep's jobs share; it sits
below both (neither imports the other for it).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from evalkit.compose import resolve
from evalkit.config import EvalConfig
from evalkit.engine.run import RunResult, run_evaluation
from evalkit.report.summary import headline_text
from evalkit.tracking import make_observer


def run_validated(cfg: EvalConfig, sweep: dict[str, Any] | None = None) -> RunResult:
    """Run a validated config (``sweep``: the ``sweep.json`` of the sweep it is a job of).

    Raises:
        EvalkitError: a configuration, data, run directory or tracking error.
    """
    return run_evaluation(cfg, make_observer(cfg, sweep))


def outcome_line(result: RunResult) -> str:
    """The one line a finished run prints: its headline, or why there is none."""
    s = result.summary
    if s["status"] == "complete":
        return f"evalkit: complete: {s['benchmark']} × {s['model']}: {headline_text(s)} → {result.run_dir}"
    kinds = ", ".join(f"{k}: {v}" for k, v in s["failed_by_kind"].items()) or "never ran"
    return (
        f"evalkit: INCOMPLETE: {s['n_failed']} of {s['n_samples']} samples failed ({kinds}); "
        f"no headline score. Resume: run.resume={result.run_dir}"
    )


def run_composed(cfg: DictConfig, sweep: dict[str, Any] | None = None) -> RunResult:
    """Validate and run one composed config; prints the one-line outcome.

    Raises:
        EvalkitError: a configuration, data, run directory or tracking error.
    """
    _, validated = resolve(cfg)
    result = run_validated(validated, sweep)
    print(outcome_line(result))
    return result
