"""The engine against a real HTTP server with scripted faults (through litellm and Ray).

Samples: three short ACEBench records; the fake server answers each with the gold answer
(or a scripted fault) keyed by a substring of the sample's question.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.benchmarks import get_benchmark_class
from evalkit.engine.journal import read_jsonl

IDS = ["en/normal_atom_bool_0", "en/normal_atom_enum_1", "en/special_irrelevant_2"]


def load_gold(acebench_dir: Path, ids: list[str]) -> dict[str, tuple[str, str]]:
    """{sample_id: (unique question text, gold answer)} for ``ids``: the fake server answers
    a request whose last message contains the question with the gold answer."""
    cls = get_benchmark_class("acebench")
    bench = cls(cls.settings_model(name="acebench", data_dir=acebench_dir))
    out = {}
    for s in bench.load():
        if s.id in ids:
            out[s.id] = (bench.build(s, 0).messages[-1]["content"][-80:], bench.reference_output(s))
    assert set(out) == set(ids) and len({q for q, _ in out.values()}) == len(ids)
    return out


@pytest.fixture(scope="module")
def gold(acebench_dir: Path) -> dict[str, tuple[str, str]]:
    """{sample_id: (unique question text, gold answer)} for the test samples."""
    return load_gold(acebench_dir, IDS)


def _api(fake, ray_address, *extra: str) -> list[str]:
    return [
        "model=openai_compatible",
        "model.provider_model=openai/fake",
        f"backend.api_base={fake.api_base}",
        "backend.retry_initial_wait_s=0.05",
        "backend.retry_max_wait_s=2",
        f"run.sample_ids=[{','.join(IDS)}]",
        *extra,
    ]


def _rules(gold, **per_id):
    return [{"match": q, "content": a, **per_id.get(sid, {})} for sid, (q, a) in gold.items()]


@pytest.mark.slow
def test_gold_answers_over_http_score_one(fake_openai, ray_address, gold, run_eval):
    fake_openai.set_plan({"rules": _rules(gold)})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false"))
    assert res.summary["status"] == "complete"
    assert res.summary["metrics"]["overall"] == 1.0
    assert res.exit_code == 0
    preds = list(read_jsonl(res.run_dir / "predictions.jsonl"))
    assert sorted(p["sample_id"] for p in preds) == sorted(IDS)
    assert all(p["attempts"] == 1 and p["usage"]["prompt_tokens"] > 0 for p in preds)
    # generation params reached the server unchanged
    assert {tuple(sorted(r["params"].items())) for r in fake_openai.log} == {
        (("max_tokens", 1200), ("seed", None), ("stop", None), ("temperature", 0.0), ("top_p", None))
    }


@pytest.mark.slow
def test_retries_5xx_and_429_with_retry_after_then_succeeds(fake_openai, ray_address, gold, run_eval):
    sid0, sid1, _ = IDS
    fake_openai.set_plan(
        {"rules": _rules(gold, **{sid0: {"statuses": [500, 503]}, sid1: {"statuses": [429], "retry_after": 1}})}
    )
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false"))
    assert res.summary["status"] == "complete"
    preds = {p["sample_id"]: p for p in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert preds[sid0]["attempts"] == 3
    assert preds[sid1]["attempts"] == 2
    assert preds[IDS[2]]["attempts"] == 1
    tries = fake_openai.requests_for(gold[sid1][0])
    assert [t["status"] for t in tries] == [429, 200]


@pytest.mark.parametrize("header, expected", [("1", 1.0), ("120", 60.0), (None, None)])
def test_retry_wait_honours_retry_after_capped(header, expected):
    """The wait before a retry is the server's Retry-After (capped at retry_max_wait_s);
    without the header, exponential back-off with jitter (bounded by the cap)."""
    import httpx
    import litellm
    from tenacity import RetryCallState
    from tenacity import Future as TFuture

    from evalkit.models.litellm_client import _RetryAfterWait

    headers = {"Retry-After": header} if header else {}
    response = httpx.Response(429, headers=headers, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    exc = litellm.RateLimitError("scripted 429", llm_provider="openai", model="fake", response=response)
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})
    state.attempt_number = 1
    state.outcome = TFuture.construct(1, exc, True)
    wait = _RetryAfterWait(initial=0.5, maximum=60.0)(state)
    if expected is None:
        assert 0.5 <= wait <= 1.0  # first back-off: initial wait plus at most `initial` of jitter
    else:
        assert wait == expected


@pytest.mark.slow
def test_4xx_is_not_retried_and_goes_to_failed(fake_openai, ray_address, gold, run_eval):
    sid0 = IDS[0]
    fake_openai.set_plan({"rules": _rules(gold, **{sid0: {"always_status": 400}})})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false"))
    assert res.summary["status"] == "incomplete"
    assert res.exit_code == 1
    assert res.summary["metrics"] == {}
    assert "partial_overall" in res.summary["partial_metrics"]
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"], f["attempts"]) for f in failed] == [(sid0, "client_error", 1)]
    assert len(fake_openai.requests_for(gold[sid0][0])) == 1
    preds = {p["sample_id"] for p in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert sid0 not in preds and len(preds) == 2


@pytest.mark.slow
def test_retries_are_bounded(fake_openai, ray_address, gold, run_eval):
    sid0 = IDS[0]
    fake_openai.set_plan({"rules": _rules(gold, **{sid0: {"always_status": 500}})})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false", "backend.max_retries=2"))
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"], f["attempts"]) for f in failed] == [(sid0, "server_error", 3)]
    assert len(fake_openai.requests_for(gold[sid0][0])) == 3


@pytest.mark.slow
@pytest.mark.parametrize(
    "behaviour, kind",
    [({"empty": True}, "empty"), ({"null_with_reasoning": True, "finish_reason": "length"}, "truncated_empty")],
)
def test_empty_content_is_a_failure_not_a_zero(fake_openai, ray_address, gold, run_eval, behaviour, kind):
    sid0 = IDS[0]
    fake_openai.set_plan({"rules": _rules(gold, **{sid0: behaviour})})
    res = run_eval(_api(fake_openai, ray_address, "run.cache=false"))
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert [(f["sample_id"], f["error_kind"]) for f in failed] == [(sid0, kind)]
    assert failed[0]["reasoning"] == ("thinking..." if behaviour.get("null_with_reasoning") else None)  # once dropped
    assert res.summary["status"] == "incomplete"
    assert res.summary["n_scored"] == 2 and res.summary["n_failed"] == 1


@pytest.mark.slow
def test_closed_port_every_sample_failed(ray_address, run_eval):
    from evalkit.backends.llamacpp import free_port

    port = free_port()  # nothing listens there
    res = run_eval(
        [
            "model=openai_compatible",
            "model.provider_model=openai/nothing",
            f"backend.api_base=http://127.0.0.1:{port}/v1",
            "backend.max_retries=1",
            "backend.retry_initial_wait_s=0.01",
            "run.cache=false",
            f"run.sample_ids=[{','.join(IDS)}]",
        ]
    )
    failed = list(read_jsonl(res.run_dir / "failed.jsonl"))
    assert sorted(f["sample_id"] for f in failed) == sorted(IDS)
    assert {f["error_kind"] for f in failed} == {"connection"}
    assert res.summary["status"] == "incomplete" and res.summary["metrics"] == {}
    assert "overall" not in json.loads((res.run_dir / "summary.json").read_text())["metrics"]
    assert list(read_jsonl(res.run_dir / "predictions.jsonl")) == []


@pytest.mark.slow
def test_cache_hits_same_params_and_misses_on_changed_temperature(fake_openai, ray_address, gold, run_eval, tmp_path):
    fake_openai.set_plan({"rules": _rules(gold)})
    root = tmp_path / "shared_outputs"
    first = run_eval(_api(fake_openai, ray_address), output_root=root)
    assert len(fake_openai.log) == 3
    second = run_eval(_api(fake_openai, ray_address), output_root=root)
    assert len(fake_openai.log) == 3  # every answer from the cache
    preds = list(read_jsonl(second.run_dir / "predictions.jsonl"))
    assert all(p["cached"] and p["attempts"] == 0 for p in preds)
    assert second.summary["metrics"] == first.summary["metrics"]
    run_eval(_api(fake_openai, ray_address, "benchmark.generation.temperature=0.5"), output_root=root)
    assert len(fake_openai.log) == 6  # a different temperature is a different request
    assert {r["params"]["temperature"] for r in fake_openai.log[3:]} == {0.5}


@pytest.mark.slow
def test_concurrency_one_and_eight_give_identical_results(fake_openai, ray_address, gold, run_eval):
    fake_openai.set_plan({"rules": _rules(gold), "default": {"content": "[]", "latency_s": 0.05}})
    results = []
    for conc in (1, 8):
        res = run_eval(_api(fake_openai, ray_address, "run.cache=false", f"backend.concurrency={conc}"))
        rows = sorted(read_jsonl(res.run_dir / "predictions.jsonl"), key=lambda r: r["sample_id"])
        results.append([(r["sample_id"], r["output"], r["scores"]) for r in rows])
    assert results[0] == results[1]
    assert len(results[0]) == 3


def test_embedded_server_identity_does_not_depend_on_its_port():
    """Resume and cache key on the served weights, not on the random port."""
    from evalkit.config import LlamaCppBackend
    from evalkit.backends.llamacpp import served_weights_identity
    from evalkit.models.litellm_client import LiteLLMModel

    ident = served_weights_identity(LlamaCppBackend())
    assert ident.startswith("llamacpp:smollm2:sha256=") and ident.endswith(":fresh")
    a = LiteLLMModel("openai/smollm2", api_base="http://127.0.0.1:1111/v1", identity=ident)
    b = LiteLLMModel("openai/smollm2", api_base="http://127.0.0.1:2222/v1", identity=ident)
    assert a.model_id == b.model_id
    assert LiteLLMModel("openai/x", api_base="http://h:1/v1").model_id != LiteLLMModel("openai/x", api_base="http://h:2/v1").model_id
