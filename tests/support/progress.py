"""One line per test file as it finishes, for ``bash bash/test.sh`` (issue 48 item 7: the
fast lane printed only dots, and a loaded host's run looked stuck)::

    [ 12/131 files, 03:41] tests/engine/test_model_client.py: 6 passed (4.2 s)
    [ 13/131 files, 03:52] tests/test_x.py: 4 passed, 1 failed: test_y[a] (2.0 s)

Registered by ``tests/conftest.py`` at pytest's default verbosity (``-v`` already names
each test, ``-q`` asks for less); it prints under pytest-xdist only (``bash/test.sh`` runs
2 workers; pytest's own output already names each file as it runs it), in xdist's
controller, which learns each file's tests from the first worker's collection. A file's
line comes when its last test has reported; its time runs from its first test's report to then.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest


class FileProgress:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.started = time.monotonic()
        self.expected: Counter[str] | None = None  # tests per file
        self.outcomes: dict[str, Counter[str]] = defaultdict(Counter)
        self.first: dict[str, float] = {}
        self.failed: dict[str, list[str]] = defaultdict(list)  # the tests that failed or errored, per file
        self.done = 0

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook (its controller), once per worker: the first one counts
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.expected is None:
            self.expected = Counter(nodeid.split("::")[0] for nodeid in ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::")[0]
        self.first.setdefault(path, time.monotonic())
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.outcomes[path][_outcome(report)] += 1
        elif report.when == "teardown" and report.failed:
            self.outcomes[path]["error"] += 1
        if report.failed:
            self.failed[path].append(report.nodeid.split("::", 1)[-1])
        if report.when != "teardown" or self.expected is None:
            return
        self.outcomes[path]["_finished"] += 1
        if self.outcomes[path]["_finished"] == self.expected.get(path):
            self._line(path)

    def _line(self, path: str) -> None:
        self.done += 1
        counts = self.outcomes[path]
        shown = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed") if counts[k])
        failed = self.failed.get(path) or []
        if failed:  # named here too: a run stopped by a time limit prints no summary
            shown += f": {', '.join(failed[:3])}{f' and {len(failed) - 3} more' if len(failed) > 3 else ''}"
        elapsed = int(time.monotonic() - self.started)
        took = time.monotonic() - self.first[path]
        total = len(self.expected or ())
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        if getattr(reporter._tw, "width_of_current_line", 0):  # after the dots of the tests so far
            reporter.write("\n")
        reporter.write_line(f"[{self.done:>3}/{total} files, {elapsed // 60:02d}:{elapsed % 60:02d}] {path}: {shown} ({took:.1f} s)")


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.when == "setup" and report.failed:
        return "error"
    return report.outcome


def register(config: pytest.Config) -> None:
    """Add :class:`FileProgress` at the default verbosity, in the process that reports (not in
    a pytest-xdist worker)."""
    if config.getoption("verbose") == 0 and not hasattr(config, "workerinput") and not config.getoption("collectonly"):
        config.pluginmanager.register(FileProgress(config), "evalkit-file-progress")
