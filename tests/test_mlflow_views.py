"""What evalkit writes for MLflow 3.18's own views (issue 47 item 6; docs/tracking-mlflow-views.md):
the baseline tag a comparison sets (on the comparison run, the candidate run and the
experiment), a gate's verdict as the quality-criteria record whose rules are the gate's
interval test, the comparison's figures named as ``mlflow.genai.compare_evaluations`` names
them (with evalkit's interval and adjusted p), and each sample's cost where MLflow's cost
views read it.

The in-process tests use a recording stand-in for ``MlflowClient`` (a SQLite store's
migrations take 25 s on a loaded host); the slow test checks the same records in a real
``mlflow server`` 3.18 and its evaluation pages in headless chromium, keeping screenshots.
"""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalkit import stats
from evalkit.summary import Summary
from evalkit.tracking import curate, mlflow_tracking
from evalkit.tracking.samples import Outcome
from evalkit.tracking.traces import build_trace

BASE, NEW = "b" * 8 + "0" * 24, "c" * 8 + "1" * 24
#: a paired headline comparison: NEW lost 0.3 of overall, 95% interval [−0.52, −0.08]
WORSE = {"a": 1.0, "b": 0.7, "delta": -0.3, "low": -0.52, "high": -0.08, "p": 0.004, "p_holm": 0.008, "p_bh": 0.006, "mde": 0.2,
         "n": 10, "test": "tango"}  # fmt: skip


def _holds(rule: dict, metrics: dict[str, float]) -> bool:
    """A quality-criteria rule read as MLflow's record defines it (GTE / LTE the threshold)."""
    value = metrics[rule["metricKey"]]
    return value >= rule["threshold"] if rule["comparator"] == "GTE" else value <= rule["threshold"]


@pytest.mark.parametrize("gate", ["noninferior:0.05", "superior", "equivalent:0.1"])
def test_the_criteria_rules_are_the_gates_interval_test_not_a_point_threshold(gate):
    """Over a grid of intervals (none on a margin), the rules pass exactly when evalkit's
    gate says PASS — and a point estimate inside the margin with a wide interval does not pass."""
    kind, _, margin = gate.partition(":")
    rules = curate.gate_rules(gate, BASE, "overall")
    assert {r["metricKey"] for r in rules} <= {f"compare/{BASE[:8]}/overall/ci_low", f"compare/{BASE[:8]}/overall/ci_high"}
    edges = [x / 100 + 0.003 for x in range(-40, 41, 7)]
    for low, high in itertools.combinations(edges, 2):
        verdict, _ = stats.gate_reading(kind, float(margin or 0), low, high)
        logged = curate.baseline_metrics(BASE, "overall", {"delta": (low + high) / 2, "low": low, "high": high})
        assert all(_holds(r, logged) for r in rules) == (verdict == "PASS"), (gate, low, high, verdict)
    wide = curate.baseline_metrics(BASE, "overall", {"delta": 0.01, "low": -0.3, "high": 0.32})
    assert not all(_holds(r, wide) for r in rules)


class _Client:
    """The ``MlflowClient`` calls :func:`~evalkit.tracking.mlflow_tracking.log_comparison`
    makes, recorded: runs (tags, metrics), experiment tags."""

    def __init__(self, runs: dict[str, str]):
        self.runs = {rid: {"exp": exp, "tags": {}, "metrics": {}, "status": "RUNNING"} for rid, exp in runs.items()}
        self.experiment_tags: dict[str, dict[str, str]] = {}

    def create_run(self, exp_id, tags=None, start_time=None):
        rid = f"{len(self.runs):032x}"
        self.runs[rid] = {"exp": exp_id, "tags": dict(tags or {}), "metrics": {}, "status": "RUNNING"}
        return SimpleNamespace(info=SimpleNamespace(run_id=rid))

    def log_batch(self, run_id, metrics=(), params=(), tags=()):
        self.runs[run_id]["metrics"].update({m.key: m.value for m in metrics})
        self.runs[run_id]["tags"].update({t.key: t.value for t in tags})

    def get_run(self, run_id):
        return SimpleNamespace(data=SimpleNamespace(tags=dict(self.runs[run_id]["tags"])))

    def log_table(self, run_id, data, artifact_file):
        pass

    def set_terminated(self, run_id, status="FINISHED", end_time=None):
        self.runs[run_id]["status"] = status

    def set_experiment_tag(self, exp_id, key, value):
        self.experiment_tags.setdefault(exp_id, {})[key] = value


