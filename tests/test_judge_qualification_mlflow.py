"""Judge qualification and MLflow (issue 45 items 2-3): people's labels read from MLflow's HUMAN
feedback on traces (never another source's), the store's replies checked and bounded, and the
qualification record logged as an MLflow run — quick checks in-process, then one real ``mlflow
server`` (slow) where labels are logged with ``mlflow.log_feedback`` as a labelling session does."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evalkit.tracking import labels as L


# ------------------------------------------------------------------------------------------
# a store's replies, read as untrusted (no store)
# ------------------------------------------------------------------------------------------
def _feedback(value, source="HUMAN", name="quality", when=1, valid=True, error=None):
    return SimpleNamespace(name=name, source=SimpleNamespace(source_type=source), valid=valid, last_update_time_ms=when,
                           create_time_ms=when, feedback=SimpleNamespace(value=value, error=error))  # fmt: skip


def _trace(response, *assessments, sample_id="q1"):
    return SimpleNamespace(info=SimpleNamespace(trace_id="tr-1", tags={"sample_id": sample_id}, assessments=list(assessments)),
                           data=SimpleNamespace(response=response))  # fmt: skip


def test_only_the_latest_valid_human_feedback_of_the_scorers_name_is_a_label():
    trace = _trace('"an answer"', _feedback(5, source="LLM_JUDGE", when=9), _feedback(4, source="CODE", when=9),
                   _feedback(2, when=1), _feedback(3, when=5), _feedback(1, when=7, valid=False),
                   _feedback(4, name="other", when=8), _feedback(None, when=8, error="timeout"))  # fmt: skip
    assert L._human_label(trace, "quality") == (3, 5)
    assert L._human_label(_trace('"a"', _feedback(5, source="LLM_JUDGE")), "quality") is None
    assert L._human_label(_trace('"a"', _feedback(4.0)), "quality") == (4, 1), "an integral float is the integer"
    assert L._human_label(_trace('"a"', _feedback({"x": 1})), "quality") is None, "a value of no label's type"
    assert L._human_label(_trace('"a"', _feedback("p" * 500)), "quality")[0] == "p" * L.MAX_LABEL_CHARS
    assert L._human_label(SimpleNamespace(info=None), "quality") is None


@pytest.mark.parametrize("response, answer", [
    ('"plain text"', "plain text"),
    ('{"output": "from a field"}', "from a field"),
    ('{"answer": "a", "output": "b"}', None),  # two candidates: which one was labelled is unknown
    ('{"tokens": 3}', None),
    ("not json at all", "not json at all"),
    (None, None),
    (json.dumps("cut… [12 more characters]"), False),  # evalkit cut it for display: not the answer labelled
    (json.dumps("x" * (L.MAX_ANSWER_CHARS + 1)), False),
])  # fmt: skip
def test_the_answer_is_the_traces_response_as_the_labeller_saw_it(response, answer):
    assert L._answer(_trace(response)) == answer


def test_the_qualification_runs_metrics_and_params_come_from_the_record():
    record = {"judge": "j", "benchmark": "t", "scorer": "quality", "protocol": 2, "qualified": False,
              "digests": {"judge": "sha256:j", "rubric": "sha256:r", "labels": "sha256:l", "battery": "sha256:b"},
              "floors": {"min_kappa": 0.6, "max_steer_rate": 0.1, "max_age_days": 90.0}, "labels": {"path": "mlflow:1", "n": 24, "n_known_wrong": 16},
              "agreement": {"cohen_kappa": {"value": 0.5, "ci": {"low": 0.2, "high": 0.8}}, "krippendorff_alpha": {"value": 0.49, "ci": None},
                            "percent_agreement": {"value": 0.75, "ci": {"low": 0.6, "high": 0.9}}},
              "steering": {"kinds": {"copying": {"rate": 1.0}, "instructions": {"rate": 0.0}}, "overall": {"rate": 0.2}},
              "invalid": {"n": 3}}  # fmt: skip
    metrics = L.qualification_metrics(record)
    assert metrics == {"kappa": 0.5, "kappa_ci_low": 0.2, "kappa_ci_high": 0.8, "alpha": 0.49, "percent_agreement": 0.75,
                       "percent_agreement_ci_low": 0.6, "percent_agreement_ci_high": 0.9, "steer_rate/copying": 1.0,
                       "steer_rate/instructions": 0.0, "steer_rate": 0.2, "n_labels": 24.0, "n_known_wrong": 16.0, "n_invalid": 3.0,
                       "qualified": 0.0}  # fmt: skip
    params = L.qualification_params(record)
    assert params["digest.labels"] == "sha256:l" and params["floor.min_kappa"] == "0.6" and params["labels"] == "mlflow:1"
    assert {"judge", "benchmark", "scorer", "protocol", "digest.judge", "digest.rubric", "digest.battery"} <= set(params)


def test_the_headline_note_reads_a_hostile_qualification_as_not_qualified():
    from evalkit.summary import headline_judge_note, unqualified_headline_judges

    good = {"require": "never", "headline_scorer": "quality", "judges": {"a": {"quality": {"status": "qualified"}}}}
    assert unqualified_headline_judges(good) == {} and headline_judge_note(good) == ""
    assert unqualified_headline_judges({**good, "headline_scorer": None}) == {}, "the headline is no judge's"
    odd = {**good, "judges": {"a": {"quality": {"status": "QUALIFIED"}}, "b": "x", "c": {"quality": {"status": "stale"}}}}
    assert unqualified_headline_judges(odd) == {"a": "unknown", "b": "unknown", "c": "stale"}
    assert headline_judge_note(odd) == "judge not qualified: a unknown, b unknown, c stale, judge_qualification.require=never"
    assert unqualified_headline_judges({**good, "judges": {}}) == {"?": "unknown"}, "a judged headline with no judge recorded"
    assert unqualified_headline_judges(["not", "a", "dict"]) == {}


def test_a_judged_runs_mlflow_params_and_description_say_whether_its_judges_were_qualified(tmp_path):
    from evalkit.summary import Summary
    from evalkit.tracking import curate

    qual = {"require": "never", "headline_scorer": "quality", "judges": {"obey": {"quality": {"status": "below_floor"}}}}
    summary = Summary(status="complete", benchmark="t", model="m", n_samples=6, n_scored=6, n_failed=0, n_scored_rows=6, n_failed_rows=0,
                      headline="quality", metrics={"quality": 1.0}, judge_qualification=qual)  # fmt: skip
    recorded = {"benchmark": {"name": "t"}, "model": {"name": "m"}, "judge": [{"model": {"name": "obey"}}]}
    params = curate.run_params(recorded, summary)
    assert params["judge"] == "obey" and params["judge_qualification.require"] == "never"
    assert params["judge_qualification.headline"] == "judge not qualified: obey below_floor, judge_qualification.require=never"
    assert "**Judge not qualified: obey below_floor, judge_qualification.require=never**" in curate.description(summary, tmp_path)
    fine = summary.model_copy(update={"judge_qualification": {**qual, "judges": {"obey": {"quality": {"status": "qualified"}}}}})
    assert curate.run_params(recorded, fine)["judge_qualification.headline"] == "qualified"
    assert "not qualified" not in curate.description(fine, tmp_path)
    plain = summary.model_copy(update={"judge_qualification": {}})
    assert not {k for k in curate.run_params({**recorded, "judge": []}, plain) if k.startswith("judge")}


# ------------------------------------------------------------------------------------------
# a real mlflow server (slow)
# ------------------------------------------------------------------------------------------
ROWS = [{"id": f"q{i}", "question": f"Question {i}?", "reference": f"Reference {i}."} for i in range(24)]
FLIPS = {0, 4, 8, 13}  # the person disagrees with the answer's true grade


def _grade(i: int) -> int:
    return 1 if i % 3 else 5


def _label(i: int) -> int:
    return 6 - _grade(i) if i in FLIPS else _grade(i)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A server whose experiment ``labelling`` holds, in one run, a trace per sample (its tag
    ``sample_id``, its response the answer) with a person's feedback ``quality`` (HUMAN) and an
    LLM judge's that always says 5 (LLM_JUDGE); q1's person changed their mind (2, then the
    label); q2's trace has only the LLM judge's; one more trace outside the run. Yields
    ``(server url, run id, JSONL file of the same labels)``."""
    import mlflow
    from mlflow.entities import AssessmentSource

    from tests.support.mlflow_server import mlflow_server

    work = tmp_path_factory.mktemp("labels-server")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # each trace is on the server before its feedback is logged
    with mp.context(), mlflow_server(f"sqlite:///{work / 'mlflow.db'}", work / "artifacts", work, serve_artifacts=True) as srv:
        srv.wait_ready()
        mlflow.set_tracking_uri(srv.url)
        mlflow.set_experiment("labelling")
        human, judge = AssessmentSource(source_type="HUMAN", source_id="alice"), AssessmentSource(source_type="LLM_JUDGE", source_id="gpt")
        rows = []
        with mlflow.start_run() as run:
            for i in range(24):
                answer = f"[grade={_grade(i)}] The answer to question {i}."
                with mlflow.start_span(name=f"q{i}") as span:
                    span.set_inputs({"question": f"Question {i}?"})
                    span.set_outputs(answer)
                trace_id = mlflow.get_last_active_trace_id()
                mlflow.flush_trace_async_logging()
                mlflow.set_trace_tag(trace_id, "sample_id", f"q{i}")
                mlflow.log_feedback(trace_id=trace_id, name="quality", value=5, source=judge)
                if i == 2:
                    continue
                if i == 1:
                    mlflow.log_feedback(trace_id=trace_id, name="quality", value=2, source=human)
                mlflow.log_feedback(trace_id=trace_id, name="quality", value=float(_label(i)), source=human)
                rows.append({"sample_id": f"q{i}", "answer": answer, "label": _label(i)})
        with mlflow.start_span(name="outside") as span:
            span.set_outputs("[grade=5] Outside the run.")
        outside = mlflow.get_last_active_trace_id()
        mlflow.flush_trace_async_logging()
        mlflow.set_trace_tag(outside, "sample_id", "q3")
        mlflow.log_feedback(trace_id=outside, name="quality", value=5, source=human)
        path = work / "labels.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        yield srv.url, run.info.run_id, path
    mp.undo()


