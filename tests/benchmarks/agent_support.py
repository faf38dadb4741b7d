"""Scripted async models and helpers for the ACEBench agent tests (no network, no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from evalkit.types import Completion, Request, Sample, Trajectory


class Scripted:
    """Answers from a list (then ``default``) or a function of the request; records requests."""

    def __init__(self, replies: list[str] | Callable[[Request], str] | None = None, default: str = "finish conversation"):
        self.replies = replies if replies is not None else []
        self.default = default
        self.requests: list[Request] = []

    async def generate(self, request: Request) -> Completion:
        self.requests.append(request)
        if callable(self.replies):
            return Completion(text=self.replies(request))
        n = len(self.requests) - 1
        return Completion(text=self.replies[n] if n < len(self.replies) else self.default)


def run(loaded: Any, sample_id: str, agent: Any, user: Any = None) -> Trajectory:
    sample: Sample = loaded.by_id[sample_id]
    runner = loaded.bench.solver()
    return asyncio.run(runner.run(sample, agent, user if user is not None else Scripted([sample.data["prompt"]["question"]])))


def score(loaded: Any, sample_id: str, trajectory: Trajectory):
    return loaded.bench.score_sample(loaded.by_id[sample_id], Trajectory.from_dict(trajectory.to_dict()))


def state_of(trajectory: Trajectory, cls: str) -> dict[str, Any]:
    for entry in trajectory.data["end_state"]:
        if cls in entry:
            return entry[cls]
    raise KeyError(cls)
