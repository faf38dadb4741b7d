"""LLM judges as a task scorer (issue 24 item 3): the verdict's schema and reading, the
position-bias rule of pairwise judging, panels, and the judge's configuration (quick,
in-process). Whole runs through the engine and the fake server are in
tests/test_judge_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.benchmarks.task import judge as J
from evalkit.benchmarks.task.settings import ScorerSpec
from evalkit.errors import ConfigError

RUBRIC = "Rate the answer.\nQuestion: {{ input }}\nReference: {{ target }}\nAnswer: {{ output }}"


def _scorer(**kw) -> ScorerSpec:
    return ScorerSpec(**{"kind": "llm_judge", "name": "judge", "rubric": RUBRIC, **kw})


# ------------------------------------------------------------------------------------------
# verdicts
# ------------------------------------------------------------------------------------------
def test_a_verdict_is_the_last_json_object_of_the_reply_and_matches_the_schema():
    schema = J.verdict_schema(_scorer())
    assert J.read_verdict('Sure. {"score": 4, "reason": "close"}', schema) == ({"score": 4, "reason": "close"}, None)
    assert J.read_verdict('```json\n{"score": 2}\n```', schema) == ({"score": 2}, None)
    # several {…} groups (issue 45 item 1): the last one is the verdict, whatever stands before it
    assert J.read_verdict('{not json} {"score": 9} then {"score": 2}', schema) == ({"score": 2}, None)
    verdict, why = J.read_verdict('{"score": 2} then {not json}', schema)
    assert verdict is None and why.startswith("not JSON")
    for garbage in ("", "   ", "I would give it a four.", '{"score": "4"}', '{"score": 0}', '["score", 4]', '{"grade": 4}'):
        verdict, why = J.read_verdict(garbage, schema)
        assert verdict is None and why, garbage
    assert "schema" in J.read_verdict('{"score": 6}', schema)[1]
    # the reply is read up to a bound: a verdict past it does not count
    assert J.read_verdict(" " * J.MAX_VERDICT_CHARS + '{"score": 3}', schema)[0] is None


@pytest.mark.parametrize("reply", ['{"score": 4, "extra": NaN}', '{"score": 4, "reason": "r", "x": [Infinity]}',
                                   '{"score": 4, "x": -Infinity}', '{"score": 4, "x": 1e400}'])
def test_a_verdict_with_a_value_json_has_not_is_invalid(reply):
    """NaN / ±Infinity (or a number that overflows to it) are not JSON (RFC 8259): kept in a
    verdict, they made predictions.jsonl and MLflow's span attributes non-JSON (``NaN``)."""
    verdict, why = J.read_verdict(reply, J.verdict_schema(_scorer()))
    assert verdict is None and "not JSON" in why, why
    record = J.judgement("j", _scorer(), None, reply)
    assert record["valid"] is False and record["text"] == reply  # the reply kept as it came
    json.dumps(record, allow_nan=False)  # the record is JSON


def test_verdict_values_per_kind():
    score = _scorer(scale_min=1, scale_max=5)
    assert [J.verdict_value(score, {"score": s}, None) for s in (1, 3, 5)] == [0.0, 0.5, 1.0]
    pf = _scorer(verdict="pass_fail")
    assert J.verdict_value(pf, {"verdict": "pass"}, None) == 1.0 and J.verdict_value(pf, {"verdict": "fail"}, None) == 0.0
    pw = _scorer(mode="pairwise")
    # the answer judged is A in model_first and B in model_second
    assert J.verdict_value(pw, {"winner": "A"}, "model_first") == 1.0 and J.verdict_value(pw, {"winner": "A"}, "model_second") == 0.0
    assert J.verdict_value(pw, {"winner": "B"}, "model_second") == 1.0 and J.verdict_value(pw, {"winner": "tie"}, "model_first") == 0.5


def test_pairwise_both_orders_cancel_a_first_position_bias():
    pw = _scorer(mode="pairwise")
    # a judge that always says "A": a win in one order, a loss in the other → 0.5, a tie
    biased = [J.judgement("j", pw, order, '{"winner": "A"}') for order in J.ORDERS]
    assert J.judge_value(biased) == 0.5
    consistent = [J.judgement("j", pw, "model_first", '{"winner": "A"}'), J.judgement("j", pw, "model_second", '{"winner": "B"}')]
    assert J.judge_value(consistent) == 1.0
    half = [J.judgement("j", pw, "model_first", '{"winner": "A"}'), J.judgement("j", pw, "model_second", '{"winner": "tie"}')]
    assert J.judge_value(half) == 0.75
    # one order invalid: the judge has no value
    assert J.judge_value([biased[0], J.judgement("j", pw, "model_second", "B wins")]) is None


