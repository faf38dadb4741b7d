"""A total deadline and a response-size bound on every HTTP call MLflow makes to a tracking
server, at the one place all of them pass: the ``requests`` session of MLflow's REST client.

MLflow sends every request to a server (runs, metrics, artifacts through ``--serve-artifacts``,
traces, ``log_spans``) through ``mlflow.utils.rest_utils.http_request``, which takes a
``requests.Session`` from ``mlflow.utils.request_utils._get_request_session`` (one per retry
policy, cached). :func:`install` wraps that function once, so that each session it returns
has :class:`BoundedAdapter` mounted for ``http://`` and ``https://`` (in place of MLflow's
``TCPKeepAliveHTTPAdapter``, keeping its pool sizes, socket options and retry policy).

For each call (its retries and their backoff included), the adapter:

* arms a timer at ``deadline_s``; when it fires, the socket the call is using is shut down,
  so a read blocked on a server that trickles one byte at a time (in its status line, its
  headers or its body, where a per-read timeout never fires) returns at once, and a retry
  or a new connection of the same call is refused;
* caps every retry's sleep (its backoff, or a server's ``Retry-After``, which urllib3 would
  honour up to 6 hours) at the time left: a wait past the deadline ends the call at once;
* reads the body itself, decoded, in chunks, and stops at ``max_bytes`` (a ``Content-Length``
  above it is refused before any byte of the body is read), so a flood is never held. This
  holds for a streamed answer too (an artifact downloaded through the server): evalkit
  downloads none (its tables are deleted before they are logged again).

A call that hits a bound raises :class:`DeadlinePassed` or :class:`ResponseTooLarge`
(MLflow wraps it in its ``MlflowException``;
:func:`evalkit.tracking.mlflow_tracking.bound_hit` finds it in the chain by its
``evalkit_bound`` attribute, without importing this module). Both
name the server and the bound in one line. The bounds are read at each call
(:func:`install` sets them; the latest wins in a process).

``_get_request_session`` is MLflow's private function: if a version of MLflow lacks it,
:func:`install` raises :class:`~evalkit.errors.TrackingError` (one line) rather than send
unbounded requests. Multipart uploads straight to a cloud store's presigned URLs
(``MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD``, off by default) do not pass through this session.
"""

from __future__ import annotations

import copy
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.retry import Retry

from evalkit.errors import TrackingError

#: bytes read from a response at a time (decoded)
CHUNK_BYTES = 1 << 16


@dataclass(frozen=True)
class HttpBounds:
    """``deadline_s``: seconds one call may take, from its first connection to its last
    byte, retries included (``tracking.request_deadline_s``); ``max_bytes``: the most bytes
    of one response's body, decoded (``tracking.max_response_bytes``)."""

    deadline_s: float
    max_bytes: int


class BoundHit(Exception):
    """A call to a tracking server stopped at a bound; ``str()`` is one line naming the
    server and the bound. Not an ``OSError``: urllib3 does not retry it."""

    evalkit_bound = True


class DeadlinePassed(BoundHit):
    """The call did not end within ``tracking.request_deadline_s``."""


class ResponseTooLarge(BoundHit):
    """The response's body is longer than ``tracking.max_response_bytes``."""


_BOUNDS: list[HttpBounds] = []
_current = threading.local()  # .watch: the _Watch of the call this thread is making


class _Watch:
    """One call's deadline, and the connection it is using (for the timer to shut down)."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.expired = False
        self.why = ""  # what else the deadline cut short (a wait the server asked for)
        self.conn: Any = None
        self.lock = threading.Lock()

    def use(self, conn: Any) -> None:
        """``conn`` carries the call now. Raises ``_Expired`` once the deadline passed."""
        with self.lock:
            self.conn = conn
            conn._evalkit_watch = self
            if self.expired:
                raise _Expired()

    def expire(self) -> None:
        """The timer: shut down the call's socket (a blocked read returns at once)."""
        with self.lock:
            self.expired = True
            conn = self.conn
            sock = getattr(conn, "sock", None) if conn is not None and getattr(conn, "_evalkit_watch", None) is self else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def left(self) -> float:
        return self.deadline - time.monotonic()


class _Expired(Exception):
    """Raised inside urllib3 when the deadline has passed (not an ``OSError``: no retry)."""