def _ends(experiments=("1", "1")) -> tuple[dict, dict]:
    return tuple({"dir": f"/runs/{label}", "mlflow_run_id": rid, "experiment_id": exp, "name": f"acebench × {label}", "label": label,
                  "benchmark": "acebench", "judge_qualification": []}
                 for rid, exp, label in zip((BASE, NEW), experiments, ("reference", "candidate")))  # fmt: skip


def test_a_gated_comparison_marks_its_baseline_and_records_the_verdict_as_criteria(monkeypatch):
    fake = _Client({BASE: "1", NEW: "1"})
    monkeypatch.setattr(mlflow_tracking, "client", lambda uri: fake)
    pair = {"primary": "overall", "level": 0.95, "metrics": {"overall": WORSE}}
    verdict = stats.gate(WORSE, "noninferior", 0.05, 0.95, "overall")
    assert verdict["verdict"] == "FAIL"  # the upper bound −0.08 is below −0.05
    rid = mlflow_tracking.log_comparison("sqlite:///unused", pair, None, _ends(), verdict=verdict)

    comparison, candidate, baseline = (fake.runs[r] for r in (rid, NEW, BASE))
    assert comparison["status"] == "FINISHED"
    for run in (comparison, candidate):
        assert run["tags"][curate.BASELINE_TAG] == BASE
        assert run["tags"]["evalkit.gate"] == "FAIL (noninferior:0.05) — " + verdict["line"].split(" — ", 1)[1]
        assert run["tags"]["evalkit.gate"].startswith("FAIL (noninferior:0.05) — upper bound -0.0800 < −0.05; overall Δ -0.3000")
        record = json.loads(run["tags"][curate.QUALITY_CRITERIA_TAG])
        assert record["schemaVersion"] == 1 and record["rules"] == [
            {"metricKey": "compare/bbbbbbbb/overall/ci_low", "comparator": "GTE", "threshold": -0.05}]
        own = record["evalkit"]
        assert (own["gate"], own["verdict"], own["baseline_run_id"]) == ("noninferior:0.05", "FAIL", BASE)
        assert (own["ci_low"], own["ci_high"], own["diff"], own["level"], own["n_paired"]) == (-0.52, -0.08, -0.3, 0.95, 10)
        # MLflow's names, evalkit's figures: the interval and the adjusted p beside the test's
        named = {k.rsplit("/", 1)[1]: v for k, v in run["metrics"].items() if k.startswith("compare/bbbbbbbb/overall/")}
        assert named == {"diff": -0.3, "ci_low": -0.52, "ci_high": -0.08, "p_value": 0.004, "p_holm": 0.008, "p_bh": 0.006,
                         "mde": 0.2, "n_paired": 10.0}  # fmt: skip
        assert not all(_holds(r, run["metrics"]) for r in record["rules"])  # the record reads FAIL where it is shown
    assert comparison["metrics"]["compare/delta"] == -0.3  # evalkit's own names stay
    assert curate.BASELINE_TAG not in baseline["tags"] and not any(k.startswith("compare/") for k in baseline["metrics"])
    assert fake.experiment_tags == {"1": {curate.BASELINE_TAG: BASE}}  # what the "Evaluation runs" page reads


def test_an_ungated_or_sweep_comparison_sets_no_criteria_and_leaves_the_experiment_baseline(monkeypatch):
    fake = _Client({BASE: "1", NEW: "1"})
    monkeypatch.setattr(mlflow_tracking, "client", lambda uri: fake)
    pair = {"primary": "overall", "level": 0.95, "metrics": {"overall": WORSE}}
    rid = mlflow_tracking.log_comparison("sqlite:///unused", pair, None, _ends(), parent_run_id="f" * 32)
    for run in (fake.runs[rid], fake.runs[NEW]):
        assert run["tags"][curate.BASELINE_TAG] == BASE and curate.QUALITY_CRITERIA_TAG not in run["tags"]
        assert run["metrics"]["compare/bbbbbbbb/overall/ci_high"] == -0.08
    assert fake.experiment_tags == {}  # a sweep's pairs never move the experiment's baseline
    other = _Client({BASE: "1", NEW: "2"})
    monkeypatch.setattr(mlflow_tracking, "client", lambda uri: other)
    mlflow_tracking.log_comparison("sqlite:///unused", pair, None, _ends(("1", "2")))
    assert other.experiment_tags == {}  # the page reads a baseline of its own experiment only


