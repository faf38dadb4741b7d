"""The model protocol: ``async generate(Request) -> Completion``.

A model either returns a :class:`~evalkit.types.Completion` or raises
:class:`ModelCallError` carrying a :class:`~evalkit.types.Failure`; the engine records
the failure in ``failed.jsonl`` and never scores it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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
