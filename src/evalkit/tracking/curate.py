"""What a run shows in MLflow: its params, metrics, breakdown tables, description and names,
chosen from the run directory's ``config.yaml`` and ``summary.json`` (pure functions; no
MLflow import, no store access).

* **params** (:func:`run_params`, at most :data:`MAX_PARAMS`): the benchmark and its knobs,
  the model's name, provider model and model id, shots and repeats, the generation
  parameters as sent (``config.yaml``'s top-level ``generation``), the backend kind, and the
  user simulator's model and generation when there is one, the judges, their
  ``judge_qualification.require`` and whether the headline's judges were qualified. Never: paths and directories,
  ``run.*`` / ``tracking.*`` / ``runner.*``, scheduling and scoring bounds, ``None`` or empty
  values, the ``layers`` provenance. The whole resolved config is the ``config.yaml`` artifact.
* **metrics** (:func:`run_metrics`): ``headline`` (+ ``headline_ci_low`` / ``headline_ci_high``
  when ``summary.metrics_ci`` has the headline's interval) in a complete run only; each
  benchmark's named metrics (a benchmark with many breakdowns declares
  ``tracked_metrics = "top_level"``, recorded in ``summary.json``, and a run with more than
  :data:`MAX_BREAKDOWN_METRICS` names with ``/`` is taken so: only the names without ``/``), ``<name>_ci_low`` / ``<name>_ci_high`` for the group-level ones
  (:func:`is_group`); the counts; the run's token totals (``tokens/<key>``) and ``cost_usd``
  when the summary has them. An incomplete run has its ``partial_*`` figures and no headline.
* **breakdown tables** (:func:`breakdown_tables`): every metric that is not an MLflow metric,
  one table per dimension (``sample_pass_rate/family/x`` → table ``family``, row ``x``,
  column ``sample_pass_rate``), with ``n`` and the interval where ``metrics_ci`` has them.
* **comparisons** (:func:`comparison_name`, :func:`comparison_metrics`): a comparison run is
  named by what it compares and what it found; its metrics carry the prefix
  :data:`COMPARISON_PREFIX`, so they sort apart from the runs' own columns.
* **MLflow 3.18's own views** (:func:`baseline_metrics`, :func:`quality_criteria`): the
  comparison's figures named as ``mlflow.genai.compare_evaluations`` names them
  (``compare/<baseline8>/<metric>/diff`` …, with evalkit's interval and adjusted p), and a
  gate's verdict as the quality-criteria record (:data:`QUALITY_CRITERIA_TAG`) whose rules
  are the gate's interval test, not a point threshold (docs/tracking-mlflow-views.md).
* **names** (:func:`mlflow_name`): only what MLflow 3.17 accepts in a metric or param name
  (letters, digits, ``_ - . / :`` and space; no empty, ``.`` or ``..`` path segment).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Any

from evalkit.errors import resume_arg
from evalkit.summary import Summary

#: MLflow refuses more than this many characters in a metric or param name
MAX_NAME = 250
#: the most params a run logs
MAX_PARAMS = 25
#: benchmark settings that are not knobs of what is evaluated: where data lives, scheduling
#: and the scorer's resource bounds (they stay in the ``config.yaml`` artifact)
#: (paths — ``*_dir``, ``*_path``, ``*_url``, ``*_file`` — are never knobs either)
NOT_KNOBS = frozenset({"name", "module", "request_timeout_s", "score_timeout_s", "score_memory_mb", "user_overrides"})

#: a benchmark's breakdown metrics (names with ``/``) beyond this many go to tables only
#: (:func:`is_named`): MLflow's run and GenAI pages open with a column per metric
MAX_BREAKDOWN_METRICS = 10
#: the prefix of a comparison run's metrics (``compare/delta``, ``compare/p``, …)
COMPARISON_PREFIX = "compare/"
#: the tag MLflow 3.18's evaluation views read the baseline run from: an experiment tag
#: (the "Evaluation runs" page marks that run BASELINE and shows each run's change against it);
#: evalkit also sets it on a comparison run and on the compared candidate run
BASELINE_TAG = "mlflow.evaluation.baselineRunId"
#: the run tag ``mlflow.genai.evaluate(quality_criteria=...)`` records the criteria an
#: evaluation run must clear in (MLflow 3.18: ``{"schemaVersion": 1, "revision", "rules":
#: [{"metricKey", "comparator": "GTE"|"LTE", "threshold"}]}``)
QUALITY_CRITERIA_TAG = "mlflow.genaiEvaluate.qualityCriteria"
#: characters of the baseline run id in MLflow's comparison metric names
#: (``compare/<baseline_short_id>/<scorer>/<stat>``, ``mlflow.genai.compare_evaluations``)
BASELINE_SHORT_ID = 8
#: MLflow's name of each paired figure (``compare_evaluations``' ``diff``, ``ci_low``,
#: ``ci_high``, ``p_value``, ``n_paired``), and evalkit's own beside them (the
#: multiplicity-adjusted ``p_holm`` / ``p_bh`` and the ``mde``)
BASELINE_STATS = {"delta": "diff", "low": "ci_low", "high": "ci_high", "p": "p_value", "p_holm": "p_holm", "p_bh": "p_bh",
                  "mde": "mde", "n": "n_paired"}  # fmt: skip

_BAD_NAME_CHARS = re.compile(r"[^\w.\- :/]")


def mlflow_name(text: str, limit: int = MAX_NAME) -> str:
    """``text`` as a name MLflow 3.17 accepts for a metric or param (``validate_param_and_
    metric_name`` and ``path_not_unique``): other characters become ``_``, empty / ``.`` /
    ``..`` path segments are dropped, at most ``limit`` characters (never empty)."""
    text = _BAD_NAME_CHARS.sub("_", str(text))
    parts = [p for p in text.split("/") if p not in ("", ".", "..")]
    name = "/".join(parts)[:limit].rstrip("/")
    return name or "_"


def _param_value(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def _is_path_key(key: str) -> bool:
    return key.endswith(("_dir", "_path", "_url", "_file"))


def run_params(recorded: dict[str, Any], summary: Summary) -> dict[str, str]:
    """The curated params of a run (see the module docstring), in priority order, at most
    :data:`MAX_PARAMS`: ``recorded`` is ``config.yaml`` (secrets already redacted),
    ``summary`` the run's ``summary.json``. Values are strings (JSON for lists and dicts)."""
    model = recorded.get("model") or {}
    candidates: list[tuple[str, Any]] = [
        ("benchmark.name", (recorded.get("benchmark") or {}).get("name")),
        ("model.name", model.get("name")),
        ("model.provider_model", model.get("provider_model")),
        ("model.id", summary.model_id),
        ("model.api", model.get("api")),
        ("model.baseline", model.get("baseline")),
        ("model.extra_body", model.get("extra_body")),
        ("shots.n", (recorded.get("shots") or {}).get("n")),
        ("repeats", (recorded.get("run") or {}).get("repeats")),
        *((f"generation.{k}", v) for k, v in (recorded.get("generation") or {}).items()),
        ("backend.kind", (recorded.get("backend") or {}).get("kind")),
        *_judge_params(recorded, summary),
    ]
    for key, value in (recorded.get("benchmark") or {}).items():
        if key not in NOT_KNOBS and not _is_path_key(key):
            candidates.append((f"benchmark.{key}", value))
    user = recorded.get("user") or {}
    if user:
        user_model = user.get("model") or {}
        candidates += [("user.model.name", user_model.get("name")), ("user.model.provider_model", user_model.get("provider_model"))]
        candidates += [(f"user.generation.{k}", v) for k, v in (user.get("generation") or {}).items()]
    params: dict[str, str] = {}
    for key, value in candidates:
        if value is None or value in ("", [], {}) or key in params:
            continue
        params[mlflow_name(key)] = _param_value(value)[:6000]
    return dict(list(params.items())[:MAX_PARAMS])


