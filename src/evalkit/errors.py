"""evalkit's user-facing errors: each one becomes a single clear line and exit code 2."""

from __future__ import annotations


class EvalkitError(Exception):
    """Base of errors reported as one line without a traceback (exit code 2)."""

    exit_code = 2


class ConfigError(EvalkitError):
    """The composed configuration is invalid (unknown key, wrong type, missing credential)."""


class DataError(EvalkitError):
    """Benchmark data is missing, malformed or fails an integrity check."""


class RunDirError(EvalkitError):
    """The run directory cannot be used (exists without resume, resume target missing)."""


class TrackingError(EvalkitError):
    """Experiment tracking (MLflow) failed; the run directory holds the results."""
