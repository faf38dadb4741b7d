"""Tasks written in YAML (``kind: task`` in a ``conf/benchmark/<name>.yaml``): dataset, prompt,
answer extraction, scorers and metrics, with no Python (README: "Write a task in YAML")."""

from evalkit.benchmarks.task.benchmark import TaskBenchmark
from evalkit.benchmarks.task.settings import TaskSettings

__all__ = ["TaskBenchmark", "TaskSettings"]
