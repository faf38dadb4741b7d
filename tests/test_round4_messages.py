"""Issue 35 item 12: messages that name the real cause."""

from __future__ import annotations

import pytest

from evalkit import rescore as rescore_mod

ACE = ["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"]


@pytest.mark.slow  # a run
def test_rescore_of_an_interrupted_run_says_it_has_no_summary(run_eval, capsys):
    """An interrupted run (no summary.json) printed DIFFERS on every metric and exited 1.
    Now one line says it has no summary.json; the verdicts are still compared (none changed: 0)."""
    res = run_eval(ACE)
    (res.run_dir / "summary.json").unlink()
    assert rescore_mod.main([str(res.run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "DIFFERS" not in out and "accuracy" in out
    said = [ln for ln in err.splitlines() if "no summary.json" in ln]
    assert len(said) == 1 and str(res.run_dir) in said[0]


def _error(*overrides: str) -> str:
    from evalkit.compose import compose, resolve
    from evalkit.errors import ConfigError
    from tests.conftest import SHARED_DIR

    with pytest.raises(ConfigError) as info:
        resolve(compose([f"benchmark.data_dir={SHARED_DIR / 'data' / 'acebench'}", *overrides]))
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("base", ["http://HOST:PORT/v1", "HOST:8000/v1", "http://:8000/v1", "http://127.0.0.1:0/v1"])
def test_the_readme_s_host_port_placeholder_is_refused_at_validation(base):
    """``backend.api_base=http://HOST:PORT/v1`` (the README's placeholder) was accepted; the
    run started Ray and failed 76 s in. Now validation refuses it in one line."""
    line = _error("model=openai_compatible", "model.provider_model=openai/served", f"backend.api_base={base}")
    assert line.startswith("backend.api_base:") and "not a server address" in line and "HOST:PORT" in line


def test_an_output_root_below_a_file_is_not_blamed_on_the_mlflow_store(tmp_path):
    """``run.output_root`` below a file (or in /proc: root passes ``os.access``) failed as
    "cannot open the MLflow store". Now validation names run.output_root."""
    (tmp_path / "afile").write_text("x")
    line = _error("model=reference", f"run.output_root={tmp_path / 'afile' / 'out'}")
    assert line.startswith("run.output_root:") and "is not a folder" in line and "MLflow" not in line
    line = _error("model=reference", "run.output_root=/proc/evalkit-out")
    assert line.startswith("run.output_root:") and "not writable" in line
