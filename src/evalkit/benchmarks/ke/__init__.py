"""KE: key-step extraction from coding-agent trajectories (spec ``ke_spec.md``).

Plain-KE only (§3); TC-KE/MC-KE are selectable by name but undefined (§11). Data comes
from user-given paths (``benchmark.pilot_path``, ``benchmark.icl_path``) and is never shipped.
"""

from evalkit.benchmarks.ke.benchmark import KE
from evalkit.benchmarks.ke.settings import KESettings

__all__ = ["KE", "KESettings"]
