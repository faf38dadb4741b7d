"""The embedded default model: llama.cpp's server started by evalkit, reached via litellm.

Kept to two short ACEBench prompts (~600 tokens each) and 16 output tokens: the model
prefills ~140 tokens/s on two cores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request

import pytest

from evalkit.engine.journal import read_jsonl
from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd

pytestmark = pytest.mark.llm

SHORT = ["en/normal_single_turn_parallel_function_59", "en/normal_atom_object_short_43"]


@pytest.mark.slow
def test_smollm2_run_from_the_cli_starts_and_stops_its_own_server(ray_address, acebench_dir, tmp_path):
    """``python -m evalkit model=smollm2`` with no API key in the environment."""
    root = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k and "TOKEN" not in k.upper() or k.startswith("RAY")}
    proc = subprocess.run(
        evalkit_cmd(
            *[o for o in base_overrides(root, acebench_dir) if o != "tracking=none"],
            "model=smollm2",
            f"runner.address={ray_address}",
            f"run.sample_ids=[{','.join(SHORT)}]",
            "model.dataset_args.acebench.generation.max_tokens=16",
        ),
        cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next((root / "runs" / "acebench" / "smollm2").iterdir())
    server_line = f"evalkit: starting llama.cpp's server for smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf; its log: {run_dir / 'llama-server.log'})…"
    assert server_line in proc.stderr.splitlines()  # what the first seconds are spent on is said
    # and when each start-up phase has passed (issue 48 item 4: "workers ready" went only to evalkit.log)
    said = proc.stderr.splitlines()
    assert any(re.fullmatch(r"evalkit: llama.cpp's server ready in \d+\.\d s", ln) for ln in said), proc.stderr[-3000:]
    assert any(re.fullmatch(r"evalkit: 1 worker ready in \d+\.\d s", ln) for ln in said), proc.stderr[-3000:]
    preds = list(read_jsonl(run_dir / "predictions.jsonl"))
    assert sorted(p["sample_id"] for p in preds) == sorted(SHORT)
    for p in preds:
        assert p["output"] and p["output"].strip()  # a real generation
        assert 0 < p["usage"]["completion_tokens"] <= 16
        assert p["usage"]["prompt_tokens"] > 300
        assert p["attempts"] == 1 and p["latency_s"] > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert summary["generation_params"] == {"temperature": 0.0, "max_tokens": 16}
    assert "overall" in summary["metrics"]
    # the server was stopped when the run ended
    log = (run_dir / "llama-server.log").read_text(errors="replace")
    assert "Finished server process" in log
    port = next(ln for ln in log.splitlines() if "Uvicorn running on" in ln).rsplit(":", 1)[1].split()[0]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
    # resuming the finished run asks the (new, other-port) server nothing: the model's
    # identity is the served weights, not the address
    again = subprocess.run(
        evalkit_cmd(
            *[o for o in base_overrides(root, acebench_dir) if o != "tracking=none"],
            "model=smollm2", f"runner.address={ray_address}", f"run.sample_ids=[{','.join(SHORT)}]",
            "model.dataset_args.acebench.generation.max_tokens=16", f"run.resume={run_dir}",
        ),
        cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(list(read_jsonl(run_dir / "predictions.jsonl"))) == 2
    log = (run_dir / "llama-server.log").read_text(errors="replace")
    assert log.count("POST /v1/chat/completions") == 2
    # and the MLflow run carries the identity tags
    from mlflow.tracking import MlflowClient

    tags = MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}").get_run(
        json.loads((run_dir / "tracking.json").read_text())["mlflow_run_id"]
    ).data.tags
    assert tags["status"] == "complete" and len(tags["data_fingerprint"]) == 64 and len(tags["prompt_hash"]) == 64


@pytest.mark.slow
def test_smollm2_temperature_zero_is_reproducible(llama_api_base, ray_address, run_eval, tmp_path):
    """Through the shared session server: same prompts, same outputs, whatever came before."""
    args = [
        "model=smollm2",
        f"backend.api_base={llama_api_base}",
        "run.cache=false",
        "model.dataset_args.acebench.generation.max_tokens=12",
    ]
    a = run_eval([*args, f"run.sample_ids=[{SHORT[0]},{SHORT[1]}]"])
    b = run_eval([*args, f"run.sample_ids=[{SHORT[1]},{SHORT[0]}]"])
    out_a = {p["sample_id"]: p["output"] for p in read_jsonl(a.run_dir / "predictions.jsonl")}
    out_b = {p["sample_id"]: p["output"] for p in read_jsonl(b.run_dir / "predictions.jsonl")}
    assert out_a == out_b and len(out_a) == 2


@pytest.mark.slow
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh_prompt_eval", "keep_prompt_prefix"])
def test_the_server_ends_when_the_process_that_started_it_is_killed(tmp_path, fresh):
    """A driver SIGKILLed mid-run cannot stop its llama.cpp server (its atexit never runs);
    the server, in a session of its own, used to outlive it for good (its memory and port
    held; every resume started one more). It now ends by itself once its parent is gone,
    with either launch (``fresh_prompt_eval=false`` started ``llama_cpp.server`` bare, and
    its server still outlived the driver)."""
    import signal
    import sys
    import time

    code = ("import sys, time\nfrom evalkit.backends.llamacpp import LlamaCppServer\n"
            f"s = LlamaCppServer(log_file={str(tmp_path / 'server.log')!r}, fresh_prompt_eval={fresh}); s.start()\n"
            "print(s.proc.pid, flush=True)\ntime.sleep(600)\n")  # fmt: skip
    driver = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(driver.stdout.readline())
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _alive(server_pid):
            time.sleep(0.2)
        alive = _alive(server_pid)
    finally:
        if driver.poll() is None:
            driver.kill()
    if alive:
        os.kill(server_pid, signal.SIGKILL)
    assert not alive, "the llama.cpp server outlived the process that started it"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie re-parented to init counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
