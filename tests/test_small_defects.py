"""Smaller defects of issue 26 item 11, each once wrong as its test says."""

from __future__ import annotations

import json
import os

import pytest

from evalkit.errors import ConfigError, DataError


def test_a_replay_file_with_integer_sample_ids_is_read(tmp_path):
    """SOBHard's ids are integers in its data; run.sample_ids=[1] took them, a replay file refused them."""
    from evalkit.models.offline import load_replay_file

    path = tmp_path / "outputs.jsonl"
    path.write_text(json.dumps({"sample_id": 1, "output": "a"}) + "\n" + json.dumps({"sample_id": "2", "output": "b"}) + "\n")
    assert load_replay_file(path) == {"1": "a", "2": "b"}
    path.write_text(json.dumps({"sample_id": True, "output": "a"}) + "\n")
    with pytest.raises(DataError, match=r":1: expected an object with fields sample_id \(text or integer\)"):
        load_replay_file(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: the folder cannot be made unwritable")
def test_an_unwritable_output_folder_is_named_as_such(acebench_dir, tmp_path):
    """It was blamed on "cannot open the MLflow store"."""
    from evalkit.compose import compose, resolve

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(ConfigError, match=r"^run.output_root: .*/locked/out cannot be written \(its parent .*/locked is not writable\)"):
            resolve(compose([f"benchmark.data_dir={acebench_dir}", "model=reference", f"run.output_root={locked / 'out'}"]))
    finally:
        locked.chmod(0o755)
