"""The journal records of a unit: one builder for ``predictions.jsonl`` rows (every
benchmark, single-turn or rollout) and one for ``failed.jsonl`` rows.

Record contract (ARCHITECTURE.md; extend, don't rename): ``sample_id``, ``subset``,
``status``, ``output``, ``parsed``, ``scores``, ``checks``, ``failed_checks``, ``detail``,
``request_hash``, ``prompt_hash``, then ``raw_output`` (completion mode), ``usage``,
``latency_s``, ``attempts``, ``throttled``, ``cached``, ``finish_reason``, ``reasoning``
(never scored), ``started_at`` / ``ended_at`` (Unix seconds of the model calls), ``n_turns``,
``epoch`` (the repeat, 0 for the first) and, for a rollout, the whole ``trajectory`` (so that
``rescore`` needs nothing else; a readable copy goes to ``trajectories/<sample id>.json``).

A row is at most :data:`MAX_LINE_BYTES` of JSON: over it, the model's texts (``output``,
``raw_output``, ``reasoning``, ``trajectory``) move whole to ``large/<sample id>.json`` and
the row keeps their first :data:`KEPT_CHARS` characters plus ``large`` = ``{"file",
"bytes", "sha256", "fields"}``; :func:`evalkit.jsonl.with_side_file` puts them back for every
reader that scores (``rescore``, ``model=replay`` of a ``predictions.jsonl``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalkit import secrets
from evalkit.engine.calls import Unit
from evalkit.jsonl import SIDE_FILE_FIELDS, dumps_line, with_side_file
from evalkit.types import Failure, SampleScore, Trajectory, sha256_hex

#: the largest ``predictions.jsonl`` line evalkit writes (bytes of UTF-8)
MAX_LINE_BYTES = 1024 * 1024
#: characters of each moved text a capped row keeps in line
KEPT_CHARS = 4096


def turn_totals(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over a trajectory's model calls: ``usage`` (summed per key), ``latency_s``,
    ``attempts``, ``throttled``, ``cached`` (every call answered from the cache), of the
    model under evaluation's calls the last ``finish_reason`` and the ``reasoning`` texts,
    and ``started_at`` / ``ended_at`` (Unix seconds: the first call's start, the last call's
    end; ``None`` without calls)."""
    usage: dict[str, int] = {}
    for turn in turns:
        for k, v in (turn.get("usage") or {}).items():
            usage[k] = usage.get(k, 0) + int(v)
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


def prediction_record(unit: Unit, model_id: str, trajectory: Trajectory, scored: SampleScore) -> dict[str, Any]:
    """One ``predictions.jsonl`` row. A single-turn answer cut at the token limit
    (``finish_reason=length``) that scored ``ok`` has status ``truncated``."""
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
    row.update(totals)
    row["n_turns"] = len(trajectory.turns)
    if unit.rollout:
        row["trajectory"] = trajectory.to_dict()
    return row


def _line_bytes(row: dict[str, Any]) -> int:
    return len(dumps_line(row).encode("utf-8", errors="surrogatepass"))


def _file_name(sample_id: str) -> str:
    return sample_id.replace("/", "__") + ".json"


def cap_record(row: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``row`` as journaled: unchanged when its line fits :data:`MAX_LINE_BYTES`, else with
    the model's texts moved to ``large/<sample id>.json`` (see the module docstring)."""
    if _line_bytes(row) <= MAX_LINE_BYTES:
        return row
    moved = {k: row[k] for k in SIDE_FILE_FIELDS if row.get(k) is not None}
    text = json.dumps(secrets.scrub_obj(moved), ensure_ascii=False, default=str)
    data = text.encode("utf-8", errors="backslashreplace")
    large = Path(run_dir) / "large"
    large.mkdir(exist_ok=True)
    (large / _file_name(str(row["sample_id"]))).write_bytes(data)
    out = dict(row)
    for key, value in moved.items():
        out[key] = value[:KEPT_CHARS] if isinstance(value, str) else None
    out["large"] = {"file": f"large/{_file_name(str(row['sample_id']))}", "bytes": len(data),
                    "sha256": sha256_hex(data), "fields": sorted(moved)}  # fmt: skip
    if _line_bytes(out) > MAX_LINE_BYTES:  # what is left is the verdict's own lists
        out["checks"] = {"truncated": True, "count": len(row.get("checks") or {})}
        out["failed_checks"] = list(row.get("failed_checks") or [])[:100]
    return out


def write_transcript(run_dir: Path, sample_id: str, trajectory: Trajectory) -> None:
    """``trajectories/<sample id>.json``: a rollout's transcript for reading (secrets scrubbed)."""
    tdir = Path(run_dir) / "trajectories"
    tdir.mkdir(exist_ok=True)
    (tdir / (sample_id.replace("/", "__") + ".json")).write_text(
        json.dumps(secrets.scrub_obj({"sample_id": sample_id, **trajectory.to_dict()}), ensure_ascii=False, indent=1, default=str),
        encoding="utf-8",
        errors="backslashreplace",
    )


def failure_record(unit: Unit, model_id: str, failure: Failure) -> dict[str, Any]:
    """One ``failed.jsonl`` row: the sample is not scored."""
    return {
        "sample_id": unit.sample.id,
        "subset": unit.sample.subset,
        "error_kind": failure.error_kind,
        "message": failure.message,
        "attempts": failure.attempts,
        "actor": failure.actor,
        "request_hash": unit.request.request_hash(model_id),
        "epoch": unit.request.epoch,
    }


def trajectory_of_row(row: dict[str, Any], run_dir: Path) -> Trajectory:
    """The trajectory a journal row of ``run_dir`` records: a rollout's ``trajectory``, or a
    single-turn answer's ``output`` (``rescore`` scores it through the same entry as the run
    did); a capped row's texts are read back from its side file."""
    row = with_side_file(row, run_dir)
    if isinstance(row.get("trajectory"), dict):
        return Trajectory.from_dict(row["trajectory"])
    output = row.get("output")
    return Trajectory(final_output=output if isinstance(output, str) else "")
