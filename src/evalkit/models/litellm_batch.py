"""A provider's batch API, reached through litellm (``acreate_file``, ``acreate_batch``,
``aretrieve_batch``, ``afile_content``, ``acancel_batch``, ``alist_batches``).

Which providers (litellm 1.110): evalkit batches the providers whose batch API takes
OpenAI's input file unchanged and which litellm creates, retrieves, reads and cancels:
:data:`BATCH_PROVIDERS`. Every other provider is refused in one line before anything is
sent (:func:`batch_refusal`): Anthropic (litellm's batch creation raises
``NotImplementedError``), DeepSeek (no batch API), Mistral (no ``cancel_batch``), and
those whose input litellm transforms on its way (vertex_ai, bedrock, gemini), which evalkit
has not been tested against.

A request line of the input file (OpenAI's batch input format) is
``{"custom_id", "method": "POST", "url", "body"}``; its ``body`` is what a live call sends:
the model's name at the provider, the messages (or the prompt, ``model.api=completion``)
and the request's parameters as litellm maps them for the provider
(``litellm.utils.get_optional_params``), ``extra_body`` fields merged at the top level as
the OpenAI SDK sends them. A line of the output file is
``{"custom_id", "response": {"status_code", "body"}, "error"}``; :func:`parse_result`
turns it into the same :class:`~evalkit.types.Completion` (or
:class:`~evalkit.types.Failure`) the live client returns.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError
from evalkit.images import sendable
from evalkit.models.base import ModelCallError, endpoint_kwargs
from evalkit.providers import litellm_module, usage_counts
from evalkit.types import Completion, Failure, Request
from evalkit.untrusted import open_file

#: the largest batch output file read back (bytes; a provider's limit is 200 MB of input)
MAX_BATCH_OUTPUT_BYTES = 4 * 2**30

#: providers whose batches evalkit sends through litellm
status = logging.getLogger("evalkit.status")

BATCH_PROVIDERS = ("openai", "azure", "hosted_vllm", "litellm_proxy", "xai")
#: why litellm 1.110 cannot batch a provider (those not named: no batch API litellm drives)
_WHY_NOT = {
    "anthropic": "litellm 1.110's batch creation for anthropic raises NotImplementedError",
    "deepseek": "DeepSeek has no batch API",
    "mistral": "litellm 1.110 has no cancel_batch for mistral",
    "vertex_ai": "litellm transforms vertex_ai batch input on its way; evalkit has not been tested against it",
    "bedrock": "litellm transforms bedrock batch input on its way; evalkit has not been tested against it",
    "gemini": "litellm transforms gemini batch input on its way; evalkit has not been tested against it",
}

#: failure kinds of a batched request that got no answer
BATCH_EXPIRED = "batch_expired"
BATCH_FAILED = "batch_failed"
BATCH_CANCELLED = "batch_cancelled"


def provider_of(provider_model: str) -> tuple[str, str]:
    """``(provider, model name at the provider)`` as litellm reads ``provider_model``."""
    litellm = litellm_module()
    model, provider, _, _ = litellm.get_llm_provider(provider_model)
    return str(provider), str(model)


def batch_refusal(provider_model: str) -> str | None:
    """Why ``provider_model`` cannot be batched (one line), or ``None`` when it can."""
    try:
        provider, _ = provider_of(provider_model)
    except Exception:  # noqa: BLE001 - litellm cannot tell the provider
        return f"run.batch: litellm cannot tell the provider of {provider_model}; batches go to {', '.join(BATCH_PROVIDERS)}"
    if provider in BATCH_PROVIDERS:
        return None
    why = _WHY_NOT.get(provider, "litellm has no batch API for it")
    return (f"run.batch: provider {provider} ({provider_model}) cannot be batched ({why}); "
            f"batches go to {', '.join(BATCH_PROVIDERS)}; run without run.batch")  # fmt: skip


@dataclass
class BatchClient:
    """One model's batch endpoint. ``api_key`` is never logged or recorded."""

    provider_model: str
    api: str = "chat"
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        self.provider, self.model = provider_of(self.provider_model)

    @property
    def endpoint(self) -> str:
        return "/v1/completions" if self.api == "completion" else "/v1/chat/completions"

    def _auth(self) -> dict[str, Any]:
        return {"custom_llm_provider": self.provider, "timeout": self.timeout_s, **endpoint_kwargs(self.api_base, self.api_key)}

    def body(self, request: Request) -> dict[str, Any]:
        """The body a live call of ``request`` sends (see the module docstring)."""
        from litellm.utils import get_optional_params

        params = dict(request.params)
        extra = params.pop("extra_body", None) or {}
        mapped = get_optional_params(model=self.model, custom_llm_provider=self.provider, **params)
        mapped = {k: v for k, v in mapped.items() if v is not None and not (k == "stream" and v is False)}
        extra = {**(mapped.pop("extra_body", None) or {}), **extra}
        prompt: dict[str, Any]
        if self.api == "completion" or request.messages is None:
            prompt = {"prompt": request.prompt if request.prompt is not None else _as_text(request.messages or [])}
        else:
            prompt = {"messages": sendable(request.messages, request.images)}  # images inline: the provider's file holds them
        return {"model": self.model, **prompt, **mapped, **extra}

    def line(self, custom_id: str, request: Request) -> bytes:
        """One line of the batch input file (UTF-8, ``\\n``-terminated)."""
        obj = {"custom_id": custom_id, "method": "POST", "url": self.endpoint, "body": self.body(request)}
        return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")

    async def upload(self, data: bytes, name: str) -> str:
        """Upload an input file; returns the provider's file id."""
        litellm = litellm_module()
        made = await litellm.acreate_file(file=(name, data, "application/jsonl"), purpose="batch", **self._auth())
        return str(made.id)

    async def find_file(self, name: str, size: int) -> str | None:
        """The id of an input file named ``name`` of ``size`` bytes already at the provider
        (the newest), or ``None``: what a driver killed during an upload looks for before
        it uploads again (the name carries the input's digest, so the same name and size
        is the same input)."""
        litellm = litellm_module()
        listed = await litellm.afile_list(purpose="batch", **self._auth())
        data = listed.get("data") if isinstance(listed, dict) else getattr(listed, "data", listed)
        found = [f for f in map(_as_dict, data or []) if f.get("filename") == name and f.get("bytes") == size]
        found.sort(key=lambda f: f.get("created_at") or 0)
        return str(found[-1]["id"]) if found else None

    async def create(self, file_id: str, metadata: dict[str, str]) -> dict[str, Any]:
        """Create a batch of an uploaded file; returns the batch object (a dict)."""
        litellm = litellm_module()
        made = await litellm.acreate_batch(completion_window="24h", endpoint=self.endpoint, input_file_id=file_id,
                                           metadata=metadata, **self._auth())  # fmt: skip
        return _as_dict(made)

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        litellm = litellm_module()
        return _as_dict(await litellm.aretrieve_batch(batch_id=batch_id, **self._auth()))

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        litellm = litellm_module()
        return _as_dict(await litellm.acancel_batch(batch_id=batch_id, **self._auth()))

    async def content(self, file_id: str) -> bytes:
        """The bytes of an output or error file."""
        litellm = litellm_module()
        got = await litellm.afile_content(file_id=file_id, **self._auth())
        return bytes(got.content)

    async def find(self, input_file_id: str, pages: int = 10) -> dict[str, Any] | None:
        """The batch the provider made of ``input_file_id`` (newest first, at most
        ``pages`` pages of 100), or ``None``: what a driver killed between creating a
        batch and recording its id looks for before it creates one again."""
        litellm = litellm_module()
        after = None
        for _ in range(pages):
            kwargs: dict[str, Any] = {"limit": 100, **self._auth()}
            if after:
                kwargs["after"] = after
            page = _as_dict(await litellm.alist_batches(**kwargs))
            data = page.get("data") or []
            for batch in data:
                batch = _as_dict(batch)
                if batch.get("input_file_id") == input_file_id:
                    return batch
            if not page.get("has_more") or not data:
                return None
            after = _as_dict(data[-1]).get("id")
        return None


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None)
    return dump() if callable(dump) else dict(obj)


