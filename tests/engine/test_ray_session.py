"""evalkit's own local Ray instance: the head-node daemons it never uses are not started
(issue 23 item 5: the process tree's PSS; figures in docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # starts Ray in a process of its own

CHILD = """
import json, psutil, ray
from ray._private.node import Node
from evalkit.engine.ray_session import ensure_ray, shutdown_ray
original = Node.__init__
assert ensure_ray(None, 1)

@ray.remote
def answer():
    return 42

value = ray.get(answer.remote(), timeout=120)
tree = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
print(json.dumps({"value": value, "tree": tree, "restored": Node.__init__ is original}))
shutdown_ray()
"""


def test_a_local_instance_runs_without_the_log_and_autoscaler_monitors():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["value"] == 42 and got["restored"]  # tasks run; Ray's own class is left as it was
    tree = got["tree"]
    assert any("gcs_server" in cmd for cmd in tree) and any("raylet" in cmd for cmd in tree)
    assert not [cmd for cmd in tree if "log_monitor.py" in cmd]  # Ray's default starts both
    assert not [cmd for cmd in tree if "autoscaler/_private/monitor.py" in cmd]
