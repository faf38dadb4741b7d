"""KE on the embedded SmolLM2 (llama.cpp through litellm), 3-shot, chat and completion modes.

One short sample (~4,400 prompt tokens with the three examples) and 16 output tokens per
mode, through the session's shared llama.cpp server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.benchmarks.ke.prompts import ANSWER_PREFIX
from evalkit.engine.journal import read_jsonl

pytestmark = pytest.mark.llm

SAMPLE = "code_ke_834b34a9"


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "completion"])
def test_smollm2_three_shot(llama_api_base, ray_address, run_eval, shared_data_dir: Path, api: str) -> None:
    ke = shared_data_dir / "ke"
    res = run_eval([
        "benchmark=ke", f"benchmark.pilot_path={ke / 'pilot.jsonl'}", f"benchmark.icl_path={ke / 'icl_examples.jsonl'}",
        "model=smollm2", f"model.api={api}", "shots=3", f"backend.api_base={llama_api_base}",
        f"runner.address={ray_address}", "run.cache=false", f"run.sample_ids=[{SAMPLE}]",
        "benchmark.generation.max_tokens=16",
    ])  # fmt: skip
    s = res.summary
    assert s["generation_params"] == {"temperature": 0.0, "max_tokens": 16}
    preds = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert len(preds) + len(failed) == 1
    if failed:  # an empty generation is a failure, never a 0 (spec §7)
        assert failed[0]["error_kind"] in {"empty", "truncated_empty"}
        assert s["status"] == "incomplete" and "f1_macro" not in s["metrics"]
        return
    p = preds[0]
    assert s["status"] == "complete" and 0.0 <= s["metrics"]["f1_macro"] <= 1.0
    assert p["usage"]["prompt_tokens"] > 3000  # the whole 3-shot prompt reached the model
    assert 0 < p["usage"]["completion_tokens"] <= 16
    assert set(p["scores"]) == {"precision", "recall", "f1", "f05"}
    if api == "completion":
        assert p["output"] == ANSWER_PREFIX + p["raw_output"]
    else:
        assert "raw_output" not in p
