"""Judge qualification and MLflow (issue 45): people's labels read from MLflow's HUMAN
assessments (:func:`human_labels`), and a qualification record logged as an MLflow run
(:func:`log_qualification`). ``python -m evalkit.judge qualify`` (:mod:`evalkit.qualify`)
calls both; the labels are checked there as a labels file's rows are
(:func:`evalkit.benchmarks.task.qualification.label_item`).

**Labels from MLflow** (``labels=mlflow:<source>``). ``<source>`` is an MLflow run id (32
hexadecimal digits: the traces of that run), else an experiment id, else an experiment name
(every trace of the experiment), in the store ``tracking.tracking_uri`` (default: the SQLite
store under ``run.output_root``, where evalkit's own runs are tracked). A trace is a labelled
answer when it carries

* the tag ``sample_id`` (evalkit's traces do): a sample of the task;
* the answer: the trace's response (its root span's outputs — what the labeller saw): a
  string, or an object with one string field ``answer``, ``output``, ``response`` or
  ``content``; an answer evalkit cut for display (``… [N more characters]``) or longer than
  :data:`MAX_ANSWER_CHARS` is skipped (counted);
* a ``Feedback`` named after the scorer (``quality``) whose source type is ``HUMAN`` and that
  is valid (not overridden): MLflow's labelling sessions and review queues, or
  ``mlflow.log_feedback(..., source=AssessmentSource(source_type="HUMAN", ...))``. Feedback of
  any other source (``LLM_JUDGE``, ``CODE``: evalkit's own scores and verdicts) is never a label.
  With several, the latest (by its update time) is the label.

The same answer of a sample labelled in several traces counts once: the latest label.
Everything the store answers is untrusted: each HTTP call to a server is bounded in time and
size (:mod:`evalkit.tracking.http_bounds`: ``tracking.request_deadline_s``,
``tracking.max_response_bytes``), at most :data:`MAX_TRACES` traces are read (more is
refused), a page token that repeats ends the reading, ids, tags, names and values are
type-checked and bounded before use.

**The record in MLflow** (:func:`log_qualification`): one run in ``tracking.experiment``,
named ``qualify <judge> on <task>/<scorer>: qualified (κ 0.81)`` or ``NOT qualified``,
tagged ``evalkit.kind=judge_qualification``; params: the judge, task, scorer, protocol, the
four digests and the floors; metrics: κ, α and percent agreement with their interval ends,
each kind's steer rate and the overall one, the labels' counts and invalid verdicts; the
record itself as the artifact ``qualification/<stamp>.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from evalkit import secrets
from evalkit.errors import DataError, TrackingError, printable
from evalkit.specs import TrackingSpec
from evalkit.tracking.mlflow_tracking import artifact_root, bound_hit, client, experiment_id, is_unreachable, log_values, tracking_uri
from evalkit.tracking.store import use_http_bounds
from evalkit.tracking.traces import mlflow_obj, mlflow_text

#: the prefix of ``labels=`` that names an MLflow source
PREFIX = "mlflow:"
#: traces read from one source, at most (a labels file's bound)
MAX_TRACES = 100_000
#: traces asked for per page (with their spans: a page is one bounded response)
PAGE = 100
#: characters of one answer, at most; of a sample id, a feedback name, a label string
MAX_ANSWER_CHARS, MAX_ID_CHARS, MAX_LABEL_CHARS = 100_000, 1_000, 40
#: the fields of a response object that may hold the answer
ANSWER_FIELDS = ("answer", "output", "response", "content")
_RUN_ID = re.compile(r"[0-9a-f]{32}")
_CUT = re.compile(r"… \[\d+ more characters\]\Z")


def is_mlflow_source(labels: str) -> bool:
    """Whether ``labels=`` names an MLflow source (``mlflow:<run id | experiment id or name>``)."""
    return str(labels).startswith(PREFIX)


def _store(spec: TrackingSpec) -> tuple[str, Any]:
    """``(uri, MlflowClient)`` of ``tracking.*``, each call to a server bounded."""
    uri = tracking_uri(spec)
    use_http_bounds(spec.request_deadline_s, spec.max_response_bytes)
    return uri, client(uri)


def _failed(exc: BaseException, uri: str, what: str) -> TrackingError:
    """One line for a store that failed ``what`` (its bound, its transport, or its refusal)."""
    why = bound_hit(exc) or ("cannot be reached" if is_unreachable(exc) else f"answered {type(exc).__name__}: {str(exc)[:200]}")
    return TrackingError(f"MLflow store {printable(secrets.scrub(uri), 200)}: {what}: {printable(secrets.scrub(why), 300)}")


def _where(source: str, mlflow_client: Any, uri: str) -> tuple[str, str | None]:
    """``(experiment id, run id or None)`` of ``source`` (module docstring).

    Raises:
        DataError: no such run or experiment in the store.
    """
    shown = f"labels={PREFIX}{printable(source, 100)}"
    if not source or len(source) > MAX_ID_CHARS:
        raise DataError(f"{shown}: name an MLflow run id, experiment id or experiment name after '{PREFIX}'")
    if _RUN_ID.fullmatch(source):
        try:
            run = mlflow_client.get_run(source)
        except Exception as exc:  # noqa: BLE001 - a missing run, or a store that failed
            if is_unreachable(exc):
                raise _failed(exc, uri, f"reading run {source}") from None
            raise DataError(f"{shown}: no MLflow run {source} in {printable(secrets.scrub(uri), 200)}") from None
        exp = str(getattr(run.info, "experiment_id", ""))
        return exp, source
    try:
        exp = mlflow_client.get_experiment(source) if source.isdigit() else None
    except Exception as exc:  # noqa: BLE001 - not an id of this store
        if is_unreachable(exc):
            raise _failed(exc, uri, f"reading experiment {source}") from None
        exp = None
    if exp is None:
        try:
            exp = mlflow_client.get_experiment_by_name(source)
        except Exception as exc:  # noqa: BLE001
            raise _failed(exc, uri, "reading the experiments") from None
    if exp is None:
        raise DataError(f"{shown}: no MLflow run, experiment id or experiment name {printable(source, 100)!r} in "
                        f"{printable(secrets.scrub(uri), 200)}")  # fmt: skip
    return str(exp.experiment_id), None


def _answer(trace: Any) -> str | None | bool:
    """The answer of a trace (module docstring): its text; ``None`` when it has none; ``False``
    when it was cut for display or is too long to be the answer labelled."""
    data = getattr(trace, "data", None)
    raw = getattr(data, "response", None) if data is not None else None
    if not isinstance(raw, str):
        return None
    if len(raw) > 4 * MAX_ANSWER_CHARS:
        return False
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, dict):
        found = [value[k] for k in ANSWER_FIELDS if isinstance(value.get(k), str)]
        value = found[0] if len(found) == 1 else None
    if not isinstance(value, str):
        return None
    if len(value) > MAX_ANSWER_CHARS or _CUT.search(value):
        return False
    return value


def _human_label(trace: Any, name: str) -> tuple[Any, int] | None:
    """``(value, time in ms)`` of the trace's latest valid HUMAN feedback named ``name``."""
    best: tuple[Any, int] | None = None
    for a in list(getattr(getattr(trace, "info", None), "assessments", None) or [])[:1000]:
        source = getattr(a, "source", None)
        kind = getattr(source, "source_type", None)
        if getattr(a, "name", None) != name or str(getattr(kind, "value", kind)) != "HUMAN" or getattr(a, "valid", True) is False:
            continue
        feedback = getattr(a, "feedback", None)
        if feedback is None or getattr(feedback, "error", None) is not None:
            continue
        value = getattr(feedback, "value", None)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and len(value) > MAX_LABEL_CHARS:
            value = value[:MAX_LABEL_CHARS]
        if not isinstance(value, (bool, int, float, str)):
            continue
        when = getattr(a, "last_update_time_ms", None) or getattr(a, "create_time_ms", None) or 0
        when = when if isinstance(when, int) and not isinstance(when, bool) else 0
        if best is None or when >= best[1]:
            best = (value, when)
    return best