@pytest.mark.slow  # an mlflow server, the fake judge server
def test_qualifying_from_human_feedback_on_a_server_reads_only_people_and_logs_the_record(labelled, tmp_path, monkeypatch, fake_openai,
                                                                                         capsys):  # fmt: skip
    from mlflow.tracking import MlflowClient

    from evalkit.benchmarks.task import qualification as Q
    from evalkit.judge import main
    from tests.support.careless_judges import careless_config_dir, judges_plan

    url, run_id, same_labels = labelled
    conf, _ = careless_config_dir(tmp_path, ROWS)
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(conf))
    common = [f"judge_overrides=['backend.api_base={fake_openai.api_base}','backend.concurrency=16']", f"run.output_root={tmp_path / 'out'}",
              "judge=honest", "benchmark=careless", "steer_items=2"]  # fmt: skip
    fake_openai.set_plan(judges_plan())

    def record(*args: str) -> dict:
        folder = Q.record_folder(tmp_path / "out" / "qualifications", "honest", "careless", "quality")
        before = set(folder.glob("*.json")) if folder.is_dir() else set()
        main(["qualify", *common, *args])
        (new,) = set(folder.glob("*.json")) - before
        return json.loads(new.read_text())

    from_mlflow = record(f"labels=mlflow:{run_id}", f"tracking.tracking_uri={url}", "tracking.experiment=qualifications")
    out = capsys.readouterr()
    from_file = record(f"labels={same_labels}", "tracking=none")
    # the people's labels only (the LLM judge's 5s would make every answer right), q1's latest, q2 unlabelled
    assert from_mlflow["labels"]["n"] == 23 and from_mlflow["digests"]["labels"] == from_file["digests"]["labels"]
    assert from_mlflow["agreement"] == from_file["agreement"] and from_mlflow["steering"]["kinds"] == from_file["steering"]["kinds"]
    source = from_mlflow["labels"]["source"]
    assert source["kind"] == "mlflow" and source["run_id"] == run_id and source["traces"] == 24 and source["labelled"] == 23
    assert f"evalkit: labels from MLflow {url} mlflow:{run_id}: 23 labelled answers of 24 traces\n" in out.err
    # the record as an MLflow run: params the digests, metrics the figures, the record as its artifact
    client = MlflowClient(url)
    exp = client.get_experiment_by_name("qualifications")
    (run,) = client.search_runs([exp.experiment_id])
    assert f"MLflow: logged as run {run.info.run_id} of experiment qualifications" in out.out
    assert run.data.tags["evalkit.kind"] == "judge_qualification" and run.info.status == "FINISHED"
    assert run.data.tags["mlflow.runName"].startswith("qualify honest on careless/quality: ")
    assert run.data.params["digest.labels"] == from_mlflow["digests"]["labels"] and run.data.params["digest.judge"] == from_mlflow["digests"]["judge"]
    assert run.data.metrics["kappa"] == pytest.approx(from_mlflow["agreement"]["cohen_kappa"]["value"])
    assert run.data.metrics["steer_rate/copying"] == from_mlflow["steering"]["kinds"]["copying"]["rate"]
    (artifact,) = client.list_artifacts(run.info.run_id, "qualification")
    logged = json.loads(open(client.download_artifacts(run.info.run_id, artifact.path, str(tmp_path)), encoding="utf-8").read())
    assert logged["digests"] == from_mlflow["digests"] and logged["agreement"] == from_mlflow["agreement"]
    # the whole experiment, by name: the trace outside the run labels another answer of q3
    whole = record("labels=mlflow:labelling", f"tracking.tracking_uri={url}", "tracking.experiment=qualifications")
    assert whole["labels"]["n"] == 24 and whole["labels"]["source"]["traces"] == 25 and whole["labels"]["source"]["run_id"] is None
    assert whole["labels"]["source"]["experiment_id"] == client.get_experiment_by_name("labelling").experiment_id
    assert len(client.search_runs([exp.experiment_id])) == 2


