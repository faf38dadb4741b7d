"""``benchmark.*`` settings of KE (spec §12 "Hydra")."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalkit.settings import BenchmarkSettings

DIFFICULTIES = ("easy", "medium", "hard")


class TruncationSettings(BaseModel):
    """``benchmark.truncation.*``: characters kept per field (§3.2; doc limits by default)."""

    model_config = ConfigDict(extra="forbid")

    obs: int = Field(default=800, ge=0, description="characters kept of an observation")
    thought: int = Field(default=400, ge=0, description="characters kept of a thought")
    icl_obs: int = Field(default=300, ge=0, description="characters kept of an ICL example's observation")
    icl_thought: int = Field(default=200, ge=0, description="characters kept of an ICL example's thought")


class KESettings(BenchmarkSettings):
    """Settings of the KE benchmark.

    ``pilot_path`` / ``icl_path``: the private pilot and ICL JSONL files (both required,
    also for 0-shot; §2.1). Relative paths are resolved against ``data_dir`` when it is
    set, else against the working directory. ``expected_graded``: if set, the graded count
    must equal it (170 for v1). ``format``: ``plain`` (Plain-KE); ``tc`` / ``mc`` are
    named by the doc but undefined, so selecting them is an error (§11). ``first_k``: k of
    the ``first_k`` rule baseline (§8). ``subsets``: difficulties to grade (default all).
    """

    name: Literal["ke"] = "ke"
    pilot_path: Path
    icl_path: Path
    data_dir: Path | None = Field(default=None, description="the directory relative pilot_path and icl_path are resolved against")
    expected_graded: int | None = Field(default=None, ge=1)
    format: Literal["plain", "tc", "mc"] = "plain"
    truncation: TruncationSettings = Field(default_factory=TruncationSettings, description="characters kept per field (§3.2)")
    first_k: int = Field(default=3, ge=1)

    @field_validator("format")
    @classmethod
    def _only_plain(cls, value: str) -> str:
        if value != "plain":
            raise ValueError(
                f"KE format {value!r} (TC-KE/MC-KE) is named by the benchmark document but its prompt, parser and "
                "metric are not defined yet (spec §11); only format=plain is implemented"
            )
        return value

    @field_validator("subsets")
    @classmethod
    def _check_subsets(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [s for s in value if s not in DIFFICULTIES]
        if unknown:
            raise ValueError(f"unknown KE difficulties {unknown}; valid: {', '.join(DIFFICULTIES)}")
        return value

    def resolve(self, path: Path) -> Path:
        """``path`` made absolute against ``data_dir`` (if set and ``path`` is relative)."""
        path = Path(path).expanduser()
        if not path.is_absolute() and self.data_dir is not None:
            path = Path(self.data_dir).expanduser() / path
        return path
