"""MLflow logging of a finished (or resumed) run.

Per run: params = the resolved config flattened to dotted keys (secrets redacted);
tags = benchmark, model, shots, status, data fingerprint, prompt hash, code version,
``evalkit.kind=run``, ``suite`` (``run.suite``, when set) and, for a job of a sweep,
``sweep=<sweep id>`` + ``sweep_dir`` + ``mlflow.parentRunId`` = the sweep's parent run
(read from ``<run.sweep_dir>/sweep.json``; see :mod:`evalkit.sweep`);
metrics = the summary's metrics (``partial_*`` when incomplete); artifacts = every file of
the run directory. Default store: ``sqlite:///<run.output_root>/mlflow.db`` with
artifacts under ``<run.output_root>/mlartifacts``. A resumed run logs into the MLflow run
it started (``tracking.json`` in the run directory keeps its id).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from evalkit import secrets

log = logging.getLogger(__name__)


def tracking_uri(cfg: Any) -> str:
    if cfg.tracking.tracking_uri:
        return cfg.tracking.tracking_uri
    return f"sqlite:///{Path(cfg.run.output_root).resolve() / 'mlflow.db'}"


def artifact_root(cfg: Any) -> str:
    if cfg.tracking.artifact_root:
        return cfg.tracking.artifact_root
    return (Path(cfg.run.output_root).resolve() / "mlartifacts").as_uri()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dict → ``{"a.b.c": value}`` (lists kept as their JSON text)."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = json.dumps(obj, ensure_ascii=False) if isinstance(obj, (list, tuple)) else obj
    return out


def sweep_tags(cfg: Any, uri: str) -> dict[str, str]:
    """Tags that put a sweep's job under the sweep's parent run (none outside a sweep).
    The parent is named only if it lives in the same tracking store and experiment."""
    run = getattr(cfg, "run", None)
    sweep_dir = getattr(run, "sweep_dir", None)
    if not sweep_dir:
        return {}
    from evalkit.sweep import read_sweep_file

    info = read_sweep_file(Path(sweep_dir)) or {}
    tags = {"sweep": str(info.get("sweep_id") or Path(sweep_dir).name), "sweep_dir": str(Path(sweep_dir).resolve())}
    if info.get("parent_run_id") and info.get("tracking_uri") == uri and info.get("experiment") == cfg.tracking.experiment:
        tags["mlflow.parentRunId"] = str(info["parent_run_id"])
    return tags


def _client(cfg: Any) -> tuple[Any, str]:
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    import mlflow

    from evalkit.tracking.store import open_client

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    return open_client(uri), uri  # store creation/migration serialized across processes


def _experiment(cfg: Any) -> tuple[Any, str, str]:
    """(client, tracking uri, experiment id), the experiment created when it is new."""
    client, uri = _client(cfg)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(cfg.tracking.experiment, artifact_location=artifact_root(cfg))
    return client, uri, exp_id


def _local_path(location: str) -> Path | None:
    from urllib.parse import unquote, urlparse

    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    return None if "://" in location else Path(location)


def check_tracking(cfg: Any) -> None:
    """Open the tracking store and check that the experiment's artifact location (a local
    one) can be written, then create the experiment when it is new — so that a bad
    ``tracking.*`` setting is one line before anything runs, not a failure after it.

    Raises:
        TrackingError: naming the setting and the cause (one line).
    """
    from evalkit.errors import TrackingError, first_line

    try:
        client, uri = _client(cfg)
        exp = client.get_experiment_by_name(cfg.tracking.experiment)
    except Exception as exc:  # noqa: BLE001 - any store error becomes one line
        first = first_line(exc)
        raise TrackingError(
            f"tracking: cannot open the MLflow store {tracking_uri(cfg)} ({type(exc).__name__}: {first})"
        ) from None
    location = exp.artifact_location if exp else artifact_root(cfg)
    path = _local_path(location)
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".evalkit-write-check-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            if exp:
                raise TrackingError(
                    f"tracking: experiment {cfg.tracking.experiment!r} keeps its artifacts in {path} (set when it was "
                    f"created), which cannot be written ({why}); use another tracking.experiment"
                ) from None
            raise TrackingError(f"tracking.artifact_root: {path} cannot be written ({why})") from None
    if exp is None:
        try:
            client.create_experiment(cfg.tracking.experiment, artifact_location=location)
        except Exception as exc:  # noqa: BLE001 - e.g. created meanwhile by another process
            if client.get_experiment_by_name(cfg.tracking.experiment) is None:
                first = first_line(exc)
                raise TrackingError(f"tracking.experiment: cannot create {cfg.tracking.experiment!r} ({first})") from None


def log_run(cfg: Any, run_dir: Path, summary: dict[str, Any]) -> str:
    """Log ``run_dir`` to MLflow; returns the MLflow run id. A run resumed into another
    tracking store (``run.output_root`` or ``tracking.tracking_uri`` changed) gets a new
    MLflow run there."""
    import mlflow

    client, uri, exp_id = _experiment(cfg)

    state_file = Path(run_dir) / "tracking.json"
    run_id = None
    if state_file.exists():
        state = json.loads(state_file.read_text(encoding="utf-8"))
        if state.get("tracking_uri") == uri:
            run_id = state.get("mlflow_run_id")
    tags = {
        "benchmark": summary["benchmark"],
        "model": summary["model"],
        "shots": str(summary["shots"]),
        "status": summary["status"],
        "data_fingerprint": summary["data_fingerprint"],
        "prompt_hash": summary["prompt_hash"],
        "code_version": summary["code_version"],
        "run_dir": str(Path(run_dir).resolve()),
        "user_model": str(summary.get("user_model")),
        "mlflow.runName": f"{summary['benchmark']}-{summary['model']}-{Path(run_dir).name}",
        "evalkit.kind": "run",
        **({"suite": str(cfg.run.suite)} if getattr(cfg.run, "suite", None) else {}),
        **sweep_tags(cfg, uri),
    }
    if "sweep" in tags:  # the job's directory name already says <num>-<benchmark>-<model>-shots<k>
        tags["mlflow.runName"] = f"{tags['sweep']}/{Path(run_dir).name}"
    if run_id is None:
        run = client.create_run(exp_id, tags=tags)
        run_id = run.info.run_id
        state_file.write_text(json.dumps({"mlflow_run_id": run_id, "tracking_uri": uri}) + "\n", encoding="utf-8")
        resolved = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
        params = {k: v for k, v in flatten(secrets.redact_config(resolved)).items() if not k.startswith("hydra.")}
        items = [mlflow.entities.Param(k[:250], str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
    else:
        for k, v in tags.items():
            client.set_tag(run_id, k, v)
    metrics = summary["metrics"] if summary["status"] == "complete" else summary.get("partial_metrics", {})
    counts = {"n_samples": summary["n_samples"], "n_scored": summary["n_scored"], "n_failed": summary["n_failed"]}
    import time

    now = int(time.time() * 1000)
    entries = [mlflow.entities.Metric(k, float(v), now, 0) for k, v in {**metrics, **counts}.items() if isinstance(v, (int, float))]
    for i in range(0, len(entries), 500):
        client.log_batch(run_id, metrics=entries[i : i + 500])
    for path in sorted(Path(run_dir).iterdir()):
        if path.is_file() and path.name != "tracking.json":
            client.log_artifact(run_id, str(path))
        elif path.is_dir():
            client.log_artifacts(run_id, str(path), artifact_path=path.name)
    client.set_terminated(run_id, status="FINISHED" if summary["status"] == "complete" else "FAILED")
    return run_id