class _WatchedConnection:
    """Registers the connection with the calling thread's watch whenever a call uses it."""

    def connect(self) -> None:
        watch = getattr(_current, "watch", None)
        if watch is not None:
            watch.use(self)
        super().connect()  # type: ignore[misc]
        if watch is not None:
            watch.use(self)  # the deadline passed while connecting

    def request(self, *args: Any, **kwargs: Any) -> None:
        watch = getattr(_current, "watch", None)
        if watch is not None:
            watch.use(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


class BoundedHTTPConnection(_WatchedConnection, HTTPConnection):
    pass


class BoundedHTTPSConnection(_WatchedConnection, HTTPSConnection):
    pass


class BoundedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = BoundedHTTPConnection


class BoundedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = BoundedHTTPSConnection


class _DeadlineRetry(Retry):
    """MLflow's retry policy, its sleeps (backoff, ``Retry-After``) capped by the deadline."""

    def sleep(self, response: Any = None) -> None:
        watch = getattr(_current, "watch", None)
        if watch is None:
            return super().sleep(response)
        wanted = None
        if self.respect_retry_after_header and response is not None:
            wanted = self.get_retry_after(response)
        wanted = wanted if wanted else self.get_backoff_time()
        left = watch.left()
        if wanted >= left:  # the deadline has passed, or comes first (a Retry-After of hours)
            if left > 0:
                watch.why = f" (it asked for a wait of {wanted:g} s before a retry)"
            watch.expire()
            raise _Expired()
        if wanted > 0:
            time.sleep(wanted)


POOLS = {"http": BoundedHTTPConnectionPool, "https": BoundedHTTPSConnectionPool}


class BoundedAdapter(HTTPAdapter):
    """A ``requests`` transport adapter whose every call ends within the deadline and reads
    at most ``max_bytes`` of body (:data:`_BOUNDS`, read at each call); see the module."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):  # a SOCKS proxy keeps its own pools (bounded by MLflow's timeout only)
            manager.pool_classes_by_scheme = dict(POOLS)
        return manager

    @classmethod
    def like(cls, adapter: Any) -> "BoundedAdapter":
        """A bounded adapter with ``adapter``'s pool sizes, socket options and retries."""
        retries = copy.copy(adapter.max_retries)
        retries.__class__ = _DeadlineRetry
        new = cls(pool_connections=adapter._pool_connections, pool_maxsize=adapter._pool_maxsize, max_retries=retries)
        kw = getattr(getattr(adapter, "poolmanager", None), "connection_pool_kw", {})
        if "socket_options" in kw:
            new.poolmanager.connection_pool_kw["socket_options"] = kw["socket_options"]
        return new

    def send(self, request: Any, stream: bool = False, timeout: Any = None, verify: Any = True, cert: Any = None,
             proxies: Any = None) -> Any:  # fmt: skip
        """Send ``request`` and read its body under the bounds (the response holds the body
        whatever ``stream`` asked).

        Raises:
            DeadlinePassed: the call took ``deadline_s``.
            ResponseTooLarge: the body is longer than ``max_bytes``.
            Any ``requests`` error of the call.
        """
        bounds = _BOUNDS[-1]
        server = _origin(request.url)
        watch = _Watch(time.monotonic() + bounds.deadline_s)
        prior, _current.watch = getattr(_current, "watch", None), watch
        timer = threading.Timer(bounds.deadline_s, watch.expire)
        timer.daemon = True
        timer.start()
        try:
            resp = super().send(request, stream=True, timeout=timeout, verify=verify, cert=cert, proxies=proxies)
            resp._content = _read_body(resp, bounds.max_bytes, server)
            resp._content_consumed = True
            return resp
        except BoundHit:
            raise
        except Exception as exc:  # noqa: BLE001 - a read cut by the timer, or the deadline seen in urllib3
            if watch.expired:
                raise DeadlinePassed(f"the MLflow server {server} did not answer within tracking.request_deadline_s = "
                                     f"{bounds.deadline_s:g} s{watch.why}") from exc  # fmt: skip
            raise
        finally:
            timer.cancel()
            with watch.lock:  # the timer, if it fires now, finds no connection of this call's
                watch.conn = None
            _current.watch = prior


def _read_body(resp: Any, max_bytes: int, server: str) -> bytes:
    """The body of ``resp``, decoded, refused past ``max_bytes`` (by ``Content-Length``
    before reading, else once read)."""
    declared = resp.headers.get("Content-Length", "")
    too_large = ResponseTooLarge(f"the MLflow server {server} sent a response larger than tracking.max_response_bytes = "
                                 f"{max_bytes:,} bytes")  # fmt: skip
    if declared.isdigit() and int(declared) > max_bytes and not resp.headers.get("Content-Encoding"):
        resp.close()
        raise too_large
    chunks, held = [], 0
    for chunk in resp.iter_content(CHUNK_BYTES):
        held += len(chunk)
        if held > max_bytes:
            resp.close()
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (no path, no credentials)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}"


def install(bounds: HttpBounds) -> None:
    """Bound every HTTP call of MLflow's REST client in this process by ``bounds`` (they
    replace earlier ones; the wrapping of ``_get_request_session`` is done once).

    Raises:
        TrackingError: this MLflow has no ``mlflow.utils.request_utils._get_request_session``
            (its REST client could not be bounded; nothing is sent).
    """
    from mlflow.utils import request_utils  # deferred: heavy, and a tracking server only

    _BOUNDS[:] = [bounds]
    original = getattr(request_utils, "_get_request_session", None)
    if original is None:
        raise TrackingError("tracking: this MLflow's HTTP client (mlflow.utils.request_utils._get_request_session) cannot be "
                            "bounded; a tracking server is not used (a file or database store is)")  # fmt: skip
    if getattr(original, "evalkit_bounded", False):
        return

    def bounded_session(*args: Any, **kwargs: Any) -> Any:
        session = original(*args, **kwargs)
        mounted = {prefix: session.adapters.get(prefix) for prefix in ("https://", "http://")}
        if not all(isinstance(a, BoundedAdapter) for a in mounted.values()):
            adapter = BoundedAdapter.like(mounted["http://"] or HTTPAdapter())
            for prefix in mounted:
                session.mount(prefix, adapter)
        return session

    bounded_session.evalkit_bounded = True  # type: ignore[attr-defined]
    request_utils._get_request_session = bounded_session

