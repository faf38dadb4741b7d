"""The run's budget: ``run.max_cost_usd`` (USD) and ``run.max_total_tokens`` (prompt +
completion tokens), for the run across its resumes.

:class:`Budget` starts from what the run's journal says was already spent (every row of
``predictions.jsonl``, ``failed.jsonl`` and the ``failed.prev-*.jsonl`` of earlier attempts
carries ``cost_usd`` and ``spent_tokens``, see :mod:`evalkit.engine.records`, plus
``unjournaled.jsonl``: what was answered or in flight, but not journaled, when an attempt
was interrupted).

**Reservations.** Every model call is sent only while *spent + reserved + its own
reservation* stays within each limit (:meth:`Budget.reserve`, asked by
:class:`evalkit.engine.solve.ActorModel` before each call, so a rollout, whose number of
calls is unknown in advance, is checked call by call). A call's reservation is an upper
bound of what it can cost: its prompt's tokens as litellm's ``token_counter`` estimates them
(0.947 of a provider's count in one measurement) times ``PROMPT_MARGIN`` plus
``PROMPT_SLACK_TOKENS``, plus ``max_tokens`` (``DEFAULT_COMPLETION_BOUND`` when
none is sent), priced when a price is known. A call that does not fit waits while others
are reserved (their settlement may leave room), and is refused once none is (or after
``RESERVE_WAIT_S``): the unit fails as ``budget_exceeded``. When a call ends, its
reservation is replaced by what it spent (:meth:`Budget.settle`): the priced usage it
reported, its reservation when it reported none, nothing for a response-cache hit or a
failed call without usage. So the run's spend ends at most one request's worth below a
limit, and above it only by what the estimate missed, at any concurrency.

Units not yet sent when a call was refused become failures of kind ``budget_exceeded``
(nothing was sent for them); units in flight finish and are kept. A model worker reaches
the budget through :class:`BudgetKeeper` (a Ray actor holding it). A spend that cannot be
measured (a provider that reports no usage in an earlier attempt run without a budget)
counts as unknown: the message says how to go on.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

from evalkit.errors import resume_arg, within
from evalkit.config import RunSettings
from evalkit.engine.solve import BUDGET_EXCEEDED
from evalkit.engine.records import Prices, price_key, price_of, spend
from evalkit.engine.rundir import FAILED, PREDICTIONS
from evalkit.journal import read_jsonl
from evalkit.providers import total_tokens
from evalkit.types import Failure, Trajectory

#: what was answered or in flight, but not journaled, when an attempt was interrupted
UNJOURNALED = "unjournaled.jsonl"
#: a prompt's reservation: litellm's estimate times this, plus PROMPT_SLACK_TOKENS (chat template, tools)
PROMPT_MARGIN = 1.25
PROMPT_SLACK_TOKENS = 64
#: the completion bound of a call that sends no max_tokens
DEFAULT_COMPLETION_BOUND = 16_384
#: a call that does not fit waits at most this long for others to settle (seconds)
RESERVE_WAIT_S = 600.0


def journal_spend(run_dir: Path) -> tuple[float | None, int | None]:
    """``(cost_usd, spent_tokens)`` summed over every journaled row of ``run_dir``
    (predictions and failures of every attempt); ``None`` when some row's spend is
    unknown (a row without the field, written before evalkit recorded it, is unknown)."""
    cost: float | None = 0.0
    tokens: int | None = 0
    files = [Path(run_dir) / PREDICTIONS, Path(run_dir) / FAILED, *sorted(Path(run_dir).glob("failed.prev-*.jsonl")),
             Path(run_dir) / UNJOURNALED]  # fmt: skip
    for path in files:
        for row in read_jsonl(path) if path.exists() else ():
            c, t = row.get("cost_usd"), row.get("spent_tokens")
            cost = cost + float(c) if cost is not None and isinstance(c, (int, float)) else None
            tokens = tokens + int(t) if tokens is not None and isinstance(t, int) else None
    return cost, tokens


class Budget:
    """What the run may still spend. ``max_cost_usd`` / ``max_total_tokens``: the limits
    (``None`` = none); ``prices``: the run's (:attr:`evalkit.engine.plan.RunPlan.prices`);
    ``cost_usd`` / ``tokens``: spent so far (``None`` = unknown); ``reserved_cost_usd`` /
    ``reserved_tokens``: the reservations of the calls in flight (``in_flight`` of them).
    Picklable (a :class:`BudgetKeeper` holds a copy)."""

    def __init__(self, max_cost_usd: float | None, max_total_tokens: int | None, prices: Prices,
                 cost_usd: float | None = 0.0, tokens: int | None = 0, run_dir: Path | None = None):  # fmt: skip
        self.max_cost_usd, self.max_total_tokens = max_cost_usd, max_total_tokens
        self.prices, self.cost_usd, self.tokens, self.run_dir = prices, cost_usd, tokens, run_dir
        self.reserved_cost_usd, self.reserved_tokens, self.in_flight = 0.0, 0, 0
        self.refused = False  # a call was refused: no further unit is dispatched
        self._cond: asyncio.Condition | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cond": None}

    @classmethod
    def of_run(cls, run: RunSettings, prices: Prices, run_dir: Path) -> "Budget":
        """The budget of ``run`` (``run.max_cost_usd``, ``run.max_total_tokens``) for the run in
        ``run_dir``, with its spend so far."""
        cost, tokens = journal_spend(run_dir)
        return cls(run.max_cost_usd, run.max_total_tokens, prices, cost, tokens, run_dir)

    @property
    def limited(self) -> bool:
        return self.max_cost_usd is not None or self.max_total_tokens is not None

    # -- reservations (before each call) -----------------------------------------------------
    def bound(self, actor: str, prompt_tokens: int, max_tokens: int | None) -> tuple[float, int]:
        """``(cost_usd, tokens)``: the reservation of one call of ``actor`` (a price key:
        ``agent`` / ``user`` / ``judge:<name>``, :func:`~evalkit.engine.records.price_key`) whose prompt ``token_counter`` estimates at ``prompt_tokens``, sending
        ``max_tokens``; its cost is 0 without a price (a cost limit then refuses at start-up,
        :func:`evalkit.config.validate`)."""
        prompt = math.ceil(prompt_tokens * PROMPT_MARGIN) + PROMPT_SLACK_TOKENS
        completion = int(max_tokens) if max_tokens else DEFAULT_COMPLETION_BOUND
        price = price_of(self.prices, price_key(actor))
        priced = price is not None and self.max_cost_usd is not None  # pricing imports litellm: only for a cost limit
        cost = price.cost({"prompt_tokens": prompt, "completion_tokens": completion}) if priced else None  # type: ignore[union-attr]
        return cost or 0.0, prompt + completion

    def _fits(self, cost: float, tokens: int) -> bool:
        fits_cost = self.max_cost_usd is None or (
            self.cost_usd is not None and self.cost_usd + self.reserved_cost_usd + cost <= self.max_cost_usd
        )
        fits_tokens = self.max_total_tokens is None or (
            self.tokens is not None and self.tokens + self.reserved_tokens + tokens <= self.max_total_tokens
        )
        return fits_cost and fits_tokens

    async def reserve(self, actor: str, prompt_tokens: int, max_tokens: int | None) -> tuple[float, int] | None:
        """Reserve one call's upper bound (:meth:`bound`) and return it, or ``None`` when it
        does not fit (waiting first while other calls hold reservations, at most
        ``RESERVE_WAIT_S``)."""
        held = self.bound(actor, prompt_tokens, max_tokens)
        if not self.limited:
            return held
        cond = self._cond = self._cond or asyncio.Condition()
        deadline = time.monotonic() + RESERVE_WAIT_S
        async with cond:
            while not self._fits(*held):
                left = deadline - time.monotonic()
                if self.in_flight == 0 or left <= 0:
                    self.refused = True
                    return None
                try:
                    await within(cond.wait(), left)
                except asyncio.TimeoutError:
                    pass
            self.reserved_cost_usd += held[0]
            self.reserved_tokens += held[1]
            self.in_flight += 1
        return held

    async def settle(self, held: tuple[float, int], actor: str, usage: dict[str, Any] | None, measured: bool) -> None:
        """Replace a call's reservation ``held`` by what it spent: its ``usage`` priced by
        ``actor``'s price when ``measured`` (a response-cache hit: ``usage`` ``None``, costs
        nothing), else the reservation itself (an answer without usage: its upper bound)."""
        if not self.limited:
            return
        cond = self._cond = self._cond or asyncio.Condition()
        async with cond:
            self.reserved_cost_usd = max(0.0, self.reserved_cost_usd - held[0])
            self.reserved_tokens -= held[1]
            self.in_flight -= 1
            if measured:
                price = price_of(self.prices, price_key(actor))
                priced = price is not None and usage is not None and self.max_cost_usd is not None
                cost = price.cost(usage) if priced else 0.0  # type: ignore[union-attr]
                tokens = total_tokens(usage) if usage is not None else 0
                if usage is not None and (cost is None or tokens is None):
                    cost, tokens = held
            else:
                cost, tokens = held
            self.cost_usd = None if self.cost_usd is None else self.cost_usd + (cost or 0.0)
            self.tokens = None if self.tokens is None else self.tokens + int(tokens or 0)
            cond.notify_all()

    def outstanding(self) -> dict[str, Any]:
        """What the calls in flight hold reserved (``cost_usd``, ``spent_tokens``)."""
        return {"cost_usd": self.reserved_cost_usd, "spent_tokens": self.reserved_tokens}

    # -- the driver's view (after each unit) -----------------------------------------------------
    def charge(self, trajectory: Trajectory) -> None:
        """Add what a finished unit spent (:func:`evalkit.engine.records.spend`; the driver's
        view, for its messages and its stop: what was not measured is left out, the keeper
        counted its reservation); a call the budget refused stops the dispatch."""
        if not self.limited:
            return
        failure = trajectory.failure
        if failure is not None and failure.error_kind == BUDGET_EXCEEDED:
            self.refused = True
        spent = spend(trajectory, self.prices)  # an unmeasured part: the keeper charged its reservation
        c, t = spent["cost_usd"], spent["spent_tokens"]
        self.cost_usd = self.cost_usd + c if self.cost_usd is not None and c is not None else self.cost_usd
        self.tokens = self.tokens + t if self.tokens is not None and t is not None else self.tokens

    def exhausted(self) -> bool:
        """True once a call was refused, a limit is reached, or the spend it limits is unknown."""
        over_cost = self.max_cost_usd is not None and (self.cost_usd is None or self.cost_usd >= self.max_cost_usd)
        over_tokens = self.max_total_tokens is not None and (self.tokens is None or self.tokens >= self.max_total_tokens)
        return self.refused or over_cost or over_tokens

    def reason(self) -> str:
        """One line: which limit was reached, and how to go on."""
        unknown = [k for k, limit, spent in (("run.max_cost_usd", self.max_cost_usd, self.cost_usd),
                                             ("run.max_total_tokens", self.max_total_tokens, self.tokens))
                   if limit is not None and spent is None]  # fmt: skip
        if unknown:
            return (f"not sent: {unknown[0]} cannot be checked: an earlier attempt of this run, without that budget, journaled "
                    f"an answer that reported no usage (or a model without a price); resume with {unknown[0]}=null, or "
                    "start a new run with the budget")
        spent = []
        if self.max_cost_usd is not None:
            spent.append(f"${self.cost_usd:.6g} of run.max_cost_usd={self.max_cost_usd:g}")
        if self.max_total_tokens is not None:
            spent.append(f"{self.tokens} tokens of run.max_total_tokens={self.max_total_tokens}")
        where = resume_arg(self.run_dir) if self.run_dir is not None else "run.resume=<run dir>"
        return (f"not sent: the run's budget is spent (spent {' and '.join(spent)}; a request is sent only while its upper "
                f"bound fits); raise it and resume with {where}")

    def not_sent(self) -> Trajectory:
        """The trajectory of a unit the budget kept from being sent."""
        return Trajectory(failure=Failure(BUDGET_EXCEEDED, self.reason(), attempts=0))


class BudgetKeeper:
    """The run's :class:`Budget` in a Ray actor (made one by :func:`keeper`), so that every
    model worker's calls reserve against one budget."""

    def __init__(self, budget: Budget):
        self.budget = budget

    async def reserve(self, actor: str, prompt_tokens: int, max_tokens: int | None) -> tuple[float, int] | None:
        return await self.budget.reserve(actor, prompt_tokens, max_tokens)

    async def settle(self, held: tuple[float, int], actor: str, usage: dict[str, Any] | None, measured: bool) -> None:
        await self.budget.settle(held, actor, usage, measured)

    def state(self) -> tuple[float | None, int | None, dict[str, Any]]:
        """``(cost_usd, tokens, outstanding)``: spent and still reserved."""
        return self.budget.cost_usd, self.budget.tokens, self.budget.outstanding()


def keeper(budget: Budget) -> Any:
    """A :class:`BudgetKeeper` actor holding ``budget`` on the driver's node (a cluster's worker
    node may be lost; the driver's is the run's own), no CPU reserved."""
    import ray  # deferred: offline runs never import Ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0, max_concurrency=10_000)(BudgetKeeper).options(scheduling_strategy=here).remote(budget)


class RemoteBudget:
    """A worker's handle on the :class:`BudgetKeeper`: the calls of :class:`Budget` a model
    call makes (``reserve`` before, ``settle`` after), through Ray."""

    limited = True

    def __init__(self, handle: Any):
        self.handle = handle

    def bound(self, actor: str, prompt_tokens: int, max_tokens: int | None) -> tuple[float, int]:  # pragma: no cover - unused
        raise NotImplementedError

    async def reserve(self, actor: str, prompt_tokens: int, max_tokens: int | None) -> tuple[float, int] | None:
        return await self.handle.reserve.remote(actor, prompt_tokens, max_tokens)

    async def settle(self, held: tuple[float, int], actor: str, usage: dict[str, Any] | None, measured: bool) -> None:
        await self.handle.settle.remote(held, actor, usage, measured)
