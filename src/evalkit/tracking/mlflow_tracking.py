"""MLflow, as an observer of runs and sweeps (:class:`MlflowObserver`).

Per run: params = the resolved config that ran, flattened to dotted keys (secrets redacted;
the provenance ``layers`` are not params); tags = benchmark, model, shots, status, data
fingerprint, prompt hash, code version, ``evalkit.kind=run``, ``suite`` (``run.suite``, when
set) and, for a job of a sweep, ``sweep=<sweep id>`` + ``sweep_dir`` +
``mlflow.parentRunId`` = the sweep's parent run; metrics = the summary's metrics
(``partial_*`` when incomplete), the counts, the token totals (``tokens.<key>``) and
``cost_usd`` when known; artifacts = every file of the run directory. A resumed
run logs into the MLflow run it started (``tracking.json`` in the run directory keeps its
id). Per sweep: one parent run (``evalkit.kind=sweep``) holding the sweep's counts, each
job's headline and the sweep summary and report.

Default store: ``sqlite:///<run.output_root>/mlflow.db`` with artifacts under
``<run.output_root>/mlartifacts``. The MLflow client and the experiment set-up live here
only.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import yaml

from evalkit import secrets
from evalkit.errors import TrackingError, first_line
from evalkit.tracking.base import Observer, RunInfo
from evalkit.tracking.store import open_client

log = logging.getLogger(__name__)

SWEEP_FILES = ("sweep_summary.json", "sweep_report.md")


def tracking_uri(cfg: Any) -> str:
    """``tracking.tracking_uri``, or the SQLite store under ``run.output_root``."""
    if cfg.tracking.tracking_uri:
        return str(cfg.tracking.tracking_uri)
    return f"sqlite:///{Path(str(cfg.run.output_root)).resolve() / 'mlflow.db'}"


def artifact_root(cfg: Any) -> str:
    """``tracking.artifact_root``, or ``<run.output_root>/mlartifacts`` as a file URI."""
    if cfg.tracking.artifact_root:
        return str(cfg.tracking.artifact_root)
    return (Path(str(cfg.run.output_root)).resolve() / "mlartifacts").as_uri()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dict → ``{"a.b.c": value}`` (lists kept as their JSON text)."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = json.dumps(obj, ensure_ascii=False) if isinstance(obj, (list, tuple)) else obj
    return out


def client(uri: str) -> Any:
    """An ``MlflowClient`` of the store at ``uri`` (synchronous logging, quiet loggers); a
    SQLite store is created or migrated by one process at a time (:func:`open_client`)."""
    import mlflow  # deferred: MLflow's import is heavy and tracking=none never needs it

    mlflow.set_tracking_uri(uri)
    return open_client(uri)


def experiment_id(mlflow_client: Any, name: str, location: str) -> str:
    """The id of experiment ``name``, created (artifacts at ``location``) when it is new —
    also when another process creates it at the same moment."""
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return mlflow_client.create_experiment(name, artifact_location=location)
    except Exception:  # noqa: BLE001 - created meanwhile by another process
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def log_values(mlflow_client: Any, run_id: str, params: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None) -> None:
    """Log params and numeric metrics in MLflow's batch sizes (100 params, 500 metrics)."""
    from mlflow.entities import Metric, Param

    items = [Param(k[:250], str(v)[:6000]) for k, v in (params or {}).items()]
    for i in range(0, len(items), 100):
        mlflow_client.log_batch(run_id, params=items[i : i + 100])
    now = int(time.time() * 1000)
    entries = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if isinstance(v, (int, float))]
    for i in range(0, len(entries), 500):
        mlflow_client.log_batch(run_id, metrics=entries[i : i + 500])


def _local_path(location: str) -> Path | None:
    from urllib.parse import unquote, urlparse

    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    return None if "://" in location else Path(location)


