"""The solver of a task with ``llm_judge`` scorers: the model answers, then the run's judges
rate the answer (:mod:`evalkit.benchmarks.task.judge` states the rules), all on the model
workers, every call through the engine (cache, retries, budget) like the model's own.

A judge call that fails after its retries, or a sample no judge gave a valid verdict for,
ends as a failure of the sample (``judge_error``, actor ``judge``; a budget refusal stays
``budget_exceeded``) that keeps the model's answer (``final_output``) and the judgements made
— never a score. An answer the task's extraction finds nothing in is not judged: it scores
0 (``format_error``) like every scorer's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from evalkit.benchmarks.base import Generate, Solver, strip_reasoning_prefix
from evalkit.benchmarks.task.judge import (
    ORDERS,
    accepted,
    answer_boundary,
    format_line,
    invalid_members,
    judge_variables,
    judgement,
    panel_score,
    reference_verdict,
    response_format,
)
from evalkit.benchmarks.task.scorers import extract
from evalkit.benchmarks.task.template import render
from evalkit.errors import DataError
from evalkit.types import Failure, Generator, Request, Sample, Trajectory

#: the failure kind of a sample its judges did not rate (:class:`evalkit.types.ErrorKind`)
JUDGE_ERROR = "judge_error"
BUDGET_EXCEEDED = "budget_exceeded"


def answer_of(settings: Any, output: str) -> str | None:
    """The answer the scorers and the judges see: the task's extraction of ``output`` (after
    ``strip_reasoning_prefix`` when it is set, as :func:`evalkit.engine.records.scored_view`
    does for scoring)."""
    if settings.strip_reasoning_prefix:
        stripped = strip_reasoning_prefix(output)
        output = output if stripped is None else stripped
    return extract(settings.extract, output)


def judged_answers(scorer: Any, sample: Sample, answer: str, order: str | None) -> list[str]:
    """The answers one judge request shows: ``answer`` and, pairwise, the row's ``against``."""
    return [answer] if order is None else [answer, str(sample.data.get(scorer.judge_setting("against"), ""))]


def judge_messages(settings: Any, scorer: Any, sample: Sample, answer: str, order: str | None) -> list[dict[str, Any]]:
    """The chat messages asking a judge about ``answer`` (:mod:`evalkit.benchmarks.task.judge`):
    the system message — the scorer's ``system`` (when set), then the protocol (the fence's
    boundary and note, the verdict's format: :func:`~evalkit.benchmarks.task.judge.format_line`),
    before any answer — and the user message, the ``rubric`` with each answer fenced as data;
    both rendered in the task's bounded sandbox.

    Raises:
        DataError: a template error or a prompt over ``prompt.max_chars`` (naming the sample).
    """
    bound, against = settings.prompt.max_chars, scorer.judge_setting("against")
    answers = judged_answers(scorer, sample, answer, order)
    boundary = answer_boundary(str(sample.id), answers, json.dumps([scorer.system, scorer.rubric]))
    variables = judge_variables(sample.data, answer, against, order, boundary)
    own = render(scorer.system, variables, bound, sample.id) + "\n\n" if scorer.system else ""
    return [{"role": "system", "content": own + format_line(scorer, boundary)},
            {"role": "user", "content": render(scorer.rubric or "", variables, bound, sample.id)}]


