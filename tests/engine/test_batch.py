"""run.batch's pure parts, in process: input files split by the provider's limits, the run
directory's batch record, output lines read as the live client reads answers, providers
refused, batch prices, the budget's reservation, the config's batch options."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalkit.config import ModelConfig
from evalkit.engine.batch import BatchRecord, batch_limits, input_files, reserve
from evalkit.engine.work import WorkItem
from evalkit.errors import ConfigError, RunDirError, within
from evalkit.models.litellm_batch import BATCH_EXPIRED, BATCH_FAILED, batch_refusal, parse_result
from evalkit.providers import batch_price
from evalkit.types import Completion, Failure, Request, Sample


def _lines(sizes: list[int]) -> list[tuple[str, bytes]]:
    return [(f"{i:064x}", b"x" * (n - 1) + b"\n") for i, n in enumerate(sizes)]


def test_split_by_request_count_keeps_order() -> None:
    files = input_files(_lines([10] * 12), max_requests=5, max_bytes=10_000)
    assert [len(f.request_hashes) for f in files] == [5, 5, 2]
    assert [h for f in files for h in f.request_hashes] == [f"{i:064x}" for i in range(12)]


def test_split_by_bytes_one_line_at_a_time_with_each_file_s_digest() -> None:
    lines = _lines([400, 400, 400, 100, 900])
    read = []
    files = input_files(((h, read.append(h) or line) for h, line in lines), max_requests=100, max_bytes=1000)
    assert [f.bytes for f in files] == [800, 500, 900] and len(read) == 5  # a generator, read once
    data = [b"".join(line for _, line in lines[a:b]) for a, b in ((0, 2), (2, 4), (4, 5))]
    assert [f.sha256 for f in files] == [hashlib.sha256(d).hexdigest() for d in data]


def test_planning_the_files_holds_one_line_at_a_time() -> None:
    """200 lines of 100 KB (a vision batch's base64 images: 20 MB in all) planned from a
    generator: the planner's peak memory stays near one line, not the batch."""
    import tracemalloc

    def lines():
        for i in range(200):
            yield f"{i:064x}", bytes(100_000)

    tracemalloc.start()
    try:
        files = input_files(lines(), max_requests=1000, max_bytes=1_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [len(f.request_hashes) for f in files] == [10] * 20
    assert peak < 1_000_000, f"planning held {peak} bytes"


def test_a_line_over_the_byte_limit_is_one_line_error() -> None:
    with pytest.raises(ConfigError, match="run.batch_max_bytes: request 0{12} alone is 2000 bytes"):
        input_files(_lines([2000]), max_requests=10, max_bytes=1024)


def test_a_line_over_the_byte_limit_names_its_sample() -> None:
    """The planner is told who each request hash is (issue 49: the message named the hash
    only): the refusal names the sample, its epoch and its images."""
    from evalkit.engine.batch import _sample_words
    from evalkit.engine.work import WorkItem
    from evalkit.types import Request, Sample

    unit = WorkItem(Sample(id="photos/IMG_0042", subset="all", data={}),
                    Request("photos/IMG_0042", "all", messages=[], images={"a" * 64: b"x", "b" * 64: b"y"}, epoch=1))  # fmt: skip
    assert _sample_words(unit) == "sample 'photos/IMG_0042', epoch 1, with 2 images"
    with pytest.raises(ConfigError) as info:
        input_files(_lines([100, 2000]), max_requests=10, max_bytes=1024, who=lambda h: _sample_words(unit) if h.endswith("1") else "?")
    text = str(info.value)
    assert text.startswith("run.batch_max_bytes: sample 'photos/IMG_0042', epoch 1, with 2 images (request 000000000000) alone is 2000 bytes")
    assert "\n" not in text and "prompt.image_max_side" in text


def test_the_configured_limits_never_pass_the_provider_s_documented_ones() -> None:
    assert batch_limits("openai", 10**6, 10**12) == (50_000, 200_000_000)
    assert batch_limits("anthropic", 10**6, 10**12) == (100_000, 256_000_000)
    assert batch_limits("openai", 7, 5_000) == (7, 5_000)  # smaller configured limits hold
    assert batch_limits("hosted_vllm", 10**6, 10**12) == (10**6, 10**12)  # no documented limit: the config's


def _entry(**kw) -> dict:
    return {"input_sha256": "a" * 64, "request_hashes": ["b" * 64], "n_requests": 1, "bytes": 10, "file_id": None,
            "batch_id": None, "status": "prepared", "collected": False, **kw}  # fmt: skip


def test_batch_record_round_trip_owed_and_reserved(tmp_path: Path) -> None:
    record = BatchRecord(tmp_path)
    record.entries = [_entry(reserved_usd=0.5, reserved_tokens=100),
                      _entry(request_hashes=["c" * 64], collected=True, reserved_usd=9.0, reserved_tokens=9)]  # fmt: skip
    record.save()
    again = BatchRecord(tmp_path)
    assert again.entries == record.entries
    assert again.owed() == {"b" * 64}
    assert again.reserved() == (0.5, 100)


@pytest.mark.parametrize("text", ["{", "[]", json.dumps({"batches": [{"input_sha256": 1}]}),
                                  json.dumps({"batches": [_entry(request_hashes=["../x"])]}),
                                  json.dumps({"batches": [_entry(n_requests=True)]})])  # fmt: skip
def test_a_bad_batch_record_is_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / "batch").mkdir()
    (tmp_path / "batch" / "batches.json").write_text(text, encoding="utf-8")
    with pytest.raises(RunDirError, match="batches.json"):
        BatchRecord(tmp_path)


def test_a_linked_batch_record_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"batches": []}), encoding="utf-8")
    run = tmp_path / "run"
    (run / "batch").mkdir(parents=True)
    (run / "batch" / "batches.json").symlink_to(outside)
    with pytest.raises(RunDirError, match="symbolic link"):
        BatchRecord(run)


