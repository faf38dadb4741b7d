"""runner=cluster on a real multi-process Ray cluster: a head node and a worker node (two
raylets, `ray start`) on this machine, made and stopped by ``launchers/ray_local_cluster.sh``.

The cluster lives beside the session's own Ray instance (``ray_address``, started with
ray.init in this process) and must not disturb it: its own temp dir, random ports, and a
``stop`` that ends only its own processes (``ray stop`` would end every Ray of the user).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.benchmarks import get_benchmark_class
from evalkit.engine.journal import read_jsonl
from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd
from tests.support.local_cluster import ClusterError, LocalCluster
GOLD_IDS = ["en/normal_atom_bool_0", "en/normal_atom_enum_1", "en/special_irrelevant_2"]
WRONG_ID = "en/normal_atom_bool_1"  # answered "[]": a wrong answer, scored 0
IDS = [*GOLD_IDS, WRONG_ID]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def local_cluster():
    cluster = LocalCluster(worker_nodes=1)
    try:
        try:
            cluster.start()
        except ClusterError as exc:
            pytest.fail(str(exc))
        yield cluster
    finally:
        res = cluster.stop()
        left = cluster.processes()
        assert res.returncode == 0 and not left, f"cluster not stopped: {res.stdout}{res.stderr}\n{left}"
        shutil.rmtree(cluster.dir, ignore_errors=True)


# the cluster seen from a driver of its own (this process already has the session's Ray)
_PROBE = r"""
import json, logging, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
nodes = [{"id": n["NodeID"], "alive": n["Alive"], "cpus": n["Resources"].get("CPU"),
          "head": "node:__internal_head__" in n["Resources"]} for n in ray.nodes()]
actors = [{"cls": a["ActorClassName"], "state": a["State"], "node": a["Address"]["NodeID"]}
          for a in ray._private.state.actors().values()]
print(json.dumps({"nodes": nodes, "actors": actors}))
"""


def _probe(cluster: LocalCluster, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, cluster.address], env=env or cluster.env, capture_output=True, text=True, timeout=300
    )


def _session_model_workers() -> list[str]:
    """ModelWorker actors ever created in this process's own Ray instance."""
    import ray

    return [aid for aid, a in ray._private.state.actors().items() if a["ActorClassName"].endswith("ModelWorker")]


def _rules(acebench_dir: Path) -> list[dict]:
    cls = get_benchmark_class("acebench")
    bench = cls(cls.settings_model(name="acebench", data_dir=acebench_dir))
    rules = [
        {"match": bench.build(s, 0).messages[-1]["content"][-80:], "content": bench.reference_output(s)}
        for s in bench.load()
        if s.id in GOLD_IDS
    ]
    assert len(rules) == len(GOLD_IDS)
    return rules


@pytest.mark.slow
def test_script_started_a_head_and_a_worker_node(local_cluster):
    assert f"address={local_cluster.address}" in local_cluster.start_output.splitlines()
    assert len(local_cluster.sessions) == 2  # one session per node
    probe = _probe(local_cluster)
    assert probe.returncode == 0, probe.stderr[-3000:]
    nodes = json.loads(probe.stdout.splitlines()[-1])["nodes"]
    assert [n["alive"] for n in nodes] == [True, True]
    assert sorted(n["head"] for n in nodes) == [False, True]
    assert [n["cpus"] for n in nodes] == [1.0, 1.0]


@pytest.mark.slow
def test_a_driver_with_another_token_is_refused(local_cluster):
    wrong = local_cluster.dir / "wrong_token"
    wrong.write_text("0" * 64)
    env = {**local_cluster.env, "RAY_AUTH_TOKEN_PATH": str(wrong)}
    probe = _probe(local_cluster, env)
    assert probe.returncode != 0
    assert "auth" in (probe.stdout + probe.stderr).lower()


