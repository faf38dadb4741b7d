"""SOBHard: Russian structured-output benchmark (825 questions, 11 families × 3
difficulties, 6 target notations, 31 deterministic constraints, no LLM judge).

Behaviour follows ``sobhard_spec.md``: §1 data, §2 prompts, §3 session replay, §4
normalisation, §5 readers, §6 comparison, §8 constraints, §10 metrics.
"""

from evalkit.benchmarks.sobhard.benchmark import SOBHard
from evalkit.benchmarks.sobhard.settings import SOBHardSettings

__all__ = ["SOBHard", "SOBHardSettings"]