def test_the_answers_change_places_between_orders():
    first = J.judge_variables({"input": "q", "target": "gold", "alt": "other"}, "mine", "alt", "model_first")
    second = J.judge_variables({"input": "q", "target": "gold", "alt": "other"}, "mine", "alt", "model_second")
    assert (first["answer_a"], first["answer_b"]) == ("mine", "other") and (second["answer_a"], second["answer_b"]) == ("other", "mine")
    assert J.judge_variables({"input": "q"}, "mine", "target", None) == {"input": "q", "output": "mine"}
    fenced = J.judge_variables({"input": "q", "alt": "other"}, "mine", "alt", "model_second", "b0")
    assert fenced["answer_b"] == fenced["output"] == "<<<ANSWER b0>>>\nmine\n<<<END ANSWER b0>>>" and "other" in fenced["answer_a"]


def test_a_panel_excludes_and_counts_invalid_verdicts():
    assert J.combine([1.0, 0.5, None], "mean") == (0.75, 1)
    assert J.combine([None, None], "mean") == (None, 2)  # none valid: the sample is a judge_error failure
    assert J.combine([1.0, 1.0, 0.0, None], "majority") == (1.0, 1)
    assert J.combine([0.0, 0.0, 1.0], "majority") == (0.0, 0)
    assert J.combine([1.0, 0.0], "majority") == (0.5, 0)  # a tie
    pf = _scorer(verdict="pass_fail", panel="majority")
    records = [J.judgement("a", pf, None, '{"verdict": "pass"}'), J.judgement("b", pf, None, "PASS!"),
               J.judgement("c", pf, None, '{"verdict": "pass"}'), J.judgement("d", pf, None, '{"verdict": "fail"}')]  # fmt: skip
    assert J.panel_score(pf, records) == (1.0, 1)
    assert records[1]["valid"] is False and records[1]["error"] == "no JSON object in the reply"
    assert J.panel_score(_scorer(name="other"), records) == (None, 0)  # another scorer's records do not count


def test_the_record_of_a_call_has_its_documented_shape():
    rec = J.judgement("gpt4o", _scorer(), None, '{"score": 5}', cached=True)
    assert rec == {"judge": "gpt4o", "scorer": "judge", "order": None, "text": '{"score": 5}', "verdict": {"score": 5},
                   "valid": True, "value": 1.0, "error": None, "cached": True}  # fmt: skip
    failed = J.judgement("gpt4o", _scorer(), None, None, error="timeout: no answer")
    assert failed["valid"] is False and failed["error"] == "timeout: no answer" and failed["text"] is None


def test_the_reference_verdict_is_the_gold_one_and_valid():
    for kw, value in (({}, 1.0), ({"verdict": "pass_fail"}, 1.0), ({"mode": "pairwise"}, 0.5)):
        scorer = _scorer(**kw)
        orders = J.ORDERS if kw.get("mode") == "pairwise" else (None,)
        records = [J.judgement("reference", scorer, o, J.reference_verdict(scorer)) for o in orders]
        assert J.panel_score(scorer, records) == (value, 0)


def test_the_response_format_carries_the_schema():
    fmt = J.response_format(_scorer())
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == J.verdict_schema(_scorer())
    assert J.response_format(_scorer(response_format="none")) is None
    assert json.dumps(J.verdict_schema(_scorer()), sort_keys=True) in J.format_line(_scorer())


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"rubric": None}, "needs a rubric"),
        ({"scale_min": 5, "scale_max": 5}, "scale_max=5 must be above scale_min=5"),
        ({"panel": "majority"}, "panel=majority combines pass/fail verdicts"),
        ({"rubric": "{{ output "}, "not a valid template"),
    ],
)
def test_judge_scorer_settings_are_checked(spec, expected):
    with pytest.raises(ValueError, match=expected):
        _scorer(**spec)
    with pytest.raises(ValueError, match="panel belongs to an llm_judge scorer"):
        ScorerSpec(kind="exact_match", panel="mean")


