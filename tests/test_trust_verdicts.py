"""Verdicts only from primary records (issue 43, item 2): ``compare``, ``compare --gate``,
``rescore`` and ``run.baseline`` derive every number from the journals; a summary whose
figures disagree with its journal is refused naming the field; the sequential interval is
the gate replayed over the journal (the walk a resume makes); a journal score that is not a
finite number in the benchmark's range is one line, exit 2.

Runs are real and offline: SOBHard (22 samples) answered by the reference model (the
baseline), and replays of it wrong on every sample — one gated by ``run.stop_when`` (it
stops early with FAIL), one not."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit import compare as compare_mod
from evalkit import rescore as rescore_mod
from evalkit.errors import ConfigError, RunDirError
from evalkit.journal import read_journal, row_problem
from tests.conftest import REPO_ROOT, run_in_process
from tests.support.host import time_limit

GATE = "noninferior:0.15"
HEAD = "sample_pass_rate"


def _sob(data: Path) -> list[str]:
    return ["benchmark=sobhard", f"benchmark.data_dir={data / 'sobhard'}", "tracking=none", "run.progress=false"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, acebench_dir: Path, shared_data_dir: Path):
    """``{"base", "gated", "plain", "args"}``: the reference run; a replay wrong on every
    sample gated by ``run.stop_when=noninferior:0.15`` against it (decided FAIL); the same
    replay not gated. Made once; tests edit copies."""
    tmp = tmp_path_factory.mktemp("verdicts")

    def run(overrides: list[str]) -> Path:
        return run_in_process(overrides, tmp / "outputs", acebench_dir).run_dir

    base = run([*_sob(shared_data_dir), "model=reference"])
    wrong = tmp / "wrong.jsonl"
    rows = [json.loads(line) for line in (base / "predictions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    wrong.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": "no idea"}) + "\n" for r in rows), encoding="utf-8")
    replay = [*_sob(shared_data_dir), "model=replay", f"model.path={wrong}"]
    gated = run([*replay, f"run.stop_when={GATE}", f"run.baseline={base}", "run.min_samples=5", "backend.concurrency=2"])
    plain = run(replay)
    return {"base": base, "gated": gated, "plain": plain, "data": shared_data_dir / "sobhard", "shared": shared_data_dir}


def _copy(run: Path, where: Path) -> Path:
    shutil.copytree(run, where)
    return where


def _edit_summary(run: Path, **changes) -> dict:
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    summary.update(changes)
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return summary


def _compare(capsys, *args: str) -> tuple[int, str, str]:
    """``python -m evalkit.compare ARGS`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = compare_mod.main([*map(str, args), "--resamples", "200"])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_error_line(err: str) -> str:
    """The one ``evalkit: error:`` line of ``err`` (exactly one, no traceback)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("evalkit: error:")]
    assert len(lines) == 1, err
    return lines[0]


# ---- the journal reader: finite scores only (no run needed) ------------------------------
@pytest.mark.parametrize("value, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf"),
                                          (True, "True"), ("0.5", "'0.5'")])  # fmt: skip
def test_a_score_that_is_not_a_finite_number_does_not_count(value, shown):
    problem = row_problem({"sample_id": "a", "scores": {"accuracy": value}})
    assert problem is not None and problem.startswith("scores.'accuracy' is") and shown in problem
    assert row_problem({"sample_id": "a", "scores": {"accuracy": 1, "f1": 0.25, "none": None}}) is None


def test_json_nan_and_infinity_in_a_journal_are_refused_naming_file_line_and_value(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"sample_id": "a", "scores": {"accuracy": 1.0}}\n{"sample_id": "b", "scores": {"accuracy": NaN}}\n'
                    '{"sample_id": "c", "scores": {"accuracy": -Infinity}}\n', encoding="utf-8")  # fmt: skip
    journal = read_journal(path)
    assert list(journal.rows) == [("a", 0)] and [line for line, _ in journal.invalid] == [2, 3]
    with pytest.raises(RunDirError, match=r"predictions\.jsonl:2: not a journal row: scores\.'accuracy' is nan, not a finite number"):
        journal.raise_invalid()


@pytest.mark.parametrize("value", [-0.5, 7, 1.0000001])
def test_a_score_outside_the_benchmarks_range_is_refused_naming_file_line_and_value(tmp_path, value):
    from evalkit.benchmarks.base import Benchmark

    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"sample_id": "a", "scores": {"accuracy": 1}}) + "\n"
                    + json.dumps({"sample_id": "b", "scores": {"accuracy": value}}) + "\n", encoding="utf-8")  # fmt: skip
    journal = read_journal(path)
    assert Benchmark.score_range == (0.0, 1.0)
    with pytest.raises(RunDirError) as err:
        journal.check_scores(lambda name: Benchmark.score_range)
    assert str(err.value) == f"{path}:2: scores.'accuracy' is {value!r}, outside the benchmark's range [0, 1]"


def test_a_judge_panels_invalid_count_may_exceed_one_but_not_be_negative():
    from evalkit.benchmarks.task.benchmark import TaskBenchmark

    bench = TaskBenchmark.__new__(TaskBenchmark)
    bench.settings = type("S", (), {"scorers": [type("J", (), {"kind": "llm_judge", "score_name": "quality"})()]})()
    assert bench.score_bounds("quality") == (0.0, 1.0)
    low, high = bench.score_bounds("quality_invalid")
    assert low == 0.0 and 3 <= high and math.isinf(high)


# ---- compare --gate on forged and malformed summaries (slow: runs) -----------------------
@pytest.mark.slow
def test_the_honest_runs_gate_as_before_and_the_interval_is_the_replayed_one(runs, capsys):
    """(5) The interval compare gates on is the gate replayed over the candidate's journal
    (evalkit.rescore.replay_gate, the walk a resume makes), equal to the one the run
    recorded, number for number; the honest gate still FAILs."""
    from evalkit.rescore import recorded_run_settings, replay_gate
    from evalkit.untrusted import read_run_yaml

    gated, base = runs["gated"], runs["base"]
    recorded = json.loads((gated / "summary.json").read_text(encoding="utf-8"))["sequential"]
    assert recorded["verdict"] == "FAIL" and recorded["interval"]["n"] == recorded["n_used"]
    run = compare_mod.load_run(gated)
    figures = compare_mod.check_run(run, runs["data"])
    settings = recorded_run_settings(read_run_yaml(gated / "config.yaml"))
    hashes = {k: row.get("request_hash") for k, row in run.journal.rows.items()}
    dispatched = {sid for sid, _ in run.journal.rows} | set(run.summary.failed_ids)
    monitor, block = replay_gate(figures.bench, settings, gated, hashes, dispatched)
    assert {k: block[k] for k in recorded} == recorded and monitor.decided
    result = compare_mod.compare([base, gated], True, 0.95, 200, 0, runs["data"])
    head = result["paired"][0]["metrics"][HEAD]
    look = recorded["interval"]
    assert (head["delta"], head["low"], head["high"], head["n"]) == (look["delta"], look["low"], look["high"], look["n"])
    assert head["test"].startswith("anytime-valid")
    assert compare_mod.gate_verdict(result, GATE)["verdict"] == "FAIL"
    rc, out, _ = _compare(capsys, base, gated, "--gate", GATE, "--data-dir", runs["data"])
    assert rc == 1 and f"gate {GATE}: FAIL" in out


@pytest.mark.slow
def test_a_forged_pass_block_never_passes_the_gate(runs, capsys, tmp_path):
    """(1) A candidate wrong on every unit, its summary's sequential block edited to a PASS
    with a flattering interval: compare --gate refuses it, naming the field (it PASSed)."""
    base = runs["base"]
    forged = {"verdict": "PASS", "interval": {"n": 5, "delta": 0.2, "low": 0.1, "high": 0.3}}
    gated = _copy(runs["gated"], tmp_path / "gated")
    block = json.loads((gated / "summary.json").read_text(encoding="utf-8"))["sequential"]
    _edit_summary(gated, sequential={**block, **forged})
    rc, out, err = _compare(capsys, base, gated, "--gate", GATE, "--data-dir", runs["data"])
    line = _one_error_line(err)
    assert rc == 2 and "PASS" not in out and "sequential.verdict is 'PASS' in summary.json, its records give 'FAIL'" in line
    # only the interval edited (verdict left FAIL): refused on the interval
    gated2 = _copy(runs["gated"], tmp_path / "gated2")
    _edit_summary(gated2, sequential={**block, "interval": forged["interval"]})
    rc, out, err = _compare(capsys, base, gated2, "--gate", GATE, "--data-dir", runs["data"])
    assert rc == 2 and "sequential.interval is" in _one_error_line(err)
    # a block forged onto a run that was never gated (config.yaml has no run.stop_when)
    plain = _copy(runs["plain"], tmp_path / "plain")
    _edit_summary(plain, status="decided", sequential={**block, **forged, "baseline": str(base)})
    rc, out, err = _compare(capsys, base, plain, "--gate", GATE, "--data-dir", runs["data"])
    line = _one_error_line(err)
    assert rc == 2 and "PASS" not in out and "sequential: a gate record, but the run's config.yaml sets no run.stop_when" in line


@pytest.mark.slow
@pytest.mark.parametrize("malform, field", [
    (lambda b: {**b, "interval": {"low": 0.5}}, "sequential.interval is {'low': 0.5} in summary.json"),  # was a KeyError
    (lambda b: {**b, "interval": "wide", "n_used": None}, "sequential.n_used is None in summary.json"),
    (lambda b: {"verdict": "PASS", "interval": {"low": 0.5}}, "sequential.verdict"),
    (lambda b: "PASS", "sequential: a str, not a gate record"),
    (lambda b: None, "sequential is None in summary.json, its records give 'a gate record'"),
])  # fmt: skip
def test_a_malformed_sequential_block_is_one_line_exit_2(runs, capsys, tmp_path, malform, field):
    """(2) A malformed block is refused in one line naming the field, exit 2, no traceback."""
    gated = _copy(runs["gated"], tmp_path / "gated")
    block = json.loads((gated / "summary.json").read_text(encoding="utf-8"))["sequential"]
    _edit_summary(gated, sequential=malform(block))
    rc, out, err = _compare(capsys, runs["base"], gated, "--gate", GATE, "--data-dir", runs["data"])
    assert rc == 2 and field in _one_error_line(err) and "PASS" not in out


@pytest.mark.slow
def test_a_malformed_block_on_the_command_line_is_its_only_output_line(runs, tmp_path):
    """(2) The command line: stderr is the one line, exit 2."""
    gated = _copy(runs["gated"], tmp_path / "gated")
    block = json.loads((gated / "summary.json").read_text(encoding="utf-8"))["sequential"]
    _edit_summary(gated, sequential={**block, "verdict": "PASS", "interval": {"low": 0.5}})
    proc = subprocess.run([sys.executable, "-m", "evalkit.compare", str(runs["base"]), str(gated), "--gate", GATE,
                           "--data-dir", str(runs["data"]), "--resamples", "200"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=time_limit(120))  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "sequential.verdict" in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("edit, field", [
    (lambda s: {"metrics": {**s["metrics"], HEAD: 0.95}}, f"metrics.{HEAD} is 0.95 in summary.json, its records give 0.0"),
    (lambda s: {"n_scored": s["n_scored"] - 1, "n_failed": s["n_failed"] + 1}, "n_scored is"),
    (lambda s: {"n_scored_rows": s["n_scored_rows"] - 2}, "n_scored_rows is"),
    (lambda s: {"headline": "format_pass_rate"}, "headline is 'format_pass_rate' in summary.json, its records give 'sample_pass_rate'"),
    (lambda s: {"status": "incomplete", "partial_metrics": {f"partial_{k}": v for k, v in s["metrics"].items()}},
     "status is 'incomplete' in summary.json, its records give 'complete'"),
])  # fmt: skip
def test_a_summary_edited_to_disagree_with_its_journal_is_refused_naming_the_field(runs, capsys, tmp_path, edit, field):
    """(3) A candidate wrong on every unit whose summary figures were edited (the headline,
    a count, what the headline is): refused in one line naming the field, exit 2; the
    same run unedited compares and FAILs the gate."""
    base, plain = runs["base"], _copy(runs["plain"], tmp_path / "plain")
    rc, out, _ = _compare(capsys, base, plain, "--gate", GATE, "--data-dir", runs["data"])
    assert rc == 1 and f"gate {GATE}: FAIL" in out
    summary = json.loads((plain / "summary.json").read_text(encoding="utf-8"))
    _edit_summary(plain, **edit(summary))
    rc, out, err = _compare(capsys, base, plain, "--gate", GATE, "--data-dir", runs["data"])
    line = _one_error_line(err)
    assert rc == 2 and field in line and str(plain / "summary.json") in line and "PASS" not in out


# ---- a baseline journal with NaN, Infinity or out-of-range scores ------------------------
def _poison(run: Path, value_text: str, every: bool) -> None:
    """Each row's (or the first row's) ``sample_pass`` score written as ``value_text`` (raw JSON)."""
    lines = (run / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        row = json.loads(line)
        if every or i == 0:
            row["scores"]["sample_pass"] = "@@"
            line = json.dumps(row).replace('"@@"', value_text)
        out.append(line)
    (run / "predictions.jsonl").write_text("\n".join(out) + "\n", encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("text, shown", [("NaN", "nan"), ("Infinity", "inf"), ("-0.5", "-0.5"), ("7", "7"),
                                         ('"1"', "str '1'"), ("true", "bool True")])  # fmt: skip
def test_a_baseline_journal_with_scores_that_are_not_finite_in_range_is_refused(runs, capsys, tmp_path, acebench_dir, text, shown):
    """(4) NaN, Infinity, out-of-range, string or bool scores in a baseline's journal: a run
    with run.stop_when=superior against it refuses in one line naming the file, the line and
    the value (with NaN on every row it PASSed after 20 units); compare and rescore too."""
    poisoned = _copy(runs["base"], tmp_path / "base")
    _poison(poisoned, text, every=True)
    overrides = [*_sob(runs["shared"]), "model=reference", "run.stop_when=superior", f"run.baseline={poisoned}"]
    with pytest.raises(ConfigError) as err:
        run_in_process(overrides, tmp_path / "outputs", acebench_dir)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"run.baseline: {poisoned / 'predictions.jsonl'}:1: ")
    assert f"scores.'sample_pass' is {shown}" in message
    assert not (tmp_path / "outputs").exists() or not list((tmp_path / "outputs").rglob("summary.json"))
    rc, out, err_text = _compare(capsys, poisoned, runs["plain"], "--gate", GATE, "--data-dir", runs["data"])
    line = _one_error_line(err_text)
    assert rc == 2 and f"{poisoned / 'predictions.jsonl'}:1: " in line and f"is {shown}" in line and "PASS" not in out
    capsys.readouterr()
    assert rescore_mod.main([str(poisoned), "--data-dir", str(runs["data"])]) == 2
    assert f"{poisoned / 'predictions.jsonl'}:1: " in _one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_a_baseline_with_one_nan_row_is_refused_on_the_command_line(runs, tmp_path):
    """(4) The command line of a gated run against a baseline with one NaN score: one line, exit 2."""
    from tests.conftest import evalkit_cmd

    poisoned = _copy(runs["base"], tmp_path / "base")
    _poison(poisoned, "NaN", every=False)
    args = [*_sob(runs["shared"]), f"run.output_root={tmp_path / 'out'}", "model=reference", "run.stop_when=superior",
            f"run.baseline={poisoned}"]  # fmt: skip
    proc = subprocess.run(evalkit_cmd(*args), capture_output=True, text=True, cwd=REPO_ROOT, timeout=time_limit(180))
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr)
    assert f"{poisoned / 'predictions.jsonl'}:1: not a journal row: scores.'sample_pass' is nan, not a finite number" in line


def test_an_incomplete_run_never_passes_a_gate():
    """Issue 43's review: a run's ``stale_lines`` decide which journal lines count, so wrong
    answers marked stale (and their samples listed as failed) leave an incomplete run whose
    scored part may look fine. A gate never PASSes an incomplete run; FAIL stands."""
    from evalkit.compare import gate_verdict

    entry = {"delta": 0.0, "low": -0.01, "high": 0.01, "n": 400, "test": "Tango"}
    result = {"paired": [{"primary": "acc", "metrics": {"acc": entry}, "level": 0.95}],
              "runs": [{"dir": "base", "status": "complete", "n_failed": 0}, {"dir": "new", "status": "incomplete", "n_failed": 7}]}
    verdict = gate_verdict(result, "noninferior:0.05")
    assert (verdict["verdict"], verdict["exit"]) == ("INCONCLUSIVE", 3)
    assert verdict["line"].endswith("; but INCONCLUSIVE: an incomplete run never passes a gate (new (7 failed); resume it)")
    result["runs"][1]["status"] = "complete"
    assert gate_verdict(result, "noninferior:0.05")["verdict"] == "PASS"
