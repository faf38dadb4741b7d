"""Inspect AI's side of ``perf/frameworks.py``: one eval of a JSONL of prompts, in a process of its own.

    python perf/run_inspect.py SPEC.json      (the interpreter that has inspect-ai)

SPEC: ``data`` (JSONL rows ``{"i": 0, "text": "sample 0", "target": "ok"}``), ``base_url``
(``http://HOST:PORT/v1``), ``concurrency``, ``max_tokens``, ``log_dir``, ``out``.
A ``Task`` over the rows (``json_dataset``: input ``text``, target ``target``, id ``i``),
``generate()``, the ``match()`` scorer, run by ``inspect_ai.eval`` with the ``openai-api``
provider against the server (``openai-api/fake/fake``, ``FAKE_BASE_URL``/``FAKE_API_KEY``),
``max_connections`` = the concurrency (``max_samples`` is left at its default, which is
``max_connections``), no retries, temperature 0, no progress display; the log is written as
usual. OUT gets the status, the number of samples and the eval's own request-phase figures.
Does not import evalkit. Not a test: nothing is asserted.
"""

import json
import os
import sys

spec = json.load(open(sys.argv[1]))
os.environ["FAKE_BASE_URL"] = spec["base_url"]
os.environ.setdefault("FAKE_API_KEY", "sk-no-key-needed")

from inspect_ai import Task, eval  # noqa: E402
from inspect_ai.dataset import FieldSpec, json_dataset  # noqa: E402
from inspect_ai.scorer import match  # noqa: E402
from inspect_ai.solver import generate  # noqa: E402

task = Task(
    dataset=json_dataset(spec["data"], FieldSpec(input="text", target="target", id="i")),
    solver=generate(),
    scorer=match(),
    name="prompts_jsonl",
)
logs = eval(
    task,
    model="openai-api/fake/fake",
    max_connections=spec["concurrency"],
    max_retries=0,
    timeout=600,
    max_tokens=spec["max_tokens"],
    temperature=0.0,
    display="none",
    log_dir=spec["log_dir"],
)
log = logs[0]
out = {
    "status": log.status,
    "n_samples": log.results.total_samples if log.results else 0,
    "n_scored": log.results.completed_samples if log.results else 0,
    "started_at": log.stats.started_at,
    "completed_at": log.stats.completed_at,
}
json.dump(out, open(spec["out"], "w"))
if log.status != "success":  # e.g. the openai package missing for the openai-api provider
    print(f"Inspect AI: {log.status}: {log.error.message if log.error else 'no error recorded'}", file=sys.stderr)
sys.exit(0 if log.status == "success" else 1)
