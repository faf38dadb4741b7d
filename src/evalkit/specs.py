"""The typed specs a run's stages take, built once from the validated config (issue 34 item 4).

HELM hands each stage its own small spec; evalkit does the same: :func:`build` reads the
:class:`~evalkit.config.EvalConfig` once (with :mod:`evalkit.compose`, :mod:`evalkit.job` and
:mod:`evalkit.config` itself, the only modules that read the whole config) and returns a
:class:`RunSpecs`, whose parts go to the stages that need them:

=====================  ==========================================================================
part                   taken by
=====================  ==========================================================================
``benchmark``          *prepare*: the benchmark's own validated settings (its data, its scorers)
``run``                *prepare* (selection, ``run.stop_when``'s gate), the budget, the batch path:
                       the ``run.*`` group (:class:`~evalkit.config.RunSettings`)
``prompt``             *prepare*: how each sample's request is built (:class:`PromptSpec`)
``models``             :mod:`evalkit.models.factory`, prices, secrets (:class:`ModelsSpec`)
``execution``          *start* / *execute*: Ray, workers, windows, cache (:class:`ExecutionSpec`)
``run_dir``            *open*: where the run goes, what ``config.yaml`` holds (:class:`RunDirSpec`)
``report``             *finalize*: what the summary says of the run (:class:`ReportSpec`)
``tracking``           :mod:`evalkit.tracking` (:class:`TrackingSpec`)
=====================  ==========================================================================

A key added to the config reaches a stage through one of these, never through the whole
config. Everything here is frozen: what was recorded (``config.yaml``, the summary's params)
is what ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.config import (MAX_RESPONSE_BYTES, REQUEST_DEADLINE_S, TRACES_PER_CATEGORY, BackendConfig, EvalConfig, JudgeConfig,
                            ModelConfig, RunSettings, traces_policy)
from evalkit.errors import ConfigError
from evalkit.settings import BenchmarkSettings

if TYPE_CHECKING:  # a sweep's composed config; omegaconf is not imported for the annotation
    from omegaconf import DictConfig


@dataclass(frozen=True)
class ActorSpec:
    """One model taking part — the model under test (``agent``), the user simulator, or a
    judge: its model and backend configs, its API key (never shown: ``repr`` leaves it out),
    the seconds one attempt may take, the parameters sent with each request
    (``sent_params``, the request's identity) and ``generation.max_tokens``."""

    model: ModelConfig
    backend: BackendConfig
    api_key: str | None = field(repr=False)
    timeout_s: float
    sent_params: dict[str, Any]
    max_tokens: int | None = None

    @property
    def api_base(self) -> str | None:
        """The backend's base URL (``None`` for an offline backend or the provider's default)."""
        return getattr(self.backend, "api_base", None)


@dataclass(frozen=True)
class ModelsSpec:
    """The models of a run (:mod:`evalkit.models.factory`): ``agent``, ``user`` (``None``
    without a user simulator configured) and ``judges`` in the order named."""

    agent: ActorSpec
    user: ActorSpec | None
    judges: tuple[ActorSpec, ...] = ()

    @property
    def user_sent_params(self) -> dict[str, Any]:
        """The parameters the user simulator sends (``{}`` without one)."""
        return self.user.sent_params if self.user is not None else {}

    def actors(self) -> tuple[ActorSpec, ...]:
        """Every configured actor: agent, user simulator (when set), judges."""
        return (self.agent, *((self.user,) if self.user is not None else ()), *self.judges)

    @property
    def networked(self) -> bool:
        """A network model or a network judge takes part (litellm: Ray and the response cache)."""
        return self.agent.model.kind == "litellm" or any(j.model.kind == "litellm" for j in self.judges)


@dataclass(frozen=True)
class PromptSpec:
    """How *prepare* builds a sample's request: ``shots`` (``shots.n``), ``api``
    (``model.api``: ``chat`` or ``completion``), the agent's ``sent_params`` and its
    ``temperature`` (``None`` when unset)."""

    shots: int
    api: str
    sent_params: dict[str, Any]
    temperature: float | None = None


@dataclass(frozen=True)
class ExecutionSpec:
    """How *start* and *execute* run the pending units: the runner (``runner.kind``,
    ``address``, ``num_cpus``, ``num_workers``), requests in flight (``backend.concurrency``,
    ``adaptive`` AIMD), the response cache's directory (``None``: ``run.cache=false``),
    ``batch`` (``run.batch``), the progress bar, and ``limits``: ``{"agent" | "user":
    (concurrency, adaptive)}`` of a ``runner=cluster`` run's shared windows (``None`` for
    ``runner=local``)."""

    runner: str
    address: str | None
    num_cpus: int | None
    num_workers: int
    concurrency: int
    adaptive: bool
    cache_dir: Path | None
    batch: bool = False
    progress: bool = True
    limits: dict[str, tuple[int, bool]] | None = None


@dataclass(frozen=True)
class RunDirSpec:
    """Where the run goes (*open*): ``run.resume``, ``run.dir``, ``run.output_root``, the
    benchmark's and model's names (the directory's parents; what a resume must match), and
    ``record``: the resolved config (:meth:`~evalkit.config.EvalConfig.record`, secrets not yet
    redacted: :func:`evalkit.engine.rundir.recorded_config` redacts it when written, once the
    run's secrets are registered; ``repr`` leaves it out)."""

    resume: Path | None
    dir: Path | None
    output_root: Path
    benchmark: str
    model: str
    record: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class ReportSpec:
    """What the summary (*finalize*, :mod:`evalkit.report.summary`) says of the run besides
    its results: names, shots, mode, repeats, the agent's generation parameters, the interval
    settings (``ci_level``, ``bootstrap_resamples``, ``seed``), the budget's limits, the
    judges (their model configs, in the order named) and the ``llm_judge`` scorers (their
    identity: :func:`evalkit.report.summary.judge_identity`), ``replayed_run`` (the run
    whose answers a ``model=replay`` of a run directory replays) and ``judge_qualification``
    (the judges' qualification, read when the run started: :mod:`evalkit.job`)."""

    benchmark: str
    model: str
    user_model: str | None
    shots: int
    mode: str
    repeats: int
    generation_params: dict[str, Any]
    ci_level: float = 0.95
    bootstrap_resamples: int = 2000
    seed: int = 0
    max_cost_usd: float | None = None
    max_total_tokens: int | None = None
    judges: tuple[ModelConfig, ...] = ()
    judge_scorers: tuple[Any, ...] = ()
    replayed_run: str | None = None
    #: the judges' qualification when the run started (evalkit.benchmarks.task.qualification.run_qualification)
    judge_qualification: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrackingSpec:
    """What a tracker needs (:mod:`evalkit.tracking`): ``tracking.*`` (``kind``,
    ``tracking_uri``, ``experiment``, ``artifact_root``, ``traces`` (a policy of
    :data:`~evalkit.config.TRACE_POLICIES`), ``traces_per_category``, ``max_traces``,
    ``request_deadline_s``, ``max_response_bytes``), ``run.output_root`` (the default store
    lies under it), ``run.suite``, ``run.seed`` (which traces are kept) and ``run.baseline``
    when it is a run directory (whose flips are traced; ``None`` otherwise)."""

    kind: str = "mlflow"
    tracking_uri: str | None = None
    experiment: str = "evalkit"
    artifact_root: str | None = None
    traces: str = "sample"
    max_traces: int | None = None
    output_root: str = "outputs"
    suite: str | None = None
    seed: int = 0
    request_deadline_s: float = REQUEST_DEADLINE_S
    max_response_bytes: int = MAX_RESPONSE_BYTES
    traces_per_category: int = TRACES_PER_CATEGORY
    baseline: str | None = None

    @classmethod
    def of(cls, tracking: Any, run: Any) -> "TrackingSpec":
        """The spec of a config's ``tracking`` and ``run`` groups: validated models, or a
        composed config's nodes (a sweep reads its tracking before any job validates)."""

        def get(group: Any, key: str, default: Any) -> Any:
            return group.get(key, default) if hasattr(group, "get") else getattr(group, key, default)

        uri, root = get(tracking, "tracking_uri", None), get(tracking, "artifact_root", None)
        max_traces, baseline = get(tracking, "max_traces", None), get(run, "baseline", None)
        try:
            policy = traces_policy(get(tracking, "traces", "sample"))
        except ValueError as exc:  # a composed config not validated yet (a sweep): one line
            raise ConfigError(str(exc)) from None
        return cls(str(get(tracking, "kind", "mlflow")), str(uri) if uri else None, str(get(tracking, "experiment", "evalkit")),
                   str(root) if root else None, policy,
                   int(max_traces) if max_traces is not None else None, str(get(run, "output_root", "outputs")),
                   get(run, "suite", None), int(get(run, "seed", 0)),
                   float(get(tracking, "request_deadline_s", REQUEST_DEADLINE_S)),
                   int(get(tracking, "max_response_bytes", MAX_RESPONSE_BYTES)),
                   int(get(tracking, "traces_per_category", TRACES_PER_CATEGORY)),
                   baseline if isinstance(baseline, str) and baseline else None)  # fmt: skip


@dataclass(frozen=True)
class RunSpecs:
    """Every spec of one run, built once by :func:`build` (see the module's table)."""

    benchmark: BenchmarkSettings
    run: RunSettings
    prompt: PromptSpec
    models: ModelsSpec
    execution: ExecutionSpec
    run_dir: RunDirSpec
    report: ReportSpec
    tracking: TrackingSpec


def tracking_of(cfg: EvalConfig | DictConfig) -> TrackingSpec:
    """The :class:`TrackingSpec` of a validated config or of a composed one (a sweep's, read
    before its jobs validate theirs)."""
    return TrackingSpec.of(cfg.tracking, cfg.run)


def build(cfg: EvalConfig) -> RunSpecs:
    """The specs of a validated config; the one place (besides compose and job) that reads it.
    Reads the API keys (``api_key_env`` variables) now, as the config's own methods do."""
    timeout = cfg.request_timeout_s()
    agent = ActorSpec(cfg.model, cfg.backend, cfg.api_key(), timeout, cfg.sent_params(), cfg.generation.max_tokens)
    user = None
    if cfg.user is not None:
        user = ActorSpec(cfg.user.model, cfg.user.backend, cfg.user_api_key(), timeout, cfg.user_sent_params(),
                      cfg.user.generation.max_tokens)  # fmt: skip
    judges = tuple(_judge(cfg, j) for j in cfg.judge)
    models = ModelsSpec(agent, user, judges)
    run = cfg.run
    limits = None
    if cfg.runner.kind == "cluster":
        limits = {"agent": (cfg.backend.concurrency, cfg.backend.adaptive_concurrency)}
        if cfg.user is not None:
            limits["user"] = (cfg.user.backend.concurrency, cfg.user.backend.adaptive_concurrency)
    execution = ExecutionSpec(
        cfg.runner.kind, cfg.runner.address, cfg.runner.num_cpus, cfg.runner.num_workers, cfg.backend.concurrency,
        cfg.backend.adaptive_concurrency, (run.cache_dir or run.output_root / "cache") if run.cache else None,
        run.batch, run.progress, limits,
    )  # fmt: skip
    replayed = cfg.model.path if cfg.model.kind == "replay" and cfg.model.path is not None and Path(cfg.model.path).is_dir() else None
    scorers = tuple(s for s in getattr(cfg.benchmark, "scorers", None) or [] if getattr(s, "kind", None) == "llm_judge")
    recorded_generation = cfg.as_written({"generation": cfg.generation_params()})["generation"]  # ${oc.env:…} as written
    report = ReportSpec(
        cfg.benchmark.name, cfg.model.name, cfg.user.model.name if cfg.user is not None else None, cfg.shots.n, cfg.model.api,
        run.repeats, recorded_generation, run.ci_level, run.bootstrap_resamples, run.seed, run.max_cost_usd,
        run.max_total_tokens, tuple(j.model for j in cfg.judge), scorers, str(replayed) if replayed is not None else None,
    )  # fmt: skip
    run_dir = RunDirSpec(run.resume, run.dir, run.output_root, cfg.benchmark.name, cfg.model.name, cfg.record())
    prompt = PromptSpec(cfg.shots.n, cfg.model.api, cfg.sent_params(), cfg.generation_params().get("temperature"))
    return RunSpecs(cfg.benchmark, run, prompt, models, execution, run_dir, report, TrackingSpec.of(cfg.tracking, run))


@dataclass(frozen=True)
class QualifySpec:
    """What ``python -m evalkit.judge qualify`` (:mod:`evalkit.qualify`) takes of its validated
    config: the task's settings, its one judge (:class:`ActorSpec`; ``concurrency``: calls at
    once, its backend's), the models' spec (the judge's client is built from it), the response
    cache's directory (``None``: ``run.cache=false``), where the records go (``root``) and the
    floors they are judged by (``judge_qualification``), the intervals' settings, and the
    MLflow store (``tracking``: where ``labels=mlflow:…`` are read and the record is logged)."""

    benchmark: BenchmarkSettings
    judge: ActorSpec
    concurrency: int
    models: ModelsSpec
    cache_dir: Path | None
    root: Path
    floors: dict[str, float]
    ci_level: float
    resamples: int
    seed: int
    tracking: TrackingSpec = field(default_factory=TrackingSpec)


def build_qualify(cfg: EvalConfig) -> QualifySpec:
    """The :class:`QualifySpec` of a qualification's validated config.

    Raises:
        ConfigError: a task without an ``llm_judge`` scorer, a panel, the reference judge, a dry run — one line.
    """
    if not cfg.benchmark.needs_judge():
        raise ConfigError(f"benchmark={cfg.benchmark.name}: has no llm_judge scorer; nothing to qualify")
    if len(cfg.judge) != 1:
        raise ConfigError("judge: qualify one judge at a time (judge=<model config>, not a panel)")
    if cfg.judge[0].model.kind != "litellm":
        raise ConfigError("judge=reference: the reference judge answers the gold verdict; qualify a real judge")
    if cfg.run.dry_run:
        raise ConfigError("run.dry_run: evalkit.judge qualify has no dry run")
    run, settings = cfg.run, cfg.judge_qualification
    return QualifySpec(cfg.benchmark, _judge(cfg, cfg.judge[0]), cfg.judge[0].backend.concurrency, build(cfg).models,
                       (run.cache_dir or run.output_root / "cache") if run.cache else None, settings.root(run.output_root),
                       settings.floors(), run.ci_level, run.bootstrap_resamples, run.seed, TrackingSpec.of(cfg.tracking, run))  # fmt: skip


def _judge(cfg: EvalConfig, judge: JudgeConfig) -> ActorSpec:
    """A judge's spec: its own backend's ``timeout_s`` bounds one attempt."""
    return ActorSpec(judge.model, judge.backend, cfg.judge_api_key(judge), judge.backend.timeout_s, cfg.judge_sent_params(judge),
                  judge.generation.max_tokens)  # fmt: skip
