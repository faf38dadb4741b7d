"""Issue 35 item 11: the embedded backend's time limit follows progress — a stall limit
between streamed chunks, and a bound scaled by the prompt's and the answer's length —
instead of one wall-clock number."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.models.base import ModelCallError
from evalkit.models.litellm_client import LiteLLMModel  # first: it keeps litellm from fetching its cost map
from evalkit.types import Request

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
        asyncio.run(_client(timeout_s=600, stall_s=0.5).generate(REQ))
    assert info.value.failure.error_kind == "timeout" and "no progress for" in info.value.failure.message
    assert "3 chunks had come" in info.value.failure.message


def test_the_bound_scales_with_prompt_and_answer_length():
    client = _client(timeout_s=10, stall_s=5, prompt_s_per_token=0.1, output_s_per_token=1.0)
    short = client.attempt_bound_s(_req("x" * 30, 10))
    long = client.attempt_bound_s(_req("x" * 3000, 500))
    assert short == pytest.approx(10 + 11 * 0.1 + 10) and long == pytest.approx(10 + 1001 * 0.1 + 500)
    assert _client(timeout_s=10).attempt_bound_s(REQ) == 10  # other backends: timeout_s as it was
