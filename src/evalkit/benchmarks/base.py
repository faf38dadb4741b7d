"""The benchmark contract and its registry.

A benchmark is one package under ``evalkit.benchmarks`` plus one YAML under
``conf/benchmark/``. It owns its data loading, prompt assembly, its solver, scoring and
aggregation; it never calls litellm or Ray itself (the engine does).

One sample path (inspect_ai's ``Task(dataset, solver, scorer)``): every sample is built into
a :class:`~evalkit.types.Request` (:meth:`Benchmark.build`), solved into a
:class:`~evalkit.types.Trajectory` by the benchmark's :class:`Solver` (default
:class:`Generate`: one ``generate``; ACEBench agent categories: the rollout loop), and
scored by :meth:`Benchmark.score_sample` from the sample and its trajectory — in a run and
in ``rescore`` alike.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from evalkit.errors import ConfigError
from evalkit.settings import BenchmarkSettings
from evalkit.stats import BINARY, GRADED, Column, StatPlan, with_interval
from evalkit.types import Generator, Request, Sample, SampleScore, Trajectory, id_positions, sample_keys
from evalkit.untrusted import read_text


#: the closing tag of a reasoning block (DeepSeek-R1, Qwen3, ... chat templates)
REASONING_END = "</think>"


def strip_reasoning_prefix(text: str) -> str | None:
    """The text after the last ``</think>`` of ``text``, or ``None`` when it holds none.
    Applying it twice changes nothing (what it returns holds no ``</think>``)."""
    at = text.rfind(REASONING_END)
    return None if at < 0 else text[at + len(REASONING_END) :]


@dataclass(frozen=True)
class Selection:
    """Which samples a run takes, as a benchmark may read them (issue 46: a selection costs
    only itself): ``ids`` — ``run.sample_ids`` / ``run.sample_ids_file`` (every row is read,
    only these kept); ``first`` — ``run.limit`` when no ids are given and no gate orders the
    data (``run.stop_when``): the first ``first`` samples, reading stopped there. ``None``
    for either: no bound of that kind. The engine still selects (and orders) what a
    benchmark returns (:func:`evalkit.engine.plan.select_samples`); a benchmark may return
    more than the selection, never less."""

    ids: frozenset[str] | None = None
    first: int | None = None


#: the largest ``run.sample_ids_file`` read (bytes): every id of the largest benchmark, many times over
MAX_SAMPLE_IDS_FILE_BYTES = 64 * 2**20


def wanted_ids(run: Any) -> list[str] | None:
    """The ids ``run.sample_ids`` and ``run.sample_ids_file`` (``run``: the run's settings,
    :class:`evalkit.config.RunSettings`) name, in order (repeats kept;
    ``#`` lines and blank lines of the file skipped); ``None`` when neither is set.

    Raises:
        ConfigError: the ids file cannot be read (one line naming it)."""
    wanted: list[str] | None = None
    if run.sample_ids is not None:
        wanted = list(run.sample_ids)
    if run.sample_ids_file is not None:
        text = read_text(run.sample_ids_file, MAX_SAMPLE_IDS_FILE_BYTES, what="a sample-ids file (one id per line)",
                         error=ConfigError)  # fmt: skip
        lines = text.split("\n")
        stripped = (ln.strip() for ln in lines)
        wanted = (wanted or []) + [ln for ln in stripped if ln and not ln.startswith("#")]
    return wanted


def selection_of(run: Any) -> Selection:
    """What a benchmark may read of its data for ``run`` (:class:`Selection`; ``run``: the run's
    settings, :class:`evalkit.config.RunSettings`):
    the ids of :func:`wanted_ids`, else the first ``run.limit`` samples — unless
    ``run.stop_when``'s gate orders the whole data first (then every sample is read, and only
    the capped order's are checked).

    Raises:
        ConfigError: as :func:`wanted_ids`."""
    wanted = wanted_ids(run)
    first = run.limit if wanted is None and not run.stop_when else None
    return Selection(ids=frozenset(wanted) if wanted is not None else None, first=first)


class Benchmark(ABC):
    """Base class of every benchmark.

    Subclasses set ``name`` and ``settings_model`` (their pydantic settings class) and
    implement the abstract methods. Errors in the data are raised as
    :class:`evalkit.errors.DataError` with a one-line message naming the file and sample.
    """

    name: ClassVar[str]
    settings_model: ClassVar[type[BenchmarkSettings]] = BenchmarkSettings
    #: name of the headline metric in ``summary.json["metrics"]``
    headline_metric: ClassVar[str] = "accuracy"
    #: subsets the benchmark knows (used to validate ``benchmark.subsets``)
    all_subsets: ClassVar[tuple[str, ...]] = ()
    default_subsets: ClassVar[tuple[str, ...]] = ()
    #: shot counts the benchmark supports (``None`` = any)
    supported_shots: ClassVar[tuple[int, ...] | None] = (0,)
    #: rule baselines runnable as ``model=baseline_<name>`` (offline, no network)
    baselines: ClassVar[tuple[str, ...]] = ()
    #: whether ``build_completion`` exists (base-model text-completion mode, ``model.api=completion``)
    supports_completion: ClassVar[bool] = False
    #: the per-sample score that stands for a sample's verdict (tables, pass@k when it is 0/1,
    #: the flips of ``compare``); recorded in ``summary.json`` as ``primary_score``
    primary_score: ClassVar[str] = "accuracy"
    #: which metrics become MLflow metrics: ``"all"``, or ``"top_level"`` (the names without
    #: ``/``; the rest go to breakdown tables) for a benchmark with many breakdowns;
    #: recorded in ``summary.json`` as ``tracked_metrics``
    tracked_metrics: ClassVar[Literal["all", "top_level"]] = "all"
    #: how each metric aggregates, one line per metric name pattern (``fnmatch``), first match
    #: wins; ``summary.json`` (``aggregation``) and ``report.md`` state it
    aggregation_rules: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: what the benchmark's own scorer does with reasoning text in an answer (its spec's
    #: rule), stated in every journal row as ``reasoning_rule``
    reasoning_rule: ClassVar[str] = "none: the answer is scored as returned"
    #: the inclusive ``(low, high)`` every per-sample score of a journal row must lie in (a
    #: 0/1 verdict or a fraction for every built-in score); the readers of a journal refuse a
    #: row outside it (:meth:`score_bounds`, :meth:`evalkit.journal.Journal.check_scores`)
    score_range: ClassVar[tuple[float, float]] = (0.0, 1.0)

    #: the first sample id of the data, when :meth:`load_selection` may have returned samples
    #: without it (named in the error on an unknown ``run.sample_ids`` entry); ``None`` = unknown
    example_id: str | None = None

    def __init__(self, settings: BenchmarkSettings):
        self.settings = settings

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.score is Benchmark.score and cls.score_sample is Benchmark.score_sample:
            raise TypeError(f"benchmark {cls.__name__} must implement score(sample, output) or score_sample(sample, trajectory)")

    def declared(self) -> dict[str, Any]:
        """What the benchmark declares for the tools that read a run without importing it
        (``compare``, tracking), recorded in ``summary.json``: ``primary_score``,
        ``tracked_metrics`` and ``data_source`` (where its data was read: the first set
        setting named ``*_dir`` / ``*_path`` / ``*_url`` or ``dataset``; ``""`` if none)."""
        values = self.settings.model_dump(mode="json")
        where = next((str(v) for k, v in values.items() if v and (k == "dataset" or k.endswith(("_dir", "_path", "_url")))), "")
        return {"primary_score": self.primary_score, "tracked_metrics": self.tracked_metrics, "data_source": where}

    def score_bounds(self, name: str) -> tuple[float, float]:
        """``(low, high)``, inclusive: the range of the per-sample score ``name`` in a journal
        row (:data:`score_range` unless a benchmark says otherwise for a score)."""
        return self.score_range

    def instrument(self) -> dict[str, Any]:
        """The benchmark's part of the run's instrument (what measured it, beside the model):
        the scoring rules when a benchmark has several (ACEBench ``{"scoring": "official"}``);
        ``{}`` for one fixed scorer. Read by :func:`evalkit.report.summary.instrument`."""
        return {}

    # ---- data -------------------------------------------------------------------------
    @abstractmethod
    def load(self) -> list[Sample]:
        """All samples of the selected subsets, in the benchmark's canonical order."""

    def load_selection(self, selection: Selection | None = None) -> list[Sample]:
        """The samples a run's ``selection`` needs, in canonical order: a superset of it (the
        engine selects from it), each sample not yet checked further than its data
        (:meth:`check_selection` follows, on what the run sends). A benchmark that can read
        only what is selected overrides this (a YAML task streams its rows). Default:
        :meth:`load` (every sample, checked).

        Raises:
            DataError: as :meth:`load`."""
        return self.load()

    def check_selection(self, samples: list[Sample]) -> None:
        """The checks :meth:`load` makes on its samples that :meth:`load_selection` left to
        the samples a run sends (a YAML task's templates rendered in the bounded child).
        Default: none (:meth:`load` checked them).

        Raises:
            DataError: one line naming the sample."""

    def check(self, selection: Selection | None = None) -> None:
        """The benchmark's own checks of its settings against its data, run before anything
        starts (no Ray, no server, no run directory; :func:`evalkit.compose.check_benchmark`),
        whatever the model: a benchmark whose settings can be wrong for its data (a YAML
        task's patterns, weights, templates) says so here, one line naming the key.
        ``selection``: the run's (:class:`Selection`), so that only the data it needs is read
        and checked; ``None``: all of it. The default checks nothing.

        Raises:
            ConfigError / DataError: one line naming the key (and the data file).
        """

    def sends_images(self) -> bool:
        """True when the benchmark's requests carry image parts
        (:mod:`evalkit.images`): the run then needs a model that takes images
        (:func:`evalkit.compose.check_images_taken`). Default: False."""
        return False

    def data_fingerprints(self) -> dict[str, str]:
        """Extra fingerprints of the data files (e.g. the spec's per-language digest)."""
        return {}

    def prompt_fingerprint(self) -> str | None:
        """SHA-256 over the prompt templates the benchmark uses (``None`` if it has none)."""
        return None

    # ---- prompting --------------------------------------------------------------------
    @abstractmethod
    def build(self, sample: Sample, shots: int) -> Request:
        """The request for ``sample`` with ``shots`` demonstrations (params left empty)."""

    def build_completion(self, sample: Sample, shots: int) -> Request:
        """The text-completion request (``Request.prompt`` set) for base models.

        If the prompt ends with the beginning of the answer (an *answer prefix* the model
        continues), put it in ``request.meta["answer_prefix"]``: the engine prepends it to
        the model's continuation, so ``output`` (and scoring, replay and rescoring) always
        see the whole answer; the bare continuation is kept as ``raw_output``."""
        raise NotImplementedError(f"{self.name} has no text-completion mode")

    # ---- solving ----------------------------------------------------------------------
    def solver(self) -> "Solver":
        """The solver shipped once to every worker (picklable). Default: :class:`Generate`."""
        return Generate()

    def is_rollout(self, sample: Sample) -> bool:
        """True when the solver runs ``sample`` as a multi-turn rollout: its journal row keeps
        the transcript, and it cannot be replayed from a single recorded output."""
        return False

    def needs_user_model(self, samples: list[Sample]) -> bool:
        """True when some of ``samples`` is a rollout that needs a user simulator
        (``benchmark.user_model``)."""
        return False

    def judge_prompts(self, sample: Sample) -> list[list[dict[str, Any]]]:
        """The chat messages of each call one judge makes about ``sample``'s answer, the
        answer left empty (what the dry run estimates; a task's ``llm_judge`` scorers).
        Default: none."""
        return []

    def reference_agents(self, sample: Sample) -> tuple[Any, Any]:
        """``(agent, user)`` scripted models replaying the gold trajectory of a rollout sample."""
        raise NotImplementedError(f"{self.name} has no reference agent")

    # ---- scoring ----------------------------------------------------------------------
    def score_sample(self, sample: Sample, trajectory: Trajectory) -> SampleScore:
        """The one scoring entry (runs, ``rescore`` and :meth:`limit_score`): the verdict on
        ``sample`` from its trajectory. Must never raise for any text.

        A benchmark implements this **or** :meth:`score`, not both: the default scores the
        final output with :meth:`score`; a benchmark whose verdict needs more than the final
        output (a rollout's end state) overrides this one."""
        return self.score(sample, trajectory.final_output)

    def score(self, sample: Sample, output: str) -> SampleScore:
        """The verdict on one single-turn answer ``output`` (the hook :meth:`score_sample`
        calls by default; never called by the engine directly). Must never raise for any text.

        Raises:
            NotImplementedError: the benchmark implements :meth:`score_sample` instead.
        """
        raise NotImplementedError(f"{self.name} scores through score_sample, not score")

    def limit_score(self, sample: Sample, detail: str) -> SampleScore:
        """The verdict on an answer whose scoring hit a limit (time, memory, a crash of the
        scoring process): a wrong answer — every score 0, the names those of an empty
        answer's verdict — with status ``scorer_limit`` and ``detail`` saying which limit."""
        names = self.score_sample(sample, Trajectory(final_output="")).scores
        return SampleScore(scores={k: 0.0 for k in names}, status="scorer_limit", detail=detail)

    def stat_plan(self, samples: list[Sample], epochs: list[list[dict[str, Any]]]) -> Any:
        """The benchmark's metrics — the one definition of each — over its independent units
        (:class:`evalkit.stats.StatPlan`), from the scored records (rows of
        ``predictions.jsonl``) of each epoch. ``samples`` is the full selection (scored or
        not). Point estimates (:meth:`aggregate`), intervals and paired tests all come from it.
        At the end of a run these records (and those of :meth:`category_counts` and
        :meth:`write_plots`) are the rows' summary view (:func:`evalkit.journal.summary_view`:
        scores, checks, usage and the benchmark's own fields, not the model's texts).

        Default (:func:`score_means_plan`): the unit is the sample, stratified by
        ``sample.subset``; each per-sample score ``s`` gives ``s`` (its mean over the scored
        samples) and, when the selection holds several subsets, ``s/<subset>``."""
        return score_means_plan(samples, epochs)

    def aggregate(self, samples: list[Sample], records: list[dict[str, Any]]) -> dict[str, float]:
        """The metrics of one epoch's scored ``records``: the point estimates of
        :meth:`stat_plan` (``{name: value}``, undefined ones left out). Not a second
        definition: benchmarks define their metrics in :meth:`stat_plan` only."""
        plan = self.stat_plan(samples, [records])
        return plan.point() if plan is not None else {}

    # ---- built-in models --------------------------------------------------------------
    @abstractmethod
    def reference_output(self, sample: Sample) -> str:
        """The gold answer rendered as a model would write it (must score 1.0)."""

    def baseline_output(self, name: str, sample: Sample) -> str:
        """The answer of rule baseline ``name`` (one of ``baselines``) for ``sample``."""
        raise NotImplementedError(f"{self.name} has no baseline {name!r}")

    def write_plots(self, plot_dir: Any, metrics: dict[str, float], records: list[dict[str, Any]]) -> list[Any]:
        """Write figures (PNG) into ``plot_dir``; returns their paths. They land in the run
        directory's ``plots/``, in ``report.md`` and in MLflow. Default: none."""
        return []

    def category_counts(self, samples: list[Sample], records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
        """Per category: ``n_requested`` (selected samples), ``n_scored`` and ``n_failed``
        (requested but not scored: failed or never ran). Default: by ``sample.subset``."""
        counts: dict[str, dict[str, int]] = {}
        scored = {r.get("sample_id") for r in records}
        for sid, subset in zip(*sample_keys(samples)):  # ids and subsets only: a packed selection is not unpacked
            c = counts.setdefault(subset, {"n_requested": 0, "n_scored": 0, "n_failed": 0})
            c["n_requested"] += 1
            c["n_scored" if sid in scored else "n_failed"] += 1
        return counts

    def report_tables(self, metrics: dict[str, float], ci: dict[str, Any] | None = None,
                      counts: dict[str, dict[str, int]] | None = None) -> list[tuple[str, list[str], list[list[Any]]]]:  # fmt: skip
        """Tables for ``report.md``: ``(title, headers, rows)``. ``metrics``: the run's (or
        its partial) metrics; ``ci``: their intervals (``{name: {low, high, ...}}``);
        ``counts``: :meth:`category_counts` summed over epochs. Default: one table of every
        metric with its interval."""
        ci = ci or {}
        rows = [[k, with_interval(v, ci.get(k))] for k, v in sorted(metrics.items())]
        return [("Metrics", ["metric", "value"], rows)]


class Solver(ABC):
    """How a sample becomes a trajectory (inspect_ai's solver). Lives in a worker: picklable,
    and holds no live state between samples (a rollout builds its own environment).

    A solver with ``needs_judges = True`` is also given the run's judges (``judge=...``):
    ``solve(..., judges={judge name: Generator})``, the panel in order; their calls are
    the engine's like the agent's (actor ``judge``), and ``judges[name].generate(request,
    accept=fn)`` keeps an answer in the response cache only when ``fn(completion)`` is true
    (an invalid verdict is asked again on resume). ``request.meta["params"]`` adds
    parameters to the actor's own (a judge's ``response_format``) and
    ``request.meta["turn"]`` fields to the call's entry in ``turns``."""

    #: whether :meth:`solve` takes ``judges`` (:mod:`evalkit.benchmarks.task.solver`)
    needs_judges: ClassVar[bool] = False

    @abstractmethod
    async def solve(self, sample: Sample, request: Request, agent: Generator, user: Generator | None) -> Trajectory:
        """Solve ``sample`` whose first request is ``request``. ``agent`` / ``user`` answer
        ``await generate(Request)`` with parameters, cache and retries filled in by the engine,
        and raise ``ModelCallError`` (``failure.actor`` set) when a call fails after its
        retries; a solver lets that propagate. Per-call statistics are the engine's."""


class Generate(Solver):
    """The default solver: one ``generate`` of the sample's request. In completion mode the
    request's ``meta["answer_prefix"]`` (the beginning of the answer the prompt ends with) is
    put in front of the continuation, which is kept as ``data["raw_output"]``."""

    async def solve(self, sample: Sample, request: Request, agent: Generator, user: Generator | None) -> Trajectory:
        completion = await agent.generate(request)
        text = completion.text or ""
        prefix = request.meta.get("answer_prefix") or ""
        return Trajectory(final_output=prefix + text, data={"raw_output": completion.text} if prefix else {})


def score_means_plan(samples: list[Sample], epochs: list[list[dict[str, Any]]]) -> StatPlan:
    """The default :class:`~evalkit.stats.StatPlan`: units are the samples scored in some
    epoch (ids in selection order), strata their ``subset``; for every per-sample score
    ``s`` of the records, ``s`` = its mean over the samples that have it and, when the
    selection holds more than one subset, ``s/<subset>`` = its mean within that subset.
    A column is :data:`~evalkit.stats.BINARY` when every value is 0 or 1."""
    import numpy as np

    # the selection's ids and subsets and one index by id (a packed selection's own: no
    # sample unpacked, no dict per call; issue 46 item 3)
    all_ids, all_subsets = sample_keys(samples)
    index = id_positions(samples)
    split = len(set(all_subsets)) > 1
    n_e, n_all = max(len(epochs), 1), len(all_ids)
    scored = np.zeros(n_all, dtype=bool)  # a sample with a row in some epoch is a unit
    wide: dict[str, Column] = {}  # one column per metric over the whole selection, cut to the units below
    for e, rows in enumerate(epochs):
        for r in rows:  # one pass: a packed row is unpacked once
            i = index.get(r.get("sample_id"))  # type: ignore[arg-type]
            if i is None:
                continue
            scored[i] = True
            for name, value in (r.get("scores") or {}).items():
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                    continue  # a NaN score is not scored (never read as 0)
                for metric in (name, f"{name}/{all_subsets[i]}") if split else (name,):
                    col = wide.get(metric)
                    if col is None:  # made once per metric (a default built per row cost two arrays of N each: quadratic)
                        col = wide[metric] = Column(np.zeros((n_e, n_all)), np.zeros((n_e, n_all), dtype=bool))
                    col.values[e, i], col.mask[e, i] = float(value), True
    chosen = np.flatnonzero(scored)
    ids = [all_ids[i] for i in chosen]
    keys = sorted({all_subsets[i] for i in chosen})
    kept = slice(None) if len(chosen) == n_all else chosen  # every sample scored: the columns as made, not copies
    columns = {metric: Column(col.values[:, kept], col.mask[:, kept]) for metric, col in wide.items()}
    del wide
    for col in columns.values():
        col.kind = BINARY if np.all(np.isin(col.values[col.mask], (0.0, 1.0))) else GRADED
    stratum = {k: j for j, k in enumerate(keys)}
    strata = np.fromiter((stratum[all_subsets[i]] for i in chosen), dtype=int, count=len(chosen))
    return StatPlan(ids, strata, columns, unit_label="samples", stratum_label="subset")


_REGISTRY: dict[str, type[Benchmark]] = {}


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: make a benchmark available under ``cls.name`` (looked up with
    :func:`evalkit.benchmarks.get_benchmark_class`)."""
    _REGISTRY[cls.name] = cls
    return cls
