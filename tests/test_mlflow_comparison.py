"""MLflow as the comparison UI (issue 14), against real SQLite MLflow stores: one trace per
selected sample with its scores as assessments, rollouts span by span, the per-sample and
breakdown tables, the dataset, one headline, curated params, the run's own times, and
``python -m evalkit.track`` for runs logged late or not at all."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from evalkit.engine.journal import read_jsonl
from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd
from tests.support.host import time_limit

SINGLE = ["en/normal_atom_bool_0", "en/normal_atom_bool_1", "en/normal_atom_bool_2", "en/normal_atom_bool_3",
          "en/special_irrelevant_0", "en/special_irrelevant_1"]  # fmt: skip
ROLLOUTS = ["en/agent_multi_step_0", "en/agent_multi_turn_0"]


def _run(root: Path, acebench: Path, *overrides: str):
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    _, cfg = resolve(compose(base_overrides(root, acebench) + ["tracking=mlflow", *overrides]))
    return run_validated(cfg)


def _store(root: Path):
    import mlflow

    uri = f"sqlite:///{root.resolve() / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    return client, client.get_experiment_by_name("evalkit").experiment_id


def _run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "tracking.json").read_text())["mlflow_run_id"]


def _traces(root: Path, run_dir: Path) -> dict:
    """``{sample key: trace}`` of the MLflow run of ``run_dir`` (each key once)."""
    import mlflow

    _, exp = _store(root)
    traces = mlflow.search_traces(locations=[exp], run_id=_run_id(run_dir), return_type="list", max_results=None)
    keys = [t.info.tags["evalkit.key"] for t in traces]
    assert len(keys) == len(set(keys)), f"a sample has more than one trace: {sorted(keys)}"
    return {t.info.tags["evalkit.key"]: t for t in traces}


def _as_text(value) -> str:
    """A span's output as text: MLflow reads a string that is JSON back as its value."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value)


def _table(root: Path, run_id: str, name: str) -> list[dict]:
    path = root / "mlartifacts" / run_id / "artifacts" / "tables" / name
    if name.endswith(".parquet"):  # the full per-sample table (issue 46)
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    table = json.loads(path.read_text())
    return [dict(zip(table["columns"], row)) for row in table["data"]]


@pytest.fixture(scope="module")
def ace(tmp_path_factory, acebench_dir: Path):
    """A reference run (single-turn and agent samples) and a replay of its single-turn
    answers with two wrong and one missing, in one store."""
    root = tmp_path_factory.mktemp("ace") / "out"
    reference = _run(root, acebench_dir, "model=reference", f"run.sample_ids=[{','.join(SINGLE + ROLLOUTS)}]")
    rows = {r["sample_id"]: r for r in read_jsonl(reference.run_dir / "predictions.jsonl")}
    replay_file = root.parent / "replay.jsonl"
    answers = [{"sample_id": sid, "output": "[]" if i < 2 else rows[sid]["output"]} for i, sid in enumerate(SINGLE[:-1])]
    replay_file.write_text("".join(json.dumps(a) + "\n" for a in answers), encoding="utf-8")
    replay = _run(root, acebench_dir, "model=replay", f"model.path={replay_file}", f"run.sample_ids=[{','.join(SINGLE)}]")
    return root, reference, replay


@pytest.mark.slow
def test_every_selected_sample_is_one_trace_whose_assessments_are_its_scores(ace):
    root, reference, replay = ace
    assert (reference.summary["status"], replay.summary["status"]) == ("complete", "incomplete")
    for res in (reference, replay):
        traces = _traces(root, res.run_dir)
        rows = {r["sample_id"]: r for r in read_jsonl(res.run_dir / "predictions.jsonl")}
        assert set(traces) == set(rows) | set(res.summary["failed_ids"])
        assert len(traces) == res.summary["n_samples"]
        for sid, row in rows.items():
            trace = traces[sid]
            assert trace.info.state.value == "OK" and trace.info.tags["status"] == row["status"]
            assert {a.name: a.value for a in trace.info.assessments} == row["scores"]
            assert trace.info.response_preview == row["output"] and trace.data.spans[0].inputs["sample_id"] == sid
            assert _as_text(trace.data.spans[0].outputs) == _as_text(row["output"])
            assert trace.data.spans[0].inputs["messages"][-1]["role"] == "user"
    wrong = _traces(root, replay.run_dir)
    assert [wrong[s].info.assessments[0].value for s in SINGLE[:5]] == [0.0, 0.0, 1.0, 1.0, 1.0]
    failed = wrong[SINGLE[-1]]
    assert (failed.info.state.value, failed.info.tags["error_kind"], failed.info.tags["actor"]) == ("ERROR", "missing_output", "agent")
    assert failed.info.assessments == [] and failed.data.spans[0].status.status_code.value == "ERROR"
    assert failed.data.spans[0].status.description.startswith("missing_output (agent): ")


