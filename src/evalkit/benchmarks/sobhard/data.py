"""Loading and validating the SOBHard splits (spec §1, §3, §14).

Rows come from a local directory (JSONL or Parquet per split) or from a Hugging Face
dataset id through ``datasets.load_dataset``. Every row is checked against the row schema
(pydantic), its ``reference_sha256`` and its instruction template; session conversations
are checked for complete earlier turns; role separation (no graded reference in ``shots``)
is checked on request.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from evalkit.benchmarks.bounds import short_str
from evalkit.errors import DataError
from evalkit.untrusted import MAX_JSONL_BYTES, iter_chunks, iter_parquet, json_depth_over, loads_bounded, read_objects

log = logging.getLogger("evalkit.sobhard")

SLOTS = ("task", "input_data", "format", "question")


class Categories(BaseModel):
    model_config = ConfigDict(extra="allow")

    family: str
    difficulty: str
    language: str = "ru"
    source_format: str = ""
    target_format: str
    length_tier: str = ""
    prompt_style: str = ""
    origin: str = ""


class Meta(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: int | str
    base_id: str = ""
    fence_tag: str | None = None
    reference: str
    reference_sha256: str | None = None
    task_meta: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    dialogue_id: str | None = None
    turn_index: int | None = None
    n_turns: int | None = None
    categories: Categories

    @field_validator("task_meta", "checks", mode="before")
    @classmethod
    def _decode(cls, value: Any) -> Any:
        """JSON strings; an empty string or null means ``{}`` (§1.2)."""
        if value is None or value == "":
            return {}
        if isinstance(value, str):
            value = loads_bounded(value)  # JSONDecodeError / "nested too deeply": the caller's one line
        elif json_depth_over(value):
            raise ValueError("JSON nested too deeply")
        if not isinstance(value, dict):
            raise ValueError("must decode to a JSON object")
        return value


class Inputs(BaseModel):
    model_config = ConfigDict(extra="allow")

    task: str
    input_data: str
    format: str
    question: str


class Row(BaseModel):
    """One row of ``test`` or ``shots`` (§1.2); unknown keys allowed."""

    model_config = ConfigDict(extra="allow")

    instruction: str | int
    inputs: Inputs
    outputs: str | None = ""
    meta: Meta


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in read_objects(path)]


def _read_parquet(paths: list[Path]) -> list[dict[str, Any]]:
    try:
        import pyarrow  # noqa: F401  (the untrusted layer reads Parquet with it)
    except ModuleNotFoundError:
        raise DataError(f"reading {paths[0]} needs pyarrow (pip install pyarrow)") from None
    return [row for p in paths for row in iter_parquet(p)]


def split_files(data_dir: Path, split: str) -> list[Path]:
    """The files of ``split`` in a local directory: ``<split>.jsonl``, ``<split>.parquet``
    or the Hub layout ``data/<split>-*.parquet``."""
    for candidate in (data_dir / f"{split}.jsonl", data_dir / f"{split}.parquet"):
        if candidate.is_file():
            return [candidate]
    shards = sorted(data_dir.glob(f"data/{split}-*.parquet")) or sorted(data_dir.glob(f"{split}-*.parquet"))
    if shards:
        return shards
    raise DataError(f"SOBHard: no {split!r} split in {data_dir} (expected {split}.jsonl, {split}.parquet or data/{split}-*.parquet)")


def read_local_split(data_dir: Path, split: str) -> tuple[list[dict[str, Any]], str]:
    """Raw rows of ``split`` and the SHA-256 over its file bytes."""
    files = split_files(data_dir, split)
    h = hashlib.sha256()
    for f in files:
        for chunk in iter_chunks(f, MAX_JSONL_BYTES, root=data_dir, what="a SOBHard data file"):
            h.update(chunk)
    rows = _read_jsonl(files[0]) if files[0].suffix == ".jsonl" else _read_parquet(files)
    return rows, h.hexdigest()


def read_hub_split(dataset: str, split: str, revision: str | None) -> tuple[list[dict[str, Any]], str]:
    """Raw rows of ``split`` of a Hugging Face dataset and a SHA-256 over them.

    Raises:
        DataError: ``datasets`` missing, or the hub unreachable / dataset unknown.
    """
    try:
        import datasets
    except ModuleNotFoundError:
        raise DataError("SOBHard: benchmark.dataset needs the 'datasets' package (pip install datasets), or set benchmark.data_dir") from None
    try:
        ds = datasets.load_dataset(dataset, split=split, revision=revision)
    except Exception as exc:  # noqa: BLE001 - offline, unknown id, bad split: one clear line
        raise DataError(
            f"SOBHard: cannot load split {split!r} of Hugging Face dataset {dataset!r}"
            f"{'@' + revision if revision else ''}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            "(offline? point benchmark.data_dir at a local copy)"
        ) from None
    rows = [dict(r) for r in ds]
    digest = hashlib.sha256("".join(json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) + "\n" for r in rows).encode()).hexdigest()
    return rows, digest


def resolve_instruction(raw: dict[str, Any], prompts: list[str] | None, where: str) -> None:
    """An int ``instruction`` is an index into ``dataset_meta.json["prompts"]`` (§2.1);
    resolved in place before anything else."""
    inst = raw.get("instruction")
    if isinstance(inst, int) and not isinstance(inst, bool):
        if prompts is None or not 0 <= inst < len(prompts):
            raise DataError(f"SOBHard {where}: instruction index {inst} needs dataset_meta.json with a 'prompts' list that long")
        raw["instruction"] = prompts[inst]


def check_template(template: str, where: str) -> None:
    """The template holds each of the four slots exactly once and no other braces (§2.1)."""
    for slot in SLOTS:
        if template.count("{" + slot + "}") != 1:
            raise DataError(f"SOBHard {where}: instruction must contain {{{slot}}} exactly once")
    rest = template
    for slot in SLOTS:
        rest = rest.replace("{" + slot + "}", "")
    if "{" in rest or "}" in rest:
        raise DataError(f"SOBHard {where}: instruction has braces besides the four slots")


def parse_rows(raws: list[dict[str, Any]], source: str, prompts: list[str] | None = None) -> list[Row]:
    """Validate raw rows into :class:`Row` objects.

    Raises:
        DataError: schema violation, reference hash mismatch, bad template.
    """
    rows = []
    for n, raw in enumerate(raws, 1):
        meta = raw.get("meta")
        rid = meta.get("id", f"#{n}") if isinstance(meta, dict) else f"#{n}"
        where = f"{source} row id={short_str(rid, 80)}"
        raw = dict(raw)
        resolve_instruction(raw, prompts, where)
        try:
            row = Row.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise DataError(f"SOBHard {where}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"SOBHard {where}: task_meta/checks is not JSON ({exc})") from None
        check_template(str(row.instruction), where)
        want = row.meta.reference_sha256
        if want:
            got = hashlib.sha256(row.meta.reference.encode("utf-8")).hexdigest()
            if got != want:
                raise DataError(f"SOBHard {where}: meta.reference does not match meta.reference_sha256 ({got[:12]} != {want[:12]})")
        rows.append(row)
    seen: set[str] = set()
    for row in rows:  # linear: a set, not ids.count() per id (117 s at 100k rows)
        rid = str(row.meta.id)
        if rid in seen:
            raise DataError(f"SOBHard {source}: duplicate meta.id {rid}")
        seen.add(rid)
    return rows


def session_history(row: Row, by_dialogue: dict[str, list[Row]], where: str) -> list[Row]:
    """The earlier turns 1 … k−1 of a graded session turn, ordered (§3).

    Raises:
        DataError: a missing or duplicated earlier turn, or no turn index.
    """
    k = row.meta.turn_index or (row.meta.task_meta.get("session") or {}).get("turn_index")
    did = row.meta.dialogue_id or (row.meta.task_meta.get("session") or {}).get("dialogue_id")
    if not k or not did:
        raise DataError(f"SOBHard {where}: a session row needs meta.dialogue_id and meta.turn_index")
    turns = by_dialogue.get(did, [])
    indices = sorted(t.meta.turn_index or 0 for t in turns)
    if indices != list(range(1, k)):
        raise DataError(
            f"SOBHard {where}: conversation {did!r} needs earlier turns 1..{k - 1} in shots exactly once, found {indices}"
        )
    return sorted(turns, key=lambda t: t.meta.turn_index or 0)


def check_role_separation(test: list[Row], shots: list[Row]) -> list[str]:
    """Ids of graded rows whose reference occurs anywhere in ``shots`` (§3, §14: "a
    validator should check this"). Substring containment can flag a very short reference
    by coincidence, so the caller warns instead of stopping the run."""
    haystack = "\x00".join(
        part for s in shots for part in (s.outputs or "", s.meta.reference, *(getattr(s.inputs, k) for k in SLOTS))
    )
    return [str(row.meta.id) for row in test if (ref := row.meta.reference.strip()) and ref in haystack]