def _judge_params(recorded: dict[str, Any], summary: Summary) -> list[tuple[str, Any]]:
    """The judges' params of a judged run: ``judge`` (the names, in order),
    ``judge_qualification.require`` and ``judge_qualification.headline`` — ``qualified`` or
    the :meth:`~evalkit.summary.Summary.headline_judge_note` of a headline resting on a judge
    that was not (absent when the headline is no judge's)."""
    judges = recorded.get("judge") if isinstance(recorded.get("judge"), list) else []
    names = [str((j.get("model") or {}).get("name")) for j in judges if isinstance(j, dict) and isinstance(j.get("model"), dict)]
    qual = summary.judge_qualification
    out: list[tuple[str, Any]] = [("judge", ",".join(names) or None), ("judge_qualification.require", qual.get("require"))]
    if isinstance(qual.get("headline_scorer"), str):
        out.append(("judge_qualification.headline", summary.headline_judge_note() or "qualified"))
    return out


def is_named(summary: Summary, name: str) -> bool:
    """Whether metric ``name`` (without ``partial_``) of the run is an MLflow metric rather
    than a row of a breakdown table: every metric, unless the benchmark declared
    ``tracked_metrics = "top_level"`` or the run has more than :data:`MAX_BREAKDOWN_METRICS`
    breakdown metrics (names with ``/``): then only the names without ``/``."""
    if "/" not in name:
        return True
    if summary.tracked_metrics == "top_level":
        return False
    figures = {**(getattr(summary, "metrics", None) or {}), **(getattr(summary, "partial_metrics", None) or {})}
    return sum("/" in k for k in figures) <= MAX_BREAKDOWN_METRICS


