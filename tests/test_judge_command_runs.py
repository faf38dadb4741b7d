"""``python -m evalkit.judge RUN judge=<model>`` through whole runs (issue 24, item 3), the
judges on the fake OpenAI-compatible server: a finished run's answers are judged again by
another judge without the model under test being asked (the server's log), in a new run
directory linked to RUN; a judge's garbage verdict is a ``judge_error`` that a second call
resumes, asking that judge only; the judged run's traces carry the judge's spans and its
verdicts as LLM_JUDGE assessments (MLflow on SQLite); a panel's agreement is in the summary."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from evalkit.engine.journal import read_jsonl
from evalkit.judge import main
from tests.support.judge_conf import judge_config_dir

pytestmark = pytest.mark.slow  # Ray, the fake server and MLflow through whole runs

ROWS = [{"id": f"q{i}", "question": f"Question number {i}?", "reference": f"Reference {i}."} for i in range(1, 7)]
SCORER = {"kind": "llm_judge", "name": "quality", "rubric": "JUDGE {{ id }} A={{ output }}"}


@pytest.fixture
def task_run(tmp_path, monkeypatch, fake_openai, ray_address):
    """``run(scorer, *overrides)``: a task of ROWS scored by ``scorer`` (in a config directory of the
    test's, with the judge configs judge_a, judge_b, judge_c on the fake server), the model under
    test on the fake server too, run in this process → RunResult."""
    conf, data = judge_config_dir(tmp_path, ROWS)
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(conf))

    def run(scorer: dict, *overrides: str):
        from evalkit.compose import compose, resolve
        from evalkit.job import run_validated

        spec = {"name": "judged", "kind": "task", "prompt": {"template": "ASK {{ id }}: {{ input }}"},
                "dataset": {"path": str(data), "fields": {"id": "id", "input": "question", "target": "reference"}},
                "scorers": [scorer], "generation": {"temperature": 0.0, "max_tokens": 32}}  # fmt: skip
        (conf / "benchmark" / "judged.yaml").write_text(json.dumps(spec), encoding="utf-8")

        _, cfg = resolve(compose(["benchmark=judged", "model=openai_compatible", "model.provider_model=openai/fake",
                                  f"backend.api_base={fake_openai.api_base}", f"judge_overrides=['backend.api_base={fake_openai.api_base}']",
                                  f"run.output_root={tmp_path / 'out'}", "tracking=none", "run.progress=false", "judge_qualification.require=never",
                                  *overrides]))  # fmt: skip
        return run_validated(cfg)

    return run


def _asked(fake_openai, model: str) -> list[str]:
    return sorted(r["last"] for r in fake_openai.log if r["model"] == model)


def test_a_finished_run_is_judged_again_without_asking_its_model_and_resumed(task_run, fake_openai, tmp_path, capsys):
    import mlflow
    from mlflow.entities import AssessmentSourceType

    fake_openai.set_plan({"default": {"content": "An answer."}, "rules": [{"match": "JUDGE", "content": '{"score": 5}'}]})
    first = task_run(SCORER, "judge=judge_a")
    assert first.summary["status"] == "complete" and first.summary["metrics"]["quality"] == 1.0
    run = first.run_dir

    # judge_b rates every answer 2 of 5, but answers q3 with prose: a judge_error
    fake_openai.set_plan({"default": {"content": "An answer."},
                          "rules": [{"match": "JUDGE q3", "content": "Fine, I would say 4."}, {"match": "JUDGE", "content": '{"score": 2}'}]})  # fmt: skip
    judge_args = [str(run), "judge=judge_b", f"judge_overrides=['backend.api_base={fake_openai.api_base}']", "run.progress=false",
                  "tracking=mlflow", f"run.output_root={tmp_path / 'judged'}", "judge_qualification.require=never"]  # fmt: skip
    assert main(judge_args) == 1
    assert _asked(fake_openai, "fake") == [], "the model under test is never asked"
    unfenced = [re.sub(r"<<<ANSWER [0-9a-f]{16}>>>\n|\n<<<END ANSWER [0-9a-f]{16}>>>", "", q) for q in _asked(fake_openai, "judge_b")]
    assert [q.split("\n")[0] for q in unfenced] == [f"JUDGE q{i} A=An answer." for i in range(1, 7)]
    judged = run.parent / f"{run.name}.judged-judge_b"
    out = capsys.readouterr()
    assert "INCOMPLETE" in out.out and str(judged) in out.err
    recorded = yaml.safe_load((judged / "config.yaml").read_text())
    assert recorded["model"]["kind"] == "replay" and recorded["model"]["path"] == str(run)
    assert recorded["run"]["output_root"] == str(tmp_path / "judged"), "no place named by RUN is used"
    assert [j["model"]["name"] for j in recorded["judge"]] == ["judge_b"]
    (failure,) = read_jsonl(judged / "failed.jsonl")
    assert failure["sample_id"] == "q3" and failure["error_kind"] == "judge_error" and failure["actor"] == "judge"
    assert {r["scores"]["quality"] for r in read_jsonl(judged / "predictions.jsonl")} == {0.25}  # (2 - 1) / (5 - 1)
    assert sorted(r["sample_id"] for r in read_jsonl(run / "predictions.jsonl")) == [f"q{i}" for i in range(1, 7)], "RUN is untouched"

    # called again: the same directory resumed, judge_b asked about q3 only
    fake_openai.set_plan({"default": {"content": "An answer."}, "rules": [{"match": "JUDGE", "content": '{"score": 4, "reason": "close"}'}]})
    assert main(judge_args) == 0
    # run unqualified by choice (judge_qualification.require=never): its headline says so where it is printed
    assert "(n=6) — judge not qualified: judge_b unqualified, judge_qualification.require=never; " in capsys.readouterr().out
    assert _asked(fake_openai, "fake") == [] and [q.split()[1] for q in _asked(fake_openai, "judge_b")] == ["q3"]
    summary = json.loads((judged / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["replayed_run"] == str(run)
    assert summary["metrics"]["quality"] == pytest.approx((5 * 0.25 + 0.75) / 6)

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'judged' / 'mlflow.db'}")
    run_id = json.loads((judged / "tracking.json").read_text())["mlflow_run_id"]
    traces = mlflow.search_traces(locations=[mlflow.get_run(run_id).info.experiment_id], run_id=run_id, return_type="list", max_results=None)
    assert len(traces) == 6
    for trace in traces:
        spans = [s for s in trace.data.spans if s.get_attribute("evalkit.actor") == "judge"]
        (verdict,) = [a for a in trace.info.assessments if a.source.source_type == AssessmentSourceType.LLM_JUDGE]
        assert [s.name for s in spans] == ["judge judge_b: quality"] and verdict.source.source_id == "judge_b"
        assert verdict.span_id == spans[0].span_id and verdict.value in (0.25, 0.75)


def test_a_panel_reports_the_agreement_of_its_judges(task_run, fake_openai):
    """judge_a and judge_b pass/fail-agree on q1, q2, q4, q6 and disagree on q3, q5; judge_c
    says pass everywhere. Cohen's κ of a and b by hand: p_o = 4/6; a passes 3 of 6 (q1, q2, q3),
    b 3 of 6 (q1, q2, q5): p_e = 1/2, κ = (2/3 − 1/2) / (1/2) = 1/3. Of a and c: p_o = 1/2 and
    p_e = 1/2 · 1 = 1/2: κ = 0 (c's verdicts carry no information about a's)."""
    a = {"q1": "pass", "q2": "pass", "q3": "pass", "q4": "fail", "q5": "fail", "q6": "fail"}
    b = {**a, "q3": "fail", "q5": "pass"}
    rules = [{"match": f"JUDGE {q} ", "model": m, "content": json.dumps({"verdict": v})} for m, d in (("judge_a", a), ("judge_b", b)) for q, v in d.items()]
    rules.append({"match": "JUDGE", "model": "judge_c", "content": '{"verdict": "pass"}'})
    fake_openai.set_plan({"default": {"content": "An answer."}, "rules": rules})
    res = task_run({**SCORER, "verdict": "pass_fail"}, "judge=[judge_a,judge_b,judge_c]")
    assert res.summary["status"] == "complete"
    agreement = res.summary["judge_agreement"]["quality"]
    pairs = {tuple(p["judges"]): p for p in agreement["pairs"]}
    assert pairs[("judge_a", "judge_b")]["value"] == pytest.approx(1 / 3, abs=1e-6) and pairs[("judge_a", "judge_b")]["n_items"] == 6
    assert pairs[("judge_a", "judge_c")]["value"] == pytest.approx(0.0, abs=1e-9)
    assert agreement["panel"]["method"] == "krippendorff_alpha_nominal"
    assert "## Agreement between judges" in (res.run_dir / "report.md").read_text()
