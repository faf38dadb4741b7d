"""``python -m evalkit.judge RUN judge=<model>`` (issue 24, item 3): a finished run's answers
judged without asking the model under test again — read through the journal's one reader,
never through a link — and its one-line refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evalkit.compose import compose, to_plain
from evalkit.errors import ConfigError, RunDirError
from evalkit.compose import judged_config
from evalkit.judge import main
from evalkit.models.offline import load_run_outputs
from evalkit.track import read_run

SUMMARY = {"status": "complete", "benchmark": "explain_mini", "model": "m", "n_samples": 2, "n_scored": 2, "n_failed": 0,
           "n_scored_rows": 3, "n_failed_rows": 1, "repeats": 2}  # fmt: skip


def _run_dir(root: Path, stale_lines: list[int]) -> Path:
    run = root / "run"
    run.mkdir()
    rows = [
        {"sample_id": "a", "epoch": 0, "output": "first answer", "scores": {"f1": 1.0}, "request_hash": "h"},
        {"sample_id": "a", "epoch": 1, "output": "second answer", "scores": {"f1": 0.0}, "request_hash": "h"},
        {"sample_id": "a", "epoch": 0, "output": "a later duplicate", "scores": {"f1": 1.0}, "request_hash": "h"},
        {"sample_id": "b", "epoch": 0, "output": "a stale answer", "scores": {"f1": 1.0}, "request_hash": "old"},
    ]
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    failed = {"sample_id": "b", "epoch": 1, "error_kind": "judge_error", "actor": "judge", "message": "garbage", "output": "judged badly"}
    other = {"sample_id": "c", "epoch": 0, "error_kind": "server_error", "actor": "agent", "message": "HTTP 500"}
    (run / "failed.jsonl").write_text(json.dumps(failed) + "\n" + json.dumps(other) + "\n")
    (run / "summary.json").write_text(json.dumps({**SUMMARY, "stale_lines": stale_lines}))
    return run


def test_a_run_directory_replays_its_journaled_answers_epoch_by_epoch(tmp_path: Path):
    run = _run_dir(tmp_path, stale_lines=[4])
    assert load_run_outputs(run) == {("a", 0): "first answer", ("a", 1): "second answer", ("b", 1): "judged badly"}


def test_a_run_directory_is_never_read_through_a_link(tmp_path: Path):
    run = _run_dir(tmp_path, stale_lines=[])
    os.symlink(run, tmp_path / "link")
    with pytest.raises(RunDirError, match="not a run directory"):
        load_run_outputs(tmp_path / "link")
    (run / "summary.json").rename(tmp_path / "summary.json")
    os.symlink(tmp_path / "summary.json", run / "summary.json")
    with pytest.raises(RunDirError, match="symbolic link"):
        load_run_outputs(run)


@pytest.mark.parametrize("kind", ["missing", "link", "not_a_run"])
def test_a_bad_run_is_one_line_and_exit_2_with_nothing_written(tmp_path: Path, capsys, kind: str):
    target = {"missing": tmp_path / "nope", "link": tmp_path / "link", "not_a_run": tmp_path / "empty"}[kind]
    (tmp_path / "empty").mkdir()
    if kind == "link":
        os.symlink(tmp_path / "empty", target)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = main([str(target), "judge=gpt4o"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("evalkit: error: "), err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def _finished(root: Path, scorers: list[dict], run: dict) -> Path:
    """A finished run directory as evalkit.judge reads it: config.yaml, summary.json, a journal."""
    run_dir = _run_dir(root, stale_lines=[])
    config = {"config_format": 2, "benchmark": {"name": "explain_mini", "kind": "task", "scorers": scorers}, "run": run}
    (run_dir / "config.yaml").write_text(json.dumps(config))
    return run_dir


@pytest.mark.parametrize("case", ["no_llm_judge", "sample_ids_file", "asked_again"])
def test_what_a_run_cannot_be_judged_for_is_one_line(tmp_path: Path, capsys, case: str):
    judged = {"kind": "llm_judge", "name": "quality", "rubric": "{{ output }}"}
    scorers, run, extra = {
        "no_llm_judge": ([{"kind": "token_f1", "name": "f1"}], {}, []),
        "sample_ids_file": ([judged], {"sample_ids_file": "/etc/hostname"}, []),
        "asked_again": ([judged], {}, ["model=gpt4o"]),
    }[case]
    run_dir = _finished(tmp_path, scorers, run)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main([str(run_dir), "judge=gpt4o", *extra]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert {"no_llm_judge": "has no llm_judge scorer", "sample_ids_file": "give it again",
            "asked_again": "comes from RUN"}[case] in line  # fmt: skip
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("override", ["run.resume={run}", "run.dir={run}/sub", "+run.dir={run}/../run/x", "run.output_root={run}",
                                      "run.cache_dir={run}/cache", "tracking.tracking_uri=sqlite:///{run}/m.db",
                                      "tracking.artifact_root=file://{run}/art"])  # fmt: skip
def test_an_override_cannot_write_into_the_judged_run(tmp_path: Path, capsys, monkeypatch, override: str):
    """RUN is read, never written: run.resume=RUN would append the judged rows to RUN's own
    journal and replace its summary; the other places put files inside it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run_dir = _finished(tmp_path, [], {})
    bench = to_plain(compose(["benchmark=explain_mini"]))["benchmark"]  # a valid task with llm_judge scorers
    (run_dir / "config.yaml").write_text(json.dumps({"config_format": 2, "benchmark": bench, "run": {}}))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    assert main([str(run_dir), "judge=gpt4o", override.format(run=run_dir)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "inside the run judged" in line, line
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_run_directory_never_makes_evalkit_judge_import_a_module(tmp_path: Path, capsys, monkeypatch):
    """RUN's config.yaml naming ``benchmark.module`` (tampered): evalkit.judge must not import
    it — ``python -m`` puts the current directory on sys.path, so a module planted beside the
    run would run. The benchmark is found built in or by entry point, as rescore does."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run_dir = _finished(tmp_path, [], {})
    bench = to_plain(compose(["benchmark=explain_mini"]))["benchmark"]
    bench = {**{k: v for k, v in bench.items() if k != "kind"}, "name": "planted_bench", "module": "planted_by_run"}
    (run_dir / "config.yaml").write_text(json.dumps({"config_format": 2, "benchmark": bench, "run": {}}))
    marker = tmp_path / "imported"
    (tmp_path / "planted_by_run.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="unknown benchmark 'planted_bench'"):
        judged_config(run_dir, read_run(run_dir)[0], ["judge=gpt4o"])
    assert not marker.exists(), "a module named by a run directory was imported"


def test_a_dry_run_of_evalkit_judge_sends_and_writes_nothing_and_needs_no_key(tmp_path: Path, capsys, monkeypatch):
    """A README walk-through: ``evalkit.judge RUN judge=dsv4 run.dry_run=true`` with no
    DEEPSEEK_API_KEY ran for real (Ray, requests to the provider, a .judged- directory)."""
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    run_dir = _finished(tmp_path, [], {})
    bench = to_plain(compose(["benchmark=explain_mini"]))["benchmark"]
    (run_dir / "config.yaml").write_text(json.dumps({"config_format": 2, "benchmark": bench, "run": {}}))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    assert main([str(run_dir), "judge=dsv4", "run.dry_run=true", f"run.output_root={tmp_path / 'out'}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("evalkit: dry run") and "request" in out, out
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
