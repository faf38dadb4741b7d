"""Opening the MLflow tracking store from several evalkit processes at once.

MLflow's SQLAlchemy store creates its tables and runs its alembic migrations the first time
a client opens a database that lacks them (``SqlAlchemyStore.__init__``, reached from
``MlflowClient(uri)``), then adds the "Default" experiment. Two processes doing that at once
on a fresh SQLite file race: one fails with ``table experiments already exists`` or
``duplicate column name`` (seen with two ``python -m evalkit`` started together on a new
output root). :func:`open_client` serializes that step across processes with a file lock
(``filelock``) beside the database; once the schema exists, SQLite's own locking is enough.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from evalkit import secrets
from evalkit.specs import TrackingSpec

#: MLflow's HTTP client settings evalkit sets for a tracking server, unless the environment
#: already sets them (MLflow's own variables, read at each request by
#: ``mlflow.utils.rest_utils.http_request``). MLflow's defaults (7 retries, backoff factor 2,
#: 120 s per read) make a server that is down hold a finished run for about 4 minutes
#: before its one warning line; with these a refused connection fails within about 4 s
#: (retries after 0 s and 2 s, plus up to 1 s of MLflow's jitter each). The timeout is per
#: read: a server that trickles a byte at a time never meets it. What bounds a call in
#: total is :data:`HTTP_BOUNDS` (:mod:`evalkit.tracking.http_bounds`): its deadline, retries
#: and their sleeps included, and the size of its response.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}

#: ``(deadline_s, max_bytes)`` of every HTTP call to a tracking server in this process:
#: ``tracking.request_deadline_s`` and ``tracking.max_response_bytes`` of the latest
#: :func:`use_http_bounds` (a run's, or ``python -m evalkit.track``'s options), else their
#: defaults (:class:`~evalkit.specs.TrackingSpec`)
HTTP_BOUNDS: list[tuple[float, int]] = []


def use_http_bounds(deadline_s: float, max_bytes: int) -> None:
    """Bound the HTTP calls to a tracking server from now on (see :data:`HTTP_BOUNDS`)."""
    HTTP_BOUNDS[:] = [(float(deadline_s), int(max_bytes))]


def current_http_bounds() -> tuple[float, int]:
    """The bounds in force: the latest :func:`use_http_bounds`, else the defaults."""
    if HTTP_BOUNDS:
        return HTTP_BOUNDS[-1]
    spec = TrackingSpec()
    return spec.request_deadline_s, spec.max_response_bytes


def add_http_bound_options(parser: Any) -> None:
    """``--request-deadline-s`` and ``--max-response-bytes`` on an ``argparse`` parser (a
    command that talks to a tracking server: ``track``, ``compare --log``), defaulting to
    ``tracking.request_deadline_s`` / ``tracking.max_response_bytes``'s defaults; apply them
    with :func:`use_http_bound_options`."""
    import argparse

    def seconds(text: str) -> float:
        value = float(text)
        if not 0 < value <= 86_400:
            raise argparse.ArgumentTypeError(f"{text}: not a number of seconds in (0, 86400]")
        return value

    def size(text: str) -> int:
        value = int(text)
        if not 1024 <= value <= 1 << 40:
            raise argparse.ArgumentTypeError(f"{text}: not a number of bytes in [1024, 2**40]")
        return value

    spec = TrackingSpec()
    parser.add_argument("--request-deadline-s", dest="request_deadline_s", type=seconds, default=spec.request_deadline_s,
                        help="seconds one HTTP call to a tracking server may take in all, retries and waits included "
                             f"(default {spec.request_deadline_s:g}, as tracking.request_deadline_s)")  # fmt: skip
    parser.add_argument("--max-response-bytes", dest="max_response_bytes", type=size, default=spec.max_response_bytes,
                        help="bytes of one answer of a tracking server at most "
                             f"(default {spec.max_response_bytes}, as tracking.max_response_bytes)")  # fmt: skip


def use_http_bound_options(args: Any) -> None:
    """Bound the HTTP calls by the options of :func:`add_http_bound_options`."""
    use_http_bounds(args.request_deadline_s, args.max_response_bytes)


def patient_version_check() -> None:
    """Make MLflow's check of a tracking server's version survive one slow answer (issue 47).

    ``RestStore._get_server_version`` (MLflow 3.x; ``log_spans`` needs it) asks ``/version``
    with a 3 s timeout and no retry, and caches its answer for the process with
    ``functools.lru_cache`` — a failure too: one slow answer (a loaded server) made every later
    ``log_spans`` of the process fail with "could not identify MLflow server version", so
    both jobs of a sweep lost their spans. Wrapped here (once per process): a success is
    cached as before; a failure is not cached, and is asked again at once through MLflow's
    HTTP client under evalkit's bounds (:data:`HTTP_BOUNDS`: the deadline of
    ``tracking.request_deadline_s`` in place of 3 s, at most ``tracking.max_response_bytes``
    read). The answer is parsed as a version only (``packaging``); anything else is no
    version, as in MLflow. Nothing is done when this MLflow has no such method.
    """
    try:
        from mlflow.store.tracking.rest_store import RestStore
    except ImportError:  # an MLflow without the REST store's layout: nothing to wrap
        return
    original = RestStore.__dict__.get("_get_server_version")
    probe = getattr(original, "__func__", None)
    if probe is None or getattr(probe, "evalkit_patient", False) or not hasattr(probe, "cache_clear"):
        return
    known: dict[Any, Any] = {}

    def patient(host_creds: Any) -> Any:
        key = _creds_key(host_creds)
        if key in known:
            return known[key]
        version = probe(host_creds)
        if version is None:
            probe.cache_clear()  # MLflow's cached failure is dropped: the next call asks again
            version = _ask_version(host_creds)
        if version is not None:
            known[key] = version
        return version

    patient.evalkit_patient = True  # type: ignore[attr-defined]
    patient.cache_clear = probe.cache_clear  # type: ignore[attr-defined]  # MLflow's own callers and tests clear it
    RestStore._get_server_version = staticmethod(patient)


def _creds_key(host_creds: Any) -> Any:
    """A hashable key of MLflow's ``MlflowHostCreds`` (the server and who asks)."""
    try:
        hash(host_creds)
        return host_creds
    except TypeError:
        return repr(host_creds)


