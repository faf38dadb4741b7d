"""``summary.json`` typed: :class:`Summary`, a pydantic model (as Inspect types its
``EvalLog``), through which the engine writes a run's summary and every command that reads a
run directory (``compare``, ``rescore``, ``evalkit.track``, ``evalkit.audit``,
``bash/check_report.sh``) reads it. It sits at the bottom of the layers, beside
:mod:`evalkit.journal`.

**What the counts count** (schema version 2). A run asks every selected *sample* once per
*epoch* (``run.repeats``); one answer of one sample in one epoch is a *row* of the journal.

* ``n_samples``: distinct selected samples;
* ``n_scored``: samples scored in **every** epoch; ``n_failed``: samples with at least one
  epoch not scored (failed, or never ran) — so ``n_scored + n_failed == n_samples``, with
  repeats too; ``failed_ids`` lists the failed samples;
* ``n_requested``: rows asked (``n_samples × repeats``); ``n_scored_rows`` and
  ``n_failed_rows``: rows scored and not scored — ``n_scored_rows + n_failed_rows ==
  n_requested``.

Without repeats a sample is a row and both pairs agree. A summary of schema version 1 (which
counted rows as ``n_scored``/``n_failed``) is read as version 2: its counts become the row
counts, and the sample counts come from ``failed_ids`` (:meth:`Summary._from_version_1`).

**Validation.** Every field evalkit reads is typed and bounded (``repeats`` an integer in
``[1, MAX_REPEATS]``, counts non-negative integers, ``metrics`` an object of numbers, ids
strings ...); other fields are kept as they are (extend, don't rename). A summary that does
not validate is one line naming the file and the field (:func:`read_summary`), never a
traceback, and nothing is allocated by a count read from it before it is checked.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from evalkit.errors import WRITE_FAULTS, EvalkitError, RunDirError, counted, write_failed
from evalkit.jsonl import check_write
from evalkit.untrusted import read_json
from evalkit.types import MAX_REPEATS

log = logging.getLogger("evalkit")

SCHEMA_VERSION = 2
#: the largest summary.json read (bytes). A summary holds counts, metrics with their
#: intervals and the ids of the failed samples: kilobytes for evalkit's own benchmarks, about
#: 8 MB with 100,000 failed samples of 78-character ids; a larger file is not a summary
#: (it was 256 MiB: a crafted one cost seconds and gigabytes to parse)
MAX_SUMMARY_BYTES = 32 * 1024 * 1024


def _number(value: Any) -> Any:
    """A JSON number (int or float), not a bool or a numeric string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {type(value).__name__}")
    return value


