"""Where a run's time goes: seconds per phase, in ``summary.json`` → ``engine.phases``.

Phases (seconds; the first two measured before the engine starts, by whoever composed the
config): ``compose_validate_s`` (Hydra compose + pydantic), ``data_load_s`` (the benchmark's
data, the selection, the requests, the models planned, the data fingerprint),
``ray_start_s`` (connecting to or starting Ray; concurrent with the data load),
``workers_ready_s`` (model workers started until the first one answered; the others join as
they answer), ``to_first_request_s``
(from the start of the run — the compose — to the first request sent: the start-up a user
waits through), ``requests_s`` (first request sent to last answer), ``scoring_s`` (the
driver's waits for verdicts, summed over samples: they overlap requests in flight),
``batch_wait_s`` (``run.batch``: the driver's wait for the provider's batches, polls
included, downloads and scoring not), ``summary_report_s`` (journal read back, aggregation, intervals, summary, plots, report)
and ``tracking_s`` (the observer's logging; written into ``summary.json`` after it ran).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


class Phases:
    """Seconds per phase of one run; ``t0`` is the run's start (``time.perf_counter()``)."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.perf_counter() if t0 is None else t0
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Add the wall seconds of the ``with`` block to phase ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 4)

    def since_start(self, name: str, when: float) -> None:
        """Phase ``name`` ends at ``when`` (a ``perf_counter`` reading) and began with the run."""
        self.seconds[name] = round(when - self.t0, 4)

    def as_dict(self) -> dict[str, float]:
        return dict(self.seconds)