def _ask_version(host_creds: Any) -> Any:
    """The server's ``/version`` as a ``packaging`` ``Version``, asked once more under
    evalkit's bounds (:data:`HTTP_BOUNDS`); ``None`` when it cannot be had."""
    from mlflow.utils.rest_utils import http_request
    from packaging.version import Version

    deadline, _ = current_http_bounds()
    try:
        response = http_request(host_creds=host_creds, endpoint="/version", method="GET", timeout=deadline,
                                max_retries=1, backoff_factor=1, raise_on_status=True)  # fmt: skip
        return Version(response.text.strip()[:64])
    except Exception:  # noqa: BLE001 - as MLflow (an unparsable answer: InvalidVersion): no version, its caller says so
        logging.getLogger(__name__).debug("the MLflow server's version could not be had", exc_info=True)
        return None


#: seconds to wait for another process's store creation or migration (a fresh store takes
#: about a second; a long wait means a stuck process holding the lock)
LOCK_TIMEOUT_S = 120.0


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:`` tracking URI (``None`` for other stores and for
    an in-memory SQLite database)."""
    if not uri.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(uri).database
    return Path(database) if database and database != ":memory:" else None


#: MLflow's own variables holding a tracking server's credentials (read by MLflow at each
#: request, ``mlflow.utils.credentials``); their values are scrubbed from all evalkit writes
CREDENTIAL_VARS = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def register_credentials(uri: str) -> None:
    """Register the tracking server's credentials for scrubbing (:mod:`evalkit.secrets`):
    the values of :data:`CREDENTIAL_VARS` and a password inside ``uri`` itself
    (``https://user:password@host``), so that no run directory, summary, log line or MLflow
    param ever holds them."""
    for name in CREDENTIAL_VARS:
        secrets.register(os.environ.get(name))
    secrets.register_url_password(uri)


def open_client(uri: str) -> Any:
    """An ``MlflowClient`` for ``uri`` whose store is created or migrated by one process
    at a time: for a SQLite store the client is opened holding an exclusive lock on
    ``<database>.lock`` (the database's directory is created first). Other stores (a
    tracking server, PostgreSQL, MySQL) are opened directly; for a tracking server
    (``http(s)://``) MLflow's retries and timeout are set first (:data:`HTTP_DEFAULTS`), and
    each HTTP call is bounded in time and size (:data:`HTTP_BOUNDS`,
    :func:`evalkit.tracking.http_bounds.install`).
    Credentials for a server come from MLflow's own variables (``MLFLOW_TRACKING_USERNAME`` /
    ``_PASSWORD`` / ``_TOKEN``), read by MLflow at each request; evalkit never copies them.

    Raises:
        filelock.Timeout: another process held the lock longer than ``LOCK_TIMEOUT_S``.
        OSError: the database's directory cannot be created.
        TrackingError: a tracking server, and this MLflow's HTTP client cannot be bounded.
        Any MLflow error opening the store.
    """
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    register_credentials(uri)
    # MLflow prints "🏃 View run … at: <server address>" on stdout when a server's run ends;
    # evalkit prints its own line, and the address is not echoed
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from mlflow.tracking import MlflowClient

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    path = sqlite_path(uri)
    if path is None:
        if uri.startswith(("http:", "https:")):
            for key, value in HTTP_DEFAULTS.items():
                os.environ.setdefault(key, value)
            from evalkit.tracking.http_bounds import HttpBounds, install  # deferred: requests and urllib3, for a server only

            install(HttpBounds(*current_http_bounds()))
            patient_version_check()
            # urllib3 warns once per retry ("Retrying (Retry(total=1…)) after connection broken"):
            # the failure is evalkit's one line, the retries are not the user's business
            logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        return MlflowClient(uri)
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        return MlflowClient(uri)
