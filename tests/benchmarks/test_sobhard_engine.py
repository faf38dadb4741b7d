"""SOBHard through the real engine, in process: reference and echo baseline runs, the
journal records, the summary metrics and the heat map."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from evalkit.benchmarks.sobhard.plots import HEATMAP_FILE, cell_grid, write_heatmap


def test_reference_run_scores_one_everywhere_and_writes_the_heat_map(run_eval, shared_data_dir: Path):
    result = run_eval(["benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}", "model=reference"])
    summary = result.summary
    assert summary["status"] == "complete" and summary["n_scored"] == 22
    metrics = summary["metrics"]
    for name in ("sample_pass_rate", "balance_score", "constraint_pass_rate", "format_pass_rate", "content_pass_rate", "task_pass_rate"):
        assert metrics[name] == 1.0, name
    assert set(metrics.values()) == {1.0}
    assert len([k for k in metrics if k.startswith("sample_pass_rate/cell/")]) == 22
    assert summary["generation_params"]["max_tokens"] == 65536
    assert set(summary["data_files_fingerprint"]) == {"sobhard/test", "sobhard/shots"}
    png = result.run_dir / "plots" / HEATMAP_FILE
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (result.run_dir / "report.md").read_text(encoding="utf-8")
    assert f"plots/{HEATMAP_FILE}" in report and "Constraint pass rates" in report
    rows = [json.loads(line) for line in (result.run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    session = next(r for r in rows if r["sample_id"] == "22")
    assert session["subset"] == "session/medium" and session["failed_checks"] == []
    assert session["checks"]["session.no_restatement"] is True


def test_echo_baseline_run_scores_zero(run_eval, shared_data_dir: Path):
    result = run_eval(["benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}", "model=baseline_echo"])
    metrics = result.summary["metrics"]
    assert result.summary["status"] == "complete"
    assert metrics["sample_pass_rate"] == 0.0 and metrics["content_pass_rate"] == 0.0
    assert abs(metrics["balance_score"] - 0.01) < 1e-12  # every cell dead: the floor
    rows = [json.loads(line) for line in (result.run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(r["failed_checks"] for r in rows) and len(rows) == 22


def test_too_small_shot_budget_stops_before_any_request(run_eval, shared_data_dir: Path, tmp_path: Path):
    import pytest

    from evalkit.errors import ConfigError

    with pytest.raises(ConfigError, match="shot budget is 2"):
        run_eval(["benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}", "model=reference",
                  "benchmark.max_replayed_turns=2"], output_root=tmp_path / "o")  # fmt: skip
    assert not (tmp_path / "o" / "runs").exists()


def test_heat_map_marks_empty_cells(tmp_path: Path, shared_data_dir: Path):
    metrics = {"sample_pass_rate/cell/diff/easy": 0.25, "sample_pass_rate": 0.25, "balance_score": 0.25}
    grid = cell_grid(metrics)
    assert grid[6] == [0.25, None, None] and all(v is None for row in grid[:6] for v in row)
    path = write_heatmap(tmp_path / "plots", metrics)
    assert path.name == HEATMAP_FILE and path.stat().st_size > 1000
    bench = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    assert bench.write_plots(tmp_path / "p2", {}, []) == []


def test_numeric_sample_ids_select_those_samples(run_eval, shared_data_dir: Path):
    """SOBHard's ids are numbers; Hydra parses ``run.sample_ids=[1,2]`` as integers, which
    select the samples whose ids are "1" and "2" (they used to be refused)."""
    result = run_eval(["benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}", "model=reference",
                       "run.sample_ids=[2,1]"])  # fmt: skip
    assert result.summary["status"] == "complete" and result.summary["n_samples"] == 2
    rows = [json.loads(line) for line in (result.run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(r["sample_id"] for r in rows) == ["1", "2"]
    assert result.summary["metrics"]["sample_pass_rate"] == 1.0
