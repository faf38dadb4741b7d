"""The SOBHard benchmark: Russian structured output, 11 families × 3 difficulties, 6 target
notations, 31 deterministic constraints, no LLM judge (spec ``sobhard_spec.md``)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from evalkit.benchmarks.base import Benchmark, register
from evalkit.benchmarks.bounds import safe_score
from evalkit.benchmarks.sobhard import data as data_mod
from evalkit.benchmarks.sobhard.constraints import CONSTRAINT_IDS, CONSTRAINTS, Context, Question, evaluate
from evalkit.benchmarks.sobhard.data import Row
from evalkit.benchmarks.sobhard.metrics import BREAKDOWNS, HEADLINE, question_scores, stat_plan
from evalkit.benchmarks.sobhard.plots import write_heatmap
from evalkit.benchmarks.sobhard.prompts import build_messages
from evalkit.benchmarks.sobhard.readers import FENCE_TAGS, TARGETS, ParseError, probe, read_target
from evalkit.benchmarks.sobhard.settings import CELLS, DIFFICULTIES, FAMILIES, SOBHardSettings
from evalkit.errors import ConfigError, DataError
from evalkit.stats import with_interval
from evalkit.types import Request, Sample, SampleScore, sha256_hex
from evalkit.untrusted import read_json

#: the largest ``dataset_meta.json`` read (bytes)
MAX_META_BYTES = 16 * 2**20

log = logging.getLogger("evalkit.sobhard")
_BACKTICK_RUN = re.compile(r"^[ \t]*(`{3,})", re.MULTILINE)


def fenced(tag: str, body: str) -> str:
    """``body`` in one code block tagged ``tag``; the fence is longer than any backtick
    fence line inside the body (CommonMark)."""
    longest = max((len(m.group(1)) for m in _BACKTICK_RUN.finditer(body)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{tag}\n{body if body.endswith(chr(10)) else body + chr(10)}{fence}"


def _json_safe(value: Any) -> Any:
    """The parsed answer as JSON for the journal, key order kept (YAML/TOML dates become
    text; non-text keys become text)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):  # YAML 0b…/TOML 0x… ints can exceed json.dumps' digit limit
        try:
            repr(value)
        except ValueError:
            return hex(value)
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    return str(value)


