"""MLflow records, replay of recorded outputs, secret hygiene, and the run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalkit.engine.journal import read_jsonl


@pytest.mark.slow
def test_mlflow_run_has_tags_params_metrics_and_artifacts(run_eval, tmp_path):
    from mlflow.tracking import MlflowClient

    root = tmp_path / "out"
    res = run_eval(["model=reference", "tracking=mlflow", "benchmark.subsets=[normal_atom_bool,special_irrelevant]", "run.limit=60"], output_root=root)
    client = MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}")
    run_id = json.loads((res.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    run = client.get_run(run_id)
    tags = run.data.tags
    assert tags["status"] == "complete"
    assert tags["benchmark"] == "acebench" and tags["model"] == "reference"
    assert tags["data_fingerprint"] == res.summary["data_fingerprint"] and len(tags["data_fingerprint"]) == 64
    assert tags["prompt_hash"] == res.summary["prompt_hash"]
    assert "user_model" not in tags and res.summary["user_model"] is None  # no user simulator: no tag (was "None")
    assert tags["code_version"].startswith("0.1.0+")
    assert run.data.metrics["accuracy/normal_atom_bool"] == 1.0
    assert run.data.metrics["accuracy/special_irrelevant"] == 1.0
    assert run.data.metrics["n_samples"] == 60
    assert run.data.params["benchmark.name"] == "acebench"
    assert run.data.params["model.name"] == "reference"
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "predictions.jsonl", "failed.jsonl", "summary.json", "report.md"} <= artifacts
    assert run.info.status == "FINISHED"


def test_replay_rescoring_recorded_outputs_and_missing_ones_fail(run_eval, tmp_path):
    first = run_eval(["model=reference", "benchmark.subsets=[normal_atom_enum]", "run.limit=6"])
    recorded = list(read_jsonl(first.run_dir / "predictions.jsonl"))
    replay_file = tmp_path / "outputs.jsonl"
    rows = [{"sample_id": r["sample_id"], "output": r["output"]} for r in recorded[:4]]
    rows[0]["output"] = "Sure! " + rows[0]["output"]  # prose around the call list: wrong format upstream
    replay_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = run_eval(["model=replay", f"model.path={replay_file}", "benchmark.subsets=[normal_atom_enum]", "run.limit=6"])
    preds = {p["sample_id"]: p for p in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert preds[rows[0]["sample_id"]]["scores"]["accuracy"] == 0.0
    assert preds[rows[0]["sample_id"]]["status"] == "format_error"
    assert all(preds[r["sample_id"]]["scores"]["accuracy"] == 1.0 for r in rows[1:])
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert sorted((f["sample_id"], f["error_kind"]) for f in failed) == sorted(
        (r["sample_id"], "missing_output") for r in recorded[4:]
    )
    assert res.summary["status"] == "incomplete" and res.exit_code == 1
    assert res.summary["partial_metrics"]["partial_accuracy/normal_atom_enum"] == pytest.approx(3 / 4)


def _run_with_key(fake_openai, run_eval, tmp_path, monkeypatch, secret: str, content: str, *extra: str):
    """A 2-sample tracked run whose API key is ``secret`` and whose model answers ``content``;
    returns (result, output root) once the run is complete."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", secret)
    fake_openai.set_plan({"default": {"content": content}})
    root = tmp_path / "out"
    res = run_eval(
        ["model=openai_compatible", "model.provider_model=openai/fake", "+model.api_key_env=EVALKIT_TEST_KEY", *extra,
         f"backend.api_base={fake_openai.api_base}", "tracking=mlflow", "benchmark.subsets=[normal_atom_bool]", "run.limit=2"],
        output_root=root,
    )  # fmt: skip
    assert res.summary["status"] == "complete"
    return res, root


