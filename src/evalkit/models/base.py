"""The model protocol: ``async generate(Request) -> Completion``.

A model either returns a :class:`~evalkit.types.Completion` or raises
:class:`ModelCallError` carrying a :class:`~evalkit.types.Failure`; the engine records
the failure in ``failed.jsonl`` and never scores it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from evalkit.types import Completion, Failure, Request


class ModelCallError(Exception):
    """A request that produced no scorable answer; ``failure`` says why."""

    def __init__(self, failure: Failure):
        super().__init__(f"{failure.error_kind}: {failure.message}")
        self.failure = failure


@runtime_checkable
class Model(Protocol):
    """Anything that answers requests. ``model_id`` keys the response cache."""

    model_id: str

    async def generate(self, request: Request) -> Completion:  # pragma: no cover - protocol
        ...


def strip_credentials(url: str | None) -> str | None:
    """``url`` without a ``user:password@`` part (ids and records never hold credentials)."""
    if not url or "@" not in url:
        return url
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=host))


def endpoint_model_id(provider_model: str, api_base: str | None, identity: str | None = None) -> str:
    """The cache and resume identity of a model reached over the network:
    ``<provider model>@<served weights identity | endpoint | default>`` (never a key)."""
    return f"{provider_model}@{identity or strip_credentials(api_base) or 'default'}"


def endpoint_kwargs(api_base: str | None, api_key: str | None) -> dict[str, str]:
    """litellm's ``api_base`` / ``api_key`` arguments for an endpoint: a local
    OpenAI-compatible server without a key gets a placeholder key (it ignores it; the
    OpenAI SDK refuses to send none)."""
    kwargs = {"api_base": api_base} if api_base else {}
    if api_key:
        kwargs["api_key"] = api_key
    elif api_base:
        kwargs["api_key"] = "sk-no-key-needed"
    return kwargs