class JudgedGenerate(Solver):
    """One ``generate`` of the sample's request (:class:`Generate`), then every judge of
    ``judges`` (``{judge name: Generator}``, the panel in order) asked about the answer for
    each ``llm_judge`` scorer — pairwise scorers in both orders — concurrently. The calls'
    records go to ``data["judgements"]`` (shape: :func:`evalkit.benchmarks.task.judge.judgement`)."""

    needs_judges = True

    def __init__(self, settings: Any):
        self.settings = settings

    async def solve(self, sample: Sample, request: Request, agent: Generator, user: Generator | None,
                    judges: dict[str, Generator] | None = None) -> Trajectory:  # fmt: skip
        trajectory = await Generate().solve(sample, request, agent, user)
        if not judges:
            raise RuntimeError("a task with llm_judge scorers was solved without a judge")
        answer = answer_of(self.settings, trajectory.final_output)
        if answer is None:
            return trajectory  # nothing to judge: every scorer's 0, status format_error
        scorers = [s for s in self.settings.scorers if s.kind == "llm_judge"]
        calls = [(name, s, order) for s in scorers for name in judges
                 for order in (ORDERS if s.judge_setting("mode") == "pairwise" else (None,))]  # fmt: skip
        try:
            requests = [self._request(sample, name, s, order, answer) for name, s, order in calls]
        except DataError as exc:
            trajectory.failure = Failure(JUDGE_ERROR, f"the judge's prompt: {exc}"[:500], actor="judge")
            return trajectory
        results = await asyncio.gather(*(_ask(judges[name], s, name, order, req) for (name, s, order), req in zip(calls, requests)),
                                       return_exceptions=True)  # fmt: skip
        records = [r for r in results if isinstance(r, dict)]
        trajectory.data["judgements"] = records
        for result in results:
            if isinstance(result, BaseException):
                trajectory.failure = _call_failure(result)
                return trajectory
        for s in scorers:
            score, invalid = panel_score(s, records)
            if score is None:
                why = next((r["error"] for r in records if r["scorer"] == s.score_name and r.get("error")), "no verdict")
                trajectory.failure = Failure(JUDGE_ERROR,
                                             f"{s.score_name}: no valid verdict from {invalid} judge(s): {why}"[:500], actor="judge")  # fmt: skip
                return trajectory
            members = invalid_members(s, records)
            if members and s.judge_setting("invalid_verdict") == "fail":
                named = "; ".join(f"{name}: {why}" for name, why in members)
                trajectory.failure = Failure(JUDGE_ERROR, (f"{s.score_name}: the panel fails closed (invalid_verdict: fail): "
                                                           f"{len(members)} of {len(judges)} judges gave no valid verdict ({named})")[:500],
                                             actor="judge")  # fmt: skip
                return trajectory
        return trajectory

    def _request(self, sample: Sample, name: str, scorer: Any, order: str | None, answer: str) -> Request:
        fmt = response_format(scorer)
        meta = {"params": {"response_format": fmt} if fmt else {}, "turn": {"judge": name, "scorer": scorer.score_name, "order": order},
                "reference_verdict": gold_verdict(scorer, order)}  # fmt: skip
        meta["answers"] = judged_answers(scorer, sample, answer, order)
        return Request(sample.id, sample.subset, messages=judge_messages(self.settings, scorer, sample, answer, order), meta=meta)


def gold_verdict(scorer: Any, order: str | None) -> str:
    """The reference judge's verdict (JSON text) on the gold answer of ``model=reference``:
    :func:`~evalkit.benchmarks.task.judge.reference_verdict`, except that in a pairwise
    ``order`` the gold answer wins (``A`` when it is shown first, ``B`` second), so that a
    reference run scores the task's maximum, 1.0, pairwise too (a tie gave 0.5, issue 32)."""
    if order is None or scorer.judge_setting("mode") != "pairwise":
        return reference_verdict(scorer)
    return json.dumps({"winner": "A" if order == "model_first" else "B", "reason": "the gold answer"})


async def _ask(judge: Any, scorer: Any, name: str, order: str | None, request: Request) -> dict[str, Any]:
    """One judge call and its record; an answer that is not a valid verdict is returned but
    not kept in the response cache (``accept``), so that a resume asks again."""
    answers = request.meta.get("answers") or []
    completion = await judge.generate(request, accept=accepted(scorer, answers))
    return judgement(name, scorer, order, completion.text, cached=bool(completion.cached), answers=answers)


def _call_failure(exc: BaseException) -> Failure:
    """The sample's failure for a judge call that raised: its failure (``ModelCallError``'s)
    as ``judge_error`` naming the call's own kind — a budget refusal stays
    ``budget_exceeded`` — or the exception itself (re-raised: a bug)."""
    failure = getattr(exc, "failure", None)
    if not isinstance(failure, Failure):
        raise exc
    if failure.error_kind == BUDGET_EXCEEDED:
        return Failure(failure.error_kind, failure.message, attempts=failure.attempts, actor="judge")
    return Failure(JUDGE_ERROR, f"the judge's call failed ({failure.error_kind}): {failure.message}"[:500],
                   attempts=failure.attempts, actor="judge", throttled=failure.throttled, usage=failure.usage)  # fmt: skip