# ------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------
def _judged_task(conf: Path, **scorer) -> None:
    (conf / "benchmark").mkdir(parents=True, exist_ok=True)
    data = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "explain_mini.jsonl"
    spec = {"name": "judged", "kind": "task", "dataset": {"path": str(data), "fields": {"id": "id", "input": "question", "target": "reference"}},
            "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "llm_judge", "name": "quality", "rubric": RUBRIC, **scorer}]}  # fmt: skip
    (conf / "benchmark" / "judged.yaml").write_text(json.dumps(spec), encoding="utf-8")


@pytest.fixture
def judged(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    _judged_task(conf)
    (conf / "model").mkdir()
    for name in ("judge_a", "judge_b"):
        (conf / "model" / f"{name}.yaml").write_text(
            "defaults:\n  - override /backend@_global_.backend: api\n"
            f"name: {name}\nkind: litellm\nprovider_model: openai/{name}\ngeneration: {{temperature: 0.0, max_tokens: 64}}\n",
            encoding="utf-8",
        )
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(conf))

    def resolve(*overrides: str):
        from evalkit.compose import compose, resolve

        return resolve(compose(["benchmark=judged", f"run.output_root={tmp_path / 'out'}", *overrides]))

    return resolve


@pytest.mark.slow  # three compositions: ~3 s
def test_judge_is_a_model_config_and_a_panel_is_a_list(judged):
    _, cfg = judged("model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1", "judge=judge_a",
                    "judge_overrides=['backend.api_base=http://127.0.0.1:8/v1','model.generation.max_tokens=32']")  # fmt: skip
    (one,) = cfg.judge
    assert one.model.name == "judge_a" and one.backend.api_base == "http://127.0.0.1:8/v1"
    assert cfg.judge_sent_params(one) == {"temperature": 0.0, "max_tokens": 32}
    assert cfg.record()["judge"][0]["model"]["provider_model"] == "openai/judge_a"
    _, panel = judged("model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1", "judge=[judge_a,judge_b]")
    assert [j.model.name for j in panel.judge] == ["judge_a", "judge_b"]
    # model=reference gets the reference judge, recorded as what runs
    _, ref = judged("model=reference")
    assert [(j.model.name, j.model.kind) for j in ref.judge] == [("reference", "reference")]
    assert ref.record()["judge"][0]["model"]["kind"] == "reference"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["judge=nope"], "judge: model=nope: unknown model"),
        ([], "judge: judged has an llm_judge scorer; name the judge"),
        (["judge=reference"], "judge=reference: the reference judge answers the gold verdict"),
        (["judge=[judge_a,judge_a]"], "judge: judge_a is named twice"),
        (["judge_overrides=['model.generation.max_tokens=3']"], "judge_overrides: they apply to the judge named"),
        (["judge=judge_a", "judge_overrides=['model.generation.temperature=hot']"], "judge.0.model.generation.temperature"),
        pytest.param(["judge=judge_a", "run.max_cost_usd=1"], "run.max_cost_usd: model judge_a", marks=pytest.mark.slow),  # imports litellm
    ],
)
def test_judge_config_errors_are_one_line(judged, overrides, expected):
    with pytest.raises(ConfigError) as info:
        judged("model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1", "+model.pricing.input_per_mtok=1",
               "+model.pricing.output_per_mtok=1", *overrides)  # fmt: skip
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_judge_without_a_judge_scorer_is_refused():
    from evalkit.compose import compose, resolve

    with pytest.raises(ConfigError, match="arith_mini has no llm_judge scorer"):
        resolve(compose(["benchmark=arith_mini", "model=reference", "judge=reference"]))


@pytest.mark.slow  # litellm's token counter
def test_the_dry_run_counts_the_judges_calls(judged, tmp_path, capsys):
    from evalkit.job import dry_run

    common = ("model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1", "judge=judge_a", "run.dry_run=true")
    one = dry_run(judged(*common)[1])
    assert one.requests == 6 and one.judge_requests == 6 and one.judge_prompt_tokens > 6 * 10
    assert "judges (judge_a): 6 requests" in one.line
    # the qualification check's outcome (issue 45): by default the run would be refused, in its own line
    refused = [line for line in one.lines if "judge qualification" in line]
    assert refused == [next(line for line in one.lines if line.startswith(
        "evalkit: dry run: judge qualification (judge_qualification.require=headline): the run would be REFUSED: "
        "judge judge_a on judged/quality is unqualified: no qualification record under "))]  # fmt: skip
    assert "python -m evalkit.judge qualify judge=judge_a benchmark=judged labels=FILE" in refused[0] and one.exit_code == 0
    unqualified = dry_run(judged(*common, "judge_qualification.require=never")[1])
    assert ("evalkit: dry run: judge qualification (judge_qualification.require=never): the run would go on, its headline marked "
            "'judge not qualified: judge_a unqualified, judge_qualification.require=never'") in unqualified.lines
    _judged_task(tmp_path / "conf", mode="pairwise")
    both = dry_run(judged(*common, "run.max_total_tokens=100")[1])
    assert both.judge_requests == 12, "pairwise: both orders"
    assert "exceeds run.max_total_tokens=100 by the prompt tokens alone" in both.line


def test_a_verdict_schema_goes_in_the_form_the_judge_takes():
    """OpenAI's structured outputs for most models; llama.cpp's server (the embedded SmolLM2:
    model.response_format=json_object) refuses json_schema and takes the schema in json_object."""
    from evalkit.providers import structured_output

    fmt = J.response_format(_scorer())
    params = {"temperature": 0.0, "response_format": fmt}
    assert structured_output(params, None) == params and structured_output(params, "json_schema") == params
    assert structured_output(params, "json_object") == {"temperature": 0.0, "response_format": {"type": "json_object", "schema": J.verdict_schema(_scorer())}}
    assert structured_output({"temperature": 0.0}, "json_object") == {"temperature": 0.0}
