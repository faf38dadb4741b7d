"""How slow this host runs Python right now, for the tests' time limits (issue 35 item 13).

A test's time limit is a hang guard or a bound a hostile input must run past, never a
speed assertion: it is a base that holds on an idle host, multiplied by :func:`slowness`,
so that a host at load 20 gets a limit twenty-odd times larger instead of a failure.
As ``perf/engine_cpu.py``'s "host reference" does, a fixed pure-Python loop is timed, but
in wall seconds (what a loaded host stretches), not CPU seconds.
"""

from __future__ import annotations

import math
import time

#: wall seconds of :func:`_loop` on an idle core of the 2-core reference host (its CPU
#: time there: 0.054–0.065 s; a faster host is not made faster than this)
IDLE_LOOP_S = 0.05


def _loop() -> float:
    started, total = time.perf_counter(), 0
    for i in range(1_000_000):
        total += i
    return time.perf_counter() - started


def slowness(tries: int = 3) -> float:
    """Wall time of a fixed 1 M-step loop now, over its idle time on the reference host
    (the median of ``tries``; at least 1). About 4 at load 14 on 2 cores."""
    times = sorted(_loop() for _ in range(tries))
    return max(1.0, times[len(times) // 2] / IDLE_LOOP_S)


def time_limit(base_s: float) -> float:
    """``base_s`` (a limit that holds on an idle host) times :func:`slowness`, rounded up to
    whole seconds (so that messages quoting it print it exactly)."""
    return float(math.ceil(base_s * slowness()))
