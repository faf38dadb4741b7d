"""Issue 34 item 5: an undisturbed run re-sends nothing. Through real Ray model workers and
the fake OpenAI server, at ``backend.concurrency=64`` over 2 workers (the run begins once
one worker is up, the other joining as it starts): every unit is one call, no unit is sent
again, none is lost, and no worker is seen restarted. Before one call per unit, such a run
re-sent 5-7 units that were never lost (a slow answer under load taken for a lost worker).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # Ray and a network run

UNITS = 40 * 4  # run.limit × run.repeats: more units than the window, so slots are refilled


def test_an_undisturbed_run_at_concurrency_64_resends_nothing(fake_openai, ray_address, run_eval):
    fake_openai.set_plan({"default": {"content": "[]", "latency_s": 0.05}})
    res = run_eval([
        "model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
        "backend.concurrency=64", "runner.num_workers=2", "run.cache=false", "run.limit=40", "run.repeats=4",
    ])  # fmt: skip
    summary = res.summary
    assert summary["status"] == "complete" and summary["n_scored"] == 40
    engine = summary["engine"]
    assert engine["units"] == UNITS
    assert engine["delivery"] == {"resent": 0, "lost": 0, "workers_lost": 0, "workers_restarted": 0, "calls": UNITS}
    assert sum(node["units"] for node in engine["nodes"]) == UNITS  # each unit answered once, by some worker
    assert len(engine["worker_pids"]) == 2 and engine["phases"]["workers_ready_s"] > 0
    assert len(fake_openai.log) == UNITS  # the server was asked each request once
