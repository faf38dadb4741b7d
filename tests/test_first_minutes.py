"""A newcomer's first minutes (issue 12, item 9): what the console says while things start,
a fully cached re-run that starts no server, ``--help``, and what report.md claims."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from evalkit.benchmarks.ke.benchmark import CAVEAT_3SHOT
from evalkit.benchmarks.ke.parser import PARSER_VERSION
from evalkit.engine.cache import all_cached, open_cache
from evalkit.engine.work import WorkItem
from evalkit.engine.journal import read_jsonl
from evalkit.types import Request, Sample
from tests.conftest import REPO_ROOT, base_overrides, evalkit_cmd


# ------------------------------------------------------------------------------------------
# what is starting is said on the console (and in evalkit.log once it is open)
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_console_says_what_is_starting(fake_openai, ray_address, acebench_dir, tmp_path):
    """A network model on a running Ray cluster: one ``evalkit:`` line before joining it and
    one before the model workers start (they start before the run directory exists, while
    the data loads); evalkit.log records them once they are ready, with their process ids."""
    fake_openai.set_plan({"default": {"content": "[]"}})
    root = tmp_path / "out"
    proc = subprocess.run(
        evalkit_cmd(*base_overrides(root, acebench_dir), "model=openai_compatible", "model.provider_model=openai/fake",
                    f"backend.api_base={fake_openai.api_base}", f"runner.address={ray_address}", "runner.num_workers=2",
                    "benchmark.subsets=[normal_atom_bool]", "run.limit=2"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("evalkit: ")
            and not re.match(r"evalkit: 0 of 2 workers started after \d+ s", ln)]  # a slow start, every 15 s
    assert said[:2] == [f"evalkit: joining the Ray cluster at {ray_address}…", "evalkit: starting 2 model workers (Ray actors)…"]
    # on the console too (issue 48 item 4); the run starts with the first worker, the other joins (issue 46)
    assert re.fullmatch(r"evalkit: first of 2 workers ready in \d+\.\d s; the others join as they start", said[2])
    assert said[3] == "evalkit: summary: 2 samples × 1 epoch, intervals by each metric's regime; then report.md and the plots…"
    assert len(said) == 5 and said[4].startswith("evalkit: intervals (95%): ")
    (run_dir,) = (root / "runs" / "acebench" / "openai_compatible").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    pids = ", ".join(map(str, summary["engine"]["worker_pids"]))
    assert f"INFO evalkit: 2 model workers ready (process ids {pids}) " in (run_dir / "evalkit.log").read_text()


# ------------------------------------------------------------------------------------------
# a fully cached re-run starts no server of evalkit's own
# ------------------------------------------------------------------------------------------
def _unit(sid: str, text: str, rollout: bool = False) -> WorkItem:
    request = Request(sample_id=sid, subset="s", messages=[{"role": "user", "content": text}], params={"max_tokens": 8})
    return WorkItem(Sample(sid, "s"), request, rollout)


def test_all_cached_needs_every_single_turn_answer_in_the_cache(tmp_path):
    """A hit for every unit: True; one miss, a rollout among them, or no cache: False."""
    a, b = _unit("a", "first"), _unit("b", "second")
    cache_dir = tmp_path / "cache"
    assert not all_cached(cache_dir, [a], "m@x")  # no cache made yet (and none is made)
    assert not cache_dir.exists()
    cache = open_cache(cache_dir)
    cache.set(a.request.request_hash("m@x"), {"text": "[]"})
    cache.close()
    assert all_cached(cache_dir, [a], "m@x")
    assert not all_cached(cache_dir, [a, b], "m@x")  # b is not cached
    assert not all_cached(cache_dir, [a], "other@x")  # another model's key
    assert not all_cached(cache_dir, [_unit("a", "first", rollout=True)], "m@x")  # a rollout needs the model
    assert not all_cached(None, [a], "m@x")


@pytest.mark.slow
@pytest.mark.llm
def test_a_fully_cached_rerun_of_the_embedded_model_starts_no_server(llama_api_base, ray_address, run_eval, tmp_path):
    """The first run asks the session's SmolLM2 server (attached with backend.api_base: the
    model id is the served weights', whatever the address); the second is the plain
    embedded configuration, which would start its own server and log into
    ``<run dir>/llama-server.log``: every answer is cached, so it starts none."""
    root = tmp_path / "out"
    args = ["model=smollm2", "run.sample_ids=[en/normal_atom_object_short_43]",  # a short prompt (~600 tokens)
            "model.dataset_args.acebench.generation.max_tokens=4"]  # fmt: skip
    first = run_eval([*args, f"backend.api_base={llama_api_base}"], output_root=root)
    second = run_eval(args, output_root=root)
    assert first.summary["status"] == second.summary["status"] == "complete"
    assert first.summary["model_id"] == second.summary["model_id"]
    assert not (second.run_dir / "llama-server.log").exists()
    assert second.summary["endpoints"] == {"agent": None}
    rows = list(read_jsonl(second.run_dir / "predictions.jsonl"))
    assert [r["cached"] for r in rows] == [True]
    assert {r["sample_id"]: r["output"] for r in rows} == {r["sample_id"]: r["output"] for r in read_jsonl(first.run_dir / "predictions.jsonl")}
    assert "every request is in the response cache (1): llama.cpp's server is not started" in (second.run_dir / "evalkit.log").read_text()


# ------------------------------------------------------------------------------------------
# --help opens with a usage line and examples; suites are not a config group
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_help_starts_with_usage_and_examples_and_lists_no_suite_group():
    proc = subprocess.run(evalkit_cmd("--help"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("usage: python -m evalkit [GROUP=OPTION ...] [KEY=VALUE ...]")
    assert "  bash bash/run_suite.sh smoke --model reference" in proc.stdout
    assert any(ln.startswith("  python -m evalkit benchmark=acebench model=smollm2 run.limit=10 ") for ln in lines)
    groups = lines[lines.index("== Configuration groups ==") + 2 : lines.index("== Config ==")]
    assert sorted(ln.split(":")[0] for ln in groups if ln) == ["backend", "benchmark", "model", "runner", "shots", "tracking"]
    assert "powered by Hydra." not in proc.stdout  # Hydra's default header ("__main__ is powered by Hydra.")


# ------------------------------------------------------------------------------------------
# report.md says what the run did: generation parameters only for models that generate,
# KE's 3-shot caveat only on a 3-shot run
# ------------------------------------------------------------------------------------------
def _ke(shared_data_dir) -> list[str]:
    ke = shared_data_dir / "ke"
    return ["benchmark=ke", f"benchmark.pilot_path={ke / 'pilot.jsonl'}", f"benchmark.icl_path={ke / 'icl_examples.jsonl'}", "run.limit=2"]


@pytest.mark.slow
def test_a_ke_rule_baseline_report_names_no_generation_and_no_3shot_caveat(run_eval, shared_data_dir):
    report = (run_eval([*_ke(shared_data_dir), "model=baseline_file_read", "shots=0"]).run_dir / "report.md").read_text()
    assert "- generation:" not in report
    assert CAVEAT_3SHOT not in report
    assert "| Scores measure agreement with model-made labels" in report  # the other caveats stay
    assert f"| Parser {PARSER_VERSION} (spec §5)" in report


@pytest.mark.slow
def test_a_3shot_ke_run_of_a_generating_model_shows_both(fake_openai, ray_address, run_eval, shared_data_dir):
    fake_openai.set_plan({"default": {"content": "- step_1"}})
    res = run_eval([*_ke(shared_data_dir), "model=openai_compatible", "model.provider_model=openai/fake",
                    f"backend.api_base={fake_openai.api_base}", "shots=3", "benchmark.generation.max_tokens=64"])  # fmt: skip
    report = (res.run_dir / "report.md").read_text()
    assert "- generation: `{'temperature': 0.0, 'max_tokens': 64}`" in report
    assert f"| {CAVEAT_3SHOT}" in report
