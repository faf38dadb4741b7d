"""A benchmark from outside evalkit: name a country's capital (the README's example)."""

import json
from pathlib import Path

from evalkit.benchmarks.base import Benchmark, BenchmarkSettings, register
from evalkit.types import Request, Sample, SampleScore


class CapitalsSettings(BenchmarkSettings):
    data_path: Path = Path(__file__).parent / "capitals.jsonl"


@register
class Capitals(Benchmark):
    """One question per country; exact match after trimming spaces and ignoring case."""

    name = "capitals"
    settings_model = CapitalsSettings

    def load(self) -> list[Sample]:
        lines = self.settings.data_path.read_text(encoding="utf-8").splitlines()
        return [Sample(id=r["id"], subset=r["region"], data=r) for r in map(json.loads, lines)]

    def build(self, sample: Sample, shots: int) -> Request:
        text = f"What is the capital of {sample.data['country']}? Answer with the city only."
        return Request(sample.id, sample.subset, messages=[{"role": "user", "content": text}])

    def score(self, sample: Sample, output: str) -> SampleScore:
        right = output.strip().casefold() == sample.data["capital"].casefold()
        return SampleScore(scores={"accuracy": float(right)})

    def reference_output(self, sample: Sample) -> str:
        return sample.data["capital"]
