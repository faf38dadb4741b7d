"""Bad input ends in one clear error before anything is written as a result (found by an
adversarial pass over the CLI; each case once crashed or misbehaved)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from evalkit.engine.journal import read_jsonl
from evalkit.errors import ConfigError, DataError, RunDirError, TrackingError
from tests.conftest import REPO_ROOT, evalkit_cmd


def _copy_category(acebench_dir: Path, dst: Path, category: str = "normal_atom_bool") -> Path:
    """A writable one-category copy of the ACEBench layout (outside the project)."""
    for rel in (f"data_all/data_en/data_{category}.json", f"data_all/data_en/possible_answer/data_{category}.json", "prompts.json"):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(acebench_dir / rel, dst / rel)
        (dst / rel).chmod(0o644)
    return dst


def test_resume_with_other_benchmark_settings_is_refused(run_eval):
    first = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"])
    before = (first.run_dir / "summary.json").read_text()
    with pytest.raises(RunDirError, match="benchmark.language differs"):
        run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "benchmark.language=zh", f"run.resume={first.run_dir}"])
    assert (first.run_dir / "summary.json").read_text() == before


def test_resume_of_a_broken_run_config_is_one_error(run_eval, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text("[1, 2]\n")
    with pytest.raises(RunDirError, match="not an evalkit run config"):
        run_eval(["model=reference", f"run.resume={broken}"])


def test_duplicate_sample_ids_in_data_are_refused(acebench_dir, tmp_path, run_eval):
    root = _copy_category(acebench_dir, tmp_path / "ace")
    for rel in ("data_all/data_en/data_normal_atom_bool.json", "data_all/data_en/possible_answer/data_normal_atom_bool.json"):
        lines = (root / rel).read_text().splitlines()
        (root / rel).write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(DataError, match="en/normal_atom_bool_0.*twice"):
        run_eval(["model=reference", f"benchmark.data_dir={root}", "benchmark.subsets=[normal_atom_bool]"])


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda p, a: p.write_text(""), "holds no records"),
        (lambda p, a: p.write_text(p.read_text().replace('"function": [', '"function": [1, ', 1)), "list of specs"),
        (lambda p, a: a.write_text(a.read_text().replace('"ground_truth": {', '"ground_truth": "x", "was": {', 1)), "ground_truth"),
        (lambda p, a: p.write_text("[" * 100000 + "\n"), "nested too deeply"),
    ],
)
def test_malformed_records_are_data_errors(acebench_dir, tmp_path, run_eval, mutate, match):
    root = _copy_category(acebench_dir, tmp_path / "ace")
    mutate(root / "data_all/data_en/data_normal_atom_bool.json", root / "data_all/data_en/possible_answer/data_normal_atom_bool.json")
    out = tmp_path / "out"
    with pytest.raises(DataError, match=match):
        run_eval(["model=reference", f"benchmark.data_dir={root}", "benchmark.subsets=[normal_atom_bool]"], output_root=out)
    assert not (out / "runs").exists()


def test_bad_replay_file_writes_no_run_directory(tmp_path, run_eval):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe not utf-8\n")
    out = tmp_path / "out"
    with pytest.raises(DataError, match="not UTF-8"):
        run_eval(["model=replay", f"model.path={bad}", "benchmark.subsets=[normal_atom_bool]"], output_root=out)
    assert not (out / "runs").exists()


def test_lone_surrogate_in_an_answer_is_journaled_not_a_crash(tmp_path, run_eval):
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"sample_id": "en/normal_atom_bool_0", "output": "[f(a='\ud800')]"}) + "\n")
    res = run_eval(["model=replay", f"model.path={replay}", "run.sample_ids=[en/normal_atom_bool_0]"])
    rows = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert rows[0]["output"] == "[f(a='\ud800')]" and rows[0]["scores"]["accuracy"] == 0.0


def test_empty_subsets_and_empty_data_dir_are_config_errors(run_eval):
    with pytest.raises(ConfigError, match="benchmark.subsets: empty list"):
        run_eval(["model=reference", "benchmark.subsets=[]"])
    with pytest.raises(ConfigError, match="benchmark.data_dir: empty path"):
        run_eval(["model=reference", "benchmark.data_dir=''"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, message",
    [
        (["tracking.tracking_uri=bogus://x"], "tracking: cannot open the MLflow store bogus://x ("),
        (["tracking.artifact_root=/proc/evalkit-nope"], "tracking.artifact_root: /proc/evalkit-nope cannot be written"),
        (["tracking.experiment="], "tracking.experiment: String should have at least 1 character"),
    ],
)
def test_bad_tracking_settings_are_one_line_before_anything_runs(run_eval, tmp_path, overrides, message):
    with pytest.raises((TrackingError, ConfigError)) as info:
        run_eval(["model=reference", "tracking=mlflow", *overrides, "run.sample_ids=[en/normal_atom_bool_0]"])
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "outputs" / "runs").exists()


def test_a_corrupt_mlflow_store_is_one_line_before_anything_runs(run_eval, tmp_path):
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "mlflow.db").write_bytes(b"\x00garbage, not SQLite" * 300)
    with pytest.raises(TrackingError, match=r"^tracking: cannot open the MLflow store sqlite:///.*mlflow\.db \(DatabaseError: "):
        run_eval(["model=reference", "tracking=mlflow", "run.sample_ids=[en/normal_atom_bool_0]"])
    assert not (tmp_path / "outputs" / "runs").exists()


@pytest.mark.slow
def test_resume_into_another_tracking_store_gets_a_new_mlflow_run(run_eval, tmp_path):
    """run.output_root may change on resume; the run is then logged to the store there."""
    import mlflow

    first = run_eval(["model=reference", "tracking=mlflow", "run.sample_ids=[en/normal_atom_bool_0]"], output_root=tmp_path / "a")
    again = run_eval(
        ["model=reference", "tracking=mlflow", "run.sample_ids=[en/normal_atom_bool_0]", f"run.resume={first.run_dir}"],
        output_root=tmp_path / "b",
    )
    assert again.summary["status"] == "complete"
    for root in ("a", "b"):
        client = mlflow.MlflowClient(f"sqlite:///{tmp_path / root / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name("evalkit").experiment_id])
        assert [r.data.tags["run_dir"] for r in runs] == [str(first.run_dir.resolve())]


@pytest.mark.slow
def test_rescore_of_a_non_run_is_exit_2(tmp_path):
    (tmp_path / "config.yaml").write_text(": : :\n")
    (tmp_path / "predictions.jsonl").write_text("")
    proc = subprocess.run([*evalkit_cmd()[:2], "evalkit.rescore", str(tmp_path)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2 and proc.stderr.startswith("evalkit: error:") and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "address, message",
    [("127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1"), ("nonsense", "is not HOST:PORT")],
)
def test_unreachable_cluster_is_one_line_and_writes_nothing(tmp_path, acebench_dir, address, message):
    """``ray.init`` would retry an unreachable cluster for minutes; evalkit says so in
    seconds, before any run directory exists."""
    out = tmp_path / "out"
    proc = subprocess.run(
        evalkit_cmd("model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1", "runner=cluster",
                    f"runner.address={address}", f"benchmark.data_dir={acebench_dir}", "run.limit=2",
                    f"run.output_root={out}", "tracking=none"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalkit: error: runner.address:") and message in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "victim, content, message",
    [
        ("test.jsonl", b'{"id": 1}\n\xff\xfe\x00garbage\n', "test.jsonl:2: not UTF-8 text"),
        ("shots.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00", "shots.jsonl:1: not UTF-8 text"),
        ("test.parquet", b"PAR1 this is not parquet PAR1", "test.parquet: not a Parquet file"),
    ],
)
def test_sobhard_data_that_is_not_text_or_parquet_is_one_line(shared_data_dir, tmp_path, run_eval, victim, content, message):
    data = tmp_path / "sob"
    data.mkdir()
    for name in ("test.jsonl", "shots.jsonl"):
        shutil.copy(shared_data_dir / "sobhard" / name, data / name)
    if victim == "test.parquet":
        (data / "test.jsonl").unlink()
    (data / victim).write_bytes(content)
    with pytest.raises(DataError) as info:
        run_eval(["benchmark=sobhard", "model=reference", f"benchmark.data_dir={data}"])
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "outputs").exists()


def _fake_model(fake, ray_address: str) -> list[str]:
    return [
        "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake.api_base}",
        "backend.max_retries=0", f"runner.address={ray_address}", "runner.num_workers=1",
        "run.sample_ids=[en/normal_atom_bool_0,en/normal_atom_bool_1]",
    ]  # fmt: skip


@pytest.mark.slow
def test_a_cache_that_is_not_a_cache_is_one_line_before_anything_runs(fake_openai, ray_address, tmp_path, run_eval):
    cache = tmp_path / "outputs" / "cache"
    cache.mkdir(parents=True)
    (cache / "cache.db").write_bytes(b"\x13\x37 not SQLite " * 500)
    n_log = len(fake_openai.log)
    with pytest.raises(ConfigError, match=r"^run\.cache_dir: .*cache is not a usable response cache \(DatabaseError: .*run\.cache=false$"):
        run_eval(_fake_model(fake_openai, ray_address))
    assert not (tmp_path / "outputs" / "runs").exists() and len(fake_openai.log) == n_log


@pytest.mark.slow
def test_unreadable_cache_entries_are_misses(fake_openai, ray_address, tmp_path, run_eval):
    """Entries whose pickles are torn are asked again (and replaced), never a crash."""
    import sqlite3

    fake_openai.set_plan({"default": {"content": "[]"}})
    first = run_eval(_fake_model(fake_openai, ray_address))
    assert first.summary["status"] == "complete"
    db = sqlite3.connect(tmp_path / "outputs" / "cache" / "cache.db")
    with db:
        assert db.execute("UPDATE Cache SET value = ? WHERE value IS NOT NULL", (b"\x80\x05garbage",)).rowcount == 2
    db.close()
    n_log = len(fake_openai.log)
    again = run_eval(_fake_model(fake_openai, ray_address))
    assert again.summary["status"] == "complete" and again.summary["n_scored"] == 2
    assert len(fake_openai.log) - n_log == 2  # both asked again
    third = run_eval(_fake_model(fake_openai, ray_address))
    assert third.summary["status"] == "complete" and len(fake_openai.log) - n_log == 2  # and cached again


# ------------------------------------------------------------------------------------------
# an unexpected exception (a bug) ends as one line naming the log that holds its traceback
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_crash_inside_a_run_is_one_line_naming_its_evalkit_log(run_eval, acebench_dir, tmp_path):
    """A real crash: resuming a run whose ``summary.json`` is a directory raises
    IsADirectoryError when the summary is written (it used to end in Hydra's traceback)."""
    root = tmp_path / "outputs"
    first = run_eval(["model=reference", "run.limit=3"], output_root=root)
    victim = first.run_dir / "summary.json"
    victim.unlink()
    victim.mkdir()
    proc = subprocess.run(
        evalkit_cmd("model=reference", "run.limit=3", f"run.resume={first.run_dir}", f"benchmark.data_dir={acebench_dir}",
                    f"run.output_root={root}", "tracking=none", "run.progress=false"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    log = first.run_dir / "evalkit.log"
    # the status lines (each ending with …) say what ran up to the crash; the error is the one other line
    assert [ln for ln in proc.stderr.splitlines() if not ln.endswith("…")] == [
        f"evalkit: error: unexpected error (IsADirectoryError: [Errno 21] Is a directory: '{victim}'); the traceback is in {log}"
    ]
    text = log.read_text(encoding="utf-8")
    assert "ERROR evalkit: unexpected error; the run stopped\nTraceback (most recent call last):" in text
    assert text.rstrip().endswith(f"IsADirectoryError: [Errno 21] Is a directory: '{victim}'")


def test_report_crash_without_a_run_directory_writes_a_crash_log(tmp_path, capsys):
    """The handler on its own, with a real exception raised before any run directory
    exists: the traceback goes to a new crash log (secrets scrubbed), stderr gets one line."""
    from evalkit import secrets
    from evalkit.__main__ import report_crash

    secret = "sk-crash-SECRET-31415926"
    secrets.register(secret)
    try:
        int(secret)  # a real ValueError whose message quotes the secret
    except ValueError as exc:
        code = report_crash(exc)
    assert code == 1
    (line,) = capsys.readouterr().err.splitlines()
    prefix = "evalkit: error: unexpected error (ValueError: invalid literal for int() with base 10: '***'); the traceback is in "
    assert line.startswith(prefix)
    crash_log = Path(line[len(prefix):])
    try:
        assert crash_log.name.startswith("evalkit-crash-") and crash_log.suffix == ".log"
        text = crash_log.read_text(encoding="utf-8")
        assert "Traceback (most recent call last):" in text
        assert text.rstrip().endswith("ValueError: invalid literal for int() with base 10: '***'")
        assert secret not in text
    finally:
        crash_log.unlink()
