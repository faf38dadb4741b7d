"""evalkit: declarative, reproducible, parallel evaluation of large language models.

No outbound call the user did not ask for: MLflow's usage telemetry (to mlflow-telemetry.io)
and Ray's usage statistics (to usage-stats.ray.io) are off in every evalkit process and the
processes it starts, unless the user's environment already sets ``MLFLOW_DISABLE_TELEMETRY``
or ``RAY_USAGE_STATS_ENABLED`` (their own choice wins). litellm's is off where it is imported
(``evalkit.providers``). Both variables are read by those libraries at import, so they are
set here, before either can be imported through evalkit.
"""

import os as _os

__version__ = "0.1.0"

_os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
_os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