@pytest.mark.slow
def test_secret_key_never_written(fake_openai, ray_address, run_eval, tmp_path, monkeypatch):
    secret = "sk-evalkit-test-SECRET-0123456789"
    res, root = _run_with_key(fake_openai, run_eval, tmp_path, monkeypatch, secret, "[]")
    leaked = [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    cfg = yaml.safe_load((res.run_dir / "config.yaml").read_text())
    assert cfg["model"]["api_key_env"] == "EVALKIT_TEST_KEY"


@pytest.mark.slow
def test_secret_key_never_reaches_mlflow_traces(fake_openai, ray_address, run_eval, tmp_path, monkeypatch):
    """A model that repeats the API key: the journal, the artifacts and mlflow.db (runs,
    traces, assessments) hold ``***`` in its place. (The response cache is off here: it keeps
    the provider's answers as they came.)"""
    import mlflow

    secret = "sk-evalkit-trace-SECRET-5647382910"
    res, root = _run_with_key(fake_openai, run_eval, tmp_path, monkeypatch, secret, f"[] echoing {secret}", "run.cache=false")
    leaked = [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    mlflow.set_tracking_uri(f"sqlite:///{root.resolve() / 'mlflow.db'}")
    run_id = json.loads((res.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    traces = mlflow.search_traces(run_id=run_id, locations=[mlflow.get_run(run_id).info.experiment_id], return_type="list")
    assert len(traces) == 2 and all(t.info.response_preview == "[] echoing ***" for t in traces)
    assert not [t for t in traces if secret in t.to_json()]


@pytest.mark.slow
def test_cli_override_key_is_redacted(fake_openai, ray_address, run_eval, tmp_path):
    secret = "sk-evalkit-cli-SECRET-9876543210"
    fake_openai.set_plan({"default": {"content": "[]"}})
    root = tmp_path / "out"
    res = run_eval(
        ["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_key={secret}",
         f"backend.api_base={fake_openai.api_base}", "tracking=mlflow", "benchmark.subsets=[normal_atom_bool]", "run.limit=1"],
        output_root=root,
    )  # fmt: skip
    cfg = yaml.safe_load((res.run_dir / "config.yaml").read_text())
    assert cfg["backend"]["api_key"] == "***"
    leaked = [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []


def test_run_directory_layout(run_eval):
    res = run_eval(["model=reference", "benchmark.subsets=[special_incomplete]", "run.limit=3"])
    parts = res.run_dir.parts
    assert parts[-4:-1] == ("runs", "acebench", "reference")
    stamp, pid = parts[-1].rsplit("-", 1)
    assert len(stamp) == len("20260101-120000") and pid.isdigit()
    assert {p.name for p in res.run_dir.iterdir()} >= {"config.yaml", "predictions.jsonl", "failed.jsonl", "summary.json", "report.md"}
    report = (res.run_dir / "report.md").read_text()
    assert "special_incomplete" in report and "Status: complete" in report


def test_redaction_keeps_token_counts_and_blanks_keys():
    from evalkit.secrets import redact_config

    cfg = {"generation": {"max_tokens": 256}, "backend": {"api_key": "abc", "hf_token": "x"}, "model": {"api_key_env": "K"}}
    assert redact_config(cfg) == {
        "generation": {"max_tokens": 256},
        "backend": {"api_key": "***", "hf_token": "***"},
        "model": {"api_key_env": "K"},
    }


def test_rescore_reproduces_recorded_scores_offline(run_eval):
    from evalkit.rescore import main, rescore

    res = run_eval(["model=reference", "benchmark.subsets=[normal_multi_turn_user_adjust,special_error_param]", "run.limit=30"])
    out = rescore(res.run_dir)
    assert out["changed"] == []
    assert out["metrics"] == res.summary["metrics"]
    assert main([str(res.run_dir)]) == 0
    # a tampered journal is detected
    preds = res.run_dir / "predictions.jsonl"
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    rows[0]["output"] = "[]"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert rescore(res.run_dir)["changed"] == [rows[0]["sample_id"]]
    assert main([str(res.run_dir)]) == 1


def test_password_inside_api_base_is_refused_unechoed_and_not_written(tmp_path, run_eval):
    """Credentials in backend.api_base can never work (the client sends the key as an
    Authorization header too): one config line that does not echo the password, nothing
    written."""
    from evalkit.errors import ConfigError

    secret = "pw-evalkit-SECRET-42424242"
    root = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        run_eval(
            ["model=openai_compatible", "model.provider_model=openai/x", f"backend.api_base=http://user:{secret}@127.0.0.1:9/v1",
             "backend.max_retries=0", "run.sample_ids=[en/normal_atom_bool_0]"],  # fmt: skip
            output_root=root,
        )
    assert str(info.value) == "backend.api_base: credentials go in the model's api_key_env, not in backend.api_base"
    assert not root.exists()