@register
class SOBHard(Benchmark):
    """SOBHard: prompts from the rows' templates, session replay from ``shots``, answers
    normalised (§4), read by the target readers (§5) and graded by the 31 constraints (§8);
    headline ``sample_pass_rate`` (§10)."""

    name = "sobhard"
    settings_model = SOBHardSettings
    headline_metric = "sample_pass_rate"
    reasoning_rule = "sobhard §4 step 5: reasoning blocks and lone tags removed outside fences"
    all_subsets = FAMILIES + CELLS
    default_subsets = FAMILIES
    supported_shots = None
    primary_score = "sample_pass"
    #: many breakdowns: MLflow metrics are the names without ``/``, the rest breakdown tables
    tracked_metrics = "top_level"
    aggregation_rules = (
        ("balance_score", "geometric mean over the family × difficulty cells evaluated of each cell's sample_pass_rate, "
                          "a cell under 0.01 counted as 0.01 (spec §10.2)"),
        ("sample_pass_rate/cell/*", "mean of sample_pass over the questions of that family × difficulty cell (spec §10.2)"),
        ("constraint/*", "mean over the questions where the constraint applied of its pass 0/1 (spec §10.2)"),
        ("*/family/*", "mean over the questions of that family (spec §10.2)"),
        ("sample_pass_rate/*", "mean of sample_pass over the questions with that value (spec §10.2)"),
        ("constraint_pass_rate", "mean over questions of the share of applicable constraints passed (spec §10.1)"),
        ("*_rate", "mean over questions of the 0/1 verdict; a session is one question, scored on its last turn (spec §10.1)"),
    )
    baselines = ("echo",)

    def __init__(self, settings: SOBHardSettings):
        super().__init__(settings)
        self.settings: SOBHardSettings = settings
        self._rows: dict[str, Row] = {}
        self._questions: dict[str, Question] = {}
        self._history: dict[str, list[Row]] = {}
        self._demos: list[Row] = []
        self._fingerprints: dict[str, str] = {}

    # ---- data -----------------------------------------------------------------------------
    def _read_split(self, split: str) -> tuple[list[dict[str, Any]], str]:
        s = self.settings
        if s.data_dir is not None:
            return data_mod.read_local_split(s.data_dir, split)
        if s.dataset:
            return data_mod.read_hub_split(s.dataset, split, s.revision)
        raise DataError("SOBHard: no data source; set benchmark.data_dir=<dir with test.jsonl, shots.jsonl> or benchmark.dataset=<hub id>")

    def _prompt_list(self) -> list[str] | None:
        if self.settings.data_dir is None:
            return None
        path = self.settings.data_dir / "dataset_meta.json"
        if not os.path.lexists(path):
            return None
        meta = read_json(path, MAX_META_BYTES, root=self.settings.data_dir, what="a dataset_meta.json")
        prompts = meta.get("prompts") if isinstance(meta, dict) else None
        return [p if isinstance(p, str) else p.get("template", "") for p in prompts] if isinstance(prompts, list) else None

    def _question(self, row: Row, where: str) -> Question:
        cats = row.meta.categories
        if cats.family not in FAMILIES:
            raise DataError(f"SOBHard {where}: unknown family {cats.family!r}")
        if cats.difficulty not in DIFFICULTIES:
            raise DataError(f"SOBHard {where}: unknown difficulty {cats.difficulty!r}")
        if cats.target_format not in TARGETS:
            raise DataError(f"SOBHard {where}: unknown target notation {cats.target_format!r} (known: {', '.join(TARGETS)})")
        tm = row.meta.task_meta
        work = (tm.get("turn_family") or cats.family) if cats.family == "session" else cats.family
        try:
            gold = read_target(cats.target_format, row.meta.reference, self.settings.strict_json)
        except ParseError as exc:
            raise DataError(f"SOBHard {where}: meta.reference does not parse as {cats.target_format}: {exc}") from None
        return Question(
            id=str(row.meta.id), family=cats.family, work_family=work, difficulty=cats.difficulty,
            target=cats.target_format, fence_tag=row.meta.fence_tag or FENCE_TAGS[cats.target_format],
            task_meta=tm, checks=row.meta.checks, gold=gold, meta_turn_index=row.meta.turn_index,
        )  # fmt: skip

    def _selected(self, row: Row) -> bool:
        chosen = self.settings.subsets
        if chosen is None:
            return True
        cats = row.meta.categories
        return cats.family in chosen or f"{cats.family}/{cats.difficulty}" in chosen

    def load(self) -> list[Sample]:
        """Read, validate and index both splits; return the selected graded questions.

        Raises:
            DataError: missing source, schema or hash violation, unparseable reference,
                incomplete session history, unknown notation, missing parser.
        """
        s = self.settings
        prompts = self._prompt_list()
        test_raw, test_sha = self._read_split(s.split)
        shots_raw, shots_sha = self._read_split(s.shots_split)
        test = data_mod.parse_rows(test_raw, f"split {s.split!r}", prompts)
        shots = data_mod.parse_rows(shots_raw, f"split {s.shots_split!r}", prompts)
        self._fingerprints = {f"sobhard/{s.split}": test_sha, f"sobhard/{s.shots_split}": shots_sha}
        probe({r.meta.categories.target_format for r in test} & set(TARGETS),
              need_jsonschema=any(r.meta.categories.family == "schema_gen" for r in test))  # fmt: skip
        by_dialogue: dict[str, list[Row]] = {}
        for shot in shots:
            if shot.meta.dialogue_id:
                by_dialogue.setdefault(shot.meta.dialogue_id, []).append(shot)
        self._demos = [shot for shot in shots if not shot.meta.dialogue_id]
        samples: list[Sample] = []
        for row in test:
            if not self._selected(row):
                continue
            sid = str(row.meta.id)
            where = f"split {s.split!r} row id={sid}"
            self._rows[sid] = row
            self._questions[sid] = self._question(row, where)
            history: list[Row] = []
            if row.meta.categories.family == "session":
                history = data_mod.session_history(row, by_dialogue, where)
            self._history[sid] = history
            cats = row.meta.categories
            samples.append(Sample(
                id=sid, subset=f"{cats.family}/{cats.difficulty}",
                data={"row": row.model_dump(mode="json"), "history": [str(h.meta.id) for h in history]},
            ))  # fmt: skip
        if s.validate_role_separation:
            leaked = data_mod.check_role_separation(test, shots)
            if leaked:
                log.warning("SOBHard: references of graded rows %s occur in the shots split (role separation)", leaked[:10])
        cells = {smp.subset for smp in samples}
        log.info("SOBHard: %d graded questions in %d cells, %d shots rows", len(samples), len(cells), len(shots))
        return samples

    def data_fingerprints(self) -> dict[str, str]:
        return dict(self._fingerprints)

    def prompt_fingerprint(self) -> str | None:
        rows = list(self._rows.values()) + [h for hist in self._history.values() for h in hist]
        templates = sorted({str(r.instruction) for r in rows})
        return sha256_hex("\0".join(templates)) if templates else None

    # ---- prompting ------------------------------------------------------------------------
    def shot_budget(self, shots: int) -> int:
        """Upper bound on replayed session turns: ``shots`` when > 0, else the
        benchmark's ``max_replayed_turns`` (§3)."""
        return shots if shots > 0 else self.settings.max_replayed_turns

    def build(self, sample: Sample, shots: int) -> Request:
        """Chat messages (§2.2, §3); params left to the engine.

        Raises:
            ConfigError: the shot budget is smaller than the conversation needs, or more
                demonstrations are asked for than the ``shots`` split holds.
        """
        row = self._rows[sample.id]
        history = self._history.get(sample.id, [])
        budget = self.shot_budget(shots)
        if len(history) > budget:
            raise ConfigError(
                f"shots: SOBHard session question {sample.id} (conversation {row.meta.dialogue_id}, turn "
                f"{len(history) + 1}) needs {len(history)} replayed turns but the shot budget is {budget}; "
                f"use shots>={len(history)} or benchmark.max_replayed_turns>={len(history)} (history is never truncated)"
            )
        demos: list[Row] = []
        if shots > 0 and self.settings.demos and row.meta.categories.family != "session":
            if shots > len(self._demos):
                raise ConfigError(f"shots: {shots} demonstrations asked, the shots split has {len(self._demos)}")
            demos = self._demos[:shots]
        return Request(sample_id=sample.id, subset=sample.subset, messages=build_messages(row, history, demos))

    # ---- scoring --------------------------------------------------------------------------
    def context(self, sample: Sample, output: str | None) -> Context:
        s = self.settings
        return Context(
            self._questions[sample.id], output, pairing=s.fence_pairing, strict_json=s.strict_json,
            grammar=s.numeric_strings, tolerant_leaves=s.leaf_compare == "tolerant",
        )  # fmt: skip

    def score(self, sample: Sample, output: str, registry: tuple = CONSTRAINTS) -> SampleScore:
        """Normalise, parse and grade one answer (§4–§10.1).

        Never raises: an error of the scorer itself (``MemoryError`` and
        ``RecursionError`` included) scores 0 on everything with ``detail`` "internal
        scoring error: ..."; ``detail`` and ``parsed`` are bounded as
        :mod:`evalkit.benchmarks.bounds` says. Answers are bounded as the readers say
        (:mod:`evalkit.benchmarks.sobhard.readers`: body length, YAML aliases and numbers).
        """
        return safe_score(
            lambda: self._score(sample, output, registry), question_scores([], True, False),
            log=log, what=f"SOBHard: scoring {sample.id}",
        )  # fmt: skip

    def _score(self, sample: Sample, output: str, registry: tuple) -> SampleScore:
        ctx = self.context(sample, output)
        results = evaluate(ctx, registry)
        if not results:
            log.warning("SOBHard: question %s has no applicable constraint", sample.id)
        scores = question_scores(results, not ctx.text, ctx.parse_ok)
        failed = [r for r in results if not r.passed]
        detail = "; ".join(f"{r.id}: {r.detail}" for r in failed) or None
        if not ctx.text:
            detail = "empty answer" + (f"; {detail}" if detail else "")
        try:
            parsed = _json_safe(ctx.parsed) if ctx.parse_ok else None
        except RecursionError:  # a document nested too deep to copy (or journal)
            parsed = None
        return SampleScore(
            scores=scores,
            parsed=parsed,
            checks={r.id: r.passed for r in results},
            failed_checks=[r.id for r in failed],
            status="ok" if ctx.parse_ok else "format_error",
            detail=detail,
        )

    def stat_plan(self, samples: list[Sample], epochs: list[list[dict[str, Any]]]) -> Any:
        """Questions as units, by family × difficulty cell (:func:`evalkit.benchmarks.sobhard.metrics.stat_plan`)."""
        categories = {s.id: s.data["row"]["meta"]["categories"] for s in samples}
        return stat_plan(samples, epochs, categories)

    # ---- built-in models ------------------------------------------------------------------
    def reference_output(self, sample: Sample) -> str:
        row = self._rows[sample.id]
        return fenced(self._questions[sample.id].fence_tag, row.meta.reference)

    def baseline_output(self, name: str, sample: Sample) -> str:
        """``echo``: the input block handed back in the requested fence (§14: must score 0)."""
        if name != "echo":
            raise NotImplementedError(f"sobhard has no baseline {name!r}")
        row = self._rows[sample.id]
        return fenced(self._questions[sample.id].fence_tag, row.inputs.input_data.strip())

    # ---- reporting ------------------------------------------------------------------------
    def write_plots(self, plot_dir: Any, metrics: dict[str, float], records: list[dict[str, Any]]) -> list[Any]:
        if not metrics:
            return []
        return [write_heatmap(Path(plot_dir), metrics)]

    def report_tables(self, metrics: dict[str, float], ci: dict[str, Any] | None = None,
                      counts: dict[str, dict[str, int]] | None = None) -> list[tuple[str, list[str], list[list[Any]]]]:  # fmt: skip
        ci, counts = ci or {}, counts or {}
        tables: list[tuple[str, list[str], list[list[Any]]]] = []
        tables.append(("SOBHard metrics", ["metric", "value"], [[m, with_interval(metrics[m], ci.get(m))] for m in HEADLINE if m in metrics]))
        cell_rows = []
        for family in FAMILIES:
            row: list[Any] = [family]
            for d in DIFFICULTIES:
                v = metrics.get(f"sample_pass_rate/cell/{family}/{d}")
                n = counts.get(f"{family}/{d}", {}).get("n_scored")
                row.append("" if v is None else f"{v:.4f} (n={n})" if n else f"{v:.4f}")
            if any(row[1:]):
                cell_rows.append(row)
        tables.append(("Sample pass rate by family × difficulty", ["family", *DIFFICULTIES], cell_rows))
        fam_rows = [
            [f] + [round(metrics[k], 4) if (k := f"{m}/family/{f}") in metrics else "" for m in
                   ("sample_pass_rate", "format_pass_rate", "content_pass_rate", "task_pass_rate")]
            for f in FAMILIES if f"sample_pass_rate/family/{f}" in metrics
        ]  # fmt: skip
        tables.append(("By family", ["family", "sample", "format", "content", "task"], fam_rows))
        for name in BREAKDOWNS:
            if name == "family":
                continue
            prefix = f"sample_pass_rate/{name}/"
            rows = [[k[len(prefix) :], round(v, 4)] for k, v in sorted(metrics.items()) if k.startswith(prefix)]
            if rows:
                tables.append((f"Sample pass rate by {name}", [name, "sample_pass_rate"], rows))
        con_rows = [[cid, round(metrics[f"constraint/{cid}"], 4)] for cid in CONSTRAINT_IDS if f"constraint/{cid}" in metrics]
        tables.append(("Constraint pass rates (over applicable questions)", ["constraint", "pass rate"], con_rows))
        return tables
