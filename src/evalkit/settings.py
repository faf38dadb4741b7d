"""The settings every benchmark and every model shares: generation parameters and the
``benchmark.*`` block's common keys.

They sit below both the configuration (:mod:`evalkit.config`) and the benchmarks
(:mod:`evalkit.benchmarks`): each benchmark subclasses :class:`BenchmarkSettings` with its
own keys, and the configuration validates ``benchmark.*`` with the subclass of the
benchmark named there, without importing any benchmark (the layer rule of
``docs/architecture.md``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: a plain name: what every name read from a file must be when it becomes part of a path
#: (a run directory's ``<benchmark>/<model>``): letters, digits, ``.``, ``_``, ``-``, not
#: starting with ``.`` (no ``..``, no hidden file), at most 128 characters; so it never
#: leaves the directory it is joined to, is never absolute, and holds no separator
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def plain_name(value: str, key: str) -> str:
    """``value`` unchanged when it is a plain name (:data:`PLAIN_NAME`): the one check of
    every name from a file that becomes a path (``benchmark.name``, ``model.name``).

    Raises:
        ValueError: not a plain name — one line naming ``key`` (pydantic turns it into the
            config's one-line error, exit 2).
    """
    if not isinstance(value, str) or not PLAIN_NAME.fullmatch(value):
        raise ValueError(f"{key}: {str(value)[:80]!r} is not a plain name (letters, digits, '.', '_', '-'; it names run directories)")
    return value

#: the ``reasoning_effort`` values litellm accepts (``litellm.types.llms.openai.REASONING_EFFORT``)
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class GenerationParams(BaseModel):
    """Generation parameters passed through litellm (``None`` = provider default).

    ``reasoning_effort`` (one of :data:`ReasoningEffort`) is litellm's keyword of that
    name, which litellm maps to each provider's own form; ``thinking_budget_tokens`` (a
    number of tokens) is sent as litellm's Anthropic-style
    ``thinking={"type": "enabled", "budget_tokens": N}``, below ``max_tokens`` when both are
    set. A model that cannot take them is refused when the config is validated
    (:func:`evalkit.providers.reasoning_problem`).
    """

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(default=None, ge=0.0)
    max_tokens: int | None = Field(default=None, gt=0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: list[str] | None = None
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    thinking_budget_tokens: int | None = Field(default=None, gt=0)

    def as_params(self) -> dict[str, Any]:
        """The set parameters only, under their config names (what ``config.yaml`` and
        ``summary.json`` record)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def sent_params(self) -> dict[str, Any]:
        """The set parameters as litellm keyword arguments (what is sent and hashed):
        ``thinking_budget_tokens`` becomes ``thinking``."""
        params = self.as_params()
        budget = params.pop("thinking_budget_tokens", None)
        if budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": budget}
        return params


class BenchmarkSettings(BaseModel):
    """Settings every benchmark has (``benchmark.*``); each benchmark subclasses this.

    ``module``: the module that registers a benchmark from outside evalkit (imported before
    the lookup; :mod:`evalkit.benchmarks`). ``subsets``: categories to evaluate (``None`` =
    the benchmark's default list). ``request_timeout_s``: per-request timeout when the benchmark needs long generations.
    ``score_timeout_s``: the bound on scoring one sample, in wall seconds; a sample over it
    is recorded with status ``scorer_limit`` and scored 0 (:mod:`evalkit.engine.scoring`).
    ``score_memory_mb``: the bound on scoring one sample, in MiB of address space above the
    scoring process's start-up size; a sample over it is recorded with status
    ``scorer_limit`` and scored 0. ``score_budget_s``: the run's scoring seconds in all
    (measured in the scoring processes, default 1800, ``None`` unbounded): once spent, the
    answers not yet scored are failures of kind ``score_budget_exceeded`` (not zeros: they
    may be harmless), which a resume scores; it may change on resume. ``strip_reasoning_prefix``: before scoring, remove
    everything up to and including the last ``</think>`` of the answer
    (:func:`strip_reasoning_prefix`), for served reasoning models whose chat template
    swallows the opening tag; off by default, since each benchmark's own rule
    (:attr:`Benchmark.reasoning_rule`) is the official one. None of these is sent to a
    model. The benchmark YAML's ``generation`` block is a configuration layer, not a setting: it
    wins over the model's defaults, a model's ``dataset_args.<benchmark>`` wins over it, and
    the result is the run's ``generation`` (:func:`evalkit.config.resolve_layers`).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the benchmark's name (a YAML task's own: its runs, MLflow runs and comparisons go by it)")
    module: str | None = None
    subsets: list[str] | None = None
    request_timeout_s: float | None = Field(default=None, gt=0)
    score_timeout_s: float = Field(default=10.0, gt=0)
    score_memory_mb: int = Field(default=2048, ge=64)
    score_budget_s: float | None = Field(default=1800.0, gt=0)
    strip_reasoning_prefix: bool = False

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        return plain_name(v, "benchmark.name")  # a task's name comes from its file and names its run directories

    def needs_judge(self) -> bool:
        """True when the benchmark's scoring asks an LLM judge (a task's ``llm_judge``
        scorer): the run then needs ``judge=<model config>`` (:mod:`evalkit.config`)."""
        return False
