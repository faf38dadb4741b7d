"""The Benchmark contract, said once: the signatures are what the engine calls, no state passes
between methods, metrics are defined once (``stat_plan``; ``aggregate`` is its point
estimates), what the tools need is declared on the benchmark, settings defaults live in the
settings models only — and a benchmark from outside evalkit (tests/support/extbench: the
README's example, a package on ``PYTHONPATH`` with an entry point and its own config
directory) goes through reference, replay, resume, rescore, compare, intervals and MLflow."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from evalkit.benchmarks import get_benchmark_class, known_benchmarks
from evalkit.benchmarks.base import Benchmark, BenchmarkSettings
from evalkit.stats import BINARY
from evalkit.types import Request, Sample, SampleScore
from tests.conftest import REPO_ROOT, evalkit_cmd

EXTBENCH = REPO_ROOT / "tests" / "support" / "extbench"
BUILT_IN = ("acebench", "ke", "sobhard")


@pytest.fixture
def capitals(monkeypatch):
    """The outside package on the path: found through its entry point, by name."""
    monkeypatch.syspath_prepend(str(EXTBENCH))
    return get_benchmark_class("capitals")


# ------------------------------------------------------------------------------------------
# signatures and state
# ------------------------------------------------------------------------------------------
def test_report_tables_takes_what_the_report_passes(capitals):
    """report/summary.py calls ``report_tables(metrics, ci, counts)``: the base class and every
    benchmark take those three."""
    for cls in [get_benchmark_class(n) for n in BUILT_IN] + [capitals]:
        params = list(inspect.signature(cls.report_tables).parameters)
        assert params == ["self", "metrics", "ci", "counts"], cls.name
    bench = capitals(capitals.settings_model(name="capitals"))
    ((title, headers, rows),) = bench.report_tables({"accuracy": 0.5}, {"accuracy": {"low": 0.25, "high": 0.75}}, {})
    assert rows == [["accuracy", "0.5000 [0.2500, 0.7500]"]]


def test_sobhard_cell_counts_are_the_counts_it_is_passed(shared_data_dir: Path):
    from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings

    bench = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    metrics = {"sample_pass_rate/cell/diff/easy": 0.5}
    tables = dict((t, rows) for t, _, rows in bench.report_tables(metrics, {}, {"diff/easy": {"n_requested": 6, "n_scored": 4, "n_failed": 2}}))
    assert tables["Sample pass rate by family × difficulty"][0][1] == "0.5000 (n=4)"
    assert not hasattr(bench, "_counts")


def test_metrics_are_defined_once_in_the_stat_plan():
    """No benchmark has a second implementation of its metrics: ``aggregate`` is the base
    class's, the point estimates of ``stat_plan``."""
    for name in known_benchmarks():
        cls = get_benchmark_class(name)
        assert cls.aggregate is Benchmark.aggregate, name
        assert "stat_plan" in vars(cls) or cls.stat_plan is Benchmark.stat_plan


def test_a_benchmark_scores_through_score_or_score_sample_not_neither():
    with pytest.raises(TypeError, match="must implement score"):
        type("NoScore", (Benchmark,), {"name": "noscore", "load": None, "build": None, "reference_output": None})


def test_the_default_plan_is_the_mean_of_each_score_overall_and_by_subset(capitals):
    bench = capitals(capitals.settings_model(name="capitals"))
    samples = bench.load()
    records = [{"sample_id": s.id, "scores": bench.score(s, bench.reference_output(s) if s.subset == "asia" else "Lyon").scores}
               for s in samples[:-1]]  # fmt: skip
    plan = bench.stat_plan(samples, [records])
    assert bench.aggregate(samples, records) == plan.point() == {"accuracy": 3 / 7, "accuracy/asia": 1.0, "accuracy/europe": 0.0}
    assert plan.columns["accuracy"].kind == BINARY and len(plan.units) == 7
    assert bench.limit_score(samples[0], "time").scores == {"accuracy": 0.0}  # the names of an empty answer's verdict


# ------------------------------------------------------------------------------------------
# declared on the benchmark, recorded for the tools that read runs
# ------------------------------------------------------------------------------------------
def test_primary_score_and_tracked_metrics_are_read_from_the_summary(tmp_path: Path):
    from evalkit.compare import Run, primary_score_key
    from evalkit.journal import Journal
    from evalkit.summary import Summary
    from evalkit.tracking.curate import is_named

    def run(summary: dict) -> Run:
        return Run(tmp_path, Summary.model_construct(**summary), Journal(tmp_path))

    assert primary_score_key([run({"benchmark": "someone_elses", "primary_score": "exact", "headline": "accuracy"})]) == "exact"
    assert primary_score_key([run({"benchmark": "sobhard"})]) == "sample_pass"  # a run from before the field
    assert is_named(Summary.model_construct(tracked_metrics="all"), "accuracy/europe")
    assert not is_named(Summary.model_construct(tracked_metrics="top_level"), "sample_pass_rate/cell/diff/easy")
    assert is_named(Summary.model_construct(tracked_metrics="top_level"), "balance_score")


