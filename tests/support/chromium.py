"""Debian's headless chromium as a test browser: load one URL, let the page's scripts
run, and return the rendered DOM (``--dump-dom``) while writing a screenshot.

No driver library: one chromium process per page, ``--virtual-time-budget`` lets the
single-page app fetch its data and render before the DOM is serialised (virtual time
waits for pending network requests). The process runs in its own session so its
helpers (zygote, GPU, renderer) are ended with it on a timeout.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

SETUP_HINT = "run `bash bash/setup.sh --with-browser` (it installs Debian's chromium package)"

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
)


def chromium_binary() -> str | None:
    """Path of ``chromium`` on PATH (Debian's package), or None."""
    return shutil.which("chromium")


def render(
    url: str,
    *,
    profile_dir: Path,
    screenshot: Path,
    window: tuple[int, int] = (1600, 1000),
    budget_ms: int = 15000,
    timeout: float = 60.0,
) -> str:
    """Load ``url`` in a fresh profile; return the DOM after ``budget_ms`` of virtual time
    and write a PNG of the window to ``screenshot``."""
    binary = chromium_binary()
    if binary is None:
        raise FileNotFoundError(f"chromium not found on PATH; {SETUP_HINT}")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)
    cmd = [
        binary,
        *FLAGS,
        f"--window-size={window[0]},{window[1]}",
        f"--user-data-dir={profile_dir}",
        f"--virtual-time-budget={budget_ms}",
        "--dump-dom",
        f"--screenshot={screenshot}",
        url,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"chromium did not finish {url} within {timeout:.0f} s") from None
    finally:
        try:  # helpers left behind by a crashed browser
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited with {proc.returncode} on {url}:\n{err[-3000:]}")
    return out
