"""Experiment tracking (MLflow)."""

from evalkit.tracking.mlflow_tracking import log_run

__all__ = ["log_run"]