def test_run_has_one_headline_curated_params_the_dataset_and_its_own_times(ace):
    root, reference, replay = ace
    client, _ = _store(root)
    ref, rep = client.get_run(_run_id(reference.run_dir)), client.get_run(_run_id(replay.run_dir))
    assert ref.data.metrics["headline"] == reference.summary["metrics"]["overall"] == 1.0
    assert ref.data.tags["headline_name"] == rep.data.tags["headline_name"] == "overall"
    assert "headline" not in rep.data.metrics and rep.data.tags["status"] == "incomplete"
    assert rep.data.metrics["partial_overall"] == replay.summary["partial_metrics"]["partial_overall"] < 1.0
    for run, res in ((ref, reference), (rep, replay)):
        params = run.data.params
        assert len(params) <= 25 and params["generation.max_tokens"] == "1200" and params["model.id"] == res.summary["model_id"]
        assert not [k for k in params if k.startswith(("run.", "tracking.", "runner.", "layers.")) or k.endswith(("_dir", "_path"))]
        assert "None" not in params.values()
        (dataset,) = run.inputs.dataset_inputs
        assert dataset.dataset.digest == res.summary["data_fingerprint"][:36]
        assert dataset.dataset.name == "acebench en all subsets"
        assert [(t.key, t.value) for t in dataset.tags] == [("mlflow.data.context", "eval")]
        assert (run.info.end_time - run.info.start_time) / 1000 == pytest.approx(res.summary["wall_s"], abs=0.002)
    note = ref.data.tags["mlflow.note.content"]
    assert "headline `overall` = **1.0000**" in note and "n = 8 samples" in note
    experiment = client.get_experiment(ref.info.experiment_id)
    assert experiment.tags["mlflow.note.content"].startswith("evalkit evaluations.")
    assert experiment.tags["mlflow.experiment.primaryMetric.name"] == "headline"
    note = rep.data.tags["mlflow.note.content"]
    assert "INCOMPLETE" in note and "1 of 6 samples failed (missing_output: 1)" in note
    assert f"`run.resume={replay.run_dir.resolve()}`" in note


def test_per_sample_table_has_every_selected_sample(ace):
    root, _, replay = ace
    rows = _table(root, _run_id(replay.run_dir), "samples.json")
    assert [r["sample_id"] for r in rows] == SINGLE
    assert [r["accuracy"] for r in rows] == [0.0, 0.0, 1.0, 1.0, 1.0, None]
    assert rows[-1]["status"] == "failed: missing_output" and rows[0]["output"] == "[]"
    full = _table(root, _run_id(replay.run_dir), "samples.parquet")  # every sample, every score, its trace (issue 46)
    assert [(r["sample_id"], r["status"], r["accuracy"], r["output"]) for r in full] == [
        (r["sample_id"], r["status"], r["accuracy"], r["output"]) for r in rows]  # fmt: skip
    traces = _traces(root, replay.run_dir)
    assert [r["trace_id"] for r in full] == [traces[sid].info.trace_id for sid in SINGLE] and full[0]["epoch"] == 0
    subsets = _table(root, _run_id(replay.run_dir), "subsets.json")
    assert [(r["subset"], r["n_samples"], r["n_scored"], r["n_failed"]) for r in subsets] == [
        ("normal_atom_bool", 4, 4, 0), ("special_irrelevant", 2, 1, 1)
    ]  # fmt: skip


