"""Configuration: composition, per-benchmark model overrides, and one-line errors (exit 2)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from evalkit.benchmarks import get_benchmark_class
from evalkit.compose import compose, to_plain
from evalkit.config import validate
from evalkit.errors import ConfigError
from tests.conftest import REPO_ROOT, evalkit_cmd


def _validate(*overrides: str):
    return validate(to_plain(compose(list(overrides))), get_benchmark_class)


def test_default_config_is_acebench_on_the_embedded_model(acebench_dir):
    cfg = _validate(f"benchmark.data_dir={acebench_dir}")
    assert cfg.benchmark.name == "acebench"
    assert cfg.model.name == "smollm2" and cfg.backend.kind == "llamacpp"
    assert cfg.shots.n == 0 and cfg.runner.kind == "local" and cfg.tracking.kind == "mlflow"


def test_model_picks_its_backend_and_cli_wins(acebench_dir, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test-not-real")
    assert _validate(f"benchmark.data_dir={acebench_dir}", "model=dsv4").backend.kind == "api"
    assert _validate(f"benchmark.data_dir={acebench_dir}", "model=reference").backend.kind == "offline"
    cfg = _validate(f"benchmark.data_dir={acebench_dir}", "model=smollm2", "backend=api", "backend.api_base=http://127.0.0.1:1/v1")
    assert cfg.backend.kind == "api"


def test_dataset_args_win_over_benchmark_defaults(acebench_dir):
    cfg = _validate(f"benchmark.data_dir={acebench_dir}")
    # conf/model/smollm2.yaml: generation.max_tokens 512, dataset_args.acebench.generation.max_tokens 256;
    # conf/benchmark/acebench.yaml: max_tokens 1200, temperature 0.0
    assert cfg.generation_params() == {"temperature": 0.0, "max_tokens": 256}
    cfg = _validate(f"benchmark.data_dir={acebench_dir}", "+model.dataset_args.acebench.language=zh")
    assert cfg.benchmark.language == "zh"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["model.generation.temperature=hot"], "model.generation.temperature: Input should be a valid number"),
        (["+model.colour=red"], "model.colour: unknown key"),
        (["run.limit=0"], "run.limit: Input should be greater than or equal to 1"),
        (["benchmark.language=fr"], "benchmark.language:"),
        (["benchmark.subsets=[normal_atom_bool,bogus]"], "benchmark.subsets:"),
        (["benchmark.data_dir=/nonexistent/acebench"], "benchmark.data_dir:"),
        (["model=dsv4"], "model.api_key_env: environment variable DEEPSEEK_API_KEY is not set"),
        (["model=replay"], "model.path: required value missing"),
        (["model=replay", "model.path=/nonexistent.jsonl"], "model.path: replay file /nonexistent.jsonl does not exist"),
        (["shots=3"], "shots: acebench supports shots in [0]"),
        (["model=reference", "backend=api"], "backend: model=reference runs offline"),
        (["runner=cluster"], "runner.address: required value missing"),
        (["run.sample_ids=[true]"], "run.sample_ids.0: Input should be a valid string (got True)"),  # ints are ids, booleans not
    ],
)
def test_bad_config_is_one_clear_error(acebench_dir, monkeypatch, overrides, expected):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(ConfigError) as info:
        _validate(f"benchmark.data_dir={acebench_dir}", *overrides)
    line = str(info.value)
    assert expected in line
    assert "\n" not in line


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, expected",
    [
        (["model=nonexistent"], "model=nonexistent: unknown model; available:"),
        (["benchmark=nonexistent"], "benchmark=nonexistent: unknown benchmark"),
        (["colour=red"], "colour: unknown key"),
        (["run.limit=["], "override 'run.limit=[' cannot be parsed"),
        (["run.limit=abc"], "run.limit: Input should be a valid integer"),
        (["model=dsv4"], "DEEPSEEK_API_KEY is not set"),
        (["model=reference", "model.name=../../escape"], "model.name: '../../escape' is not a plain name"),
        (["suite=smoke"], "suite=smoke: suites are not a config group; run one with: bash bash/run_suite.sh smoke --model M"),
        (["+suite=all"], "+suite=all: suites are not a config group; run one with: bash bash/run_suite.sh all --model M"),
        (["model=openai_compatible", "backend.api_base=http://user:PW@127.0.0.1:9/v1"],
         "backend.api_base: credentials go in the model's api_key_env, not in backend.api_base"),  # fmt: skip
    ],
)
def test_cli_errors_exit_2_with_one_line_and_write_nothing(tmp_path: Path, args, expected):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if os.environ.get("PYTHONPATH"):  # a checkout put first on the path (a worktree) is the code under test
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    proc = subprocess.run(
        evalkit_cmd(*args, f"run.output_root={tmp_path / 'out'}"),
        capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("evalkit: error: ") and expected in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_explicit_existing_run_dir_is_refused(acebench_dir, tmp_path):
    existing = tmp_path / "taken"
    existing.mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        _validate(f"benchmark.data_dir={acebench_dir}", "model=reference", f"run.dir={existing}")


def test_secret_override_is_replaced_by_an_env_interpolation():
    from evalkit.cli import hide_secret_overrides

    env: dict[str, str] = {}
    out = hide_secret_overrides(["backend.api_key=sk-abcdef123456", "run.limit=3", "model.api_key_env=X"], env)
    assert out == ["backend.api_key=${oc.env:EVALKIT_SECRET_0}", "run.limit=3", "model.api_key_env=X"]
    assert env == {"EVALKIT_SECRET_0": "sk-abcdef123456"}


def test_user_simulator_api_base_with_credentials_is_one_line(acebench_dir):
    """The user simulator's backend follows the same rule, named by its own key."""
    from evalkit.cli import resolve

    with pytest.raises(ConfigError) as info:
        resolve(compose([
            f"benchmark.data_dir={acebench_dir}", "model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1",
            "benchmark.user_model=openai_compatible", "benchmark.user_overrides=['backend.api_base=http://u:PW-42@127.0.0.1:9/v1']",
        ]))  # fmt: skip
    assert str(info.value) == "user.backend.api_base: credentials go in the model's api_key_env, not in backend.api_base"
