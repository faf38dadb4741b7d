"""``python -m evalkit.rescore``: the journal rows that are not the run's, a rescored
gate-decided run, links and files that are not regular, a bad ``--set`` value, an interrupted
run without its summary (issues 32, 35)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit import rescore as rescore_mod

ACE = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"]


def _append(path: Path, rows: list[dict]) -> None:
    import json

    with open(path, "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def test_rescore_names_extra_journal_rows_and_scores_only_the_runs(run_eval, capsys):
    """rescore skipped a row of a sample id the data does not hold without a word, scored a
    row at an epoch the run never asked (a repeats=1 run read as 2 epochs), and said nothing
    of identical duplicates. Now it scores exactly the run's samples and epochs, names the
    others by count in its one warning line, and exits 1 (the journal holds what the run did
    not count); a duplicate alone is named but is no difference (the first row counts)."""
    import json

    from evalkit import rescore as rescore_mod

    res = run_eval(ACE)
    preds = res.run_dir / "predictions.jsonl"
    first = json.loads(preds.read_text(encoding="utf-8").splitlines()[0])
    _append(preds, [first])  # an identical duplicate
    assert rescore_mod.main([str(res.run_dir)]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and "1 journal row not rescored: 1 duplicate row of a sample and epoch already journaled (lines 4;" in warned[0]
    _append(preds, [{**first, "sample_id": "not_in_data"}, {**first, "epoch": 1, "scores": {"accuracy": 0.0}}])
    result = rescore_mod.rescore(res.run_dir)
    assert result["metrics"]["accuracy/normal_atom_bool"] == 1.0 and len(result["epochs"]) == 1
    assert (result["extra"]["unknown"], result["extra"]["beyond"]) == (["not_in_data"], [f"{first['sample_id']}@1"])
    capsys.readouterr()
    assert rescore_mod.main([str(res.run_dir)]) == 1
    out = capsys.readouterr()
    warned = [ln for ln in out.err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and "3 journal rows not rescored: 1 row of sample ids not in the benchmark's data (not_in_data)" in warned[0]
    assert "1 row at an epoch beyond the run's repeats=1" in warned[0] and "DIFFERS" not in out.out


# ---- a rescored gate-decided run: its gate walked again ------------------------------------
def _decided_run(tmp_path: Path, acebench_dir: Path) -> tuple[Path, Path]:
    """A baseline reference run and a replay run that answers nothing right, stopped by
    ``run.stop_when=noninferior:0.15`` (decided FAIL early)."""
    import json

    from tests.conftest import run_in_process

    out, common = tmp_path / "out", ["benchmark.subsets=[normal_atom_bool,normal_atom_enum,normal_atom_number]"]
    base = run_in_process(["model=reference", *common], out, acebench_dir).run_dir
    rows = [json.loads(line) for line in (base / "predictions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": "no idea"}) + "\n" for r in rows), encoding="utf-8")
    res = run_in_process(["model=replay", f"model.path={bad}", "run.stop_when=noninferior:0.15", f"run.baseline={base}",
                          "run.min_samples=5", "backend.concurrency=2", *common], out, acebench_dir)  # fmt: skip
    return base, res.run_dir


@pytest.mark.slow  # two runs
def test_a_rescored_decided_run_walks_its_gate_again_over_the_new_scores(tmp_path, acebench_dir):
    """``rescore --set`` of a run that its gate decided copied the recorded ``sequential``
    block as it was: a verdict and interval measured under the old scores beside the new
    metrics (and ``compare`` took that interval as the headline's). The gate is walked again
    over the rescored answers — the same order, seed and baseline: unchanged scores give the
    recorded block; scores now equal to the baseline's no longer FAIL. Without its baseline
    the recorded block stays, saying it was not walked again."""
    import json
    import shutil

    from evalkit.rescore import rescore, write_rescored

    base, run = _decided_run(tmp_path, acebench_dir)
    recorded = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert (recorded["status"], recorded["sequential"]["verdict"]) == ("decided", "FAIL")
    same = json.loads((write_rescored(run, rescore(run, overrides={"scoring": "evalscope"}), {"scoring": "evalscope"}) / "summary.json").read_text())
    assert {k: v for k, v in same["sequential"].items() if k != "regated"} == recorded["sequential"]
    assert same["sequential"]["regated"].startswith("walked again")
    result = rescore(run, overrides={"scoring": "evalscope"})
    for row in result["rows"].values():  # as if the new rules scored every answer as the baseline's
        row["scores"] = {k: 1.0 for k in row["scores"]}
    fixed = json.loads((write_rescored(run, result, {"scoring": "evalscope"}) / "summary.json").read_text())
    gate = fixed["sequential"]
    # every dispatched unit paired, none decides: undecided where the run stopped
    assert (gate["verdict"], gate["interval"]["delta"], gate["n_used"]) == ("CONTINUE", 0.0, recorded["n_samples"])
    assert fixed["status"] == "complete"
    shutil.rmtree(base)
    kept = json.loads((write_rescored(run, rescore(run, overrides={"scoring": "evalscope"}), {"scoring": "evalscope"}) / "summary.json").read_text())
    assert kept["sequential"]["verdict"] == "FAIL" and kept["sequential"]["regated"].startswith("not walked again")


# ---- rescore: links, files that are not regular, a bad --set value, extra samples ----------
@pytest.fixture(scope="module")
def ace_run(tmp_path_factory, acebench_dir) -> Path:
    """One reference run of 3 ACEBench samples, shared by the module's tests (each copies it)."""
    from tests.conftest import run_in_process

    return run_in_process(ACE, tmp_path_factory.mktemp("ace"), acebench_dir).run_dir


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(run, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


def _err_lines(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: error:")]


@pytest.mark.parametrize("where", ["rescored", "rescored/evalscope"])
def test_rescore_set_never_writes_through_a_linked_rescored_folder(ace_run, tmp_path, capsys, where):
    """``RUN/rescored`` linked to a folder outside the run: ``rescore --set`` wrote the
    rescored run there (exit 0); ``RUN/rescored/<label>`` a link: an ``rmtree`` traceback
    text. Both are one line naming the link, exit 2, nothing written outside."""
    from evalkit import rescore as rescore_mod

    run, outside = _copy(ace_run, tmp_path), tmp_path / "outside"
    outside.mkdir()
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (run / where).symlink_to(outside)
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and f"{run / where}: a symbolic link" in errs[0] and "rmtree" not in errs[0]
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("sets", [[], ["--set", "benchmark.scoring=evalscope"]])
def test_rescore_refuses_a_linked_summary_even_dangling(ace_run, tmp_path, capsys, sets):
    """A dangling ``summary.json`` link read as "the run did not finish" (``exists()``
    follows links): now refused in one line, exit 2, with and without ``--set``."""
    from evalkit import rescore as rescore_mod

    run = _copy(ace_run, tmp_path)
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(tmp_path / "missing.json")
    assert rescore_mod.main([str(run), *sets]) == 2
    out = capsys.readouterr()
    errs = [ln for ln in out.err.splitlines() if ln.startswith("evalkit: error:")]
    assert len(errs) == 1 and "summary.json: a symbolic link, never followed here; not read" in errs[0]
    assert "did not finish" not in out.err


def test_rescore_names_a_predictions_fifo_as_not_a_regular_file(ace_run, tmp_path, capsys):
    """A FIFO ``predictions.jsonl`` was "not an evalkit run directory (... needed)"."""
    import os

    from evalkit import rescore as rescore_mod

    run = _copy(ace_run, tmp_path)
    (run / "predictions.jsonl").unlink()
    os.mkfifo(run / "predictions.jsonl")
    assert rescore_mod.main([str(run)]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and f"{run / 'predictions.jsonl'}: not a regular file" in errs[0]
    (run / "predictions.jsonl").unlink()
    assert rescore_mod.main([str(run)]) == 2 and "not an evalkit run directory" in _err_lines(capsys)[0]


def test_rescore_blames_the_set_value_not_the_runs_config(ace_run, tmp_path, capsys):
    """``--set benchmark.scoring=../../x`` was reported as ``RUN/config.yaml: benchmark.scoring``."""
    from evalkit import rescore as rescore_mod

    run = _copy(ace_run, tmp_path)
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=../../x"]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and "--set benchmark.scoring='../../x'" in errs[0] and "config.yaml" not in errs[0]
    assert not (run / "rescored").exists()


def test_rescore_scores_only_the_runs_own_selection_with_and_without_set(ace_run, tmp_path, capsys):
    """Rows of a 4th sample (in the data, not in the run's ``run.limit=3`` selection) were
    scored by ``rescore --set`` (exit 0, 4 rows written, the metric changed, the summary
    still saying 3 samples). Both paths now tell the run's rows by its own selection
    (``run_selection``): not scored, named in the one warning line; the plain path exits 1."""
    import json

    from evalkit import rescore as rescore_mod
    from evalkit.rescore import load_benchmark

    run = _copy(ace_run, tmp_path)
    preds = run / "predictions.jsonl"
    rows = [json.loads(ln) for ln in preds.read_text(encoding="utf-8").splitlines()]
    fourth = next(s.id for s in load_benchmark(run).load() if s.id not in {r["sample_id"] for r in rows})
    _append(preds, [{**rows[0], "sample_id": fourth}])  # the first sample's answer: wrong for the 4th
    assert rescore_mod.main([str(run)]) == 1
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and f"1 journal row not rescored: 1 row of samples outside the run's selection ({fourth})" in warned[0]
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalkit: warning:")]
    assert len(warned) == 1 and "1 row of samples outside the run's selection" in warned[0]
    new = run / "rescored" / "evalscope"
    written = [json.loads(ln)["sample_id"] for ln in (new / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    summary = json.loads((new / "summary.json").read_text(encoding="utf-8"))
    assert sorted(written) == sorted(r["sample_id"] for r in rows) and fourth not in written
    assert (summary["n_samples"], summary["n_scored_rows"]) == (3, 3) and summary["metrics"]["overall"] == 1.0


def test_rescore_set_refuses_rows_of_more_samples_when_the_selection_cannot_be_rebuilt(ace_run, tmp_path, capsys):
    """Without a selection to tell them by (here ``run.limit`` no longer validates), rows of
    more samples than the summary's ``n_samples`` cannot be told from the run's: ``--set``
    refuses in one line (exit 2) rather than write a run whose rows its summary does not count."""
    import json

    import yaml

    from evalkit import rescore as rescore_mod
    from evalkit.rescore import load_benchmark

    run = _copy(ace_run, tmp_path)
    cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    cfg["run"]["limit"] = "three"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    preds = run / "predictions.jsonl"
    rows = [json.loads(ln) for ln in preds.read_text(encoding="utf-8").splitlines()]
    fourth = next(s.id for s in load_benchmark(run).load() if s.id not in {r["sample_id"] for r in rows})
    _append(preds, [{**rows[0], "sample_id": fourth}])
    assert rescore_mod.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 2
    errs = _err_lines(capsys)
    assert len(errs) == 1 and "rows of 4 samples, 1 more than the n_samples=3" in errs[0] and not (run / "rescored").exists()


@pytest.mark.slow  # a run
def test_rescore_of_an_interrupted_run_says_it_has_no_summary(run_eval, capsys):
    """An interrupted run (no summary.json) printed DIFFERS on every metric and exited 1.
    Now one line says it has no summary.json; the verdicts are still compared (none changed: 0)."""
    res = run_eval(ACE)
    (res.run_dir / "summary.json").unlink()
    assert rescore_mod.main([str(res.run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "DIFFERS" not in out and "accuracy" in out
    said = [ln for ln in err.splitlines() if "no summary.json" in ln]
    assert len(said) == 1 and str(res.run_dir) in said[0]
