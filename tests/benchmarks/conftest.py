"""Fixtures of the benchmark tests: ACEBench loaded once per session from the shared data."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.types import Sample


class Loaded:
    """A benchmark instance with its samples, indexed by sample id."""

    def __init__(self, bench: AceBench):
        self.bench = bench
        self.samples: list[Sample] = bench.load()
        self.by_id = {s.id: s for s in self.samples}


@pytest.fixture(scope="session")
def acebench_en(acebench_dir: Path) -> Loaded:
    return Loaded(AceBench(AceBenchSettings(data_dir=acebench_dir, language="en")))


@pytest.fixture(scope="session")
def acebench_zh(acebench_dir: Path) -> Loaded:
    return Loaded(AceBench(AceBenchSettings(data_dir=acebench_dir, language="zh")))
