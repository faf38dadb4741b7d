"""What the runs of one process share when they run one after another: the jobs of a ``-m``
sweep under Hydra's default launcher, all in the sweep's own process.

Outside a session a run starts what it needs (Ray, evalkit's own model servers, model
workers) and stops it when it ends. Inside one, the first run that needs them starts them
and later runs reuse them; a run re-creates only what its own config changes: workers are
kept per model endpoint and response cache (:attr:`Session.workers`, keyed by
:meth:`evalkit.engine.executor.RayExecutor`), servers per backend configuration
(:attr:`Session.servers`). The session ends with the sweep, which stops them all. Launchers
that run jobs in processes of their own never open one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from evalkit.engine.ray_session import shutdown_ray
from evalkit.models.factory import server_pool

log = logging.getLogger("evalkit")


@dataclass
class Session:
    """The shared state: whether this session started Ray, the server pool, and the warm
    model workers (``{key: [actor handles]}``)."""

    ray_started: bool = False
    servers: Any = field(default_factory=server_pool)
    workers: dict[str, list[Any]] = field(default_factory=dict)


_active: Session | None = None


def begin() -> Session:
    """Open the process's session (or return the one already open)."""
    global _active
    if _active is None:
        _active = Session()
    return _active


def current() -> Session | None:
    """The open session, or ``None`` outside one."""
    return _active


def end() -> None:
    """Stop what the session kept: its workers, its servers and the Ray instance it started."""
    global _active
    session, _active = _active, None
    if session is None:
        return
    if session.workers:
        import ray  # deferred: a session of offline runs never imported Ray

        for actors in session.workers.values():
            for actor in actors:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - a dead actor is already gone
                    log.debug("could not kill a warm worker", exc_info=True)
    session.servers.close()
    if session.ray_started:
        shutdown_ray()
