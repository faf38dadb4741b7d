"""The MLflow UI as a person uses it: two finished evalkit runs in an MLflow store, the
real ``mlflow server`` on 127.0.0.1, Debian's headless chromium on one page: the replay
run's evaluation page (its traces, one per sample) compared to the reference run. The test
reads the rendered page (the runs, one row per sample, the ``accuracy`` assessment column
with its average and its change) and keeps a screenshot and the page's DOM in the test's
temporary directory (``mlflow_evaluation.png`` / ``.html``; the test prints their paths, and
a failure names them), never among the user's runs in ``outputs/``.

Chromium comes from ``bash bash/setup.sh``; without it the test fails (CI installs it).
"""

from __future__ import annotations

import html
import os
import json
import re
import time
from pathlib import Path

import pytest

from tests.support import chromium
from tests.support.host import time_limit
from tests.support.mlflow_server import mlflow_server

SCREENSHOT = "mlflow_evaluation.png"  # in the test's tmp_path
DOM_DUMP = "mlflow_evaluation.html"

RUN_ARGS = ["tracking=mlflow", "benchmark.subsets=[normal_atom_bool]", "run.limit=10"]
N_WRONG = 3  # replayed outputs replaced by "[]" (no call): 7 of 10 correct


# ------------------------------------------------------------------------------------------
# reading the rendered evaluation page
# ------------------------------------------------------------------------------------------
def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def assessment_summary(dom: str, name: str) -> tuple[str, str | None] | None:
    """``(average, change against the compared run)`` shown in the header of assessment
    column ``name`` ("AVG 0.7 -0.3"), or ``None`` when the page has no such column."""
    m = re.search(rf'<div title="{re.escape(name)}"[^>]*>{re.escape(name)}</div>(.{{0,3000}})', dom, flags=re.S)
    if not m:
        return None
    avg = re.search(r">AVG</div><div[^>]*>((?:<div[^>]*>[^<]*</div>)+)</div>", m.group(1))
    if not avg:
        return None
    values = [_text(v) for v in re.findall(r"<div[^>]*>[^<]*</div>", avg.group(1))]
    return values[0], (values[1] if len(values) > 1 else None)


def _read_evaluation_page(url: str, tmp_path: Path) -> str:
    """Render the page (a second, longer try if the app had not rendered the table yet)."""
    dom = ""
    for attempt, budget in enumerate((15000, 30000)):
        dom = chromium.render(url, profile_dir=tmp_path / f"chromium-profile-{attempt}", screenshot=tmp_path / SCREENSHOT,
                              window=(1600, 1400), budget_ms=budget, timeout=time_limit(90))  # fmt: skip
        (tmp_path / DOM_DUMP).write_text(dom, encoding="utf-8")
        if assessment_summary(dom, "accuracy"):
            break
    return dom


# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_evaluation_page_shows_each_sample_with_its_assessment_and_the_average(run_eval, tmp_path):
    """A replay run's evaluation page (its traces) compared to the reference run: the
    ``accuracy`` assessment column with the replay's average and its change."""
    if chromium.chromium_binary() is None:  # CI installs it (.ci/run): there a missing browser is a failure
        missing = f"Debian's chromium is not installed (no `chromium` on PATH); {chromium.SETUP_HINT}"
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(missing)
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
        expected = {"accuracy/normal_atom_bool": [1.0, 0.7], "overall": [1.0, 0.7], "headline": [1.0, 0.7],
                    "n_samples": [10, 10], "n_failed": [0, 0]}  # fmt: skip
        for key, want in expected.items():
            assert [s.data.metrics[key] for s in stored] == pytest.approx(want), key

        exp_id = stored[0].info.experiment_id
        url = f"{base_url}/#/experiments/{exp_id}/runs/{ids[1]}/evaluations?compareToRunUuid={ids[0]}"
        started = time.monotonic()
        dom = _read_evaluation_page(url, tmp_path)
        print(f"\nevaluation page {url} rendered in {time.monotonic() - started:.1f} s")
        shot = tmp_path / SCREENSHOT
        print(f"screenshot: {shot}\nDOM: {tmp_path / DOM_DUMP}")

    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no screenshot written"
    text = _text(dom)
    # the replay run's page, compared to the reference run
    assert f'data-testid="runs-header">{names[1]}</span>' in dom, f"not the replay run's page; see {shot}"
    assert "compare to" in text and names[0] in text, f"the reference run is not the comparison; see {shot}"
    assert "10 of 10" in text, f"not one row per sample; see {shot}"
    assert all(r["sample_id"] in text for r in recorded), f"a sample's trace is missing; see {shot}"
    # the assessment column: 7 of 10 right, 0.3 below the reference
    shown = assessment_summary(dom, "accuracy")
    assert shown is not None, f"no accuracy assessment column with an average; see {shot}"
    assert float(shown[0]) == pytest.approx(0.7) and shown[1] is not None and float(shown[1]) == pytest.approx(-0.3), shown
