"""The journal records of a unit: one builder for ``predictions.jsonl`` rows (every
benchmark, single-turn or rollout) and one for ``failed.jsonl`` rows.

Record contract (ARCHITECTURE.md; extend, don't rename): ``sample_id``, ``subset``,
``status``, ``output``, ``parsed``, ``scores``, ``checks``, ``failed_checks``, ``detail``,
``request_hash``, ``prompt_hash``, then ``raw_output`` (completion mode), ``usage``,
``latency_s``, ``attempts``, ``throttled``, ``cached``, ``finish_reason``, ``reasoning``
(never scored), ``started_at`` / ``ended_at`` (Unix seconds of the model calls), ``n_turns``,
``epoch`` (the repeat, 0 for the first), ``images`` when the request carries images (each
one's ``{"sha256", "media_type", "bytes", "width", "height"}`` in order of first appearance,
never its bytes: those are stored once per run in ``images/<sha256>.<ext>``) and, for a rollout, the whole ``trajectory`` (so that
``rescore`` needs nothing else; a readable copy goes to ``trajectories/<unit file name>``).

Tokens and money (:mod:`evalkit.providers`): ``usage`` sums the provider's counts over the
sample's calls (``prompt_tokens``, ``completion_tokens``, ``reasoning_tokens``,
``cached_prompt_tokens``; ``null`` when no call reported any), ``usage_by_actor`` splits
a rollout's between ``agent`` and ``user``, and a judged answer's between ``agent`` and
``judge`` (:func:`usage_by_actor`); ``cost_usd`` (USD) and ``spent_tokens``
(prompt + completion) are what this run spent on the sample (:func:`spend`: a cache hit
costs nothing; ``null`` when a price or a count is unknown, never 0; each call priced by
its own model, a judge's by that judge's). A ``failed.jsonl`` row carries the same three,
for the calls its sample made before failing.

LLM judges (a task's ``llm_judge`` scorers): a judged row has ``judgements``, one record per
judge call (``{"judge", "scorer", "order", "text", "verdict", "valid", "value", "error",
"cached"}``, :func:`evalkit.benchmarks.task.judge.judgement`, plus ``call``: the call's
statistics, :func:`judgement_calls`), which ``rescore`` scores again; each call is also a
turn with ``actor: "judge"`` and its ``judge``, ``scorer`` and ``order``. A ``judge_error`` row of ``failed.jsonl`` keeps the model's ``output``, the
``judgements`` made and ``usage_by_actor``.

Reasoning rule (:func:`scored_view`): ``reasoning_rule`` names the rule the scored
``output`` went through; with ``benchmark.strip_reasoning_prefix`` a stripped answer keeps
its whole text as ``output_unstripped``.

A row is at most :data:`MAX_LINE_BYTES` of JSON: over it, the model's texts (``output``,
``raw_output``, ``output_unstripped``, ``reasoning``, ``trajectory``) move whole to
``large/<unit file name>`` and the row keeps their first :data:`KEPT_CHARS` characters
plus ``large`` = ``{"file", "bytes", "sha256", "fields"}``;
:func:`evalkit.untrusted.with_side_file` puts them back for every reader that scores
(``rescore``, ``model=replay`` of a ``predictions.jsonl``), checking size and sha256.
A unit file name (:func:`evalkit.jsonl.unit_file_name`) is a digest of (sample id, epoch):
any id, however long or strange, and every epoch of a repeated sample get files of their own.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from evalkit import secrets
from evalkit.benchmarks.base import Benchmark, strip_reasoning_prefix
from evalkit.engine.work import WorkItem
from evalkit.images import image_facts
from evalkit.journal import read_jsonl
from evalkit.jsonl import dumps_line, unit_file_name, write_unit_file
from evalkit.untrusted import SIDE_FILE_FIELDS, with_side_file
from evalkit.providers import Price, add_usage, total_tokens
from evalkit.types import Failure, SampleScore, Trajectory, sha256_hex

#: ``{"agent": price, "user": price}`` of a run's models (``None``: no price known)
Prices = dict[str, Price | None]

#: the failure kind of a sample its judges did not rate (:class:`evalkit.types.ErrorKind`)
JUDGE_ERROR = "judge_error"

#: the largest ``predictions.jsonl`` line evalkit writes (bytes of UTF-8)
MAX_LINE_BYTES = 1024 * 1024
#: characters of each moved text a capped row keeps in line
KEPT_CHARS = 4096


def reasoning_rule(bench: Benchmark) -> str:
    """The reasoning rule a run of ``bench`` scores under (``reasoning_rule`` of its rows)."""
    if bench.settings.strip_reasoning_prefix:
        return f"strip_reasoning_prefix (text up to the last </think> removed), then {bench.reasoning_rule}"
    return bench.reasoning_rule


def scored_view(bench: Benchmark, trajectory: Trajectory) -> tuple[Trajectory, dict[str, Any]]:
    """The trajectory as the benchmark scores it, and the row fields that say so.

    The one place a reasoning rule is chosen, for runs and ``rescore`` alike: here rather
    than in ``Benchmark.score_sample``, which benchmarks override (ACEBench does), and
    beside the record builder, which must say which rule ran and keep what was removed.
    ``reasoning_rule`` names the benchmark's own rule (:attr:`Benchmark.reasoning_rule`),
    preceded by ``strip_reasoning_prefix`` when ``benchmark.strip_reasoning_prefix`` is
    on; then an answer holding ``</think>`` is scored without everything up to its last
    one, and ``output_unstripped`` keeps the whole answer. Stripping twice changes nothing,
    so ``rescore`` of the stripped ``output`` agrees with the run.
    """
    rule: dict[str, Any] = {"reasoning_rule": reasoning_rule(bench)}
    if not bench.settings.strip_reasoning_prefix:
        return trajectory, rule
    stripped = strip_reasoning_prefix(trajectory.final_output)
    if stripped is None:
        return trajectory, rule
    rule["output_unstripped"] = trajectory.final_output
    return replace(trajectory, final_output=stripped), rule


#: the actors a turn can have (``turns[*].actor``): the model under test, the user simulator, a judge
ACTORS = ("agent", "user", "judge")


def _actor(turn: dict[str, Any]) -> str:
    """A turn's actor: ``user`` / ``judge``, else the model under test (``agent``)."""
    actor = turn.get("actor")
    return actor if actor in ("user", "judge") else "agent"


