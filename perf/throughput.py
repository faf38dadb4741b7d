"""Engine throughput against a local OpenAI-compatible server with a fixed latency, beside lm-evaluation-harness (prints figures).

    .venv/bin/python perf/throughput.py [--n 2000] [--latency 0.2] [--concurrency 1 16 64 256]
        [--max-tokens 16] [--skip-lmeval] [--skip-litellm-alone] [--lmeval-python PYTHON]

For each concurrency C: N single-turn samples through the whole engine (Ray workers,
litellm, journal, scoring) against ``tests/support/fake_openai.py`` running in its own
process with a fixed per-request latency L. Prints wall time, the physical limit
N·L/C, their ratio, the server's peak in-flight requests, and the driver's peak RSS. A
zero-latency run gives the framework's overhead per sample. Not a test: nothing is asserted.
The ratio is taken on the request phase (first request sent to last answer, from
``summary.json`` → ``engine.requests_wall_s``); the whole run's wall time (worker start-up,
which imports litellm in each Ray worker, data, scoring, summary) is printed beside it.

"litellm alone" sends the same requests as bare ``litellm.acompletion`` calls from as many
processes as evalkit has workers — no Ray, journal or scoring — which is the ceiling of any
engine built on litellm on this machine (litellm spends ~5 ms of CPU per request, so on two
cores shared with the server it cannot keep 64 requests of 200 ms in flight).

The same workload (the same N ``sample {i}`` user messages, the same max_tokens,
temperature 0, no retries; lm-eval adds ``seed: 1234`` and ``stop: []``, which the server
ignores) then goes through lm-evaluation-harness's
``local-chat-completions`` model at ``num_concurrent=C`` against the same server: a
generated task (local JSONL, ``generate_until``, ``exact_match``) run by
``lm_eval.simple_evaluate(..., apply_chat_template=True)`` in a child process of the
interpreter ``--lmeval-python`` (default: this one, else ``.venv-lmeval/bin/python`` when
that exists). Its wall time is ``simple_evaluate`` (task set-up, requests, metrics; the
import and the task index are excluded, as Ray start-up is for evalkit), with the
request phase (``generate_until``) alone beside it; the server's peak in-flight and the
child's peak RSS are measured as for evalkit. A side-by-side table closes the output.
When lm-eval is not importable one line says so and only evalkit's figures are printed.
Install: ``pip install "lm_eval[api]"``.
"""

from __future__ import annotations

import argparse
import json
import os
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

    def reference_output(self, sample: Sample) -> str:
        return "ok"


def start_server(wait_s: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """tests/support/fake_openai.py started and answering (``wait_s`` at most): ``(process, base URL)``."""
    port_file = Path(tempfile.mkdtemp()) / "port"
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "support" / "fake_openai.py"), str(port_file)], cwd=REPO)
    deadline = time.time() + wait_s
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


def server_stats(base: str) -> dict[str, Any]:
    return json.loads(urllib.request.urlopen(f"{base}/_stats", timeout=10).read())


# ------------------------------------------------------------------------------------------
# litellm alone: the ceiling any litellm-based engine has on this machine
# ------------------------------------------------------------------------------------------
LITELLM_CHILD = r"""
import asyncio, json, os, sys, time
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from evalkit.models.litellm_client import LiteLLMModel  # the same client set-up as evalkit's workers
import litellm
base, first, n, c, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
LiteLLMModel(provider_model="openai/fake")

async def go(ids, conc):
    sem = asyncio.Semaphore(conc)
    async def one(i):
        async with sem:
            await litellm.acompletion(model="openai/fake", api_base=base + "/v1", api_key="sk-no-key-needed",
                                      messages=[{"role": "user", "content": f"sample {i}"}], max_tokens=max_tokens,
                                      temperature=0.0, timeout=600, num_retries=0, max_retries=0)
    await asyncio.gather(*[one(i) for i in ids])

asyncio.run(go(range(10**6, 10**6 + 8), 8))  # warm up (not counted by the caller: stats are reset after)
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
asyncio.run(go(range(first, first + n), c))
print(json.dumps({"wall_s": time.perf_counter() - t0}), flush=True)
"""


