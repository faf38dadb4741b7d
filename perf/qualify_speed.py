"""How long ``python -m evalkit.judge qualify`` takes of evalkit's own time (issue 45 target:
200 labelled samples under a minute), against a judge of the tests' own making on the fake
OpenAI-compatible server, which runs in a process of its own so that its work is not counted.

    .venv/bin/python perf/qualify_speed.py [--labels 200] [--steer-items 10] [--concurrency 16]

It writes a task of ``--labels`` samples and a labels file (one labelled answer a sample; a
third of them known-wrong), starts the fake server answering by the ``honest`` judge of
tests/support/careless_judges.py, and runs the command in its own process, twice: with an empty
response cache (every call sent) and again (every call answered from the cache). It prints, per
run: the calls made, the wall seconds of the process, its CPU seconds (user + system: evalkit's
own work, litellm included; the server's is not) and the seconds the record says the judge's
calls took. It measures; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _task(root: Path, n: int) -> Path:
    """A config directory with the task ``careless`` of ``n`` samples and its judges."""
    sys.path.insert(0, str(REPO))
    from tests.support.careless_judges import careless_config_dir

    rows = [{"id": f"q{i}", "question": f"Question number {i}?", "reference": f"Reference answer {i}."} for i in range(n)]
    conf, _ = careless_config_dir(root, rows)
    labels = root / "labels.jsonl"
    grades = [1, 5, 4, 2, 5, 1]
    labels.write_text("".join(json.dumps({"sample_id": f"q{i}", "answer": f"[grade={grades[i % 6]}] The answer to question {i}, "
                                          + "in some words " * (i % 7), "label": grades[i % 6]}) + "\n" for i in range(n)),
                      encoding="utf-8")  # fmt: skip
    return conf


def _server(root: Path) -> tuple[subprocess.Popen, str]:
    plan = root / "plan.json"
    plan.write_text(json.dumps({"default": {"respond": "honest"}}), encoding="utf-8")
    port_file = root / "port"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "support" / "fake_openai.py"), str(port_file), str(free), str(plan)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (port_file.exists() and port_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    port = port_file.read_text().strip()
    import urllib.request

    while time.monotonic() < deadline:  # listening
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
            break
        except OSError:
            time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=200)
    parser.add_argument("--steer-items", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        conf = _task(root, args.labels)
        server, base = _server(root)
        try:
            env = {**os.environ, "EVALKIT_CONFIG_DIR": str(conf), "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
            cmd = [sys.executable, "-m", "evalkit.judge", "qualify", "judge=honest", "benchmark=careless", f"labels={root / 'labels.jsonl'}",
                   f"steer_items={args.steer_items}", f"run.output_root={root / 'out'}",
                   f"judge_overrides=['backend.api_base={base}','backend.concurrency={args.concurrency}']"]  # fmt: skip
            print(f"{'run':>12} {'calls':>6} {'cached':>6} {'wall s':>7} {'cpu s':>7} {'judge calls s':>13}")
            for label in ("cache empty", "cache full"):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root, timeout=1800)
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode not in (0, 1):
                    raise SystemExit(f"qualify exited {done.returncode}: {done.stderr[-2000:]}")
                folder = root / "out" / "qualifications" / "honest" / "careless" / "quality"
                record = json.loads(sorted(folder.glob("*.json"))[-1].read_text(encoding="utf-8"))
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                calls = record["calls"]
                print(f"{label:>12} {calls['n']:>6} {calls['cached']:>6} {wall:>7.1f} {cpu:>7.1f} {calls['judge_s']:>13.1f}")
            print(f"({args.labels} labelled answers, {record['steering']['overall']['n']} injected; "
                  f"κ {record['agreement']['cohen_kappa']['value']}; load average {os.getloadavg()[0]:.1f})")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