class MlflowObserver(Observer):
    """Records runs and sweeps in an MLflow store.

    ``uri`` / ``experiment`` / ``artifact_root``: the store (:meth:`from_config` reads them
    from a config); ``suite``: the ``suite`` tag; ``sweep``: the ``sweep.json`` of the sweep
    this run is a job of (``None`` outside a sweep).
    """

    def __init__(self, uri: str, experiment: str, artifact_root: str, suite: str | None = None,
                 sweep: dict[str, Any] | None = None):  # fmt: skip
        self.uri = uri
        self.experiment = experiment
        self.artifact_root = artifact_root
        self.suite = suite
        self.sweep = sweep

    @classmethod
    def from_config(cls, cfg: Any, sweep: dict[str, Any] | None = None) -> "MlflowObserver":
        """The observer of ``cfg``'s ``tracking.*`` settings (a validated or a composed config)."""
        run = cfg.run
        suite = run.get("suite") if isinstance(run, dict) or hasattr(run, "get") else getattr(run, "suite", None)
        return cls(tracking_uri(cfg), str(cfg.tracking.experiment), artifact_root(cfg), suite, sweep)

    # ---- runs ---------------------------------------------------------------------------
    def run_started(self, run: RunInfo) -> None:
        """Check the store (:meth:`check`) before the run writes anything."""
        self.check()

    def check(self) -> None:
        """Open the store, check that the experiment's artifact location (a local one) can
        be written, create the experiment when it is new — so that a bad ``tracking.*``
        setting is one line before anything runs.

        Raises:
            TrackingError: naming the setting and the cause (one line).
        """
        try:
            mlflow_client = client(self.uri)
            exp = mlflow_client.get_experiment_by_name(self.experiment)
        except Exception as exc:  # noqa: BLE001 - any store error becomes one line
            raise TrackingError(f"tracking: cannot open the MLflow store {self.uri} ({type(exc).__name__}: {first_line(exc)})") from None
        location = exp.artifact_location if exp else self.artifact_root
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
                        f"tracking: experiment {self.experiment!r} keeps its artifacts in {path} (set when it was "
                        f"created), which cannot be written ({why}); use another tracking.experiment"
                    ) from None
                raise TrackingError(f"tracking.artifact_root: {path} cannot be written ({why})") from None
        if exp is None:
            try:
                experiment_id(mlflow_client, self.experiment, location)
            except Exception as exc:  # noqa: BLE001
                raise TrackingError(f"tracking.experiment: cannot create {self.experiment!r} ({first_line(exc)})") from None

    def run_finished(self, run: RunInfo, summary: dict[str, Any]) -> None:
        """Log the finished run (:meth:`log_run`); any failure is one line naming the run
        directory and how to log it again."""
        try:
            self.log_run(run.run_dir, summary)
        except Exception as exc:  # noqa: BLE001 - any tracking failure becomes one line
            log.exception("MLflow logging failed")
            raise TrackingError(
                f"tracking: MLflow logging failed ({type(exc).__name__}: {first_line(exc)}); the run's results are in "
                f"{run.run_dir} — fix tracking.tracking_uri and log them again with run.resume={run.run_dir}"
            ) from None

    def sweep_tags(self) -> dict[str, str]:
        """Tags that put a sweep's job under the sweep's parent run (none outside a sweep).
        The parent is named only if it lives in the same tracking store and experiment."""
        if not self.sweep:
            return {}
        info = self.sweep
        tags = {"sweep": str(info.get("sweep_id")), "sweep_dir": str(info.get("sweep_dir"))}
        if info.get("parent_run_id") and info.get("tracking_uri") == self.uri and info.get("experiment") == self.experiment:
            tags["mlflow.parentRunId"] = str(info["parent_run_id"])
        return tags

    def _run_tags(self, run_dir: Path, summary: dict[str, Any]) -> dict[str, str]:
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
            **({"suite": str(self.suite)} if self.suite else {}),
            **self.sweep_tags(),
        }
        if "sweep" in tags:  # the job's directory name already says <num>-<benchmark>-<model>-shots<k>
            tags["mlflow.runName"] = f"{tags['sweep']}/{Path(run_dir).name}"
        return tags

    def _existing_run(self, run_dir: Path) -> str | None:
        state_file = Path(run_dir) / "tracking.json"
        if state_file.exists():
            state = json.loads(state_file.read_text(encoding="utf-8"))
            if state.get("tracking_uri") == self.uri:
                return state.get("mlflow_run_id")
        return None

    def log_run(self, run_dir: Path, summary: dict[str, Any]) -> str:
        """Log ``run_dir`` to MLflow; returns the MLflow run id. A run resumed into another
        tracking store (``run.output_root`` or ``tracking.tracking_uri`` changed) gets a new
        MLflow run there."""
        mlflow_client = client(self.uri)
        exp_id = experiment_id(mlflow_client, self.experiment, self.artifact_root)
        tags = self._run_tags(run_dir, summary)
        run_id = self._existing_run(run_dir)
        if run_id is None:
            run_id = mlflow_client.create_run(exp_id, tags=tags).info.run_id
            state = {"mlflow_run_id": run_id, "tracking_uri": self.uri}
            (Path(run_dir) / "tracking.json").write_text(json.dumps(state) + "\n", encoding="utf-8")
            recorded = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
            recorded = {k: v for k, v in secrets.redact_config(recorded).items() if k not in ("layers", "hydra")}
            log_values(mlflow_client, run_id, params=flatten(recorded))
        else:
            for k, v in tags.items():
                mlflow_client.set_tag(run_id, k, v)
        metrics = summary["metrics"] if summary["status"] == "complete" else summary.get("partial_metrics", {})
        counts = {"n_samples": summary["n_samples"], "n_scored": summary["n_scored"], "n_failed": summary["n_failed"]}
        counts.update({f"tokens.{k}": v for k, v in (summary.get("usage") or {}).items()}, cost_usd=summary.get("cost_usd"))
        log_values(mlflow_client, run_id, metrics={**metrics, **counts})
        for path in sorted(Path(run_dir).iterdir()):
            if path.is_file() and path.name != "tracking.json":
                mlflow_client.log_artifact(run_id, str(path))
            elif path.is_dir():
                mlflow_client.log_artifacts(run_id, str(path), artifact_path=path.name)
        mlflow_client.set_terminated(run_id, status="FINISHED" if summary["status"] == "complete" else "FAILED")
        return run_id

    # ---- sweeps -------------------------------------------------------------------------
    def sweep_started(self, sweep_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
        """Open the sweep's parent run; its id goes into ``sweep.json`` for the jobs."""
        mlflow_client = client(self.uri)
        exp_id = experiment_id(mlflow_client, self.experiment, self.artifact_root)
        tags = {
            "sweep": info["sweep_id"],
            "evalkit.kind": "sweep",
            "sweep_dir": info["sweep_dir"],
            "mlflow.runName": f"sweep-{info['sweep_id']}",
            "overrides": " ".join(info["overrides"])[:5000],
            **({"suite": str(info["suite"])} if info.get("suite") else {}),
        }
        run = mlflow_client.create_run(exp_id, tags=tags)
        return {"tracking_uri": self.uri, "experiment": self.experiment, "parent_run_id": run.info.run_id}

    def sweep_finished(self, sweep_dir: Path, info: dict[str, Any], summary: dict[str, Any], status: str) -> None:
        """Log the sweep's counts, each job's headline (``job<num>.<headline>``), its summary
        and report to the parent run, and end it with ``status``."""
        run_id = info.get("parent_run_id")
        if not run_id:
            return
        mlflow_client = client(info.get("tracking_uri") or self.uri)
        values: dict[str, float] = {k: summary[k] for k in ("n_jobs", "n_complete_jobs", "n_failed_jobs")}
        for j in summary["jobs"]:
            if isinstance(j.get("headline_value"), (int, float)):
                values[f"job{j['num']}.{j['headline']}"] = j["headline_value"]
        log_values(mlflow_client, run_id, metrics=values)
        for name in SWEEP_FILES:
            mlflow_client.log_artifact(run_id, str(Path(sweep_dir) / name))
        mlflow_client.set_terminated(run_id, status=status)