def is_group(name: str) -> bool:
    """Whether a metric is group-level (its interval is an MLflow metric too): a name
    without ``/`` (SOBHard's rates, KE's macro means, ACEBench's ``overall``), an
    upper-case group (``accuracy/NORMAL``, ``accuracy/en/AGENT``) or ``overall/<lang>``."""
    last = name.rsplit("/", 1)[-1]
    return "/" not in name or last.isupper() or name.startswith("overall")


def _interval(cis: dict[str, Any], name: str) -> tuple[float, float] | None:
    ci = cis.get(name)
    if isinstance(ci, dict) and isinstance(ci.get("low"), (int, float)) and isinstance(ci.get("high"), (int, float)):
        return float(ci["low"]), float(ci["high"])
    return None


def headline(summary: Summary) -> tuple[str, float | None, tuple[float, float] | None]:
    """``(headline metric name, value, interval)`` of a run; value and interval are ``None``
    when the run is incomplete (no headline is published) or the figure is missing."""
    name = str(summary.headline)
    value = summary.headline_value
    if not isinstance(value, (int, float)):
        return name, None, None
    return name, float(value), _interval(summary.metrics_ci, name)


def metric_name(name: str) -> str:
    """A summary metric's MLflow name: the repeat figures spelled out (``pass@3`` →
    ``pass_at_3``, ``pass^3`` → ``pass_all_3``, which ``@`` and ``^`` would make one name),
    then :func:`mlflow_name`."""
    name = re.sub(r"(^|_)pass@(\d+)", r"\1pass_at_\2", name)
    name = re.sub(r"(^|_)pass\^(\d+)", r"\1pass_all_\2", name)
    return mlflow_name(name)


def run_metrics(summary: Summary) -> dict[str, float]:
    """The run's MLflow metrics ``{name: value}`` (see the module docstring)."""
    figures, prefix, cis = _figures(summary)
    out: dict[str, float] = {}
    head, value, interval = headline(summary)
    if value is not None:
        out["headline"] = value
        if interval:
            out["headline_ci_low"], out["headline_ci_high"] = interval
    for name, figure in figures.items():
        base = name[len(prefix) :] if name.startswith(prefix) else name
        if not isinstance(figure, (int, float)) or not is_named(summary, base):
            continue
        out[metric_name(name)] = float(figure)
        ci = _interval(cis, name) if is_group(base) else None
        if ci:
            out[metric_name(f"{name}_ci_low")], out[metric_name(f"{name}_ci_high")] = ci
    out.update(n_samples=float(summary.n_samples), n_scored=float(summary.n_scored), n_failed=float(summary.n_failed))
    for key, tokens in summary.usage.items():
        out[mlflow_name(f"tokens/{key}")] = float(tokens)
    if summary.cost_usd is not None:
        out["cost_usd"] = float(summary.cost_usd)
    return out


def _figures(summary: Summary) -> tuple[dict[str, float], str, dict[str, Any]]:
    """``(figures, prefix, intervals)``: a complete run's ``metrics`` (prefix ``""``) or an
    incomplete run's ``partial_metrics`` (prefix ``partial_``), and ``metrics_ci``."""
    if summary.complete:
        return dict(summary.metrics), "", summary.metrics_ci
    return dict(summary.partial_metrics or {}), "partial_", summary.metrics_ci


