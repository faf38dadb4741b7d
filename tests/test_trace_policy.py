"""``tracking.traces`` = ``all`` | ``sample`` | ``none`` (issue 46 item 2, "tracking that
scales"): the default ``sample`` traces every failure, every flip against ``run.baseline`` and a
seeded ``tracking.traces_per_category`` per subset; the run's ``evalkit.traces`` tag says what
was traced, and logging the run again adds nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from evalkit.config import traces_policy
from evalkit.errors import ConfigError
from evalkit.tracking.samples import Outcome
from evalkit.tracking.traces import policy_sample
from tests.conftest import base_overrides


def _outs(subsets: dict[str, int], failed: tuple[str, ...] = ()) -> list[Outcome]:
    """Outcomes ``<subset>-<i>``, ``n`` per subset; the keys in ``failed`` failed."""
    return [Outcome(key, subset, failure={"error_kind": "timeout"}) if key in failed else Outcome(key, subset, row={"scores": {"a": 1}})
            for subset, n in subsets.items() for key in (f"{subset}-{i}" for i in range(n))]  # fmt: skip


def _seeded_first(keys: list[str], seed: int, k: int) -> set[str]:
    """The first ``k`` of ``keys`` by SHA-256 of ``f"{seed}\\0{key}"`` (the documented order)."""
    return set(sorted(keys, key=lambda key: hashlib.sha256(f"{seed}\0{key}".encode()).digest())[:k])


def test_sample_is_every_failure_every_flip_and_k_seeded_per_subset():
    outs = _outs({"big": 40, "small": 3}, failed=("big-7", "big-30"))
    chosen, counts = policy_sample(outs, "sample", 5, seed=3, flipped={"big-11", "small-1"})
    keys = [o.key for o in chosen]
    big = [o.key for o in outs if o.subset == "big"]
    expected = {"big-7", "big-30", "big-11"} | _seeded_first(big, 3, 5) | {"small-0", "small-1", "small-2"}
    assert set(keys) == expected and keys == [o.key for o in outs if o.key in expected]  # the run's order
    assert counts == {"failures": 2, "flips": 2, "per_category": 5, "categories": 2}
    again, _ = policy_sample(list(reversed(outs)), "sample", 5, seed=3, flipped={"big-11", "small-1"})
    assert {o.key for o in again} == set(keys)  # a sample's place does not depend on the others'
    assert {o.key for o in policy_sample(outs, "sample", 5, seed=4, flipped=set())[0]} != set(keys)  # the seed chooses
    assert {o.key for o in policy_sample(outs, "sample", 0, seed=3)[0]} == {"big-7", "big-30"}  # k = 0: the failures only


def test_all_and_none():
    outs = _outs({"x": 30}, failed=("x-2",))
    assert policy_sample(outs, "all", 5, seed=0)[0] == outs
    assert policy_sample(outs, "none", 5, seed=0)[0] == []


def test_policy_names_and_the_booleans_of_older_configs():
    assert [traces_policy(v) for v in ("all", "sample", "none", True, False)] == ["all", "sample", "none", "all", "none"]
    with pytest.raises(ValueError, match="tracking.traces: must be one of all, sample, none"):
        traces_policy("some")


def test_a_bad_policy_is_one_config_line(acebench_dir):
    from evalkit.compose import to_plain
    from evalkit.benchmarks import get_benchmark_class
    from evalkit.compose import compose
    from evalkit.config import validate

    def cfg(*overrides: str):
        return validate(to_plain(compose([f"benchmark.data_dir={acebench_dir}", "tracking=mlflow", *overrides])), get_benchmark_class)

    assert cfg().tracking.traces == "sample" and cfg().tracking.traces_per_category == 25
    assert cfg("tracking.traces=false").tracking.traces == "none"
    with pytest.raises(ConfigError) as info:
        cfg("tracking.traces=maybe")
    assert str(info.value) == "tracking.traces: must be one of all, sample, none (got 'maybe')"
    with pytest.raises(ConfigError, match="tracking.traces_per_category"):
        cfg("tracking.traces_per_category=-1")


def test_the_tag_says_what_was_traced(tmp_path: Path):
    from evalkit.tracking.mlflow_tracking import MlflowObserver

    def note(policy: str, n: int, m: int, counts: dict, max_traces: int | None = None) -> str:
        obs = MlflowObserver(f"sqlite:///{tmp_path / 'x.db'}", "e", "", traces=policy, max_traces=max_traces, seed=7)
        return obs.traces_note(n, m, counts)

    counts = {"failures": 12, "flips": 0, "per_category": 25, "categories": 11, "chosen": 287, "baseline": "read"}
    assert note("sample", 287, 100_000, counts) == ("sample: 287 of 100,000 (all 12 failures, 0 flips against run.baseline, "
                                                    "25 per category in 11, run.seed=7)")  # fmt: skip
    assert "no run.baseline for flips" in note("sample", 287, 100_000, {**counts, "baseline": None})
    assert "flips unknown: run.baseline unreadable" in note("sample", 287, 100_000, {**counts, "baseline": "unreadable"})
    assert note("sample", 10, 10, counts) == "all 10 samples"  # a small run's sample is all of it
    assert note("none", 0, 10, counts) == "none (tracking.traces=none)"
    assert note("sample", 100, 100_000, counts, max_traces=100).startswith(
        "100 of 100000 samples, sampled (tracking.max_traces=100, run.seed=7; failed samples first, of the 287 tracking.traces=sample chose)")


def _run(root: Path, acebench: Path, *overrides: str):
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    _, cfg = resolve(compose(base_overrides(root, acebench) + list(overrides)))
    return run_validated(cfg)


@pytest.mark.slow  # two whole runs into an MLflow store, and one logging again
def test_a_run_against_a_baseline_traces_its_failures_flips_and_sample_once(tmp_path: Path, acebench_dir: Path):
    from evalkit.track import main
    from evalkit.tracking.mlflow_tracking import MlflowObserver, client, trace_client
    from evalkit.engine.journal import read_jsonl

    root = tmp_path / "out"
    uri = f"sqlite:///{root.resolve() / 'mlflow.db'}"
    args = ("benchmark.subsets=[normal_atom_bool]", "run.limit=12", "tracking=mlflow", "tracking.traces_per_category=2")
    reference = _run(root, acebench_dir, "model=reference", *args)
    rows = list(read_jsonl(reference.run_dir / "predictions.jsonl"))
    ids = [r["sample_id"] for r in rows]
    replay_file = tmp_path / "replay.jsonl"  # 3 answers wrong (flips), the last sample unanswered (a failure)
    replay_file.write_text("".join(json.dumps({"sample_id": r["sample_id"], "output": "[]" if i < 3 else r["output"]}) + "\n"
                                   for i, r in enumerate(rows[:-1])), encoding="utf-8")  # fmt: skip
    replay = _run(root, acebench_dir, "model=replay", f"model.path={replay_file}", f"run.baseline={reference.run_dir}", *args)
    assert replay.summary["failed_ids"] == [ids[-1]]

    def traced(run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
        run = client(uri).get_run(json.loads((run_dir / "tracking.json").read_text())["mlflow_run_id"])
        return MlflowObserver.logged_traces(trace_client(uri), run.info.experiment_id, run.info.run_id, uri), run.data.tags

    ref_traces, ref_tags = traced(reference.run_dir)  # no baseline, no failure: the seeded 2 of the one subset
    assert set(ref_traces) == _seeded_first(ids, 0, 2)
    assert ref_tags["evalkit.traces"] == "sample: 2 of 12 (all 0 failures, no run.baseline for flips, 2 per category in 1, run.seed=0)"
    expected = {ids[-1], *ids[:3]} | _seeded_first(ids, 0, 2)
    traces, tags = traced(replay.run_dir)
    assert set(traces) == expected
    assert tags["evalkit.traces"] == (f"sample: {len(expected)} of 12 (all 1 failures, 3 flips against run.baseline, "
                                      "2 per category in 1, run.seed=0)")  # fmt: skip
    assert f"Traces: {tags['evalkit.traces']}." in tags["mlflow.note.content"]
    import pyarrow.parquet as pq  # the full per-sample table: one artifact, every sample, the traced ones' trace ids

    run_id = json.loads((replay.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    table = pq.read_table(root / "mlartifacts" / run_id / "artifacts" / "tables" / "samples.parquet").to_pylist()
    assert [r["sample_id"] for r in table] == ids and [r["accuracy"] for r in table] == [0.0] * 3 + [1.0] * 8 + [None]
    assert {r["sample_id"]: r["trace_id"] for r in table if r["trace_id"]} == traces
    assert main(["--tracking-uri", uri, str(replay.run_dir)]) == 0  # logged again: the same traces, none added
    assert traced(replay.run_dir)[0] == traces
    search = trace_client(uri).search_traces(locations=[client(uri).get_experiment_by_name("evalkit").experiment_id], max_results=500)
    assert len(search) == len(ref_traces) + len(traces)  # no duplicate anywhere in the store
