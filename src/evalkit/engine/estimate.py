"""The dry run's time estimate (``run.dry_run=true``): how long a run's requests would take,
from a throughput stated in the model's config or measured by an earlier run of the model.

A throughput is a rate per request — tokens (prompt and completion together) one request
gets through per second, as its latency measures it (waits in the server's queue included)
— and a run's requests go ``backend.concurrency`` at a time, so::

    time ≈ (prompt tokens + completion tokens) / requests / rate × ⌈requests / concurrency⌉

Where the rate comes from, in this order (the estimate says which, and when it was measured):

* ``model.tokens_per_second``, stated in the model's config;
* measured: the newest earlier run of the same model (same ``model_id``: the served weights
  or endpoint; a user simulator's part aside) under ``<run.output_root>/runs/*/<model name>/``, from the primary records of
  its ``predictions.jsonl`` — the answers not taken from the response cache, Σ tokens over
  Σ ``latency_s`` — with its mean completion tokens per answer, what the estimate then
  expects of each new answer;
* none: the time is unknown, and the line says how to give one.

Without a measured completion length, the estimate is a range: prompt tokens only (the
least), and every answer at ``max_tokens`` (the most). Rollouts are counted by their
first turn only: a lower bound.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError, counted
from evalkit.summary import read_summary_record
from evalkit.untrusted import iter_records

#: the most earlier run directories of a model looked at for a measured rate (newest first)
MAX_RUNS_LOOKED_AT = 20
#: the most rows of one earlier run read for its rate (the first ones of its journal)
MAX_ROWS_READ = 5000


@dataclass(frozen=True)
class Throughput:
    """A rate per request: ``tokens_per_second`` (prompt and completion together),
    ``basis`` (what the estimate says it rests on), ``completion_tokens`` (the mean
    completion tokens of a measured answer; ``None`` when the rate was stated)."""

    tokens_per_second: float
    basis: str
    completion_tokens: float | None = None


def stated(tokens_per_second: float) -> Throughput:
    """The rate the model's config states (``model.tokens_per_second``)."""
    return Throughput(tokens_per_second, f"at {tokens_per_second:g} tok/s per request (model.tokens_per_second)")


def measured(output_root: Path, model_name: str, model_id: str) -> Throughput | None:
    """The rate of the newest earlier run of ``model_name`` under ``output_root`` whose
    ``summary.json`` names ``model_id`` (the model's own part: with or without a user
    simulator's) and whose journal holds an answer not taken from the
    cache, with a latency and token counts; ``None`` when there is none. An unreadable or
    malformed run directory is passed over (it is not this run's input)."""
    dirs = sorted(output_root.glob(f"runs/*/{model_name}/*/summary.json"), key=lambda p: p.parent.name, reverse=True)
    for summary_path in dirs[:MAX_RUNS_LOOKED_AT]:
        try:
            summary = read_summary_record(summary_path)
            if not isinstance(summary, dict) or _agent(summary.get("model_id")) != _agent(model_id):
                continue
            rate = _rate(summary_path.parent, summary)
        except (EvalkitError, OSError):
            continue
        if rate is not None:
            return rate
    return None


def _agent(model_id: Any) -> Any:
    """The model's own part of a run's ``model_id`` (a run with a user simulator adds
    ``|user=<its id>``): the server whose rate is measured."""
    return model_id.split("|", 1)[0] if isinstance(model_id, str) else None


def _rate(run_dir: Path, summary: dict[str, Any]) -> Throughput | None:
    """Σ tokens / Σ ``latency_s`` over the answers of ``run_dir``'s journal that were sent
    (not cached), with their mean completion tokens and the day of the last one."""
    tokens = completion = answers = 0
    seconds, last = 0.0, None
    for n, (_, row) in enumerate(iter_records(run_dir / "predictions.jsonl", root=run_dir)):
        if n >= MAX_ROWS_READ:
            break
        usage, latency = row.get("usage"), row.get("latency_s")
        if row.get("cached") or not isinstance(usage, dict) or not _number(latency) or latency <= 0:
            continue
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not (_count(prompt_tokens) and _count(completion_tokens)):
            continue
        tokens += prompt_tokens + completion_tokens
        completion += completion_tokens
        seconds += latency
        answers += 1
        last = max(last or 0.0, row["ended_at"]) if _number(row.get("ended_at")) else last
    if not answers or not tokens:
        return None
    rate = tokens / seconds
    concurrency = ((summary.get("engine") or {}).get("concurrency") if isinstance(summary.get("engine"), dict) else None)
    day = dt.datetime.fromtimestamp(last, dt.timezone.utc).strftime("%Y-%m-%d") if last else "an unknown day"
    where = f"{run_dir.parent.parent.name}/{run_dir.parent.name}/{run_dir.name}"
    at = f", backend.concurrency={concurrency}" if isinstance(concurrency, int) else ""
    return Throughput(rate, f"at {rate:.1f} tok/s per request measured on {day} ({counted(answers, 'answer')} of {where}{at})",
                      completion / answers)  # fmt: skip


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def time_line(prompt_tokens: int, requests: int, max_tokens: int | None, concurrency: int, rate: Throughput | None,
              rollouts: int = 0) -> str:  # fmt: skip
    """The dry run's time part: ``"time ≈ 8.5 h at 60.2 tok/s per request measured on
    2026-12-06 (…), 1 request at a time"`` (a range without a measured completion length), or
    ``"time unknown (…)"`` without a rate."""
    if rate is None:
        return ("time unknown (no throughput: set +model.tokens_per_second=N, or run a few samples of the model first "
                "and its measured rate is used)")
    at_once = f"{counted(concurrency, 'request')} at a time"
    bound = "; rollouts counted by their first turn: a lower bound" if rollouts else ""

    rounds = -(-requests // max(concurrency, 1))  # requests go concurrency at a time: whole rounds

    def seconds(tokens: float) -> float:  # each round as long as the mean request
        return tokens / max(requests, 1) / rate.tokens_per_second * rounds

    if rate.completion_tokens is not None:
        expected = seconds(prompt_tokens + rate.completion_tokens * requests)
        return f"time ≈ {duration(expected)} {rate.basis}, {at_once}{bound}"
    least = seconds(prompt_tokens)
    if not max_tokens:
        return f"time ≥ {duration(least)} (prompt tokens only) {rate.basis}, {at_once}{bound}"
    most = seconds(prompt_tokens + max_tokens * requests)
    return (f"time {duration(least)} (prompt tokens only) to {duration(most)} (every answer at max_tokens={max_tokens}) "
            f"{rate.basis}, {at_once}{bound}")  # fmt: skip


def duration(seconds: float) -> str:
    """``"42 s"``, ``"3.5 min"``, ``"8.5 h"``, ``"2.1 days"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
