"""A team's tracking server, the rules behind the journeys of tests/journeys/test_team_server.py
(issue 47), in-process: a refusal's one line (server, user, permission; never a password), the
write probe, MLflow's version check asked again after one slow answer, a job whose tracking
failed (its MLflow run ended, the sweep's line), and where a re-judge is logged and how it is
named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.tracking.permissions import PROBE_TAG, PermissionRefused, prove_write, refusal, server_of, user_of


def _mlflow_error(code: str) -> Exception:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import ErrorCode

    try:
        try:
            raise MlflowException("API request failed", error_code=ErrorCode.Value(code))
        except MlflowException:
            raise RuntimeError("wrapped")  # noqa: B904 - raised inside the except, as MLflow's client does
    except RuntimeError as exc:
        return exc


def test_a_refusal_names_the_server_the_user_and_the_permission_never_the_password(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    uri = "https://bob:pw-in-url-3141@mlflow.team:5000/"
    assert server_of(uri) == "https://mlflow.team:5000" and user_of(uri) == "user 'bob'"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "carol")
    assert user_of(uri) == "user 'carol'"
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-1")
    assert user_of("http://h:1") == "the holder of MLFLOW_TRACKING_TOKEN"

    denied = refusal(_mlflow_error("PERMISSION_DENIED"), uri, "writing a tag on it", "EDIT", "team")
    assert isinstance(denied, PermissionRefused) and denied.exit_code == 2
    assert str(denied) == ("tracking: the MLflow server https://mlflow.team:5000 refused user 'bob' the EDIT permission on experiment "
                           "'team' (403 when writing a tag on it); ask its owner or an admin for EDIT, or choose another "
                           "tracking.experiment — nothing was started")  # fmt: skip
    wrong = refusal(_mlflow_error("UNAUTHENTICATED"), uri, "reading the experiment", "READ", "team")
    assert "did not accept the credentials of user 'bob' (401 when reading the experiment" in str(wrong)
    assert "pw-in-url-3141" not in str(denied) + str(wrong)
    assert refusal(_mlflow_error("RESOURCE_DOES_NOT_EXIST"), uri, "x", "READ", "team") is None
    assert refusal(ConnectionError("refused"), uri, "x", "READ", "team") is None


class _Client:
    """An MlflowClient's experiment-tag calls, recorded; ``refuse``: the error each raises."""

    def __init__(self, refuse: Exception | None = None):
        self.calls: list[tuple] = []
        self.refuse = refuse

    def set_experiment_tag(self, exp_id, key, value):
        self.calls.append(("set", exp_id, key))
        if self.refuse:
            raise self.refuse

    def delete_experiment_tag(self, exp_id, key):
        self.calls.append(("delete", exp_id, key))


def test_the_write_probe_sets_and_deletes_one_tag_of_its_own_and_a_refusal_is_one_line(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "reader")
    ok = _Client()
    prove_write(ok, "http://h:5000", "7", "team")
    (set_, delete) = ok.calls
    assert set_[0] == "set" and delete == ("delete", "7", set_[2]) and set_[2].startswith(f"{PROBE_TAG}.")
    other = _Client()
    prove_write(other, "http://h:5000", "7", "team")
    assert other.calls[0][2] != set_[2], "two checks at once never remove each other's tag"
    with pytest.raises(PermissionRefused, match=r"refused user 'reader' the EDIT permission on experiment 'team' \(403 when writing"):
        prove_write(_Client(_mlflow_error("PERMISSION_DENIED")), "http://h:5000", "7", "team")
    with pytest.raises(ConnectionError):  # not a refusal: the caller tells unreachable apart
        prove_write(_Client(ConnectionError("down")), "http://h:5000", "7", "team")