def test_a_priced_sample_carries_its_cost_where_mlflow_reads_it(tmp_path):
    summary = Summary.model_construct(benchmark="acebench", headline="overall", model="gpt-small")
    usage = {"prompt_tokens": 120, "completion_tokens": 30}
    row = {"sample_id": "s1", "subset": "normal", "status": "ok", "output": "[]", "scores": {"accuracy": 1.0}, "usage": usage,
           "latency_s": 0.5, "cost_usd": 0.00048}  # fmt: skip
    info, spans = build_trace(Outcome("s1", "normal", row=row), tmp_path, "r" * 32, "1", summary, 1_800_000_000.0)
    (span,) = spans
    assert span.get_attribute("mlflow.llm.cost") == {"total_cost": 0.00048} and span.get_attribute("mlflow.llm.model") == "gpt-small"
    assert span.get_attribute("mlflow.chat.tokenUsage") == {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}
    assert json.loads(info.trace_metadata["mlflow.trace.cost"]) == {"total_cost": 0.00048}
    assert json.loads(info.trace_metadata["mlflow.trace.tokenUsage"])["total_tokens"] == 150
    # an unknown price: no cost anywhere (never 0), and no model name MLflow would price by its own map
    info, (span,) = build_trace(Outcome("s1", "normal", row={**row, "cost_usd": None}), tmp_path, "r" * 32, "1", summary, 1_800_000_000.0)
    assert "mlflow.trace.cost" not in info.trace_metadata
    assert span.get_attribute("mlflow.llm.cost") is None and span.get_attribute("mlflow.llm.model") is None


# ------------------------------------------------------------------------------------------
# MLflow 3.18's pages, in a real server and headless chromium
# ------------------------------------------------------------------------------------------
def _mlflow_version() -> tuple[int, ...]:
    from importlib.metadata import version  # not `import mlflow`: collection stays cheap

    return tuple(int(x) for x in re.findall(r"\d+", version("mlflow"))[:2])


RUN_ARGS = ["tracking=mlflow", "benchmark.subsets=[normal_atom_bool]", "run.limit=6"]
#: the candidate: a priced OpenAI-compatible model (the scripted server) that answers "[]"
PRICED = ["model=openai_compatible", "model.provider_model=openai/fake", "+model.pricing.input_per_mtok=2",
          "+model.pricing.output_per_mtok=8", "run.cache=false"]  # fmt: skip


def _page_text(dom: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom))).strip()


def _render(url: str, tmp_path: Path, name: str, ready: str) -> str:
    """The page's DOM (kept as ``<name>.html`` beside ``<name>.png``); a second, longer try
    when ``ready`` is not in it yet (the app had not rendered its data) or when chromium's
    virtual time never ran out (seen once in four renders of MLflow 3.18's pages at load 28;
    the second try's error is raised)."""
    from tests.support import chromium
    from tests.support.host import time_limit

    dom = ""
    for attempt, budget in enumerate((15000, 30000)):
        try:
            dom = chromium.render(url, profile_dir=tmp_path / f"profile-{name}-{attempt}", screenshot=tmp_path / f"{name}.png",
                                  window=(2200, 1300), budget_ms=budget, timeout=time_limit(60 * (attempt + 1)))  # fmt: skip
        except TimeoutError:
            if attempt:
                raise
            continue
        (tmp_path / f"{name}.html").write_text(dom, encoding="utf-8")
        if ready in _page_text(dom):
            break
    print(f"{name}: {url}\n  screenshot {tmp_path / f'{name}.png'}\n  DOM {tmp_path / f'{name}.html'}")
    return dom


def _usd(x: float) -> str:
    """``x`` as the page writes a cost (``Intl.NumberFormat`` en-US, USD, at most 6 decimals)."""
    text = f"{x:,.6f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"${whole}.{frac.ljust(2, '0')}"


