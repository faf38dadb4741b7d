"""Sweeps (``python -m evalkit -m ...``): real Hydra multiruns in a subprocess, real MLflow
on SQLite. Each job has its run directory under the sweep directory and an MLflow child
run under the sweep's parent run; a failing job does not stop the others; a bad override
is one line and exit 2 before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.sweep import expand_sweep, swept_label, points_to_check, redact_overrides, swept_keys
from tests.conftest import REPO_ROOT, evalkit_cmd


def _ke(shared_data_dir: Path) -> list[str]:
    ke = shared_data_dir / "ke"
    return ["benchmark=ke", f"benchmark.pilot_path={ke / 'pilot.jsonl'}", f"benchmark.icl_path={ke / 'icl_examples.jsonl'}"]


def _sweep(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        evalkit_cmd("-m", *args, "run.progress=false"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env
    )


def _client(root: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}")


def _runs(root: Path) -> list:
    client = _client(root)
    exp = client.get_experiment_by_name("evalkit")
    return client.search_runs([exp.experiment_id], max_results=100)


def _bash(script: str, *args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "VENV": str(Path(sys.executable).parents[1])}
    return subprocess.run(
        ["bash", str(REPO_ROOT / "bash" / script), *map(str, args)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def good_sweep(shared_data_dir: Path, tmp_path_factory):
    """The reviewer's sweep: ``-m benchmark=ke model=reference,baseline_file_read shots=0,3``."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    res = _sweep(*_ke(shared_data_dir), "model=reference,baseline_file_read", "shots=0,3", f"run.output_root={out}")
    return out, res


