"""One sample, solved: every model call through the response cache and the model's retry
policy, every failure turned into data, and one path for every benchmark.

:func:`solve_unit` runs the benchmark's solver on a work item (one ``generate`` for a
single-turn sample, the rollout loop for an agent sample) with its models wrapped in
:class:`ActorModel`, and returns the :class:`~evalkit.types.Trajectory` — with
``failure`` set instead of raising when a model call failed after its retries (actor
``agent``, the model under test, ``user`` or ``judge``) or the solver itself crashed (actor
``environment``): the :class:`~evalkit.types.Actor` values. A solver with ``needs_judges``
is given the run's judges (``judges={name: ActorModel}``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Callable

from evalkit.engine.cache import cache_get, cache_set
from evalkit.engine.records import price_key
from evalkit.engine.work import WorkItem
from evalkit.models.base import ModelCallError
from evalkit.providers import estimate_prompt_tokens, structured_output
from evalkit.types import Actor, Completion, Failure, Request, Trajectory

log = logging.getLogger(__name__)

#: the failure kind of a call the run's budget kept from being sent (evalkit.engine.budget)
BUDGET_EXCEEDED = "budget_exceeded"  # ErrorKind.BUDGET_EXCEEDED (a literal: tests/test_error_kinds.py scans for it)


async def call_model(model: Any, request: Request, cache: Any = None, accept: Callable[[Completion], bool] | None = None) -> Completion | Failure:
    """One request through cache → model (with its retries) → Completion or Failure.

    Only successful, non-empty completions are cached — and, with ``accept``, only those it
    accepts (a judge's reply that is no valid verdict is asked again next time); the key is
    ``request.request_hash(model.model_id)`` (model id + every parameter sent + exact
    prompt), so changing anything sent misses.
    """
    key = request.request_hash(model.model_id) if cache is not None else None
    if key is not None:
        completion = cache_get(cache, key)
        if completion is not None:
            completion.cached = True
            completion.attempts = completion.throttled = 0
            completion.latency_s = 0.0
            return completion
    try:
        completion = await model.generate(request)
    except ModelCallError as exc:
        return exc.failure
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a model must not kill the run
        log.exception("model raised unexpectedly")
        return Failure("internal", f"{type(exc).__name__}: {exc}"[:500])
    if key is not None and (accept is None or accept(completion)):
        stored = completion.to_dict()
        stored["cached"] = False
        cache_set(cache, key, stored)
    return completion


class ActorModel:
    """A model as a solver sees it: parameters filled in, every call through :func:`call_model`
    (cache, retries, failure conversion), per-call statistics appended to ``turns`` (with
    ``started_at`` / ``ended_at``, Unix seconds, of the call, retries included, and the
    request's ``meta["turn"]`` fields: a judge call's ``judge``, ``scorer``, ``order``); a
    failed call raises :class:`ModelCallError` naming ``actor`` (an :class:`~evalkit.types.Actor`
    value: ``agent``, ``user`` or ``judge``), the name its turns and failures carry.
    ``price_key``: the entry of the run's prices its calls are priced and reserved by
    (``agent``, ``user``, ``judge:<name>``; :func:`evalkit.engine.records.price_key`)."""

    def __init__(self, model: Any, cache: Any, actor: str, params: dict[str, Any], turns: list[dict[str, Any]], epoch: int = 0,
                 budget: Any = None, price_key: str | None = None):  # fmt: skip
        self.model = model
        self.cache = cache
        self.actor = actor
        self.params = params
        self.turns = turns
        self.epoch = epoch
        self.model_id = getattr(model, "model_id", actor)
        self.budget = budget  # the run's budget gate (evalkit.engine.budget), None without limits
        self.price_key = price_key or actor

    async def generate(self, request: Request, accept: Callable[[Completion], bool] | None = None) -> Completion:
        """The answer to ``request`` (its ``meta["params"]`` added to the actor's parameters
        when it sets none, a ``response_format`` in the form the model takes); ``accept``:
        which answers the response cache keeps."""
        if not request.params:
            params = {**self.params, **(request.meta.get("params") or {})}
            request.params = structured_output(params, getattr(self.model, "response_format", None))  # as sent: its identity
        request.epoch = self.epoch  # every turn of epoch e carries e in its identity
        started_at = time.time()
        if self.budget is None:
            result = await call_model(self.model, request, self.cache, accept)
        else:
            result = await self._within_budget(request, accept)
        if isinstance(result, Failure):
            result.actor = self.actor
            raise ModelCallError(result)
        self.turns.append(
            {
                "actor": self.actor,
                **(request.meta.get("turn") or {}),
                "latency_s": round(result.latency_s, 4),
                "usage": result.usage,
                "attempts": result.attempts,
                "throttled": result.throttled,
                "cached": result.cached,
                "finish_reason": result.finish_reason,
                "reasoning": result.reasoning,
                "started_at": round(started_at, 6),
                "ended_at": round(time.time(), 6),
            }
        )
        return result


    async def _within_budget(self, request: Request, accept: Callable[[Completion], bool] | None = None) -> Completion | Failure:
        """:func:`call_model` once the budget has reserved the call's upper bound (a
        ``budget_exceeded`` Failure, nothing sent, when it has no room), the reservation
        then replaced by what the call spent (:meth:`evalkit.engine.budget.Budget.settle`)."""
        provider_model = str(getattr(self.model, "provider_model", "gpt-3.5-turbo"))
        try:
            estimate = estimate_prompt_tokens(provider_model, request.messages, request.prompt)
        except Exception:  # noqa: BLE001 - a prompt litellm cannot count: its UTF-8 bytes bound any byte-level tokenizer's count
            estimate = len(json.dumps([request.messages, request.prompt], ensure_ascii=False).encode("utf-8", errors="surrogatepass"))
        held = await self.budget.reserve(self.price_key, estimate, request.params.get("max_tokens"))
        if held is None:
            return Failure(BUDGET_EXCEEDED, "not sent: the run's budget has no room for this request's upper bound", attempts=0)
        usage, measured = None, False  # cancelled in flight: the reservation counts as spent
        try:
            result = await call_model(self.model, request, self.cache, accept)
            usage = result.usage if isinstance(result, Failure) or not result.cached else None
            measured = isinstance(result, Failure) or result.cached or result.usage is not None
            return result
        finally:
            await self.budget.settle(held, self.price_key, usage, measured)


class KeptAnswer:
    """The model under test answering with what it answered before (``WorkItem.kept_output``:
    a ``judge_error`` sample being resumed): nothing is sent, the turn is ``cached``."""

    offline = True

    def __init__(self, text: str, model_id: str):
        self.text, self.model_id = text, model_id

    async def generate(self, request: Request) -> Completion:
        return Completion(text=self.text, finish_reason="stop", attempts=0, cached=True)


async def solve_unit(
    solver: Any, unit: WorkItem, agents: Any, cache: Any, agent_params: dict[str, Any], user_params: dict[str, Any],
    budget: Any = None,
) -> Trajectory:
    """Solve one unit with ``agents.pair(sample)``; never raises (but for cancellation).
    ``budget``: the run's budget gate, asked before each model call (``None``: no limits).

    The model under evaluation is ``agent`` (single-turn or rollout), the user simulator
    ``user``, in the turns and in ``failed.jsonl``'s ``actor`` alike."""
    turns: list[dict[str, Any]] = []
    agent, user = agents.pair(unit.sample)
    if unit.kept_output is not None and not unit.rollout:
        agent = KeptAnswer(unit.kept_output, getattr(agent, "model_id", "model"))
    epoch = unit.request.epoch
    agent_cache = None if getattr(agent, "offline", False) else cache  # an offline answer is not a call worth keeping
    wrapped_agent = ActorModel(agent, agent_cache, Actor.AGENT.value, agent_params, turns, epoch, budget)
    wrapped_user = ActorModel(user, cache, Actor.USER.value, user_params, turns, epoch, budget) if user is not None else None
    extra: dict[str, Any] = {}
    if getattr(solver, "needs_judges", False):  # the judges: a third actor, through the same calls
        extra["judges"] = {name: ActorModel(model, None if getattr(model, "offline", False) else cache, Actor.JUDGE.value, params, turns,
                                            epoch, budget, price_key("judge", name))
                           for name, (model, params) in getattr(agents, "judges", {}).items()}  # fmt: skip
    try:
        trajectory = await solver.solve(unit.sample, unit.request, wrapped_agent, wrapped_user, **extra)
    except ModelCallError as exc:
        trajectory = Trajectory(failure=exc.failure)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a crashing environment must not kill the run
        log.exception("solving %s raised", unit.sample.id)
        trajectory = Trajectory(failure=Failure("environment", f"{type(exc).__name__}: {exc}"[:500], actor=Actor.ENVIRONMENT.value))
    trajectory.turns = turns
    if trajectory.failure is not None and not (trajectory.failure.error_kind == BUDGET_EXCEEDED and not turns):
        trajectory.failure.attempts = max(trajectory.failure.attempts, 1)  # a unit the budget kept back: nothing sent
    return trajectory