def price_key(actor: str | None, judge: str | None = None) -> str:
    """The entry of the run's prices (:attr:`evalkit.engine.plan.RunPlan.prices`) a call of
    ``actor`` is priced by: ``agent`` (the model under test: actor ``agent`` / ``model``),
    ``user``, or ``judge:<name>`` for judge ``judge`` (``judge`` alone when the name is not
    known: :func:`price_of` then takes the first judge's price)."""
    if actor == "user":
        return "user"
    if actor == "judge":
        return f"judge:{judge}" if judge else "judge"
    return actor if actor is not None and actor.startswith("judge:") else "agent"


def price_of(prices: Prices, key: str) -> Price | None:
    """``prices[key]`` (:func:`price_key`); for ``judge`` alone, the first judge's."""
    if key == "judge":
        return next((v for k, v in prices.items() if k.startswith("judge:")), None)
    return prices.get(key)


def usage_of(turns: list[dict[str, Any]], actor: str | None = None) -> dict[str, int] | None:
    """The calls' ``usage`` summed per key (of ``actor``'s calls only when given: ``agent``,
    ``user`` or ``judge``); ``None`` when none of them reported usage."""
    usage: dict[str, int] | None = None
    for turn in turns:
        if actor is None or _actor(turn) == actor:
            usage = add_usage(usage, turn.get("usage"))
    return usage


