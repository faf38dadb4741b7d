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

#: MLflow's HTTP client settings evalkit sets for a tracking server, unless the environment
#: already sets them (MLflow's own variables, read at each request by
#: ``mlflow.utils.rest_utils.http_request``). MLflow's defaults (7 retries, backoff factor 2,
#: 120 s per request) make a server that is down hold a finished run for about 4 minutes
#: before its one warning line; with these a refused connection fails within about 4 s
#: (retries after 0 s and 2 s, plus up to 1 s of MLflow's jitter each) and a server that
#: accepts but never answers within 3 x 30 s. A run's results are on disk either way and
#: ``python -m evalkit.track`` logs them later; set the variables to wait longer.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}

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
    (``http(s)://``) MLflow's retries and timeout are bounded first (:data:`HTTP_DEFAULTS`).
    Credentials for a server come from MLflow's own variables (``MLFLOW_TRACKING_USERNAME`` /
    ``_PASSWORD`` / ``_TOKEN``), read by MLflow at each request; evalkit never copies them.

    Raises:
        filelock.Timeout: another process held the lock longer than ``LOCK_TIMEOUT_S``.
        OSError: the database's directory cannot be created.
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
            # urllib3 warns once per retry ("Retrying (Retry(total=1…)) after connection broken"):
            # the failure is evalkit's one line, the retries are not the user's business
            logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        return MlflowClient(uri)
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        return MlflowClient(uri)
