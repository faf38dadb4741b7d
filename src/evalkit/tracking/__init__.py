"""Experiment tracking: the observer protocol (:mod:`evalkit.tracking.base`) and its
implementations, MLflow (:mod:`evalkit.tracking.mlflow_tracking`) and none."""

from __future__ import annotations

from typing import Any

from evalkit.specs import TrackingSpec
from evalkit.tracking.base import NullObserver, Observer, RunInfo
from evalkit.tracking.mlflow_tracking import MlflowObserver

__all__ = ["MlflowObserver", "NullObserver", "Observer", "RunInfo", "make_observer", "sweep_observer"]


def make_observer(spec: TrackingSpec, sweep: dict[str, Any] | None = None) -> Observer:
    """The observer ``tracking.kind`` names (``mlflow`` or ``none``) for a run or a sweep
    (``sweep``: the ``sweep.json`` of the sweep a run is a job of)."""
    if spec.kind == "mlflow":
        return MlflowObserver.from_spec(spec, sweep)
    return NullObserver()


def sweep_observer(info: dict[str, Any]) -> Observer:
    """The observer that recorded the sweep whose ``sweep.json`` is ``info`` (to end it)."""
    if info.get("parent_run_id") and info.get("tracking_uri"):
        return MlflowObserver(str(info["tracking_uri"]), str(info.get("experiment")), "", info.get("suite"))
    return NullObserver()
