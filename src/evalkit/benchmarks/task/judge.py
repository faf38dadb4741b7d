"""LLM judges of a YAML task's ``llm_judge`` scorer: the judge's request, its verdict's
schema, how a verdict is read and how verdicts combine.

**Requests.** A judge is asked with the scorer's ``system`` (optional) and ``rubric``, both
Jinja2 templates rendered in the task's bounded sandbox with the row's columns plus
``input``, ``target``, ``output`` (the answer judged: the task's extraction of the model's
output) and, pairwise, ``answer_a`` / ``answer_b``. A line asking for one JSON object that
matches the verdict's schema (:func:`verdict_schema`) follows the rubric; with
``response_format: json_schema`` the schema is also sent as the request's
``response_format`` (part of the request's identity, as every parameter sent).

**Verdicts** (:func:`read_verdict`): the first JSON object of the judge's reply (at most
:data:`MAX_VERDICT_CHARS` characters are read) that validates against the schema, read
by the same bounded validator as the ``json_schema`` scorer. Anything else is an invalid
verdict — so is an object holding ``NaN``, ``Infinity`` or a number past the float range
anywhere (not JSON, RFC 8259: it would make the journal and MLflow's spans non-JSON). The value of one verdict (:func:`verdict_value`), for the answer judged:

* pointwise ``score``: ``(score − scale_min) / (scale_max − scale_min)``;
* pointwise ``pass_fail``: pass 1, fail 0;
* pairwise: ``winner`` ``A`` / ``B`` / ``tie`` → win 1, tie 0.5, loss 0, where the answer
  judged is ``A`` in the order ``model_first`` and ``B`` in ``model_second``.

**Position bias** (:func:`judge_value`): pairwise, each judge is asked in both orders and
its value is the mean of the two outcomes — a judge that always prefers the first position
scores a win and a loss, 0.5, as a tie. A judge with an invalid verdict in either order has
no value.

**Panels** (:func:`combine`): the judges with a value are combined by ``panel``: ``mean``
(their mean) or ``majority`` (pass/fail only: 1 when more than half of them pass, 0 when
more than half fail, 0.5 on a tie). Judges without a value are excluded and counted
(``<name>_invalid`` in the sample's scores, EvalScope's rule). When none has a value, the
sample is a ``judge_error`` failure (never a 0); so is a judge call that failed after its
retries (a resume asks again).

**Per-call records** (:func:`judgement`): each call is one entry of the trajectory's
``data["judgements"]`` (a journal row's ``judgements``)::

    {"judge": "<judge model config name>", "scorer": "<score name>",
     "order": "model_first" | "model_second" | null (pointwise),
     "text": "<the reply, at most MAX_VERDICT_CHARS characters>" | null (the call failed),
     "verdict": {...the JSON object} | null, "valid": bool, "value": float | null,
     "error": "<why invalid, or the call's failure>" | null, "cached": bool}

and its statistics are one entry of ``turns`` with ``actor: "judge"`` and the same
``judge``, ``scorer`` and ``order``.

**The reference judge** (``judge=reference``, implied for ``model=reference``): answers the
gold verdict — the top score, ``pass``, or pairwise ``tie`` (the gold answer against itself)
— through the same path; it judges only the gold answers of ``model=reference``.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.benchmarks.task.scorers import schema_errors

#: characters of a judge's reply read (and kept in the record) at most
MAX_VERDICT_CHARS = 20_000
#: JSON objects of a reply tried at most before it is an invalid verdict
VERDICT_TRIES = 16
#: the pairwise orders: where the answer judged stands (``A`` first, ``B`` second)
ORDERS = ("model_first", "model_second")


def verdict_schema(scorer: Any) -> dict[str, Any]:
    """The JSON schema a verdict of ``scorer`` (an ``llm_judge``
    :class:`~evalkit.benchmarks.task.settings.Scorer`) must match."""
    if scorer.judge_setting("mode") == "pairwise":
        field = {"winner": {"type": "string", "enum": ["A", "B", "tie"]}}
    elif scorer.judge_setting("verdict") == "pass_fail":
        field = {"verdict": {"type": "string", "enum": ["pass", "fail"]}}
    else:
        lo, hi = scorer.judge_setting("scale_min"), scorer.judge_setting("scale_max")
        field = {"score": {"type": "integer", "minimum": lo, "maximum": hi}}
    return {"type": "object", "properties": {"reason": {"type": "string"}, **field}, "required": list(field)}


def response_format(scorer: Any) -> dict[str, Any] | None:
    """The ``response_format`` parameter sent with a judge request (``None``: not sent)."""
    if scorer.judge_setting("response_format") == "none":
        return None
    return {"type": "json_schema", "json_schema": {"name": "verdict", "schema": verdict_schema(scorer)}}


def format_line(scorer: Any) -> str:
    """The line after the rubric asking for the verdict's JSON object."""
    schema = json.dumps(verdict_schema(scorer), ensure_ascii=False, sort_keys=True)
    return f"\n\nReply with one JSON object only, matching this JSON schema: {schema}"