def usage_by_actor(trajectory: Trajectory, rollout: bool) -> dict[str, Any] | None:
    """``usage_by_actor`` of a row: :func:`usage_of` per actor taking part — ``agent`` and
    ``user`` in a rollout, ``agent`` and ``judge`` when judges were asked (both for a judged
    rollout) — a failed call's reported usage with its actor; ``None`` (no field) for a
    single-turn answer no judge rated."""
    judged = any(_actor(t) == "judge" for t in trajectory.turns) or (trajectory.failure is not None and trajectory.failure.actor == "judge")
    if not rollout and not judged:
        return None
    out = {actor: usage_of(trajectory.turns, actor) for actor in ACTORS if actor != "user" or rollout}
    if not judged:
        out.pop("judge")
    failure = trajectory.failure
    if failure is not None and failure.usage is not None:
        who = failure.actor if failure.actor in out else "agent"
        out[who] = add_usage(out[who], failure.usage)
    return out


def spend(trajectory: Trajectory, prices: Prices) -> dict[str, Any]:
    """What this run spent on one unit: ``cost_usd`` (USD) and ``spent_tokens`` (prompt +
    completion tokens) over the model calls it sent — a response-cache hit costs nothing —
    plus the usage a failed call reported. Each call is priced by its actor's model
    (``prices["agent"]`` / ``prices["user"]`` / ``prices["judge:<name>"]``, :func:`price_key`). ``None`` (never 0) when a sent call's count
    or its model's price is unknown; an offline model (free, no counts) spends 0 of both."""
    calls = [(price_key(t.get("actor"), t.get("judge")), t.get("usage")) for t in trajectory.turns if not t.get("cached")]
    if trajectory.failure is not None and trajectory.failure.usage is not None:
        calls.append((price_key(trajectory.failure.actor), trajectory.failure.usage))
    cost: float | None = 0.0
    tokens: int | None = 0
    for key, usage in calls:
        price = price_of(prices, key)
        call_cost = price.cost(usage) if price is not None else None
        call_tokens = 0 if usage is None and price is not None and price.source == "offline" else total_tokens(usage)
        cost = None if cost is None or call_cost is None else cost + call_cost
        tokens = None if tokens is None or call_tokens is None else tokens + call_tokens
    return {"cost_usd": cost, "spent_tokens": tokens}


