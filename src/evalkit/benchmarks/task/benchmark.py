"""A task written in YAML (``kind: task``): dataset, Jinja2 prompt, answer extraction, scorers
and metrics, with no Python (:mod:`evalkit.benchmarks.task.settings` states each field).

Like the built-in benchmarks, a task gets intervals, paired compare, repeats, budgets,
MLflow traces and the failure protocol: it is one more :class:`Benchmark`. Its runs,
MLflow runs and comparisons go by the task's own name (``benchmark.name``)."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from evalkit.benchmarks.base import Benchmark, score_means_plan
from evalkit.benchmarks.bounds import safe_score
from evalkit.benchmarks.task.scorers import LETTERS, extract, score_one, target_letter
from evalkit.benchmarks.task.settings import Dataset, TaskSettings
from evalkit.errors import DataError
from evalkit.jsonl import read_objects
from evalkit.stats import BINARY, Column
from evalkit.types import Request, Sample, SampleScore


class TaskBenchmark(Benchmark):
    """The benchmark of every YAML task; ``name`` is the task's."""

    name = "task"
    settings_model = TaskSettings
    supported_shots = None
    reasoning_rule = "none: the task's extraction rule (benchmark.extract) reads the answer as returned"
    aggregation_rules = (
        ("kappa/*", "Cohen's κ of the score (≥ 0.5 counts as a positive verdict) against the human label: "
                    "(observed − chance agreement) / (1 − chance agreement), chance from both rates"),
        ("agreement/*", "share of samples where the score (≥ 0.5 positive) and the human label agree"),
        ("label_rate", "share of samples the human label calls positive"),
        ("positive/*", "share of samples with a label whose score is ≥ 0.5"),
        ("*/weighted", "weighted mean of the category means (benchmark.metrics.weights, renormalised over the categories scored)"),
        ("*/*", "mean over the samples of that category"),
        ("*", "mean over the samples"),
    )

    def __init__(self, settings: TaskSettings):
        super().__init__(settings)
        self.settings: TaskSettings = settings
        self.name = settings.name  # type: ignore[misc]  (the task's own name, not the class's)
        first = settings.scorers[0].score_name
        self.primary_score = first  # type: ignore[misc]
        self.headline_metric = settings.metrics.headline or (f"{first}/weighted" if settings.metrics.weights else first)  # type: ignore[misc]
        self._digests: dict[str, str] = {}
        self._pools: dict[str, list[dict[str, Any]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pools": {}}  # demonstrations are not needed to score

    # ---- data -----------------------------------------------------------------------------
    def _read(self, ds: Dataset, path: Path | None, split: str) -> list[dict[str, Any]]:
        """Rows of a local file or of a pinned hub split (as plain JSON values), filtered."""
        where = str(path) if path is not None else f"{ds.hub}@{ds.revision}:{split}"
        if path is not None:
            rows, digest = _read_file(Path(path).expanduser(), ds.max_rows)
        else:
            rows, digest = _read_hub(ds.hub or "", split, ds.revision or "", ds.max_rows)
        self._digests[where] = digest
        return [r for r in rows if all(r.get(k) == v for k, v in ds.filter.items())]

    def load(self) -> list[Sample]:
        ds = self.settings.dataset
        rows = self._read(ds, ds.path, ds.split)
        return _samples(rows, ds, ds.split, str(ds.path or ds.hub))

    def data_fingerprints(self) -> dict[str, str]:
        return dict(self._digests)

    def prompt_fingerprint(self) -> str | None:
        p = self.settings.prompt
        text = json.dumps([p.system, p.template, p.answer_template], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    # ---- prompting ------------------------------------------------------------------------
    def _pool(self) -> list[dict[str, Any]]:
        """The demonstrations' samples (``fewshot.path``, else ``fewshot.split`` of the source,
        else the dataset itself), read once."""
        if "pool" not in self._pools:
            ds, shots = self.settings.dataset, self.settings.fewshot
            if shots.path is not None:
                rows = self._read(ds, shots.path, ds.split)
            elif shots.split is not None and ds.hub is not None:
                rows = self._read(ds, None, shots.split)
            else:
                rows = self._read(ds, ds.path, ds.split)
            where = str(shots.path or ds.path or ds.hub)
            self._pools["pool"] = [s.data for s in _samples(rows, ds, "shot", where)]
        return self._pools["pool"]

    def build(self, sample: Sample, shots: int) -> Request:
        p = self.settings.prompt
        messages: list[dict[str, Any]] = []
        if p.system:
            messages.append({"role": "system", "content": render(p.system, sample.data, p.max_chars, sample.id)})
        if shots:
            pool = [d for d in self._pool() if d["id"] != sample.id and d["input"] != sample.data["input"]]
            if len(pool) < shots:
                raise DataError(f"task {self.name}: shots={shots} but only {len(pool)} demonstrations to draw from")
            seed = self.settings.seed if self.settings.seed is not None else 0
            for demo in random.Random(f"{seed}/{sample.id}").sample(pool, shots):
                messages.append({"role": "user", "content": render(p.template, demo, p.max_chars, sample.id)})
                messages.append({"role": "assistant", "content": render(p.answer_template, demo, p.max_chars, sample.id)})
        messages.append({"role": "user", "content": render(p.template, sample.data, p.max_chars, sample.id)})
        if sum(len(m["content"]) for m in messages) > p.max_chars:
            raise DataError(f"task {self.name}: sample {sample.id!r}: the prompt is over prompt.max_chars={p.max_chars} characters")
        return Request(sample.id, sample.subset, messages=messages)

    # ---- scoring --------------------------------------------------------------------------
    def score(self, sample: Sample, output: str) -> SampleScore:
        names = [s.score_name for s in self.settings.scorers]

        def compute() -> SampleScore:
            answer = extract(self.settings.extract, output)
            if answer is None:
                return SampleScore(scores={n: 0.0 for n in names}, status="format_error",
                                   detail=f"no answer extracted ({self.settings.extract.kind})")  # fmt: skip
            target, choices = sample.data["target"], sample.data.get("choices")
            scores = {}
            for scorer in self.settings.scorers:
                pattern = (scorer.pattern or "").replace("{{ target }}", _escaped(target)) if scorer.kind == "regex" else None
                scores[scorer.score_name] = score_one(scorer, answer, target, choices, pattern)
            return SampleScore(scores=scores, parsed=answer[:200])

        return safe_score(compute, {n: 0.0 for n in names})

    def stat_plan(self, samples: list[Sample], epochs: list[list[dict[str, Any]]]) -> Any:
        """Each score's mean overall and per category (:func:`score_means_plan`), plus
        ``<score>/weighted`` with ``metrics.weights``."""
        plan = score_means_plan(samples, epochs)
        names = [s.score_name for s in self.settings.scorers]
        derives = []
        if self.settings.metrics.weights:
            derives.append(_weighted(names, self.settings.metrics.weights))
        if self.settings.dataset.fields.label:
            derives.append(_agreement(plan, samples, epochs, names))
        if derives:
            plan.derive = lambda base: {k: v for derive in derives for k, v in derive(base).items()}
        return plan

    # ---- built-in models ------------------------------------------------------------------
    def reference_output(self, sample: Sample) -> str:
        """The reference answer as a model would write it, for the task's extraction rule:
        ``Answer: <letter>`` (mc_letter), ``{"<field>": <target>}`` (json_field), else the target."""
        target, rule = sample.data["target"], self.settings.extract
        if rule.kind == "mc_letter":
            return f"Answer: {target_letter(target, sample.data.get('choices'))}"
        if rule.kind == "json_field":
            return json.dumps({rule.field: target}, ensure_ascii=False)
        return str(target)


def _escaped(target: Any) -> str:
    return re.escape(str(target))


def _weighted(names: list[str], weights: dict[str, float]) -> Any:
    import numpy as np

    def derive(base: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name in names:
            parts = [(w, base[f"{name}/{c}"]) for c, w in weights.items() if f"{name}/{c}" in base]
            if not parts and name in base:
                out[f"{name}/weighted"] = base[name]
            elif parts:
                values = np.stack([v for _, v in parts])
                w = np.array([w for w, _ in parts])[:, None] * ~np.isnan(values)
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[f"{name}/weighted"] = np.nansum(values * w, axis=0) / w.sum(axis=0)
        return out

    return derive


def _agreement(plan: Any, samples: list[Sample], epochs: list[list[dict[str, Any]]], names: list[str]) -> Any:
    """Add the columns ``label_rate``, ``positive/<score>`` (score ≥ 0.5) and
    ``agreement/<score>`` to ``plan`` (over the scored units with a label), and return the
    derive of ``kappa/<score>``: Cohen's κ of two raters on a 0/1 verdict,
    (p_o − p_e) / (1 − p_e) with p_e = p·q + (1 − p)(1 − q) (``nan`` when p_e is 1)."""
    import numpy as np

    label = {s.id: s.data.get("label") for s in samples}
    pos = {sid: i for i, sid in enumerate(plan.units)}
    shape = (max(len(epochs), 1), len(plan.units))
    wanted = ["label_rate"] + [f"{kind}/{n}" for n in names for kind in ("positive", "agreement")]
    columns = {name: Column(np.zeros(shape), np.zeros(shape, dtype=bool), BINARY) for name in wanted}
    for e, rows in enumerate(epochs):
        for r in rows:
            i, lab = pos.get(r.get("sample_id")), label.get(r.get("sample_id"))
            if i is None or lab is None:
                continue
            columns["label_rate"].values[e, i], columns["label_rate"].mask[e, i] = lab, True
            for n in names:
                value = (r.get("scores") or {}).get(n)
                if isinstance(value, (int, float)):
                    for kind, v in (("positive", value >= 0.5), ("agreement", (value >= 0.5) == bool(lab))):
                        columns[f"{kind}/{n}"].values[e, i], columns[f"{kind}/{n}"].mask[e, i] = float(v), True
    plan.columns.update(columns)

    def derive(base: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for n in names:
            p, q, po = base[f"positive/{n}"], base["label_rate"], base[f"agreement/{n}"]
            pe = p * q + (1 - p) * (1 - q)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f"kappa/{n}"] = np.where(pe < 1, (po - pe) / np.where(pe < 1, 1 - pe, 1), np.nan)
        return out

    return derive


def _label(value: Any, at: str) -> float | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "1.0"):
        return 1.0
    if text in ("0", "false", "no", "0.0"):
        return 0.0
    raise DataError(f"{at}: label {str(value)[:40]!r} is not 0/1, true/false or yes/no")


def _samples(rows: list[dict[str, Any]], ds: Dataset, split: str, where: str) -> list[Sample]:
    """Samples from dataset rows by the field mapping.

    Raises:
        DataError: a row without the input or target column, choices that are not a list of
            strings, or a duplicate id — one line naming the file and row.
    """
    f = ds.fields
    out, seen = [], set()
    for n, row in enumerate(rows):
        at = f"{where}: row {n + 1}"
        for col in (f.input, f.target):
            if row.get(col) is None:
                raise DataError(f"{at}: no column {col!r} (dataset.fields maps input={f.input!r}, target={f.target!r})")
        sid = str(row[f.id]) if f.id and row.get(f.id) is not None else f"{split}-{n}"
        if sid in seen:
            raise DataError(f"{at}: duplicate id {sid[:80]!r}")
        seen.add(sid)
        choices = _choices(row.get(f.choices) if f.choices else None, at)
        data = {**row, "id": sid, "input": str(row[f.input]), "target": row[f.target], "choices": choices,
                "letters": list(LETTERS[: len(choices or [])]), "label": _label(row.get(f.label), at) if f.label else None}  # fmt: skip
        subset = str(row.get(f.category)) if f.category and row.get(f.category) is not None else "all"
        out.append(Sample(id=sid, subset=subset, data=data))
    return out


def _choices(value: Any, at: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise DataError(f"{at}: choices must be a list (or a JSON array in a CSV cell)") from None
    if not isinstance(value, list) or not all(isinstance(c, (str, int, float)) for c in value) or len(value) > len(LETTERS):
        raise DataError(f"{at}: choices must be a list of at most {len(LETTERS)} strings")
    return [str(c) for c in value]


def _plain(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Rows as plain JSON values, and a SHA-256 over them (the data fingerprint)."""
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) + "\n" for r in rows)
    return [json.loads(line) for line in text.splitlines()], hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_file(path: Path, max_rows: int) -> tuple[list[dict[str, Any]], str]:
    """Rows of a ``.jsonl``, ``.csv`` or ``.parquet`` file (at most ``max_rows``).

    Raises:
        DataError: the file is missing or unreadable, or holds more rows than ``max_rows``.
    """
    if not path.is_file():
        raise DataError(f"benchmark.dataset.path: {path} does not exist")
    try:
        if path.suffix == ".jsonl":
            rows = [obj for _, obj in read_objects(path)]
        elif path.suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as fh:
                rows = list(csv.DictReader(fh))
        else:
            import pyarrow.parquet as pq  # deferred: only Parquet tasks need it

            rows = pq.read_table(path).to_pylist()
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader's failure is one line
        raise DataError(f"benchmark.dataset.path: {path} cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None
    if len(rows) > max_rows:
        raise DataError(f"benchmark.dataset.path: {path} has {len(rows)} rows, more than dataset.max_rows={max_rows}")
    return _plain(rows)


def _read_hub(hub: str, split: str, revision: str, max_rows: int) -> tuple[list[dict[str, Any]], str]:
    """Rows of a pinned split of a Hugging Face dataset (``datasets`` honours its offline cache).

    Raises:
        DataError: unreachable, unknown, or more rows than ``max_rows``.
    """
    try:
        import datasets  # deferred: only hub tasks need it

        ds = datasets.load_dataset(hub, split=split, revision=revision)
    except Exception as exc:  # noqa: BLE001 - offline, unknown id, bad split: one line
        raise DataError(f"benchmark.dataset.hub: cannot load split {split!r} of {hub!r}@{revision} ({type(exc).__name__})") from None
    if len(ds) > max_rows:
        raise DataError(f"benchmark.dataset.hub: {hub} {split} has {len(ds)} rows, more than dataset.max_rows={max_rows}")
    return _plain([dict(r) for r in ds])


# ------------------------------------------------------------------------------------------
# Jinja2, sandboxed and bounded
# ------------------------------------------------------------------------------------------
_ENVS: dict[int, Any] = {}


def _env(max_chars: int) -> Any:
    """A sandboxed Jinja2 environment whose ``*`` / ``**`` and calls cannot build a value
    past ``max_chars`` (the sandbox alone lets ``'ab' * 3000000`` through)."""
    if max_chars in _ENVS:
        return _ENVS[max_chars]
    from jinja2 import StrictUndefined
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import SandboxedEnvironment

    class Bounded(SandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
                raise SecurityError(f"exponent {right} is over the bound")
            if operator == "*":
                for a, b in ((left, right), (right, left)):
                    if isinstance(a, (str, list, tuple)) and isinstance(b, int) and len(a) * b > max_chars:
                        raise SecurityError(f"a value of {len(a) * b} items is over prompt.max_chars={max_chars}")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's signature
            if any(isinstance(a, int) and not isinstance(a, bool) and a > max_chars for a in (*args, *kwargs.values())):
                raise SecurityError(f"an argument over prompt.max_chars={max_chars}")
            return super().call(__context, __obj, *args, **kwargs)

    env = Bounded(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    _ENVS[max_chars] = env
    return env


def render(template: str, data: dict[str, Any], max_chars: int, sample_id: str) -> str:
    """``template`` rendered with ``data`` in the bounded sandbox, streamed and stopped past
    ``max_chars`` characters.

    Raises:
        DataError: a template error, an undefined variable, or a prompt over the bound —
            one line naming the sample.
    """
    from jinja2.exceptions import TemplateError

    try:
        parts, size = [], 0
        for chunk in _env(max_chars).from_string(template).generate(**data):
            size += len(chunk)
            if size > max_chars:
                raise DataError(f"sample {sample_id!r}: the prompt is over prompt.max_chars={max_chars} characters")
            parts.append(chunk)
    except TemplateError as exc:
        raise DataError(f"sample {sample_id!r}: prompt template: {type(exc).__name__}: {str(exc)[:200]}") from None
    return "".join(parts)
