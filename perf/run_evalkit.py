"""evalkit's side of ``perf/frameworks.py``: one run of a JSONL of prompts, in a process of its own.

    python perf/run_evalkit.py DATA.jsonl OUT.json [key=value ...]

Registers ``prompts_jsonl``, a benchmark whose samples are the rows of DATA.jsonl
(``{"i": 0, "text": "sample 0", ...}``: one user message each, every non-empty answer
scores 1), composes the run's configuration the way ``python -m evalkit`` does (Hydra,
``conf/config.yaml`` and the overrides given; the benchmark node is this one) and runs it
through :func:`evalkit.job.run_composed`, the command line's own path: Ray started for the
run, workers, litellm, journal, scoring, summary, shut down at exit. OUT.json gets the
run's status, the number of samples scored and the summary's ``engine`` figures.
Not a test: nothing is asserted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, ClassVar

from evalkit.benchmarks.base import Benchmark, BenchmarkSettings, register
from evalkit.untrusted import read_objects
from evalkit.types import Request, Sample, SampleScore


class PromptsSettings(BenchmarkSettings):
    path: str


@register
class PromptsJsonl(Benchmark):
    """The rows of a JSONL file as single-turn prompts (measures the engine, not a scorer)."""

    name: ClassVar[str] = "prompts_jsonl"
    settings_model = PromptsSettings
    headline_metric = "accuracy"

    def load(self) -> list[Sample]:
        # a line at a time, through evalkit's strict reader, as the benchmarks in evalkit read their data
        # (a whole-file read would leave the driver's heap fragmented by ~4 KB per sample at 2-6 KB prompts)
        rows = read_objects(Path(self.settings.path))  # type: ignore[attr-defined]
        return [Sample(id=f"s{r['i']:05d}", subset="all", data={"text": r["text"]}) for _, r in rows]

    def build(self, sample: Sample, shots: int) -> Request:
        return Request(sample.id, sample.subset, messages=[{"role": "user", "content": sample.data["text"]}])

    def score(self, sample: Sample, output: str) -> SampleScore:
        return SampleScore(scores={"accuracy": 1.0 if output else 0.0})

    def aggregate(self, samples: list[Sample], records: list[dict[str, Any]]) -> dict[str, float]:
        return {"accuracy": sum(r["scores"]["accuracy"] for r in records) / max(len(samples), 1)}

    def reference_output(self, sample: Sample) -> str:
        return "ok"

    def report_tables(self, metrics: dict[str, float], ci: dict[str, Any] | None = None,
                      counts: dict[str, dict[str, int]] | None = None) -> list[tuple[str, list[str], list[list[Any]]]]:  # fmt: skip
        # finalize passes the intervals and counts; Benchmark's default table takes the metrics alone
        return super().report_tables(metrics)


def main() -> int:
    from omegaconf import OmegaConf

    from evalkit.compose import compose
    from evalkit.job import run_composed

    data, out, overrides = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    cfg = compose(overrides)
    OmegaConf.set_struct(cfg, False)
    cfg.benchmark = OmegaConf.create({"name": PromptsJsonl.name, "path": str(Path(data).resolve())})
    result = run_composed(cfg)
    s = result.summary
    out.write_text(json.dumps({"status": s["status"], "n_scored": s.get("n_scored"), "engine": s.get("engine", {})}))
    return 0 if s["status"] == "complete" else 1


if __name__ == "__main__":
    sys.exit(main())
