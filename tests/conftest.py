"""Session-wide fixtures: paths to the shared test data."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("EVALKIT_SHARED_DIR", REPO_ROOT.parent / "shared")).resolve()


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background by a non-interactive shell (``pytest … &`` in a
    script, no job control) begins with SIGINT ignored, and every process it starts inherits
    that: the tests that Ctrl-C an evalkit run (``tests/engine/test_crash_resume.py``,
    ``tests/engine/test_batch_runs.py``) would see their signal ignored and the run go on.
    The tests mean a Ctrl-C from a terminal, so the suite restores Python's own handler."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    from tests.support import progress

    progress.register(config)  # a line per test file as it finishes (bash/test.sh's lane printed only dots)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``bash/test.sh`` runs ``-n 2 --dist loadgroup``), the groups that
    decide which worker runs a test: a file's tests stay in one worker, so its module-scoped
    fixtures (clusters, servers, whole runs) are built once; and every test of the embedded
    model (marked ``llm`` or using ``llama_api_base``) runs in one worker, so one llama.cpp
    server serves them and two never share the cores. Without xdist this adds nothing.

    The items are collected in the workers, where pytest-xdist has set ``dist`` to ``no`` and
    ``loadgroup`` to True (``xdist.remote.setup_config``): reading ``dist`` alone made no group
    at all, so every test was scheduled on its own and a file's module fixtures were built in
    both workers (the careless-judge file's 100 s fixture twice). pytest-xdist 3.8 applies a
    group by rewriting ``item._nodeid``, which pytest 9.2 no longer reads (its ids became
    ``NodeId`` objects): pyproject.toml keeps pytest below 9.2 until xdist follows."""
    if not config.pluginmanager.hasplugin("xdist") or not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        embedded = item.get_closest_marker("llm") is not None or "llama_api_base" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("embedded-model" if embedded else item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """``../shared/data`` (read-only test data; never copied into the project)."""
    path = SHARED_DIR / "data"
    if not path.is_dir():
        pytest.fail(f"shared test data not found at {path}; set EVALKIT_SHARED_DIR")
    return path


@pytest.fixture(scope="session")
def acebench_dir(shared_data_dir: Path) -> Path:
    """The official ACEBench data (``data_all/``) with ``prompts.json`` beside it."""
    return shared_data_dir / "acebench"


# ------------------------------------------------------------------------------------------
# real services shared by the whole session: one Ray instance, one fake OpenAI server,
# one embedded llama.cpp server (started only if a test asks for it)
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def ray_address() -> str:
    """A local Ray instance for the session; evalkit runs in this process reuse it and
    subprocess runs connect to it with ``runner.address``."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 * 1024 * 1024, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="session")
def fake_openai():
    """The scripted OpenAI-compatible server (tests/support/fake_openai.py)."""
    from tests.support.fake_openai import FakeOpenAI

    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_api_base(tmp_path_factory) -> str:
    """The embedded SmolLM2 server, started once per session through evalkit's backend."""
    from evalkit.backends.llamacpp import LlamaCppServer

    log_file = tmp_path_factory.mktemp("llama") / "llama-server.log"
    server = LlamaCppServer(log_file=log_file)
    yield server.start()
    server.stop()


def base_overrides(output_root: Path, acebench: Path) -> list[str]:
    return [
        f"benchmark.data_dir={acebench}",
        f"run.output_root={output_root}",
        "tracking=none",
        "run.progress=false",
    ]


@pytest.fixture
def run_eval(tmp_path: Path, acebench_dir: Path):
    """Run evalkit in this process: ``run_eval(["model=reference", ...])`` → RunResult.
    Compose → validate → run, exactly as ``python -m evalkit`` does (``shared``: an engine
    session, as a sweep's job gets)."""

    def _run(overrides: list[str], output_root: Path | None = None, shared=None):
        return run_in_process(overrides, output_root or tmp_path / "outputs", acebench_dir, shared)

    return _run


def run_in_process(overrides: list[str], output_root: Path, acebench: Path, shared=None):
    """What ``run_eval`` runs, for fixtures of a wider scope than a test's (a module's runs
    that its tests only read): ``base_overrides`` + ``overrides`` → RunResult."""
    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated

    _, cfg = resolve(compose(base_overrides(output_root, acebench) + list(overrides)))
    return run_validated(cfg, shared=shared)


def evalkit_cmd(*args: str) -> list[str]:
    """Command line of ``python -m evalkit`` in this interpreter."""
    import sys

    return [sys.executable, "-m", "evalkit", *args]
