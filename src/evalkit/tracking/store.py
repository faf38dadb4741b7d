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


def open_client(uri: str) -> Any:
    """An ``MlflowClient`` for ``uri`` whose store is created or migrated by one process
    at a time: for a SQLite store the client is opened holding an exclusive lock on
    ``<database>.lock`` (the database's directory is created first). Other stores (a
    tracking server, PostgreSQL, MySQL) are opened directly.

    Raises:
        filelock.Timeout: another process held the lock longer than ``LOCK_TIMEOUT_S``.
        OSError: the database's directory cannot be created.
        Any MLflow error opening the store.
    """
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    from mlflow.tracking import MlflowClient

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    path = sqlite_path(uri)
    if path is None:
        return MlflowClient(uri)
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        return MlflowClient(uri)