def test_agent_rollout_trace_spans_each_turn_and_environment_call_in_order(ace):
    root, reference, _ = ace
    traces = _traces(root, reference.run_dir)
    rows = {r["sample_id"]: r for r in read_jsonl(reference.run_dir / "predictions.jsonl")}
    for sid in ROLLOUTS:
        trajectory = rows[sid]["trajectory"]
        spans = sorted(traces[sid].data.spans, key=lambda s: s.start_time_ns)
        root_span, children = spans[0], spans[1:]
        assert root_span.span_type == "AGENT" and root_span.parent_id is None
        assert all(s.parent_id == root_span.span_id for s in children)
        kinds = [s.name.split(" ")[0].rstrip(":") for s in children]
        n_user_calls = sum(t["actor"] == "user" for t in trajectory["turns"])
        roles = [m["role"] for m in trajectory["messages"]]
        given = roles.count("user") - n_user_calls  # the task a rollout starts from is the request
        expected = [{"execution": "environment"}.get(r, r) for r in roles]
        for _ in range(given):
            expected.remove("user")
        assert kinds == expected and "environment" in kinds and "agent" in kinds
        calls = [t for t in trajectory["turns"]]
        model_spans = [s for s in children if not s.name.startswith("environment")]
        assert len(model_spans) == len(calls)
        for span, turn in zip(model_spans, sorted(calls, key=lambda t: t["started_at"])):
            assert span.name.startswith(turn["actor"]) and abs(span.start_time_ns / 1e9 - turn["started_at"]) < 1e-5
        env = [s for s in children if s.name.startswith("environment")]
        executed = [m for m in trajectory["messages"] if m["role"] == "execution"]
        assert [s.inputs["calls"] for s in env] == [m["calls"] for m in executed]
        assert all(a.end_time_ns <= b.start_time_ns for a, b in zip(children, children[1:]))
    assert "user" in [s.name.split(" ")[0] for s in traces["en/agent_multi_turn_0"].data.spans]


@pytest.mark.slow
def test_sobhard_run_logs_its_named_metrics_and_breakdowns_as_tables(tmp_path: Path, shared_data_dir: Path, acebench_dir: Path):
    root = tmp_path / "out"
    res = _run(root, acebench_dir, "benchmark=sobhard", "model=reference", f"benchmark.data_dir={shared_data_dir / 'sobhard'}")
    client, _ = _store(root)
    run = client.get_run(_run_id(res.run_dir))
    metrics = run.data.metrics
    assert len(metrics) <= 40
    names = ("sample_pass_rate", "balance_score", "constraint_pass_rate", "format_pass_rate", "content_pass_rate", "task_pass_rate")
    assert {k: metrics[k] for k in names} == {k: res.summary["metrics"][k] for k in names}
    assert metrics["headline"] == res.summary["metrics"]["sample_pass_rate"]
    assert not [k for k in metrics if "/" in k]
    family = {r["family"]: r for r in _table(root, run.info.run_id, "breakdown_family.json")}
    expected = {k.split("/")[2]: v for k, v in res.summary["metrics"].items() if k.startswith("sample_pass_rate/family/")}
    assert {f: r["sample_pass_rate"] for f, r in family.items()} == pytest.approx(expected, abs=1e-9) and len(expected) > 1
    cells = _table(root, run.info.run_id, "breakdown_cell.json")
    assert len(cells) == sum(k.startswith("sample_pass_rate/cell/") for k in res.summary["metrics"])
    traces = _traces(root, res.run_dir)
    assert len(traces) == res.summary["n_samples"]
    row = next(iter(read_jsonl(res.run_dir / "predictions.jsonl")))
    assert {a.name: a.value for a in traces[row["sample_id"]].info.assessments} == row["scores"]
    assert {"sample_pass", "format_pass", "content_pass", "task_pass"} <= set(row["scores"])


