"""``tracking.json`` in a run directory: what has been logged of the run to which store, so
that logging again (a resumed run, ``python -m evalkit.track``) adds only what is new.

Content::

    {"mlflow_run_id": "...", "tracking_uri": "...", "experiment_id": "...",
     "summary_sha256": "<of the summary.json last logged whole, or null>",
     "traces": {"<sample key>": "<trace id>", ...}}

A trace id names what its trace shows (:func:`evalkit.tracking.traces.trace_id_of`), so an
unchanged sample keeps its trace and a changed one (failed, now scored) gets a new one in
place of the old. The file is rewritten (atomically) after every batch of traces: a
logging that stops half-way resumes where it stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE = "tracking.json"


@dataclass
class Ledger:
    """The logging record of one run directory in one tracking store (``run_id`` ``None``:
    nothing logged there yet)."""

    path: Path
    tracking_uri: str
    run_id: str | None = None
    experiment_id: str | None = None
    summary_sha256: str | None = None
    traces: dict[str, str] = field(default_factory=dict)
    #: whether ``traces`` was read from the file (a run logged by an evalkit without traces
    #: has none recorded, and its store is searched instead)
    has_traces: bool = False

    @classmethod
    def load(cls, run_dir: Path, tracking_uri: str) -> "Ledger":
        """The ledger of ``run_dir`` for ``tracking_uri``: empty when the file is missing,
        unreadable, or records another store (the run is then logged there anew)."""
        path = Path(run_dir) / FILE
        try:
            state: Any = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = None
        if not isinstance(state, dict) or state.get("tracking_uri") != tracking_uri:
            return cls(path, tracking_uri)
        traces = state.get("traces")
        return cls(path, tracking_uri, state.get("mlflow_run_id"), state.get("experiment_id"), state.get("summary_sha256"),
                   dict(traces) if isinstance(traces, dict) else {}, isinstance(traces, dict))  # fmt: skip

    def save(self) -> None:
        """Write the file atomically (a temporary file renamed over it)."""
        state = {"mlflow_run_id": self.run_id, "tracking_uri": self.tracking_uri, "experiment_id": self.experiment_id,
                 "summary_sha256": self.summary_sha256, "traces": self.traces}  # fmt: skip
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
        self.has_traces = True
