"""What the run's stages ask of an executor (:class:`Executor`), and nothing more.

Three executors implement it: :class:`~evalkit.engine.executor.LocalExecutor` (offline
models, in the driver's event loop), :class:`~evalkit.engine.executor.RayExecutor`
(network models, on Ray actors) and :class:`~evalkit.engine.batch.BatchExecutor`
(``run.batch``: the provider's batch API). The *execute* stage
(:func:`evalkit.engine.run.execute`) drives each one the same way, with no test of its
type::

    set_budget(budget)          # only when the run has a limit
    wait_ready()                # workers up / batches planned and reserved
    run_units(executor, ...)    # submit(unit) per unit, under the driver's window
    live()                      # now and then while units run: the console's bar
    figures()                   # merged into summary.json → engine
    cancel()                    # Ctrl-C only; drain() for an early stop
    close()                     # always

:class:`ExecutorBase` gives the methods an executor has nothing to do for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from evalkit.engine.budget import Budget
    from evalkit.engine.work import WorkItem
    from evalkit.types import Trajectory

class Drained(Exception):
    """Raised by :meth:`Executor.submit` for a unit the executor will not solve because it
    was drained (:meth:`Executor.drain`), or because its answer comes later than this run
    waits (a detached batch). The scheduler leaves such a unit out: it is not journaled,
    neither answered nor failed, and a resume asks it again."""


class Executor(Protocol):
    """Solves units for the run's stages.

    Attributes:
        keeps_window: ``True`` when the executor bounds its own concurrency (a batch takes
            every unit at once), so the driver's window does not adapt on top of it.
        ahead: how many units beyond ``backend.concurrency`` it may be handed at once
            (they wait inside it); ``0`` for an executor that solves what it is handed.
        draining: ``True`` once :meth:`drain` was called.
    """

    keeps_window: bool
    ahead: int
    draining: bool

    async def submit(self, unit: "WorkItem") -> "Trajectory":  # pragma: no cover - protocol
        """Solve one unit; returns its trajectory. A unit's own failure (a refused request,
        a timeout, a batch that expired) is data, in ``trajectory.failure``, never raised.

        Raises:
            Drained: the unit will not be solved in this attempt (see :class:`Drained`).
            EvalkitError: the executor as a whole cannot go on (a provider's batch API
                that keeps failing, a bug); the stage stops the run with its line.
        """
        ...

    def wait_ready(self) -> None:  # pragma: no cover - protocol
        """Block until the executor can take units (idempotent): Ray workers started and
        the run registered with them; a batch run's record read, what is owed and what
        is answered known, new batches planned and reserved against the budget.

        Raises:
            ConfigError: nothing can be sent (a batch over the run's budget), before
                anything was sent.
        """
        ...

    def set_budget(self, budget: "Budget") -> None:  # pragma: no cover - protocol
        """Charge every model call of the run against ``budget`` (a limited
        :class:`~evalkit.engine.budget.Budget`, called before :meth:`wait_ready`)."""
        ...

    def bound_images(self, max_bytes: int) -> None:  # pragma: no cover - protocol
        """Hold at most ``max_bytes`` of the run's images at once wherever the executor keeps
        them to ship (Ray's object store; a task's ``dataset.image_limits.max_held_bytes``)."""
        ...

    async def live(self) -> tuple[int, int, float] | None:  # pragma: no cover - protocol
        """The model calls in flight now, for the console's progress bar: ``(attempts,
        chunks of their streamed answers so far, seconds the oldest has run)``, or ``None``
        when the executor cannot tell (its units answer at once, or nobody answered).
        Never raises."""
        ...

    def figures(self) -> dict[str, Any]:  # pragma: no cover - protocol
        """The executor's part of ``summary.json`` → ``engine`` (read while it is still
        open). Two keys are read by the stage rather than kept: ``phases`` (``{name:
        seconds}`` added to ``engine.phases``) and ``first_dispatch_perf`` (the
        ``perf_counter`` reading of the first request really sent, ``None`` when none
        was), which replaces the scheduler's."""
        ...

    def drain(self) -> None:  # pragma: no cover - protocol
        """Stop taking units: every later :meth:`submit` raises :class:`Drained`; units
        already in flight finish and are handed back (journaled) as usual. For an early
        stop (the sequential gates)."""
        ...

    def cancel(self) -> Any:  # pragma: no cover - protocol
        """Abandon the units in flight (Ctrl-C): their answers are not waited for. Returns
        what the executor counted spent so that the stage records what the journal lacks
        for a resume's budget: ``(cost_usd | None, tokens | None, outstanding)``, the
        run's spend as its budget's keeper counted it, ``outstanding`` being ``{"cost_usd":
        float, "spent_tokens": int}`` reserved by calls in flight; or ``None`` (no count
        of its own). Never raises."""
        ...

    def close(self) -> None:  # pragma: no cover - protocol
        """Release what it holds (workers, caches, files); idempotent, never raises for a
        worker already gone."""
        ...


class ExecutorBase:
    """Defaults of :class:`Executor` for what an executor has nothing to do for: ready at
    once, no budget of its own (offline models cost nothing), no figures, nothing to
    abandon. :meth:`drain` sets ``draining``; a subclass's :meth:`submit` calls
    :meth:`check_draining` first."""

    keeps_window, ahead, draining = False, 0, False

    def wait_ready(self) -> None:
        return None

    def set_budget(self, budget: "Budget") -> None:
        return None

    def bound_images(self, max_bytes: int) -> None:
        return None  # an executor that ships no image by reference holds none

    async def live(self) -> tuple[int, int, float] | None:
        return None

    def figures(self) -> dict[str, Any]:
        return {}

    def drain(self) -> None:
        self.draining = True

    def check_draining(self) -> None:
        """Raises :class:`Drained` once :meth:`drain` was called."""
        if self.draining:
            raise Drained("drained: not solved in this attempt")

    def cancel(self) -> Any:
        return None
