"""The engine's work item: one sample in one epoch (what is dispatched to a model worker,
solved, journaled and found again on resume). Not the statistics' unit (a sample, a
dialogue or a question: ``evalkit.stats.StatPlan``)."""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.types import Request, Sample


@dataclass
class WorkItem:
    """One work item: a sample in one epoch, its first request (whose hash identifies
    the result; it carries the epoch) and whether the solver runs it as a multi-turn rollout."""

    sample: Sample
    request: Request
    rollout: bool = False

    @property
    def key(self) -> tuple[str, int]:
        """``(sample id, epoch)``: what a journal row of this work item is found by."""
        return self.sample.id, self.request.epoch
