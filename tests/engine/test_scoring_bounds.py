"""Scoring is bounded per sample in time and memory (engine/scoring.py): a hostile answer is
recorded with status ``scorer_limit`` and scored 0, the run goes on, its journal replays."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from evalkit.engine.journal import read_jsonl
from evalkit.benchmarks.bounds import DETAIL_MAX_CHARS
from evalkit.engine.scoring import Scorer
from evalkit.types import Trajectory
from tests.support.host import time_limit

SCHEMA_GEN_ID = "16"  # the SOBHard question whose answer is used as a JSON Schema


@pytest.fixture(scope="module")
def sob(shared_data_dir: Path):
    bench = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    return bench, {s.id: s for s in bench.load()}


def _backtracking_schema(bench: SOBHard, sample) -> str:
    """The gold schema with a pattern no linear-time engine takes (a backreference) and
    that backtracks exponentially on every ``category`` string of the document."""
    import yaml

    gold = yaml.safe_load(bench.reference_output(sample).split("\n", 1)[1].rsplit("```", 1)[0])
    gold["items"]["properties"]["category"]["pattern"] = r"(.|.|.|.)*\1#"
    return "```yaml\n" + json.dumps(gold) + "\n```"


def test_a_scorer_past_its_time_is_stopped_and_the_next_sample_is_scored(sob):
    bench, samples = sob
    limit = time_limit(1.0)  # the hostile answer runs for hours: only the harmless one needs the margin
    with Scorer(bench, timeout_s=limit) as scorer:
        limited = scorer.score_sync(samples[SCHEMA_GEN_ID], Trajectory(final_output=_backtracking_schema(bench, samples[SCHEMA_GEN_ID])))
        after = scorer.score_sync(samples["1"], Trajectory(final_output=bench.reference_output(samples["1"])))
    assert limited.status == "scorer_limit" and f"score_timeout_s={limit:g} s" in limited.detail
    assert limited.scores == {k: 0.0 for k in bench.score(samples[SCHEMA_GEN_ID], "").scores}
    assert after.status == "ok" and after.scores["sample_pass"] == 1.0  # the killed worker was replaced


@pytest.mark.slow
def test_a_scorer_over_its_memory_is_stopped(acebench_dir):
    """A 250 KB ACEBench answer (within the decoder's own bounds) takes a few hundred MB to
    parse: under a 64 MiB bound it is stopped and recorded as scorer_limit, under the
    default bound it is scored (a wrong answer)."""
    from evalkit.benchmarks.acebench import AceBench, AceBenchSettings

    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, subsets=["normal_atom_list"]))
    sample = bench.load()[0]
    name = bench.reference_output(sample)[1:].split("(", 1)[0]
    big = f"[{name}(x=[" + ",".join(["[0,0,0,0,0,0,0,0]"] * 14_000) + "])]"
    with Scorer(bench, memory_mb=64) as scorer:
        limited = scorer.score_sync(sample, Trajectory(final_output=big))
    assert limited.status == "scorer_limit" and "score_memory_mb" in limited.detail, limited.detail
    assert limited.scores == {"accuracy": 0.0}
    with Scorer(bench) as scorer:
        scored = scorer.score_sync(sample, Trajectory(final_output=big))
    assert scored.status == "ok" and scored.scores == {"accuracy": 0.0} and "missing required parameter" in scored.detail


def test_verdicts_come_back_bounded(acebench_dir):
    """A short answer whose decoded value is 500 kB (a repetition within the decoder's
    arithmetic budget) comes back with ``parsed`` replaced by its size and digest."""
    from evalkit.benchmarks.acebench import AceBench, AceBenchSettings

    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, subsets=["normal_atom_list"]))
    sample = bench.load()[0]
    name = bench.reference_output(sample)[1:].split("(", 1)[0]
    with Scorer(bench) as scorer:
        scored = scorer.score_sync(sample, Trajectory(final_output=f"[{name}(x='y'*500000)]"))
    assert scored.scores == {"accuracy": 0.0}
    assert scored.parsed["truncated"] is True and scored.parsed["bytes"] > 500_000 and len(scored.parsed["sha256"]) == 64
    assert scored.detail is None or len(scored.detail) <= DETAIL_MAX_CHARS


def _limit_memory() -> None:
    cap = 4 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


@pytest.mark.slow
def test_a_hostile_replay_run_completes_under_a_4gb_cap(sob, shared_data_dir, tmp_path):
    """What a tester does: crafted outputs through model=replay, the whole run under a 4 GB
    address-space cap and a timeout; the run completes with summary.json, the hostile
    samples are 0 or scorer_limit, a 3 MB answer is journaled through a side file, and the
    journal replays to the same verdicts."""
    bench, samples = sob
    outputs = {
        SCHEMA_GEN_ID: _backtracking_schema(bench, samples[SCHEMA_GEN_ID]),
        "1": bench.reference_output(samples["1"]),
        "2": "Here is the answer: " + "y" * 3_000_000,
        "15": "```yaml\n&a [*a]\n```",
    }
    replay = tmp_path / "hostile.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": k, "output": v}) + "\n" for k, v in outputs.items()))
    score_s = time_limit(3)  # the reference answer's scoring needs the margin; the hostile ones run for hours
    args = ["benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}", f"benchmark.score_timeout_s={score_s:g}",
            f"run.sample_ids=[{','.join(repr(k) for k in outputs)}]", f"run.output_root={tmp_path / 'out'}", "tracking=none", "run.progress=false"]  # fmt: skip
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "evalkit", "model=replay", f"model.path={replay}", f"run.dir={run_dir}", *args],
        capture_output=True, text=True, timeout=time_limit(180), preexec_fn=_limit_memory,  # a hang guard
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["n_scored"] == 4
    rows = {r["sample_id"]: r for r in read_jsonl(run_dir / "predictions.jsonl")}
    assert rows["1"]["scores"]["sample_pass"] == 1.0
    assert rows[SCHEMA_GEN_ID]["status"] == "scorer_limit" and SCHEMA_GEN_ID in summary["scorer_limit_ids"]
    assert set(summary["scorer_limit_ids"]) <= {SCHEMA_GEN_ID, "15"}  # the self-referencing alias: bounded either way
    for sid in (SCHEMA_GEN_ID, "2", "15"):
        assert rows[sid]["scores"]["sample_pass"] == 0.0
    assert rows["2"]["large"]["fields"] == ["output"] and (run_dir / rows["2"]["large"]["file"]).is_file()
    assert max(len(line.encode()) for line in (run_dir / "predictions.jsonl").read_text().split("\n")) <= 1024 * 1024
    assert f"`{SCHEMA_GEN_ID}`" in (run_dir / "report.md").read_text()
    again = subprocess.run(
        [sys.executable, "-m", "evalkit", "model=replay", f"model.path={run_dir / 'predictions.jsonl'}", f"run.dir={tmp_path / 'again'}", *args],
        capture_output=True, text=True, timeout=time_limit(180), preexec_fn=_limit_memory,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    replayed = {r["sample_id"]: r for r in read_jsonl(tmp_path / "again" / "predictions.jsonl")}
    assert {k: (r["status"], r["scores"]) for k, r in replayed.items()} == {k: (r["status"], r["scores"]) for k, r in rows.items()}


def test_answers_scored_together_keep_one_samples_bound_each(sob):
    """Answers asked for at once go to a worker in one task; with a hostile one among them the
    task runs past one sample's limit, and each answer is scored again alone: the hostile one
    alone is a ``scorer_limit``, every other verdict is what it is when scored alone."""
    import asyncio

    bench, samples = sob
    ids = ["1", "2", "3", SCHEMA_GEN_ID, "5"]
    outputs = {i: bench.reference_output(samples[i]) for i in ids}
    outputs[SCHEMA_GEN_ID] = _backtracking_schema(bench, samples[SCHEMA_GEN_ID])

    async def together(scorer: Scorer) -> list:
        return await asyncio.gather(*(scorer.score(samples[i], Trajectory(final_output=outputs[i])) for i in ids))

    # issue 35 item 13: a fixed 1 s limit failed at load 17-30 (harmless answers past it);
    # the limit now grows with the host's slowness, the hostile answer runs past any of them
    limit = time_limit(1.0)
    with Scorer(bench, timeout_s=limit) as scorer:
        verdicts = dict(zip(ids, asyncio.run(together(scorer))))
        alone = {i: scorer.score_sync(samples[i], Trajectory(final_output=outputs[i])) for i in ids if i != SCHEMA_GEN_ID}
        pool_tasks = scorer.spent_s
    assert verdicts[SCHEMA_GEN_ID].status == "scorer_limit" and f"score_timeout_s={limit:g} s" in verdicts[SCHEMA_GEN_ID].detail
    assert all(verdicts[i] == alone[i] and verdicts[i].status == "ok" for i in alone)
    assert pool_tasks >= 2 * limit  # the task that ran past the limit, and the hostile answer again alone


def test_harmless_answers_asked_for_at_once_go_in_one_task(sob):
    import asyncio

    bench, samples = sob
    ids = ["1", "2", "3", "5"]
    with Scorer(bench, timeout_s=30.0) as scorer:
        sent = []
        schedule = scorer.pool.schedule
        scorer.pool.schedule = lambda fn, **kw: sent.append(fn.__name__) or schedule(fn, **kw)  # counts the tasks
        verdicts = asyncio.run(_all(scorer, [(samples[i], Trajectory(final_output=bench.reference_output(samples[i]))) for i in ids]))
    assert sent == ["_score_all_in_worker"] and all(v.status == "ok" and v.scores["sample_pass"] == 1.0 for v in verdicts)


async def _all(scorer: Scorer, pairs: list) -> list:
    import asyncio

    return await asyncio.gather(*(scorer.score(s, t) for s, t in pairs))
