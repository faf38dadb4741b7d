"""Tasks written in YAML (``kind: task`` in a ``conf/benchmark/<name>.yaml``): dataset, prompt,
answer extraction, scorers and metrics, with no Python (docs/tasks.md)."""

from evalkit.benchmarks.task.benchmark import TaskBenchmark
from evalkit.benchmarks.task.settings import TaskSettings

__all__ = ["TaskBenchmark", "TaskSettings"]
