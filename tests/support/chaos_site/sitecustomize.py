"""TEST-ONLY interpreter hook for ``perf/chaos.py``'s driver processes.

``perf/chaos.py`` puts this folder on a driver's ``PYTHONPATH`` with
``EVALKIT_CHAOS_WRITE_FAULT_FILE`` set; Python then imports this module at start-up, which
installs the write-fault seam (:mod:`tests.support.write_faults`). Without that variable it
does nothing. No production command puts this folder on the path.
"""

import os
import sys
from pathlib import Path

if os.environ.get("EVALKIT_CHAOS_WRITE_FAULT_FILE"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
    from tests.support.write_faults import ENV, install

    install(os.environ[ENV])
