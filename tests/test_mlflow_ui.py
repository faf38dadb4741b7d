"""The MLflow UI as a person uses it: two finished evalkit runs in an MLflow store, the
real ``mlflow server`` on 127.0.0.1, Debian's headless chromium on the compare view of
both runs. The test reads the rendered page (run ids, run names, each run's metric
values) and keeps a screenshot and the page's DOM in the test's temporary directory
(``mlflow_compare.png`` / ``.html``; the test prints their paths, and a failure names them),
never among the user's runs in ``outputs/``.

Chromium comes from ``bash bash/setup.sh``; without it the test fails (CI installs it).
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import chromium

SCREENSHOT = "mlflow_compare.png"  # in the test's tmp_path
DOM_DUMP = "mlflow_compare.html"

RUN_ARGS = ["tracking=mlflow", "benchmark.subsets=[normal_atom_bool]", "run.limit=10"]
N_WRONG = 3  # replayed outputs replaced by "[]" (no call): 7 of 10 correct


# ------------------------------------------------------------------------------------------
# the MLflow server
# ------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    def __init__(self, proc: subprocess.Popen, url: str, log_file: Path):
        self.proc, self.url, self.log_file = proc, url, log_file

    def wait_ready(self, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {self.proc.returncode}:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self.url
            except OSError:
                pass
            time.sleep(0.25)
        pytest.fail(f"mlflow server not healthy within {timeout:.0f} s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-3000:]


@contextmanager
def mlflow_server(store_uri: str, artifacts: Path, workdir: Path):
    """``mlflow server`` (one worker, no job runner, no telemetry) in its own process
    group; yields at once (call ``wait_ready``) and always ends the whole group."""
    port = _free_port()
    log_file = workdir / "mlflow-server.log"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store_uri,
           "--artifacts-destination", str(artifacts), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]  # fmt: skip
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env, start_new_session=True)
    try:
        yield MlflowServer(proc, f"http://127.0.0.1:{port}", log_file)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        try:  # the uvicorn child and anything the parent left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


# ------------------------------------------------------------------------------------------
# reading the rendered compare page
# ------------------------------------------------------------------------------------------
def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def _section(dom: str, title: str, next_title: str) -> str:
    """The DOM between the collapsible section ``title`` and the next one."""
    start = dom.find(f'aria-label="collapse {title}"')
    end = dom.find(f'aria-label="collapse {next_title}"', start + 1)
    if start < 0 or end < 0:
        return ""
    return dom[start:end]


def run_details(dom: str) -> dict[str, list[str]]:
    """``{"Run ID:": [id of column 1, id of column 2], "Run Name:": [...], ...}``."""
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", _section(dom, "Run details", "Parameters"), flags=re.S):
        cells = [_text(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.S)]
        if cells:
            rows[cells[0]] = cells[1:]
    return rows


def metrics_table(dom: str) -> dict[str, list[str]]:
    """``{metric: [value shown in column 1, value shown in column 2]}`` from the Metrics
    section, a virtualised grid of absolutely placed cells: the key column's cells link
    to the metric's chart ("Plot chart"), the value cells sit at the same ``top`` with a
    ``left`` per run column."""
    names: dict[int, str] = {}
    values: dict[int, dict[int, str]] = {}
    cell = r'<div[^>]*style="([^"]*position: absolute;[^"]*)"[^>]*>(.*?)</div>'
    for style, inner in re.findall(cell, _section(dom, "Metrics", "Artifacts"), flags=re.S):
        top = re.search(r"top: (\d+)px", style)
        left = re.search(r"left: (\d+)px", style)
        if not (top and left):
            continue
        if 'title="Plot chart"' in inner:
            names[int(top.group(1))] = _text(inner)
        else:
            values.setdefault(int(top.group(1)), {})[int(left.group(1))] = _text(inner)
    return {name: [v for _, v in sorted(values.get(top, {}).items())] for top, name in names.items()}


def _read_compare_page(url: str, tmp_path: Path) -> tuple[str, dict, dict]:
    """Render the page (a second, longer try if the app had not rendered the tables yet)."""
    for attempt, budget in enumerate((15000, 30000)):
        dom = chromium.render(url, profile_dir=tmp_path / f"chromium-profile-{attempt}", screenshot=tmp_path / SCREENSHOT,
                              window=(1600, 2100), budget_ms=budget, timeout=90)  # fmt: skip
        (tmp_path / DOM_DUMP).write_text(dom, encoding="utf-8")
        details, metrics = run_details(dom), metrics_table(dom)
        if details.get("Run ID:") and metrics:
            break
    return dom, details, metrics


# ------------------------------------------------------------------------------------------
def test_compare_view_shows_both_runs_and_their_metrics(run_eval, tmp_path):
    screenshot = tmp_path / SCREENSHOT
    if chromium.chromium_binary() is None:
        pytest.fail(f"Debian's chromium is not installed (no `chromium` on PATH); {chromium.SETUP_HINT}")
    from mlflow.tracking import MlflowClient

    root = tmp_path / "out"
    store_uri = f"sqlite:///{root.resolve() / 'mlflow.db'}"
    reference = run_eval(["model=reference", *RUN_ARGS], output_root=root)  # creates the store
    # the second run replays the reference outputs with the first N_WRONG replaced by "[]"
    recorded = [json.loads(line) for line in (reference.run_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(recorded) == 10 and all(r["scores"]["accuracy"] == 1.0 for r in recorded)
    replay_file = tmp_path / "replay.jsonl"
    replay_file.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": "[]" if i < N_WRONG else r["output"]}) + "\n"
                                   for i, r in enumerate(recorded)), encoding="utf-8")  # fmt: skip

    with mlflow_server(store_uri, root / "mlartifacts", tmp_path) as server:
        # the server starts (slowly) while the second run is made
        replay = run_eval(["model=replay", f"model.path={replay_file}", *RUN_ARGS], output_root=root)
        base_url = server.wait_ready()

        runs = [reference, replay]
        ids = [json.loads((r.run_dir / "tracking.json").read_text())["mlflow_run_id"] for r in runs]
        client = MlflowClient(store_uri)
        stored = [client.get_run(i) for i in ids]
        assert [s.info.status for s in stored] == ["FINISHED", "FINISHED"]
        names = [s.data.tags["mlflow.runName"] for s in stored]
        assert names[0].startswith("acebench-reference-") and names[1].startswith("acebench-replay-")
        expected = {"accuracy/normal_atom_bool": [1.0, 0.7], "overall": [1.0, 0.7], "n_samples": [10, 10], "n_failed": [0, 0]}
        for key, want in expected.items():
            assert [s.data.metrics[key] for s in stored] == pytest.approx(want), key

        exp_id = stored[0].info.experiment_id
        url = f"{base_url}/#/compare-runs?runs={json.dumps(ids)}&experiments={json.dumps([exp_id])}".replace(" ", "")
        started = time.monotonic()
        dom, details, metrics = _read_compare_page(url, tmp_path)
        print(f"\ncompare view {url} rendered in {time.monotonic() - started:.1f} s")
        print(f"screenshot: {screenshot}\nDOM: {tmp_path / DOM_DUMP}")

    assert screenshot.is_file() and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no screenshot written"
    assert "Comparing 2 Runs" in _text(dom), f"not the compare view; see {screenshot}"
    # one column per run, in the order asked for
    assert details.get("Run ID:") == ids, f"run ids shown: {details.get('Run ID:')}; see {screenshot}"
    assert details.get("Run Name:") == names, f"run names shown: {details.get('Run Name:')}"
    # each run's metric values as the UI shows them
    for key, want in expected.items():
        shown = metrics.get(key)
        assert shown is not None and len(shown) == 2, f"metric {key} not in the compare table {metrics}; see {screenshot}"
        assert [float(v) for v in shown] == pytest.approx(want), f"{key}: UI shows {shown}, store has {want}"
