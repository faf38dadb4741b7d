"""TEST-ONLY: make a run directory fail writes for a moment, inside the writing process.

Everything here runs as root, so permissions cannot make a write fail. Instead
:func:`install` sets evalkit's test-only seam :data:`evalkit.jsonl.before_write` (called
before every journal row, side file and ``summary.json`` is written) to raise
``OSError(EIO)`` while a control file exists. ``perf/chaos.py`` creates and removes that
file from outside; the driver loads this module through ``tests/support/chaos_site/
sitecustomize.py`` when the environment variable :data:`ENV` names the control file.

Production runs never load this module: it is not part of the installed package, and
evalkit itself never assigns the seam (``tests/test_write_fault_seam.py`` checks both).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: environment variable naming the control file (read by chaos_site/sitecustomize.py only)
ENV = "EVALKIT_CHAOS_WRITE_FAULT_FILE"


def install(control_file: str | os.PathLike[str]) -> None:
    """Make every write through the seam fail with EIO while ``control_file`` exists."""
    import evalkit.jsonl

    control = Path(control_file)

    def before_write(path: Path) -> None:
        if control.exists():
            raise OSError(errno.EIO, f"injected write fault (tests/support/write_faults.py): {path.name}")

    evalkit.jsonl.before_write = before_write
