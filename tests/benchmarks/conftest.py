"""Fixtures of the benchmark tests: ACEBench loaded once per session from the shared data."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.categories import NORMAL_CATEGORIES, SPECIAL_CATEGORIES
from evalkit.types import Sample


class Loaded:
    """A benchmark instance with its samples, indexed by sample id."""

    def __init__(self, bench: AceBench):
        self.bench = bench
        self.samples: list[Sample] = bench.load()
        self.by_id = {s.id: s for s in self.samples}


#: the single-request categories (normal + special); the agent fixtures below hold the rest
SINGLE_REQUEST = list(NORMAL_CATEGORIES + SPECIAL_CATEGORIES)
AGENT = ["agent_multi_step", "agent_multi_turn"]


@pytest.fixture(scope="session")
def acebench_en(acebench_dir: Path) -> Loaded:
    return Loaded(AceBench(AceBenchSettings(data_dir=acebench_dir, language="en", subsets=SINGLE_REQUEST)))


@pytest.fixture(scope="session")
def acebench_zh(acebench_dir: Path) -> Loaded:
    return Loaded(AceBench(AceBenchSettings(data_dir=acebench_dir, language="zh", subsets=SINGLE_REQUEST)))


@pytest.fixture(scope="session")
def agent_en(acebench_dir: Path) -> Loaded:
    return Loaded(AceBench(AceBenchSettings(data_dir=acebench_dir, language="en", subsets=AGENT)))


@pytest.fixture(scope="session")
def agent_zh(acebench_dir: Path) -> Loaded:
    return Loaded(AceBench(AceBenchSettings(data_dir=acebench_dir, language="zh", subsets=AGENT)))
