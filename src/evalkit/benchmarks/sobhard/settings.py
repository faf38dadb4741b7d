"""``benchmark.*`` settings of SOBHard (spec §15)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from evalkit.settings import BenchmarkSettings

FAMILIES = (
    "convert", "extract", "repair", "transform", "schema_gen", "patch",
    "diff", "apply_diff", "merge", "template", "session",
)  # fmt: skip
DIFFICULTIES = ("easy", "medium", "hard")
CELLS = tuple(f"{f}/{d}" for f in FAMILIES for d in DIFFICULTIES)


class SOBHardSettings(BenchmarkSettings):
    """Settings of the SOBHard benchmark.

    Data (spec §1, §15): ``data_dir`` is a local directory holding the ``test`` and
    ``shots`` splits as JSONL (``test.jsonl``) or Parquet (``test.parquet``,
    ``data/test-*.parquet``); otherwise ``dataset`` is a Hugging Face dataset id read with
    ``datasets.load_dataset`` (``revision`` pins it). ``split`` / ``shots_split`` name the
    splits.

    Session replay (spec §3): ``max_replayed_turns`` is the shot budget of the run when
    ``shots=0`` (the engine default); ``shots=N`` (N > 0) replaces it. A graded session turn
    needing more earlier turns than the budget stops the run before any request.

    Demonstrations (spec §3 "ten standalone demonstrations", default off): with
    ``shots=N`` (N > 0) and ``demos=true``, non-session questions get the first N
    standalone ``shots`` rows as user/assistant pairs.

    Scoring variants (spec §4.1, §5, §6, §8.2, §15; defaults reproduce the observed
    scorer): ``fence_pairing`` sequential|commonmark, ``strict_json`` (reject NaN /
    Infinity), ``numeric_strings`` python_float|strict, ``leaf_compare`` exact|tolerant
    (``transform.values_unchanged``: exact text of leaves, or 5 == 5.0).

    ``validate_role_separation``: check at load that no graded reference occurs in
    ``shots`` (spec §3, §14).
    """

    name: Literal["sobhard"] = "sobhard"
    data_dir: Path | None = Field(default=None, description="a local directory holding the test and shots splits (JSONL or Parquet)")
    dataset: str | None = Field(default=None, description="a Hugging Face dataset id, read when data_dir is unset")
    revision: str | None = Field(default=None, description="the Hugging Face dataset's pinned revision (a commit or tag)")
    split: str = Field(default="test", description="the split graded")
    shots_split: str = Field(default="shots", description="the split demonstrations and replayed session turns come from")
    max_replayed_turns: int = Field(default=4, ge=0, description="earlier session turns replayed with shots=0; shots=N replaces it")
    demos: bool = Field(default=False, description="with shots=N, give non-session questions the first N standalone shots as demonstrations")
    fence_pairing: Literal["sequential", "commonmark"] = Field(default="sequential", description="how code fences of an answer are paired")
    strict_json: bool = Field(default=False, description="reject NaN and Infinity in JSON answers")
    numeric_strings: Literal["python_float", "strict"] = Field(default="python_float", description="how numeric strings are read when compared")
    leaf_compare: Literal["exact", "tolerant"] = Field(default="exact", description="transform.values_unchanged: exact text of leaves, or 5 == 5.0")
    validate_role_separation: bool = True

    @field_validator("subsets")
    @classmethod
    def _check_subsets(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [s for s in value if s not in FAMILIES and s not in CELLS]
        if unknown:
            raise ValueError(
                f"unknown SOBHard subsets {unknown}; use families ({', '.join(FAMILIES)}) "
                "or cells family/difficulty (e.g. diff/hard)"
            )
        return value

    @field_validator("data_dir")
    @classmethod
    def _data_dir_exists(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        value = Path(value).expanduser()
        if not value.is_dir():
            raise ValueError(f"directory {value} does not exist (it should hold test.jsonl and shots.jsonl)")
        return value
