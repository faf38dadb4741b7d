"""The litellm client on its own (no engine, no Ray) against the scripted fake server:
the retry budget and errors raised inside the client before any request leaves.

Each attempt's ``timeout_s`` (and a budget the test means to be ample) is a base that holds
on an idle host times the host's slowness (:func:`tests.support.host.time_limit`): at load
25 two of these tests once failed with ``timeout_s=5`` and passed on a rerun (issue 48)."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.models.base import ModelCallError
from evalkit.models.litellm_client import LiteLLMModel
from evalkit.types import Request
from tests.support.host import time_limit


def _ask(model: LiteLLMModel, text: str):
    """``model.generate`` of one chat message; returns the Completion or the Failure."""
    request = Request(sample_id="s", subset="t", messages=[{"role": "user", "content": text}], params={"max_tokens": 8})
    try:
        return asyncio.run(model.generate(request))
    except ModelCallError as exc:
        return exc.failure


def test_a_wait_that_would_end_past_the_budget_is_not_started(fake_openai):
    """503 with Retry-After 3 s against a 1 s budget: the retry would start at t≈3 s, past
    the budget, so there is exactly one attempt (it used to start a second one at t≈3 s)."""
    question = "retry-budget-question"
    fake_openai.set_plan({"rules": [{"match": question, "always_status": 503, "retry_after": 3}]})
    model = LiteLLMModel(
        "openai/fake", api_base=fake_openai.api_base, timeout_s=time_limit(5), max_retries=5,
        retry_initial_wait_s=0.01, retry_max_wait_s=60, retry_budget_s=1,  # the budget is the test's point: not scaled
    )  # fmt: skip
    failure = _ask(model, question)
    assert (failure.error_kind, failure.attempts) == ("server_error", 1)
    assert [r["status"] for r in fake_openai.requests_for(question)] == [503]


def test_waits_within_the_budget_still_retry(fake_openai):
    """The budget cuts only waits that would end past it: Retry-After 0.2 s, budget 10 s,
    two scripted 503s, then the answer on the third attempt."""
    question = "retry-within-budget-question"
    fake_openai.set_plan({"rules": [{"match": question, "statuses": [503, 503], "retry_after": 0.2, "content": "ok"}]})
    model = LiteLLMModel("openai/fake", api_base=fake_openai.api_base, timeout_s=time_limit(5), max_retries=5,
                         retry_budget_s=time_limit(10))  # fmt: skip
    completion = _ask(model, question)
    assert (completion.text, completion.attempts) == ("ok", 3)
    assert [r["status"] for r in fake_openai.requests_for(question)] == [503, 503, 200]


@pytest.mark.parametrize(
    "url",
    [
        "http://user:PW@127.0.0.1:{port}/v1",  # credentials beside the API key's Authorization header
        "ftp://127.0.0.1:{port}/v1",  # not HTTP
        "http://127.0.0.1:99999/v1",  # port out of range
    ],
)
def test_a_request_that_cannot_be_built_is_client_config_not_retried(fake_openai, url):
    """An error raised inside the client before any request leaves is ``client_config``,
    after one attempt (it used to be ``server_error`` or ``connection``, retried)."""
    fake_openai.set_plan({"default": {"content": "never asked"}})
    model = LiteLLMModel(
        "openai/fake", api_base=url.format(port=fake_openai.port), api_key="sk-test", timeout_s=time_limit(5),
        max_retries=3, retry_initial_wait_s=0.01,
    )  # fmt: skip
    failure = _ask(model, "client-config-question")
    assert (failure.error_kind, failure.attempts) == ("client_config", 1)
    assert fake_openai.log == []  # nothing reached the server
    assert "PW" not in failure.message


def test_a_redirect_to_a_bad_url_is_not_a_configuration_error():
    """aiohttp's redirect errors are InvalidURL too, but the bad URL came from the server."""
    import aiohttp
    from yarl import URL

    from evalkit.models.litellm_client import error_kind, is_client_config_error

    redirect = aiohttp.InvalidUrlRedirectClientError(URL("http://127.0.0.1:1/v1/chat/completions"), "bad Location")
    assert not is_client_config_error(redirect) and error_kind(redirect) != "client_config"
    assert is_client_config_error(aiohttp.InvalidUrlClientError(URL("/127.0.0.1:1/v1/chat/completions")))
