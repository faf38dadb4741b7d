"""Issue 35 item 11: the embedded backend's time limit follows progress — a stall limit
between streamed chunks, and a bound scaled by the prompt's and the answer's length —
instead of one wall-clock number."""

from __future__ import annotations

import asyncio
import re

import pytest

from evalkit.models.base import ModelCallError
from evalkit.models.litellm_client import LiteLLMModel  # first: it keeps litellm from fetching its cost map
from evalkit.types import Request
from tests.support.host import time_limit

import litellm  # noqa: E402
from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices  # noqa: E402


def _chunk(text: str, finish: str | None = None) -> ModelResponseStream:
    return ModelResponseStream(id="c1", model="smollm2", created=1, choices=[
        StreamingChoices(index=0, delta=Delta(content=text, role="assistant"), finish_reason=finish)])  # fmt: skip


def _server(monkeypatch, pieces: list[str], gap_s: float, stall_after: int | None = None) -> None:
    """litellm.acompletion answering a stream of ``pieces`` ``gap_s`` apart; with
    ``stall_after`` it then sends nothing more (a stalled server)."""

    async def stream():
        for i, piece in enumerate(pieces):
            if stall_after is not None and i == stall_after:
                await asyncio.Event().wait()
            await asyncio.sleep(gap_s)
            yield _chunk(piece, "stop" if i == len(pieces) - 1 else None)

    async def acompletion(**kwargs):
        assert kwargs["stream"] is True
        return stream()

    monkeypatch.setattr(litellm, "acompletion", acompletion)


def _client(**kw) -> LiteLLMModel:
    return LiteLLMModel("openai/smollm2", api_base="http://127.0.0.1:9/v1", max_retries=0, **kw)


def _req(content: str = "hi", max_tokens: int = 100) -> Request:
    return Request(sample_id="s1", subset="t", messages=[{"role": "user", "content": content}], params={"max_tokens": max_tokens})


REQ = _req()


def test_an_answer_that_keeps_coming_is_not_cut_by_one_wall_clock_number(monkeypatch):
    """20 chunks 0.05 s apart take 1 s: past a 0.2 s wall-clock timeout_s, well within a
    30 s stall limit and the length-scaled bound (0.2 + 100 tokens × 1 s)."""
    _server(monkeypatch, ["x"] * 20, gap_s=0.05)
    got = asyncio.run(_client(timeout_s=0.2, stall_s=30.0, output_s_per_token=1.0).generate(REQ))
    assert got.text == "x" * 20 and got.finish_reason == "stop"


def test_a_stalled_stream_is_a_timeout_named_as_a_stall(monkeypatch):
    """Three chunks, then nothing: a timeout after the stall limit, not after the 600 s bound."""
    _server(monkeypatch, ["a", "b", "c", "d"], gap_s=0.0, stall_after=3)
    with pytest.raises(ModelCallError) as info:
        asyncio.run(_client(timeout_s=600, stall_s=time_limit(0.5)).generate(REQ))
    assert info.value.failure.error_kind == "timeout" and "no progress for" in info.value.failure.message
    assert "3 chunks had come" in info.value.failure.message


def test_the_bound_scales_with_prompt_and_answer_length():
    client = _client(timeout_s=10, stall_s=5, prompt_s_per_token=0.1, output_s_per_token=1.0)
    short = client.attempt_bound_s(_req("x" * 30, 10))
    long = client.attempt_bound_s(_req("x" * 3000, 500))
    assert short == pytest.approx(10 + 11 * 0.1 + 10) and long == pytest.approx(10 + 1001 * 0.1 + 500)
    assert _client(timeout_s=10).attempt_bound_s(REQ) == 10  # other backends: timeout_s as it was


def _loaded(monkeypatch, load: float, cores: int = 2) -> None:
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "cpu_count", lambda: cores)


def test_a_stall_on_a_loaded_host_names_the_measured_rate_and_the_load(monkeypatch):
    """Issue 48 item 4: a timeout once said only how long it waited, with no hint that the
    host's load (25 on 2 cores) was the cause. Three chunks 0.05 s apart, then a stall."""
    _server(monkeypatch, ["a", "b", "c", "d"], gap_s=0.05, stall_after=3)
    _loaded(monkeypatch, 25.0)
    with pytest.raises(ModelCallError) as info:
        asyncio.run(_client(timeout_s=600, stall_s=time_limit(0.5)).generate(REQ))
    message = info.value.failure.message
    assert info.value.failure.error_kind == "timeout" and "3 chunks had come" in message
    rate = re.search(r"; (\d+\.\d) tok/s measured; ", message)
    assert rate is not None and 0 < float(rate.group(1)) <= 60  # 3 chunks over at least 0.15 s
    assert message.endswith("; the host's load is 25.0 on 2 cores (the likely cause)")


def test_a_timeout_on_a_quiet_host_does_not_blame_the_load(monkeypatch):
    """A wall-clock timeout of a request not streamed: no rate to give, and a load of 1 on 2
    cores is not called a cause."""
    async def acompletion(**kwargs):
        await asyncio.Event().wait()

    monkeypatch.setattr(litellm, "acompletion", acompletion)
    _loaded(monkeypatch, 1.0)
    with pytest.raises(ModelCallError) as info:
        asyncio.run(_client(timeout_s=0.2).generate(REQ))
    assert info.value.failure.message == "TimeoutError: no complete answer within timeout_s=0.2"


def test_the_tokens_of_answers_in_flight_are_counted_as_they_arrive(monkeypatch):
    """What the console's bar shows of a long request (issue 48 item 4): the attempts in
    flight and their chunks so far, read while the answer streams; none once it is done; the
    recorded answer is the same as without the count."""
    from evalkit.models.litellm_client import in_flight

    _server(monkeypatch, ["x"] * 10, gap_s=0.05)
    seen: list[tuple[int, int, float]] = []

    async def main():
        task = asyncio.ensure_future(_client(timeout_s=600, stall_s=time_limit(5)).generate(REQ))
        while not task.done():
            seen.append(in_flight())
            await asyncio.sleep(0.01)
        return await task

    got = asyncio.run(main())
    assert got.text == "x" * 10
    chunks = [c for n, c, _ in seen if n]
    assert all(n in (0, 1) for n, _, _ in seen) and chunks == sorted(chunks) and 0 < max(chunks) <= 10
    assert in_flight() == (0, 0, 0.0)


def test_the_host_load_hint_is_given_only_past_one_and_a_half_per_core():
    from evalkit.errors import host_load

    assert host_load((25.04, 20.0, 10.0), 2) == "the host's load is 25.0 on 2 cores"
    assert host_load((2.9, 9.0, 9.0), 2) == ""  # the 1-minute figure decides
    assert host_load((1.5, 0.0, 0.0), 1) == "the host's load is 1.5 on 1 core"
