"""The Ray instance of a run: a local one started for it, or an existing cluster joined by
``runner.address`` — reached before anything is written, and an unreachable cluster is one
line in seconds."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Iterator

from evalkit.errors import ConfigError, host_load

status = logging.getLogger("evalkit.status")  # "what is starting" lines (__main__ shows them)


def ensure_ray(address: str | None, num_cpus: int | None) -> bool:
    """Connect to Ray (an existing cluster when ``address`` is set, else a local instance;
    reuse the one this process already has). Returns True if this call started it.

    Raises:
        ConfigError: the cluster address is malformed or nothing answers there.
    """
    import ray  # deferred: offline runs never import Ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = dict(
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        configure_logging=True,
    )
    if address:
        _check_reachable(address)
        status.info("joining the Ray cluster at %s…", address)
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as exc:
            hint = ""
            if os.environ.get("RAY_AUTH_MODE") != "token":
                hint = "; if the cluster uses token authentication, export RAY_AUTH_MODE=token (and RAY_AUTH_TOKEN)"
            first = (str(exc).strip().splitlines() or ["connection refused"])[0][:200]
            raise ConfigError(f"runner.address: cannot connect to the Ray cluster at {address} ({first}){hint}") from None
    else:
        status.info("starting a local Ray instance…")
        started = time.monotonic()
        with _without_monitors():
            ray.init(num_cpus=num_cpus, object_store_memory=256 * 1024 * 1024, **kwargs)
        load = host_load()
        status.info("Ray started in %.1f s%s", time.monotonic() - started, f" ({load})" if load else "")
    return True


@contextlib.contextmanager
def _without_monitors() -> Iterator[None]:
    """A local Ray instance started inside this block runs without two head-node daemons
    that evalkit never uses (issue 23 item 5; figures in docs/performance.md, ~95 MiB PSS
    of a ~1 GB tree):

    * the **log monitor**, which tails every worker's log files and publishes them for
      drivers started with ``log_to_driver=True`` — evalkit passes ``False``; the files
      are still written under Ray's session directory;
    * the **autoscaler monitor**, which scales a cluster to its demands: a local instance
      has no node to add (a cluster joined with ``runner.address`` keeps its own).

    ``ray.init`` has no option for them; ``ray start`` has ``--include-log-monitor=False``
    and ``--no-monitor``, the two :class:`ray._private.parameter.RayParams` fields set here
    on the parameters ``ray.init`` builds for its head node (``Node.__init__`` leaves a
    field already set as it is). On a Ray without these fields nothing changes."""
    try:
        from ray._private.node import Node
    except ImportError:  # another layout of Ray's internals: its defaults
        yield
        return
    original = Node.__init__

    def init(self: Any, ray_params: Any, *args: Any, **kwargs: Any) -> None:
        if hasattr(ray_params, "include_log_monitor") and hasattr(ray_params, "no_monitor"):
            ray_params.include_log_monitor, ray_params.no_monitor = False, True
        original(self, ray_params, *args, **kwargs)

    Node.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        Node.__init__ = original  # type: ignore[method-assign]


def _check_reachable(address: str) -> None:
    """Fail in seconds, not minutes, when nothing listens at a ``HOST:PORT`` cluster address
    (``ray.init`` keeps retrying an unreachable GCS for minutes). ``auto`` and ``ray://``
    client addresses are left to Ray.

    Raises:
        ConfigError: the address is not ``HOST:PORT`` or the port does not accept connections.
    """
    import socket

    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"runner.address: {address!r} is not HOST:PORT (or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(
            f"runner.address: no Ray cluster answers at {address} ({exc.strerror or exc}); start one "
            "(launchers/ray_local_cluster.sh start) or fix the address"
        ) from None


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