@pytest.mark.slow
@pytest.mark.skipif(_mlflow_version() < (3, 18), reason="MLflow 3.18's evaluation views need mlflow>=3.18 (constraints.txt pins 3.17.2)")
def test_mlflow_318_pages_show_the_baseline_the_verdict_and_the_cost(run_eval, fake_openai, ray_address, tmp_path):
    """A baseline run (the reference answers, free) and a priced candidate that answers "[]"
    (every answer wrong), compared with ``compare --gate noninferior:0.05 --log`` (INCONCLUSIVE:
    with 6 pairs the interval of Δ = −1 reaches +0.19), in
    a real ``mlflow server``: its "Evaluation runs" page marks the baseline, the candidate's
    page shows the verdict and the cost and tokens recomputed from its ``predictions.jsonl``,
    and the comparison view shows both runs' cost against the baseline."""
    from tests.support import chromium

    if chromium.chromium_binary() is None:  # CI installs it (.ci/run): there a missing browser is a failure
        missing = f"Debian's chromium is not installed (no `chromium` on PATH); {chromium.SETUP_HINT}"
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(missing)
    from mlflow.tracking import MlflowClient

    from evalkit.compare import main as compare_main
    from tests.support.mlflow_server import mlflow_server

    root = tmp_path / "out"
    store_uri = f"sqlite:///{root.resolve() / 'mlflow.db'}"
    baseline = run_eval(["model=reference", *RUN_ARGS], output_root=root)
    fake_openai.set_plan({"default": {"content": "[]"}})
    candidate = run_eval([*PRICED, f"backend.api_base={fake_openai.api_base}", *RUN_ARGS], output_root=root)
    rows = [json.loads(line) for line in (candidate.run_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(isinstance(r["cost_usd"], float) and r["cost_usd"] > 0 for r in rows)
    cost, tokens = sum(r["cost_usd"] for r in rows), sum(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in rows)
    assert compare_main([str(baseline.run_dir), str(candidate.run_dir), "--gate", "noninferior:0.05", "--log"]) == 3  # INCONCLUSIVE

    ids = [json.loads((r.run_dir / "tracking.json").read_text())["mlflow_run_id"] for r in (baseline, candidate)]
    with mlflow_server(store_uri, root / "mlartifacts", tmp_path) as server:
        url = server.wait_ready()
        client = MlflowClient(url)
        stored = client.get_run(ids[1])
        exp_id = stored.info.experiment_id
        assert client.get_experiment(exp_id).tags[curate.BASELINE_TAG] == ids[0]
        assert stored.data.tags[curate.BASELINE_TAG] == ids[0]
        record = json.loads(stored.data.tags[curate.QUALITY_CRITERIA_TAG])
        assert record["evalkit"]["verdict"] == "INCONCLUSIVE" and record["rules"][0]["metricKey"] == f"compare/{ids[0][:8]}/overall/ci_low"
        assert stored.data.metrics[f"compare/{ids[0][:8]}/overall/diff"] == pytest.approx(-1.0)
        names = [client.get_run(i).data.tags["mlflow.runName"] for i in ids]

        started = time.monotonic()
        runs_page = _render(f"{url}/#/experiments/{exp_id}/evaluation-runs", tmp_path, "mlflow318_evaluation_runs", "BASELINE")
        details = _render(f"{url}/#/experiments/{exp_id}/evaluation-runs/{ids[1]}/details", tmp_path, "mlflow318_candidate",
                          "evalkit.gate")  # fmt: skip
        compared = _render(f"{url}/#/experiments/{exp_id}/evaluation-runs/{ids[0]}/details?compare=true&compareRuns={ids[1]}",
                           tmp_path, "mlflow318_compare", "Run information")  # fmt: skip
        print(f"three pages rendered in {time.monotonic() - started:.1f} s")

    # the baseline: one BASELINE mark, beside the baseline run's name
    marked = re.findall(r'evaluation-runs/(\w+)/details">[^<]*</a><div[^>]*data-component-id="mlflow\.eval-runs\.baseline-tag"', runs_page)
    assert marked == [ids[0]], f"the baseline mark is not on {names[0]}; see {tmp_path / 'mlflow318_evaluation_runs.png'}"
    # the verdict and the cost on the candidate's page
    text = _page_text(details)
    assert "evalkit.gate: INCONCLUSIVE (noninferior:0.05) — the interval [-1.0000, +0.1864] holds −0.05" in text, f"no verdict; see {tmp_path / 'mlflow318_candidate.png'}"
    stats_shown = re.search(r"Total tokens (\S+) Total cost (\S+) Errors", text)
    assert stats_shown and stats_shown.groups() == (f"{tokens:,}", _usd(cost)), (stats_shown and stats_shown.groups(), tokens, cost)
    # the comparison view: the baseline named, both runs' cost (the reference answers are free)
    text = _page_text(compared)
    shot = tmp_path / "mlflow318_compare.png"
    assert re.search(rf"Run #\w+ {re.escape(names[0])} Baseline #\w+ {re.escape(names[1])} Dataset", text), f"no baseline; see {shot}"
    # this table rounds to 4 decimals ("≈$0.0007"); "Lowest value" marks the cheaper run
    assert re.search(rf"Total cost ≈\$0\.0000 (Lowest value )?≈\${cost:.4f} ", text), f"no cost row; see {shot}"
    assert f"Total tokens — {tokens:,} " in text
