"""No outbound call the user did not ask for: MLflow's telemetry and Ray's usage statistics
are off in evalkit's processes unless the user's environment chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

PROBE = """
import evalkit
from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY
from ray._common.usage.usage_lib import _usage_stats_enabledness
print(MLFLOW_DISABLE_TELEMETRY.get(), _usage_stats_enabledness().name)
"""


def _probe(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "RAY_USAGE_STATS_ENABLED")}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO_ROOT, env={**clean, **env}, capture_output=True, text=True,
                         timeout=600, check=True)  # fmt: skip
    return out.stdout.strip()


def test_mlflow_telemetry_and_ray_usage_stats_are_off_by_default():
    assert _probe() == "True DISABLED_EXPLICITLY"


def test_the_users_own_choice_wins():
    assert _probe(MLFLOW_DISABLE_TELEMETRY="false", RAY_USAGE_STATS_ENABLED="1") == "False ENABLED_EXPLICITLY"
