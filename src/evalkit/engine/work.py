"""The engine's work item: one sample in one epoch (what is dispatched to a model worker,
solved, journaled and found again on resume). Not the statistics' unit (a sample, a
dialogue or a question: ``evalkit.stats.StatPlan``).

A run's work items are a :class:`WorkList`: the selected samples and, per item, its
position (epoch × samples + index) only. An item's request is built when the item is
asked for (when it is dispatched), so that a run of N samples holds N samples, not N
requests besides them (issue 23 item 2: the driver's memory at N = 20,000).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Container, Iterator, overload

from evalkit.types import Request, Sample


@dataclass
class WorkItem:
    """One work item: a sample in one epoch, its first request (whose hash identifies
    the result; it carries the epoch) and whether the solver runs it as a multi-turn rollout.
    ``kept_output``: the model's answer to this very request kept by an earlier attempt's
    ``judge_error`` failure (:func:`evalkit.engine.records.kept_answers`): a resume asks only
    the judges again, not the model."""

    sample: Sample
    request: Request
    rollout: bool = False
    kept_output: str | None = None

    def with_images(self, images: dict[str, Any]) -> "WorkItem":
        """A copy whose request carries ``images`` instead (the same messages, hashes and
        epoch): what a model worker is sent, each image by reference
        (:class:`evalkit.images.ImageRefs`), and what it solves once they are read back."""
        return dataclasses.replace(self, request=dataclasses.replace(self.request, images=images))

    @property
    def key(self) -> tuple[str, int]:
        """``(sample id, epoch)``: what a journal row of this work item is found by."""
        return self.sample.id, self.request.epoch


class WorkList(Sequence[WorkItem]):
    """Work items, epoch by epoch, each epoch in selection order, made when asked for:
    ``items[i]`` builds item ``i``'s request (``build(sample)``, its ``epoch`` then set) and
    returns a new :class:`WorkItem` each time; iterating builds one item at a time. A slice,
    and :meth:`without`, are work lists of the same kind. ``positions``: the items' places
    in the full list (``epoch * len(samples) + index``); default all ``repeats × samples``.

    ``build`` must be deterministic: a request built again is the same request (its hash
    identifies the item's journal row)."""

    def __init__(self, samples: Sequence[Sample], build: Callable[[Sample], Request], is_rollout: Callable[[Sample], bool],
                 repeats: int = 1, positions: Sequence[int] | None = None, kept: dict[tuple[str, int], str] | None = None):  # fmt: skip
        self.samples, self.build, self.is_rollout = samples, build, is_rollout
        self.positions = positions if positions is not None else range(len(samples) * repeats)
        self.kept = kept or {}

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, i: int) -> WorkItem: ...

    @overload
    def __getitem__(self, i: slice) -> "WorkList": ...

    def __getitem__(self, i: int | slice) -> "WorkItem | WorkList":
        if isinstance(i, slice):
            return self._with(self.positions[i])
        epoch, index = divmod(self.positions[i], len(self.samples))
        sample = self.samples[index]
        request = self.build(sample)
        request.epoch = epoch
        rollout = self.is_rollout(sample)
        return WorkItem(sample, request, rollout, None if rollout else self.kept.get((sample.id, epoch)))

    def __iter__(self) -> Iterator[WorkItem]:
        for i in range(len(self.positions)):
            yield self[i]

    def keys(self) -> Iterator[tuple[str, int]]:
        """The items' ``(sample id, epoch)``, in order, without building any request."""
        n = len(self.samples)
        for p in self.positions:
            yield self.samples[p % n].id, p // n

    def without(self, done: Container[tuple[str, int]]) -> "WorkList":
        """The items whose key is not in ``done`` (a resume's pending work), in order."""
        return self._with([p for p, key in zip(self.positions, self.keys()) if key not in done])

    def requests(self) -> "Requests":
        """The items' requests, built as they are read."""
        return Requests(self)

    def keeping(self, kept: dict[tuple[str, int], str]) -> "WorkList":
        """The same items, each whose key is in ``kept`` with that answer as its
        ``kept_output`` (a single-turn item only)."""
        return WorkList(self.samples, self.build, self.is_rollout, positions=self.positions, kept=kept)

    def _with(self, positions: Sequence[int]) -> "WorkList":
        return WorkList(self.samples, self.build, self.is_rollout, positions=positions, kept=self.kept)


class Requests(Sequence[Request]):
    """The requests of a :class:`WorkList`, each built when it is read (a reader that goes
    through them twice builds them twice, and holds only what it keeps); indexed by
    position (no slices)."""

    def __init__(self, items: WorkList):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Request:  # type: ignore[override]
        return self.items[i].request

    def keys(self) -> Iterator[tuple[str, int, str]]:
        """``(sample id, epoch, subset)`` of each request, in order, without building any (a
        tracker builds only the prompts it shows)."""
        n = len(self.items.samples)
        for p in self.items.positions:
            sample = self.items.samples[p % n]
            yield sample.id, p // n, sample.subset
