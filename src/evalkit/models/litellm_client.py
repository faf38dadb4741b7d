"""The only way evalkit talks to a provider: litellm, with bounded retries.

Retry rule (engine policy, one place): retry on HTTP 408/409/429/5xx, timeouts,
connection errors (refused, reset, closed without a response) and malformed responses
(HTTP 200 whose body is not JSON), with exponential back-off and jitter, honouring
``Retry-After`` (capped at ``retry_max_wait_s``); never retry any other 4xx (bad request,
auth, not found, context window), nor an error raised inside the client before the request
left (kind ``client_config``: an endpoint URL that cannot be used, see
:func:`is_client_config_error`). One attempt lasts at most ``timeout_s`` in total — a
server that trickles its answer slower than that times out like one that never answers.
Retries are bounded by count (``max_retries``) and by time (``retry_budget_s``, seconds
from the start of the first attempt: no attempt starts after it is spent, and a wait that
would end past it is not started — tenacity's ``stop_before_delay`` sees the computed wait,
Retry-After included). Empty content is not an answer: it raises a
``ModelCallError`` of kind ``empty`` (``truncated_empty`` when the provider stopped at the
token limit, e.g. a reasoning model that spent the whole budget thinking).
"""

from __future__ import annotations

import os

# litellm fetches a remote model-cost map at import unless told not to (offline machines
# would wait on it). Must be set before the first ``import litellm`` in any process.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import asyncio  # noqa: E402
import email.utils  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import litellm  # noqa: E402
from tenacity import (  # noqa: E402
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
)

from evalkit.errors import host_load, within  # noqa: E402
from evalkit.images import sendable  # noqa: E402
from evalkit.models.base import ModelCallError, endpoint_kwargs, endpoint_model_id  # noqa: E402
from evalkit.providers import UNPRICED_MARK, usage_counts  # noqa: E402
from evalkit.types import Completion, Failure, Request  # noqa: E402

litellm.suppress_debug_info = True
litellm.telemetry = False

RETRYABLE_STATUS = {408, 409, 429}
class StallError(TimeoutError):
    """A streamed answer that stopped coming (:attr:`LiteLLMModel.stall_s`): a timeout."""


@dataclass(eq=False)
class Attempt:
    """One attempt in flight in this process: when it started (``time.perf_counter()``) and
    the chunks of its streamed answer so far (one token each from llama.cpp's server; ``0``
    for an answer not streamed). Counted for the console only, never recorded."""

    started: float
    chunks: int = 0

    def rate(self) -> str:
        """``"4.2 tok/s"`` over the attempt so far, ``""`` before its first chunk."""
        elapsed = time.perf_counter() - self.started
        return f"{self.chunks / elapsed:.1f} tok/s" if self.chunks and elapsed > 0 else ""


#: the attempts in flight in this process (a model worker's), read by :func:`in_flight`
IN_FLIGHT: set[Attempt] = set()


def in_flight() -> tuple[int, int, float]:
    """``(attempts in flight, chunks streamed by them so far, seconds the oldest has run)``
    in this process: what the console's progress bar shows of long requests."""
    now, attempts = time.perf_counter(), list(IN_FLIGHT)
    return len(attempts), sum(a.chunks for a in attempts), max((now - a.started for a in attempts), default=0.0)


def _why_slow(attempt: Attempt) -> str:
    """``"; 1.3 tok/s measured; the host's load is 25.1 on 2 cores (the likely cause)"``:
    what a timeout's message adds, each part only when known."""
    rate, load = attempt.rate(), host_load()
    return (f"; {rate} measured" if rate else "") + (f"; {load} (the likely cause)" if load else "")


#: the answer's length assumed by :meth:`LiteLLMModel.attempt_bound_s` when a request sets no ``max_tokens``
DEFAULT_OUTPUT_TOKENS = 1024