@pytest.mark.slow
def test_track_logs_a_run_made_without_tracking_and_twice_adds_nothing(tmp_path: Path, acebench_dir: Path):
    from evalkit.track import main

    root = tmp_path / "out"
    res = _run(root, acebench_dir, "tracking=none", "model=reference", f"run.sample_ids=[{','.join(SINGLE[:4] + ROLLOUTS[:1])}]")
    assert not (root / "mlflow.db").exists() and not (res.run_dir / "tracking.json").exists()
    store = ["--tracking-uri", f"sqlite:///{root.resolve() / 'mlflow.db'}", "--artifact-root", (root / "mlartifacts").as_uri()]
    assert main([*store, str(res.run_dir)]) == 0
    client, exp = _store(root)
    (run,) = client.search_runs([exp])
    first = _traces(root, res.run_dir)
    assert len(first) == 5 and run.data.metrics["headline"] == 1.0 and run.info.status == "FINISHED"
    assert main([*store, str(res.run_dir)]) == 0
    (again,) = client.search_runs([exp])
    assert again.info.run_id == run.info.run_id
    assert {k: t.info.trace_id for k, t in _traces(root, res.run_dir).items()} == {k: t.info.trace_id for k, t in first.items()}
    assert len(client.get_metric_history(run.info.run_id, "headline")) == 1
    assert len(_table(root, run.info.run_id, "samples.json")) == 5


@pytest.mark.slow
def test_a_failed_sample_scored_on_resume_ends_as_one_ok_trace(fake_openai, ray_address, tmp_path: Path, acebench_dir: Path):
    from tests.engine.test_engine_faults import load_gold

    ids = [f"en/normal_atom_enum_{i}" for i in range(4)]
    gold = load_gold(acebench_dir, ids)
    rules = [{"match": q, "content": a} for q, a in gold.values()]
    fake_openai.set_plan({"rules": [{**rules[1], "always_status": 400}, *rules]})
    args = ["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
            "run.cache=false", f"run.sample_ids=[{','.join(ids)}]"]  # fmt: skip
    root = tmp_path / "out"
    first = _run(root, acebench_dir, *args)
    assert first.summary["failed_ids"] == [ids[1]]
    before = _traces(root, first.run_dir)
    assert before[ids[1]].info.state.value == "ERROR" and before[ids[1]].info.tags["error_kind"] == "client_error"
    fake_openai.set_plan({"rules": rules})
    again = _run(root, acebench_dir, *args, f"run.resume={first.run_dir}")
    assert again.summary["status"] == "complete"
    after = _traces(root, first.run_dir)
    assert set(after) == set(ids) and all(t.info.state.value == "OK" for t in after.values())
    assert {a.name: a.value for a in after[ids[1]].info.assessments} == {"accuracy": 1.0}
    assert {k: after[k].info.trace_id for k in ids if k != ids[1]} == {k: before[k].info.trace_id for k in ids if k != ids[1]}
    import mlflow

    _, exp = _store(root)
    assert len(mlflow.search_traces(locations=[exp], return_type="list", max_results=None)) == 4  # the error trace is gone
    rows = _table(root, _run_id(first.run_dir), "samples.json")
    assert [(r["sample_id"], r["status"], r["accuracy"]) for r in rows] == [(sid, "ok", 1.0) for sid in ids]
    client, _ = _store(root)
    run = client.get_run(_run_id(first.run_dir))
    assert run.data.metrics["headline"] == 1.0 and run.info.status == "FINISHED"
    assert (run.info.end_time - _ms(again.summary["finished_at"])) == 0


def _ms(iso: str) -> int:
    import datetime as dt

    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


