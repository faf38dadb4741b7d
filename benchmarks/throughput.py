"""Engine throughput against a local OpenAI-compatible server with a fixed latency (prints figures).

    .venv/bin/python benchmarks/throughput.py [--n 2000] [--latency 0.2] [--concurrency 1 16 64 256]

For each concurrency C: N single-turn samples through the whole engine (Ray workers,
litellm, journal, scoring) against ``tests/support/fake_openai.py`` running in its own
process with a fixed per-request latency L. Prints wall time, the physical limit
N·L/C, their ratio, the server's peak in-flight requests, and the driver's peak RSS. A
zero-latency run gives the framework's overhead per sample. Not a test: nothing is asserted.
(The lm-evaluation-harness side-by-side comparison is not written yet.)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

REPO = Path(__file__).resolve().parents[1]

from evalkit.benchmarks.base import Benchmark, BenchmarkSettings, register  # noqa: E402
from evalkit.types import Request, Sample, SampleScore  # noqa: E402


class SyntheticSettings(BenchmarkSettings):
    n: int = 2000


@register
class Synthetic(Benchmark):
    """N one-line prompts; every non-empty answer scores 1 (measures the engine, not a scorer)."""

    name: ClassVar[str] = "synthetic"
    settings_model = SyntheticSettings
    headline_metric = "accuracy"

    def load(self) -> list[Sample]:
        return [Sample(id=f"s{i:05d}", subset="all", data={"i": i}) for i in range(self.settings.n)]  # type: ignore[attr-defined]

    def build(self, sample: Sample, shots: int) -> Request:
        return Request(sample.id, sample.subset, messages=[{"role": "user", "content": f"sample {sample.data['i']}"}])

    def score(self, sample: Sample, output: str) -> SampleScore:
        return SampleScore(scores={"accuracy": 1.0})

    def aggregate(self, samples: list[Sample], records: list[dict[str, Any]]) -> dict[str, float]:
        return {"accuracy": sum(r["scores"]["accuracy"] for r in records) / max(len(samples), 1)}

    def reference_output(self, sample: Sample) -> str:
        return "ok"


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port_file = Path(tempfile.mkdtemp()) / "port"
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "support" / "fake_openai.py"), str(port_file)], cwd=REPO)
    deadline = time.time() + 30
    while time.time() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            base = f"http://127.0.0.1:{port_file.read_text().strip()}"
            try:
                urllib.request.urlopen(f"{base}/v1/models", timeout=1)
                return proc, base
            except OSError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("fake server did not start")


def post(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def run_once(base: str, n: int, latency: float, concurrency: int, workers: int) -> dict[str, float]:
    from evalkit.config import validate
    from evalkit.engine.run import run_evaluation

    post(f"{base}/_plan", {"default": {"content": "ok", "latency_s": latency}})
    out = Path(tempfile.mkdtemp())
    raw = {
        "benchmark": {"name": "synthetic", "n": n},
        "model": {"name": "fake", "kind": "litellm", "provider_model": "openai/fake"},
        "backend": {"kind": "api", "api_base": f"{base}/v1", "concurrency": concurrency, "max_retries": 0},
        "runner": {"num_workers": workers},
        "tracking": {"kind": "none"},
        "run": {"output_root": str(out), "cache": False, "progress": False},
    }
    t0 = time.perf_counter()
    res = run_evaluation(validate(raw), raw)
    wall = time.perf_counter() - t0
    stats = json.loads(urllib.request.urlopen(f"{base}/_stats", timeout=10).read())
    assert res.summary["n_scored"] == n, res.summary
    return {"wall_s": wall, "max_in_flight": stats["max_in_flight"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--workers", type=int, default=2, help="runner.num_workers (Ray actors)")
    args = parser.parse_args()

    from evalkit.engine.executor import ensure_ray

    proc, base = start_server()
    try:
        ensure_ray(None, None)  # Ray start-up is measured apart from the runs
        zero = run_once(base, args.n, 0.0, max(args.concurrency), args.workers)
        print(f"framework overhead: {args.n} samples at zero latency, concurrency {max(args.concurrency)}: "
              f"{zero['wall_s']:.2f} s -> {1000 * zero['wall_s'] / args.n:.2f} ms per sample")
        for c in args.concurrency:
            n = args.n if c > 1 else min(args.n, 100)  # concurrency 1 at 200 ms: 100 samples suffice
            r = run_once(base, n, args.latency, c, args.workers)
            limit = n * args.latency / c
            print(f"concurrency {c:>3}: {n} samples, wall {r['wall_s']:.2f} s, physical limit {limit:.2f} s, "
                  f"ratio {limit / r['wall_s']:.2f}, peak in-flight {r['max_in_flight']}")
        print(f"driver peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
