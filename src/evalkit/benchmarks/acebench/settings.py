"""``benchmark.*`` settings of ACEBench."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from evalkit.benchmarks.acebench.categories import ALL_CATEGORIES, SUBSET_FAMILIES, expand_subsets
from evalkit.settings import BenchmarkSettings

#: the pinned upstream commit (spec "Pins")
UPSTREAM_COMMIT = "e6db74b735ead22c24f27367606a9408573b848f"
DEFAULT_SOURCE_URL = f"https://github.com/ACEBench/ACEBench/archive/{UPSTREAM_COMMIT}.tar.gz"


class AceBenchSettings(BenchmarkSettings):
    """Settings of the ACEBench benchmark.

    ``data_dir``: a directory holding ``data_all/`` (or being ``data_all/`` itself), with
    ``prompts.json`` in it or in its parent; ``None`` downloads the pinned archive from
    ``source_url`` into ``cache_dir``. ``language``: ``en``, ``zh`` or ``all`` (both).
    Agent categories: ``user_model`` names the user-simulator model config (required when
    agent_multi_turn is selected); ``max_dialog_turns`` bounds both rollout loops (spec
    §5.4/§5.5, upstream 40); ``agent_prompt_language``: ``matched`` prompts the multi-step
    agent in the sample's language, ``upstream_api`` uses the zh multi-step templates for
    en too, as upstream's API runner did (spec §2.3).

    ``subsets``: category names, or family and group names (``normal``, ``special``,
    ``agent``, ``ATOM``, ``SINGLE_TURN``, ``MULTI_TURN``, ... in any case), which are
    expanded to their categories before the run (:func:`expand_subsets`); the run's
    ``config.yaml`` records the categories in ``subsets`` and what each name expanded to in
    ``subsets_expanded``. ``scoring``: the rules normal categories are scored by —
    ``official`` (ACEBench's own scorer, the default) or ``evalscope`` (EvalScope 1.14.1's
    ACEBench adapter, to put old EvalScope numbers beside evalkit's:
    :func:`evalkit.benchmarks.acebench.checker.score_normal`).
    """

    name: Literal["acebench"] = "acebench"
    data_dir: Path | None = None
    cache_dir: Path = Field(default_factory=lambda: Path("~/.cache/evalkit/acebench").expanduser(),
                            description="where the pinned archive is downloaded and unpacked when data_dir is unset")
    source_url: str = Field(default=DEFAULT_SOURCE_URL, description="the pinned ACEBench archive downloaded when data_dir is unset")
    language: Literal["en", "zh", "all"] = "en"
    user_model: str | None = Field(default=None, description="the user simulator's model config (required for agent_multi_turn)")
    #: Hydra overrides applied when composing the user model's config
    #: (e.g. ``[backend.api_base=http://127.0.0.1:8000/v1]``)
    user_overrides: list[str] = Field(default_factory=list)
    max_dialog_turns: int = Field(default=40, gt=0, description="the most turns of an agent dialogue (both rollout loops; upstream 40)")
    agent_prompt_language: Literal["matched", "upstream_api"] = "matched"
    scoring: Literal["official", "evalscope"] = "official"
    #: what each family or group name of ``subsets`` expanded to (set by the validator)
    subsets_expanded: dict[str, list[str]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _expand_families(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("subsets"), (list, tuple)):
            return data
        given = list(data["subsets"])
        literal = [s.lower() if isinstance(s, str) else s for s in given]
        if len(set(map(repr, literal))) != len(literal):
            return data  # duplicates: refused by _check_subsets with the names as given
        subsets, expansion = expand_subsets(given)
        if not expansion:
            return data
        return {**data, "subsets": subsets, "subsets_expanded": {**(data.get("subsets_expanded") or {}), **expansion}}

    @field_validator("subsets")
    @classmethod
    def _check_subsets(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("empty list; leave subsets unset (null) for all categories or name some")
        folded = [s.lower() if s not in ALL_CATEGORIES else s for s in value]
        if len(set(folded)) != len(folded):
            raise ValueError(f"duplicate ACEBench categories in {value}")
        unknown = [s for s in value if s not in ALL_CATEGORIES]
        if unknown:
            raise ValueError(
                f"unknown ACEBench categories {unknown}; valid names: {', '.join(ALL_CATEGORIES)}, "
                f"or a family or group: {', '.join(SUBSET_FAMILIES)} (any case)"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate ACEBench categories in {value}")
        return value

    @field_validator("cache_dir", "data_dir")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return None if value is None else Path(value).expanduser()

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_given(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("empty path; give the directory holding data_all/ and prompts.json (or null to download)")
        return value

    @field_validator("data_dir")
    @classmethod
    def _data_dir_exists(cls, value: Path | None) -> Path | None:
        if value is not None and value.exists() and not value.is_dir():
            raise ValueError(f"{value} is a file, not a directory (it should hold data_all/ and prompts.json)")
        if value is not None and not value.is_dir():
            raise ValueError(f"directory {value} does not exist (it should hold data_all/ and prompts.json)")
        return value
