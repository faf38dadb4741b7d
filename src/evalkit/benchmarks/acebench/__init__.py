"""ACEBench: function-calling benchmark (ACEBench/ACEBench), normal and special categories.

Behaviour follows the research spec ``acebench_spec.md`` (§1 data, §2 prompts, §3 decoding,
§4 scoring, §6 reference). Agent categories are listed but not implemented yet.
"""

from evalkit.benchmarks.acebench.benchmark import AceBench
from evalkit.benchmarks.acebench.settings import AceBenchSettings

__all__ = ["AceBench", "AceBenchSettings"]
