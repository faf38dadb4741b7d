"""The run journal's one reader (evalkit.journal): every reader of a run directory — the
engine's scoring, the MLflow samples table, compare, rescore — counts the same row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from evalkit import compare as compare_mod
from evalkit import rescore as rescore_mod
from evalkit.journal import MAX_REPEATS, read_journal
from evalkit.track import requests_of
from evalkit.tracking.samples import outcomes

ACE = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture
def stale_first(run_eval):
    """A finished reference run whose journal holds, before a sample's row, a stale row of
    that sample (recorded under another request, scored 0); the run resumed, so that the
    engine finalized it with the stale row in place."""
    first = run_eval(ACE)
    preds = first.run_dir / "predictions.jsonl"
    lines = _lines(preds)
    fresh = json.loads(lines[0])
    stale = {**fresh, "request_hash": "0" * 64, "scores": {"accuracy": 0.0}, "output": "[wrong()]"}
    _write(preds, [json.dumps(stale)] + lines)
    again = run_eval(ACE + [f"run.resume={first.run_dir}"])
    return again, fresh


@pytest.mark.slow  # over 2 s: two runs, or a 1 MiB answer
def test_a_stale_row_before_a_fresh_one_counts_nowhere(stale_first):
    """Issue 26 item 13: the engine scored the sample 1.0 from the fresh row while the
    MLflow samples table showed it not_run (it kept the stale first row, then refused it)
    and compare took the stale 0."""
    res, fresh = stale_first
    sid = fresh["sample_id"]
    summary = res.summary
    assert summary["status"] == "complete" and summary["metrics"]["accuracy/normal_atom_bool"] == 1.0
    recorded = yaml.safe_load((res.run_dir / "config.yaml").read_text(encoding="utf-8"))
    typed = res.typed
    with_requests = {o.sample_id: o for o in outcomes(res.run_dir, typed, requests_of(res.run_dir, recorded))}
    without = {o.sample_id: o for o in outcomes(res.run_dir, typed)}
    for table in (with_requests, without):
        assert len(table) == 3
        assert table[sid].ok and table[sid].row["scores"] == {"accuracy": 1.0}
        assert table[sid].row["request_hash"] == fresh["request_hash"]
    run = compare_mod.load_run(res.run_dir)
    assert run.rows[sid]["scores"] == {"accuracy": 1.0} and len(run.rows) == 3
    assert rescore_mod.rescore(res.run_dir)["changed"] == []
    assert summary["stale_lines"] == [1]  # what readers without the requests skip


def test_rows_per_sample_and_epoch_first_wins_and_damage_is_counted(tmp_path):
    path = tmp_path / "predictions.jsonl"
    rows = [
        {"sample_id": "a", "epoch": 0, "scores": {"s": 1.0}},
        {"sample_id": "a", "epoch": 1, "scores": {"s": 0.0}},
        {"sample_id": "a", "epoch": 1, "scores": {"s": 1.0}},  # a later duplicate: ignored, said
        {"sample_id": "b", "scores": {"s": 1.0}},  # no epoch: written before repeats, epoch 0
        {"sample_id": "c", "epoch": MAX_REPEATS, "scores": {"s": 1.0}},
        {"sample_id": "d", "epoch": 1e8, "scores": {"s": 1.0}},
        {"sample_id": 7, "scores": {"s": 1.0}},
        {"sample_id": "e", "scores": ["x"]},
    ]
    _write(path, [json.dumps(r) for r in rows] + ["not json", '{"torn'])
    journal = read_journal(path)
    assert list(journal.rows) == [("a", 0), ("a", 1), ("b", 0)]
    assert journal.rows[("a", 1)]["scores"] == {"s": 0.0}
    assert journal.duplicates == [(("a", 1), 3)] and journal.conflicts[0][:3] == ("a", 2, 3)
    assert [line for line, _ in journal.invalid] == [5, 6, 7, 8]
    assert "epoch 10000 out of range" in journal.invalid[0][1] and "epoch is float" in journal.invalid[1][1]
    assert journal.unreadable == [9, 10]
    problems = journal.problems()
    assert "unreadable lines 9, 10 skipped" in problems and "invalid rows skipped: line 5" in problems


@pytest.mark.parametrize("epoch", [100_000_000, 1e8, -1, "1", True])
def test_rescore_and_compare_refuse_a_row_at_an_impossible_epoch_in_one_line(run_eval, capsys, epoch):
    """Issue 25 item 11: a journal row at epoch 1e8 made rescore allocate 1e8 epochs
    (MemoryError). Now rescore, compare and track say which line, exit 2."""
    res = run_eval(ACE)
    preds = res.run_dir / "predictions.jsonl"
    lines = _lines(preds)
    row = json.loads(lines[1])
    row["epoch"] = epoch
    _write(preds, [lines[0], json.dumps(row), lines[2]])
    assert rescore_mod.main([str(res.run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"evalkit: error: {preds}:2: not a journal row: epoch")
    assert compare_mod.main([str(res.run_dir), str(res.run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{preds}:2: not a journal row: epoch" in err[0]
    from evalkit import track as track_mod
    from evalkit.errors import RunDirError

    with pytest.raises(RunDirError, match=f"^{re.escape(str(preds))}:2: not a journal row: epoch"):
        track_mod.read_run(res.run_dir)  # before anything is logged


# ------------------------------------------------------------------------------------------
# the typed summary: counts with repeats, the console line, check_report.sh, validation
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.slow  # over 2 s: two runs, or a 1 MiB answer
def test_counts_with_repeats_are_samples_and_rows(run_eval, tmp_path, capsys):
    """Issue 26 items 2, 9, 17: with run.repeats=3 and one of 4 samples never answered,
    n_scored/n_failed count samples (3 + 1 == n_samples 4), the rows are counted apart
    (9 + 3 == n_requested 12), the console says "1 of 4 samples failed" (it said "3 of 4
    samples failed") and check_report.sh accepts a complete run with repeats (it said
    n_scored + n_failed = 12 != n_samples = 4)."""
    from evalkit.job import outcome_line

    sel = ["benchmark.subsets=[normal_atom_enum]", "run.limit=4", "run.repeats=3"]
    first = run_eval(["model=reference", *sel])
    s = first.summary
    assert (s["n_samples"], s["n_scored"], s["n_failed"], s["n_scored_rows"], s["n_failed_rows"], s["n_requested"]) == (4, 4, 0, 12, 0, 12)
    rows = [r for r in read_journal(first.run_dir / "predictions.jsonl").rows.values() if r["epoch"] == 0]
    replay = tmp_path / "outputs.jsonl"
    _write(replay, [json.dumps({"sample_id": r["sample_id"], "output": r["output"]}) for r in rows[:3]])
    res = run_eval(["model=replay", f"model.path={replay}", *sel])
    s = res.summary
    assert (s["n_samples"], s["n_scored"], s["n_failed"], s["n_scored_rows"], s["n_failed_rows"], s["n_requested"]) == (4, 3, 1, 9, 3, 12)
    assert s["failed_ids"] == [rows[3]["sample_id"]]
    assert outcome_line(res).startswith("evalkit: INCOMPLETE: 1 of 4 samples failed (3 of 12 answers) (missing_output: 3)")
    check = _check_report(first.run_dir)
    assert check.returncode == 0 and check.stdout.strip() == f"OK {first.run_dir}", check.stdout + check.stderr
    # a summary written before the counts were defined (schema 1: rows as n_scored) reads the same
    old = json.loads((first.run_dir / "summary.json").read_text(encoding="utf-8"))
    old.update(schema_version=1, n_scored=12, n_failed=0)
    del old["n_scored_rows"], old["n_failed_rows"]
    (first.run_dir / "summary.json").write_text(json.dumps(old), encoding="utf-8")
    assert _check_report(first.run_dir).returncode == 0
    assert compare_mod.load_run(first.run_dir).summary.n_scored == 4


def _check_report(path: Path):
    import subprocess

    from tests.conftest import REPO_ROOT

    return subprocess.run(["bash", str(REPO_ROOT / "bash" / "check_report.sh"), str(path)], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    "change, field",
    [
        ({"repeats": "many"}, "repeats: expected an integer, got str 'many'"),
        ({"repeats": 1e9}, "repeats: expected an integer, got float 1000000000.0"),
        ({"repeats": 10**9}, "repeats: Input should be less than or equal to 10000"),
        ({"metrics": [0.5, 1.0]}, "metrics: Input should be a valid dictionary"),
        ({"metrics": {"accuracy": "1.0"}}, "metrics.accuracy: expected a number, got str"),
        ({"n_scored": -1}, "n_scored: Input should be greater than or equal to 0"),
        ({"stale_lines": "1"}, "stale_lines: Input should be a valid list"),
    ],
)
def test_a_malformed_summary_is_one_line_for_every_reader(run_eval, capsys, change, field):
    """Issue 25 item 11: compare on a summary.json with wrong types (repeats "many",
    metrics as a list, repeats 1e9 → MemoryError) gave tracebacks. Every reader of a run
    directory now says which field, in one line, exit 2."""
    from evalkit import track as track_mod
    from evalkit.errors import RunDirError

    res = run_eval(ACE)
    path = res.run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **change}), encoding="utf-8")
    line = f"{path}: not an evalkit summary: {field}"
    for main in (rescore_mod.main, lambda a: compare_mod.main(a + a)):
        assert main([str(res.run_dir)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"evalkit: error: {line}"], err
    with pytest.raises(RunDirError) as exc:
        track_mod.read_run(res.run_dir)
    assert str(exc.value) == line


@pytest.mark.slow  # over 2 s: two runs, or a 1 MiB answer
def test_audit_scores_a_capped_output_in_full_from_its_side_file(run_eval, shared_data_dir, tmp_path, capsys):
    """Issue 25 items 6 and 8: a KE answer over 1 MiB is capped in its journal row (the first
    4,096 characters kept, the whole text in its side file). The audit read only the row
    and flagged "recorded F1 1.0 but recomputed 0.0"; through the journal's one reader it
    scores the whole answer, as the run did."""
    from evalkit.benchmarks.ke.audit import audit_run
    from evalkit.benchmarks.ke.data import load_ke

    ke = shared_data_dir / "ke"
    sid = "code_ke_834b34a9"  # gold: step_000, step_004, step_005
    replay = tmp_path / "big.jsonl"
    _write(replay, [json.dumps({"sample_id": sid, "output": "a " * 600_000 + "step_000, step_004, step_005"})])
    res = run_eval(["benchmark=ke", f"benchmark.pilot_path={ke / 'pilot.jsonl'}", f"benchmark.icl_path={ke / 'icl_examples.jsonl'}",
                    "model=replay", f"model.path={replay}", f"run.sample_ids=[{sid}]"])  # fmt: skip
    (row,) = read_journal(res.run_dir / "predictions.jsonl").rows.values()
    assert "large" in row and len(row["output"]) == 4096 and row["scores"]["f1"] == 1.0
    audit = audit_run(res.run_dir, load_ke(ke / "pilot.jsonl", ke / "icl_examples.jsonl"))
    assert audit["score_mismatches"] == [] and audit["empty_responses"] == []
    assert "score_mismatch" not in audit["flags"] and audit["under_current_protocol"]["n_succeeded"] == 1
    # a malformed summary.json or journal row is one line, exit 2, for the audit too
    from evalkit.audit import main as audit_main

    args = [str(res.run_dir), "--pilot", str(ke / "pilot.jsonl"), "--icl", str(ke / "icl_examples.jsonl")]
    path = res.run_dir / "summary.json"
    good = path.read_text(encoding="utf-8")
    path.write_text(json.dumps({**json.loads(good), "repeats": 1e9}), encoding="utf-8")
    assert audit_main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"evalkit.audit: error: {path}: not an evalkit summary: repeats: expected an integer, got float 1000000000.0"
    ]
    path.write_text(good, encoding="utf-8")
    preds = res.run_dir / "predictions.jsonl"
    _write(preds, [json.dumps({**json.loads(_lines(preds)[0]), "epoch": 100_000_000})])
    assert audit_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"evalkit.audit: error: {preds}:1: not a journal row: epoch 100000000 out of range (0 to 9999)"]


def test_rows_outside_a_resumed_selection_count_nowhere_and_are_not_called_stale(run_eval, caplog):
    """A run resumed with a smaller selection (run.limit 3 → 2): the engine's summary leaves
    out the third sample; compare, which has no requests, leaves it out too (its line is in
    stale_lines), and the resume does not warn of it as a stale row."""
    first = run_eval(ACE)
    third = json.loads(_lines(first.run_dir / "predictions.jsonl")[2])["sample_id"]
    again = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=2", f"run.resume={first.run_dir}"])
    assert again.summary["n_samples"] == 2 and again.summary["stale_lines"] == [3]
    run = compare_mod.load_run(first.run_dir)
    assert third not in run.rows and len(run.rows) == 2
    assert "stale rows" not in caplog.text


def test_read_summary_refuses_a_link_and_deep_nesting_in_one_line(tmp_path):
    """summary.json is read without following a symbolic link (a run directory is untrusted)
    and JSON nested past Python's recursion limit is one line, not a RecursionError."""
    from evalkit.errors import RunDirError
    from evalkit.summary import read_summary

    (tmp_path / "elsewhere.json").write_text("{}", encoding="utf-8")
    (tmp_path / "summary.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(RunDirError, match=r"summary.json: a symbolic link, never followed here; not read$"):
        read_summary(tmp_path / "summary.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(RunDirError, match=r"deep.json: JSON nested too deeply \(more than 200 levels\); not read$"):
        read_summary(tmp_path / "deep.json")


def test_a_summary_that_does_not_validate_is_still_written_and_said(tmp_path, caplog):
    """The engine writes summary.json through the model; a value the model refuses (a
    defect of whatever built it) is one ERROR line, and the run's summary is not lost."""
    from evalkit.summary import write_summary

    built = {"status": "complete", "benchmark": "x", "model": "m", "n_samples": 1, "n_scored": 1, "n_failed": 0,
             "metrics": {"accuracy": None}}  # fmt: skip
    unvalidated = write_summary(tmp_path / "summary.json", built)
    assert (unvalidated.status, unvalidated.metrics) == ("complete", {"accuracy": None})  # as built, for the run's own readers
    assert json.loads((tmp_path / "summary.json").read_text(encoding="utf-8")) == built
    assert "metrics.accuracy: expected a number, got NoneType (written as built)" in caplog.text


def test_rescore_says_which_journal_lines_it_skipped(run_eval, capsys):
    """Issue 26 item 11: rescore said nothing about damaged journal lines. It prints the
    journal reader's one warning line (unreadable lines, conflicting duplicates) and goes on."""
    res = run_eval(ACE)
    preds = res.run_dir / "predictions.jsonl"
    lines = _lines(preds)
    other = {**json.loads(lines[1]), "scores": {"accuracy": 0.0}}
    _write(preds, lines + [json.dumps(other), "not json"])
    assert rescore_mod.main([str(res.run_dir)]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and "unreadable lines 5 skipped" in warned[0]
    assert f"sample {other['sample_id']} journaled twice with different scores: line 2" in warned[0]
