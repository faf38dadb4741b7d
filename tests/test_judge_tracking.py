"""LLM judges in MLflow (issue 24, item 3): each judge call is a span of the sample's trace
(actor ``judge``), and each verdict an assessment whose source is the judge (``LLM_JUDGE``,
the judge's model config name) — written to and read back from a SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.tracking.samples import Outcome
from evalkit.tracking.traces import build_trace, judge_calls

pytestmark = pytest.mark.slow  # an MLflow SQLite store (its migrations take seconds)

T0 = 1_800_000_000.0


def _judgement(judge, order, text, verdict, value, error=None, call=None):
    out = {"judge": judge, "scorer": "preference", "order": order, "text": text, "verdict": verdict,
           "valid": verdict is not None, "value": value, "error": error, "cached": False}  # fmt: skip
    return {**out, "call": call} if call else out


def _turn(judge, order, start, tokens):
    return {"actor": "judge", "judge": judge, "scorer": "preference", "order": order, "started_at": start, "ended_at": start + 0.5,
            "latency_s": 0.5, "attempts": 1, "usage": {"prompt_tokens": tokens, "completion_tokens": 7}}  # fmt: skip


#: a pairwise-judged sample: judge-a asked in both orders (A wins, then B wins: the answer
#: wins both), judge-b's second order answered garbage (an invalid verdict)
ROW = {
    "sample_id": "s1", "subset": "open", "status": "ok", "output": "Paris is the capital.", "scores": {"preference": 1.0, "preference_invalid": 1.0},
    "request_hash": "h1", "started_at": T0, "ended_at": T0 + 5.5, "latency_s": 3.0, "usage": {"prompt_tokens": 430, "completion_tokens": 33},
    "usage_by_actor": {"agent": {"prompt_tokens": 20, "completion_tokens": 5}, "judge": {"prompt_tokens": 410, "completion_tokens": 28}},
    "judgements": [
        _judgement("judge-a", "model_first", '{"winner": "A", "reason": "more precise"}', {"winner": "A", "reason": "more precise"}, 1.0),
        _judgement("judge-a", "model_second", '{"winner": "B", "reason": "still more precise"}', {"winner": "B", "reason": "still more precise"}, 1.0),
        _judgement("judge-b", "model_first", '{"winner": "tie"}', {"winner": "tie"}, 0.5),
        _judgement("judge-b", "model_second", "I cannot decide.", None, None, "no JSON object in the reply",
                   call=_turn("judge-b", "model_second", T0 + 5, 104)),
    ],
    # the statistics of a call: its judgement's own ``call``, or (a rollout's) a turn of actor judge
    "turns": [_turn("judge-a", "model_first", T0 + 2, 101), _turn("judge-a", "model_second", T0 + 3, 102),
              _turn("judge-b", "model_first", T0 + 4, 103)],
}  # fmt: skip

#: a sample whose only judge failed after its retries: a judge_error failure
FAILURE = {
    "sample_id": "s2", "subset": "open", "error_kind": "judge_error", "actor": "judge", "message": "no judge gave a verdict",
    "attempts": 3, "request_hash": "h2",
    "judgements": [_judgement("judge-a", None, None, None, None, "server_error: HTTP 500 after 3 attempts")],
}  # fmt: skip


def test_judge_calls_pair_each_verdict_with_its_own_turn():
    calls = judge_calls(ROW)
    assert [(j["judge"], j["order"], t["usage"]["prompt_tokens"]) for j, t in calls] == [
        ("judge-a", "model_first", 101), ("judge-a", "model_second", 102), ("judge-b", "model_first", 103), ("judge-b", "model_second", 104)]  # fmt: skip
    assert judge_calls({"judgements": "not a list"}) == [] and judge_calls(FAILURE)[0][1] is None


def test_judge_spans_and_assessments_read_back_from_mlflow(tmp_path: Path):
    import mlflow
    from mlflow.entities import AssessmentSourceType

    from evalkit.summary import Summary
    from evalkit.tracking.mlflow_tracking import client, experiment_id, trace_client

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow_client = client(uri)
    exp = experiment_id(mlflow_client, "judges", str(tmp_path / "artifacts"))
    run_id = mlflow_client.create_run(exp).info.run_id
    summary = Summary.model_construct(benchmark="open_qa", headline="preference")
    tracer = trace_client(uri)
    built = [build_trace(o, tmp_path, run_id, exp, summary, T0) for o in (Outcome("s1", "open", row=ROW), Outcome("s2", "open", failure=FAILURE))]
    for info, _ in built:
        tracer.start_trace(info)
    tracer.log_spans(exp, [span for _, spans in built for span in spans])

    scored = mlflow.get_trace(built[0][0].trace_id)
    judge_spans = [s for s in scored.data.spans if s.get_attribute("evalkit.actor") == "judge"]
    assert [s.name for s in judge_spans] == ["judge judge-a: preference (model_first)", "judge judge-a: preference (model_second)",
                                             "judge judge-b: preference (model_first)", "judge judge-b: preference (model_second)"]  # fmt: skip
    root = next(s for s in scored.data.spans if s.parent_id is None)
    assert root.span_type == "CHAIN" and all(s.parent_id == root.span_id for s in judge_spans)
    model = next(s for s in scored.data.spans if s.name == "model")
    assert model.get_attribute("evalkit.actor") == "agent" and model.outputs == "Paris is the capital."
    # each span its own actor's time and tokens (issue 32 item 5): the model's call took 1 s
    # (3 s in all less the judges' 4 x 0.5 s) and 20 + 5 tokens, not the judges' 410 + 28
    assert model.end_time_ns == int((T0 + 1.0) * 1e9) and 0 <= model.start_time_ns - int(T0 * 1e9) <= 1000  # after its root by 1 µs
    assert model.get_attribute("mlflow.chat.tokenUsage") == {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}
    assert root.end_time_ns == int((T0 + 5.5) * 1e9)
    assert [s.get_attribute("mlflow.chat.tokenUsage")["input_tokens"] for s in judge_spans] == [101, 102, 103, 104]
    assert judge_spans[0].start_time_ns == int((T0 + 2) * 1e9)
    assert judge_spans[3].outputs["valid"] is False and judge_spans[3].outputs["text"] == "I cannot decide."

    judged = [a for a in scored.info.assessments if a.source.source_type == AssessmentSourceType.LLM_JUDGE]
    # named with the judge, apart from the code score "preference" (issue 32 item 5)
    assert [(a.name, a.source.source_id, a.metadata["order"]) for a in judged] == [
        ("judge:judge-a/preference", "judge-a", "model_first"), ("judge:judge-a/preference", "judge-a", "model_second"),
        ("judge:judge-b/preference", "judge-b", "model_first"), ("judge:judge-b/preference", "judge-b", "model_second")]  # fmt: skip
    assert [a.value for a in judged] == [1.0, 1.0, 0.5, None]
    assert judged[0].rationale == "more precise" and judged[0].span_id == judge_spans[0].span_id
    assert judged[3].error.error_code == "INVALID_VERDICT" and "no JSON object" in judged[3].error.error_message
    code = [a for a in scored.info.assessments if a.source.source_type == AssessmentSourceType.CODE]
    assert {a.name: a.value for a in code} == {"preference": 1.0, "preference_invalid": 1.0}  # the panel's score, by evalkit

    failed = mlflow.get_trace(built[1][0].trace_id)
    assert failed.info.tags["error_kind"] == "judge_error" and failed.info.tags["actor"] == "judge"
    (span,) = [s for s in failed.data.spans if s.parent_id is not None]  # the root in error says the failure
    assert span.get_attribute("evalkit.actor") == "judge" and span.get_attribute("evalkit.judge") == "judge-a"
    assert span.status.status_code == "ERROR" and "HTTP 500" in span.status.description
    (verdict,) = failed.info.assessments
    assert verdict.name == "judge:judge-a/preference" and verdict.source.source_id == "judge-a" and verdict.value is None and "HTTP 500" in verdict.error.error_message