def human_labels(spec: TrackingSpec, labels: str, name: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The labelled answers of ``labels`` (``mlflow:<source>``, module docstring) for the
    scorer named ``name``: ``([{"sample_id", "answer", "label", "where"}], {"uri", "source",
    "experiment_id", "run_id", "traces", "labelled", "skipped": {reason: count}})``, rows in the
    store's order, each answer of a sample once (its latest label). The rows are raw: the
    caller checks them (:func:`evalkit.benchmarks.task.qualification.label_item`).

    Raises:
        DataError: no such source, more than :data:`MAX_TRACES` traces in it.
        TrackingError: the store cannot be read (unreachable, a bound hit, a refusal) — one line.
    """
    source = labels[len(PREFIX):]
    uri, mlflow_client = _store(spec)
    exp, run_id = _where(source, mlflow_client, uri)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: dict[str, int] = {}
    traces, token, tokens = 0, None, set()
    while True:
        try:
            page = mlflow_client.search_traces(locations=[exp], run_id=run_id, max_results=PAGE, page_token=token, include_spans=True)
        except Exception as exc:  # noqa: BLE001
            raise _failed(exc, uri, f"reading the traces of {PREFIX}{printable(source, 100)}") from None
        for trace in page:
            traces += 1
            if traces > MAX_TRACES:
                raise DataError(f"labels={PREFIX}{printable(source, 100)}: more than {MAX_TRACES:,} traces; label a run's traces "
                                "(its run id) or an experiment of its own")  # fmt: skip
            label = _human_label(trace, name)
            if label is None:
                continue
            info = getattr(trace, "info", None)
            sid = (getattr(info, "tags", None) or {}).get("sample_id") if isinstance(getattr(info, "tags", None), dict) else None
            trace_id = str(getattr(info, "trace_id", "?"))[:100]
            if not isinstance(sid, str) or not sid or len(sid) > MAX_ID_CHARS:
                skipped["no sample_id tag"] = skipped.get("no sample_id tag", 0) + 1
                continue
            answer = _answer(trace)
            if answer is None or answer is False:
                why = "no answer in its response" if answer is None else "its answer was cut for display or is too long"
                skipped[why] = skipped.get(why, 0) + 1
                continue
            key = (sid, answer)
            if key in found and found[key]["time"] > label[1]:
                continue
            found[key] = {"sample_id": sid, "answer": answer, "label": label[0], "time": label[1], "where": f"MLflow trace {trace_id}"}
        token = getattr(page, "token", None)
        if not token or not isinstance(token, str) or token in tokens or len(token) > 10_000:
            break
        tokens.add(token)
    rows = [{k: v for k, v in row.items() if k != "time"} for row in found.values()]
    info = {"uri": secrets.scrub(uri), "source": source, "experiment_id": exp, "run_id": run_id, "traces": min(traces, MAX_TRACES),
            "labelled": len(rows), "skipped": skipped}  # fmt: skip
    return rows, info


def log_qualification(spec: TrackingSpec, record: dict[str, Any], path: Path) -> str:
    """Log ``record`` (written at ``path``) as an MLflow run (module docstring); returns its run id.

    Raises:
        TrackingError: the store cannot be written — one line (the record stays at ``path``).
    """
    uri, mlflow_client = _store(spec)
    try:
        exp = experiment_id(mlflow_client, spec.experiment, artifact_root(spec))
        judge, bench, scorer = record["judge"], record["benchmark"], record["scorer"]
        kappa = ((record.get("agreement") or {}).get("cohen_kappa") or {}).get("value")
        verdict = f"qualified (κ {kappa:.2f})" if record.get("qualified") else "NOT qualified"
        tags = {"evalkit.kind": "judge_qualification", "mlflow.runName": f"qualify {judge} on {bench}/{scorer}: {verdict}",
                "benchmark": bench, "judge": judge, "evalkit.qualified": str(bool(record.get("qualified"))).lower(),
                "evalkit.record": str(path), "mlflow.note.content": _note(record)}  # fmt: skip
        run = mlflow_client.create_run(exp, tags=mlflow_obj(tags))
        rid = run.info.run_id
        log_values(mlflow_client, rid, params=qualification_params(record), metrics=qualification_metrics(record))
        mlflow_client.log_artifact(rid, str(path), artifact_path="qualification")
        mlflow_client.set_terminated(rid, "FINISHED")
        return rid
    except TrackingError:
        raise
    except Exception as exc:  # noqa: BLE001 - a store that failed: one line, the record stays on disk
        raise _failed(exc, uri, "logging the qualification") from None


def qualification_params(record: dict[str, Any]) -> dict[str, str]:
    """The params of a qualification run: judge, task, scorer, protocol, digests, floors, labels' source."""
    out = {"judge": record.get("judge"), "benchmark": record.get("benchmark"), "scorer": record.get("scorer"),
           "protocol": record.get("protocol"), "labels": (record.get("labels") or {}).get("path")}  # fmt: skip
    out.update({f"digest.{k}": v for k, v in (record.get("digests") or {}).items()})
    out.update({f"floor.{k}": v for k, v in (record.get("floors") or {}).items()})
    return {k: mlflow_text(str(v)) for k, v in out.items() if v is not None}


def qualification_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The metrics of a qualification run: ``kappa``, ``alpha``, ``percent_agreement`` (each
    with ``_ci_low`` / ``_ci_high``), ``steer_rate/<kind>`` and ``steer_rate``, ``n_labels``,
    ``n_known_wrong``, ``n_invalid``, ``qualified`` (1 or 0)."""
    out: dict[str, float] = {}
    for name, key in (("kappa", "cohen_kappa"), ("alpha", "krippendorff_alpha"), ("percent_agreement", "percent_agreement")):
        fig = (record.get("agreement") or {}).get(key) or {}
        out[name] = fig.get("value")
        ci = fig.get("ci") or {}
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = ci.get("low"), ci.get("high")
    steering = record.get("steering") or {}
    for kind, fig in (steering.get("kinds") or {}).items():
        out[f"steer_rate/{kind}"] = (fig or {}).get("rate")
    out["steer_rate"] = (steering.get("overall") or {}).get("rate")
    labels = record.get("labels") or {}
    out.update({"n_labels": labels.get("n"), "n_known_wrong": labels.get("n_known_wrong"),
                "n_invalid": (record.get("invalid") or {}).get("n"), "qualified": 1.0 if record.get("qualified") else 0.0})  # fmt: skip
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _note(record: dict[str, Any]) -> str:
    """The run's description: what was qualified, the verdict and why."""
    head = (f"Qualification of judge `{record.get('judge')}` on `{record.get('benchmark')}/{record.get('scorer')}` "
            f"({(record.get('labels') or {}).get('n')} labelled answers from `{(record.get('labels') or {}).get('path')}`, "
            f"{record.get('date')}): " + ("qualified." if record.get("qualified") else "NOT qualified."))  # fmt: skip
    return "\n\n".join([head, *[f"- {r}" for r in record.get("refusals") or []], "docs/judges.md says how to read the figures."])[:5000]
