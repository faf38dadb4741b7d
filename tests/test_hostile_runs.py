"""Hostile run directories, sample ids and outputs through whole runs (issue 25), against real
SQLite MLflow stores: a copied directory pointed at another run's id cannot take it over,
links planted in a run directory are not uploaded, a lone surrogate or a markdown image in an
output logs every trace (escaped in MLflow's copy only), and any id runs, resumes and
rescores with its own output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalkit.engine.journal import read_jsonl
from evalkit.engine.records import MAX_LINE_BYTES
from tests.conftest import base_overrides

pytestmark = pytest.mark.slow

IDS = ["en/normal_atom_bool_0", "en/normal_atom_bool_1", "en/normal_atom_bool_2", "en/agent_multi_step_0"]


def _run(root: Path, acebench: Path, *overrides: str):
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    _, cfg = resolve(compose(base_overrides(root, acebench) + list(overrides)))
    return run_validated(cfg)


def _uri(root: Path) -> str:
    return f"sqlite:///{root.resolve() / 'mlflow.db'}"


def _client(root: Path):
    import mlflow

    mlflow.set_tracking_uri(_uri(root))
    return mlflow.MlflowClient(_uri(root))


def _run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "tracking.json").read_text())["mlflow_run_id"]


def _state(root: Path, run_id: str) -> dict:
    """What the store holds of one MLflow run: tags, metrics, artifacts, trace ids."""
    import mlflow

    client = _client(root)
    run = client.get_run(run_id)
    traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=run_id, return_type="list", max_results=None)
    arts = sorted(a.path for a in client.list_artifacts(run_id))
    return {"tags": run.data.tags, "metrics": run.data.metrics, "artifacts": arts, "traces": sorted(t.info.trace_id for t in traces)}


def test_a_copied_directory_pointed_at_another_run_leaves_that_run_untouched(tmp_path: Path, acebench_dir: Path, capsys):
    """The issue's recipe: copy a run directory, set its tracking.json's mlflow_run_id to
    another run's id, drop "traces", track it. Before: exit 0 and the other run lost 7 of
    its 8 traces, its name, tags, metrics and artifacts."""
    from evalkit.track import main

    root = tmp_path / "out"
    ids = f"run.sample_ids=[{','.join(IDS)}]"
    a = _run(root, acebench_dir, "tracking=mlflow", "model=reference", ids)
    b = _run(root, acebench_dir, "tracking=mlflow", "model=reference", "run.sample_ids=[en/normal_atom_bool_3]")
    before, runs_before = _state(root, _run_id(b.run_dir)), len(_client(root).search_runs([_client(root).get_experiment_by_name("evalkit").experiment_id]))
    copy = tmp_path / "copy"
    shutil.copytree(a.run_dir, copy)
    ledger = json.loads((copy / "tracking.json").read_text())
    ledger["mlflow_run_id"] = _run_id(b.run_dir)
    del ledger["traces"]
    (copy / "tracking.json").write_text(json.dumps(ledger))
    capsys.readouterr()
    assert main(["--tracking-uri", _uri(root), str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("evalkit: error: ") and "does not belong to" in err[-1] and "nothing written" in err[-1]
    assert _state(root, _run_id(b.run_dir)) == before
    exp = _client(root).get_experiment_by_name("evalkit").experiment_id
    assert len(_client(root).search_runs([exp])) == runs_before

    # an unchanged copy is refused too (the original still holds the run); a moved one is not
    shutil.rmtree(copy)
    shutil.copytree(a.run_dir, copy)
    own = _state(root, _run_id(a.run_dir))
    assert main(["--tracking-uri", _uri(root), str(copy)]) == 2 and "is a copy of" in capsys.readouterr().err
    assert _state(root, _run_id(a.run_dir)) == own
    shutil.rmtree(a.run_dir)
    assert main(["--tracking-uri", _uri(root), str(copy)]) == 0
    assert _client(root).get_run(_run_id(copy)).data.tags["run_dir"] == str(copy.resolve())


def test_track_uses_the_store_it_is_given_never_the_directorys(tmp_path: Path, acebench_dir: Path, capsys, monkeypatch):
    from evalkit.track import main

    root, elsewhere, here = tmp_path / "out", tmp_path / "elsewhere", tmp_path / "cwd"
    res = _run(root, acebench_dir, "tracking=mlflow", f"tracking.tracking_uri={_uri(elsewhere)}", "model=reference",
               "run.sample_ids=[en/normal_atom_bool_0]")  # fmt: skip
    (res.run_dir / "tracking.json").unlink()
    here.mkdir()
    monkeypatch.chdir(here)
    capsys.readouterr()
    assert main([str(res.run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"names the tracking store {_uri(elsewhere)}, which is not used" in err
    assert f"sending {res.run_dir} to the MLflow store {_uri(here / 'outputs')}" in err
    assert (here / "outputs" / "mlflow.db").is_file()


def test_links_planted_in_a_run_directory_are_not_uploaded(tmp_path: Path, acebench_dir: Path, caplog):
    """Before: links to /etc/hostname, a secret file and a folder were uploaded."""
    from evalkit.track import main

    root, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cret-value")
    res = _run(root, acebench_dir, "model=reference", "run.sample_ids=[en/normal_atom_bool_0,en/agent_multi_step_0]")
    (res.run_dir / "hostname").symlink_to("/etc/hostname")
    (res.run_dir / "secret.txt").symlink_to(outside / "secret.txt")
    (res.run_dir / "folder").symlink_to(outside, target_is_directory=True)
    (res.run_dir / "trajectories" / "extra.json").symlink_to(outside / "secret.txt")
    assert main(["--tracking-uri", _uri(root), "--artifact-root", (root / "mlartifacts").as_uri(), str(res.run_dir)]) == 0
    uploaded = {p.relative_to(root / "mlartifacts").name for p in (root / "mlartifacts").rglob("*") if p.is_file()}
    assert {"summary.json", "predictions.jsonl"} <= uploaded
    assert not {"hostname", "secret.txt", "extra.json"} & uploaded
    assert not any("s3cret-value" in p.read_text(errors="replace") for p in (root / "mlartifacts").rglob("*") if p.is_file())
    assert sum("not uploaded" in r.message for r in caplog.records) == 4


def test_a_lone_surrogate_and_a_markdown_image_in_outputs_log_every_trace(tmp_path: Path, acebench_dir: Path, capfd):
    """Before: a lone surrogate left the MLflow run RUNNING with no traces and ~100 lines of
    "Logging error"; the image was fetched by the browser when the trace was opened."""
    import mlflow

    root = tmp_path / "out"
    ids = f"run.sample_ids=[{','.join(IDS[:3])}]"  # single-turn: replay has no rollouts
    ref = _run(root, acebench_dir, "model=reference", ids)
    rows = list(read_jsonl(ref.run_dir / "predictions.jsonl"))
    rows[0]["output"] += " \ud800"
    rows[1]["output"] += " ![x](http://127.0.0.1:9/leak.png)"
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": r["output"]}) + "\n" for r in rows))
    capfd.readouterr()
    res = _run(root, acebench_dir, "model=replay", f"model.path={replay}", "tracking=mlflow", ids)
    err = capfd.readouterr().err
    assert "Logging error" not in err and "MLflow logging failed" not in err, err[-2000:]
    stored = {r["sample_id"]: r["output"] for r in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert stored[IDS[0]].endswith(" \ud800") and stored[IDS[1]].endswith("![x](http://127.0.0.1:9/leak.png)")  # exact
    run = _client(root).get_run(_run_id(res.run_dir))
    assert run.info.status == "FINISHED"
    traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, return_type="list", max_results=None)
    assert len(traces) == 3
    by_id = {t.info.tags["sample_id"]: t for t in traces}
    assert by_id[IDS[0]].data.spans[0].outputs.endswith(" \\ud800")
    shown = json.dumps([s.to_dict() for t in traces for s in t.data.spans]) + json.dumps([t.info.to_dict() for t in traces])
    assert "](http://127.0.0.1:9/leak.png)" in shown and "![x]" not in shown


HOSTILE = ["x/y", "x__y", "L" * 1000, "nul\0id", "../../up", "esc\x1b[31mid\r"]


def _ke_data(shared: Path, tmp: Path) -> Path:
    """A KE pilot file whose first records carry the hostile ids (a copy in ``tmp``; the
    shared data is never modified)."""
    def read(name: str) -> list[dict]:
        return [json.loads(line) for line in (shared / "ke" / name).read_text(encoding="utf-8").splitlines() if line.strip()]

    icl = {r["sample_id"] for r in read("icl_examples.jsonl")}
    records = read("pilot.jsonl")
    graded = iter(HOSTILE)
    renamed = [r if r["sample_id"] in icl else {**r, "sample_id": next(graded, r["sample_id"])} for r in records]
    pilot = tmp / "pilot.jsonl"
    pilot.write_text("".join(json.dumps(r) + "\n" for r in renamed))
    return pilot


def test_hostile_ids_with_large_outputs_run_resume_and_rescore_right(tmp_path: Path, acebench_dir: Path, shared_data_dir: Path):
    """``x/y`` and ``x__y`` shared one side file (rescore: F1 1.0 → 0.0); a 1,000-character id
    with a large output crashed ("File name too long"), a NUL id with "embedded null byte"."""
    from evalkit.rescore import rescore

    root = tmp_path / "out"
    ke = ["benchmark=ke", f"benchmark.pilot_path={_ke_data(shared_data_dir, tmp_path)}",
          f"benchmark.icl_path={shared_data_dir / 'ke' / 'icl_examples.jsonl'}", "shots=0"]  # fmt: skip
    ref = _run(root, acebench_dir, *ke, "model=reference")
    filler = " ." * (MAX_LINE_BYTES // 2 + 10)
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": r["output"] + filler}) + "\n"
                              for r in read_jsonl(ref.run_dir / "predictions.jsonl")))  # fmt: skip
    args = [*ke, "model=replay", f"model.path={replay}", f"run.dir={tmp_path / 'run'}"]
    res = _run(root, acebench_dir, *args)
    assert res.summary["status"] == "complete" and res.summary["metrics"]["f1_macro"] == 1.0
    rows = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert set(HOSTILE) <= {r["sample_id"] for r in rows} and all("large" in r for r in rows)
    assert len({r["large"]["file"] for r in rows}) == len(rows)
    lines = (res.run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (res.run_dir / "predictions.jsonl").write_text("".join(lines[:2]), encoding="utf-8")  # as a killed run leaves it
    again = _run(root, acebench_dir, *args[:-1], f"run.resume={res.run_dir}")
    assert again.summary["status"] == "complete" and again.summary["n_scored"] == len(rows)
    assert again.summary["metrics"]["f1_macro"] == 1.0
    result = rescore(res.run_dir)
    assert result["changed"] == [] and result["unreadable"] == [] and result["metrics"]["f1_macro"] == 1.0
