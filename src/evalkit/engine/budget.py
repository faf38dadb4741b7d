"""The run's budget: ``run.max_cost_usd`` (USD) and ``run.max_total_tokens`` (prompt +
completion tokens), for the run across its resumes.

:class:`Budget` starts from what the run's journal says was already spent (every row of
``predictions.jsonl``, ``failed.jsonl`` and the ``failed.prev-*.jsonl`` of earlier attempts
carries ``cost_usd`` and ``spent_tokens``, see :mod:`evalkit.engine.records`), is charged
with each unit the moment it finishes — before its slot is handed to the next unit — and
is asked before each dispatch (:func:`evalkit.engine.scheduling.run_units`). Once the
spend reaches a limit no new unit starts: units in flight (a rollout under way) finish and
are kept, and every unit not yet sent becomes a failure of kind ``budget_exceeded``
(nothing was sent for it). A response-cache hit costs nothing. A spend that cannot be
measured (a provider that reports no usage, a model without a price) counts as spent: a
budget that cannot be checked does not hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.engine.records import Prices, spend
from evalkit.engine.rundir import FAILED, PREDICTIONS
from evalkit.journal import read_jsonl
from evalkit.types import Failure, Trajectory

#: the failure kind of a sample the budget kept from being sent
BUDGET_EXCEEDED = "budget_exceeded"


def journal_spend(run_dir: Path) -> tuple[float | None, int | None]:
    """``(cost_usd, spent_tokens)`` summed over every journaled row of ``run_dir``
    (predictions and failures of every attempt); ``None`` when some row's spend is
    unknown (a row without the field, written before evalkit recorded it, is unknown)."""
    cost: float | None = 0.0
    tokens: int | None = 0
    files = [Path(run_dir) / PREDICTIONS, Path(run_dir) / FAILED, *sorted(Path(run_dir).glob("failed.prev-*.jsonl"))]
    for path in files:
        for row in read_jsonl(path) if path.exists() else ():
            c, t = row.get("cost_usd"), row.get("spent_tokens")
            cost = cost + float(c) if cost is not None and isinstance(c, (int, float)) else None
            tokens = tokens + int(t) if tokens is not None and isinstance(t, int) else None
    return cost, tokens


class Budget:
    """What the run may still spend. ``max_cost_usd`` / ``max_total_tokens``: the limits
    (``None`` = none); ``prices``: the run's (:attr:`evalkit.engine.plan.RunPlan.prices`);
    ``cost_usd`` / ``tokens``: spent so far (``None`` = unknown)."""

    def __init__(self, max_cost_usd: float | None, max_total_tokens: int | None, prices: Prices,
                 cost_usd: float | None = 0.0, tokens: int | None = 0, run_dir: Path | None = None):  # fmt: skip
        self.max_cost_usd, self.max_total_tokens = max_cost_usd, max_total_tokens
        self.prices, self.cost_usd, self.tokens, self.run_dir = prices, cost_usd, tokens, run_dir

    @classmethod
    def of_run(cls, cfg: Any, prices: Prices, run_dir: Path) -> "Budget":
        """The budget of ``cfg.run`` for the run in ``run_dir``, with its spend so far."""
        cost, tokens = journal_spend(run_dir)
        return cls(cfg.run.max_cost_usd, cfg.run.max_total_tokens, prices, cost, tokens, run_dir)

    @property
    def limited(self) -> bool:
        return self.max_cost_usd is not None or self.max_total_tokens is not None

    def charge(self, trajectory: Trajectory) -> None:
        """Add what a finished unit spent (:func:`evalkit.engine.records.spend`)."""
        if not self.limited:
            return
        spent = spend(trajectory, self.prices)
        c, t = spent["cost_usd"], spent["spent_tokens"]
        self.cost_usd = None if self.cost_usd is None or c is None else self.cost_usd + c
        self.tokens = None if self.tokens is None or t is None else self.tokens + t

    def exhausted(self) -> bool:
        """True once a limit is reached (or the spend it limits is unknown)."""
        over_cost = self.max_cost_usd is not None and (self.cost_usd is None or self.cost_usd >= self.max_cost_usd)
        over_tokens = self.max_total_tokens is not None and (self.tokens is None or self.tokens >= self.max_total_tokens)
        return over_cost or over_tokens

    def reason(self) -> str:
        """One line: which limit was reached, and how to go on."""
        if self.max_cost_usd is not None and (self.cost_usd is None or self.cost_usd >= self.max_cost_usd):
            spent = "an unknown amount (a call's usage or price is unknown)" if self.cost_usd is None else f"${self.cost_usd:.6g}"
            what = f"spent {spent} of run.max_cost_usd={self.max_cost_usd:g}"
        else:
            spent = "an unknown number (a call reported no usage)" if self.tokens is None else str(self.tokens)
            what = f"spent {spent} tokens of run.max_total_tokens={self.max_total_tokens}"
        where = f"run.resume={self.run_dir}" if self.run_dir is not None else "run.resume=<run dir>"
        return f"not sent: the run's budget is spent ({what}); raise it and resume with {where}"

    def not_sent(self) -> Trajectory:
        """The trajectory of a unit the budget kept from being sent."""
        return Trajectory(failure=Failure(BUDGET_EXCEEDED, self.reason(), attempts=0))
