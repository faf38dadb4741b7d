"""``benchmark.*`` of a task written in YAML (``kind: task``): its dataset, prompt, answer
extraction, scorers and metrics. Every field is checked here, so a malformed task file is one
line naming the field (exit 2), like every config error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalkit.benchmarks.base import BenchmarkSettings
from evalkit.images import Limits


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fields(_Strict):
    """Which column of a dataset row is what. ``input`` and ``target`` are required columns;
    ``id`` (default: the row's index, ``"<split>-<n>"``), ``choices`` (a list, or a JSON array
    in a CSV cell, for multiple choice), ``category`` (the subset a sample is counted in) and
    ``label`` (a person's verdict on the answer being scored, 0/1, ``true``/``false`` or
    ``yes``/``no``: the scorers' agreement with it is reported as Cohen's κ) are optional.
    ``images``: a column holding one image or a list of them (a path relative to the data
    file's folder, a ``data:`` URI, or the bytes a Parquet or Hugging Face ``Image`` column
    holds); they go into the sample's user turn as image parts after the rendered text, in
    order (:mod:`evalkit.images`)."""

    id: str | None = Field(default=None, description='the column of the sample id (unset: the row\'s index, "<split>-<n>")')
    images: str | None = Field(default=None, description="the column of an image or a list of them (path, data: URI or bytes)")
    label: str | None = Field(default=None, description="the column of a person's verdict on the answer (0/1, true/false, yes/no): Cohen's κ reported")
    input: str = Field(default="input", description="the column of the question (required)")
    target: str = Field(default="target", description="the column of the reference answer (required)")
    choices: str | None = Field(default=None, description="the column of the choices of a multiple-choice row (a list, or a JSON array in CSV)")
    category: str | None = Field(default=None, description="the column of the category (subset) a sample is counted in")


class ImageLimits(_Strict):
    """Bounds on a task's images (:class:`evalkit.images.Limits`, whose defaults
    these are): ``max_bytes`` per image, ``max_pixels`` (width × height, read from the header
    before decoding; at most Pillow's own 89,478,485-pixel guard), ``max_per_sample`` images
    per row, ``max_request_bytes`` of all the images of one request, ``max_held_bytes`` of
    the images the run holds at once (in the driver, and in Ray's object store: image files
    beyond it are read again when a request needs them; at least ``max_request_bytes``)."""

    max_bytes: int = Field(default=Limits.max_bytes, ge=1, description="bytes of one image file")
    max_pixels: int = Field(default=Limits.max_pixels, ge=1, le=89_478_485, description="width × height of one image, read from its header before decoding")
    max_per_sample: int = Field(default=Limits.max_per_sample, ge=1, description="images of one row")
    max_request_bytes: int = Field(default=Limits.max_request_bytes, ge=1, description="bytes of all the images of one request")
    max_held_bytes: int = Field(default=Limits.max_held_bytes, ge=1, description="bytes of the images the run holds at once (at least max_request_bytes)")

    @model_validator(mode="after")
    def _held_covers_a_request(self) -> "ImageLimits":
        if self.max_held_bytes < self.max_request_bytes:
            raise ValueError(f"max_held_bytes={self.max_held_bytes} is under max_request_bytes={self.max_request_bytes}: "
                             "the images of one request are held at once")  # fmt: skip
        return self

    def limits(self) -> Limits:
        """These bounds as :class:`evalkit.images.Limits`."""
        return Limits(self.max_bytes, self.max_pixels, self.max_per_sample, self.max_request_bytes, self.max_held_bytes)


class Dataset(_Strict):
    """A local file (``path``: ``.jsonl``, ``.csv`` or ``.parquet``; relative paths against the
    working directory) or a Hugging Face dataset (``hub`` with a pinned ``revision``: a commit
    or tag; read through ``datasets``, whose offline cache is honoured), its ``split``, the
    column mapping ``fields`` and ``filter`` (``{column: value}``: only rows equal on every
    one). ``max_rows`` bounds what is read (a larger file is an error, not cut)."""

    path: Path | None = Field(default=None, description="a local .jsonl, .csv or .parquet file (relative: to the working directory); or hub")
    hub: str | None = Field(default=None, description="a Hugging Face dataset id (with a pinned revision); or path")
    revision: str | None = Field(default=None, description="the hub dataset's pinned commit or tag (required with hub)")
    split: str = Field(default="test", description="the split read")
    fields: Fields = Field(default_factory=Fields, description="which column of a row is what")
    filter: dict[str, str | int | float | bool] = Field(default_factory=dict, description="{column: value}: only rows equal on every one are kept")
    max_rows: int = Field(default=100_000, ge=1, description="the most rows read (a larger file is an error, not cut)")
    image_limits: ImageLimits = Field(default_factory=ImageLimits, description="bounds on the task's images")

    @model_validator(mode="after")
    def _one_source(self) -> "Dataset":
        if (self.path is None) == (self.hub is None):
            raise ValueError("benchmark.dataset: give exactly one of dataset.path (a local file) or dataset.hub (a Hugging Face id)")
        if self.hub is not None and not self.revision:
            raise ValueError("benchmark.dataset.revision: a hub dataset needs a pinned revision (a commit or tag)")
        if self.path is not None and self.path.suffix not in (".jsonl", ".csv", ".parquet"):
            raise ValueError(f"benchmark.dataset.path: {self.path.name!r} is not .jsonl, .csv or .parquet")
        return self


class FewShot(_Strict):
    """Demonstrations (``shots=N``) drawn from ``path`` (a file like the dataset's, with the
    same fields) or, when unset, from the dataset's ``split`` of the same source, without the
    sample itself; drawn with ``seed`` (default: ``run.seed``) per sample."""

    path: Path | None = Field(default=None, description="a file of demonstrations with the dataset's fields (unset: the dataset's source)")
    split: str | None = Field(default=None, description="the split demonstrations are drawn from (the sample itself left out)")


#: the largest ``prompt.max_chars`` a task may set (characters)
MAX_PROMPT_CHARS = 4_000_000


class Prompt(_Strict):
    """A Jinja2 ``template`` (rendered in a sandbox; the row's columns are its variables, plus
    ``input``, ``target``, ``choices`` and ``letters``), an optional ``system`` prompt (a
    template too), the ``answer_template`` of a demonstration (each demonstration is a user
    turn by ``template`` and an assistant turn by ``answer_template``, before the question),
    and ``max_chars``: the
    most characters one rendered prompt may have (the sandbox alone lets ``'ab' * 3000000``
    through; a prompt past the bound is a data error naming the sample). Every template
    renders under :mod:`evalkit.benchmarks.task.template`'s bounds: no value it builds may
    pass ``max_chars``, one render takes at most ``MAX_STEPS`` loop iterations and calls,
    and every prompt of every sample is rendered once when the task loads in a child
    process with a time and memory limit (a template over any bound is one line, exit 2).
    ``max_chars`` is at most :data:`MAX_PROMPT_CHARS` (4,000,000: a million-token context's
    worth; beyond it the bound would no longer bound the renderer's memory)."""

    template: str = Field(min_length=1, description="the user turn: a Jinja2 template of the row's columns, input, target, choices, letters")
    system: str | None = Field(default=None, description="a system prompt (a template too)")
    answer_template: str = Field(default="{{ target }}", description="a demonstration's assistant turn (a template)")
    max_chars: int = Field(default=50_000, ge=1, le=MAX_PROMPT_CHARS, description="the most characters one rendered prompt may have")
    #: an image whose longer side is over this many pixels is scaled down to it before it is
    #: sent (``None``: sent at its own size)
    image_max_side: int | None = Field(default=None, ge=16)


class Extract(_Strict):
    """How the answer is taken from a model's output before scoring (on the whole output as
    returned: no reasoning block is removed unless ``benchmark.strip_reasoning_prefix``):
    ``none`` (the output, stripped), ``regex`` (group ``group`` of the last match of
    ``pattern``), ``json_field`` (the value of ``field`` in the first JSON object of the output),
    ``last_line`` (the last non-empty line), ``mc_letter`` (the last choice letter A-Z in the
    first of these forms the output has: ``Answer: B``, ``(B)``, a line of the letter alone,
    a line starting ``B.`` or ``B)``). Nothing extracted
    scores 0 (status ``format_error``)."""

    kind: Literal["none", "regex", "json_field", "last_line", "mc_letter"] = Field(
        default="none", description="how the answer is taken from the output (none: the output, stripped); nothing taken scores 0")
    pattern: str | None = Field(default=None, description="kind=regex: the pattern whose last match is taken")
    group: int = Field(default=1, ge=0, description="kind=regex: the group of the match taken")
    field: str | None = Field(default=None, description="kind=json_field: the key taken from the output's first JSON object")

    @model_validator(mode="after")
    def _needs(self) -> "Extract":
        if self.kind == "regex" and not self.pattern:
            raise ValueError("benchmark.extract.pattern: extract.kind=regex needs a pattern")
        if self.kind == "json_field" and not self.field:
            raise ValueError("benchmark.extract.field: extract.kind=json_field needs a field")
        return self


#: the settings of an ``llm_judge`` scorer left unset, as they apply (the one place they are said)
JUDGE_DEFAULTS: dict[str, Any] = {"mode": "pointwise", "verdict": "score", "scale_min": 1, "scale_max": 5, "against": "target",
                                  "panel": "mean", "response_format": "json_schema", "invalid_verdict": "fail"}  # fmt: skip

#: normalisation steps of exact_match / includes / token_f1, applied in this order
Normalise = Literal["lower", "strip_punctuation", "remove_articles", "collapse_whitespace"]


class ScorerSpec(_Strict):
    """One scorer; its per-sample score is named ``name`` (default: its ``kind``).

    * ``exact_match``: the extracted answer equals the target after stripping outer white
      space and the ``normalise`` steps (``lower``, ``strip_punctuation``, ``remove_articles``
      — English a/an/the —, ``collapse_whitespace``; SQuAD's normalisation is all four);
    * ``includes``: the normalised target occurs in the normalised answer;
    * ``regex``: ``pattern`` matches the answer (``re.search``); ``{{ target }}`` in it stands
      for the sample's target, escaped;
    * ``numeric``: the first number of the answer (``,`` thousands separators and a leading
      ``$`` dropped) is within ``abs_tol`` or ``rel_tol`` of the target (``math.isclose``);
    * ``multiple_choice``: the extracted letter is the target's (a letter, a 0-based index,
      or the text of one of the choices);
    * ``token_f1``: SQuAD's token F1 of the normalised answer and target (graded);
    * ``json_schema``: the answer parses as JSON and validates against ``schema`` (bounded:
      linear-time patterns, no reference leaves the schema);
    * ``llm_judge``: the run's judge (``judge=<model config>``, or a panel ``judge=[a,b]``)
      rates the answer by the ``rubric`` template (:mod:`evalkit.benchmarks.task.judge`
      states each rule): ``mode: pointwise`` with ``verdict: score`` (an integer from
      ``scale_min`` to ``scale_max``, normalised to 0-1) or ``verdict: pass_fail`` (1/0);
      ``mode: pairwise``: the answer against the ``against`` field (default the target),
      asked in both orders, each order's outcome for the answer (win 1, tie 0.5, loss 0)
      averaged. A panel combines its judges' valid verdicts by ``panel``: ``mean``
      (default) or ``majority`` (``pass_fail`` only: more than half pass 1, more than half
      fail 0, else 0.5). A panel fails closed: ``invalid_verdict: fail`` (default) makes a
      sample where any judge's verdict is invalid a ``judge_error`` failure;
      ``invalid_verdict: exclude`` excludes and counts the invalid ones (``<name>_invalid``).
      ``response_format: json_schema`` (default) sends the verdict's schema as the
      request's ``response_format``; ``none`` sends none (for a server that refuses it);
      the verdict is validated against the schema either way.
    """

    kind: Literal["exact_match", "includes", "regex", "numeric", "multiple_choice", "token_f1", "json_schema", "llm_judge"] = Field(
        description="how the answer is scored (the class docstring says each)")
    name: str | None = Field(default=None, description="the per-sample score's name (default: kind)")
    normalise: list[Normalise] = Field(default_factory=list, description="exact_match/includes/token_f1: lower, strip_punctuation, remove_articles, collapse_whitespace")
    pattern: str | None = Field(default=None, description="regex: the pattern searched in the answer ({{ target }}: the target, escaped)")
    abs_tol: float = Field(default=1e-6, ge=0, description="numeric: the absolute tolerance")
    rel_tol: float = Field(default=0.0, ge=0, description="numeric: the relative tolerance")
    schema_: dict | bool | None = Field(default=None, alias="schema", description="json_schema: the JSON Schema the answer must validate against")
    # llm_judge (unset: the defaults of JUDGE_DEFAULTS; refused on the other kinds)
    rubric: str | None = Field(default=None, description="llm_judge: the judge's prompt, a Jinja2 template (required)")
    system: str | None = Field(default=None, description="llm_judge: the judge's system prompt (a template)")
    mode: Literal["pointwise", "pairwise"] | None = Field(default=None, description="llm_judge: rate the answer (pointwise) or compare it with against (pairwise)")
    verdict: Literal["score", "pass_fail"] | None = Field(default=None, description="llm_judge pointwise: an integer score or pass/fail (default score)")
    scale_min: int | None = Field(default=None, description="llm_judge: the lowest score (default 1)")
    scale_max: int | None = Field(default=None, description="llm_judge: the highest score (default 5)")
    against: str | None = Field(default=None, description="llm_judge pairwise: the field the answer is compared with (default target)")
    panel: Literal["mean", "majority"] | None = Field(default=None, description="llm_judge: how a panel's verdicts combine (default mean; majority: pass_fail only)")
    response_format: Literal["json_schema", "none"] | None = Field(default=None, description="llm_judge: send the verdict's schema as response_format (default json_schema)")
    invalid_verdict: Literal["fail", "exclude"] | None = Field(default=None, description="llm_judge panel: a sample with an invalid verdict fails (default) or the verdict is excluded")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def score_name(self) -> str:
        return self.name or self.kind

    @model_validator(mode="after")
    def _needs(self) -> "ScorerSpec":
        if self.kind == "regex" and not self.pattern:
            raise ValueError("benchmark.scorers: a regex scorer needs a pattern")
        if self.kind == "json_schema" and self.schema_ is None:
            raise ValueError("benchmark.scorers: a json_schema scorer needs a schema")
        if self.kind == "llm_judge":
            self._judge_rules()
        else:
            for key in ("rubric", "system", *JUDGE_DEFAULTS):
                if getattr(self, key) is not None:
                    raise ValueError(f"benchmark.scorers: {key} belongs to an llm_judge scorer, not {self.kind}")
        return self

    def judge_setting(self, key: str) -> Any:
        """An ``llm_judge`` setting as it applies: the value set, else its default
        (:data:`JUDGE_DEFAULTS`)."""
        value = getattr(self, key)
        return JUDGE_DEFAULTS[key] if value is None else value

    def _judge_rules(self) -> None:
        if not self.rubric:
            raise ValueError("benchmark.scorers: an llm_judge scorer needs a rubric (a Jinja2 template of the judge's prompt)")
        lo, hi = self.judge_setting("scale_min"), self.judge_setting("scale_max")
        if hi <= lo:
            raise ValueError(f"benchmark.scorers: scale_max={hi} must be above scale_min={lo}")
        pass_fail = self.judge_setting("mode") == "pointwise" and self.judge_setting("verdict") == "pass_fail"
        if self.judge_setting("panel") == "majority" and not pass_fail:
            raise ValueError("benchmark.scorers: panel=majority combines pass/fail verdicts (mode: pointwise, verdict: "
                             "pass_fail); use panel=mean for scores and pairwise verdicts")  # fmt: skip
        from jinja2 import TemplateSyntaxError
        from jinja2.sandbox import SandboxedEnvironment

        for key in ("rubric", "system"):
            try:
                SandboxedEnvironment().parse(getattr(self, key) or "")
            except TemplateSyntaxError as exc:
                raise ValueError(f"benchmark.scorers: the judge's {key} is not a valid template ({exc.message})") from None


class Metrics(_Strict):
    """Each scorer's mean over the samples, overall and per category (the ``category`` field);
    with ``weights`` (``{category: weight}``), also ``<score>/weighted``: the weighted mean of
    the category means over the categories scored (weights renormalised over them).

    Raises:
        ValueError: a weight that is negative, not finite, or weights that sum to 0 (the
            weighted mean would be undefined: refused before the run, not a lost headline).
    """

    weights: dict[str, float] | None = Field(default=None, description="{category: weight}: also report <score>/weighted")
    headline: str | None = Field(default=None, description="the score the run's headline is (default: the first scorer's, /weighted with weights)")

    @model_validator(mode="after")
    def _weights(self) -> "Metrics":
        for cat, w in (self.weights or {}).items():
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"benchmark.metrics.weights.{cat}: {w} is not a weight (a finite number >= 0)")
        if self.weights and sum(self.weights.values()) <= 0:
            raise ValueError("benchmark.metrics.weights: the weights sum to 0; give some category a positive weight")
        return self


class TaskSettings(BenchmarkSettings):
    """A task written in YAML: ``kind: task`` and ``name`` (the task's own name: its runs,
    MLflow runs and comparisons go by it). ``seed``: the few-shot draw (default ``run.seed``)."""

    kind: Literal["task"] = Field(default="task", description="a task written in YAML")
    dataset: Dataset = Field(description="where the rows come from and which column is what")
    prompt: Prompt = Field(description="the templates a row is asked by")
    fewshot: FewShot = Field(default_factory=FewShot, description="where demonstrations (shots=N) come from")
    extract: Extract = Field(default_factory=Extract, description="how the answer is taken from a model's output before scoring")
    scorers: list[ScorerSpec] = Field(min_length=1, description="the scorers, one or more; each is a list item")
    metrics: Metrics = Field(default_factory=Metrics, description="the category weights and the headline metric")
    seed: int | None = None

    @model_validator(mode="after")
    def _names(self) -> "TaskSettings":
        names = [s.score_name for s in self.scorers]
        names += [f"{s.score_name}_invalid" for s in self.scorers if s.kind == "llm_judge"]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark.scorers: two scorers are named {sorted(n for n in names if names.count(n) > 1)[0]!r}; give each a name")
        head = self.metrics.headline
        if head is not None and head.split("/")[0] not in names:
            raise ValueError(f"benchmark.metrics.headline: {head!r} is not a scorer's score ({', '.join(names)})")
        return self

    def needs_judge(self) -> bool:
        return any(s.kind == "llm_judge" for s in self.scorers)
