"""ACEBench: function-calling benchmark (ACEBench/ACEBench): normal, special and agent categories.

Behaviour follows the research spec ``acebench_spec.md`` (§1 data, §2 prompts, §3 decoding,
§4 scoring, §5 agent rollouts, §6 reference).
"""

from evalkit.benchmarks.acebench.benchmark import AceBench
from evalkit.benchmarks.acebench.settings import AceBenchSettings

__all__ = ["AceBench", "AceBenchSettings"]
