"""Experiment tracking (MLflow)."""

from evalkit.tracking.mlflow_tracking import check_tracking, log_run

__all__ = ["check_tracking", "log_run"]
