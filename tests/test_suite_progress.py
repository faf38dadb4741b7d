"""``bash bash/test.sh`` prints a line per test file as it finishes (issue 48 item 7: the
fast lane printed only dots): :class:`tests.support.progress.FileProgress`, fed the reports
pytest-xdist's controller receives."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support.progress import FileProgress


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._tw = SimpleNamespace(width_of_current_line=0)

    def write(self, text: str) -> None:
        self.lines.append(text)

    def write_line(self, text: str) -> None:
        self.lines.append(text)


def _report(nodeid: str, when: str, outcome: str = "passed") -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, passed=outcome == "passed",
                           failed=outcome == "failed", skipped=outcome == "skipped")  # fmt: skip


def test_a_files_line_comes_when_its_last_test_has_reported_with_its_counts():
    reporter = _Reporter()
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter))
    progress = FileProgress(config)
    ids = ["tests/a.py::t1", "tests/a.py::t2", "tests/a.py::t3", "tests/b.py::t1"]
    progress.pytest_xdist_node_collection_finished(None, ids)
    progress.pytest_xdist_node_collection_finished(None, ids[:1])  # a second worker's collection changes nothing
    for nodeid, outcome in [("tests/a.py::t1", "passed"), ("tests/b.py::t1", "failed"), ("tests/a.py::t2", "passed")]:
        for when in ("setup", "call", "teardown"):
            progress.pytest_runtest_logreport(_report(nodeid, when, outcome if when == "call" else "passed"))
    progress.pytest_runtest_logreport(_report("tests/a.py::t3", "setup", "skipped"))  # skipped at its setup: no call
    assert len(reporter.lines) == 1 and reporter.lines[0].startswith("[  1/2 files, 00:00] tests/b.py: 1 failed: t1 (")
    progress.pytest_runtest_logreport(_report("tests/a.py::t3", "teardown"))
    assert len(reporter.lines) == 2 and reporter.lines[1].startswith("[  2/2 files, 00:00] tests/a.py: 2 passed, 1 skipped (")
