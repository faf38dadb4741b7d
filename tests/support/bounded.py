"""Run a function in a child process with a memory and time budget (hostile-output tests).

The child is started with the ``spawn`` method (a fresh interpreter, nothing inherited but
``sys.path``), limits its own address space with ``RLIMIT_AS`` before running the function,
and sends back the result or the traceback. The parent kills it when the time is up, so a
scorer that hangs fails the test instead of hanging it, and one that grows without bound
meets ``MemoryError`` at the limit instead of taking the machine's memory.
"""

from __future__ import annotations

import multiprocessing
import resource
import traceback
from typing import Any, Callable

import pytest

from tests.support.host import time_limit

#: address-space limit of the child (bytes): the evalkit scorers load in under 100 MiB
MEMORY_BYTES = 2 * 2**30
#: wall-clock limit of one child on an idle host (seconds): start-up and loading take 1–3 s
#: on 2 cores, every case of these tests is scored in well under a second once bounded;
#: scaled by the host's slowness (:func:`tests.support.host.time_limit`: at load 50 beside two
#: CPU burners a child's interpreter start and imports alone passed 30 s, issue 48)
TIMEOUT_S = 30


def _child(conn: Any, memory: int, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        result = ("ok", target(*args))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        result = ("error", traceback.format_exc())
    conn.send(result)
    conn.close()


def run_bounded(target: Callable[..., Any], *args: Any, timeout: float | None = None, memory: int = MEMORY_BYTES) -> Any:
    """``target(*args)`` run in a spawned child limited to ``memory`` bytes of address space
    and ``timeout`` seconds (default :data:`TIMEOUT_S` scaled by the host's slowness); its
    (picklable) result. Fails the calling test when the child raises, dies or runs out of
    time. ``target`` must be a module-level function."""
    timeout = time_limit(TIMEOUT_S) if timeout is None else timeout
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sender, memory, target, args), daemon=True)
    proc.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            pytest.fail(f"{target.__name__} did not finish within {timeout} s (memory limit {memory / 2**30:.1f} GiB)")
        status, value = receiver.recv()
    except EOFError:
        proc.join(5)
        pytest.fail(f"{target.__name__}: the child process died (exit code {proc.exitcode})")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        receiver.close()
    if status != "ok":
        pytest.fail(f"{target.__name__} raised in the child process:\n{value}")
    return value