@dataclass
class LiteLLMModel:
    """A model reached through ``litellm.acompletion`` / ``litellm.atext_completion``.

    Attributes:
        provider_model: litellm model string (``openai/smollm2``, ``deepseek/deepseek-chat``).
        api: ``chat`` (messages) or ``completion`` (text prompt).
        api_base / api_key: endpoint and credential (the key is never logged or pickled
            into records).
        timeout_s: per-attempt timeout in seconds: a deadline for the whole answer, not only
            for the wait between two bytes of it.
        max_retries, retry_initial_wait_s, retry_max_wait_s, retry_budget_s: retry policy.

    Every parameter sent besides the prompt comes from ``request.params`` (generation
    parameters and ``extra_body``, the provider fields of the model config): what is sent
    is what the request's hash covers.
    """

    provider_model: str
    api: str = "chat"
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 600.0
    max_retries: int = 5
    retry_initial_wait_s: float = 1.0
    retry_max_wait_s: float = 60.0
    retry_budget_s: float = 600.0
    #: identity of the served weights when the endpoint address is not stable (evalkit's
    #: own llama.cpp server gets a new port every run)
    identity: str | None = None
    #: a slot on the endpoint's shared rate limit, held for each attempt (``None``: none):
    #: ``await gate.acquire()`` → lease, then ``gate.release(lease, throttled)``
    #: (:class:`evalkit.engine.ratelimit.EndpointGate`, set by the model worker)
    gate: Any = field(default=None, repr=False, compare=False)
    #: how the model takes a JSON schema (``model.response_format``; the engine puts a
    #: request's ``response_format`` in this form before it is hashed and sent)
    response_format: str | None = None
    #: progress-following limits (``backend=llamacpp``; ``None``: one wall-clock ``timeout_s``
    #: per attempt): the answer is streamed and an attempt times out when no chunk came for
    #: ``stall_s`` seconds (the first chunk may also take ``prompt_s_per_token`` per prompt
    #: token, the prompt's evaluation), or past :meth:`attempt_bound_s`
    stall_s: float | None = None
    prompt_s_per_token: float = 0.0
    output_s_per_token: float = 0.0

    def __post_init__(self) -> None:
        _price_unknown_model(self.provider_model)

    @property
    def model_id(self) -> str:
        """Cache and resume identity: provider model plus endpoint or served weights (never the key)."""
        return endpoint_model_id(self.provider_model, self.api_base, self.identity)

    # ---- one attempt ------------------------------------------------------------------
    async def _attempt(self, request: Request) -> Completion:
        kwargs: dict[str, Any] = dict(request.params)
        kwargs.update(
            model=self.provider_model,
            timeout=self.timeout_s,
            num_retries=0,  # evalkit owns the retry policy
            max_retries=0,  # and the OpenAI SDK must not retry underneath it
        )
        kwargs.update(endpoint_kwargs(self.api_base, self.api_key))
        start = time.perf_counter()
        if self.api == "completion" or request.messages is None:
            prompt = request.prompt if request.prompt is not None else _messages_as_text(request.messages or [])
            resp = await litellm.atext_completion(prompt=prompt, **kwargs)
            choice = resp.choices[0]
            text, reasoning = choice.text, None
        else:
            resp = await litellm.acompletion(messages=sendable(request.messages, request.images), **kwargs)
            choice = resp.choices[0]
            text = choice.message.content
            reasoning = getattr(choice.message, "reasoning_content", None)
        return _completion(resp, choice, text, reasoning, time.perf_counter() - start)

    def attempt_bound_s(self, request: Request) -> float:
        """Seconds one attempt may take in all: ``timeout_s``, plus, with :attr:`stall_s`,
        ``prompt_s_per_token`` × the prompt's tokens (estimated as characters / 3, an upper
        bound for English and code) and ``output_s_per_token`` × ``max_tokens`` (the
        request's, else :data:`DEFAULT_OUTPUT_TOKENS`): a longer prompt or answer gets
        proportionally longer, never one wall-clock number for all."""
        if self.stall_s is None:
            return self.timeout_s
        return self.timeout_s + self._prompt_tokens(request) * self.prompt_s_per_token + (
            int(request.params.get("max_tokens") or DEFAULT_OUTPUT_TOKENS) * self.output_s_per_token
        )

    @staticmethod
    def _prompt_tokens(request: Request) -> int:
        text = request.prompt if request.prompt is not None else _messages_as_text(request.messages or [])
        return len(text) // 3 + 1

    async def _attempt_within_timeout(self, request: Request) -> Completion:
        """One attempt under a hard deadline: litellm's ``timeout`` bounds each read, so a
        server sending a byte now and then would otherwise hold the attempt for ever. With
        :attr:`stall_s` (chat requests) the answer is streamed and a stall between chunks
        ends it too."""
        bound = self.attempt_bound_s(request)
        streamed = self.stall_s is not None and self.api != "completion" and request.messages is not None
        attempt = Attempt(time.perf_counter())
        IN_FLIGHT.add(attempt)
        try:
            return await within(self._streamed(request, attempt) if streamed else self._attempt(request), bound)
        except StallError as exc:
            raise StallError(f"{exc}{_why_slow(attempt)}") from None
        except asyncio.TimeoutError:
            raise TimeoutError((f"no complete answer within {bound:.0f} s (timeout_s={self.timeout_s:g} "
                                "scaled by the prompt's and answer's length)" if streamed else
                                f"no complete answer within timeout_s={self.timeout_s:g}") + _why_slow(attempt)) from None  # fmt: skip
        finally:
            IN_FLIGHT.discard(attempt)

    async def _streamed(self, request: Request, attempt: Attempt | None = None) -> Completion:
        """:meth:`_attempt` for a chat request, streamed: each chunk must come within
        ``stall_s`` of the last (the first within ``stall_s`` + the prompt's evaluation
        bound); the chunks are put together by ``litellm.stream_chunk_builder`` (usage
        counted by litellm when the server sends none). ``attempt``: where the chunks are
        counted as they come (the console's count; what is recorded is litellm's usage).

        Raises:
            TimeoutError: a stall (its length named).
        """
        kwargs: dict[str, Any] = dict(request.params)
        kwargs.update(model=self.provider_model, timeout=self.timeout_s, num_retries=0, max_retries=0, stream=True)
        kwargs.update(endpoint_kwargs(self.api_base, self.api_key))
        start = time.perf_counter()
        messages = sendable(request.messages, request.images)  # image parts as base64 data: URLs
        stream = await litellm.acompletion(messages=messages, **kwargs)
        chunks: list[Any] = []
        first = float(self.stall_s or 0) + self._prompt_tokens(request) * self.prompt_s_per_token
        iterator = stream.__aiter__()
        while True:
            wait = first if not chunks else float(self.stall_s or 0)
            try:
                chunks.append(await within(iterator.__anext__(), wait))
                if attempt is not None:
                    attempt.chunks += 1
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                raise StallError(f"no progress for {wait:.0f} s (backend.stall_timeout_s={self.stall_s:g}; "
                                   f"{len(chunks)} chunks had come)") from None  # fmt: skip
        resp = litellm.stream_chunk_builder(chunks, messages=messages) if chunks else None
        if resp is None or not resp.choices:
            raise ModelCallError(Failure("empty", "no content (the stream ended without a chunk)"))
        choice = resp.choices[0]
        reasoning = getattr(choice.message, "reasoning_content", None)
        return _completion(resp, choice, choice.message.content, reasoning, time.perf_counter() - start)

    # ---- with retries -----------------------------------------------------------------
    async def generate(self, request: Request) -> Completion:
        """Answer ``request``; raises :class:`ModelCallError` when no answer was obtained."""
        attempts = throttled = 0
        retrying = AsyncRetrying(
            retry=retry_if_exception(is_retryable),
            stop=stop_after_attempt(self.max_retries + 1) | stop_before_delay(self.retry_budget_s),
            wait=_RetryAfterWait(self.retry_initial_wait_s, self.retry_max_wait_s),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    lease = await self.gate.acquire() if self.gate is not None else None
                    limited = False
                    try:
                        completion = await self._attempt_within_timeout(request)
                    except Exception as exc:
                        limited = status_code(exc) == 429
                        throttled += limited
                        raise
                    finally:
                        if lease is not None:
                            self.gate.release(lease, limited)
        except ModelCallError as exc:
            exc.failure.attempts, exc.failure.throttled = attempts, throttled
            raise
        except Exception as exc:  # noqa: BLE001 - every provider error becomes a Failure
            raise ModelCallError(Failure(error_kind(exc), _short(exc), attempts=attempts, throttled=throttled)) from None
        completion.attempts, completion.throttled = attempts, throttled
        return completion


def _completion(resp: Any, choice: Any, text: Any, reasoning: Any, latency: float) -> Completion:
    """The :class:`Completion` of a response; empty content is not an answer.

    Raises:
        ModelCallError: kind ``truncated_empty`` (stopped at the token limit) or ``empty``.
    """
    usage = usage_counts(getattr(resp, "usage", None))
    finish = getattr(choice, "finish_reason", None)
    if text is None or not str(text).strip():
        kind = "truncated_empty" if finish == "length" else "empty"
        detail = "reasoning only, no final answer" if reasoning else "no content"
        raise ModelCallError(Failure(kind, f"{detail} (finish_reason={finish})", usage=usage, reasoning=reasoning))
    return Completion(text=str(text), finish_reason=finish, reasoning=reasoning, usage=usage, latency_s=latency)


_PRICED: set[str] = set()


def _price_unknown_model(provider_model: str) -> None:
    """Register a model litellm's cost map does not know (a self-hosted or local
    OpenAI-compatible server) at zero cost, once per process.

    litellm prices every response; for an unknown model that lookup misses and falls back
    to a fuzzy search of the whole cost map on every call, about a tenth of a call's CPU
    time (measured with ``perf/throughput.py``). The entry carries
    :data:`~evalkit.providers.UNPRICED_MARK`, so evalkit's own price lookup
    (:func:`evalkit.providers.litellm_price`) never reads it as a price of 0.
    """
    if provider_model in _PRICED:
        return
    _PRICED.add(provider_model)
    try:
        litellm.get_model_info(provider_model)
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception for an unknown model
        provider = provider_model.split("/", 1)[0] if "/" in provider_model else "openai"
        litellm.register_model(
            {provider_model: dict(_ZERO_COST, litellm_provider=provider, mode="chat", **{UNPRICED_MARK: True})}
        )


_ZERO_COST = {
    "input_cost_per_token": 0.0,
    "output_cost_per_token": 0.0,
    "cache_creation_input_token_cost": 0.0,
    "cache_read_input_token_cost": 0.0,
}


def _messages_as_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def status_code(exc: BaseException) -> int | None:
    """HTTP status of a provider error, if any."""
    code = getattr(exc, "status_code", None)
    return int(code) if isinstance(code, int) else None


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < 10:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def is_connection_error(exc: BaseException) -> bool:
    """True when the connection failed: refused, reset or closed without a response
    (litellm reports these as HTTP 500, so the exception chain is inspected: httpx/openai
    connection errors, refused or reset sockets)."""
    import httpx

    return any(
        isinstance(e, (litellm.APIConnectionError, httpx.ConnectError, httpx.RemoteProtocolError, ConnectionError))
        and not isinstance(e, litellm.Timeout)
        or type(e).__name__ == "APIConnectionError"
        for e in _chain(exc)
    ) and not any(isinstance(e, (httpx.TimeoutException, litellm.Timeout)) for e in _chain(exc))


def is_timeout(exc: BaseException) -> bool:
    import httpx

    return any(isinstance(e, (litellm.Timeout, httpx.TimeoutException, TimeoutError)) for e in _chain(exc))


#: litellm's words for a 200 whose body is not a completion object (e.g. a proxy's HTML page)
_INVALID_RESPONSE = "Empty or invalid response from LLM endpoint"


def is_malformed_response(exc: BaseException) -> bool:
    """True when the server answered 200 but its body is not a completion (litellm reports
    these as HTTP 500: the chain holds the JSONDecodeError of a cut-off JSON body, or
    litellm's own "invalid response" error for a body of another type)."""
    return any(isinstance(e, json.JSONDecodeError) or _INVALID_RESPONSE in str(e) for e in _chain(exc))


#: modules whose ValueError means the request could not even be built (URL parsing, the
#: HTTP client's request set-up): nothing was sent, so nothing a server did caused it
_REQUEST_BUILDERS = ("aiohttp", "yarl", "httpx", "httpcore", "urllib.parse")


def _raised_in(exc: BaseException) -> str:
    """Module of the frame that raised ``exc`` (the innermost frame of its traceback)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")) if tb is not None else ""


def is_client_config_error(exc: BaseException) -> bool:
    """True when the request failed inside the client before anything was sent: the
    endpoint or the request cannot be built (an invalid or non-HTTP URL, credentials in
    the URL next to the API key's Authorization header, a port out of range). litellm
    reports these as HTTP 500 or as connection errors; the exception chain holds the
    HTTP client's own error (httpx/aiohttp ``InvalidURL``, ``UnsupportedProtocol``,
    ``NonHttpUrlClientError``) or a ``ValueError`` raised in aiohttp, yarl, httpx or
    urllib.parse. Retrying cannot help: the same request fails the same way. (A redirect
    to a bad URL is the server's doing, not a configuration error: not counted.)"""
    import aiohttp
    import httpx

    built = (httpx.InvalidURL, httpx.UnsupportedProtocol, aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)
    for e in _chain(exc):
        if isinstance(e, aiohttp.RedirectClientError):
            continue
        if isinstance(e, built):
            return True
        if isinstance(e, ValueError) and not isinstance(e, (json.JSONDecodeError, UnicodeError)):
            module = _raised_in(e)
            if any(module == m or module.startswith(m + ".") for m in _REQUEST_BUILDERS):
                return True
    return False


def is_retryable(exc: BaseException) -> bool:
    """Engine retry rule: 408/409/429/5xx, timeouts, connection errors and malformed
    responses; no other 4xx, and never a request that could not be built
    (:func:`is_client_config_error`)."""
    if isinstance(exc, ModelCallError) or is_client_config_error(exc):
        return False
    if is_timeout(exc) or is_connection_error(exc) or is_malformed_response(exc):
        return True
    code = status_code(exc)
    if code is None:
        return isinstance(exc, (TimeoutError, ConnectionError, OSError))
    return code in RETRYABLE_STATUS or code >= 500


def error_kind(exc: BaseException) -> str:
    """Short failure kind for ``failed.jsonl``."""
    if is_client_config_error(exc):
        return "client_config"
    if isinstance(exc, litellm.ContextWindowExceededError):
        return "context_window"
    if is_timeout(exc):
        return "timeout"
    if is_connection_error(exc):
        return "connection"
    if is_malformed_response(exc):
        return "malformed_response"
    code = status_code(exc)
    if code == 429:
        return "rate_limit"
    if code in (401, 403):
        return "auth"
    if code is not None and code >= 500:
        return "server_error"
    if code is not None and code >= 400:
        return "client_error"
    if isinstance(exc, OSError):
        return "connection"
    return "internal"


def retry_after_seconds(exc: BaseException | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), if present."""
    if exc is None:
        return None
    headers = None
    response = getattr(exc, "response", None)
    if response is not None:
        headers = getattr(response, "headers", None)
    headers = headers or getattr(exc, "headers", None) or getattr(exc, "litellm_response_headers", None)
    if not headers:
        return None
    value = None
    for key in ("retry-after", "Retry-After"):
        try:
            value = headers.get(key)
        except AttributeError:
            value = None
        if value:
            break
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class _RetryAfterWait:
    """tenacity wait: the server's ``Retry-After`` if given, else exponential jitter."""

    def __init__(self, initial: float, maximum: float):
        self.maximum = maximum
        self.backoff = wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = retry_after_seconds(exc)
        if hinted is not None:
            return min(hinted, self.maximum)
        return self.backoff(state)


def _short(exc: BaseException, limit: int = 500) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:limit]