def test_defaults_live_in_the_settings_models_only():
    """A benchmark YAML sets no key to its settings model's default (the defaults are said
    once), and an override of a key the YAML leaves out still works."""
    from evalkit.compose import compose

    for path in sorted((REPO_ROOT / "conf" / "benchmark").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        cls = get_benchmark_class(raw["name"], kind=raw.get("kind"))
        for key, value in raw.items():
            field = cls.settings_model.model_fields.get(key)
            if key in ("name", "kind") or field is None or field.is_required():
                continue
            default = field.get_default(call_default_factory=True)
            dumped = default.model_dump() if hasattr(default, "model_dump") else default
            assert value != dumped, f"{path.name}: {key} repeats the default of {cls.settings_model.__name__}"
    cfg = compose(["benchmark=ke", "benchmark.first_k=5", "benchmark.truncation.obs=100"])
    assert cfg.benchmark.first_k == 5 and cfg.benchmark.truncation.obs == 100


# ------------------------------------------------------------------------------------------
# from outside evalkit
# ------------------------------------------------------------------------------------------
def test_benchmark_module_imports_the_users_module(monkeypatch):
    from evalkit.errors import ConfigError

    monkeypatch.syspath_prepend(str(EXTBENCH))
    with pytest.raises(ConfigError, match="benchmark.module: cannot import 'no_such_pkg.bench'"):
        get_benchmark_class("nowhere", "no_such_pkg.bench")
    assert get_benchmark_class("capitals", "capitals_bench").__module__ == "capitals_bench"


def test_a_user_config_dir_is_on_the_search_path(monkeypatch, tmp_path: Path):
    from evalkit.compose import compose
    from evalkit.errors import ConfigError

    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(EXTBENCH / "conf"))
    assert compose(["benchmark=capitals"]).benchmark.name == "capitals"
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="EVALKIT_CONFIG_DIR: .* is not a directory"):
        compose(["benchmark=capitals"])


@pytest.mark.slow
def test_an_outside_benchmark_runs_replays_resumes_rescores_compares_and_is_tracked(tmp_path: Path):
    """The README's 34-line benchmark, a package outside the repository's sources (on
    ``PYTHONPATH``, registered by its entry point, its YAML in ``EVALKIT_CONFIG_DIR``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(EXTBENCH), os.environ.get("PYTHONPATH")])),
           "EVALKIT_CONFIG_DIR": str(EXTBENCH / "conf")}  # fmt: skip
    root = tmp_path / "out"
    common = ["benchmark=capitals", f"run.output_root={root}", "run.progress=false", "tracking=mlflow"]

    def run(*args: str, module: str = "evalkit") -> subprocess.CompletedProcess:
        cmd = evalkit_cmd(*args) if module == "evalkit" else [*evalkit_cmd()[:2], module, *args]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    ref = run(*common, "model=reference", f"run.dir={tmp_path / 'ref'}")
    assert ref.returncode == 0, ref.stderr
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert summary["metrics"] == {"accuracy": 1.0, "accuracy/asia": 1.0, "accuracy/europe": 1.0}
    assert summary["primary_score"] == "accuracy" and summary["metrics_ci"]["accuracy"]["n"] == 8

    answers = {r["id"]: r["capital"] for r in map(json.loads, (EXTBENCH / "capitals_bench" / "capitals.jsonl").read_text().splitlines())}
    answers.update(fr="Lyon", jp="Osaka")  # two wrong
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": k, "output": v}) + "\n" for k, v in answers.items() if k != "vn"))
    first = run(*common, "model=replay", f"model.path={replay}", f"run.dir={tmp_path / 'rep'}")
    assert first.returncode == 1, first.stderr  # vn has no recorded output: a failure, the run incomplete
    failed = [json.loads(x) for x in (tmp_path / "rep" / "failed.jsonl").read_text().splitlines()]
    assert [(f["sample_id"], f["error_kind"]) for f in failed] == [("vn", "missing_output")]
    with replay.open("a") as fh:
        fh.write(json.dumps({"sample_id": "vn", "output": answers["vn"]}) + "\n")
    again = run(*common, "model=replay", f"model.path={replay}", f"run.resume={tmp_path / 'rep'}")
    assert again.returncode == 0, again.stderr
    rep = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert rep["metrics"] == {"accuracy": 0.75, "accuracy/asia": 0.75, "accuracy/europe": 0.75}
    assert rep["metrics_ci"]["accuracy"]["low"] < 0.75 < rep["metrics_ci"]["accuracy"]["high"]

    rescored = run(str(tmp_path / "rep"), module="evalkit.rescore")
    assert rescored.returncode == 0, rescored.stderr

    compared = run(str(tmp_path / "ref"), str(tmp_path / "rep"), "--json", module="evalkit.compare")
    assert compared.returncode == 0, compared.stderr
    report = json.loads(compared.stdout)
    (flips,) = report["flips"]
    assert flips["score"] == "accuracy" and sorted(x["sample_id"] for x in flips["a_better"]) == ["fr", "jp"]
    acc = report["paired"][0]["metrics"]["accuracy"]
    assert acc["delta"] == -0.25 and acc["test"] == "exact unconditional (Tango's statistic)" and (acc["only_a"], acc["only_b"]) == (2, 0)

    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("evalkit").experiment_id])
    assert sorted(r.data.metrics.get("headline") for r in runs) == [0.75, 1.0]
    assert {r.data.params["benchmark.name"] for r in runs} == {"capitals"}


def test_the_readme_example_is_the_outside_benchmark():
    """The guide's "Add a benchmark" page (the README's section, moved by issue 48) shows the
    example package's code, as it is."""
    readme = (REPO_ROOT / "docs" / "add-a-benchmark.md").read_text(encoding="utf-8")
    code = (EXTBENCH / "capitals_bench" / "__init__.py").read_text(encoding="utf-8")
    assert code.strip() in readme
    assert len(code.splitlines()) <= 40


def test_settings_of_an_outside_benchmark_validate_like_a_built_in(capitals):
    assert issubclass(capitals.settings_model, BenchmarkSettings)
    bench = capitals(capitals.settings_model(name="capitals"))
    assert bench.declared()["data_source"].endswith("capitals.jsonl")
    assert isinstance(bench.build(Sample("fr", "europe", {"country": "France"}), 0), Request)
    assert isinstance(bench.score(Sample("fr", "europe", {"capital": "Paris"}), " paris\n"), SampleScore)