@pytest.mark.slow
def test_tracking_failure_is_one_line_naming_the_retry_and_the_exit_code_says_complete(
    fake_openai, ray_address, tmp_path: Path, acebench_dir: Path
):
    """The store is fine when the run starts; its artifact location is replaced by a file
    while the run is under way. The run still exits 0 (complete), prints one line naming
    ``python -m evalkit.track``, and that command then logs it whole."""
    fake_openai.set_plan({"default": {"content": "[]", "latency_s": 0.5}})
    root, run_dir = tmp_path / "out", tmp_path / "run"
    cmd = evalkit_cmd(*base_overrides(root, acebench_dir), "tracking=mlflow", "model=openai_compatible",
                      "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}", "backend.concurrency=1",
                      f"runner.address={ray_address}", "run.cache=false", "run.limit=4", f"run.dir={run_dir}")  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + time_limit(120)  # scaled by the host's measured slowness
        while not (run_dir / "config.yaml").exists():  # the store was checked before the directory was made
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.05)
        artifacts = root / "mlartifacts"
        artifacts.rename(root / "mlartifacts.away")
        artifacts.write_text("not a directory")
        out, err = proc.communicate(timeout=time_limit(120))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out + err
    # status lines end with …, or say a start-up phase has passed (issue 48 item 4); the one line on
    # the intervals the run computed is a result, and is there once
    phase = re.compile(r"evalkit: (Ray started|llama\.cpp's server ready|1 worker ready|first of \d+ workers ready) in ")
    said = [ln for ln in err.splitlines() if ln.startswith("evalkit:") and not ln.endswith("…") and not phase.match(ln)]
    assert sum(ln.startswith("evalkit: intervals (95%): ") for ln in said) == 1, err
    lines = [ln for ln in said if not ln.startswith("evalkit: intervals (95%): ")]
    assert len(lines) == 1 and lines[0].startswith("evalkit: warning: tracking: MLflow logging failed ("), err
    assert "Traceback" not in err
    uri = f"sqlite:///{root.resolve() / 'mlflow.db'}"
    assert lines[0].endswith(f"log them with: python -m evalkit.track --tracking-uri {uri} {run_dir}")
    assert out.startswith("evalkit: complete: acebench")
    artifacts.unlink()
    (root / "mlartifacts.away").rename(artifacts)
    track = subprocess.run([*evalkit_cmd()[:2], "evalkit.track", "--tracking-uri", uri, str(run_dir)], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert track.returncode == 0 and track.stdout.startswith(f"evalkit: tracked {run_dir} → MLflow run "), track.stderr
    client, exp = _store(root)
    (run,) = client.search_runs([exp])
    assert run.info.status == "FINISHED" and run.data.metrics["n_scored"] == 4 and len(_traces(root, run_dir)) == 4
    assert {"summary.json", "predictions.jsonl", "tables"} <= {a.path for a in client.list_artifacts(run.info.run_id)}


# ------------------------------------------------------------------------------------------
# what a summary becomes (pure functions)
# ------------------------------------------------------------------------------------------
def test_names_are_ones_mlflow_accepts():
    from mlflow.utils.validation import _validate_metric_name, _validate_param_name

    from evalkit.tracking.curate import mlflow_name, point_label, sweep_metrics

    odd = ["f1_macro/model=a shots='3'", "x//y/", "/lead", "a/../b", "ok/./c", "run.sample_ids=[a,b]", "ä(ü)*?", "", "a" * 300]
    for text in odd:
        name = mlflow_name(text)
        _validate_metric_name(name)
        _validate_param_name(name)
        assert 0 < len(name) <= 250
    assert mlflow_name("f1_macro/model:baseline_first_k shots:3") == "f1_macro/model:baseline_first_k shots:3"
    assert point_label(["model=a", "shots='3'"]) == "model=a shots=3"
    summary = {"n_jobs": 2, "n_complete_jobs": 1, "n_failed_jobs": 1, "jobs": [
        {"num": 0, "point": ["model=baseline_first_k", "shots='3'"], "headline": "f1_macro", "headline_value": 0.25},
        {"num": 1, "point": ["model=x"], "headline": "f1_macro", "headline_value": None}]}  # fmt: skip
    assert sweep_metrics(summary) == {"n_jobs": 2.0, "n_complete_jobs": 1.0, "n_failed_jobs": 1.0,
                                      "f1_macro/model:baseline_first_k shots:3": 0.25}  # fmt: skip


def test_headline_and_group_intervals_come_from_metrics_ci_and_only_when_complete():
    from evalkit.summary import Summary
    from evalkit.tracking.curate import breakdown_tables, run_metrics

    ci = {"low": 0.5, "high": 0.75, "stderr": 0.06, "n": 40, "method": "bootstrap"}
    complete = {"status": "complete", "benchmark": "sobhard", "model": "m", "tracked_metrics": "top_level",  # as SOBHard declares it
                "headline": "sample_pass_rate", "n_samples": 40, "n_scored": 40,
                "n_failed": 0, "metrics": {"sample_pass_rate": 0.625, "sample_pass_rate/family/x": 0.5, "constraint/pack.a": 1.0},
                "metrics_ci": {"sample_pass_rate": ci, "sample_pass_rate/family/x": {**ci, "n": 12}},
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}, "cost_usd": 0.25}  # fmt: skip
    assert run_metrics(Summary.model_validate(complete)) == {
        "headline": 0.625, "headline_ci_low": 0.5, "headline_ci_high": 0.75, "sample_pass_rate": 0.625,
        "sample_pass_rate_ci_low": 0.5, "sample_pass_rate_ci_high": 0.75, "n_samples": 40.0, "n_scored": 40.0, "n_failed": 0.0,
        "tokens/prompt_tokens": 10.0, "tokens/completion_tokens": 5.0, "cost_usd": 0.25,
    }  # fmt: skip
    assert breakdown_tables(Summary.model_validate(complete)) == {
        "family": {"family": ["x"], "sample_pass_rate": [0.5], "n": [12], "ci_low": [0.5], "ci_high": [0.75]},
        "constraint": {"constraint": ["pack.a"], "value": [1.0]},
    }
    incomplete = {**complete, "status": "incomplete", "metrics": {}, "n_failed": 2,
                  "partial_metrics": {"partial_sample_pass_rate": 0.6}, "metrics_ci": {"partial_sample_pass_rate": ci}}  # fmt: skip
    got = run_metrics(Summary.model_validate(incomplete))
    assert "headline" not in got and got["partial_sample_pass_rate"] == 0.6
    assert (got["partial_sample_pass_rate_ci_low"], got["partial_sample_pass_rate_ci_high"]) == (0.5, 0.75)
    without_ci = run_metrics(Summary.model_validate({**complete, "metrics_ci": None}))
    assert without_ci["headline"] == 0.625 and not [k for k in without_ci if "_ci_" in k]


