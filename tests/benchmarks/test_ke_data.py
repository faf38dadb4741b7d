"""KE loading (spec §2): graded set, fingerprints, and every hard error naming the sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.benchmarks.ke import KE, KESettings
from evalkit.benchmarks.ke.data import load_ke
from evalkit.errors import DataError
from evalkit.types import sha256_hex

GRADED = [
    "code_ke_834b34a9", "code_ke_2b7e4f10", "code_ke_9d31a6c4", "code_ke_47ac0e2d", "code_ke_e5f8a913",
    "code_ke_0c6b52de", "code_ke_71e0a4b8", "code_ke_b3d9f047", "code_ke_5e2a8c61", "code_ke_d8f1b2a7",
    "code_ke_a0e6c3f5", "code_ke_f2c7d5e9",
]  # fmt: skip
ICL = ["code_ke_1f0c77a2", "code_ke_6a9d3e15", "code_ke_c48b0e91"]


@pytest.fixture(scope="module")
def ke_dir(shared_data_dir: Path) -> Path:
    return shared_data_dir / "ke"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("shots", [0, 3])
def test_graded_set_is_pilot_minus_icl_for_both_shot_counts(ke_dir: Path, shots: int) -> None:
    bench = KE(KESettings(pilot_path=ke_dir / "pilot.jsonl", icl_path=ke_dir / "icl_examples.jsonl", expected_graded=12))
    samples = bench.load()
    assert [s.id for s in samples] == GRADED
    for s in samples:  # every graded item builds for both shot counts
        assert bench.build(s, shots).messages[0]["content"].endswith("- step_")


def test_subset_is_difficulty_and_subsets_filter(ke_dir: Path) -> None:
    bench = KE(KESettings(pilot_path=ke_dir / "pilot.jsonl", icl_path=ke_dir / "icl_examples.jsonl", subsets=["hard"]))
    assert [s.id for s in bench.load()] == ["code_ke_47ac0e2d", "code_ke_71e0a4b8", "code_ke_a0e6c3f5"]


def test_fingerprints(ke_dir: Path) -> None:
    data = load_ke(ke_dir / "pilot.jsonl", ke_dir / "icl_examples.jsonl")
    fp = data.fingerprints()
    assert fp["pilot_sha256"] == sha256_hex((ke_dir / "pilot.jsonl").read_bytes())
    assert fp["icl_sha256"] == sha256_hex((ke_dir / "icl_examples.jsonl").read_bytes())
    assert fp["graded_ids_sha256"] == sha256_hex("\n".join(sorted(GRADED)))
    assert (fp["n_pilot"], fp["n_icl"], fp["n_graded"]) == (15, 3, 12)


def test_relative_paths_resolve_against_data_dir(ke_dir: Path) -> None:
    bench = KE(KESettings(pilot_path="pilot.jsonl", icl_path="icl_examples.jsonl", data_dir=ke_dir))
    assert len(bench.load()) == 12


def test_missing_icl_file_is_an_error(ke_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="icl file .* does not exist"):
        load_ke(ke_dir / "pilot.jsonl", tmp_path / "nope.jsonl")


def test_icl_id_absent_from_pilot_names_the_sample(ke_dir: Path, tmp_path: Path) -> None:
    pilot = [r for r in _rows(ke_dir / "pilot.jsonl") if r["sample_id"] != "code_ke_6a9d3e15"]
    with pytest.raises(DataError, match="ICL sample code_ke_6a9d3e15 is not in the pilot"):
        load_ke(_write(tmp_path / "pilot.jsonl", pilot), ke_dir / "icl_examples.jsonl")


@pytest.mark.parametrize("which", ["pilot", "icl"])
def test_duplicate_sample_id_names_the_sample(ke_dir: Path, tmp_path: Path, which: str) -> None:
    pilot, icl = _rows(ke_dir / "pilot.jsonl"), _rows(ke_dir / "icl_examples.jsonl")
    if which == "pilot":
        pilot.append(dict(pilot[4]))
        dup = pilot[4]["sample_id"]
    else:
        icl[2] = dict(icl[0])
        dup = icl[0]["sample_id"]
    with pytest.raises(DataError, match=f"sample {dup}: duplicate sample_id"):
        load_ke(_write(tmp_path / "p.jsonl", pilot), _write(tmp_path / "i.jsonl", icl))


def _mutated_pilot(ke_dir: Path, tmp_path: Path, sid: str, mutate) -> Path:
    rows = _rows(ke_dir / "pilot.jsonl")
    for r in rows:
        if r["sample_id"] == sid:
            mutate(r)
    return _write(tmp_path / "pilot.jsonl", rows)


def _relabel_noise_to_gold_write(r: dict) -> None:
    """Label a file_write_confirmation step gold (and keep gold ids / stats consistent)."""
    step = next(s for s in r["trajectory_steps"] if s["obs_type"] == "file_write_confirmation")
    step["label"] = "gold"
    r["gold_step_ids"] = [s["step_id"] for s in r["trajectory_steps"] if s["label"] == "gold"]
    n = len(r["trajectory_steps"])
    r["label_stats"].update(n_gold=len(r["gold_step_ids"]), n_noise=r["label_stats"]["n_noise"] - 1)
    r["label_stats"]["gold_ratio"] = round(len(r["gold_step_ids"]) / n, 2)


def _one_gold(r: dict) -> None:
    keep = r["gold_step_ids"][0]
    for s in r["trajectory_steps"]:
        if s["label"] == "gold" and s["step_id"] != keep:
            s["label"] = "noise"
    r["gold_step_ids"] = [keep]
    n = len(r["trajectory_steps"])
    r["label_stats"] = {"n_gold": 1, "n_noise": n - 1 - r["label_stats"]["n_uncertain"],
                        "n_uncertain": r["label_stats"]["n_uncertain"], "gold_ratio": round(1 / n, 2)}  # fmt: skip


@pytest.mark.parametrize(
    "mutate, message",
    [
        (_relabel_noise_to_gold_write, "packing: step_\\d+ is a file_write_confirmation labelled gold"),
        (_one_gold, "packing: n_gold=1 < 2"),
        (lambda r: r.update(gold_step_ids=r["gold_step_ids"][:-1]), "gold_step_ids .* != the steps labelled gold"),
        (lambda r: r.update(user_task=""), "user_task is empty"),
        (lambda r: r.update(difficulty="trivial"), "difficulty"),
        (lambda r: r["trajectory_steps"][1].update(step_id="step_000"), "duplicate step_id step_000"),
        (lambda r: r["trajectory_steps"][1].update(step_id="s1"), "not 'step_' \\+ digits"),
        (lambda r: r["label_stats"].update(gold_ratio=0.9), "gold_ratio"),
        (lambda r: r["label_stats"].update(n_noise=99), "label_stats .* do not match"),
        (lambda r: r.pop("trajectory_steps"), "trajectory_steps"),
        (lambda r: r["trajectory_steps"][0].update(label="maybe"), "label"),
    ],
    ids=["write_gold", "min_gold", "gold_ids", "empty_task", "difficulty", "dup_step", "bad_step_id",
         "gold_ratio", "label_stats", "no_steps", "bad_label"],  # fmt: skip
)
def test_schema_and_packing_violations_name_the_sample(ke_dir: Path, tmp_path: Path, mutate, message: str) -> None:
    pilot = _mutated_pilot(ke_dir, tmp_path, "code_ke_2b7e4f10", mutate)
    with pytest.raises(DataError, match=f"pilot.jsonl:\\d+: sample code_ke_2b7e4f10: .*{message}"):
        load_ke(pilot, ke_dir / "icl_examples.jsonl")


def test_min_noise_packing(ke_dir: Path, tmp_path: Path) -> None:
    def few_noise(r: dict) -> None:
        noise = [s for s in r["trajectory_steps"] if s["label"] == "noise"]
        for s in noise[2:]:
            s["label"] = "uncertain"
        r["label_stats"].update(n_noise=2, n_uncertain=r["label_stats"]["n_uncertain"] + len(noise) - 2)

    pilot = _mutated_pilot(ke_dir, tmp_path, "code_ke_0c6b52de", few_noise)
    with pytest.raises(DataError, match="sample code_ke_0c6b52de: packing: n_noise=2 < 3"):
        load_ke(pilot, ke_dir / "icl_examples.jsonl")


def test_expected_graded_mismatch(ke_dir: Path) -> None:
    with pytest.raises(DataError, match="170 expected.* gives 12 graded"):
        load_ke(ke_dir / "pilot.jsonl", ke_dir / "icl_examples.jsonl", expected_graded=170)


def test_extra_fields_and_long_text_are_kept(ke_dir: Path, tmp_path: Path) -> None:
    pilot = _mutated_pilot(ke_dir, tmp_path, "code_ke_2b7e4f10", lambda r: r.update(model_confidence=5))
    data = load_ke(pilot, ke_dir / "icl_examples.jsonl")
    sample = next(s for s in data.graded if s["sample_id"] == "code_ke_2b7e4f10")
    assert sample["model_confidence"] == 5 and data.pilot.extra_fields == ["model_confidence"]
    long_obs = next(s for s in data.graded if s["sample_id"] == "code_ke_47ac0e2d")["trajectory_steps"][0]["observation"]
    assert len(long_obs) > 2000  # the loader never truncates


def test_not_json_line(ke_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "pilot.jsonl"
    bad.write_text((ke_dir / "pilot.jsonl").read_text(encoding="utf-8") + "{oops\n", encoding="utf-8")
    with pytest.raises(DataError, match="pilot.jsonl:16: not JSON"):
        load_ke(bad, ke_dir / "icl_examples.jsonl")


def test_gold_ratio_at_the_tolerance_edge_is_accepted(ke_dir: Path, tmp_path: Path) -> None:
    """3/8 = 0.375 stored as 0.38 or 0.37 is 0.005 away (0.0050000000000000044 in floats): accepted."""
    for stored in (0.38, 0.37):

        def eight_steps(r: dict) -> None:
            steps = r["trajectory_steps"]
            assert len(steps) == 7 and len(r["gold_step_ids"]) == 2
            steps.append({"step_id": "step_007", "thought": "", "obs_type": "file_read", "observation": "x", "label": "gold"})
            r["gold_step_ids"] = [s["step_id"] for s in steps if s["label"] == "gold"]
            r["label_stats"] = {"n_gold": 3, "n_noise": 5, "n_uncertain": 0, "gold_ratio": stored}

        pilot = _mutated_pilot(ke_dir, tmp_path, "code_ke_2b7e4f10", eight_steps)
        data = load_ke(pilot, ke_dir / "icl_examples.jsonl")
        assert next(s for s in data.graded if s["sample_id"] == "code_ke_2b7e4f10")["label_stats"]["gold_ratio"] == stored


def test_icl_copy_that_differs_from_the_pilot_warns_and_renders_from_icl(ke_dir: Path, tmp_path: Path, caplog) -> None:
    icl = _rows(ke_dir / "icl_examples.jsonl")
    icl[0]["user_task"] = "ICL-ONLY TASK TEXT"
    bench = KE(KESettings(pilot_path=ke_dir / "pilot.jsonl", icl_path=_write(tmp_path / "icl.jsonl", icl)))
    with caplog.at_level("WARNING", logger="evalkit"):
        samples = bench.load()
    assert "code_ke_1f0c77a2 differs from its pilot copy" in caplog.text
    assert len(samples) == 12
    assert "Task: ICL-ONLY TASK TEXT\n\nTrajectory Steps:" in bench.build(samples[0], 3).messages[0]["content"]