@pytest.mark.slow
def test_four_job_sweep_has_run_dirs_child_runs_and_a_summary(good_sweep):
    out, res = good_sweep
    assert res.returncode == 0, res.stdout + res.stderr
    (sweep_dir,) = (out / "sweeps").iterdir()
    assert not (out / "runs").exists()  # a sweep's runs live in the sweep directory

    # one run directory per job, named <num>-<benchmark>-<model>-shots<k>, in Hydra's job order
    run_dirs = sorted(p.parent for p in sweep_dir.glob("*/summary.json"))
    assert [p.name for p in run_dirs] == [
        "0-ke-reference-shots0", "1-ke-reference-shots3", "2-ke-baseline_file_read-shots0", "3-ke-baseline_file_read-shots3",
    ]  # fmt: skip
    summaries = {p.name: json.loads((p / "summary.json").read_text()) for p in run_dirs}
    assert {(s["model"], s["shots"], s["status"]) for s in summaries.values()} == {
        ("reference", 0, "complete"), ("reference", 3, "complete"),
        ("baseline_file_read", 0, "complete"), ("baseline_file_read", 3, "complete"),
    }  # fmt: skip
    assert all(s["metrics"]["f1_macro"] == 1.0 for s in summaries.values() if s["model"] == "reference")
    assert all(s["metrics"]["f1_macro"] < 0.9 for s in summaries.values() if s["model"] == "baseline_file_read")

    # the sweep summary: 4 complete jobs whose headline values are their runs' own
    sweep = json.loads((sweep_dir / "sweep_summary.json").read_text())
    assert (sweep["sweep_id"], sweep["status"], sweep["n_jobs"], sweep["n_complete_jobs"], sweep["n_failed_jobs"]) == (
        sweep_dir.name, "complete", 4, 4, 0,
    )  # fmt: skip
    assert [j["num"] for j in sweep["jobs"]] == [0, 1, 2, 3]
    for job in sweep["jobs"]:
        s = summaries[Path(job["run_dir"]).name]
        assert job["status"] == "complete" and job["exit_code"] == 0
        assert (job["headline"], job["headline_value"]) == (s["headline"], s["metrics"][s["headline"]])
        assert (job["model"], job["shots"]) == (s["model"], s["shots"])
    assert [j["point"] for j in sweep["jobs"]] == [
        ["model=reference", "shots=0"], ["model=reference", "shots=3"],
        ["model=baseline_file_read", "shots=0"], ["model=baseline_file_read", "shots=3"],
    ]  # fmt: skip
    report = (sweep_dir / "sweep_report.md").read_text()
    assert "| 2 | `model=baseline_file_read shots=0` | complete | f1_macro | " in report
    assert f"all 4 jobs complete → {sweep_dir / 'sweep_summary.json'}" in res.stdout

    # MLflow: one parent run for the sweep and four children under it, tagged alike
    runs = _runs(out)
    (parent,) = [r for r in runs if r.data.tags.get("evalkit.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("evalkit.kind") == "run"]
    comparisons = [r for r in runs if r.data.tags.get("evalkit.kind") == "comparison"]
    # every paired headline comparison of the sweep is a comparison run under the parent,
    # linked to both jobs' runs, with the sweep's Holm / BH p (no headline of its own)
    assert len(runs) == 9 and len(children) == 4 and len(comparisons) == len(sweep["paired"]) == 4
    by_dir = {r.data.tags["run_dir"]: r.info.run_id for r in children}
    resolved = {num: str(Path(j["run_dir"]).resolve()) for num, j in enumerate(sweep["jobs"])}
    jobs = {j["num"]: j for j in sweep["jobs"]}
    for pair in sweep["paired"]:
        (cmp,) = [c for c in comparisons if c.data.tags["evalkit.base_run_dir"] == jobs[pair["base"]]["run_dir"]
                  and c.data.tags["evalkit.new_run_dir"] == jobs[pair["job"]]["run_dir"]]  # fmt: skip
        assert cmp.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert cmp.data.tags["evalkit.base_run_id"] == by_dir[resolved[pair["base"]]]
        assert cmp.data.tags["evalkit.new_run_id"] == by_dir[resolved[pair["job"]]]
        assert cmp.data.metrics["compare/delta"] == pytest.approx(pair["delta"]) and "headline" not in cmp.data.metrics
        if pair.get("p_holm") is not None:
            assert cmp.data.metrics["compare/p_holm"] == pytest.approx(pair["p_holm"])
    assert parent.data.tags["sweep"] == sweep_dir.name and parent.info.status == "FINISHED"
    assert sweep["parent_run_id"] == parent.info.run_id
    assert parent.data.metrics["n_jobs"] == 4 and parent.data.metrics["n_failed_jobs"] == 0
    # each job's headline is named by its point (characters MLflow accepts: ':' for '=')
    for job in sweep["jobs"]:
        assert parent.data.metrics[f"f1_macro/{' '.join(job['point']).replace('=', ':')}"] == job["headline_value"]
    assert parent.data.metrics["f1_macro/model:baseline_file_read shots:3"] == sweep["jobs"][3]["headline_value"]
    assert {a.path for a in _client(out).list_artifacts(parent.info.run_id)} == {"sweep_summary.json", "sweep_report.md", "tables"}
    table = json.loads((out / "mlartifacts" / parent.info.run_id / "artifacts" / "tables" / "sweep.json").read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    assert [(r["job"], r["point"], r["status"]) for r in rows] == [(j["num"], " ".join(j["point"]), "complete") for j in sweep["jobs"]]
    assert [r["value"] for r in rows] == pytest.approx([j["headline_value"] for j in sweep["jobs"]], abs=1e-9)  # JSON: 10 digits
    by_dir = {}
    for child in children:
        tags = child.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["sweep"] == sweep_dir.name
        assert child.info.status == "FINISHED"
        by_dir[Path(tags["run_dir"]).name] = child
    assert sorted(by_dir) == [p.name for p in run_dirs]
    for name, child in by_dir.items():
        s, tags = summaries[name], child.data.tags
        assert (tags["benchmark"], tags["model"], tags["shots"]) == ("ke", s["model"], str(s["shots"]))
        assert (tags["data_fingerprint"], tags["prompt_hash"]) == (s["data_fingerprint"], s["prompt_hash"])
        assert child.data.metrics["f1_macro"] == s["metrics"]["f1_macro"]
        job = next(j for j in sweep["jobs"] if Path(j["run_dir"]).name == name)
        assert child.info.run_name == " ".join(job["point"])  # e.g. "model=reference shots=3"
    # the same data in every job; the prompts differ by shots, not by model
    assert len({c.data.tags["data_fingerprint"] for c in children}) == 1
    prompt = {(c.data.tags["model"], c.data.tags["shots"]): c.data.tags["prompt_hash"] for c in children}
    assert prompt["reference", "0"] == prompt["baseline_file_read", "0"] != prompt["reference", "3"]


@pytest.mark.slow
def test_check_report_passes_on_the_sweep(good_sweep):
    out, res = good_sweep
    assert res.returncode == 0, res.stderr
    (sweep_dir,) = (out / "sweeps").iterdir()
    check = _bash("check_report.sh", sweep_dir)
    assert check.returncode == 0, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    assert sorted(ln for ln in lines if ln.startswith("OK ") and ": sweep of " not in ln) == sorted(
        f"OK {p.parent}" for p in sweep_dir.glob("*/summary.json")
    )
    assert f"OK {sweep_dir}: sweep of 4 jobs, all complete" in lines

    # from the output root: the same verdicts, and MLflow's artifact copies of the five
    # summaries (<output root>/mlartifacts/<run id>/artifacts/) are not checked as runs
    assert len(list((out / "mlartifacts").glob("*/artifacts/*summary.json"))) == 5
    whole = _bash("check_report.sh", out)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert sorted(whole.stdout.splitlines()) == sorted(lines)


def _half_replay(shared_data_dir: Path, path: Path, n: int) -> list[str]:
    """A replay file with gold outputs for the first ``n`` graded KE samples only."""
    from evalkit.benchmarks.ke import KE, KESettings

    ke = shared_data_dir / "ke"
    bench = KE(KESettings(pilot_path=ke / "pilot.jsonl", icl_path=ke / "icl_examples.jsonl"))
    samples = bench.load()
    path.write_text("".join(json.dumps({"sample_id": s.id, "output": bench.reference_output(s)}) + "\n" for s in samples[:n]))
    return [s.id for s in samples]


@pytest.mark.slow
def test_a_failing_job_does_not_stop_the_others(shared_data_dir: Path, tmp_path: Path):
    # job 0 needs 3 outputs (all recorded): complete; job 1 needs 12 (6 recorded): incomplete;
    # job 2 asks for a sample id the data does not have: a config error only the run finds;
    # job 3 runs after the failures and completes
    replay = tmp_path / "half.jsonl"
    ids = _half_replay(shared_data_dir, replay, 6)
    out = tmp_path / "out"
    res = _sweep(
        *_ke(shared_data_dir), "model=replay", f"model.path={replay}", f"run.output_root={out}",
        f"run.sample_ids=[{ids[0]},{ids[1]},{ids[2]}],[{','.join(ids)}],[nope],[{ids[3]}]",
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    (sweep_dir,) = (out / "sweeps").iterdir()
    sweep = json.loads((sweep_dir / "sweep_summary.json").read_text())
    assert [(j["num"], j["status"], j["exit_code"]) for j in sweep["jobs"]] == [
        (0, "complete", 0), (1, "incomplete", 1), (2, "error", 2), (3, "complete", 0),
    ]  # fmt: skip
    assert (sweep["status"], sweep["n_jobs"], sweep["n_failed_jobs"]) == ("failed", 4, 2)
    assert sweep["jobs"][2]["error"] == "run.sample_ids: unknown sample id 'nope' (ids look like 'code_ke_834b34a9')"
    assert sweep["jobs"][2]["run_dir"] is None and not list(sweep_dir.glob("2-*"))
    assert [json.loads((Path(j["run_dir"]) / "summary.json").read_text())["n_failed"] for j in sweep["jobs"] if j["run_dir"]] == [0, 6, 0]

    # stderr names each failed job with what sets it apart, then the count
    lines = res.stderr.strip().splitlines()
    sid = sweep_dir.name
    inc = next(ln for ln in lines if f"sweep {sid}: job 1 " in ln)
    assert inc.startswith(f"evalkit: sweep {sid}: job 1 (run.sample_ids=[") and " incomplete: 6 of 12 samples failed" in inc
    assert f"evalkit: sweep {sid}: job 2 (run.sample_ids=[nope]) error: run.sample_ids: unknown sample id 'nope'" in res.stderr
    assert lines[-1] == f"evalkit: sweep {sid}: 2 of 4 jobs failed → {sweep_dir / 'sweep_summary.json'}"

    # MLflow: the parent is FAILED with the counts; the incomplete child is FAILED too
    runs = _runs(out)
    (parent,) = [r for r in runs if r.data.tags.get("evalkit.kind") == "sweep"]
    assert parent.info.status == "FAILED"
    assert (parent.data.metrics["n_jobs"], parent.data.metrics["n_failed_jobs"]) == (4, 2)
    points = [" ".join(j["point"]).replace("=", ":").replace("[", "_").replace("]", "_").replace(",", "_") for j in sweep["jobs"]]
    assert set(parent.data.metrics) == {"n_jobs", "n_complete_jobs", "n_failed_jobs", f"f1_macro/{points[0]}", f"f1_macro/{points[3]}"}
    children = sorted((r for r in runs if r.data.tags.get("evalkit.kind") == "run"), key=lambda r: r.data.tags["run_dir"])
    assert [(Path(c.data.tags["run_dir"]).name[0], c.info.status) for c in children] == [("0", "FINISHED"), ("1", "FAILED"), ("3", "FINISHED")]
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)

    check = _bash("check_report.sh", sweep_dir)
    assert check.returncode == 1
    assert f"INCOMPLETE {sweep['jobs'][1]['run_dir']}: n_failed=6" in check.stdout
    assert f"FAIL {sweep_dir}: job 2 (run.sample_ids=[nope]): error: run.sample_ids: unknown sample id 'nope'" in check.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["model=reference,nosuch", "shots=0,3"], "evalkit: error: model=nosuch: unknown model; available: "),
        (["model=reference", "run.limit=2,0"], "evalkit: error: run.limit: Input should be greater than or equal to 1 (got 0) (sweep point run.limit=0)"),
        (["model=reference", "shots=0,7"], "evalkit: error: shots: ke supports shots in [0, 3] (got shots=7)"),
        (["model=reference", "run.limit=[1,2"], "evalkit: error: override 'run.limit=[1,2' cannot be parsed"),
        (["model=reference", "run.limit=1,2", "tracking.tracking_uri=bogus://x"], "evalkit: error: tracking: cannot open the MLflow store bogus://x "),
    ],
)
def test_bad_override_in_a_sweep_is_one_line_and_nothing_is_written(shared_data_dir: Path, tmp_path: Path, args, line):
    out = tmp_path / "out"
    res = _sweep(*_ke(shared_data_dir), *args, f"run.output_root={out}")
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith(line), res.stderr
    assert res.stdout == ""
    assert not out.exists()


