"""The response cache: a process-safe on-disk map from a request's identity
(``Request.request_hash(model_id)``: model id, every parameter sent, the exact prompt) to the
completion it got. A miss, an unreadable entry and an entry of another shape all mean "ask
the model"; only successful, non-empty completions are stored (:func:`evalkit.engine.solve.call_model`)."""

from __future__ import annotations

import asyncio
import copy
import logging
import sqlite3
from pathlib import Path
from typing import Any, Sequence

from evalkit.engine.work import WorkItem
from evalkit.errors import ConfigError
from evalkit.types import Completion

log = logging.getLogger(__name__)


#: the cache's size bound in bytes (16 GiB), enforced by :func:`trim_cache` once per run
SIZE_LIMIT = 2**34


def open_cache(cache_dir: str | Path | None) -> Any:
    """A process-safe on-disk response cache (diskcache, SQLite-backed), or ``None``.

    Entries never expire, and a write culls nothing (``cull_limit=0``): diskcache otherwise
    measures the database (``PRAGMA page_count``) and looks for expired entries in every
    ``set``, which doubled a write's CPU when two model workers write in turn as answers
    trickle in (0.25–0.29 ms a write against 0.12–0.14; docs/performance.md). The size bound
    is kept by :func:`trim_cache` when a run starts instead.

    Raises:
        ConfigError: ``cache_dir`` is not a cache diskcache can open (one line).
    """
    if cache_dir is None:
        return None
    import diskcache

    try:
        return diskcache.Cache(str(cache_dir), size_limit=SIZE_LIMIT, cull_limit=0)
    except Exception as exc:  # noqa: BLE001 - sqlite3.DatabaseError, OSError, ...
        raise ConfigError(
            f"run.cache_dir: {cache_dir} is not a usable response cache ({type(exc).__name__}: {exc}); "
            "move it away, point run.cache_dir elsewhere or set run.cache=false"
        ) from None


def trim_cache(cache_dir: str | Path) -> None:
    """Open the cache at ``cache_dir`` (the check that it is usable) and evict the
    least recently stored entries while it is over :data:`SIZE_LIMIT` (diskcache's
    ``cull``; the bound a write no longer checks, so a run's own writes may pass it until
    the next run starts). Trimming is best effort: a cache another run is writing (locked
    past diskcache's timeout) or that fails while culling is left as it is, with a warning.

    Raises:
        ConfigError: ``cache_dir`` is not a cache diskcache can open.
    """
    cache = open_cache(cache_dir)
    try:
        cache.cull()
    except Exception as exc:  # noqa: BLE001 - diskcache.Timeout, sqlite3 errors: reuse, not answers, is at stake
        log.warning("response cache: cannot trim %s to its size bound (%s: %s)", cache_dir, type(exc).__name__, exc)
    finally:
        cache.close()


def cache_get(cache: Any, key: str) -> Completion | None:
    """A cached completion, or ``None`` — also for an entry that cannot be read or has
    another shape (a corrupt entry is a miss; the fresh answer then replaces it)."""
    try:
        hit = cache.get(key)
    except Exception as exc:  # noqa: BLE001 - unpickling and SQLite errors alike
        log.warning("response cache: entry %s unreadable (%s: %s); asking the model", key[:16], type(exc).__name__, exc)
        return None
    try:
        return Completion(**hit) if isinstance(hit, dict) else None
    except TypeError:
        return None


def all_cached(cache_dir: str | Path | None, units: Sequence[WorkItem], model_id: str) -> bool:
    """True when every unit's answer is in the response cache at ``cache_dir``, so that
    solving them asks no model: each is single-turn (one call, its ``request``) and
    ``request.request_hash(model_id)`` holds a readable completion. False without a cache
    (``None`` or not made yet), for no units, or when any unit is a rollout (its later turns
    are not known before it runs). Reading the cache writes nothing.

    Raises:
        ConfigError: ``cache_dir`` is not a cache diskcache can open.
    """
    if cache_dir is None or not Path(cache_dir).is_dir() or not units or any(u.rollout for u in units):
        return False
    cache = open_cache(cache_dir)
    try:
        return all(cache_get(cache, u.request.request_hash(model_id)) is not None for u in units)
    finally:
        cache.close()


def cache_set(cache: Any, key: str, value: dict[str, Any]) -> None:
    try:
        cache.set(key, value)
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs reuse, not the answer
        log.warning("response cache: cannot store %s (%s: %s)", key[:16], type(exc).__name__, exc)


#: the longest a model worker keeps a response unwritten (seconds; :class:`WriteBehind`)
WRITE_BEHIND_S = 0.2


class WriteBehind:
    """The response cache as a model worker writes it: entries are kept in memory and
    stored together, in one SQLite transaction, when the worker sends results back
    (:meth:`flush`), and at the latest ``delay_s`` after the first of them. One transaction
    per answer cost a trickling model worker about 0.45 ms of CPU per answer, beside about
    0.75 ms for all its other work on it (docs/performance.md). :meth:`get` sees the entries not written
    yet; an entry still here when the worker's process is killed is lost, so that request
    is asked again (at most ``delay_s`` of answers).

    Same ``get``/``set`` as a ``diskcache.Cache``, for :func:`cache_get` and :func:`cache_set`,
    but ``set`` keeps the value itself until it is written: a caller must not change it
    afterwards (:func:`~evalkit.engine.solve.call_model` stores a dict of its own).
    """

    def __init__(self, cache: Any, delay_s: float = WRITE_BEHIND_S):
        self.cache, self.delay_s = cache, delay_s
        self.pending: dict[str, Any] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the timer's: one that has ended never runs it

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.pending:
            return copy.deepcopy(self.pending[key])  # as an unpickled entry: the caller's own
        return self.cache.get(key, default)

    def set(self, key: str, value: Any) -> bool:
        self.pending[key] = value
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop: nothing would flush later
            self.flush()
            return True
        if self.timer is None or self.loop is not loop:  # none yet, or on a loop that ended with entries pending
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.loop = loop.call_later(self.delay_s, self.flush), loop
        return True

    def flush(self) -> None:
        """Store every pending entry in one transaction (a failure is a warning: it costs
        reuse, not answers). An entry diskcache cannot store (a value that does not pickle)
        is lost alone; a failure of the database or its disk loses the transaction's entries."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.pending:
            return
        entries, self.pending = self.pending, {}
        try:
            with self.cache.transact():
                for key, value in entries.items():
                    try:
                        self.cache.set(key, value)
                    except (sqlite3.Error, OSError):  # the database or its disk: the whole transaction
                        raise
                    except Exception as exc:  # noqa: BLE001 - this entry alone, as cache_set
                        log.warning("response cache: cannot store %s (%s: %s)", key[:16], type(exc).__name__, exc)
        except Exception as exc:  # noqa: BLE001 - as cache_set
            log.warning("response cache: cannot store %d entries (%s: %s)", len(entries), type(exc).__name__, exc)

    def close(self) -> None:
        self.flush()
        self.cache.close()