def _integer(value: Any) -> Any:
    """A JSON integer, not a bool, a float (``1e9``) or a numeric string."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _none_empty(value: Any) -> Any:
    """``null`` read as an empty object (a field a writer left ``null`` for "none")."""
    return {} if value is None else value


Number = Annotated[int | float, BeforeValidator(_number)]
Count = Annotated[int, BeforeValidator(_integer), Field(ge=0)]
Text = Annotated[str, Field(strict=True)]


class NodeServed(BaseModel):
    """One Ray node the run's model workers ran on: its id, the units its workers delivered
    and their process ids."""

    model_config = ConfigDict(extra="allow")

    node_id: Text
    units: Count
    worker_pids: list[Count] = Field(default_factory=list)


class SharedWindow(BaseModel):
    """An endpoint's shared rate-limit window (``runner=cluster``), over every run that
    called the endpoint since the window was made (:mod:`evalkit.engine.ratelimit`)."""

    model_config = ConfigDict(extra="allow")

    concurrency: Count
    peak_in_flight: Count
    min_window: Count
    window_decreases: Count
    in_flight: Count | None = None
    requests: Count | None = None


class EngineFigures(BaseModel):
    """``engine``: the run's engine figures (the fields typed here are ``phases`` and those of
    a run on a Ray cluster; the others are kept as written): ``nodes`` its model workers ran
    on, ``driver_node``, and ``rate_limits`` per endpoint key (``<api_base>|<provider model>``)."""

    model_config = ConfigDict(extra="allow")

    #: seconds per phase of the run (evalkit.engine.phases: compose, start, requests, scoring, tracking …)
    phases: dict[Text, Any] | None = None
    nodes: list[NodeServed] | None = None
    driver_node: Text | None = None
    rate_limits: dict[Text, SharedWindow] | None = None


class Summary(BaseModel):
    """One run's ``summary.json`` (see the module docstring for the counts)."""

    model_config = ConfigDict(extra="allow", validate_assignment=False)

    schema_version: Annotated[int, BeforeValidator(_integer), Field(ge=1)] = SCHEMA_VERSION
    #: ``decided``: a ``run.stop_when`` run stopped once its gate was decided, complete over
    #: the units it dispatched (its ``sequential`` record says why, and how many it used)
    status: Literal["complete", "incomplete", "decided"]
    benchmark: Annotated[str, Field(strict=True, min_length=1)]
    model: Text
    model_id: Text | None = None
    user_model: Text | None = None
    shots: Count | None = None
    mode: Text | None = None
    n_samples: Count
    repeats: Annotated[int, BeforeValidator(_integer), Field(ge=1, le=MAX_REPEATS)] = 1
    n_requested: Count | None = None
    n_scored: Count
    n_failed: Count
    n_scored_rows: Count
    n_failed_rows: Count
    failed_by_kind: dict[Text, Count] = Field(default_factory=dict)
    failed_ids: list[Text] = Field(default_factory=list)
    status_counts: dict[Text, Count] = Field(default_factory=dict)
    scorer_limit_ids: list[Text] = Field(default_factory=list)
    headline: Text | None = None
    metrics: dict[Text, Number] = Field(default_factory=dict)
    partial_metrics: dict[Text, Number] | None = None
    data_fingerprint: Text | None = None
    prompt_hash: Text | None = None
    code_version: Text | None = None
    generation_params: dict[Text, Any] | None = None
    usage: dict[Text, Count] = Field(default_factory=dict)
    cost_usd: Number | None = None
    #: lines of ``predictions.jsonl`` the run did not count: recorded under another request,
    #: or outside its selection (:mod:`evalkit.journal`); readers without the requests skip them
    stale_lines: list[Annotated[int, BeforeValidator(_integer), Field(ge=1)]] = Field(default_factory=list)
    started_at: Text | None = None
    finished_at: Text | None = None
    wall_s: Number | None = None
    #: what measured the run besides the model (evalkit.report.summary.instrument): the
    #: scoring rules (``{"scoring": "evalscope"}``); ``compare`` names a difference
    instrument: Annotated[dict[Text, Any], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    # what the benchmark declares for the tools that read a run (Benchmark.declared)
    primary_score: Text | None = None
    tracked_metrics: Text | None = None
    data_source: Text | None = None
    # intervals and figures (evalkit.report.figures): metric name → interval record
    # ({"low", "high", "n", "method", "warning"?}), the worst-case [low, high] of each
    # partial metric, why a metric has no interval, how each aggregates
    metrics_ci: Annotated[dict[Text, dict[Text, Any]], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    ci_level: Annotated[float, BeforeValidator(_number), Field(gt=0, lt=1)] = 0.95
    seed: Annotated[int, BeforeValidator(_integer)] = 0
    partial_bounds: Annotated[dict[Text, Annotated[list[Number], Field(min_length=2, max_length=2)]], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    metrics_not_estimable: Annotated[dict[Text, Text], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    aggregation: Annotated[dict[Text, Text], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    category_counts: Any = None
    # spend (evalkit.report.summary.spend_fields): tokens prompt + completion, USD per actor's price
    spent_tokens: Count | None = None
    prices: Annotated[dict[Text, Text | None], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    reasoning: Annotated[dict[Text, Any], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    budget: dict[Text, Any] | None = None
    endpoints: Annotated[dict[Text, Text | None], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    #: a judge panel's agreement per scorer (evalkit.benchmarks.task.agreement): {"judges", "pairs", "panel"}
    judge_agreement: Annotated[dict[Text, dict[Text, Any]], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    #: per scorer, the panel's policy and each judge's invalid verdicts (evalkit.benchmarks.task.agreement.invalid_verdicts)
    judge_invalid: Annotated[dict[Text, dict[Text, Any]], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    #: the judges' qualification when the run started (evalkit.benchmarks.task.qualification.run_qualification)
    judge_qualification: Annotated[dict[Text, Any], BeforeValidator(_none_empty)] = Field(default_factory=dict)
    engine: EngineFigures | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        """Version 1 counted rows as ``n_scored``/``n_failed``: they become the row counts,
        and the sample counts are taken from ``failed_ids`` (the distinct failed samples)."""
        if not isinstance(data, dict) or "n_scored_rows" in data or "n_failed_rows" in data:
            return data
        data = dict(data)
        data["n_scored_rows"], data["n_failed_rows"] = data.get("n_scored"), data.get("n_failed")
        repeats, n_samples, failed = data.get("repeats", 1), data.get("n_samples"), data.get("failed_ids")
        if repeats != 1 and isinstance(n_samples, int) and isinstance(failed, list):
            data["n_failed"] = len(set(map(str, failed)))
            data["n_scored"] = n_samples - data["n_failed"]
        return data

    @property
    def complete(self) -> bool:
        return self.status in ("complete", "decided")

    def shown_metrics(self) -> tuple[dict[str, float], bool]:
        """``({metric name: value}, partial)``: ``metrics`` of a complete run, or the
        ``partial_metrics`` of an incomplete one with the ``partial_`` prefix removed."""
        if self.complete:
            return dict(self.metrics), False
        return {k.removeprefix("partial_"): v for k, v in (self.partial_metrics or {}).items()}, True

    def record(self) -> dict[str, Any]:
        """The summary as a JSON object: the fields it was given, in their order."""
        return self.model_dump(exclude_unset=True)

    @property
    def headline_value(self) -> float | None:
        """The headline metric's value in a complete run (``None`` otherwise or when absent)."""
        return self.metrics.get(self.headline) if self.complete and self.headline else None

    def unqualified_headline_judges(self) -> dict[str, str]:
        """:func:`unqualified_headline_judges` of the run's recorded ``judge_qualification``."""
        return unqualified_headline_judges(self.judge_qualification)

    def headline_judge_note(self) -> str:
        """:func:`headline_judge_note` of the run's recorded ``judge_qualification``."""
        return headline_judge_note(self.judge_qualification)

    def has(self, name: str) -> bool:
        """Whether the run's ``summary.json`` holds the field ``name`` (a run written before a
        field existed reads its default; this tells the two apart)."""
        return name in self.model_fields_set

    def count_line(self) -> str:
        """``3 of 10 samples failed``, ``1 of 1 sample failed`` (the noun agrees with the total:
        :func:`evalkit.errors.counted`); ``(5 of 30 answers)`` added with repeats."""
        line = f"{self.n_failed} of {counted(self.n_samples, 'sample')} failed"
        if self.repeats > 1:
            line += f" ({self.n_failed_rows} of {counted(self.n_requested, 'answer') if self.n_requested is not None else '? answers'})"
        return line


#: what a judge's qualification status may read as (anything else reads as "unknown")
QUALIFICATION_STATUSES = ("qualified", "unqualified", "stale", "below_floor")


def unqualified_headline_judges(qualification: Any) -> dict[str, str]:
    """The judges the headline rests on that were not qualified when the run started:
    ``{judge name: status}`` (``unqualified``, ``stale``, ``below_floor`` or ``unknown``), in
    the order recorded; ``{}`` when the headline is no judge's (``headline_scorer`` null) or
    every judge of it was qualified. ``qualification``: a run's ``judge_qualification``
    (:func:`evalkit.benchmarks.task.qualification.run_qualification`), read as untrusted: a
    judge whose entry has another shape is ``unknown``, never qualified; names are cut to 100
    characters."""
    if not isinstance(qualification, dict):
        return {}
    scorer, judges = qualification.get("headline_scorer"), qualification.get("judges")
    if not isinstance(scorer, str) or not scorer:
        return {}
    if not isinstance(judges, dict) or not judges:
        return {"?": "unknown"}  # a judge-scored headline with no judge recorded: not qualified
    out = {}
    for name, per in list(judges.items())[:100]:
        status = (per.get(scorer) if isinstance(per, dict) else None) or {}
        got = status.get("status") if isinstance(status, dict) else None
        if got != "qualified":
            out[str(name)[:100]] = got if got in QUALIFICATION_STATUSES else "unknown"
    return out


def headline_judge_note(qualification: Any) -> str:
    """``"judge not qualified: obey unqualified, judge_qualification.require=never"``: what is
    printed beside a headline that rests on a judge not qualified when the run started
    (:func:`unqualified_headline_judges`; at most 6 judges named); ``""`` when every judge of
    the headline was qualified, or the headline is no judge's."""
    judges = unqualified_headline_judges(qualification)
    if not judges:
        return ""
    shown = ", ".join(f"{name} {status}" for name, status in list(judges.items())[:6])
    return f"judge not qualified: {shown}, judge_qualification.require={str(qualification.get('require'))[:20]}"


def validate_summary(data: Any, where: str | Path = "summary.json", error: type[EvalkitError] = RunDirError) -> Summary:
    """``data`` (a parsed ``summary.json``) as :class:`Summary`.

    Raises:
        ``error`` (default RunDirError, exit 2): one line naming ``where`` and the first
            field that does not validate.
    """
    if not isinstance(data, dict):
        raise error(f"{where}: not an evalkit summary (a JSON {type(data).__name__}, not an object)")
    try:
        return Summary.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        msg = str(err["msg"]).removeprefix("Value error, ")
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise error(f"{where}: not an evalkit summary: {loc}: {msg}{more}") from None


def read_summary_record(path: Path, error: type[EvalkitError] = RunDirError) -> Any:
    """The parsed JSON of a run directory's ``summary.json`` at ``path`` (not validated: a
    reader that keeps fields as written, such as ``rescore --set``, or a legacy run's), the
    one raw read of it: :func:`read_json_record` with :data:`MAX_SUMMARY_BYTES`.

    Raises:
        ``error`` (default RunDirError, exit 2): missing, a link, not a regular file, too
            large, or not JSON — one line naming the file.
    """
    try:
        return read_json_record(path, MAX_SUMMARY_BYTES, "a summary", error)
    except FileNotFoundError:
        raise error(f"{path}: no summary.json (the run has not finished)") from None


def read_json_record(path: Path, limit: int, what: str, error: type[EvalkitError] = RunDirError) -> Any:
    """The parsed JSON of a run directory's record file at ``path`` (``summary.json``, a
    sweep's ``sweep.json``): opened without following a symbolic link, a regular file of at
    most ``limit`` bytes (judged by ``fstat`` before a byte is read: a FIFO or a device is
    never read), nested at most :data:`evalkit.untrusted.MAX_JSON_DEPTH` levels. ``what``: the
    record in words (``"a summary"``), for the too-large line.

    Raises:
        FileNotFoundError: missing (the caller says what that means).
        ``error`` (default RunDirError, exit 2): a link, not a regular file, over ``limit``,
            or not JSON — one line naming the file.
    """
    if not os.path.lexists(path):
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    return read_json(path, limit, follow=False, what=what, error=error, finite=False)


def read_summary(path: Path, error: type[EvalkitError] = RunDirError) -> Summary:
    """Read (:func:`read_summary_record`: no link followed, at most
    :data:`MAX_SUMMARY_BYTES`) and validate ``summary.json`` at ``path``.

    Raises:
        ``error`` (default RunDirError, exit 2): missing, a link, too large, not JSON, or
            not a valid summary — one line.
    """
    return validate_summary(read_summary_record(path, error), path, error)


def write_summary(path: Path, summary: dict[str, Any] | Summary) -> Summary:
    """Validate ``summary`` and write it to ``path`` (indented JSON, UTF-8). Returns the model.
    A summary that does not validate is a defect of the code that built it: said as one ERROR
    line while the summary is written as built and returned unvalidated
    (``Summary.model_construct``; a run's results are never lost to their own check; every
    reader of the directory will then refuse it in one line).

    Raises:
        RunDirWriteError: the file system refused the write (a full disk, an I/O error:
            :data:`~evalkit.errors.WRITE_FAULTS`).
    """
    try:
        model = summary if isinstance(summary, Summary) else validate_summary(summary, path)
    except RunDirError as exc:
        log.error("%s (written as built)", exc)
        record, model = summary, Summary.model_construct(**summary)
    else:
        record = model.record()
    text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    try:
        check_write(Path(path))
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        if exc.errno in WRITE_FAULTS:
            raise write_failed(path, exc) from exc
        raise
    return model