def _ok(content, **kw) -> dict:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": kw.get("finish", "stop")}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}}  # fmt: skip
    return {"custom_id": "h1", "response": {"status_code": 200, "body": body}, "error": None}


def test_output_lines_read_as_live_answers() -> None:
    assert parse_result(_ok("step_001"), chat=True) == (
        "h1", Completion(text="step_001", finish_reason="stop", usage={"prompt_tokens": 7, "completion_tokens": 3}))
    reasoned = _ok("", finish="length")
    reasoned["response"]["body"]["choices"][0]["message"]["reasoning_content"] = "thinking..."
    _, empty = parse_result(reasoned, chat=True)
    assert isinstance(empty, Failure) and empty.error_kind == "truncated_empty" and empty.usage["prompt_tokens"] == 7
    assert empty.reasoning == "thinking..."  # kept, as the live client keeps it
    text = {"custom_id": "h2", "error": None, "response": {"status_code": 200, "body": {
        "choices": [{"text": "004", "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}}}
    assert parse_result(text, chat=False)[1].text == "004"


def test_error_lines_are_batch_failures() -> None:
    expired = {"custom_id": "h3", "response": None, "error": {"code": "batch_expired", "message": "window passed"}}
    cid, got = parse_result(expired, chat=True)
    assert cid == "h3" and got.error_kind == BATCH_EXPIRED and "window passed" in got.message
    failed = {"custom_id": "h4", "error": None,
              "response": {"status_code": 400, "body": {"error": {"message": "bad request"}}}}  # fmt: skip
    cid, got = parse_result(failed, chat=True)
    assert got.error_kind == BATCH_FAILED and got.message == "HTTP 400: bad request"


@pytest.mark.parametrize("model, refused", [
    ("openai/gpt-4o-2024-11-20", None), ("hosted_vllm/qwen", None), ("azure/my-deployment", None),
    ("anthropic/claude-3-5-sonnet-20241022", "NotImplementedError"), ("deepseek/deepseek-chat", "no batch API"),
    ("mistral/mistral-large-latest", "no cancel_batch"),
])  # fmt: skip
def test_providers_litellm_cannot_batch_are_refused(model: str, refused: str | None) -> None:
    why = batch_refusal(model)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why and "\n" not in why and why.startswith("run.batch: provider ")


def _model(**kw) -> ModelConfig:
    return ModelConfig(name="m", kind="litellm", provider_model=kw.pop("provider_model", "openai/gpt-4o-2024-11-20"), **kw)


def test_batch_prices_from_litellm_and_from_the_config() -> None:
    price = batch_price(_model(), "api")
    assert (price.source, price.input_per_token, price.output_per_token) == ("litellm.batch", 1.25e-6, 5e-6)
    assert price.cost({"prompt_tokens": 1000, "completion_tokens": 100}) == pytest.approx(1000 * 1.25e-6 + 100 * 5e-6)
    own = batch_price(_model(pricing={"input_per_mtok": 2, "output_per_mtok": 8, "batch_input_per_mtok": 1,
                                      "batch_output_per_mtok": 4}), "api")  # fmt: skip
    assert own.cost({"prompt_tokens": 10**6, "completion_tokens": 10**6}) == pytest.approx(5.0)
    assert batch_price(_model(provider_model="deepseek/deepseek-chat"), "api") is None  # litellm has no batch price


def _cfg(**run) -> tuple[SimpleNamespace, SimpleNamespace]:
    """``reserve``'s first two arguments: the run's budget settings and the agent's spec."""
    return (SimpleNamespace(**{"max_cost_usd": None, "max_total_tokens": None, **run}),
            SimpleNamespace(max_tokens=100, model=SimpleNamespace(provider_model="openai/gpt-4o-2024-11-20")))  # fmt: skip


def _units(n: int) -> list[WorkItem]:
    return [WorkItem(Sample(f"s{i}", "a"), Request(f"s{i}", "a", messages=[{"role": "user", "content": "hello " * 50}]))
            for i in range(n)]  # fmt: skip


@pytest.mark.slow  # litellm's token_counter loads its tokenizer (seconds)
def test_reservation_refuses_a_batch_over_budget_in_one_line(tmp_path: Path) -> None:
    price = batch_price(_model(), "api")
    assert reserve(*_cfg(), _units(3), price, (0.0, 0), (0.0, 0)) == (None, None)  # no budget: nothing reserved
    cost, tokens = reserve(*_cfg(max_cost_usd=1.0), _units(3), price, (0.0, 0), (0.0, 0))
    assert tokens > 300 and cost == pytest.approx((tokens - 300) * 1.25e-6 + 300 * 5e-6)
    with pytest.raises(ConfigError, match=r"^run.max_cost_usd: a batch of 3 requests may cost up to .* nothing was sent$"):
        reserve(*_cfg(max_cost_usd=cost * 0.99), _units(3), price, (0.0, 0), (0.0, 0))
    with pytest.raises(ConfigError, match="run.max_cost_usd"):  # what running batches hold counts
        reserve(*_cfg(max_cost_usd=cost * 1.5), _units(3), price, (0.0, 0), (cost, 0))
    with pytest.raises(ConfigError, match="run.max_total_tokens"):
        reserve(*_cfg(max_total_tokens=tokens - 1), _units(3), price, (0.0, 0), (0.0, 0))


def test_batch_options_need_batch_and_cancel_needs_resume() -> None:
    from evalkit.config import RunSettings

    with pytest.raises(ValueError, match="run.batch_detach: needs run.batch=true"):
        RunSettings(batch_detach=True)
    with pytest.raises(ValueError, match="run.batch_cancel: needs run.resume"):
        RunSettings(batch=True, batch_cancel=True)


def test_a_request_answered_twice_is_a_batch_failure_named_in_one_line(tmp_path: Path, caplog) -> None:
    """Issue 35 item 9: two lines for one custom_id (the conflicting one first) are not read
    first-line-wins: that request is a batch_failed failure; a request answered once is kept."""
    from evalkit.engine.batch import BatchExecutor

    conflicting = _ok("wrong")
    conflicting["custom_id"] = "h1"
    second = _ok("step_001")
    once = _ok("step_002")
    once["custom_id"] = "h2"
    (tmp_path / "b_1.output.jsonl").write_text("\n".join(json.dumps(r) for r in (conflicting, once, second)) + "\n")
    driver = SimpleNamespace(client=SimpleNamespace(endpoint="/v1/chat/completions"),
                             record=SimpleNamespace(dir=tmp_path), answers={})  # fmt: skip
    entry = {"batch_id": "b_1", "status": "completed", "request_hashes": ["h1", "h2"]}
    with caplog.at_level("INFO", logger="evalkit.status"):
        BatchExecutor._load_collected(driver, entry)
    assert isinstance(driver.answers["h1"], Failure) and driver.answers["h1"].error_kind == BATCH_FAILED
    assert "2 times" in driver.answers["h1"].message
    assert driver.answers["h2"].text == "step_002"
    named = [r.getMessage() for r in caplog.records if "more than once" in r.getMessage()]
    assert len(named) == 1 and "h1" in named[0] and "\n" not in named[0]


def test_a_cancellation_that_meets_an_answer_is_never_lost() -> None:
    """CI of stop 52: a Ctrl-C during a batch run's poll never ended the run. The poll was
    ``asyncio.wait_for``, which (before Python 3.12) returns the answer when it arrives as
    the caller is cancelled, so the poll loop went on. :func:`within` raises
    ``CancelledError`` then, and still times out and answers as before."""

    async def cancelled_as_answered() -> str:
        answer = asyncio.get_running_loop().create_future()
        poll = asyncio.ensure_future(within(answer, 10))
        await asyncio.sleep(0)  # the poll waits on the answer
        answer.set_result("in_progress")
        poll.cancel()  # Ctrl-C's cancellation, in the same turn of the loop as the answer
        try:
            return await poll
        except asyncio.CancelledError:
            return "cancelled"

    async def late() -> None:
        await within(asyncio.sleep(5), 0.01)

    assert asyncio.run(cancelled_as_answered()) == "cancelled"
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(late())
    assert asyncio.run(within(asyncio.sleep(0, "done"), 1)) == "done"
    assert asyncio.run(within(asyncio.sleep(0, "no deadline"), None)) == "no deadline"