def breakdown_tables(summary: Summary) -> dict[str, dict[str, list[Any]]]:
    """``{table name: {column: values}}`` of the metrics :func:`run_metrics` leaves out.

    A name ``<metric>/<dimension>/<value…>`` is row ``<value…>`` of table ``<dimension>``
    in column ``<metric>``; a name ``<dimension>/<value>`` (SOBHard's ``constraint/<id>``)
    is row ``<value>`` of table ``<dimension>`` in column ``value``. Columns ``n``,
    ``ci_low``, ``ci_high`` (of the table's first metric) come from ``metrics_ci``."""
    figures, prefix, cis = _figures(summary)
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for name, figure in figures.items():
        base = name[len(prefix) :] if name.startswith(prefix) else name
        if is_named(summary, base) or not isinstance(figure, (int, float)):
            continue
        parts = base.split("/")
        metric, dimension, label = ("value", parts[0], "/".join(parts[1:])) if len(parts) == 2 else (parts[0], parts[1], "/".join(parts[2:]))
        row = cells.setdefault(dimension, {}).setdefault(label, {dimension: label})
        row[prefix + metric] = figure
        ci = cis.get(name) if isinstance(cis.get(name), dict) else None
        if ci and "n" not in row:
            row.update(n=ci.get("n"), ci_low=ci.get("low"), ci_high=ci.get("high"))
    tables = {}
    for dimension, rows in cells.items():
        columns = list(dict.fromkeys(k for row in rows.values() for k in row))
        tables[dimension] = {c: [row.get(c) for row in rows.values()] for c in columns}
    return tables


def _fmt(value: float) -> str:
    return f"{value:.4f}"


def description(summary: Summary, run_dir: Path) -> str:
    """One paragraph (Markdown) for ``mlflow.note.content``: benchmark, model, headline with
    its interval and n (and ``Judge not qualified: …`` when a judge that was not qualified
    scored it), status; an incomplete run says how many samples failed, of which
    kinds, and the exact ``run.resume=…`` that continues it."""
    who = f"**{summary.benchmark}** × **{summary.model}** (model id `{summary.model_id}`)"
    n, scored = summary.n_samples, summary.n_scored
    head, value, interval = headline(summary)
    if value is not None:
        ci_rec = summary.metrics_ci.get(head) or {}
        method = f" ({ci_rec['method']})" if interval and ci_rec.get("method") else ""
        ci = f", interval {_fmt(interval[0])}–{_fmt(interval[1])}{method}" if interval else ""
        units = ci_rec.get("n") if interval and isinstance(ci_rec.get("n"), int) else n
        text = f"{who}: headline `{head}` = **{_fmt(value)}**{ci} over n = {units} samples; status complete ({scored} of {n} scored)."
        note = summary.headline_judge_note()
        if note:  # a headline resting on a judge that was not qualified says so wherever it is shown (issue 45)
            text += f" **{note[0].upper()}{note[1:]}** (docs/judges.md)."
    elif summary.complete:
        text = f"{who}: status complete ({scored} of {n} scored); the headline `{head}` has no value."
    else:
        kinds = ", ".join(f"{k}: {v}" for k, v in summary.failed_by_kind.items()) or "never ran"
        text = (
            f"{who}: status **INCOMPLETE** — {summary.count_line()} ({kinds}); no headline is "
            f"published (figures are `partial_*`). Continue it by repeating its command with "
            f"`{resume_arg(Path(run_dir).resolve())}`."
        )
    return (
        f"{text} Data fingerprint `{str(summary.data_fingerprint)[:16]}`, prompt hash "
        f"`{str(summary.prompt_hash)[:16]}`, code `{summary.code_version}`; run directory "
        f"`{Path(run_dir).resolve()}`."
    )


def point_label(point: list[str] | None, sep: str = "=") -> str:
    """A sweep point (``["model=a", "shots=3"]``) as one label, ``key<sep>value`` joined by
    spaces; ``shots='3'`` loses Hydra's quotes."""
    out = []
    for override in point or []:
        key, _, value = str(override).partition("=")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        out.append(f"{key.lstrip('+~')}{sep}{value}")
    return " ".join(out)


def swept_point(points: list[list[str]] | None, num: int) -> list[str]:
    """The overrides of point ``num`` whose key takes more than one value in the sweep."""
    if not points or not 0 <= num < len(points):
        return []
    values: dict[str, set[str]] = {}
    for point in points:
        for override in point:
            values.setdefault(override.partition("=")[0], set()).add(override)
    return [o for o in points[num] if len(values.get(o.partition("=")[0], ())) > 1]


