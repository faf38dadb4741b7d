"""A team's day one against a real basic-auth ``mlflow server`` (issue 47), as a team would
run it: two users with different permissions (the admin, and a second member whose default
permission is READ) and a wrong password, refused before anything starts; a sweep against a
server that is slow to tell its version; a team's suite with its own relative paths, run from
its own directory and from another. (The re-judge journey extends the judge journey of
tests/test_mlflow_server.py, which has the judge's fake provider and Ray already.)

Offline models only (``model=reference``); every test here is ``slow``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, evalkit_cmd
from tests.support.mlflow_server import mlflow_server
from tests.support.slow_proxy import slow_proxy

pytestmark = pytest.mark.slow

ADMIN_PW = "evalkit-team-ADMIN-pw-7f3a91c2"
READER = "reader"
READER_PW = "evalkit-team-READER-pw-2b8d40e6"
WRONG_PW = "not-the-password-9c1d2e3f4a"
ARITH = ["benchmark=arith_mini", "model=reference", "run.progress=false"]


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
    """The team's server: basic-auth, default permission READ; experiments ``team`` and
    ``evalkit`` belong to the admin; the user ``reader`` exists (READ everywhere)."""
    pytest.importorskip("flask_wtf", reason="mlflow[auth] (the test extras) is not installed")
    work = tmp_path_factory.mktemp("team-server")
    with mlflow_server(f"sqlite:///{work / 'mlflow.db'}", work / "artifacts", work, app_name="basic-auth",
                       admin_password=ADMIN_PW) as srv:  # fmt: skip
        srv.wait_ready()
        _post(srv.url, "/api/2.0/mlflow/users/create", {"username": READER, "password": READER_PW})
        with pytest.MonkeyPatch.context() as env:
            admin = _as_admin(srv.url, env)
            for name in ("team", "evalkit"):
                admin.create_experiment(name)
        yield srv


def _post(url: str, path: str, body: dict) -> dict:
    token = base64.b64encode(f"admin:{ADMIN_PW}".encode()).decode()
    request = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.loads(resp.read() or b"{}")


def _as_admin(url: str, env: pytest.MonkeyPatch):
    """An MlflowClient of ``url`` as the admin (the credentials set through ``env``, undone after the test)."""
    from mlflow.tracking import MlflowClient

    env.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    env.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PW)
    return MlflowClient(url)


def _env(user: str, password: str) -> dict:
    env = {**os.environ, "MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("evalkit: error:")]


def _local_run(root: Path, *extra: str):
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    return run_validated(resolve(compose([*ARITH, "run.limit=3", f"run.output_root={root}", "tracking=none", *extra]))[1])


def test_a_read_only_user_and_a_wrong_password_are_refused_before_anything_starts(team_server, tmp_path, monkeypatch, capsys):
    """The second member (READ by default) on the admin's experiment: a run, ``evalkit.track``
    and ``compare --log`` each say so in one line naming the server, the user and the
    permission, exit 2, and write nothing there; a run's refusal, and a wrong password's, come
    before the engine's start stage (Ray, model workers); in an experiment of the member's own,
    the check passes and leaves no probe tag."""
    from evalkit.compare import main as compare
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated
    from evalkit.tracking import MlflowObserver
    from evalkit.tracking.permissions import PROBE_TAG, PermissionRefused
    from evalkit.track import main as track

    url = team_server.url
    # the engine's start stage (Ray, the model workers) must never run: each refusal comes first
    started: list[bool] = []
    monkeypatch.setattr("evalkit.engine.run.start", lambda *a, **k: started.append(True) or pytest.fail("the run started"))

    def refusal(user: str, password: str, root: Path) -> PermissionRefused:
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        cfg = resolve(compose([*ARITH, f"run.output_root={root}", f"tracking.tracking_uri={url}", "tracking.experiment=team"]))[1]
        with pytest.raises(PermissionRefused) as refused:
            run_validated(cfg)
        assert refused.value.exit_code == 2 and password not in str(refused.value) and not (root / "runs").exists()
        return refused.value

    assert str(refusal(READER, READER_PW, tmp_path / "reader")) == (
        f"tracking: the MLflow server {url} refused user 'reader' the EDIT permission on experiment 'team' (403 when writing a "
        "tag on it); ask its owner or an admin for EDIT, or choose another tracking.experiment — nothing was started")  # fmt: skip
    wrong = str(refusal("admin", WRONG_PW, tmp_path / "wrong"))
    assert wrong.startswith(f"tracking: the MLflow server {url} did not accept the credentials of user 'admin' (401 when reading ")
    assert started == []
    monkeypatch.undo()

    # evalkit.track and compare --log of runs made without tracking: the same preflight, exit 2
    first, second = _local_run(tmp_path / "local"), _local_run(tmp_path / "local", "run.limit=2")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", READER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", READER_PW)
    capsys.readouterr()
    assert track([str(first.run_dir), "--tracking-uri", url, "--experiment", "team"]) == 2
    (line,) = _error_lines(capsys.readouterr().err)
    assert "refused user 'reader' the EDIT permission on experiment 'team' (403" in line and " later with:" not in line
    assert compare([str(first.run_dir), str(second.run_dir), "--log", "--tracking-uri", url]) == 2
    (line,) = _error_lines(capsys.readouterr().err)
    assert f"the MLflow server {url} refused user 'reader' the EDIT permission on experiment 'evalkit' (403" in line

    # the member's own experiment: created (the creator may manage it), checked, no probe tag left
    MlflowObserver(url, "reader-own", "").check()
    admin = _as_admin(url, monkeypatch)
    assert not [k for k in admin.get_experiment_by_name("reader-own").tags if k.startswith(PROBE_TAG)]
    for name in ("team", "evalkit"):
        exp = admin.get_experiment_by_name(name)
        assert admin.search_runs([exp.experiment_id]) == [] and not [k for k in exp.tags if k.startswith(PROBE_TAG)]
    assert not (first.run_dir / "tracking.json").exists()


def test_a_sweep_against_a_server_slow_to_tell_its_version_tracks_every_job(team_server, tmp_path, monkeypatch):
    """MLflow asks ``/version`` with a 3 s timeout; this server answers it in 5 s. Both jobs of
    the sweep still log their traces with their spans, end FINISHED, and the sweep says all
    jobs complete, exit 0."""
    root = tmp_path / "out"
    with slow_proxy(team_server.url, "/version", delay_s=5.0) as proxy:
        done = subprocess.run(evalkit_cmd("-m", *ARITH, "run.limit=2,3", f"run.output_root={root}", f"tracking.tracking_uri={proxy.url}",
                                          "tracking.experiment=sweeps"),
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=_env("admin", ADMIN_PW))  # fmt: skip
        slow = proxy.slow_hits
    assert done.returncode == 0, done.stderr[-3000:]
    assert slow >= 1, "the version was asked through the slow proxy"
    assert "could not identify MLflow server version" not in done.stderr and "MLflow logging failed" not in done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("evalkit: sweep ") and " all 2 jobs complete → " in done.stdout
    import mlflow

    admin = _as_admin(team_server.url, monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", team_server.url)  # set_tracking_uri exports it: undone after the test
    mlflow.set_tracking_uri(team_server.url)
    summary = json.loads(next(root.rglob("sweep_summary.json")).read_text())
    assert [j["status"] for j in summary["jobs"]] == ["complete", "complete"]
    for job, n in zip(summary["jobs"], (2, 3)):
        rid = json.loads((Path(job["run_dir"]) / "tracking.json").read_text())["mlflow_run_id"]
        run = admin.get_run(rid)
        assert run.info.status == "FINISHED"
        traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=rid, return_type="list", include_spans=True)
        assert len(traces) == n and all(t.data.spans for t in traces)


def test_a_team_suite_resolves_its_relative_paths_where_it_is_run(tmp_path):
    """A team's suite file, task and data, all named by relative paths: ``bash run_suite.sh
    team.yaml`` from the team's directory runs; from another directory it is one line naming
    the directory the paths were resolved against, exit 2, and nothing runs."""
    team = tmp_path / "team"
    (team / "conf" / "benchmark").mkdir(parents=True)
    (team / "data").mkdir()
    (team / "data" / "q.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                                                   for i in range(4)), encoding="utf-8")  # fmt: skip
    task = (REPO_ROOT / "conf" / "benchmark" / "arith_mini.yaml").read_text(encoding="utf-8")
    task = task.replace("examples/tasks/arith_mini.jsonl", "data/q.jsonl").replace("name: arith_mini", "name: team_arith")
    (team / "conf" / "benchmark" / "team_arith.yaml").write_text(task, encoding="utf-8")
    (team / "team.yaml").write_text("- {name: first, benchmark: team_arith, overrides: [run.limit=3]}\n", encoding="utf-8")
    env = {**os.environ, "VENV": str(Path(sys.executable).parents[1]), "EVALKIT_CONFIG_DIR": "conf", "PYTHONPATH": str(REPO_ROOT / "src")}
    script = str(REPO_ROOT / "bash" / "run_suite.sh")
    done = subprocess.run(["bash", script, "team.yaml", "--model", "reference", "tracking=none", "run.progress=false"],
                          cwd=team, capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (summary,) = (team / "outputs" / "suites").glob("team-*/1-first/summary.json")
    assert json.loads(summary.read_text())["n_samples"] == 3

    elsewhere = team / "elsewhere"
    elsewhere.mkdir()
    moved = subprocess.run(["bash", script, "../team.yaml", "--model", "reference", "tracking=none"], cwd=elsewhere,
                           capture_output=True, text=True, timeout=600, env={**env, "EVALKIT_CONFIG_DIR": "../conf"})  # fmt: skip
    assert moved.returncode == 2 and moved.stdout == ""
    (line,) = moved.stderr.strip().splitlines()
    assert line.startswith("evalkit: error: ../team.yaml: entry 1 (first): benchmark.dataset.path: data/q.jsonl does not exist")
    assert line.endswith(f"resolve against the directory bash/run_suite.sh is run from, here {elsewhere}: run it from the directory "
                         "they are relative to, or make them absolute)")  # fmt: skip
    assert "EVALKIT_SHARED_DIR" not in line and not (elsewhere / "outputs").exists()