def turn_totals(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over a trajectory's model calls: ``usage`` (:func:`usage_of`), ``latency_s``,
    ``attempts``, ``throttled``, ``cached`` (every call answered from the cache), of the
    model under evaluation's calls the last ``finish_reason`` and the ``reasoning`` texts,
    and ``started_at`` / ``ended_at`` (Unix seconds: the first call's start, the last call's
    end; ``None`` without calls)."""
    usage = usage_of(turns)
    agent = [t for t in turns if _actor(t) == "agent"]
    reasoning = [t["reasoning"] for t in agent if t.get("reasoning")]
    return {
        "usage": usage,
        "latency_s": round(sum(t.get("latency_s", 0.0) for t in turns), 4),
        "attempts": sum(t.get("attempts", 0) for t in turns),
        "throttled": sum(t.get("throttled", 0) for t in turns),
        "cached": bool(turns) and all(t.get("cached") for t in turns),
        "finish_reason": agent[-1].get("finish_reason") if agent else None,
        "reasoning": "\n\n".join(reasoning) if reasoning else None,
        "started_at": min((t["started_at"] for t in turns if "started_at" in t), default=None),
        "ended_at": max((t["ended_at"] for t in turns if "ended_at" in t), default=None),
    }


#: the statistics of a judge call's turn that its judgement record carries as ``call``
CALL_FIELDS = ("latency_s", "usage", "attempts", "throttled", "cached", "started_at", "ended_at")


def judgement_calls(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory's judgement records (``data["judgements"]``), each with ``call``: the
    statistics of its judge call's turn (:data:`CALL_FIELDS`; the turn of the same
    ``judge``, ``scorer`` and ``order``), ``None`` when the call has no turn."""
    records = trajectory.data.get("judgements")
    turns = {(t.get("judge"), t.get("scorer"), t.get("order")): t for t in trajectory.turns if _actor(t) == "judge"}
    out = []
    for record in records if isinstance(records, list) else []:
        turn = turns.get((record.get("judge"), record.get("scorer"), record.get("order"))) if isinstance(record, dict) else None
        out.append({**record, "call": {k: turn.get(k) for k in CALL_FIELDS} if turn is not None else None} if isinstance(record, dict) else record)
    return out


def prediction_record(unit: WorkItem, model_id: str, trajectory: Trajectory, scored: SampleScore, prices: Prices,
                      rule: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """One ``predictions.jsonl`` row of a unit whose scored view (``trajectory``) and rule
    fields (``rule``) come from :func:`scored_view`. A single-turn answer cut at the token
    limit (``finish_reason=length``) that scored ``ok`` has status ``truncated``."""
    totals = turn_totals(trajectory.turns)
    status = scored.status
    if status == "ok" and not unit.rollout and totals["finish_reason"] == "length":
        status = "truncated"
    row: dict[str, Any] = {
        "sample_id": unit.sample.id,
        "subset": unit.sample.subset,
        "status": status,
        "output": trajectory.final_output,
        "parsed": scored.parsed,
        "scores": scored.scores,
        "checks": scored.checks,
        "failed_checks": scored.failed_checks,
        "detail": scored.detail,
        "request_hash": unit.request.request_hash(model_id),
        "prompt_hash": unit.request.prompt_hash(),
        "epoch": unit.request.epoch,
    }
    if scored.scoring_rule is not None:
        row["scoring_rule"] = scored.scoring_rule  # which scoring rule decided (ACEBench benchmark.scoring)
    if "raw_output" in trajectory.data:
        row["raw_output"] = trajectory.data["raw_output"]
    row.update(rule)
    row.update(totals)
    by_actor = usage_by_actor(trajectory, unit.rollout)
    if by_actor is not None:
        row["usage_by_actor"] = by_actor
    if "judgements" in trajectory.data:
        row["judgements"] = judgement_calls(trajectory)
    row.update(spend(trajectory, prices))
    row["n_turns"] = len(trajectory.turns)
    if unit.request.images:  # each image's digest, size and shape; its bytes are in the run's images/ folder
        row["images"] = image_facts(unit.request.messages)
    if unit.rollout:
        row["trajectory"] = trajectory.to_dict()
    return row


def _line_bytes(row: dict[str, Any]) -> int:
    return len(dumps_line(row).encode("utf-8", errors="surrogatepass"))


def cap_record(row: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``row`` as journaled: unchanged when its line fits :data:`MAX_LINE_BYTES`, else with
    the model's texts moved to ``large/<unit file name>`` (:func:`evalkit.jsonl.unit_file_name`
    of the sample id and epoch; see the module docstring).

    Raises:
        SideFileError: the side file cannot be written (a link planted in the run directory).
    """
    if _line_bytes(row) <= MAX_LINE_BYTES:
        return row
    moved = {k: row[k] for k in SIDE_FILE_FIELDS if row.get(k) is not None}
    text = json.dumps(secrets.scrub_obj(moved), ensure_ascii=False, default=str)
    data = text.encode("utf-8", errors="backslashreplace")
    name = write_unit_file(run_dir, "large", unit_file_name(str(row["sample_id"]), int(row.get("epoch") or 0)), data)
    out = dict(row)
    for key, value in moved.items():
        out[key] = value[:KEPT_CHARS] if isinstance(value, str) else None
    out["large"] = {"file": name, "bytes": len(data), "sha256": sha256_hex(data), "fields": sorted(moved)}
    if _line_bytes(out) > MAX_LINE_BYTES:  # what is left is the verdict's own lists
        out["checks"] = {"truncated": True, "count": len(row.get("checks") or {})}
        out["failed_checks"] = list(row.get("failed_checks") or [])[:100]
    return out


def write_transcript(run_dir: Path, sample_id: str, epoch: int, trajectory: Trajectory) -> None:
    """``trajectories/<unit file name>``: a rollout's transcript for reading (secrets
    scrubbed), named by :func:`evalkit.jsonl.unit_file_name` of the sample id and epoch (the
    file holds both)."""
    text = json.dumps(secrets.scrub_obj({"sample_id": sample_id, "epoch": epoch, **trajectory.to_dict()}),
                      ensure_ascii=False, indent=1, default=str)  # fmt: skip
    write_unit_file(run_dir, "trajectories", unit_file_name(sample_id, epoch), text.encode("utf-8", errors="backslashreplace"))


def failure_record(unit: WorkItem, model_id: str, trajectory: Trajectory, prices: Prices) -> dict[str, Any]:
    """One ``failed.jsonl`` row of a unit whose ``trajectory.failure`` is set: the sample is
    not scored; the tokens its calls reported, what they cost and the reasoning its answers
    carried (the earlier turns' and the failed answer's; ``None`` without) are kept."""
    failure: Failure = trajectory.failure  # type: ignore[assignment]
    reasoning = [r for r in (turn_totals(trajectory.turns)["reasoning"], failure.reasoning) if r]
    judged = {}
    if failure.actor == "judge":  # the model answered: its answer and the judgements made are kept
        judged = {"output": trajectory.final_output, "judgements": judgement_calls(trajectory),
                  "usage_by_actor": usage_by_actor(trajectory, unit.rollout)}  # fmt: skip
    return {
        "sample_id": unit.sample.id,
        "subset": unit.sample.subset,
        "error_kind": failure.error_kind,
        "message": failure.message,
        "attempts": failure.attempts,
        "actor": failure.actor,
        "request_hash": unit.request.request_hash(model_id),
        "epoch": unit.request.epoch,
        "usage": add_usage(usage_of(trajectory.turns), failure.usage),
        "reasoning": "\n\n".join(reasoning) if reasoning else None,
        **({"images": image_facts(unit.request.messages)} if unit.request.images else {}),
        **judged,
        **spend(trajectory, prices),
    }


def trajectory_of_row(row: dict[str, Any], run_dir: Path) -> Trajectory:
    """The trajectory a journal row of ``run_dir`` records: a rollout's ``trajectory``, or a
    single-turn answer's ``output`` (``rescore`` scores it through the same entry as the run
    did); a capped row's texts are read back from its side file.

    Raises:
        SideFileError: the side file is missing or not what the row recorded.
    """
    row = with_side_file(row, run_dir)
    if isinstance(row.get("trajectory"), dict):
        return Trajectory.from_dict(row["trajectory"])
    output = row.get("output")
    judged = {"judgements": row["judgements"]} if isinstance(row.get("judgements"), list) else {}
    return Trajectory(final_output=output if isinstance(output, str) else "", data=judged)


def kept_answers(run_dir: Path, request_hashes: dict[tuple[str, int], str]) -> dict[tuple[str, int], str]:
    """``{(sample id, epoch): output}``: the model's answers kept by the failures of actor
    ``judge`` (``judge_error``, or a judge call the budget refused) of the earlier attempts
    (``failed.prev-<k>.jsonl``, the latest attempt last) whose ``request_hash`` is the current request's — what a resume gives the judges
    again without asking the model (with the response cache off too)."""
    def attempt(path: Path) -> int:
        number = path.stem.rpartition("-")[2]
        return int(number) if number.isdigit() else 0

    kept: dict[tuple[str, int], str] = {}
    for path in sorted(Path(run_dir).glob("failed.prev-*.jsonl"), key=attempt):
        for row in read_jsonl(path):
            key = (row.get("sample_id"), row.get("epoch", 0))
            output = row.get("output")
            judged = row.get("error_kind") == JUDGE_ERROR or row.get("actor") == "judge"  # a judge's budget refusal too
            if judged and isinstance(output, str) and output and request_hashes.get(key) == row.get("request_hash"):  # type: ignore[arg-type]
                kept[key] = output  # type: ignore[index]
    return kept
