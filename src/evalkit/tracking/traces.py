"""One MLflow trace per selected sample, built as MLflow entities (``TraceInfo`` with its
``Feedback`` assessments, ``Span`` objects) from an :class:`~evalkit.tracking.samples.Outcome`.
Nothing here writes: :mod:`evalkit.tracking.mlflow_tracking` hands the entities to the store
(``start_trace`` writes a trace with its assessments in one transaction, ``log_spans`` the
spans of many traces in one).

A scored sample's trace (state ``OK``):

* request (the root span's inputs) = ``{"sample_id", "subset", "messages"}`` (or
  ``"prompt"`` in completion mode; ``"epoch"`` for a repeat), each message cut to
  :data:`PROMPT_CHARS` characters for display (the full prompt is identified by the row's
  ``prompt_hash``); response (outputs) = the output, cut to :data:`OUTPUT_CHARS`;
* one ``Feedback`` per per-sample score (value = the journal's number; source ``CODE``
  ``evalkit.<benchmark>``; the primary score carries the scorer's ``detail`` as rationale);
* a single-turn sample is one ``LLM`` span; an agent rollout is an ``AGENT`` root span with,
  in order, one span per agent turn (``LLM``, ``agent turn <k>``), per environment call
  (``TOOL``, ``environment: <api names>``: the executed calls and their result) and per
  user-simulator turn (``LLM``, ``user turn <k>``), each at the time its model call ran
  (the turn's ``started_at`` / ``ended_at``; an environment call lies between the turns
  around it). A journal written before turns had times gets times laid end to end from the
  run's start, each turn ``latency_s`` long.

A sample scored by LLM judges (a task's ``llm_judge`` scorer; the row's ``judgements``,
:mod:`evalkit.benchmarks.task.judge`) also gets one ``LLM`` span per judge call, named
``judge <judge>: <scorer>`` (`` (<order>)`` pairwise), with attributes ``evalkit.actor`` =
``judge``, ``evalkit.judge``, ``evalkit.scorer``, ``evalkit.order``, the call's statistics
(the judgement's ``call``, or the row's ``turns`` entry of actor ``judge`` for the same
judge, scorer and order), outputs = the verdict (its JSON object, ``valid``, ``value``) and the reply cut to
:data:`OUTPUT_CHARS`; a failed call's span is in error. The model's answer is then an
``LLM`` span ``model`` beside them under a ``CHAIN`` root (a rollout's ``AGENT`` root takes
them after its turns). Each span carries only its own actor's time and tokens (issue 32
item 5): the ``model`` span runs from the row's ``started_at`` for the row's ``latency_s``
less the judge calls', and never past the first judge call's start, with the tokens of
``usage_by_actor.agent``, never the row's ``usage`` (which sums the judges'); the root and
the trace carry the whole sample's. Each verdict is one ``Feedback`` attached to its span:
name = ``judge:<judge>/<scorer>`` (:func:`judge_feedback_name`: apart from the code score
named after the scorer, and naming its judge), value = the verdict's value for the answer (0-1, as the scorer reads it; an
invalid verdict has no value and carries the reason as its ``error``), rationale = the
verdict's ``reason``, source ``LLM_JUDGE`` with the judge's model config name as source
id, metadata ``actor``, ``judge``, ``order``. A failed sample whose failure record holds
``judgements`` (a ``judge_error``) gets the same spans and feedbacks under its error span.

Tokens and cost, as MLflow's views read them (token and cost columns, "Total tokens" /
"Total cost" of an evaluation run, the cost charts): each ``LLM`` span carries its call's
tokens as ``mlflow.chat.tokenUsage`` and the trace the sample's as ``mlflow.trace.tokenUsage``;
the row's ``cost_usd`` (evalkit's price of the calls this run sent) is the trace's
``mlflow.trace.cost`` and the ``mlflow.llm.cost`` of the sample's one ``LLM`` span (with
``mlflow.llm.model`` = the run's model) or of the root span (:func:`_scored_spans`). An unknown
cost is absent, never 0.

A failed sample's trace (state ``ERROR``): the request, no assessment, the root span in
error with ``<error kind> (<actor>): <message>``, tags ``error_kind`` and ``actor``.

Which outcomes get a trace: ``tracking.traces`` (:func:`policy_sample`) — ``sample`` (the
default): every failure, every flip against ``run.baseline`` and a seeded
``tracking.traces_per_category`` per subset; ``all``; ``none``. Then ``tracking.max_traces=N``
(:func:`traced_sample`) caps them at N — the failed ones first, then the scored ones, each group
ordered by SHA-256 of (``run.seed``, sample key), so the choice is seeded, the same on every
logging, and a sample's place does not depend on the others'.

Ids are derived, not random: the trace id from (MLflow run id, sample key, the outcome's
digest), span and assessment ids from the trace id. Writing the same outcome twice is the
same trace (the store merges it); a changed outcome is a new trace id.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from pathlib import Path
from typing import Any

from evalkit import secrets
from evalkit.images import FACTS_KEY, REF_PREFIX, image_facts, image_parts, stored_image, text_of, thumbnail
from evalkit.untrusted import SideFileError, with_side_file
from evalkit.summary import Summary
from evalkit.tracking.samples import Outcome, primary_score
from evalkit.types import sha256_hex

log = logging.getLogger("evalkit")

#: characters of each prompt message a trace shows
PROMPT_CHARS = 2000
#: characters of the output (and of each turn's text) a trace shows
OUTPUT_CHARS = 4000
#: MLflow's (OSS) length of a trace's request / response preview
PREVIEW_CHARS = 1000


#: characters that break logging to MLflow's stores: lone surrogates (not UTF-8; the
#: store's encoder raises) and NUL (which SQL text columns refuse or cut at)
_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


def mlflow_text(text: str) -> str:
    """``text`` as it goes into MLflow (trace, span, tag, param, table), where the UI renders
    it, markdown included. Records keep the exact text; only this copy is changed:

    * a lone surrogate or NUL is written as its escape (``\\ud800``, ``\\u0000``), so that
      no store's encoder fails on it (one such output would otherwise leave the run
      RUNNING with no traces, and every later logging fail the same way);
    * markdown image syntax ``![`` becomes ``!\\[`` (rendered as the text ``![``, never as
      an image the browser fetches when a trace is opened).

    Linear in the length of ``text``."""
    if "![" in text:
        text = text.replace("![", "!\\[")
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def mlflow_obj(obj: Any) -> Any:
    """``obj`` with :func:`mlflow_text` applied to every string in it (dict keys included)."""
    if isinstance(obj, str):
        return mlflow_text(obj)
    if isinstance(obj, dict):
        return {mlflow_obj(k) if isinstance(k, str) else k: mlflow_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [mlflow_obj(v) for v in obj]
    return obj


def cut(text: Any, limit: int) -> str:
    """``text`` (a string; anything else as JSON) at most ``limit`` characters, plus a note
    of how many were cut."""
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def traced_sample(outs: list[Outcome], max_traces: int | None, seed: int) -> list[Outcome]:
    """The outcomes that get a trace under ``tracking.max_traces`` (``None``: all of them).

    Rule: when there are more than ``max_traces`` outcomes, the failed ones (``failed.jsonl``
    rows and samples never run) come first, then the scored ones; within each group the order
    is SHA-256 of ``f"{seed}\\0{key}"`` (``seed`` = ``run.seed``, ``key`` = the sample key, epoch
    included). The first ``max_traces`` are kept, in ``outs``' order. The same run directory
    and seed give the same choice on every logging (``python -m evalkit.track`` included);
    a sample that failed and then scored on resume may leave the sample and be replaced.
    Time: O(M log M) for M outcomes."""
    if max_traces is None or len(outs) <= max_traces:
        return list(outs)

    def rank(o: Outcome) -> tuple[bool, bytes]:
        return o.ok, _seeded(seed, o.key)

    keep = {id(o) for o in sorted(outs, key=rank)[:max_traces]}
    return [o for o in outs if id(o) in keep]


def _seeded(seed: int, key: str) -> bytes:
    """A sample's place in the seeded order: SHA-256 of ``f"{seed}\\0{key}"``."""
    return hashlib.sha256(f"{seed}\0{key}".encode("utf-8", "surrogatepass")).digest()


def policy_sample(outs: list[Outcome], policy: str, per_category: int, seed: int,
                  flipped: set[str] | None = None) -> tuple[list[Outcome], dict[str, int]]:  # fmt: skip
    """The outcomes ``tracking.traces`` = ``policy`` traces (issue 46), in ``outs``' order,
    and what the choice is made of: ``{"failures", "flips", "per_category", "categories"}``.

    * ``all``: every outcome; ``none``: none;
    * ``sample``: the union of every failed outcome (a ``failed.jsonl`` row or a sample never
      run), every outcome whose key is in ``flipped`` (its primary score differs from
      ``run.baseline``'s, :func:`~evalkit.tracking.samples.flipped_keys`) and, per subset (the
      category), the first ``per_category`` of the subset's outcomes in the seeded order
      (SHA-256 of ``f"{seed}\\0{key}"``, as :func:`traced_sample`) — a seeded sample of the
      whole subset, so a subset of at most ``per_category`` samples is traced whole.

    The same run directory, seed and baseline give the same choice on every logging (a
    resumed run or ``python -m evalkit.track`` adds or removes only what changed). Time:
    O(M log M) for M outcomes; memory: the ids of the chosen."""
    counts = {"failures": sum(not o.ok for o in outs), "flips": 0, "per_category": per_category, "categories": 0}
    if policy == "none":
        return [], counts
    if policy == "all":
        return list(outs), counts
    flipped = flipped or set()
    keep = {id(o) for o in outs if not o.ok or o.key in flipped}
    counts["flips"] = sum(o.key in flipped for o in outs)
    groups: dict[str, list[Outcome]] = {}
    for o in outs:
        groups.setdefault(o.subset, []).append(o)
    counts["categories"] = len(groups)
    for members in groups.values():
        keep.update(id(o) for o in sorted(members, key=lambda o: _seeded(seed, o.key))[:per_category])
    return [o for o in outs if id(o) in keep], counts


def trace_id_of(run_id: str, outcome: Outcome) -> str:
    """``tr-<32 hex>`` of ``outcome`` in MLflow run ``run_id`` (see the module docstring)."""
    return "tr-" + sha256_hex(f"{run_id}\0{outcome.key}\0{outcome.digest()}")[:32]


def request_of(outcome: Outcome, shown: dict[str, str] | None = None) -> dict[str, Any]:
    """The request a trace shows (see the module docstring). A message with content parts
    keeps them: each text part cut, each image part (:mod:`evalkit.images`) an
    ``image_url`` part whose URL is ``shown[sha256]`` (its ``mlflow-attachment://``
    reference, :func:`image_attachments`), else ``evalkit-image:sha256:<digest>``; the
    request's ``images`` lists their facts (digest, size, shape) in order."""
    request: dict[str, Any] = {"sample_id": outcome.sample_id, "subset": outcome.subset}
    if outcome.epoch:
        request["epoch"] = outcome.epoch
    if outcome.messages is not None:
        request["messages"] = [{**m, "content": _shown_content(m.get("content"), shown or {})} for m in outcome.messages]
        images = image_facts(outcome.messages)
        if images:
            request["images"] = images  # each image's digest, size and shape (the parts show them)
    elif outcome.prompt is not None:
        request["prompt"] = cut(outcome.prompt, PROMPT_CHARS)
    return secrets.scrub_obj(request)


def _shown_content(content: Any, shown: dict[str, str]) -> Any:
    if not isinstance(content, list):
        return cut(content or "", PROMPT_CHARS)
    parts = []
    for part in content:
        facts = part.get(FACTS_KEY) if isinstance(part, dict) else None
        if isinstance(facts, dict):
            digest = str(facts.get("sha256"))
            parts.append({"type": "image_url", "image_url": {"url": shown.get(digest, REF_PREFIX + digest)}})
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append({**part, "text": cut(part.get("text") or "", PROMPT_CHARS)})
        else:
            parts.append(cut(part, PROMPT_CHARS))
    return parts


#: the longer side, in pixels, of an image as a trace shows it (a larger one is scaled down)
TRACE_IMAGE_SIDE = 512
#: the namespace of attachment ids: an image's id is uuid5(namespace, its sha256), so the
#: same image is one attachment per trace, whatever the sample
_ATTACHMENT_NS = uuid.UUID("6f1d2c3e-33a0-4b5e-9a77-0e7a1c0d3303")


def image_attachments(outcome: Outcome, run_dir: Path, trace_id: str) -> tuple[dict[str, str], dict[str, tuple[str, bytes]]]:
    """The attachments of an outcome's images: ``({sha256: mlflow-attachment reference},
    {attachment id: (content type, bytes)})``. Each image is read from the run's
    ``images/`` folder (:func:`evalkit.images.stored_image`; one missing there is
    shown by digest only) and scaled to at most :data:`TRACE_IMAGE_SIDE` px; its id is a
    UUID derived from its digest (MLflow's attachment ids are UUIDs), its reference MLflow
    3's ``mlflow-attachment://<id>?content_type=…&trace_id=…&size=…`` (the format
    ``mlflow.tracing.attachments.Attachment.ref`` writes and the UI renders)."""
    from urllib.parse import urlencode

    refs: dict[str, str] = {}
    files: dict[str, tuple[str, bytes]] = {}
    for facts in image_parts(outcome.messages):
        digest = str(facts.get("sha256"))
        if digest in refs:
            continue
        data = stored_image(run_dir, digest)
        if data is None:
            continue
        try:
            content_type, shown = thumbnail(data, TRACE_IMAGE_SIDE)
        except Exception:  # noqa: BLE001 - an image that cannot be shown is named by digest only
            continue
        attachment_id = str(uuid.uuid5(_ATTACHMENT_NS, digest))
        files[attachment_id] = (content_type, shown)
        query = urlencode({"content_type": content_type, "trace_id": trace_id, "size": str(len(shown))})
        refs[digest] = f"mlflow-attachment://{attachment_id}?{query}"
    return refs, files


def upload_attachments(tracer: Any, info: Any, files: dict[str, tuple[str, bytes]]) -> None:
    """Upload ``files`` (:func:`image_attachments`) to the artifact location of the trace
    ``info`` (as the store returned it from ``start_trace``: its ``mlflow.artifactLocation``
    tag), as ``attachments/<id>`` — what MLflow's live-span exporter does, which evalkit's
    offline ``start_trace`` + ``log_spans`` path never runs. Works against a local store and
    a server, with and without ``--serve-artifacts`` (MLflow's artifact repository of the
    location does the writing)."""
    if not files:
        return
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    from mlflow.tracing.utils.artifact_utils import get_artifact_uri_for_trace

    repo = get_artifact_repository(get_artifact_uri_for_trace(info))
    for attachment_id, (_, data) in files.items():
        repo.upload_attachment(attachment_id, data)


def _preview(outcome: Outcome) -> str:
    last = ""
    for message in reversed(outcome.messages or []):
        if message.get("role") == "user":
            last = text_of(message.get("content"))
            break
    text = f"{outcome.key} [{outcome.subset}] {last or outcome.prompt or ''}".strip()
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


class _Spans:
    """Span dicts of one trace (MLflow's ``Span.to_dict`` layout), in order, each starting
    after the one before (by at least a microsecond, so that order survives equal clocks)."""

    def __init__(self, trace_id: str):
        self.trace_id = trace_id
        self.dicts: list[dict[str, Any]] = []
        self.last_start = 0

    def add(self, name: str, kind: str, start_s: float, end_s: float, parent: str | None = None, inputs: Any = None,
            outputs: Any = None, attributes: dict[str, Any] | None = None, error: str | None = None) -> str:  # fmt: skip
        span_id = sha256_hex(f"{self.trace_id}\0{len(self.dicts)}")[:16]
        start = max(int(start_s * 1e9), self.last_start + 1000 if self.dicts else 0)
        self.last_start = start
        attrs = {"mlflow.traceRequestId": self.trace_id, "mlflow.spanType": kind, **(attributes or {})}
        if inputs is not None:
            attrs["mlflow.spanInputs"] = inputs
        if outputs is not None:
            attrs["mlflow.spanOutputs"] = outputs
        attrs, name, error = mlflow_obj(attrs), mlflow_text(name), mlflow_text(error) if error else error
        self.dicts.append({
            "trace_id": self.trace_id, "span_id": span_id, "parent_span_id": parent, "name": name,
            "start_time_unix_nano": start, "end_time_unix_nano": max(int(end_s * 1e9), start), "events": [],
            "status": {"code": "STATUS_CODE_ERROR" if error else "STATUS_CODE_OK", "message": error or ""},
            "attributes": {k: json.dumps(v, ensure_ascii=False, default=str) for k, v in attrs.items()},
        })  # fmt: skip
        return span_id

    def close_root(self) -> None:
        """The root span (the first) covers all its children."""
        if len(self.dicts) > 1:
            root = self.dicts[0]
            root["end_time_unix_nano"] = max(root["end_time_unix_nano"], *(d["end_time_unix_nano"] for d in self.dicts[1:]))


def _turn_times(turns: list[dict[str, Any]], start_s: float) -> list[tuple[float, float]]:
    """``(start, end)`` Unix seconds of each model call: recorded, or laid end to end from
    ``start_s`` by ``latency_s`` when the journal has no times."""
    times, clock = [], start_s
    for turn in turns:
        began = turn.get("started_at")
        if isinstance(began, (int, float)):
            ended = turn.get("ended_at")
            times.append((float(began), float(ended) if isinstance(ended, (int, float)) else float(began)))
        else:
            times.append((clock, clock + float(turn.get("latency_s") or 0.0)))
        clock = times[-1][1]
    return times


def _usage(usage: dict[str, Any] | None) -> dict[str, int] | None:
    """evalkit's ``usage`` (OpenAI names) as MLflow's token usage (``input_tokens``…)."""
    usage = usage or {}
    names = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens", "total_tokens": "total_tokens"}
    out = {mine: int(usage[theirs]) for theirs, mine in names.items() if isinstance(usage.get(theirs), (int, float))}
    if out and "total_tokens" not in out:
        out["total_tokens"] = out.get("input_tokens", 0) + out.get("output_tokens", 0)
    return out or None


def _turn_attributes(turn: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {f"evalkit.{k}": turn[k] for k in ("latency_s", "attempts", "cached", "finish_reason") if k in turn}
    usage = _usage(turn.get("usage"))
    if usage:
        attrs["mlflow.chat.tokenUsage"] = usage
    return attrs


def _shown(value: Any) -> Any:
    """``value`` as a span shows it: as it is when its JSON is short, else cut text."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= OUTPUT_CHARS else cut(text, OUTPUT_CHARS)


def rollout_spans(spans: _Spans, root: str, trajectory: dict[str, Any], start_s: float) -> None:
    """The child spans of an agent rollout, in transcript order (see the module docstring).
    The model calls (``turns``, in the order they ran) are matched to the transcript's
    ``agent`` and ``user`` messages party by party; messages of a party beyond its calls (the
    task a rollout starts from) are the request, not spans."""
    turns = [t for t in trajectory.get("turns") or [] if isinstance(t, dict)]
    times = _turn_times(turns, start_s)
    queue = {"agent": [i for i, t in enumerate(turns) if t.get("actor") not in ("user", "judge")],  # judge calls: their own spans
             "user": [i for i, t in enumerate(turns) if t.get("actor") == "user"]}  # fmt: skip
    messages = [m for m in trajectory.get("messages") or [] if isinstance(m, dict)]
    given_user = sum(m.get("role") == "user" for m in messages) - len(queue["user"])
    done: set[int] = set()
    counts = {"agent": 0, "user": 0}
    clock = start_s
    for message in messages:
        role = message.get("role")
        if role == "user" and given_user > 0:
            given_user -= 1
        elif role in queue and queue[role]:
            k = queue[role].pop(0)
            done.add(k)
            counts[role] += 1
            began, clock = times[k]
            outputs = {"content": cut(message.get("content") or "", OUTPUT_CHARS), "recipient": message.get("recipient")}
            spans.add(f"{role} turn {counts[role]}", "LLM", began, clock, root, outputs=outputs, attributes=_turn_attributes(turns[k]))
        elif role == "execution":
            following = next((times[k][0] for k in range(len(turns)) if k not in done), clock)
            calls = message.get("calls") if isinstance(message.get("calls"), list) else None
            names = ", ".join(str(c.get("name")) for c in calls or [] if isinstance(c, dict)) or "call"
            inputs = {"calls": calls} if calls is not None else {"text": cut(message.get("content") or "", OUTPUT_CHARS)}
            result = _shown(message.get("observation", message.get("content")))
            spans.add(f"environment: {names}", "TOOL", clock, max(following, clock), root, inputs=inputs, outputs=result)


def feedbacks(outcome: Outcome, trace_id: str, benchmark: str, headline: str) -> list[Any]:
    """One ``Feedback`` per numeric per-sample score of a scored outcome (none for a failure)."""
    from mlflow.entities import AssessmentSource, Feedback  # deferred: MLflow's import is heavy

    if outcome.row is None:
        return []
    scores = {k: v for k, v in (outcome.row.get("scores") or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    primary = primary_score(list(scores), headline)
    detail = outcome.row.get("detail")
    source = AssessmentSource(source_type="CODE", source_id=f"evalkit.{benchmark}")
    out = []
    for name, value in scores.items():
        rationale = cut(secrets.scrub(str(detail)), PREVIEW_CHARS) if name == primary and detail else None
        fb = Feedback(name=name, value=float(value), source=source, trace_id=trace_id, rationale=rationale and mlflow_text(rationale),
                      metadata={"status": str(outcome.row.get("status"))})  # fmt: skip
        fb.assessment_id = "a-" + sha256_hex(f"{trace_id}\0{name}")[:32]
        out.append(fb)
    return out


def judge_calls(record: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """The judge calls a journal row (or a ``failed.jsonl`` row) records: each entry of its
    ``judgements`` with the statistics of the same call — its own ``call`` object, else the
    entry of actor ``judge`` of the row's ``turns`` (a rollout's: its trajectory's) with the
    same judge, scorer and order, taken in order — or ``None``. Entries that are not objects
    are skipped."""
    raw = record.get("judgements")
    judgements = [j for j in raw if isinstance(j, dict)] if isinstance(raw, list) else []
    trajectory = record.get("trajectory") if isinstance(record.get("trajectory"), dict) else {}
    turns = record.get("turns") if isinstance(record.get("turns"), list) else trajectory.get("turns")
    waiting: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for turn in turns if isinstance(turns, list) else []:
        if isinstance(turn, dict) and turn.get("actor") == "judge":
            waiting.setdefault(_call_key(turn), []).append(turn)
    calls = []
    for judgement in judgements:
        queue = waiting.get(_call_key(judgement))
        turn = queue.pop(0) if queue else None
        calls.append((judgement, judgement["call"] if isinstance(judgement.get("call"), dict) else turn))
    return calls


def _call_key(entry: dict[str, Any]) -> tuple[str, str, str]:
    return str(entry.get("judge")), str(entry.get("scorer")), str(entry.get("order"))


def _judge_spans(spans: _Spans, root: str, record: dict[str, Any], start_s: float) -> list[tuple[dict[str, Any], str]]:
    """One ``LLM`` span under ``root`` per judge call of ``record`` (see the module
    docstring), laid out from ``start_s`` when a call has no recorded times; returns each
    judgement with its span id."""
    calls = judge_calls(record)
    times = _turn_times([turn or {} for _, turn in calls], start_s)
    out = []
    for (judgement, turn), (began, ended) in zip(calls, times):
        judge, scorer, order = (judgement.get(k) for k in ("judge", "scorer", "order"))
        name = f"judge {judge}: {scorer}" + (f" ({order})" if order else "")
        attrs = {"evalkit.actor": "judge", "evalkit.judge": judge, "evalkit.scorer": scorer, "evalkit.order": order,
                 "evalkit.valid": bool(judgement.get("valid")), **_turn_attributes(turn or {})}  # fmt: skip
        if judgement.get("cached") is not None:
            attrs.setdefault("evalkit.cached", judgement.get("cached"))
        outputs = {"verdict": _shown(judgement.get("verdict")), "valid": bool(judgement.get("valid")), "value": judgement.get("value"),
                   "text": cut(judgement.get("text") or "", OUTPUT_CHARS)}  # fmt: skip
        failed = judgement.get("text") is None and judgement.get("error")
        error = cut(secrets.scrub(f"judge_error (judge): {judgement.get('error')}"), PREVIEW_CHARS) if failed else None
        span_id = spans.add(name, "LLM", began, ended, root, inputs={"judge": judge, "scorer": scorer, "order": order},
                            outputs=secrets.scrub_obj(outputs), attributes=attrs, error=error)  # fmt: skip
        out.append((judgement, span_id))
    return out


def judge_feedback_name(judge: str, scorer: str) -> str:
    """The name of a judge's ``Feedback``: ``judge:<judge>/<scorer>`` — apart from the code
    score named ``<scorer>`` (the panel's), so the traces table never mixes the two in one
    column, and naming the judge."""
    return f"judge:{judge}/{scorer}"


def judge_feedbacks(judged: list[tuple[dict[str, Any], str]], trace_id: str) -> list[Any]:
    """One ``Feedback`` per judge verdict (see the module docstring): source ``LLM_JUDGE``,
    source id = the judge's model config name, attached to the call's span."""
    from mlflow.entities import AssessmentError, AssessmentSource, Feedback  # deferred: MLflow's import is heavy

    out = []
    for k, (judgement, span_id) in enumerate(judged):
        judge, scorer, order = (str(judgement.get(key)) for key in ("judge", "scorer", "order"))
        verdict = judgement.get("verdict") if isinstance(judgement.get("verdict"), dict) else {}
        value = judgement.get("value")
        valid = bool(judgement.get("valid")) and isinstance(value, (int, float)) and not isinstance(value, bool)
        reason = verdict.get("reason")
        rationale = mlflow_text(cut(secrets.scrub(reason), PREVIEW_CHARS)) if isinstance(reason, str) and reason else None
        error = None if valid else AssessmentError("INVALID_VERDICT", mlflow_text(cut(secrets.scrub(str(judgement.get("error"))), PREVIEW_CHARS)))
        metadata = {"actor": "judge", "judge": judge, "order": order,
                    "verdict": cut(json.dumps(verdict, ensure_ascii=False, sort_keys=True), PREVIEW_CHARS)}  # fmt: skip
        fb = Feedback(name=mlflow_text(judge_feedback_name(judge, scorer)), value=float(value) if valid else None, error=error, trace_id=trace_id, span_id=span_id,
                      source=AssessmentSource(source_type="LLM_JUDGE", source_id=mlflow_text(judge)), rationale=rationale,
                      metadata=mlflow_obj(metadata))  # fmt: skip
        fb.assessment_id = "a-" + sha256_hex(f"{trace_id}\0judge\0{k}\0{judge}\0{scorer}\0{order}")[:32]
        out.append(fb)
    return out


def _cost(row: dict[str, Any]) -> dict[str, float] | None:
    """The row's ``cost_usd`` (what this run spent on the sample, every call priced by its
    own model; :func:`evalkit.engine.records.spend`) as MLflow's cost record
    ``{"total_cost": USD}``; ``None`` when unknown (never 0 for an unknown)."""
    cost = row.get("cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0 and cost == cost:
        return {"total_cost": float(cost)}
    return None


def _scored_spans(spans: _Spans, key: str, row: dict[str, Any], request: dict[str, Any], start_s: float,
                  model: str = "") -> tuple[dict[str, str], list[tuple[dict[str, Any], str]]]:  # fmt: skip
    """The spans of a scored sample (one ``LLM`` span, or a rollout's tree; with judge
    calls, those beside them); returns the trace metadata they imply (token usage, cost) and
    the judgements with their spans. ``model``: the run's model (its config name), the
    ``mlflow.llm.model`` of a sample's one ``LLM`` span.

    Cost (what MLflow's cost views read): the row's ``cost_usd`` is the trace's
    ``mlflow.trace.cost`` and the ``mlflow.llm.cost`` of the span it is the cost of — the one
    ``LLM`` span, else the root (the sum of the model's and the judges' or user simulator's
    calls, which the row does not split). A span gets ``mlflow.llm.model`` only together with
    evalkit's cost, so MLflow never prices evalkit's calls by its own price map."""
    output = secrets.scrub(cut(row.get("output") or "", OUTPUT_CHARS))
    began = row["started_at"] if isinstance(row.get("started_at"), (int, float)) else start_s
    ended = row["ended_at"] if isinstance(row.get("ended_at"), (int, float)) else began + float(row.get("latency_s") or 0.0)
    attrs = {"evalkit.status": row.get("status"), "evalkit.detail": cut(str(row.get("detail") or ""), PREVIEW_CHARS)}
    usage = _usage(row.get("usage"))
    trajectory = row.get("trajectory") if isinstance(row.get("trajectory"), dict) else None
    judged_row = bool(judge_calls(row))
    cost = _cost(row)
    implied = {**({"mlflow.trace.tokenUsage": json.dumps(usage)} if usage else {}), **({"mlflow.trace.cost": json.dumps(cost)} if cost else {})}
    priced = {"mlflow.llm.cost": cost, **({"mlflow.llm.model": model} if model else {})} if cost else {}
    llm_attrs = {**attrs, **({"mlflow.chat.tokenUsage": usage} if usage else {}), **priced}
    if trajectory is None and not judged_row:
        spans.add(key, "LLM", began, ended, inputs=request, outputs=output, attributes=llm_attrs)
        return implied, []
    root_attrs = {**attrs, **({"mlflow.llm.cost": cost} if cost else {})}
    root = spans.add(key, "AGENT" if trajectory is not None else "CHAIN", began, ended, inputs=request, outputs=output, attributes=root_attrs)
    if trajectory is not None:
        rollout_spans(spans, root, secrets.scrub_obj(trajectory), began)
    else:
        model_ended, model_usage = _answer_call(row, began, ended)
        model_attrs = {**attrs, **({"mlflow.chat.tokenUsage": model_usage} if model_usage else {}), "evalkit.actor": "agent"}
        spans.add("model", "LLM", began, model_ended, root, inputs=request, outputs=output, attributes=model_attrs)
    judged = _judge_spans(spans, root, row, max(ended, began))
    spans.close_root()
    return implied, judged


def _answer_call(row: dict[str, Any], began: float, ended: float) -> tuple[float, dict[str, int] | None]:
    """``(end, usage)`` of the model's own call in a judged single-turn row (module
    docstring): ``began`` plus the row's ``latency_s`` less the judge calls', never past the
    first judge call's start (within ``began``..``ended``); its tokens are
    ``usage_by_actor.agent`` (``None`` when not recorded)."""
    calls = [call for _, call in judge_calls(row) if isinstance(call, dict)]
    starts = [float(c["started_at"]) for c in calls if isinstance(c.get("started_at"), (int, float))]
    end = min(starts) if starts else ended
    if isinstance(row.get("latency_s"), (int, float)) and not isinstance(row.get("latency_s"), bool):
        judge_s = sum(float(c["latency_s"]) for c in calls if isinstance(c.get("latency_s"), (int, float)))
        end = min(end, began + max(0.0, float(row["latency_s"]) - judge_s))
    by_actor = row.get("usage_by_actor")
    usage = _usage(by_actor.get("agent")) if isinstance(by_actor, dict) and isinstance(by_actor.get("agent"), dict) else None
    return min(max(end, began), max(ended, began)), usage


def _failed_span(spans: _Spans, key: str, failure: dict[str, Any], request: dict[str, Any], start_s: float) -> tuple[dict[str, str], str]:
    """The root span, in error, of a failed sample; returns the trace tags it implies and its id."""
    why = f"{failure.get('error_kind')} ({failure.get('actor')}): {secrets.scrub(str(failure.get('message') or ''))}"
    attrs = {f"evalkit.{k}": failure.get(k) for k in ("error_kind", "actor", "attempts")}
    root = spans.add(key, "CHAIN", start_s, start_s, inputs=request, attributes=attrs, error=cut(why, PREVIEW_CHARS))
    return {"status": "failed", "error_kind": str(failure.get("error_kind")), "actor": str(failure.get("actor"))}, root


def _with_side_file(row: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The row with its side file's texts; a side file that cannot be trusted leaves the
    row's capped texts, marked as such, and one warning."""
    try:
        return with_side_file(row, run_dir)
    except SideFileError as exc:
        log.warning("%s; its trace shows the row's first characters only", exc)
        return {**row, "output": f"[side file unreadable: the first characters only] {row.get('output') or ''}"}


def build_trace(outcome: Outcome, run_dir: Path, run_id: str, experiment_id: str, summary: Summary, start_s: float,
                attachments: dict[str, tuple[str, bytes]] | None = None) -> tuple[Any, list[Any]]:  # fmt: skip
    """``(TraceInfo with its assessments, [Span, …])`` of one outcome of the run in
    ``run_dir`` (MLflow run ``run_id`` in experiment ``experiment_id``); ``start_s``: Unix
    seconds to lay untimed calls out from (the run's start). The request's images are
    referenced as attachments (:func:`image_attachments`), whose bytes are added to
    ``attachments`` for :func:`upload_attachments`."""
    from mlflow.entities import Span, TraceInfo, TraceLocation, TraceState  # deferred: heavy import

    trace_id = trace_id_of(run_id, outcome)
    shown, files = image_attachments(outcome, run_dir, trace_id) if outcome.messages else ({}, {})
    if attachments is not None:
        attachments.update(files)
    spans = _Spans(trace_id)
    tags = {"mlflow.traceName": outcome.key, "evalkit.key": outcome.key, "sample_id": outcome.sample_id, "subset": outcome.subset}
    metadata = {"mlflow.sourceRun": run_id}
    if outcome.epoch:
        tags["epoch"] = str(outcome.epoch)
    if outcome.row is not None:
        row = _with_side_file(outcome.row, run_dir)
        tags["status"] = str(row.get("status"))
        implied, judged = _scored_spans(spans, outcome.key, row, request_of(outcome, shown), start_s, str(getattr(summary, "model", None) or ""))
        metadata.update(implied)
        state, response = TraceState.OK, secrets.scrub(str(row.get("output") or ""))[:PREVIEW_CHARS]
    else:
        failure = outcome.failure or {}
        implied, root = _failed_span(spans, outcome.key, failure, request_of(outcome, shown), start_s)
        tags.update(implied)
        judged = _judge_spans(spans, root, failure, start_s)
        spans.close_root()
        state, response = TraceState.ERROR, None
    root = spans.dicts[0]
    info = TraceInfo(
        trace_id=trace_id,
        trace_location=TraceLocation.from_experiment_id(experiment_id),
        request_time=root["start_time_unix_nano"] // 1_000_000,
        execution_duration=(root["end_time_unix_nano"] - root["start_time_unix_nano"]) // 1_000_000,
        state=state,
        request_preview=mlflow_text(secrets.scrub(_preview(outcome))),
        response_preview=response and mlflow_text(response),
        trace_metadata=mlflow_obj(metadata),
        tags=mlflow_obj(tags),
        assessments=feedbacks(outcome, trace_id, summary.benchmark, str(summary.headline))
        + judge_feedbacks(judged, trace_id),
    )
    return info, [Span.from_dict(d) for d in spans.dicts]