def judge_variables(data: dict[str, Any], answer: str, against: str, order: str | None) -> dict[str, Any]:
    """The rubric's variables: the row's, ``output`` (the answer judged) and, in a pairwise
    ``order``, ``answer_a`` / ``answer_b`` (the other answer is the row's ``against`` field)."""
    out = {**data, "output": answer}
    if order is not None:
        other = str(data.get(against, ""))
        out["answer_a"], out["answer_b"] = (answer, other) if order == "model_first" else (other, answer)
    return out


def read_verdict(text: str | None, schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``(verdict, None)``: the first JSON object of ``text`` valid against ``schema``, or
    ``(None, why)``. Reads at most :data:`MAX_VERDICT_CHARS` characters and
    :data:`VERDICT_TRIES` objects; never raises."""
    if not text or not text.strip():
        return None, "empty reply"
    text = text[:MAX_VERDICT_CHARS]
    decoder = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)
    start, why = text.find("{"), "no JSON object in the reply"
    for _ in range(VERDICT_TRIES):
        if start < 0:
            break
        try:
            value, _ = decoder.raw_decode(text, start)
        except _NotJson as exc:
            why = f"not JSON: {exc}"
            start = text.find("{", start + 1)
            continue
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        problem = schema_errors(value, schema) if isinstance(value, dict) else "not a JSON object"
        if problem is None:
            return value, None
        why = f"does not match the verdict schema: {problem}"
        start = text.find("{", start + 1)
    return None, why


class _NotJson(ValueError):
    """A value Python's decoder takes but JSON (RFC 8259) has not: ``NaN``, ``±Infinity``,
    a number past the float range."""


def _not_json(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotJson(f"{text[:40]} is past the float range")
    return value


def verdict_value(scorer: Any, verdict: dict[str, Any], order: str | None) -> float:
    """The value of one valid verdict for the answer judged (module docstring)."""
    if scorer.judge_setting("mode") == "pairwise":
        winner = verdict["winner"]
        if winner == "tie":
            return 0.5
        return float(winner == ("A" if order == "model_first" else "B"))
    if scorer.judge_setting("verdict") == "pass_fail":
        return float(verdict["verdict"] == "pass")
    lo, hi = scorer.judge_setting("scale_min"), scorer.judge_setting("scale_max")
    return (int(verdict["score"]) - lo) / (hi - lo)


def judgement(judge: str, scorer: Any, order: str | None, text: str | None, cached: bool = False,
              error: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The record of one judge call (module docstring): the reply ``text`` read as a
    verdict, or the call's ``error`` when it failed (``text`` ``None``)."""
    verdict, why = (None, error) if text is None else read_verdict(text, verdict_schema(scorer))
    value = verdict_value(scorer, verdict, order) if verdict is not None else None
    kept = text[:MAX_VERDICT_CHARS] if text is not None else None
    return {"judge": judge, "scorer": scorer.score_name, "order": order, "text": kept, "verdict": verdict,
            "valid": verdict is not None, "value": value, "error": why, "cached": cached}  # fmt: skip


def judge_value(records: list[dict[str, Any]]) -> float | None:
    """One judge's value from its records of one scorer (one pointwise record, or one per
    order): the mean of the orders' values, ``None`` when any is invalid or missing."""
    values = [r.get("value") for r in records]
    if not values or any(not r.get("valid") or not isinstance(v, (int, float)) for r, v in zip(records, values)):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def combine(values: list[float | None], panel: str) -> tuple[float | None, int]:
    """``(score, invalid)``: the panel's score from its judges' values (``None``: no
    value) by ``panel`` (``mean`` / ``majority``, module docstring), and how many judges
    had none; the score is ``None`` when no judge had a value."""
    valid = [float(v) for v in values if v is not None]
    invalid = len(values) - len(valid)
    if not valid:
        return None, invalid
    if panel == "majority":
        passes = sum(v >= 0.5 for v in valid)
        if 2 * passes > len(valid):
            return 1.0, invalid
        return (0.0 if 2 * passes < len(valid) else 0.5), invalid
    return sum(valid) / len(valid), invalid


def panel_score(scorer: Any, records: list[dict[str, Any]]) -> tuple[float | None, int]:
    """:func:`combine` of ``scorer``'s ``records`` over the judges they name (the panel)."""
    mine = [r for r in records if isinstance(r, dict) and r.get("scorer") == scorer.score_name]
    judges = list(dict.fromkeys(str(r.get("judge")) for r in mine))
    values = [judge_value([r for r in mine if str(r.get("judge")) == name]) for name in judges]
    return combine(values, scorer.judge_setting("panel"))


def reference_verdict(scorer: Any) -> str:
    """The gold verdict the reference judge answers (module docstring), as JSON text."""
    if scorer.judge_setting("mode") == "pairwise":
        return json.dumps({"winner": "tie", "reason": "the gold answer against itself"})
    if scorer.judge_setting("verdict") == "pass_fail":
        return json.dumps({"verdict": "pass", "reason": "the gold answer"})
    return json.dumps({"score": scorer.judge_setting("scale_max"), "reason": "the gold answer"})
