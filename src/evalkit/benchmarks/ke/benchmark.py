"""The KE benchmark: key-step extraction from coding-agent trajectories (KE spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.benchmarks.base import Benchmark, register
from evalkit.benchmarks.bounds import safe_score
from evalkit.benchmarks.ke.baselines import BASELINES, baseline_prediction, render_answer
from evalkit.benchmarks.ke.data import KEData, load_ke
from evalkit.benchmarks.ke.metrics import MACRO, SCORE_NAMES, item_scores, stat_plan
from evalkit.benchmarks.ke.parser import MAX_PRED_IDS, PARSER_VERSION, ParseResult, parse_answer, step_index
from evalkit.benchmarks.ke.prompts import ANSWER_PREFIX, Truncation, load_template, render_icl_block, render_prompt
from evalkit.benchmarks.ke.settings import DIFFICULTIES, KESettings
from evalkit.stats import scored_of
from evalkit.types import Request, Sample, SampleScore, sha256_hex

#: the 3-shot caveat: in report.md only when the run built 3-shot prompts
CAVEAT_3SHOT = "3-shot uses evalkit's stand-in example layout (spec §3.4): not comparable to historical 3-shot runs."
CAVEATS = (
    "Scores measure agreement with model-made labels (Claude Opus 4.7 extracted tasks and labelled steps), "
    "not coding-task success; same-source bias for Opus (spec §1).",
    CAVEAT_3SHOT,
    f"Parser {PARSER_VERSION} (spec §5); the original scorer's regex is unknown.",
)


def split_output(output: str) -> tuple[str, str]:
    """``(raw, mode)`` of an engine ``output``.

    In completion mode the engine prepends :data:`ANSWER_PREFIX` to the continuation, so an
    output starting with it is parsed as a completion of ``- step_`` (§5 R2). A chat reply
    that happens to start with the same text parses identically except for a continuation
    that starts with spaces before digits (documented limitation).
    """
    if output.startswith(ANSWER_PREFIX) and output[len(ANSWER_PREFIX) :].strip():
        return output[len(ANSWER_PREFIX) :], "completion"
    return output, "chat"


@register
class KE(Benchmark):
    """KE (Plain-KE): which steps' observations carried the information critical to the task.

    Graded set = pilot minus ICL ids (§2.1); prompt §3; parser §5; per-item P/R/F1/F0.5 and
    their per-item means, headline ``f1_macro`` (§6); rule baselines §8.
    """

    name = "ke"
    settings_model = KESettings
    headline_metric = "f1_macro"
    all_subsets = DIFFICULTIES
    default_subsets = DIFFICULTIES
    supported_shots = (0, 3)
    primary_score = "f1"
    aggregation_rules = (
        ("*_macro/*", "mean over the items of that difficulty of the per-item score (spec §6)"),
        ("f1_macro", "mean of per-item F1 (each item weighs equally; spec §6)"),
        ("f05_macro", "mean of per-item F0.5, not F0.5 of the mean P and R (spec §6)"),
        ("*_macro", "mean over items of the per-item score (spec §6)"),
    )
    baselines = BASELINES
    supports_completion = True
    reasoning_rule = "ke R3: the text after the last </think>, else the text before an unclosed <think>"

    def __init__(self, settings: KESettings):
        super().__init__(settings)
        self.settings: KESettings = settings
        self._data: KEData | None = None
        self._index_cache: dict[str, dict[int, str]] = {}
        #: shot counts of the prompts this instance rendered (the run's ``shots``)
        self.shots_rendered: set[int] = set()

    # ---- data -----------------------------------------------------------------------------
    @property
    def truncation(self) -> Truncation:
        t = self.settings.truncation
        return Truncation(obs=t.obs, thought=t.thought, icl_obs=t.icl_obs, icl_thought=t.icl_thought)

    @property
    def data(self) -> KEData:
        """Pilot, ICL and graded set (loaded once). Raises DataError (see :func:`load_ke`)."""
        if self._data is None:
            s = self.settings
            self._data = load_ke(s.resolve(s.pilot_path), s.resolve(s.icl_path), s.expected_graded)
        return self._data

    def load(self) -> list[Sample]:
        """The graded samples (pilot order, ICL ids excluded), ``subset`` = difficulty.

        Raises:
            DataError: see :func:`evalkit.benchmarks.ke.data.load_ke`.
        """
        load_template()  # fail early on a broken template file
        chosen = set(self.settings.subsets or DIFFICULTIES)
        return [
            Sample(id=s["sample_id"], subset=s["difficulty"], data=s)
            for s in self.data.graded
            if s["difficulty"] in chosen
        ]

    def icl_block(self) -> str:
        """The rendered 3-shot example block (§3.4 stand-in)."""
        return render_icl_block(load_template(), self.data.icl.samples, self.truncation)

    def data_fingerprints(self) -> dict[str, Any]:
        """§2.4 fingerprint plus ``icl_block_sha256`` and the ``parser_version`` (§9)."""
        return {
            **self.data.fingerprints(),
            "icl_block_sha256": sha256_hex(self.icl_block()),
            "truncation": self.truncation.as_dict(),
            "parser_version": PARSER_VERSION,
        }

    def prompt_fingerprint(self) -> str | None:
        """SHA-256 of ``prompt_plain.txt`` (equal to the spec's §3.1 text)."""
        return load_template().sha256

    # ---- prompting ------------------------------------------------------------------------
    def render(self, sample: Sample, shots: int) -> str:
        """The exact Plain-KE prompt text (§3.2) with 0 or 3 examples.

        Raises:
            ValueError: ``shots`` not in (0, 3).
        """
        if shots not in self.supported_shots:
            raise ValueError(f"KE supports shots 0 or 3, got {shots}")
        examples = self.data.icl.samples if shots == 3 else ()
        self.shots_rendered.add(shots)
        return render_prompt(sample.data, examples, self.truncation)

    def build(self, sample: Sample, shots: int) -> Request:
        """Chat mode: the full prompt as one user message, no system message (§3.3)."""
        prompt = self.render(sample, shots)
        return Request(sample_id=sample.id, subset=sample.subset, messages=[{"role": "user", "content": prompt}])

    def build_completion(self, sample: Sample, shots: int) -> Request:
        """Completion mode: the same prompt text, ending in ``- step_`` (§3.3)."""
        prompt = self.render(sample, shots)
        return Request(sample_id=sample.id, subset=sample.subset, prompt=prompt, meta={"answer_prefix": ANSWER_PREFIX})

    # ---- scoring --------------------------------------------------------------------------
    def _index(self, sample: Sample) -> dict[int, str]:
        idx = self._index_cache.get(sample.id)
        if idx is None:
            idx = step_index(s["step_id"] for s in sample.data["trajectory_steps"])
            self._index_cache[sample.id] = idx
        return idx

    def parse(self, sample: Sample, raw: str | None, mode: str) -> ParseResult:
        """§5 parser on a raw output of ``mode`` (``chat`` | ``completion``)."""
        return parse_answer(raw, mode, self._index(sample))

    def score(self, sample: Sample, output: str) -> SampleScore:
        """Per-item P/R/F1/F0.5 of one non-empty output (§5, §6); ``parsed`` = predicted ids.

        Never raises: an error of the scorer itself (``MemoryError`` included) scores 0
        with ``detail`` "internal scoring error: ...". A blank output (only possible when
        re-scoring) has no scores at all (§6: failed items are never 0) and status
        ``format_error``. An answer naming more than
        :data:`~evalkit.benchmarks.ke.parser.MAX_PRED_IDS` distinct step ids scores 0.
        ``detail`` and ``parsed`` are bounded as :mod:`evalkit.benchmarks.bounds` says.
        """
        return safe_score(lambda: self._score(sample, output), {k: 0.0 for k in SCORE_NAMES})

    def _score(self, sample: Sample, output: str) -> SampleScore:
        raw, mode = split_output(output if isinstance(output, str) else str(output))
        result = self.parse(sample, raw, mode)
        if result.failed:
            return SampleScore(scores={}, parsed=None, status="format_error", detail="empty response (R1): not scorable")
        gold = sample.data["gold_step_ids"]
        if result.over_limit:
            return SampleScore(
                scores={k: 0.0 for k in SCORE_NAMES}, parsed=result.pred,
                detail=f"mode={mode} the answer names more than {MAX_PRED_IDS:,} distinct step ids: not a selection of steps, scored 0",
            )  # fmt: skip
        scores = item_scores(result.pred, gold)
        tp = len(set(result.pred) & set(gold))
        detail = f"mode={mode} TP={tp} FP={len(result.pred) - tp} FN={len(gold) - tp}"
        if result.unknown_ids:
            detail += f" unknown_ids={','.join(result.unknown_ids)}"
        return SampleScore(scores=scores, parsed=result.pred, detail=detail)

    def stat_plan(self, samples: list[Sample], epochs: list[list[dict[str, Any]]]) -> Any:
        """Items as units, by difficulty (:func:`evalkit.benchmarks.ke.metrics.stat_plan`), from
        the records with all four per-item scores: ``f1_macro`` (headline), ``precision_macro``,
        ``recall_macro``, ``f05_macro`` and ``<name>/<difficulty>`` (§6)."""
        difficulty = {s.id: s.subset for s in samples}
        rows = [[(r["sample_id"], difficulty.get(r["sample_id"], r.get("subset", "?")), r["scores"]) for r in records
                 if all(k in (r.get("scores") or {}) for k in SCORE_NAMES)] for records in epochs]  # fmt: skip
        return stat_plan(rows)

    # ---- built-in models ------------------------------------------------------------------
    def reference_output(self, sample: Sample) -> str:
        """The gold ids as a chat answer, ``step_000, step_004, step_005``."""
        return render_answer(list(sample.data["gold_step_ids"]))

    def baseline_output(self, name: str, sample: Sample) -> str:
        """Rule baseline ``name`` (§8) rendered as a chat answer; ``empty`` gives an id-free
        sentence (scored 0, never a failure).

        Raises:
            NotImplementedError: an unknown baseline.
        """
        if name not in BASELINES:
            raise NotImplementedError(f"ke has no baseline {name!r}")
        return render_answer(baseline_prediction(name, sample.data["trajectory_steps"], self.settings.first_k))

    # ---- reporting ------------------------------------------------------------------------
    def report_tables(self, metrics: dict[str, float], ci: dict[str, Any] | None = None,
                      counts: dict[str, dict[str, int]] | None = None) -> list[tuple[str, list[str], list[list[Any]]]]:  # fmt: skip
        """Macro P/R/F1/F0.5 (percent, 2 decimals, with intervals) overall and per difficulty,
        items scored of requested; provenance; caveats (the 3-shot one only when this run
        rendered 3-shot prompts)."""
        ci, counts = ci or {}, counts or {}

        def pct(name: str) -> str:
            v, c = metrics.get(name), ci.get(name)
            if v is None:
                return "—"
            return f"{100 * v:.2f}%" + (f" [{100 * c['low']:.2f}, {100 * c['high']:.2f}]" if c else "")

        total = {k: sum(c.get(k, 0) for c in counts.values()) for k in ("n_requested", "n_scored")}
        rows = [["all", scored_of(total if counts else None)] + [pct(MACRO[k]) for k in SCORE_NAMES]]
        for diff in DIFFICULTIES:
            if f"f1_macro/{diff}" in metrics:
                rows.append([diff, scored_of(counts.get(diff))] + [pct(f"{MACRO[k]}/{diff}") for k in SCORE_NAMES])
        tables: list[tuple[str, list[str], list[list[Any]]]] = [
            ("KE per-item means", ["difficulty", "items", "precision", "recall", "F1 (headline)", "F0.5"], rows)
        ]
        prov: list[list[Any]] = [["parser_version", PARSER_VERSION], ["template_sha256", load_template().sha256],
                                 ["format", self.settings.format], ["truncation", self.truncation.as_dict()]]  # fmt: skip
        if self._data is not None:
            for k, v in self.data_fingerprints().items():
                if k not in {"parser_version", "truncation"}:
                    prov.append([k, v])
        tables.append(("Provenance", ["field", "value"], prov))
        caveats = [c for c in CAVEATS if c != CAVEAT_3SHOT or 3 in self.shots_rendered]
        tables.append(("Caveats", ["caveat"], [[c] for c in caveats]))
        return tables

    def write_plots(self, plot_dir: Any, metrics: dict[str, float], records: list[dict[str, Any]]) -> list[Any]:
        """``ke_f1_distribution.png``: histogram of per-item F1 (scored items only)."""
        f1 = [float(r["scores"]["f1"]) for r in records if "f1" in (r.get("scores") or {})]
        if not f1:
            return []
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plot_dir = Path(plot_dir)
        plot_dir.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.hist(f1, bins=[i / 10 for i in range(11)], edgecolor="black")
        mean = sum(f1) / len(f1)
        ax.axvline(mean, color="red", linestyle="--", label=f"mean F1 = {100 * mean:.2f}%")
        ax.set_xlabel("per-item F1")
        ax.set_ylabel("items")
        ax.set_title(f"KE per-item F1 ({len(f1)} scored items)")
        ax.legend()
        fig.tight_layout()
        path = plot_dir / "ke_f1_distribution.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return [path]