@pytest.mark.slow  # an mlflow server
def test_an_mlflow_source_that_is_not_there_or_holds_no_human_label_is_one_line(labelled, tmp_path, monkeypatch, fake_openai):
    from evalkit.errors import DataError
    from evalkit.qualify import parse, qualify, qualify_spec
    from tests.support.careless_judges import careless_config_dir

    url, run_id, _ = labelled
    conf, _ = careless_config_dir(tmp_path, ROWS)
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(conf))
    for source, says in ((f"mlflow:{'0' * 32}", f"no MLflow run {'0' * 32} in {url}"), ("mlflow:nope", "no MLflow run, experiment id or experiment name 'nope'"),
                         ("mlflow:", "name an MLflow run id, experiment id or experiment name")):  # fmt: skip
        own, overrides = parse(["judge=honest", "benchmark=careless", f"labels={source}", f"tracking.tracking_uri={url}",
                                f"run.output_root={tmp_path / 'out'}"])  # fmt: skip
        with pytest.raises(DataError) as info:
            qualify(own, qualify_spec(overrides))
        assert says in str(info.value) and "\n" not in str(info.value), str(info.value)
    # a scorer no person labelled: the LLM judge's feedback named "quality" is there, never taken
    spec = json.loads((conf / "benchmark" / "careless.yaml").read_text())
    spec["scorers"][0]["name"] = "helpfulness"
    (conf / "benchmark" / "careless.yaml").write_text(json.dumps(spec))
    own, overrides = parse(["judge=honest", "benchmark=careless", f"labels=mlflow:{run_id}", f"tracking.tracking_uri={url}",
                            f"run.output_root={tmp_path / 'out'}"])  # fmt: skip
    with pytest.raises(DataError, match=r"no HUMAN feedback named 'helpfulness' on a trace of a sample of careless .*\(24 traces read\)"):
        qualify(own, qualify_spec(overrides))
    assert not (tmp_path / "out" / "qualifications").exists()