def litellm_alone(base: str, n: int, latency: float, concurrency: int, procs: int, max_tokens: int) -> dict[str, Any]:
    """The same N requests sent by bare ``litellm.acompletion`` calls — no Ray, no journal,
    no scoring — from ``procs`` processes (as many as evalkit's workers) sharing the
    concurrency: what litellm itself allows on this machine."""
    post(f"{base}/_plan", {"default": {"content": "ok", "latency_s": latency}})
    procs = max(1, min(procs, concurrency))
    shares = [n // procs + (1 if k < n % procs else 0) for k in range(procs)]
    conc = [concurrency // procs + (1 if k < concurrency % procs else 0) for k in range(procs)]
    kids, first = [], 0
    for share, c in zip(shares, conc):
        kids.append(subprocess.Popen([sys.executable, "-c", LITELLM_CHILD, base, str(first), str(share), str(c), str(max_tokens)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO))  # fmt: skip
        first += share
    for kid in kids:
        if kid.stdout is None or kid.stdout.readline().strip() != "ready":
            raise RuntimeError("a litellm child process did not start")
    post(f"{base}/_plan", {"default": {"content": "ok", "latency_s": latency}})  # resets the server's stats
    t0 = time.perf_counter()
    for kid in kids:
        assert kid.stdin is not None
        kid.stdin.write("go\n")
        kid.stdin.flush()
    for kid in kids:
        assert kid.stdout is not None
        kid.stdout.readline()
        kid.wait(timeout=60)
    wall = time.perf_counter() - t0
    stats = server_stats(base)
    if stats["requests"] != n:
        raise RuntimeError(f"the server saw {stats['requests']} requests; expected {n}")
    return {"requests_s": wall, "max_in_flight": stats["max_in_flight"]}


def run_once(base: str, n: int, latency: float, concurrency: int, workers: int, max_tokens: int) -> dict[str, float]:
    from evalkit.benchmarks import get_benchmark_class
    from evalkit.config import validate
    from evalkit.engine.run import run_evaluation
    from evalkit.specs import build

    post(f"{base}/_plan", {"default": {"content": "ok", "latency_s": latency}})  # also resets the server's stats
    out = Path(tempfile.mkdtemp())
    raw = {
        "benchmark": {"name": "synthetic", "n": n},
        "model": {"name": "fake", "kind": "litellm", "provider_model": "openai/fake",
                  "generation": {"temperature": 0.0, "max_tokens": max_tokens}},
        "backend": {"kind": "api", "api_base": f"{base}/v1", "concurrency": concurrency, "max_retries": 0},
        "runner": {"num_workers": workers},
        "tracking": {"kind": "none"},
        "run": {"output_root": str(out), "cache": False, "progress": False},
    }  # fmt: skip
    t0 = time.perf_counter()
    res = run_evaluation(build(validate(raw, get_benchmark_class)))
    wall = time.perf_counter() - t0
    stats = server_stats(base)
    assert res.summary["n_scored"] == n, res.summary
    return {"wall_s": wall, "requests_s": res.summary["engine"]["requests_wall_s"],
            "max_in_flight": stats["max_in_flight"], "requests": stats["requests"]}  # fmt: skip


# ---- lm-evaluation-harness ----------------------------------------------------------------
LMEVAL_TASK = "evalkit_throughput_synthetic"

#: Run in a child process by the lm-eval interpreter: ``python run_lmeval.py SPEC.json``.
LMEVAL_CHILD = r"""
import json, logging, resource, sys, time

spec = json.load(open(sys.argv[1]))
import lm_eval
from lm_eval.models.api_models import TemplateAPI
from lm_eval.tasks import TaskManager

logging.getLogger("lm_eval").setLevel(logging.WARNING)
task_manager = TaskManager(include_path=spec["include_path"])  # indexing every task YAML: not timed
phase = {"generate_s": 0.0}
generate_until = TemplateAPI.generate_until


def timed_generate_until(self, *args, **kwargs):
    t0 = time.perf_counter()
    try:
        return generate_until(self, *args, **kwargs)
    finally:
        phase["generate_s"] += time.perf_counter() - t0


def peak_rss_mib():
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec, so it would report the parent's peak
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


TemplateAPI.generate_until = timed_generate_until
t0 = time.perf_counter()
results = lm_eval.simple_evaluate(
    model="local-chat-completions",
    model_args={
        "model": "fake",
        "base_url": spec["base_url"],
        "num_concurrent": spec["concurrency"],
        "max_retries": 1,  # attempts, not retries: no retry, as backend.max_retries=0 on evalkit's side
        "tokenizer_backend": None,  # no tokenizer download: requests go as chat messages
        "max_gen_toks": spec["max_tokens"],
        "timeout": 600,
    },
    tasks=[spec["task"]],
    task_manager=task_manager,
    apply_chat_template=True,
    batch_size=1,
    log_samples=False,
    bootstrap_iters=0,
    verbosity="WARNING",
)
wall = time.perf_counter() - t0
out = {
    "wall_s": wall,
    "generate_s": phase["generate_s"],
    "n_scored": results["n-samples"][spec["task"]]["effective"],
    "exact_match": results["results"][spec["task"]].get("exact_match,none"),
    "peak_rss_mib": peak_rss_mib(),
    "lm_eval_version": getattr(lm_eval, "__version__", "?"),
}
json.dump(out, open(spec["out"], "w"))
"""


def lmeval_python(requested: str | None) -> tuple[str | None, str]:
    """The interpreter that runs lm-eval, or ``None`` and the reason it is unavailable."""
    candidates = [requested] if requested else [sys.executable, str(REPO / ".venv-lmeval" / "bin" / "python")]
    reason = ""
    for py in candidates:
        if not Path(py).exists():
            reason = reason or f"{py} does not exist"
            continue
        probe = subprocess.run([py, "-c", "import lm_eval.models.openai_completions"], capture_output=True, text=True)
        if probe.returncode == 0:
            return py, ""
        lines = probe.stderr.strip().splitlines() or ["no error output"]
        reason = reason or f"{py}: {lines[-1]}"
    return None, reason


def lmeval_task_dir(work: Path, n: int, max_tokens: int) -> Path:
    """``work/tasks-N/``: the task YAML and its JSONL data of N samples (made once per N)."""
    tasks = work / f"tasks-{n}"
    if tasks.exists():
        return tasks
    tasks.mkdir(parents=True)
    data = tasks / "data.jsonl"
    data.write_text("".join(json.dumps({"i": i, "text": f"sample {i}", "target": "ok"}) + "\n" for i in range(n)))
    # JSON is YAML. doc_to_text keeps the prompt exactly "sample {i}", the user message evalkit sends.
    task = {
        "task": LMEVAL_TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{text}}",
        "doc_to_target": "{{target}}",
        "target_delimiter": "",
        "generation_kwargs": {"until": [], "max_gen_toks": max_tokens, "temperature": 0.0, "do_sample": False},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }
    (tasks / f"{LMEVAL_TASK}.yaml").write_text(json.dumps(task, indent=2) + "\n")
    return tasks


def lmeval_once(py: str, work: Path, base: str, n: int, latency: float, concurrency: int, max_tokens: int) -> dict[str, Any]:
    """One lm-eval run in a child process; its figures and the server's for that run."""
    child = work / "run_lmeval.py"
    if not child.exists():
        child.write_text(LMEVAL_CHILD)
    tag = f"c{concurrency}-n{n}-l{latency}"
    out, log, spec_path = work / f"out-{tag}.json", work / f"log-{tag}.txt", work / f"spec-{tag}.json"
    spec = {"base_url": f"{base}/v1/chat/completions", "concurrency": concurrency, "max_tokens": max_tokens,
            "include_path": str(lmeval_task_dir(work, n, max_tokens)), "task": LMEVAL_TASK, "out": str(out)}  # fmt: skip
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(work / "hf-datasets-cache"), "TQDM_DISABLE": "1"}  # fmt: skip
    post(f"{base}/_plan", {"default": {"content": "ok", "latency_s": latency}})  # also resets the server's stats
    with log.open("w") as fh:
        rc = subprocess.run([py, str(child), str(spec_path)], stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
    stats = server_stats(base)
    if rc != 0 or not out.exists():
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise RuntimeError(f"exit {rc}, log {log}:\n{tail}")
    res = json.loads(out.read_text())
    if res["n_scored"] != n or stats["requests"] != n:
        raise RuntimeError(f"scored {res['n_scored']} samples, the server saw {stats['requests']} requests; expected {n}")
    return {**res, "max_in_flight": stats["max_in_flight"], "requests": stats["requests"]}


def fmt_table(rows: list[dict[str, Any]], with_lmeval: bool) -> str:
    head = ["C", "N", "limit s", "evalkit wall s", "(requests s)", "ratio", "in-flight"]
    with_alone = any("alone" in r for r in rows)
    if with_alone:
        head += ["litellm alone s", "ratio"]
    if with_lmeval:
        head += ["lm-eval wall s", "(requests s)", "ratio", "in-flight"]
    lines = []
    for r in rows:
        e = r["evalkit"]
        line = [str(r["c"]), str(r["n"]), f"{r['limit']:.2f}", f"{e['wall_s']:.2f}", f"{e['requests_s']:.2f}",
                f"{r['limit'] / e['requests_s']:.2f}", str(e["max_in_flight"])]  # fmt: skip
        if with_alone:
            a = r.get("alone")
            line += [f"{a['requests_s']:.2f}", f"{r['limit'] / a['requests_s']:.2f}"] if a else ["failed", ""]
        if with_lmeval:
            m = r.get("lmeval")
            if m is None:
                line += ["failed", "", "", ""]
            else:
                line += [f"{m['wall_s']:.2f}", f"{m['generate_s']:.2f}", f"{r['limit'] / m['generate_s']:.2f}",
                         str(m["max_in_flight"])]  # fmt: skip
        lines.append(line)
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    out += ["  ".join(x.rjust(w) for x, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--workers", type=int, default=2, help="runner.num_workers (Ray actors)")
    parser.add_argument("--max-tokens", type=int, default=16, help="max_tokens of every request (both frameworks)")
    parser.add_argument("--skip-lmeval", action="store_true", help="no lm-evaluation-harness comparison")
    parser.add_argument("--skip-litellm-alone", action="store_true", help="no bare-litellm ceiling")
    parser.add_argument("--lmeval-python", default=None,
                        help="interpreter with lm_eval[api] installed (default: this one, else .venv-lmeval/bin/python)")  # fmt: skip
    args = parser.parse_args()

    from evalkit.engine.ray_session import ensure_ray

    py: str | None = None
    if not args.skip_lmeval:
        py, reason = lmeval_python(args.lmeval_python)
        if py is None:
            print(f"lm-evaluation-harness is not importable ({reason}): lm-eval comparison skipped; "
                  f'install it with: pip install "lm_eval[api]"')  # fmt: skip
    proc, base = start_server()
    rows: list[dict[str, Any]] = []
    lmeval_rss = 0.0
    try:
        ensure_ray(None, None)  # Ray start-up is measured apart from the runs
        c_max = max(args.concurrency)
        zero = run_once(base, args.n, 0.0, c_max, args.workers, args.max_tokens)
        print(f"evalkit overhead: {args.n} samples at zero latency, concurrency {c_max}: "
              f"{zero['wall_s']:.2f} s -> {1000 * zero['wall_s'] / args.n:.2f} ms per sample")  # fmt: skip
        work = Path(tempfile.mkdtemp(prefix="lmeval-throughput-")) if py else None
        if py and work:
            try:
                z = lmeval_once(py, work, base, args.n, 0.0, c_max, args.max_tokens)
                lmeval_rss = max(lmeval_rss, z["peak_rss_mib"])
                print(f"lm-eval {z['lm_eval_version']} overhead: {args.n} samples at zero latency, num_concurrent {c_max}: "
                      f"{z['wall_s']:.2f} s -> {1000 * z['wall_s'] / args.n:.2f} ms per sample "
                      f"(requests phase {z['generate_s']:.2f} s)")  # fmt: skip
            except RuntimeError as exc:
                print(f"lm-eval zero-latency run failed: {exc}")
        for c in args.concurrency:
            n = args.n if c > 1 else min(args.n, 100)  # concurrency 1 at 200 ms: 100 samples suffice
            limit = n * args.latency / c
            r = run_once(base, n, args.latency, c, args.workers, args.max_tokens)
            row: dict[str, Any] = {"c": c, "n": n, "limit": limit, "evalkit": r}
            print(f"concurrency {c:>3}: {n} samples, physical limit {limit:.2f} s; evalkit wall {r['wall_s']:.2f} s "
                  f"(requests {r['requests_s']:.2f} s), ratio {limit / r['requests_s']:.2f}, "
                  f"peak in-flight {r['max_in_flight']}", end="", flush=True)  # fmt: skip
            if not args.skip_litellm_alone:
                try:
                    a = litellm_alone(base, n, args.latency, c, args.workers, args.max_tokens)
                    row["alone"] = a
                    print(f"; litellm alone {a['requests_s']:.2f} s, ratio {limit / a['requests_s']:.2f}", end="", flush=True)
                except RuntimeError as exc:
                    print(f"; litellm alone failed: {exc}", end="")
            if py and work:
                try:
                    m = lmeval_once(py, work, base, n, args.latency, c, args.max_tokens)
                    lmeval_rss = max(lmeval_rss, m["peak_rss_mib"])
                    row["lmeval"] = m
                    print(f"; lm-eval wall {m['wall_s']:.2f} s (requests {m['generate_s']:.2f} s), "
                          f"ratio {limit / m['generate_s']:.2f}, peak in-flight {m['max_in_flight']}", end="")  # fmt: skip
                except RuntimeError as exc:
                    print(f"; lm-eval failed: {exc}", end="")
            print()
            rows.append(row)
        print()
        print(f"N={args.n}, latency {args.latency} s, max_tokens {args.max_tokens}, temperature 0, no retries; "
              f"ratio = physical limit N*L/C / request phase (first request sent to last answer; 1.00 = ideal); "
              f"wall = the whole run (evalkit: worker start-up, data, requests, scoring, summary; lm-eval: "
              f"simple_evaluate); litellm alone = the same requests as bare litellm.acompletion calls from "
              f"{args.workers} processes (no Ray, journal or scoring): the ceiling of any litellm-based engine here; "
              f"in-flight = the server's peak")  # fmt: skip
        print(fmt_table(rows, py is not None))
        print(f"evalkit driver peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (Ray workers not included)")
        if py:
            print(f"lm-eval process peak RSS: {lmeval_rss:.0f} MiB (max over its runs)")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