@pytest.mark.slow
def test_run_suite_tags_runs_with_the_suite(shared_data_dir: Path, tmp_path: Path):
    ke = shared_data_dir / "ke"
    suite = tmp_path / "tiny.yaml"
    suite.write_text(
        "- name: ke\n  benchmark: ke\n  subsets: null\n  overrides:\n"
        f"    - benchmark.pilot_path={ke / 'pilot.jsonl'}\n    - benchmark.icl_path={ke / 'icl_examples.jsonl'}\n    - run.limit=2\n"
    )
    out = tmp_path / "out"
    res = _bash("run_suite.sh", suite, "--model", "reference", f"run.output_root={out}", "run.progress=false")
    assert res.returncode == 0, res.stdout + res.stderr
    (run,) = _runs(out)
    assert run.data.tags["suite"] == "tiny" and run.data.tags["evalkit.kind"] == "run" and "sweep" not in run.data.tags
    (cfg,) = out.glob("suites/tiny-*/1-ke/config.yaml")
    assert "suite: tiny" in cfg.read_text()


@pytest.mark.slow
def test_local_processes_sweep_jobs_join_the_parent_run_from_other_processes(shared_data_dir: Path, tmp_path: Path):
    """submitit's local launcher: jobs in processes of their own still find the sweep's
    parent run (through sweep.json) and the driver still writes the summary."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    out = tmp_path / "out"
    res = _sweep("hydra/launcher=local_processes", *_ke(shared_data_dir), "model=reference,baseline_file_read", "run.limit=3", f"run.output_root={out}")
    assert res.returncode == 0, res.stdout + res.stderr
    (sweep_dir,) = (out / "sweeps").iterdir()
    summaries = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]
    assert [(s["model"], s["n_scored"]) for s in summaries] == [("reference", 3), ("baseline_file_read", 3)]
    assert len({s["pid"] for s in summaries}) == 2
    sweep = json.loads((sweep_dir / "sweep_summary.json").read_text())
    assert [j["headline_value"] for j in sweep["jobs"]] == [s["metrics"]["f1_macro"] for s in summaries]
    runs = _runs(out)
    (parent,) = [r for r in runs if r.data.tags.get("evalkit.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("evalkit.kind") == "run"]
    assert len(children) == 2 and all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert parent.data.metrics["n_jobs"] == 2 and parent.info.status == "FINISHED"


# ------------------------------------------------------------------------------------------
# helpers of the sweep pre-check
# ------------------------------------------------------------------------------------------
def test_expand_sweep_follows_hydras_job_order():
    points = expand_sweep(["benchmark=ke", "model=a,b", "shots='0','3'"])
    assert points == [
        ["benchmark=ke", "model=a", "shots='0'"], ["benchmark=ke", "model=a", "shots='3'"],
        ["benchmark=ke", "model=b", "shots='0'"], ["benchmark=ke", "model=b", "shots='3'"],
    ]  # fmt: skip
    assert swept_keys(points) == {"model", "shots"}
    assert swept_label(points[3], swept_keys(points)) == "model=b shots=3"  # quotes only for Hydra's grammar


def test_a_large_sweep_checks_the_first_point_and_each_value():
    points = expand_sweep(["a=1,2,3,4,5", "b=1,2,3,4,5", "c=1,2,3,4,5"])  # 125 points
    checked = points_to_check(points)
    assert len(checked) == 1 + 3 * 4
    assert checked[0] == ["a=1", "b=1", "c=1"]
    for key in "abc":
        assert {v for p in checked for v in p if v.startswith(key)} == {f"{key}={i}" for i in range(1, 6)}
    assert points_to_check(points[:64]) == points[:64]


def test_secret_overrides_are_redacted_in_sweep_records():
    assert redact_overrides(["backend.api_key=${oc.env:EVALKIT_SECRET_3}", "+user.hf_token=abc", "model=a"]) == [
        "backend.api_key=***", "+user.hf_token=***", "model=a",
    ]  # fmt: skip


@pytest.mark.slow
def test_sweep_jobs_share_the_response_cache_and_never_write_the_key(fake_openai, ray_address, acebench_dir: Path, tmp_path: Path):
    """The only models that use the response cache are the network ones (offline models
    compute their outputs). Job 1 of a sweep is answered from what job 0 cached, and a
    second identical sweep sends nothing at all; the API key given on the command line
    is in no file the sweep leaves."""
    secret = "sk-evalkit-sweep-SECRET-5550123"
    fake_openai.set_plan({"default": {"content": "[]"}})
    out = tmp_path / "out"
    args = (
        "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
        f"backend.api_key={secret}", f"runner.address={ray_address}", f"benchmark.data_dir={acebench_dir}",
        "benchmark.subsets=[normal_atom_bool]", f"run.output_root={out}", "run.limit=1,2",
    )  # fmt: skip
    first = _sweep(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(fake_openai.log) == 2  # samples 0 and 1; job 1 got sample 0 from the cache
    fake_openai.set_plan({"default": {"content": "[]"}})
    second = _sweep(*args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert fake_openai.log == []

    from evalkit.engine.journal import read_jsonl

    sweeps = sorted((out / "sweeps").iterdir())
    assert len(sweeps) == 2
    cached = [[r["cached"] for r in read_jsonl(run / "predictions.jsonl")] for s in sweeps for run in sorted(s.glob("[0-9]-*"))]
    assert cached == [[False], [True, False], [True], [True, True]]
    assert any(p.is_file() for p in (out / "cache").rglob("*"))  # one cache, shared, under the output root
    assert not list(out.glob("sweeps/*/cache")) and not list(out.glob("sweeps/*/*/cache"))
    leaked = [p for p in out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    job = json.loads((sweeps[0] / "jobs" / "0.json").read_text())
    assert "backend.api_key=***" in job["overrides"]


@pytest.mark.slow
def test_interrupted_sweep_records_what_ran_and_ends_the_parent_run_killed(fake_openai, ray_address, acebench_dir: Path, tmp_path: Path):
    """Ctrl-C while job 0 waits on a model that never answers: the sweep exits 130, job 0
    is recorded interrupted (its journal kept for run.resume), job 1 not run, and the
    parent run is KILLED instead of being left RUNNING."""
    import signal
    import time

    fake_openai.set_plan({"default": {"always_status": "hang", "hang_s": 120}})
    out = tmp_path / "out"
    proc = subprocess.Popen(
        evalkit_cmd(
            "-m", "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
            f"runner.address={ray_address}", f"benchmark.data_dir={acebench_dir}", "benchmark.subsets=[normal_atom_bool]",
            f"run.output_root={out}", "run.limit=1,2", "run.progress=false", "backend.max_retries=0",
        ),
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not fake_openai.log and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # until job 0's request is held by the server
        assert fake_openai.log, "job 0 never reached the model"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    (sweep_dir,) = (out / "sweeps").iterdir()
    sweep = json.loads((sweep_dir / "sweep_summary.json").read_text())
    assert [(j["num"], j["status"]) for j in sweep["jobs"]] == [(0, "interrupted"), (1, "not_run")]
    assert sweep["status"] == "failed"
    assert sweep["jobs"][0]["error"] == f"interrupted; resume with run.resume={sweep_dir / '0-acebench-openai_compatible-shots0'}"
    assert (sweep_dir / "0-acebench-openai_compatible-shots0" / "config.yaml").is_file()
    assert err.strip().splitlines()[-1] == f"evalkit: sweep {sweep_dir.name}: stopped after 0 complete of 2 jobs → {sweep_dir / 'sweep_summary.json'}"
    (parent,) = [r for r in _runs(out) if r.data.tags.get("evalkit.kind") == "sweep"]
    assert parent.info.status == "KILLED" and parent.data.metrics["n_failed_jobs"] == 2


@pytest.mark.slow
def test_a_sweep_directory_is_never_reused(shared_data_dir: Path, tmp_path: Path):
    out = tmp_path / "out"
    sweep_dir = tmp_path / "the-sweep"
    args = (*_ke(shared_data_dir), "model=reference", "run.limit=2", "tracking=none", f"run.output_root={out}", f"hydra.sweep.dir={sweep_dir}")
    first = _sweep(*args)
    assert first.returncode == 0, first.stderr
    before = (sweep_dir / "sweep_summary.json").read_text()
    again = _sweep(*args)
    assert again.returncode == 2
    assert again.stderr.strip() == f"evalkit: error: hydra.sweep.dir: {sweep_dir} already holds a sweep; pick another directory"
    assert (sweep_dir / "sweep_summary.json").read_text() == before
    assert sorted(p.name for p in sweep_dir.glob("[0-9]*")) == ["0-ke-reference-shots0"]


def test_the_sweep_report_shows_prompt_hashes_cut_to_12_and_the_json_keeps_them_whole():
    """Issue 48 item 8: ``sweep_report.md`` showed whole 64-hex prompt hashes in its paired
    notes; the report shows 12 characters, as the others do, and ``sweep_summary.json``
    (what this dict becomes) keeps the note as written."""
    from evalkit.sweep import report_markdown

    a, b = "a1" * 32, "0f" * 32
    note = f"prompt hash differ: {a!r} vs {b!r}"
    pair = {"key": "shots", "base": 0, "job": 1, "headline": "acc", "delta": 0.1, "low": -0.1, "high": 0.3, "p": 0.5,
            "test": "McNemar", "level": 0.95, "notes": [note]}  # fmt: skip
    summary = {"sweep_id": "s", "n_complete_jobs": 2, "n_jobs": 2, "overrides": ["shots=0,3"], "jobs": [], "paired": [pair]}
    text = report_markdown(summary)
    assert f"prompt hash differ: '{a[:12]}…' vs '{b[:12]}…'" in text and a not in text and b not in text
    assert summary["paired"][0]["notes"] == [note]


def test_a_sweep_jobs_run_dir_takes_the_form_of_a_single_runs(tmp_path, monkeypatch):
    """Issue 48 item 8: a single run's directory was relative (``outputs/runs/…``), a sweep
    job's absolute (Hydra's job directory). A job's is now ``<sweep dir>/<job>`` as the sweep
    directory was given, when that names the same directory from here."""
    from evalkit.sweep import _as_given

    job = tmp_path / "outputs" / "sweeps" / "20261207-000000" / "0-ke-reference-shots0"
    monkeypatch.chdir(tmp_path)
    assert _as_given(Path("outputs/sweeps/20261207-000000"), job) == Path("outputs/sweeps/20261207-000000/0-ke-reference-shots0")
    assert _as_given(job.parent, job) == job  # an absolute run.output_root: absolute, as a single run's
    monkeypatch.chdir(tmp_path.parent)  # elsewhere (a launcher's job started in another directory): Hydra's own
    assert _as_given(Path("outputs/sweeps/20261207-000000"), job) == job