def _as_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def parse_result(row: dict[str, Any], chat: bool) -> tuple[str, Completion | Failure]:
    """``(custom_id, answer)`` of one line of an output or error file: a
    :class:`~evalkit.types.Completion` read as the live client reads an answer (empty
    content is a failure of kind ``empty`` / ``truncated_empty``), or a
    :class:`~evalkit.types.Failure` of kind ``batch_expired`` / ``batch_failed``."""
    custom_id = str(row.get("custom_id"))
    error, response = row.get("error"), row.get("response")
    if not isinstance(response, dict) or error:
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else "no response"
        kind = BATCH_EXPIRED if code == "batch_expired" else BATCH_FAILED
        return custom_id, Failure(kind, f"{code or 'error'}: {message}"[:500], attempts=0 if kind == BATCH_EXPIRED else 1)
    body = response.get("body") if isinstance(response.get("body"), dict) else {}
    status = response.get("status_code")
    if status != 200:
        err = body.get("error") if isinstance(body.get("error"), dict) else {}
        return custom_id, Failure(BATCH_FAILED, f"HTTP {status}: {err.get('message', '')}"[:500])
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = message.get("content") if chat else choice.get("text")
    reasoning = message.get("reasoning_content") if chat else None
    usage = usage_counts(body.get("usage"))
    finish = choice.get("finish_reason")
    if text is None or not str(text).strip():
        kind = "truncated_empty" if finish == "length" else "empty"
        detail = "reasoning only, no final answer" if reasoning else "no content"
        return custom_id, Failure(kind, f"{detail} (finish_reason={finish})", usage=usage, reasoning=reasoning)
    return custom_id, Completion(text=str(text), finish_reason=finish, reasoning=reasoning, usage=usage, latency_s=0.0)