def test_a_failed_version_check_is_asked_again_and_never_cached(monkeypatch):
    """MLflow's ``_get_server_version`` (3 s, no retry) fails against a closed port; wrapped,
    the failure is asked again under evalkit's bounds (here: answered) and the answer kept."""
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.utils.rest_utils import MlflowHostCreds
    from packaging.version import Version

    from evalkit.tracking import store

    store.patient_version_check()
    store.patient_version_check()  # once per process: wrapping twice changes nothing
    asked: list[str] = []
    monkeypatch.setattr(store, "_ask_version", lambda creds: asked.append(creds.host) or Version("3.17.2"))
    creds = MlflowHostCreds("http://127.0.0.1:9/never-answers-47")
    assert RestStore._get_server_version(creds) == Version("3.17.2") and asked == [creds.host]
    assert RestStore._get_server_version(creds) == Version("3.17.2") and len(asked) == 1, "an answer is kept"
    monkeypatch.setattr(store, "_ask_version", lambda creds: asked.append(creds.host) and None)
    other = MlflowHostCreds("http://127.0.0.1:9/never-answers-47-b")
    assert RestStore._get_server_version(other) is None and RestStore._get_server_version(other) is None
    assert asked.count(other.host) == 2, "a failure is not cached: the next call asks again"


@pytest.mark.slow  # a run and two loggings to a SQLite store: ~10-40 s on a loaded host
def test_a_run_whose_tracking_failed_ends_its_mlflow_run_and_says_so(tmp_path, monkeypatch):
    """The traces fail after the MLflow run was created: the run is ended FAILED (never left
    RUNNING), the result carries the retry line, and ``evalkit.track`` later ends it FINISHED."""
    from mlflow.tracking import MlflowClient

    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated
    from evalkit.track import main as track
    from evalkit.tracking.mlflow_tracking import MlflowObserver

    def broken(*args, **kwargs):
        raise NotImplementedError("log_spans is not supported: could not identify MLflow server version")

    monkeypatch.setattr(MlflowObserver, "_log_traces", broken)
    root = tmp_path / "out"
    result = run_validated(resolve(compose(["benchmark=arith_mini", "model=reference", "run.limit=2", "run.progress=false",
                                            f"run.output_root={root}"]))[1])  # fmt: skip
    assert result.exit_code == 0 and result.tracking_failure is not None
    assert "MLflow logging failed (NotImplementedError: log_spans is not supported" in result.tracking_failure
    assert f"python -m evalkit.track --tracking-uri sqlite:///{root / 'mlflow.db'} {result.run_dir}" in result.tracking_failure
    rid = json.loads((result.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    uri = f"sqlite:///{root / 'mlflow.db'}"
    assert MlflowClient(uri).get_run(rid).info.status == "FAILED"
    monkeypatch.undo()
    assert track([str(result.run_dir), "--tracking-uri", uri]) == 0
    assert MlflowClient(uri).get_run(rid).info.status == "FINISHED"


def test_a_sweep_job_whose_tracking_failed_is_not_complete_and_the_last_line_says_what_was_tracked(tmp_path):
    from types import SimpleNamespace

    from evalkit.summary import Summary
    from evalkit.sweep import UNTRACKED, _record_result, sweep_outcome_line

    typed = Summary.model_validate({"status": "complete", "benchmark": "b", "model": "m", "n_samples": 2, "n_scored": 2,
                                    "n_failed": 0, "headline": "accuracy", "headline_value": 1.0, "metrics": {"accuracy": 1.0}})  # fmt: skip
    line = "evalkit: warning: tracking: MLflow logging failed (the server http://h:1 cannot be reached); the run's results are in /r/0"
    record: dict = {"error": None}
    _record_result(record, SimpleNamespace(typed=typed, run_dir=Path("/r/0"), exit_code=0, tracking_failure=line))
    assert record["status"] == UNTRACKED and record["exit_code"] == 0
    assert record["error"] == record["tracking_error"] == line.removeprefix("evalkit: warning: tracking: ")
    jobs = [{"status": UNTRACKED, "run_dir": "/r/0"}, {"status": "complete", "run_dir": "/r/1"}, {"status": "error", "run_dir": None}]
    summary = {"sweep_id": "s1", "n_jobs": 3, "jobs": jobs, "tracking_uri": "http://h:1"}
    assert sweep_outcome_line(summary, 2, Path("/r/sweep_summary.json")) == (
        "evalkit: sweep s1: 1 of 3 jobs failed; 1 ran to the end but NOT TRACKED in MLflow "
        "(log them with: python -m evalkit.track --tracking-uri http://h:1 /r/0) → /r/sweep_summary.json")  # fmt: skip
    alone = {"sweep_id": "s1", "n_jobs": 2, "jobs": jobs[:1] * 2, "tracking_uri": None}
    assert sweep_outcome_line(alone, 2, Path("/x")) == ("evalkit: sweep s1: 2 of 2 jobs ran to the end but NOT TRACKED in MLflow "
                                                        "(each job's line above names the command that logs it) → /x")  # fmt: skip


def _judged_run(tmp_path: Path, tracking_uri: str, experiment: str = "team-exp") -> Path:
    run = tmp_path / "outputs" / "runs" / "task" / "gpt-x" / "20260101-000000"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "complete", "benchmark": "task", "model": "gpt-x"}))
    (run / "tracking.json").write_text(json.dumps({"mlflow_run_id": "abc123", "tracking_uri": tracking_uri, "experiment_id": "4"}))
    return run


