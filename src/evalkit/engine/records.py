"""The journal records of a unit: one builder for ``predictions.jsonl`` rows (every
benchmark, single-turn or rollout) and one for ``failed.jsonl`` rows.

Record contract (ARCHITECTURE.md; extend, don't rename): ``sample_id``, ``subset``,
``status``, ``output``, ``parsed``, ``scores``, ``checks``, ``failed_checks``, ``detail``,
``request_hash``, ``prompt_hash``, then ``raw_output`` (completion mode), ``usage``,
``latency_s``, ``attempts``, ``throttled``, ``cached``, ``finish_reason``, ``reasoning``
(never scored), ``started_at`` / ``ended_at`` (Unix seconds of the model calls), ``n_turns``,
``epoch`` (the repeat, 0 for the first) and, for a rollout, the whole ``trajectory`` (so that
``rescore`` needs nothing else; a readable copy goes to ``trajectories/<unit file name>``).

Tokens and money (:mod:`evalkit.providers`): ``usage`` sums the provider's counts over the
sample's calls (``prompt_tokens``, ``completion_tokens``, ``reasoning_tokens``,
``cached_prompt_tokens``; ``null`` when no call reported any), ``usage_by_actor`` splits
a rollout's between ``agent`` and ``user``; ``cost_usd`` (USD) and ``spent_tokens``
(prompt + completion) are what this run spent on the sample (:func:`spend`: a cache hit
costs nothing; ``null`` when a price or a count is unknown, never 0). A ``failed.jsonl``
row carries the same three, for the calls its sample made before failing.

Reasoning rule (:func:`scored_view`): ``reasoning_rule`` names the rule the scored
``output`` went through; with ``benchmark.strip_reasoning_prefix`` a stripped answer keeps
its whole text as ``output_unstripped``.

A row is at most :data:`MAX_LINE_BYTES` of JSON: over it, the model's texts (``output``,
``raw_output``, ``output_unstripped``, ``reasoning``, ``trajectory``) move whole to
``large/<unit file name>`` and the row keeps their first :data:`KEPT_CHARS` characters
plus ``large`` = ``{"file", "bytes", "sha256", "fields"}``;
:func:`evalkit.jsonl.with_side_file` puts them back for every reader that scores
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
from evalkit.jsonl import SIDE_FILE_FIELDS, dumps_line, unit_file_name, with_side_file, write_unit_file
from evalkit.providers import Price, add_usage, total_tokens
from evalkit.types import Failure, SampleScore, Trajectory, sha256_hex

#: ``{"agent": price, "user": price}`` of a run's models (``None``: no price known)
Prices = dict[str, Price | None]

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


def usage_of(turns: list[dict[str, Any]], actor: str | None = None) -> dict[str, int] | None:
    """The calls' ``usage`` summed per key (of ``actor``'s calls only when given: ``agent``
    or ``user``); ``None`` when none of them reported usage."""
    usage: dict[str, int] | None = None
    for turn in turns:
        if actor is None or (turn.get("actor") == "user") == (actor == "user"):
            usage = add_usage(usage, turn.get("usage"))
    return usage


def spend(trajectory: Trajectory, prices: Prices) -> dict[str, Any]:
    """What this run spent on one unit: ``cost_usd`` (USD) and ``spent_tokens`` (prompt +
    completion tokens) over the model calls it sent — a response-cache hit costs nothing —
    plus the usage a failed call reported. Each call is priced by its actor's model
    (``prices["agent"]`` / ``prices["user"]``). ``None`` (never 0) when a sent call's count
    or its model's price is unknown; an offline model (free, no counts) spends 0 of both."""
    calls = [(t.get("actor"), t.get("usage")) for t in trajectory.turns if not t.get("cached")]
    if trajectory.failure is not None and trajectory.failure.usage is not None:
        calls.append((trajectory.failure.actor, trajectory.failure.usage))
    cost: float | None = 0.0
    tokens: int | None = 0
    for actor, usage in calls:
        price = prices.get("user" if actor == "user" else "agent")
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
    agent = [t for t in turns if t.get("actor") != "user"]
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
    if "raw_output" in trajectory.data:
        row["raw_output"] = trajectory.data["raw_output"]
    row.update(rule)
    row.update(totals)
    if unit.rollout:
        row["usage_by_actor"] = {actor: usage_of(trajectory.turns, actor) for actor in ("agent", "user")}
    row.update(spend(trajectory, prices))
    row["n_turns"] = len(trajectory.turns)
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
    return Trajectory(final_output=output if isinstance(output, str) else "")