class BatchAnswers:
    """A model answering from collected batch files (``answers``: request hash →
    completion or failure). A request it holds no answer for is a failure of kind
    ``batch_failed`` (the engine only asks for collected requests). The first answer to
    a request hash is the one paid for; a second unit asking the same request (two
    samples with one prompt) gets it as a cache hit, as the live path would."""

    def __init__(self, model_id: str, answers: dict[str, Completion | Failure]):
        self.model_id = model_id
        self.answers = answers
        self.served: set[str] = set()

    async def generate(self, request: Any) -> Completion:
        key = request.request_hash(self.model_id)
        answer = self.answers.get(key)
        if answer is None:
            raise ModelCallError(Failure(BATCH_FAILED, "no answer in the batch's output or error file"))
        if isinstance(answer, Failure):
            raise ModelCallError(dataclasses.replace(answer))
        completion = dataclasses.replace(answer, attempts=1, cached=key in self.served)
        self.served.add(key)
        return completion

    def pair(self, sample: Any) -> tuple["BatchAnswers", None]:
        return self, None


def read_batch_files(paths: list[Path], owned: set[str], chat: bool, batch_id: str) -> dict[str, Completion | Failure]:
    """The answers one ended batch's kept output and error files give its requests
    (``owned``: their custom ids, the request hashes): ``{custom_id: Completion | Failure}``.

    Lines that are not JSON objects and ids the batch does not own are skipped; linked or
    missing files are not read. A custom id answered by more than one line (in either file,
    equal or not) breaks the batch API's contract of one result per request: which line is
    true cannot be known, so that request is a ``batch_failed`` failure (never scored; a
    resume sends it again), and the ids are named in one console line.
    """
    answers: dict[str, Completion | Failure] = {}
    lines: dict[str, int] = {}
    for path in paths:
        if not path.is_file() or path.is_symlink():
            continue
        with open_file(path, MAX_BATCH_OUTPUT_BYTES, follow=False, what="a batch output file") as fh:
            texts = [raw.decode("utf-8", errors="replace") for raw in fh]
        for text in texts:
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                custom_id, answer = parse_result(row, chat)
                if custom_id in owned:
                    lines[custom_id] = lines.get(custom_id, 0) + 1
                    answers.setdefault(custom_id, answer)
    twice = sorted(h for h, n in lines.items() if n > 1)
    for h in twice:
        answers[h] = Failure(BATCH_FAILED, f"batch {batch_id} answered this request {lines[h]} times "
                             "(one result per request expected); none of them is used", attempts=1)  # fmt: skip
    if twice:
        status.warning("batch %s answered %d request(s) more than once, recorded as batch_failed failures: %s",
                       batch_id, len(twice), ", ".join(h[:16] for h in twice[:10]) + (" …" if len(twice) > 10 else ""))  # fmt: skip
    return answers


def as_plain(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump()
    return obj if isinstance(obj, (dict, list, str, int, float, type(None))) else str(obj)
