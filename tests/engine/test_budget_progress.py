"""A budgeted run's progress bar advances as samples finish (issue 26 item 12: the bar once
stayed on "1/12" for 4.5 minutes while samples finished). Not reproduced on the engine of
Ray streaming generators and budget reservations: this keeps it so."""

from __future__ import annotations

import re

import pytest

from evalkit.engine.journal import read_jsonl
from tests.engine.test_engine_faults import load_gold
from tests.support.host import time_limit

pytestmark = pytest.mark.slow  # Ray model workers and the fake server through a whole run

IDS = [f"en/normal_atom_enum_{i}" for i in range(12)]
HELD = IDS[0]


def test_a_budgeted_runs_bar_counts_samples_while_one_is_held(fake_openai, ray_address, acebench_dir, run_eval, tmp_path, capsys):
    """The first sample's answer is held by the server until the 11 others were answered; under
    run.max_total_tokens (so that every call reserves through the run's BudgetKeeper), the
    bar shows answers counted before the held one is even released, and the held sample's
    row is journaled after at least 10 others. The server counts an answer when it sends it,
    so it answers the held one 1 s (times the host's slowness) after the count: the answers
    already sent are scored and journaled first (held until 10 and answered at once, a
    loaded host journaled it 10th, twice)."""
    gold = load_gold(acebench_dir, IDS)
    rules = [{"match": gold[HELD][0], "content": gold[HELD][1], "hold_until_answered": 11, "hold_s": 120,
               "released_after_s": time_limit(1)}]
    rules += [{"match": q, "content": a, "latency_s": 0.1} for sid, (q, a) in gold.items() if sid != HELD]
    fake_openai.set_plan({"rules": rules, "default": {"content": "[]", "usage": {"prompt_tokens": 300, "completion_tokens": 50}}})
    capsys.readouterr()
    res = run_eval(["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
                    f"run.sample_ids=[{','.join(IDS)}]", "run.cache=false", "backend.concurrency=4", "runner.num_workers=1",
                    "run.max_total_tokens=1000000", "run.progress=true"], output_root=tmp_path)  # fmt: skip
    err = capsys.readouterr().err
    assert res.summary["status"] == "complete" and res.summary["budget"]["max_total_tokens"] == 1_000_000
    order = [r["sample_id"] for r in read_jsonl(res.run_dir / "predictions.jsonl")]
    assert len(order) == 12 and order.index(HELD) >= 10, order
    counts = [int(n) for n in re.findall(r"\| *(\d+)/12 \[", err)]
    assert counts and counts[-1] == 12, err[-2000:]
    assert any(1 <= n <= 9 for n in counts), counts  # counted while the held sample was still unanswered
