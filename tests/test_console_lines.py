"""What the console says (issue 26 items 11 and 12): a typo gets the key it resembles, every
long phase after the progress bar names itself, and a Ctrl-C after the outcome line is one
line with the run's own exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.compose import compose
from evalkit.errors import ConfigError
from tests.conftest import REPO_ROOT, evalkit_cmd


@pytest.mark.parametrize(
    "override, line",
    [
        ("run.limt=5", "run.limt: unknown key; did you mean run.limit?"),
        ("backend.concurency=3", "backend.concurrency?"),
        ("run.zzz=1", "run.zzz: unknown key (to add a new key use +run.zzz=...)"),
    ],
)
def test_a_mistyped_key_names_the_key_it_resembles(override, line):
    """It once said "use +run.limt=..." (which would then be refused by validation)."""
    with pytest.raises(ConfigError) as info:
        compose([override])
    assert str(info.value).endswith(line) and "\n" not in str(info.value)


def test_ctrl_c_after_the_outcome_line_is_one_line_and_the_runs_exit_code():
    """Once exit 130 and no message, while the process shut down after "complete"."""
    code = (
        "import os, signal, time\n"
        "from evalkit.cli import finished_quietly\n"
        "finished_quietly(1, 'outputs/runs/x')\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 1
    assert proc.stderr == "evalkit: interrupted after the run finished; its results are in outputs/runs/x\n"


@pytest.mark.slow
def test_the_phases_after_the_progress_bar_say_what_they_do(acebench_dir, tmp_path):
    """Once 33 s of silence after 100 % while 2,040 traces were logged."""
    out = tmp_path / "out"
    proc = subprocess.run(
        evalkit_cmd("model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3", f"benchmark.data_dir={acebench_dir}",
                    f"run.output_root={out}", "tracking=mlflow"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "evalkit: summary: 3 samples × 1 epoch, intervals by each metric's regime; then report.md and the plots…" in lines
    # every answer right: no resampling; the 0/1 score by Clopper–Pearson, the weighted aggregates by
    # issue 44's score interval for bounded per-unit values
    assert ("evalkit: intervals (95%): exact binomial (Clopper–Pearson) (1 metric), score interval on the per-unit values in "
            "[0, 1] (one stratum of records, dialogues and rollouts) (3 metrics)") in lines  # fmt: skip
    assert any(ln.startswith("evalkit: MLflow: logging the run's params, metrics, tables and files to sqlite:///") for ln in lines)
    assert "evalkit: MLflow: logging 3 traces (0 already there), 200 per batch…" in lines


def _ci(method: str) -> dict:
    return {"low": 0.1, "high": 0.9, "stderr": 0.1, "n": 3, "method": method}


@pytest.mark.parametrize(("cis", "line"), [
    ({"acc": _ci("exact binomial (Clopper–Pearson): 1 of 1 samples, fewer than 5 successes")},
     "intervals (95%): exact binomial (Clopper–Pearson) (1 metric)"),
    ({"acc": _ci("Wilson score: 40 of 60 samples"), "f1": _ci("t interval: on the per-unit means of 60 samples"),
      "overall": _ci("percentile bootstrap: 2000 resamples of the samples within each subset")},
     "intervals (95%): Wilson score (1 metric), t interval (1 metric), percentile bootstrap (1 metric), from 2000 bootstrap resamples"),
    ({}, "intervals: none computed"),
])  # fmt: skip
def test_the_interval_line_names_the_methods_the_run_used(cis, line):
    """Once "intervals from 2000 bootstrap resamples" for a 1-sample run whose every interval
    was Clopper–Pearson (no resample drawn): the line now names the methods the statistics chose."""
    from evalkit.engine.finalize import interval_line
    from evalkit.summary import Summary

    summary = Summary(status="complete", benchmark="t", model="m", n_samples=1, n_scored=1, n_failed=0, metrics_ci=cis)
    assert interval_line(summary, 2000) == line


@pytest.mark.parametrize(
    "group, edit, line",
    [
        ("backend", lambda d: d.update(concurency=4), "backend.concurency: unknown key; did you mean backend.concurrency?"),
        ("benchmark", lambda d: d.update(scorer=d.pop("scorers")), "benchmark.scorer: unknown key; did you mean benchmark.scorers?"),
        ("benchmark", lambda d: d["scorers"][0].update(abs_tool=d["scorers"][0].pop("abs_tol")),
         "benchmark.scorers.0.abs_tool: unknown key; did you mean benchmark.scorers.0.abs_tol?"),
    ],
)  # fmt: skip
def test_a_mistyped_key_in_a_config_file_names_the_key_it_resembles_and_the_file(tmp_path, monkeypatch, group, edit, line):
    """Issue 47: in a team's backend file it said ``backend.concurency: unknown key`` (no
    suggestion, no file); a task's ``scorer:`` for ``scorers:`` said only ``benchmark.scorers:
    Field required``."""
    import yaml

    from evalkit.compose import resolve

    (tmp_path / "backend").mkdir()
    (tmp_path / "benchmark").mkdir()
    backend = {"kind": "api", "api_base": "http://127.0.0.1:9/v1"}
    task = yaml.safe_load((REPO_ROOT / "conf" / "benchmark" / "arith_mini.yaml").read_text(encoding="utf-8")) | {"name": "team_task"}
    edit(backend if group == "backend" else task)
    path = tmp_path / group / ("team_api.yaml" if group == "backend" else "team_task.yaml")
    path.write_text(yaml.safe_dump(backend if group == "backend" else task), encoding="utf-8")
    (tmp_path / "backend" / "team_other.yaml").write_text(yaml.safe_dump({"kind": "api"}), encoding="utf-8")
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path))
    chosen = ["benchmark=team_task", "model=reference"] if group == "benchmark" else ["benchmark=arith_mini", "model=openai_compatible", "backend=team_api"]
    with pytest.raises(ConfigError) as info:
        resolve(compose(chosen))
    assert str(info.value) == f"{line} (file {path})"


def test_cost_is_unknown_for_a_model_without_a_price_also_when_every_answer_came_from_the_cache():
    """Issue 47: the same unpriced model showed ``cost unknown`` when it sent requests and
    ``cost $0.0000`` when every answer came from the cache; a priced or offline one keeps $0."""
    from evalkit.report.summary import spend_fields

    def cost(spent, prices):
        return spend_fields(records=[], spent=(spent, 0), prices=prices, limits={}, not_sent=0, rule="", strip_prefix=False)["cost_usd"]

    assert cost(0.0, {"agent": None}) is None and cost(None, {"agent": None}) is None
    assert cost(0.0, {"agent": "litellm openai/gpt-4o", "judge:j": None}) is None
    assert cost(0.0, {"agent": "offline"}) == 0.0 and cost(0.25, {"agent": "litellm openai/gpt-4o"}) == 0.25


def test_console_counts_say_1_request_not_1_requests(tmp_path):
    """The dry run said "1 requests"; the summary line "1 samples × 1 epochs"."""
    from evalkit.compose import compose, resolve
    from evalkit.errors import counted
    from evalkit.job import dry_run
    assert (counted(1, "request"), counted(0, "request"), counted(2, "epoch"), counted(1, "bootstrap resample")) == (
        "1 request", "0 requests", "2 epochs", "1 bootstrap resample")  # fmt: skip
    _, cfg = resolve(compose([f"run.output_root={tmp_path}", "tracking=none", "model=reference", "benchmark=arith_mini", "run.limit=1",
                              "run.dry_run=true"]))  # fmt: skip
    lines = dry_run(cfg).lines
    assert lines[0].startswith("evalkit: dry run: arith_mini × reference: 1 request answered offline")


def test_the_bar_shows_calls_in_flight_their_tokens_and_the_longest_wait():
    """Issue 48 item 4: the console once showed ``0/1`` for 24 minutes while the embedded
    model streamed its answer; the bar now says what is in flight."""
    from evalkit.engine.run import bar_postfix

    assert bar_postfix((2, 340, 95.4), 1, 0) == {"in flight": 2, "streamed": "340 tok", "longest": "95 s", "scoring": 1}
    assert bar_postfix((1, 0, 9.9), 0, 3) == {"in flight": 1, "failed": 3}  # nothing streamed yet, under 10 s
    assert bar_postfix((0, 0, 0.0), 0, 0) == {} and bar_postfix(None, 2, 0) == {"scoring": 2}


def test_a_slow_start_of_the_model_workers_is_said_as_it_passes(caplog, monkeypatch):
    """Issue 48 item 4: "Model workers ready" (311 s, where the console had promised "a few
    seconds") went only to evalkit.log. Two workers, none started by the first look, the
    first by the second (the run starts with the first: issue 46), on a host at load 30 on
    2 cores."""
    import logging
    import os

    from evalkit.engine.executor import RayExecutor

    class FakeRay:
        looks = 0

        def wait(self, refs, num_returns, timeout):
            self.looks += 1
            return (refs[:1], refs[1:]) if self.looks > 1 else ([], refs)

    monkeypatch.setattr(os, "getloadavg", lambda: (30.0, 30.0, 30.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    executor = RayExecutor.__new__(RayExecutor)
    executor._ray, executor._ready, executor.started = FakeRay(), ["w0", "w1"], 0.0
    with caplog.at_level(logging.INFO, logger="evalkit.status"):
        assert executor._await_first(every_s=0.01) == "w0"
    said = [r.getMessage() for r in caplog.records if r.name == "evalkit.status"]
    assert len(said) == 1 and said[0].startswith("0 of 2 workers started after ")
    assert said[0].endswith(" s (the host's load is 30.0 on 2 cores)…")


@pytest.mark.parametrize(("kinds", "load", "said"), [
    ({"timeout": 1}, 25.0, "(timeout: 1; the host's load is 25.0 on 2 cores, the likely cause of the timeouts)"),
    ({"timeout": 1}, 1.0, "(timeout: 1);"),  # a quiet host: no blame
    ({"server_error": 1}, 25.0, "(server_error: 1);"),  # not a timeout: the load is not its cause
])  # fmt: skip
def test_an_incomplete_run_with_timeouts_on_a_loaded_host_says_so(monkeypatch, kinds, load, said):
    """Issue 48 item 4: ``INCOMPLETE: 1 of 1 sample failed (timeout: 1)`` after 1,516 s at load
    20 or more, with no hint that the host's load was the cause."""
    import os

    from evalkit.engine.run import RunResult
    from evalkit.job import outcome_line
    from evalkit.summary import Summary

    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    summary = Summary(status="incomplete", benchmark="acebench", model="smollm2", n_samples=1, n_scored=0, n_failed=1,
                      n_failed_rows=1, n_scored_rows=0, n_requested=1, failed_by_kind=kinds)  # fmt: skip
    line = outcome_line(RunResult(Path("outputs/runs/x"), summary.record(), summary))
    assert line.startswith(f"evalkit: INCOMPLETE: 1 of 1 sample failed {said}")
