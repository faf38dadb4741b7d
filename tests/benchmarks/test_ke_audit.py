"""KE offline audit (spec §10) over the fixture history and over evalkit's own runs."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.audit import main as audit_main
from evalkit.audit import run_audit
from evalkit.benchmarks.ke.audit import audit_run
from evalkit.benchmarks.ke.data import load_ke

LISTED = ("verdict", "flags", "coverage", "empty_responses", "gold_mismatches", "score_mismatches",
          "summary_issues", "summary_claims", "under_current_protocol")  # fmt: skip


@pytest.fixture(scope="module")
def ke_dir(shared_data_dir: Path) -> Path:
    return shared_data_dir / "ke"


@pytest.fixture(scope="module")
def data(ke_dir: Path):
    return load_ke(ke_dir / "pilot.jsonl", ke_dir / "icl_examples.jsonl")


def _tree_digest(root: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def test_audit_equals_expected_audit_json(ke_dir: Path) -> None:
    history = ke_dir / "history"
    expected = json.loads((history / "expected_audit.json").read_text(encoding="utf-8"))["runs"]
    before = _tree_digest(history)
    result = run_audit([history], ke_dir / "pilot.jsonl", ke_dir / "icl_examples.jsonl")
    assert _tree_digest(history) == before  # never rewrites history
    assert set(result["runs"]) == set(expected)
    for name, want in expected.items():
        got = result["runs"][name]
        for key, value in want.items():
            if key == "under_current_protocol":  # expected lists a subset of our fields
                assert {k: got[key][k] for k in value} == value, name
            else:
                assert got[key] == value, (name, key)


def test_audit_details_of_the_flagged_run(ke_dir: Path, data) -> None:
    a = audit_run(ke_dir / "history" / "model-b_0shot_20261013-093012_p52210", data)
    assert a["mode"] == "completion" and a["layout"] == "legacy"
    assert a["recomputed"]["f1"] == pytest.approx(0.606044, abs=1e-6)  # the recorded convention reproduces
    assert "f1_macro" not in a["under_current_protocol"] and "partial_f1_macro" in a["under_current_protocol"]
    assert a["comparable"] is False
    assert a["not_recorded"] == ["data_fingerprint", "prompt_hash", "code_hash"]


def test_cli_table_exit_codes_and_json(ke_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "audit.json"
    args = [str(ke_dir / "history"), "--pilot", str(ke_dir / "pilot.jsonl"), "--icl", str(ke_dir / "icl_examples.jsonl")]
    assert audit_main(args + ["--json", str(out)]) == 1  # one run flagged
    table = capsys.readouterr().out
    assert "model-a_0shot_20261012-101530_p41877" in table and "empty_response_scored" in table
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["runs"]["model-a_0shot_20261012-101530_p41877"]["verdict"] == "pass"
    assert audit_main([str(ke_dir / "history" / "model-a_0shot_20261012-101530_p41877")] + args[1:]) == 0


@pytest.mark.slow
def test_cli_errors_are_one_line_exit_2(ke_dir: Path, tmp_path: Path) -> None:
    def run(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "evalkit.audit", *a], capture_output=True, text=True)

    r = run(str(tmp_path / "nope"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such directory" in r.stderr
    r = run(str(ke_dir / "history"))  # legacy runs record no pilot path
    assert r.returncode == 2 and "--pilot and --icl are required" in r.stderr
    r = run(str(ke_dir / "history"), "--pilot", str(ke_dir / "pilot.jsonl"), "--icl", str(ke_dir / "history" / "x.jsonl"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = run(str(ke_dir / "history"), "--pilot", str(ke_dir / "pilot.jsonl"), "--icl", str(ke_dir / "icl_examples.jsonl"),
            "--json", str(ke_dir / "history" / "out.json"))  # fmt: skip
    assert r.returncode == 2 and "refusing to write inside" in r.stderr
    assert not (ke_dir / "history" / "out.json").exists()


def _copy_run(ke_dir: Path, tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(ke_dir / "history" / name, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    dst.chmod(0o755)
    return dst


def _rewrite(path: Path, fn) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = fn(rows)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_each_check_raises_its_flag(ke_dir: Path, tmp_path: Path, data) -> None:
    name = "model-a_0shot_20261012-101530_p41877"
    # A1: a missing item, a duplicate and a leaked ICL id
    run = _copy_run(ke_dir, tmp_path / "a1", name)

    def cov(rows):
        leaked = dict(rows[0], sample_id="code_ke_1f0c77a2", gold_step_ids=["step_000", "step_002"])
        return rows[1:] + [rows[1], leaked]

    _rewrite(run / "predictions.jsonl", cov)
    a = audit_run(run, data)
    assert "coverage" in a["flags"] and a["coverage"] == {
        "missing": ["code_ke_834b34a9"], "extra": ["code_ke_1f0c77a2"], "duplicates": ["code_ke_2b7e4f10"]}  # fmt: skip
    # the text verdict says what each flag found
    from evalkit.audit import _why

    assert _why(a, "coverage") == "coverage (1 missing, 1 extra, 1 duplicates)"
    # A3 + A4: stored gold differs; stored f1 differs
    run = _copy_run(ke_dir, tmp_path / "a3", name)

    def gold(rows):
        rows[2]["gold_step_ids"] = ["step_001"]
        rows[3]["f1"] = 0.123
        return rows

    _rewrite(run / "predictions.jsonl", gold)
    a = audit_run(run, data)
    assert a["gold_mismatches"] == ["code_ke_9d31a6c4"] and a["score_mismatches"] == ["code_ke_47ac0e2d"]
    assert a["flags"] == ["gold_mismatch", "score_mismatch"] and a["verdict"] == "flagged"
    # A5: the summary claims a failure count that does not add up
    run = _copy_run(ke_dir, tmp_path / "a5", name)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    summary["n_failed"] = 3
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    a = audit_run(run, data)
    assert a["flags"] == ["summary_inconsistent"] and "12 + 3 != 12" in a["summary_issues"][0]


def test_unrecorded_mode_is_recomputed_only_when_both_modes_agree(ke_dir: Path, tmp_path: Path, data) -> None:
    run = _copy_run(ke_dir, tmp_path, "model-b_0shot_20261013-093012_p52210")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    del summary["mode"]
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    a = audit_run(run, data)
    assert a["mode"] == "not recorded" and "mode_unknown" in a["flags"]
    # the responses beginning with digits are exactly the ones whose parse depends on the mode
    rows = [json.loads(x) for x in (run / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert a["mode_unknown"] == [r["sample_id"] for r in rows if r["response"] and r["response"].lstrip(" \t")[:1].isdigit()]


def test_audit_of_evalkit_runs_reads_paths_from_config(run_eval, ke_dir: Path, tmp_path: Path) -> None:
    args = ["benchmark=ke", f"benchmark.pilot_path={ke_dir / 'pilot.jsonl'}", f"benchmark.icl_path={ke_dir / 'icl_examples.jsonl'}"]
    ref = run_eval(args + ["model=reference"], output_root=tmp_path / "r1")
    base = run_eval(args + ["model=baseline_first_k"], output_root=tmp_path / "r2")
    before = _tree_digest(ref.run_dir)
    result = run_audit([ref.run_dir, base.run_dir])
    assert _tree_digest(ref.run_dir) == before
    runs = list(result["runs"].values())
    assert [r["verdict"] for r in runs] == ["pass", "pass"] and all(r["layout"] == "evalkit" for r in runs)
    assert runs[1]["recorded_scores"]["f1"] == pytest.approx(base.summary["metrics"]["f1_macro"])
    assert runs[1]["under_current_protocol"]["f1_macro"] == pytest.approx(base.summary["metrics"]["f1_macro"])
    # a tampered score in an evalkit journal is caught
    rows = [json.loads(x) for x in (base.run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    rows[0]["scores"]["f1"] = 1.0
    (base.run_dir / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tampered = run_audit([base.run_dir])["runs"]
    assert list(tampered.values())[0]["score_mismatches"] == [rows[0]["sample_id"]]


def test_a_folder_of_model_folders_is_searched_for_runs(ke_dir: Path, tmp_path: Path) -> None:
    """``python -m evalkit.audit outputs/runs/ke`` finds ``<model>/<run>/`` below it."""
    from evalkit.benchmarks.ke.audit import expand_dirs

    for name in ("model-a_0shot_20261012-101530_p41877", "model-b_0shot_20261013-093012_p52210"):
        shutil.copytree(ke_dir / "history" / name, tmp_path / "runs" / name.split("_")[0] / name)
    found = expand_dirs([tmp_path / "runs"])
    assert [p.name for p in found] == ["model-a_0shot_20261012-101530_p41877", "model-b_0shot_20261013-093012_p52210"]
