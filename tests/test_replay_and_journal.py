"""Replay of completion-mode outputs, model keys a kind does not use, and a journal whose
damage is said (not silently resolved) on resume."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from evalkit.engine.journal import latest_by_sample, read_jsonl
from evalkit.errors import DataError
from tests.conftest import REPO_ROOT, evalkit_cmd


@pytest.fixture(scope="module")
def ke_dir(shared_data_dir: Path) -> Path:
    return shared_data_dir / "ke"


def _ke(ke_dir: Path) -> list[str]:
    return ["benchmark=ke", f"benchmark.pilot_path={ke_dir / 'pilot.jsonl'}", f"benchmark.icl_path={ke_dir / 'icl_examples.jsonl'}"]


@pytest.mark.slow
def test_replay_scores_completion_outputs_as_the_live_completion_path(run_eval, ke_dir, tmp_path):
    """The KE fixtures' completion-mode answers (continuations of the answer prefix),
    replayed with model.api=completion, score exactly their expected P/R/F1; replaying the
    run's own predictions.jsonl (raw_output = continuation) adds no prefix twice."""
    cases = [json.loads(line) for line in (ke_dir / "answers.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    cases = [c for c in cases if c["mode"] == "completion" and c["raw"].strip()]
    rounds: list[dict[str, dict]] = []
    for case in cases:  # one replay file holds one answer per sample
        free = next((r for r in rounds if case["sample_id"] not in r), None)
        if free is None:
            rounds.append(free := {})
        free[case["sample_id"]] = case
    assert len(cases) >= 8 and len(rounds) >= 2
    for k, chosen in enumerate(rounds):
        replay = tmp_path / f"round{k}.jsonl"
        replay.write_text("".join(json.dumps({"sample_id": s, "output": c["raw"]}) + "\n" for s, c in chosen.items()))
        ids = f"run.sample_ids=[{','.join(chosen)}]"
        res = run_eval([*_ke(ke_dir), "model=replay", f"model.path={replay}", "model.api=completion", ids])
        rows = {r["sample_id"]: r for r in read_jsonl(res.run_dir / "predictions.jsonl")}
        for sid, case in chosen.items():
            got = {k: rows[sid]["scores"][k] for k in ("precision", "recall", "f1")}
            expected = {k: case["expect"][k] for k in ("precision", "recall", "f1")}  # given to 6 decimals
            assert got == pytest.approx(expected, abs=1e-6), (sid, case["case"])
            assert rows[sid]["raw_output"] == case["raw"] and rows[sid]["output"].endswith(case["raw"])
        again = run_eval([*_ke(ke_dir), "model=replay", f"model.path={res.run_dir / 'predictions.jsonl'}", "model.api=completion", ids])
        replayed = {r["sample_id"]: (r["output"], r["scores"]) for r in read_jsonl(again.run_dir / "predictions.jsonl")}
        assert replayed == {sid: (r["output"], r["scores"]) for sid, r in rows.items()}


def test_chat_replay_of_a_continuation_scores_it_as_a_chat_answer(run_eval, ke_dir, tmp_path):
    """Without model.api=completion the same text is a chat answer: no prefix is added."""
    replay = tmp_path / "one.jsonl"
    replay.write_text(json.dumps({"sample_id": "code_ke_834b34a9", "output": "000, step_004, step_005"}) + "\n")
    res = run_eval([*_ke(ke_dir), "model=replay", f"model.path={replay}", "run.sample_ids=[code_ke_834b34a9]"])
    (row,) = read_jsonl(res.run_dir / "predictions.jsonl")
    assert "raw_output" not in row and row["output"] == "000, step_004, step_005"
    completion = run_eval([*_ke(ke_dir), "model=replay", f"model.path={replay}", "model.api=completion", "run.sample_ids=[code_ke_834b34a9]"])
    (row,) = read_jsonl(completion.run_dir / "predictions.jsonl")
    assert row["output"] == "The critical steps are:\n- step_000, step_004, step_005" and row["scores"]["f1"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["model=replay", "+model.api_key_env=HOME"], "model.api_key_env: a replay model does not use api_key_env"),
        (["model=replay", "+model.provider_model=openai/x"], "model.provider_model: a replay model does not use provider_model"),
        (["model=reference", "+model.path=x.jsonl"], "model.path: a reference model does not use path"),
        (["model=baseline_echo", "+model.generation.max_tokens=5"], "model.generation: a baseline model generates nothing"),
        (["model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1", "+model.path=x.jsonl"], "model.path: a litellm model does not use path"),
    ],
)
def test_a_model_key_its_kind_does_not_use_is_one_line(overrides, expected, tmp_path, shared_data_dir):
    replay = tmp_path / "r.jsonl"
    replay.write_text('{"sample_id": "x", "output": "y"}\n')
    args = ["benchmark=sobhard", f"benchmark.data_dir={shared_data_dir / 'sobhard'}", f"run.output_root={tmp_path / 'out'}",
            f"model.path={replay}" if "model=replay" in overrides else "run.limit=1", *overrides]  # fmt: skip
    proc = subprocess.run(evalkit_cmd(*args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"evalkit: error: {expected}" + proc.stderr.strip().split(expected, 1)[1]]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_resume_says_which_journal_lines_it_skipped_and_which_duplicates_conflict(tmp_path, acebench_dir):
    """A torn last line, unreadable lines and a duplicate with another score: one warning line
    on the console and in evalkit.log, naming the line numbers, the sample and both scores."""
    run_dir = tmp_path / "run"
    args = [f"benchmark.data_dir={acebench_dir}", "model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=4",
            f"run.output_root={tmp_path / 'out'}", "tracking=none", "run.progress=false"]  # fmt: skip
    subprocess.run(evalkit_cmd(*args, f"run.dir={run_dir}"), cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)
    preds = run_dir / "predictions.jsonl"
    lines = preds.read_text(encoding="utf-8").split("\n")[:-1]
    other = json.loads(lines[2])
    other["scores"] = {"accuracy": 0.0}
    with open(preds, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(other) + "\n")  # line 5: the sample of line 3 again, another score
        fh.write("not json\n{\"half\": \n")  # lines 6 and 7: unreadable
        fh.write(lines[0][:40])  # line 8: a torn last line
    proc = subprocess.run(evalkit_cmd(*args, f"run.resume={run_dir}"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "predictions.jsonl" in ln and "WARNING" in ln]
    assert len(warned) == 1
    line = warned[0]
    assert "unreadable lines 6, 7, 8 skipped" in line
    assert f"sample {other['sample_id']} journaled twice with different scores: line 3 {{'accuracy': 1.0}} kept, line 5 {{'accuracy': 0.0}} ignored" in line
    assert line.split("WARNING ", 1)[1].split(": ", 1)[1] in (run_dir / "evalkit.log").read_text()
    assert latest_by_sample(preds)[other["sample_id"]]["scores"] == {"accuracy": 1.0}  # the first row still wins
    assert json.loads((run_dir / "summary.json").read_text())["metrics"]["accuracy/normal_atom_bool"] == 1.0


def test_a_torn_last_line_alone_is_said_too(run_eval, caplog):
    first = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"])
    preds = first.run_dir / "predictions.jsonl"
    text = preds.read_text(encoding="utf-8")
    preds.write_text(text + text.split("\n")[0][:30], encoding="utf-8")
    again = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3", f"run.resume={first.run_dir}"])
    assert again.summary["status"] == "complete"
    assert "a torn last line 4 skipped" in (first.run_dir / "evalkit.log").read_text()


def test_a_replay_file_with_integer_sample_ids_is_read(tmp_path):
    """SOBHard's ids are integers in its data; run.sample_ids=[1] took them, a replay file refused them."""
    from evalkit.models.offline import load_replay_file

    path = tmp_path / "outputs.jsonl"
    path.write_text(json.dumps({"sample_id": 1, "output": "a"}) + "\n" + json.dumps({"sample_id": "2", "output": "b"}) + "\n")
    assert load_replay_file(path) == {"1": "a", "2": "b"}
    path.write_text(json.dumps({"sample_id": True, "output": "a"}) + "\n")
    with pytest.raises(DataError, match=r":1: expected an object with fields sample_id \(text or integer\)"):
        load_replay_file(path)
