"""Benchmark registry: importing this package registers every built-in benchmark."""

from evalkit.benchmarks import acebench  # noqa: F401
from evalkit.benchmarks import ke  # noqa: F401
from evalkit.benchmarks import sobhard  # noqa: F401