def test_description_says_headline_interval_and_n_or_how_to_resume(tmp_path: Path):
    from evalkit.summary import Summary
    from evalkit.tracking.curate import description

    base = {"benchmark": "ke", "model": "m", "model_id": "openai/m", "n_samples": 170, "n_scored": 170, "n_failed": 0,
            "headline": "f1_macro", "data_fingerprint": "ab" * 32, "prompt_hash": "cd" * 32, "code_version": "0.1.0+x"}  # fmt: skip
    ci = {"f1_macro": {"low": 0.41, "high": 0.52, "stderr": 0.03, "n": 170, "method": "percentile bootstrap"}}
    text = description(Summary.model_validate({**base, "status": "complete", "metrics": {"f1_macro": 0.4667}, "metrics_ci": ci}), tmp_path)
    assert "headline `f1_macro` = **0.4667**, interval 0.4100–0.5200 (percentile bootstrap) over n = 170 samples" in text
    assert "status complete (170 of 170 scored)" in text and "\n" not in text
    failed = {**base, "status": "incomplete", "metrics": {}, "n_scored": 167, "n_failed": 3, "failed_by_kind": {"timeout": 2, "auth": 1}}
    text = description(Summary.model_validate(failed), tmp_path / "run")
    assert "**INCOMPLETE** — 3 of 170 samples failed (timeout: 2, auth: 1)" in text
    assert f"`run.resume={(tmp_path / 'run').resolve()}`" in text and "headline `" not in text


@pytest.mark.slow
def test_tracking_traces_false_logs_the_run_without_traces(tmp_path: Path, acebench_dir: Path):
    root = tmp_path / "out"
    res = _run(root, acebench_dir, "model=reference", "tracking.traces=false", "benchmark.language=all",
               "benchmark.subsets=[normal_atom_bool]", "run.limit=3")  # fmt: skip
    client, _ = _store(root)
    run = client.get_run(_run_id(res.run_dir))
    assert run.data.metrics["headline"] == 1.0 and _traces(root, res.run_dir) == {}
    assert run.inputs.dataset_inputs[0].dataset.name == "acebench all languages normal_atom_bool"
    assert not (root / "mlartifacts" / run.info.run_id / "artifacts" / "tables" / "samples.json").exists()  # no trace, no view
    assert [r["sample_id"] for r in _table(root, run.info.run_id, "samples.parquet")] == [
        r["sample_id"] for r in read_jsonl(res.run_dir / "predictions.jsonl")
    ]