def sweep_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The sweep parent's metrics: the counts and each complete job's headline, named by
    its point (``f1_macro/model:baseline_first_k shots:3``; ``<headline>/job<num>`` for a
    job whose point is empty)."""
    values: dict[str, float] = {k: float(summary[k]) for k in ("n_jobs", "n_complete_jobs", "n_failed_jobs")}
    for job in summary.get("jobs") or []:
        if isinstance(job.get("headline_value"), (int, float)):
            label = point_label(job.get("point"), sep=":") or f"job{job.get('num')}"
            values[mlflow_name(f"{job.get('headline')}/{label}")] = float(job["headline_value"])
    return values


def sweep_table(summary: dict[str, Any]) -> dict[str, list[Any]]:
    """The sweep summary as a table: one row per job."""
    jobs = summary.get("jobs") or []
    return {
        "job": [j.get("num") for j in jobs],
        "point": [point_label(j.get("point")) or " ".join(j.get("overrides") or []) for j in jobs],
        "status": [j.get("status") for j in jobs],
        "headline": [j.get("headline") for j in jobs],
        "value": [j.get("headline_value") for j in jobs],
        "run_dir": [Path(j["run_dir"]).name if j.get("run_dir") else None for j in jobs],
        "error": [j.get("error") for j in jobs],
    }


def comparison_verdict(m: dict[str, Any], level: float, instrument_changed: str | None = None) -> str:
    """What a paired headline comparison found (``m``: one metric of
    :func:`evalkit.compare.paired_stats`, Δ = NEW − BASE, higher is better): ``better`` /
    ``worse`` when p < 1 − ``level``, ``no difference detected`` otherwise, ``instrument
    changed`` when the runs were measured differently, ``not estimable`` (no p) or ``no
    paired samples`` (no Δ)."""
    if m.get("delta") is None:
        return "no paired samples"
    if instrument_changed:
        return "instrument changed"
    if not isinstance(m.get("p"), (int, float)):
        return "not estimable"
    if m["p"] < 1 - level and m["delta"] != 0:
        return "better" if m["delta"] > 0 else "worse"
    return "no difference detected"


def _signed(x: float) -> str:
    text = f"{abs(x):.2g}"
    return ("−" if x < 0 else "+") + text


def comparison_name(head: str, benchmark: str, base: str, new: str, m: dict[str, Any], level: float,
                    instrument_changed: str | None = None) -> str:  # fmt: skip
    """The comparison run's name, what it compares and what it found:
    ``Δ overall acebench: reference → replay −0.28 (p 0.0003, worse)`` — the headline, the
    benchmark, BASE → NEW (their labels: the model, a sweep job's point), Δ (2 significant
    digits, a true minus) and the p and :func:`comparison_verdict`; at most 250 characters."""
    word = comparison_verdict(m, level, instrument_changed)
    if m.get("delta") is None:
        found = f"({word})"
    elif isinstance(m.get("p"), (int, float)):
        found = f"{_signed(float(m['delta']))} (p {float(m['p']):.2g}, {word})"
    else:
        found = f"{_signed(float(m['delta']))} ({word})"
    return f"Δ {head} {benchmark}: {base} → {new} {found}"[:MAX_NAME]


def comparison_metrics(m: dict[str, Any]) -> dict[str, float]:
    """A comparison run's metrics, each named with :data:`COMPARISON_PREFIX`: the headline's
    ``delta``, ``delta_ci_low`` / ``_high``, ``p``, ``p_holm``, ``p_bh``, ``mde`` and
    ``n_paired`` (those that are numbers)."""
    names = {"delta": "delta", "low": "delta_ci_low", "high": "delta_ci_high", "p": "p", "p_holm": "p_holm", "p_bh": "p_bh",
             "mde": "mde", "n": "n_paired"}  # fmt: skip
    return {COMPARISON_PREFIX + names[k]: float(m[k]) for k in names
            if isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool)}  # fmt: skip


def baseline_key(baseline_run_id: str, metric: str, stat: str) -> str:
    """``compare/<first 8 characters of the baseline run id>/<metric>/<stat>``: the name
    ``mlflow.genai.compare_evaluations(log_results=True)`` gives a comparison's figure (the
    metric name made one MLflow accepts, :func:`mlflow_name`)."""
    return mlflow_name(f"{COMPARISON_PREFIX}{baseline_run_id[:BASELINE_SHORT_ID]}/{metric}/{stat}")


def baseline_metrics(baseline_run_id: str, metric: str, m: dict[str, Any]) -> dict[str, float]:
    """A paired comparison's figures (``m``: one metric of :func:`evalkit.compare.paired_stats`,
    Δ = NEW − BASE) against MLflow run ``baseline_run_id``, named as MLflow 3.18 names them
    (:func:`baseline_key`, :data:`BASELINE_STATS`): ``diff``, ``ci_low`` / ``ci_high`` (evalkit's
    interval at the comparison's level), ``p_value`` (the paired test's), ``p_holm`` / ``p_bh``
    (adjusted over the comparison's family, when it has them), ``mde``, ``n_paired`` — those
    that are numbers."""
    return {baseline_key(baseline_run_id, metric, name): float(m[k]) for k, name in BASELINE_STATS.items()
            if isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool)}  # fmt: skip


def gate_rules(gate: str, baseline_run_id: str, metric: str) -> list[dict[str, Any]]:
    """The quality-criteria rules that are gate ``gate``'s interval test (``noninferior:δ``,
    ``superior``, ``equivalent:δ``; :func:`evalkit.stats.gate_reading`) on the run's
    :func:`baseline_metrics`: ``ci_low ≥ −δ`` (noninferior), ``ci_low ≥ 0`` (superior),
    ``ci_low ≥ −δ`` and ``ci_high ≤ δ`` (equivalent). evalkit's test is strict (> and <, within
    a relative tolerance); MLflow's comparators are ≥ and ≤, so a bound exactly on the margin
    reads as passing there and INCONCLUSIVE in evalkit's verdict. Raises ``ValueError`` for
    another gate."""
    kind, _, margin = gate.partition(":")
    low, high = (baseline_key(baseline_run_id, metric, s) for s in ("ci_low", "ci_high"))
    if kind == "superior":
        return [{"metricKey": low, "comparator": "GTE", "threshold": 0.0}]
    if kind == "noninferior":
        return [{"metricKey": low, "comparator": "GTE", "threshold": -float(margin)}]
    if kind == "equivalent":
        return [{"metricKey": low, "comparator": "GTE", "threshold": -float(margin)},
                {"metricKey": high, "comparator": "LTE", "threshold": float(margin)}]  # fmt: skip
    raise ValueError(f"unknown gate {gate!r}")


#: characters of the verdict's line kept in the quality-criteria record
CRITERIA_LINE_CHARS = 1000


def quality_criteria(verdict: dict[str, Any], baseline_run_id: str, metric: str, m: dict[str, Any], level: float) -> str:
    """The :data:`QUALITY_CRITERIA_TAG` value of a gated comparison (``verdict``:
    :func:`evalkit.compare.gate_verdict`'s ``{"gate", "verdict", "line"}``; ``m``: the paired
    figures of ``metric``), compact JSON: MLflow 3.18's record — ``schemaVersion`` 1, a
    ``revision`` derived from the content (the same comparison writes the same record), the
    :func:`gate_rules` — and ``evalkit``: the test's own reading, ``{"gate", "verdict"
    (PASS / FAIL / INCONCLUSIVE / FUTILE: the rules cannot tell the last three apart), "metric",
    "baseline_run_id", "diff", "ci_low", "ci_high", "level", "p_value", "n_paired", "line"}``."""
    rules = gate_rules(str(verdict["gate"]), baseline_run_id, metric)
    figures = {"diff": m.get("delta"), "ci_low": m.get("low"), "ci_high": m.get("high"), "level": level, "p_value": m.get("p"),
               "n_paired": m.get("n")}  # fmt: skip
    own = {"gate": str(verdict["gate"]), "verdict": str(verdict["verdict"]), "metric": metric, "baseline_run_id": baseline_run_id,
           **{k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None) for k, v in figures.items()},
           "line": str(verdict.get("line") or "")[:CRITERIA_LINE_CHARS]}  # fmt: skip
    body = {"rules": rules, "evalkit": own}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()
    revision = str(uuid.UUID(digest[:32]))
    return json.dumps({"schemaVersion": 1, "revision": revision, **body}, separators=(",", ":"), ensure_ascii=False)
