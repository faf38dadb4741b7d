"""The preflight of a tracking server: before anything starts, prove that this user may write
to the target experiment (issue 47).

A server that checks credentials (``mlflow server --app-name basic-auth``) answers a wrong
password with 401 and a user without the permission with 403; MLflow's client raises them
only when a call is made, so a READ-only user once learned it after the whole run (exit 0)
and a wrong password after Ray and the model workers had started. :func:`prove_write` writes
and removes one experiment tag (:data:`PROBE_TAG`, one key per process), the smallest write
that needs the permission a run needs (``EDIT``/``can_update`` on the experiment: the one that
creating its runs, logging to them and writing their traces needs); :func:`refusal` turns a
401 or 403 from any step of the check (reading the experiment, creating it, the probe) into
one line naming the server (no credentials), the user and the permission.

The user named is ``MLFLOW_TRACKING_USERNAME``, else the user of the tracking URI
(``http://user@host``), else the token's holder (``MLFLOW_TRACKING_TOKEN``); a password or a
token is never named.
"""

from __future__ import annotations

import os
import uuid
from typing import Any
from urllib.parse import urlsplit

from evalkit.errors import TrackingError, printable

#: the experiment tag :func:`prove_write` sets and deletes (a unique suffix per check, so two
#: processes checking at once never remove each other's)
PROBE_TAG = "evalkit.write_check"

#: MLflow's error codes of a refusal, as the HTTP status the server sent
REFUSAL_CODES = {"UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403}


class PermissionRefused(TrackingError):
    """The tracking server refused this user (401: wrong user name or password; 403: a
    permission the run needs is missing): one line, exit code 2, nothing started."""


def server_of(uri: str) -> str:
    """``scheme://host[:port][/path]`` of a tracking URI, without user or password."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unreadable address)"
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def user_of(uri: str) -> str:
    """Who the server is asked as: ``user 'alice'`` (``MLFLOW_TRACKING_USERNAME``, else the
    URI's user), ``the holder of MLFLOW_TRACKING_TOKEN``, or ``no user (MLFLOW_TRACKING_USERNAME
    is not set)``."""
    name = os.environ.get("MLFLOW_TRACKING_USERNAME")
    if not name:
        try:
            name = urlsplit(uri).username
        except ValueError:
            name = None
    if name:
        return f"user {printable(name, 100)!r}"
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return "the holder of MLFLOW_TRACKING_TOKEN"
    return "no user (MLFLOW_TRACKING_USERNAME is not set)"


def refused_status(exc: BaseException) -> int | None:
    """401 or 403 when ``exc`` — or an exception it was raised from — is the server's refusal
    (MLflow's ``UNAUTHENTICATED`` / ``PERMISSION_DENIED``, or a ``requests`` error with that
    status); ``None`` for anything else."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and all(cur is not e for e in seen):
        seen.append(cur)
        code = REFUSAL_CODES.get(str(getattr(cur, "error_code", "")))
        status = getattr(getattr(cur, "response", None), "status_code", None)
        if code:
            return code
        if status in (401, 403):
            return int(status)
        cur = cur.__cause__ or cur.__context__
    return None


def refusal(exc: BaseException, uri: str, doing: str, permission: str, experiment: str) -> PermissionRefused | None:
    """The one-line error of a refused call (``doing``: what was asked, ``reading experiment
    'x'``; ``permission``: what it needs, ``READ``), or ``None`` when ``exc`` is no refusal
    (:func:`refused_status`)."""
    status = refused_status(exc)
    where, who = server_of(uri), user_of(uri)
    if status == 401:
        return PermissionRefused(
            f"tracking: the MLflow server {where} did not accept the credentials of {who} (401 when {doing}: wrong user name "
            "or password); set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) — nothing was started"
        )  # fmt: skip
    if status == 403:
        return PermissionRefused(
            f"tracking: the MLflow server {where} refused {who} the {permission} permission on experiment "
            f"{printable(experiment, 200)!r} (403 when {doing}); ask its owner or an admin for {permission}, or choose "
            "another tracking.experiment — nothing was started"
        )  # fmt: skip
    return None


def prove_write(mlflow_client: Any, uri: str, experiment_id: str, experiment: str) -> None:
    """Set and delete one experiment tag in ``experiment_id`` (the experiment named
    ``experiment``) at the server ``uri``: the proof that this user may write there.

    Raises:
        PermissionRefused: the server refused either step (401 or 403), one line.
        Any other MLflow error (a server that cannot be reached: the caller's to classify).
    """
    key = f"{PROBE_TAG}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        mlflow_client.set_experiment_tag(experiment_id, key, "evalkit checks that it may write here; removed at once")
        remove = getattr(mlflow_client, "delete_experiment_tag", None)  # MLflow >= 2.19; before, the tag stays
        if remove is not None:
            remove(experiment_id, key)
    except Exception as exc:  # noqa: BLE001 - a refusal is one line; anything else is the caller's
        refused = refusal(exc, uri, "writing a tag on it", "EDIT", experiment)
        if refused is not None:
            raise refused from None
        raise
