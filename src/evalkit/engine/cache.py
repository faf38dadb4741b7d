"""The response cache: a process-safe on-disk map from a request's identity
(``Request.request_hash(model_id)``: model id, every parameter sent, the exact prompt) to the
completion it got. A miss, an unreadable entry and an entry of another shape all mean "ask
the model"; only successful, non-empty completions are stored (:func:`evalkit.engine.solve.call_model`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from evalkit.engine.work import WorkItem
from evalkit.errors import ConfigError
from evalkit.types import Completion

log = logging.getLogger(__name__)


def open_cache(cache_dir: str | Path | None) -> Any:
    """A process-safe on-disk response cache (diskcache, SQLite-backed), or ``None``.

    Raises:
        ConfigError: ``cache_dir`` is not a cache diskcache can open (one line).
    """
    if cache_dir is None:
        return None
    import diskcache

    try:
        return diskcache.Cache(str(cache_dir), size_limit=2**34)
    except Exception as exc:  # noqa: BLE001 - sqlite3.DatabaseError, OSError, ...
        raise ConfigError(
            f"run.cache_dir: {cache_dir} is not a usable response cache ({type(exc).__name__}: {exc}); "
            "move it away, point run.cache_dir elsewhere or set run.cache=false"
        ) from None


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
