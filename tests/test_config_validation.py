"""Config validation: what a new user following the guide writes (issue 26 items 1, 3, 4, 6,
7, 11; issue 35 item 12) is one line naming the key before anything starts, or runs as
written: user simulators, server addresses, API keys, provider parameters, the output root."""

from __future__ import annotations

import os

import pytest

from evalkit.compose import compose, resolve
from evalkit.errors import ConfigError
from tests.conftest import SHARED_DIR

ACE = f"benchmark.data_dir={SHARED_DIR / 'data' / 'acebench'}"
SERVER = "backend.api_base=http://127.0.0.1:9/v1"


def _cfg(*overrides: str):
    return resolve(compose([ACE, *overrides]))[1]


def _error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        _cfg(*overrides)
    line = str(info.value)
    assert "\n" not in line
    return line


def test_the_readme_real_provider_command_has_a_user_simulator(monkeypatch):
    """``benchmark=acebench model=gpt4o`` selects agent_multi_turn by default: the model
    under test, as configured, is its user simulator (it once failed after Ray started)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    cfg = _cfg("benchmark=acebench", "model=gpt4o")
    assert cfg.user is not None and cfg.user.model == cfg.model and cfg.user.backend == cfg.backend
    served = _cfg("model=openai_compatible", "model.provider_model=openai/served", SERVER)
    assert served.user.model.provider_model == "openai/served" and served.user.backend.api_base == "http://127.0.0.1:9/v1"
    named = _cfg("model=openai_compatible", SERVER, "benchmark.user_model=smollm2")
    assert named.user.model.name == "smollm2" and named.user.backend.kind == "llamacpp"
    assert _cfg("model=reference").user is None  # the reference replays the gold dialogue
    assert _error("model=openai_compatible", SERVER, "benchmark.user_overrides=['backend.concurrency=2']").startswith(
        "benchmark.user_overrides: they apply to the config named by benchmark.user_model"
    )


def test_the_user_simulator_error_names_only_the_subsets_that_need_one():
    """agent_multi_step is a rollout without a user: the error once named it too."""
    from evalkit.engine.plan import prepare
    from evalkit.specs import build

    cfg = _cfg("model=openai_compatible", SERVER, "benchmark.subsets=[agent_multi_step,agent_multi_turn]", "tracking=none")
    with pytest.raises(ConfigError) as info:
        prepare(build(cfg.model_copy(update={"user": None})))
    assert str(info.value).startswith("benchmark.user_model: the selected acebench subsets ['agent_multi_turn'] need a user simulator")


def test_openai_compatible_without_api_base_is_a_config_error(monkeypatch):
    """It once retried for 55 s against the provider's public API, then exited 1."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    assert _error("model=openai_compatible") == "backend.api_base: required value missing (pass backend.api_base=...)"
    assert _error("model=gpt4o", "benchmark.user_model=openai_compatible").startswith(
        "benchmark.user_model: backend.api_base: required value missing"
    )


def test_a_dry_run_needs_no_api_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert _error("model=gpt4o").startswith("model.api_key_env: environment variable OPENAI_API_KEY is not set")
    cfg = _cfg("model=gpt4o", "run.dry_run=true")
    assert cfg.run.dry_run and cfg.api_key() is None


@pytest.mark.parametrize(
    "provider_model, override, message",
    [
        ("openai/o3-mini", None, "generation.temperature: openai model o3-mini does not take temperature=0.0"),
        ("openai/gpt-5-mini", None, "generation.temperature: openai model gpt-5-mini does not take temperature=0.0"),
        ("openai/o3-mini", "+model.dataset_args.acebench.generation.temperature=1", None),
        ("openai/gpt-4o-mini", None, None),
    ],
)
def test_o_series_temperature_is_checked_against_litellm_before_anything_runs(monkeypatch, provider_model, override, message):
    """litellm refuses temperature 0 for OpenAI's reasoning families on every request
    (UnsupportedParamsError): once every sample failed at run time."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    args = ["model=gpt4o", f"model.provider_model={provider_model}", "benchmark.subsets=[normal_atom_bool]", *([override] if override else [])]
    if message is None:
        assert _cfg(*args).generation.temperature in (0.0, 1.0)
    else:
        assert _error(*args).startswith(message)


@pytest.mark.parametrize(
    "extra, message",
    [
        ("{temperature: 0.9}", "model.extra_body.temperature: overlaps the generation parameter temperature"),
        ("{max_tokens: 7}", "model.extra_body.max_tokens: overlaps the generation parameter max_tokens"),
        ("{thinking: {type: enabled}}", "model.extra_body.thinking: overlaps the generation parameter thinking_budget_tokens"),
        ("{stream: true}", "model.extra_body.stream: evalkit reads whole answers"),
        ("{n: 3}", "model.extra_body.n: evalkit reads one answer per request"),
    ],
)
def test_extra_body_cannot_override_what_is_recorded(extra, message):
    """The server once got temperature 0.9 and max_tokens 7 while summary.json said 0.0 and 1200."""
    assert _error("model=openai_compatible", SERVER, f"+model.extra_body={extra}").startswith(message)


def test_extra_body_of_provider_fields_is_sent_and_recorded():
    cfg = _cfg("model=openai_compatible", SERVER, "+model.extra_body={top_k: 3, repetition_penalty: 1.1}")
    assert cfg.sent_params()["extra_body"] == {"top_k": 3, "repetition_penalty": 1.1}
    assert cfg.record()["model"]["extra_body"] == {"top_k": 3, "repetition_penalty": 1.1}


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
