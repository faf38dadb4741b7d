"""The shared rate-limit actor (:func:`evalkit.engine.ratelimit.shared_limits`) is pinned to
the node of the process that made it (the driver's), on a real cluster of this machine (a
head and one worker node, each its own raylet: ``launchers/ray_local_cluster.sh``).

The actor used to only *prefer* that node: when the node was lost, Ray made it again on
another node with empty windows while the lost windows' leases were still out, letting more
than an endpoint's limit through at once. Pinned, it is lost with its node and never made
again elsewhere; the next driver (a resume) makes it anew on its own node.

The maker here is a process on the worker node standing in for a driver there (a Ray task
pinned to that node calls ``shared_limits`` as ``RayExecutor`` does), so that its node can
be lost while the cluster goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.local_cluster import LocalCluster

pytestmark = pytest.mark.slow  # a cluster of its own (about 40 s to start on 2 cores)

_MAKE = r"""
import json, logging, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
worker = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" not in n["Resources"]][0]

@ray.remote(num_cpus=0)
def make():  # a driver on the worker node, as RayExecutor makes it
    from evalkit.engine.ratelimit import shared_limits
    ray.get(shared_limits().stats.remote("k"))  # made and answering
    return ray.get_runtime_context().get_node_id()

made_on = ray.get(make.options(scheduling_strategy=NodeAffinitySchedulingStrategy(worker, soft=False)).remote())
print(json.dumps({"worker": worker, "made_on": made_on, "actors": ACTORS()}))
"""

_AFTER = r"""
import json, logging, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
head, lost = ray.get_runtime_context().get_node_id(), sys.argv[2]
# until Ray has seen the node lost and settled its actor: made again elsewhere (ALIVE) or given up (DEAD)
deadline = time.monotonic() + 180
while time.monotonic() < deadline and (any(n["Alive"] for n in ray.nodes() if n["NodeID"] == lost) or any(
        a["state"] not in ("ALIVE", "DEAD") or a["state"] == "ALIVE" and a["node"] == lost for a in ACTORS())):
    time.sleep(1)
settled = ACTORS()
from evalkit.engine.ratelimit import shared_limits
ray.get(shared_limits().stats.remote("k"), timeout=120)  # a resuming driver, here on the head
print(json.dumps({"head": head, "settled": settled, "after_resume": ACTORS()}))
"""

_ACTORS = r"""
def ACTORS():
    from evalkit.engine.ratelimit import ACTOR_NAME
    return [{"state": a["State"], "node": a["Address"]["NodeID"], "cause": str(a["DeathCause"])} for a in ray._private.state.actors().values()
            if a["Name"] == ACTOR_NAME]
"""


def _driver(cluster: LocalCluster, code: str, *args: str) -> dict:
    code = code.replace("\nimport ray\n", "\nimport ray\n" + _ACTORS, 1)
    res = subprocess.run([sys.executable, "-c", code, cluster.address, *args], env=cluster.env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


def _where(actors: list[dict]) -> list[tuple[str, str]]:
    return [(a["state"], a["node"]) for a in actors]


def test_the_limits_actor_is_lost_with_its_node_and_made_again_only_by_the_next_driver():
    cluster = LocalCluster(worker_nodes=1)
    try:
        cluster.start()
        made = _driver(cluster, _MAKE)
        assert made["made_on"] == made["worker"]
        assert _where(made["actors"]) == [("ALIVE", made["worker"])]  # on its maker's node

        cluster.kill_raylet(1)  # the maker's node lost
        after = _driver(cluster, _AFTER, made["worker"])
        # never made again elsewhere with empty windows: lost with its node
        (lost,) = after["settled"]
        assert lost["state"] == "DEAD" and "soft=False" in lost["cause"], after  # Ray: its node "doesn't exist any more"
        # the next driver (a resume, here on the head) makes a new one on its own node
        assert [a for a in _where(after["after_resume"]) if a[0] == "ALIVE"] == [("ALIVE", after["head"])]
    finally:
        res = cluster.stop()
        left = cluster.processes()
        cluster.remove()
    assert res.returncode == 0 and not left, f"cluster not stopped: {res.stdout}{res.stderr}\n{left}"