def test_a_rejudge_logs_to_the_judged_runs_experiment_and_store_when_a_run_may_name_it(tmp_path, monkeypatch):
    from evalkit.judge import judged_tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    recorded = {"tracking": {"experiment": "team-exp", "tracking_uri": None}}
    own = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"  # the run's own output root
    run = _judged_run(tmp_path, own)
    assert judged_tracking(run, recorded, ["judge=j"]) == ({"experiment": "team-exp", "tracking_uri": own}, None)
    assert judged_tracking(run, recorded, ["judge=j", "tracking.experiment=mine"]) == ({"tracking_uri": own}, None)
    assert judged_tracking(run, recorded, ["judge=j", "tracking=none"]) == ({}, None)

    server = "http://alice:secret-pw-2718@mlflow.team:5000"
    run = _judged_run(tmp_path / "b", server)
    chosen, note = judged_tracking(run, recorded, ["judge=j"])
    assert chosen == {"experiment": "team-exp"} and "secret-pw-2718" not in note
    assert note.startswith(f"evalkit: note: {run} was logged to http://mlflow.team:5000, which a run directory cannot choose")
    assert note.endswith("add tracking.tracking_uri=http://mlflow.team:5000 (or set MLFLOW_TRACKING_URI) to log it beside the judged run")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)  # the user's own server: the run may name it
    assert judged_tracking(run, recorded, ["judge=j"]) == ({"experiment": "team-exp", "tracking_uri": server}, None)
    assert judged_tracking(run, recorded, ["judge=j", f"tracking.tracking_uri={own}"]) == ({"experiment": "team-exp"}, None)


def test_a_rejudge_is_named_by_the_original_model_and_its_judges_and_tagged_with_the_judged_run(tmp_path):
    from evalkit.summary import Summary
    from evalkit.tracking.mlflow_tracking import rejudge_tags

    uri = "http://mlflow.team:5000"
    run = _judged_run(tmp_path, uri)
    summary = Summary.model_validate({"status": "complete", "benchmark": "task", "model": "replay", "n_samples": 1, "n_scored": 1,
                                      "n_failed": 0, "replayed_run": str(run),
                                      "instrument": {"judge": {"judges": [{"name": "judge_b"}, {"name": "judge_c"}]}}})  # fmt: skip
    assert rejudge_tags(summary, uri) == {
        "evalkit.answers_source": "replay", "evalkit.judged_run_dir": str(run), "model": "gpt-x",
        "mlflow.runName": "task-gpt-x-judged-by-judge_b+judge_c", "evalkit.judged_run_id": "abc123"}  # fmt: skip
    assert "evalkit.judged_run_id" not in rejudge_tags(summary, "http://another:5000"), "an id of another store means nothing here"
    (run / "summary.json").unlink()
    assert rejudge_tags(summary, uri) == {"evalkit.answers_source": "replay", "evalkit.judged_run_dir": str(run)}
    assert rejudge_tags(Summary.model_validate({**summary.record(), "replayed_run": None}), uri) == {}
