"""The ACEBench benchmark: normal and special categories (one request each) and the agent
categories (rollouts against simulated APIs, spec §5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.benchmarks.acebench.agent.envs import SeedTexts, load_seed
from evalkit.benchmarks.acebench.agent.loops import AceBenchSolver, first_agent_messages
from evalkit.benchmarks.acebench.agent.reference import ScriptedAgent, ScriptedUser, reference_script
from evalkit.benchmarks.acebench.agent.scoring import check_end_state, process_accuracy
from evalkit.benchmarks.acebench.categories import (
    AGENT_CATEGORIES,
    ALL_CATEGORIES,
    DEFAULT_CATEGORIES,
    GROUPS,
    LANGUAGES,
    MULTI_TURN_CATEGORIES,
    family,
)
from evalkit.benchmarks.acebench.checker import (
    RULE_OFFICIAL,
    check_special,
    check_special_evalscope,
    score_normal,
    score_normal_evalscope,
)
from evalkit.benchmarks.acebench.data import category_files, language_fingerprint, load_category, resolve_layout
from evalkit.benchmarks.acebench.download import ensure_downloaded
from evalkit.benchmarks.acebench.jsonsafe import json_safe
from evalkit.benchmarks.acebench.metrics import dialogue_id, stat_plan
from evalkit.benchmarks.acebench.prompts import (
    PromptTemplates,
    agent_template_keys,
    render_messages,
    system_template_key,
    user_template_key,
)
from evalkit.benchmarks.acebench.reference import normal_reference, special_reference
from evalkit.benchmarks.acebench.settings import AceBenchSettings
from evalkit.benchmarks.base import Benchmark, Generate, Solver, register
from evalkit.benchmarks.bounds import safe_score
from evalkit.stats import scored_of, with_interval
from evalkit.types import Request, Sample, SampleScore, Trajectory


@register
class AceBench(Benchmark):
    """ACEBench (ACEBench/ACEBench @ e6db74b7): prompt-only function calling, scored per spec §3–§4."""

    name = "acebench"
    settings_model = AceBenchSettings
    headline_metric = "overall"
    #: the reasoning rule of each ``benchmark.scoring`` (``reasoning_rule`` of the run's rows)
    reasoning_rules = {
        "official": "acebench: the text after the first </think> (spec §9.6)",
        "evalscope": "acebench, EvalScope's rule: the first <think>…</think> block cut out wherever it stands; "
                     "a bare </think> stays",
    }  # fmt: skip

    @property
    def reasoning_rule(self) -> str:  # type: ignore[override]
        """The rule of this run's ``benchmark.scoring`` (:attr:`reasoning_rules`)."""
        return self.reasoning_rules.get(self.settings.scoring, self.reasoning_rules["official"])

    all_subsets = ALL_CATEGORIES
    default_subsets = DEFAULT_CATEGORIES
    supported_shots = (0,)
    primary_score = "accuracy"
    aggregation_rules = (
        ("accuracy/*normal_multi_turn_*", "mean over dialogues of 1 when every turn of the dialogue is right, else 0 (spec §4.5)"),
        ("process_acc/*normal_multi_turn_*", "mean over dialogues of the share of its turns that are right (spec §4.5)"),
        ("process_acc/*agent_*", "mean over rollouts of the share of milestones reached (spec §4.4)"),
        ("accuracy/*ATOM", "unweighted mean of the normal_atom_* categories evaluated (spec §4.6)"),
        ("accuracy/*SINGLE_TURN", "unweighted mean of the two single-turn categories evaluated (spec §4.6)"),
        ("accuracy/*MULTI_TURN", "unweighted mean of the two multi-turn categories evaluated (spec §4.6)"),
        ("accuracy/*NORMAL", "unweighted mean of the normal categories evaluated (spec §4.6)"),
        ("accuracy/*SPECIAL", "unweighted mean of the special categories evaluated (spec §4.6)"),
        ("accuracy/*AGENT", "unweighted mean of the agent categories evaluated (spec §4.6)"),
        ("accuracy/*", "mean over records (agent categories: over rollouts) of accuracy 0/1 (spec §4.2)"),
        ("overall_upstream_rounded*", "the leaderboard's figure: 0.578·NORMAL + 0.2676·SPECIAL + 0.1545·AGENT rounded to 3 decimals, all three groups only"),
        ("overall/*", "0.578·NORMAL + 0.2676·SPECIAL + 0.1545·AGENT of that language, renormalised over the groups evaluated (spec §4.6)"),
        ("overall", "0.578·NORMAL + 0.2676·SPECIAL + 0.1545·AGENT, renormalised over the groups evaluated (spec §4.6); "
                    "language=all: the unweighted mean of the languages' overall"),
    )

    def __init__(self, settings: AceBenchSettings):
        super().__init__(settings)
        self.settings: AceBenchSettings = settings
        self._root: tuple[Path, Path] | None = None
        self._templates: PromptTemplates | None = None
        self._seeds: dict[str, SeedTexts] = {}

    # ---- data -----------------------------------------------------------------------------
    @property
    def languages(self) -> list[str]:
        return list(LANGUAGES) if self.settings.language == "all" else [self.settings.language]

    @property
    def categories(self) -> list[str]:
        chosen = self.settings.subsets or list(self.default_subsets)
        return [c for c in ALL_CATEGORIES if c in chosen]

    def _layout(self) -> tuple[Path, Path]:
        if self._root is None:
            data_dir = self.settings.data_dir
            if data_dir is None:
                data_dir = ensure_downloaded(self.settings.cache_dir, self.settings.source_url)
            self._root = resolve_layout(data_dir)
        return self._root

    @property
    def templates(self) -> PromptTemplates:
        if self._templates is None:
            self._templates = PromptTemplates(self._layout()[1])
        return self._templates

    def load(self) -> list[Sample]:
        data_all, _ = self._layout()
        samples = []
        for language in self.languages:
            for category in self.categories:
                for prompt, answer in load_category(data_all, language, category):
                    samples.append(
                        Sample(
                            id=f"{language}/{prompt['id']}",
                            subset=category,
                            data={"language": language, "prompt": prompt, "answer": answer},
                        )
                    )
        # fail early on a bad template rather than at the first build()
        for key in self._template_keys():
            self.templates.get(key)
        return samples

    def data_fingerprints(self) -> dict[str, str]:
        data_all, _ = self._layout()
        return {f"acebench_files/{lang}": language_fingerprint(data_all, lang) for lang in self.languages}

    def _template_keys(self) -> list[str]:
        keys = []
        for language in self.languages:
            categories = self.categories
            if any(family(c) != "agent" for c in categories):
                keys.append(user_template_key(language))
            keys.extend(system_template_key(c, language) for c in categories if family(c) != "agent")
            for category in categories:
                if family(category) == "agent":
                    keys.extend(self._agent_keys(category, language).values())
        return sorted(set(keys))

    def _agent_keys(self, category: str, language: str) -> dict[str, str]:
        return agent_template_keys(category, language, self.settings.agent_prompt_language)

    def _agent_templates(self, category: str, language: str) -> dict[str, str]:
        return {role: self.templates.get(key) for role, key in self._agent_keys(category, language).items()}

    def prompt_fingerprint(self) -> str | None:
        return self.templates.fingerprint(self._template_keys())

    # ---- prompting ------------------------------------------------------------------------
    def build(self, sample: Sample, shots: int) -> Request:
        if shots != 0:
            raise ValueError(f"ACEBench supports only 0 shots, got {shots}")
        if family(sample.subset) == "agent":
            # identity only: the rollout builds its prompts turn by turn
            templates = self._agent_templates(sample.subset, sample.data["language"])
            messages = first_agent_messages(templates, sample.subset, sample.data["prompt"])
        else:
            messages = render_messages(self.templates, sample.subset, sample.data["language"], sample.data["prompt"])
        return Request(sample_id=sample.id, subset=sample.subset, messages=messages)

    # ---- scoring --------------------------------------------------------------------------
    def score(self, sample: Sample, output: str) -> SampleScore:
        """Check one answer (spec §4.1 normal, §4.3 special).

        Never raises: an error of the scorer itself (``MemoryError``, ``RecursionError``
        included) scores 0 with ``detail`` "internal scoring error: ..."; ``detail`` and
        ``parsed`` are bounded as :mod:`evalkit.benchmarks.bounds` says. Answers are
        bounded as the decoder says (:mod:`evalkit.benchmarks.acebench.decoder`: length and
        arithmetic).
        """
        return safe_score(lambda: self._score(sample, output), {"accuracy": 0.0})

    def _score(self, sample: Sample, output: str) -> SampleScore:
        output = output if isinstance(output, str) else str(output)
        if family(sample.subset) == "agent":
            return SampleScore(scores={"accuracy": 0.0, "process_acc": 0.0}, detail="agent samples are scored from their trajectory")
        ground_truth = sample.data["answer"]["ground_truth"]
        if family(sample.subset) == "special":  # EvalScope tests as upstream does, after its own reasoning cut
            if self.settings.scoring == "evalscope":
                verdict, rule = check_special_evalscope(sample.subset, output, ground_truth)
            else:
                verdict, rule = check_special(sample.subset, output, ground_truth), RULE_OFFICIAL
            return SampleScore(scores={"accuracy": float(verdict.passed)}, parsed=None, detail=verdict.detail,
                               scoring_rule=rule)  # fmt: skip
        if self.settings.scoring == "evalscope":
            verdict, calls, rule = score_normal_evalscope(sample.data["prompt"]["function"], output, ground_truth, sample.subset)
        else:
            (verdict, calls), rule = score_normal(sample.data["prompt"]["function"], output, ground_truth), RULE_OFFICIAL
        if calls is None:
            return SampleScore(scores={"accuracy": 0.0}, parsed=None, status="format_error", detail=verdict.detail, scoring_rule=rule)
        return SampleScore(scores={"accuracy": float(verdict.passed)}, parsed=json_safe(calls), detail=verdict.detail, scoring_rule=rule)

    def instrument(self) -> dict[str, Any]:
        """``{"scoring": "official" | "evalscope"}``: the rules that score this run
        (``benchmark.scoring``; :func:`evalkit.report.summary.instrument`)."""
        return {"scoring": self.settings.scoring}

    def stat_plan(self, samples: list[Sample], epochs: list[list[dict[str, Any]]]) -> Any:
        """Records, multi-turn dialogues and agent rollouts as units, by language × category
        (:func:`evalkit.benchmarks.acebench.metrics.stat_plan`): every metric's one definition."""
        return stat_plan(samples, epochs, self.languages)

    def category_counts(self, samples: list[Sample], records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
        """Per category (``<language>/<category>`` with language=all) and group: requested,
        scored and failed samples; multi-turn categories also count dialogues (a dialogue is
        scored when every one of its turns is)."""
        scored = {r.get("sample_id") for r in records}
        prefix = self.settings.language == "all"
        counts: dict[str, dict[str, int]] = {}
        dialogues: dict[str, dict[str, bool]] = {}
        for s in samples:
            key = f"{s.data['language']}/{s.subset}" if prefix else s.subset
            c = counts.setdefault(key, {"n_requested": 0, "n_scored": 0, "n_failed": 0})
            c["n_requested"] += 1
            c["n_scored" if s.id in scored else "n_failed"] += 1
            if s.subset in MULTI_TURN_CATEGORIES:
                d = dialogues.setdefault(key, {})
                did = dialogue_id(s.data["prompt"]["id"])
                d[did] = d.get(did, True) and s.id in scored
        for key, d in dialogues.items():
            counts[key].update(dialogues_requested=len(d), dialogues_scored=sum(d.values()))
        for lang in self.languages if prefix else [None]:
            for group, members in GROUPS.items():
                keys = [f"{lang}/{m}" if lang else m for m in members]
                parts = [counts[k] for k in keys if k in counts]
                if parts:
                    counts[f"{lang}/{group}" if lang else group] = {n: sum(p[n] for p in parts) for n in ("n_requested", "n_scored", "n_failed")}
        return counts

    # ---- agent rollouts ---------------------------------------------------------------------
    def is_rollout(self, sample: Sample) -> bool:
        return family(sample.subset) == "agent"

    def needs_user_model(self, samples: list[Sample]) -> bool:
        return any(s.subset == "agent_multi_turn" for s in samples)

    def _seed(self, language: str) -> SeedTexts:
        if language not in self._seeds:
            data_all, _ = self._layout()
            files = [category_files(data_all, language, c)[1] for c in AGENT_CATEGORIES]
            self._seeds[language] = load_seed(files)
        return self._seeds[language]

    def solver(self) -> Solver:
        """:class:`AceBenchSolver` when agent categories are selected (it holds their
        templates and simulator texts), else the plain :class:`Generate`."""
        agent = [c for c in self.categories if c in AGENT_CATEGORIES]
        if not agent:
            return Generate()
        templates = {(c, lang): self._agent_templates(c, lang) for c in agent for lang in self.languages}
        seeds = {lang: self._seed(lang) for lang in self.languages}
        return AceBenchSolver(templates, seeds, max_dialog_turns=self.settings.max_dialog_turns)

    def score_sample(self, sample: Sample, trajectory: Trajectory) -> SampleScore:
        """Agent samples: the end state against the ground truth (§6.3) and process_acc over
        the milestones (§4.4), from ``trajectory.data``; other categories: :meth:`score` of the
        final output. Never raises, and bounds ``detail`` and ``parsed`` (as :meth:`score`)."""
        if family(sample.subset) != "agent":
            return self.score(sample, trajectory.final_output)

        def compute() -> SampleScore:
            data = trajectory.data if isinstance(trajectory.data, dict) else {}
            end_state = data.get("end_state") or []
            answer = sample.data["answer"]
            verdict = check_end_state(end_state, answer.get("ground_truth"))
            process = process_accuracy(data.get("process_trace") or [], answer.get("mile_stone") or [], verdict.passed)
            return SampleScore(
                scores={"accuracy": float(verdict.passed), "process_acc": float(process)},
                parsed=json_safe(end_state),
                detail=verdict.detail,
            )

        return safe_score(compute, {"accuracy": 0.0, "process_acc": 0.0})

    def reference_agents(self, sample: Sample) -> tuple[ScriptedAgent, ScriptedUser]:
        record, answer = sample.data["prompt"], sample.data["answer"]
        script = reference_script(sample.data["language"], record["id"], answer.get("mile_stone"))
        return ScriptedAgent(script), ScriptedUser(record["question"])

    # ---- built-in models ------------------------------------------------------------------
    def reference_output(self, sample: Sample) -> str:
        if family(sample.subset) == "agent":
            return ""  # agent samples replay a script through reference_agents()
        ground_truth = sample.data["answer"]["ground_truth"]
        if family(sample.subset) == "special":
            return special_reference(sample.subset, ground_truth)
        return normal_reference(sample.data["prompt"]["function"], ground_truth)

    def report_tables(self, metrics: dict[str, float], ci: dict[str, Any] | None = None,
                      counts: dict[str, dict[str, int]] | None = None) -> list[tuple[str, list[str], list[list[Any]]]]:  # fmt: skip
        """Per language: the categories (scored of requested, accuracy and process_acc with
        their intervals) and the groups with OVERALL."""
        ci, counts = ci or {}, counts or {}
        tables = []
        prefixes = [""] if self.settings.language != "all" else [f"{lang}/" for lang in LANGUAGES]
        for prefix in prefixes:
            title_lang = f" ({prefix[:-1]})" if prefix else ""
            rows = []
            for category in ALL_CATEGORIES:
                acc = metrics.get(f"accuracy/{prefix}{category}")
                if acc is None:
                    continue
                process = metrics.get(f"process_acc/{prefix}{category}")
                rows.append([category, scored_of(counts.get(f"{prefix}{category}")),
                             with_interval(acc, ci.get(f"accuracy/{prefix}{category}")),
                             "" if process is None else with_interval(process, ci.get(f"process_acc/{prefix}{category}"))])  # fmt: skip
            tables.append((f"ACEBench categories{title_lang}", ["category", "scored", "accuracy", "process_acc"], rows))
            group_rows = [[g, scored_of(counts.get(f"{prefix}{g}")), with_interval(metrics[f"accuracy/{prefix}{g}"], ci.get(f"accuracy/{prefix}{g}"))]
                          for g in GROUPS if f"accuracy/{prefix}{g}" in metrics]  # fmt: skip
            overall_key = f"overall/{prefix[:-1]}" if prefix else "overall"
            if overall_key in metrics:
                group_rows.append(["overall", "", with_interval(metrics[overall_key], ci.get(overall_key))])
            tables.append((f"ACEBench groups{title_lang}", ["group", "scored", "accuracy"], group_rows))
        if self.settings.language == "all" and "overall" in metrics:
            tables.append(("ACEBench overall (mean of languages)", ["metric", "value"], [["overall", with_interval(metrics["overall"], ci.get("overall"))]]))
        return tables