@pytest.mark.slow
def test_benchmark_runs_on_the_cluster_beside_the_session_ray(local_cluster, ray_address, fake_openai, acebench_dir, tmp_path):
    import ray

    fake_openai.set_plan({"rules": _rules(acebench_dir), "default": {"content": "[]"}})
    session_workers_before = _session_model_workers()
    run_dir = tmp_path / "run"
    res = subprocess.run(
        evalkit_cmd(
            *base_overrides(tmp_path / "out", acebench_dir),
            "runner=cluster", f"runner.address={local_cluster.address}", "runner.num_workers=2",
            "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
            "backend.concurrency=2", "run.cache=false", f"run.sample_ids=[{','.join(IDS)}]", f"run.dir={run_dir}",
        ),
        cwd=REPO_ROOT, env=local_cluster.env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert (summary["n_samples"], summary["n_scored"], summary["n_failed"]) == (4, 4, 0)
    metrics = summary["metrics"]
    assert metrics["accuracy/normal_atom_bool"] == 0.5  # one gold, one "[]"
    assert metrics["accuracy/normal_atom_enum"] == 1.0
    assert metrics["accuracy/special_irrelevant"] == 1.0
    preds = list(read_jsonl(run_dir / "predictions.jsonl"))
    assert sorted(p["sample_id"] for p in preds) == sorted(IDS)
    assert len(fake_openai.log) == len(IDS)  # one request per sample, none retried

    # the model calls ran in actors of the cluster: exactly runner.num_workers of them,
    # on its worker node (it offers evalkit_worker; the head keeps the driver), closed at
    # the end of the run ...
    probe = _probe(local_cluster)
    assert probe.returncode == 0, probe.stderr[-3000:]
    state = json.loads(probe.stdout.splitlines()[-1])
    node_ids = {n["id"] for n in state["nodes"]}
    workers = [a for a in state["actors"] if a["cls"].endswith("ModelWorker")]
    assert len(workers) == 2
    assert all(w["state"] == "DEAD" for w in workers)
    assert {w["node"] for w in workers} == {n["id"] for n in state["nodes"] if not n["head"]}
    # ... and none in the session's Ray of this process, which is still up
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == ray_address
    assert _session_model_workers() == session_workers_before
    assert not node_ids & {n["NodeID"] for n in ray.nodes()}


def _cluster_model_workers(cluster: LocalCluster) -> list[dict]:
    probe = _probe(cluster)
    assert probe.returncode == 0, probe.stderr[-3000:]
    return [a for a in json.loads(probe.stdout.splitlines()[-1])["actors"] if a["cls"].endswith("ModelWorker")]


@pytest.mark.slow
def test_sweep_in_separate_processes_sends_every_run_to_the_cluster(local_cluster, fake_openai, acebench_dir, tmp_path):
    """The sweep recipe that needs no Ray launcher plugin: each point an evalkit process
    of its own (submitit's local executor), each connecting to the cluster."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    fake_openai.set_plan({"rules": _rules(acebench_dir), "default": {"content": "[]"}})
    workers_before = len(_cluster_model_workers(local_cluster))
    out = tmp_path / "out"
    res = subprocess.run(
        evalkit_cmd(
            "-m", "hydra/launcher=local_processes", *base_overrides(out, acebench_dir),
            "runner=cluster", f"runner.address={local_cluster.address}", "runner.num_workers=2",
            "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
            "run.cache=false", "benchmark.subsets=[normal_atom_bool]", "run.limit=1,2",
        ),
        cwd=REPO_ROOT, env=local_cluster.env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    runs = {}
    for path in out.glob("sweeps/*/*-acebench-openai_compatible-*/summary.json"):
        summary = json.loads(path.read_text())
        ids = sorted(p["sample_id"] for p in read_jsonl(path.parent / "predictions.jsonl"))
        runs[summary["n_samples"]] = (summary["status"], ids, summary["metrics"]["accuracy/normal_atom_bool"])
    assert runs == {
        1: ("complete", ["en/normal_atom_bool_0"], 1.0),
        2: ("complete", ["en/normal_atom_bool_0", WRONG_ID], 0.5),
    }
    assert len(fake_openai.log) == 3
    # runner.num_workers actors per run, all on the cluster
    assert len(_cluster_model_workers(local_cluster)) - workers_before == 4


@pytest.mark.slow
def test_stop_ends_the_cluster_and_nothing_else(local_cluster, ray_address):
    import ray

    assert local_cluster.processes(), "the cluster should be running before stop"
    res = local_cluster.stop()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "stopped the cluster" in res.stdout
    assert local_cluster.processes() == []
    assert not _port_open(local_cluster.port)
    # the session's Ray in this process survived and still runs tasks
    assert ray.get_runtime_context().gcs_address == ray_address
    assert ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=120) == 42
    # a second stop finds nothing to do
    again = local_cluster.stop()
    assert again.returncode == 0 and "no process of the cluster" in again.stdout
