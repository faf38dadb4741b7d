"""Faults below HTTP (reset connections, hangs, malformed and trickled bodies) and a run
with a fixed share of permanently failing prompts, against the scripted fake server
through litellm and Ray.

A transient fault (only the first attempts fail) is retried and the sample is scored as if
nothing happened; a permanent one puts exactly that sample in ``failed.jsonl`` with the
fault's ``error_kind`` after ``max_retries + 1`` attempts, leaves the run incomplete
(exit 1) and withholds the headline metric.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evalkit.benchmarks import get_benchmark_class
from evalkit.engine.journal import read_jsonl
from tests.support.host import slowness, time_limit
from tests.engine.test_engine_faults import IDS, _api, _rules, gold  # noqa: F401 - gold is a fixture

def _timeout(base_s: float = 2.0) -> str:
    """The per-attempt timeout of these runs: ``base_s`` on an idle host, times the host's
    slowness now (``tests/support/host.py``). A healthy answer of the fake takes milliseconds,
    the first call of a fresh worker (litellm setting itself up) a few tenths of a second on an
    idle host, and several seconds on a loaded one, where a fixed 2 s would time it out."""
    return f"backend.timeout_s={time_limit(base_s)}"


def _fault_timeout(name: str) -> str:
    """A hang ends only at the timeout, so its runs keep it short (3 s idle, each hang waits it
    out); every other fault answers at once and gets 20 s: the healthy samples' calls never
    meet it however the load rises after the slowness was measured (under two CPU burners a
    2 s limit timed them out and retried them, session 3)."""
    return _timeout(3.0 if name == "hang" else 20.0)

#: fault name -> (extra rule fields, error_kind of a sample it always hits)
FAULTS = {
    "reset": ({}, "connection"),
    "malformed": ({}, "malformed_response"),
    "malformed_html": ({"malformed_body": "<html><body>502 Bad Gateway</body></html>"}, "malformed_response"),
    "hang": ({"hang_s": 120}, "timeout"),  # held until the client gives up (its timeout)
}


def _fault(name: str) -> str:
    return name.split("_")[0]


def _statuses(fake, question: str) -> list:
    return [r["status"] for r in fake.requests_for(question)]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAULTS))
def test_transient_fault_is_retried_then_scored(fake_openai, ray_address, gold, run_eval, name):  # noqa: F811
    sid0 = IDS[0]
    extra, _ = FAULTS[name]
    fault = _fault(name)
    fake_openai.set_plan({"rules": _rules(gold, **{sid0: {"statuses": [fault, fault], **extra}})})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false", _fault_timeout(name)))
    assert res.summary["status"] == "complete" and res.exit_code == 0
    assert res.summary["metrics"]["overall"] == 1.0
    assert list(read_jsonl(res.run_dir / "failed.jsonl")) == []
    preds = {p["sample_id"]: p for p in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert sorted(preds) == sorted(IDS)
    assert {sid: p["attempts"] for sid, p in preds.items()} == {IDS[0]: 3, IDS[1]: 1, IDS[2]: 1}
    assert preds[sid0]["output"] == gold[sid0][1]
    assert _statuses(fake_openai, gold[sid0][0]) == [fault, fault, 200]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAULTS))
def test_permanent_fault_goes_to_failed_with_its_kind(fake_openai, ray_address, gold, run_eval, name):  # noqa: F811
    sid0 = IDS[0]
    extra, kind = FAULTS[name]
    fault = _fault(name)
    fake_openai.set_plan({"rules": _rules(gold, **{sid0: {"always_status": fault, **extra}})})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false", _fault_timeout(name), "backend.max_retries=2"))
    assert res.summary["status"] == "incomplete" and res.exit_code == 1
    assert res.summary["metrics"] == {}
    assert "partial_overall" in res.summary["partial_metrics"]
    assert res.summary["n_scored"] == 2 and res.summary["n_failed"] == 1
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"], f["attempts"]) for f in failed] == [(sid0, kind, 3)]
    assert _statuses(fake_openai, gold[sid0][0]) == [fault] * 3
    preds = [p["sample_id"] for p in read_jsonl(res.run_dir / "predictions.jsonl")]
    assert sorted(preds) == sorted(IDS[1:])


@pytest.mark.slow
def test_trickled_answers_arrive_whole_and_score(fake_openai, ray_address, gold, run_eval):  # noqa: F811
    """A slow but healthy server: each body arrives 8 bytes at a time."""
    trickle = {"always_status": "trickle", "trickle_bytes": 8, "trickle_delay_s": 0.005}
    fake_openai.set_plan({"rules": _rules(gold, **{sid: trickle for sid in IDS})})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false"))
    assert res.summary["status"] == "complete" and res.exit_code == 0
    assert res.summary["metrics"]["overall"] == 1.0
    preds = {p["sample_id"]: p for p in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert {sid: (p["output"], p["attempts"], p["status"]) for sid, p in preds.items()} == {
        sid: (gold[sid][1], 1, "ok") for sid in IDS
    }
    assert [r["status"] for r in fake_openai.log] == ["trickle"] * 3


@pytest.mark.slow
def test_trickle_slower_than_timeout_is_a_timeout(fake_openai, ray_address, gold, run_eval):  # noqa: F811
    """``timeout_s`` bounds a whole attempt: every chunk comes well within it (so no read
    times out) but the body as a whole would take several times longer (the pause between
    chunks scaled as the timeout is, by the host's slowness)."""
    sid0 = IDS[0]
    timeout = _timeout()
    pause = 0.25 * float(timeout.split("=")[1]) / 2
    trickle = {"always_status": "trickle", "trickle_bytes": 4, "trickle_delay_s": pause}
    fake_openai.set_plan({"rules": _rules(gold, **{sid0: trickle})})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false", timeout, "backend.max_retries=1"))
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"], f["attempts"]) for f in failed] == [(sid0, "timeout", 2)]
    assert _statuses(fake_openai, gold[sid0][0]) == ["trickle", "trickle"]
    assert res.summary["status"] == "incomplete" and res.exit_code == 1


@pytest.mark.slow
def test_retries_are_bounded_in_time(fake_openai, ray_address, gold, run_eval):  # noqa: F811
    """``retry_budget_s`` stops the retries long before ``max_retries`` would: every wait is
    the server's Retry-After (0.5 s), so after attempt k at least 0.5·(k-1) s have passed,
    and a retry is made only while its wait ends within the budget B (tenacity's
    ``stop_before_delay``): at most 2·B + 1 attempts, 7 for the 3 s of an idle host. B is
    3 s times the host's slowness (``tests/support/host.py``): a worker's first call (litellm's
    first request in a fresh process) can take more than 1 s even on an idle 2-core host,
    which left no room for a retry in 1.5 s (CI, stop 50)."""
    sid0 = IDS[0]
    budget = round(3.0 * slowness(), 1)
    fake_openai.set_plan({"rules": _rules(gold, **{sid0: {"always_status": 503, "retry_after": "0.5"}})})
    res = run_eval(
        _api(fake_openai, ray_address, "run.cache=false", "backend.max_retries=50", f"backend.retry_budget_s={budget}")
    )
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"]) for f in failed] == [(sid0, "server_error")]
    attempts = failed[0]["attempts"]
    assert 2 <= attempts <= int(2 * budget) + 1 < 51, budget  # bounded by the budget, not by max_retries + 1 = 51
    assert _statuses(fake_openai, gold[sid0][0]) == [503] * attempts
    assert res.summary["status"] == "incomplete" and res.exit_code == 1


# ------------------------------------------------------------------------------------------
# a tenth of the prompts always fail
# ------------------------------------------------------------------------------------------
SUBSET = "normal_single_turn_single_function"
N = 60


@pytest.fixture(scope="module")
def many(acebench_dir: Path) -> list[tuple[str, str, str]]:
    """[(sample_id, unique question text, gold answer)] of the first N samples of SUBSET."""
    cls = get_benchmark_class("acebench")
    bench = cls(cls.settings_model(name="acebench", data_dir=acebench_dir, subsets=[SUBSET]))
    out = []
    for s in bench.load()[:N]:
        out.append((s.id, bench.build(s, 0).messages[-1]["content"][-80:], bench.reference_output(s)))
    assert len({q for _, q, _ in out}) == N
    return out


@pytest.mark.slow
def test_ten_percent_permanent_failures(fake_openai, ray_address, many, run_eval):
    doomed = [sid for i, (sid, _, _) in enumerate(many) if i % 10 == 3]
    assert len(doomed) == N // 10
    rules = [
        {"match": q, "content": a, **({"always_status": 500} if sid in doomed else {})} for sid, q, a in many
    ]
    fake_openai.set_plan({"rules": rules})
    res = run_eval(
        [
            "model=openai_compatible",
            "model.provider_model=openai/fake",
            f"backend.api_base={fake_openai.api_base}",
            "backend.retry_initial_wait_s=0.01",
            "backend.max_retries=1",
            "run.cache=false",
            f"benchmark.subsets=[{SUBSET}]",
            f"run.limit={N}",
        ]
    )
    assert res.summary["status"] == "incomplete" and res.exit_code == 1
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert sorted(f["sample_id"] for f in failed) == sorted(doomed)
    assert {(f["error_kind"], f["attempts"]) for f in failed} == {("server_error", 2)}
    preds = Counter(p["sample_id"] for p in read_jsonl(res.run_dir / "predictions.jsonl"))
    assert sorted(preds) == sorted(sid for sid, _, _ in many if sid not in doomed)
    assert set(preds.values()) == {1}
    assert res.summary["n_samples"] == N
    assert res.summary["n_scored"] == N - len(doomed) and res.summary["n_failed"] == len(doomed)
    assert res.summary["metrics"] == {}
    assert all(k.startswith("partial_") for k in res.summary["partial_metrics"])
    assert res.summary["partial_metrics"]["partial_overall"] == 1.0
    # each doomed prompt asked exactly max_retries + 1 times, every other one once
    asked = Counter(r["key"] for r in fake_openai.log)
    assert sorted(asked.values()) == [1] * (N - len(doomed)) + [2] * len(doomed)
    assert len(asked) == N
