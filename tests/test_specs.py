"""Issue 34 item 4: the stages take their own specs, built once from the validated config
(:mod:`evalkit.specs`). Composed configs, nothing run (Hydra's compose takes seconds on a
loaded host: slow lane)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.compose import compose, resolve
from evalkit.specs import TrackingSpec, build

pytestmark = pytest.mark.slow


def _specs(*overrides: str):
    return build(resolve(compose(["benchmark=arith_mini", "tracking=none", *overrides]))[1])


def test_each_stage_gets_what_the_config_says(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_TEST_KEY", "sk-spec-secret-1234567890")
    specs = _specs("model=openai_compatible", "model.provider_model=openai/x", "model.api_key_env=SPEC_TEST_KEY",
                   "backend.api_base=http://127.0.0.1:9/v1", "backend.concurrency=7", "runner=cluster",
                   "runner.address=auto", f"run.output_root={tmp_path}", "run.limit=3")  # fmt: skip
    assert specs.execution.concurrency == 7 and specs.execution.runner == "cluster"
    assert specs.execution.cache_dir == Path(tmp_path) / "cache"  # run.cache_dir's default
    assert specs.execution.limits == {"agent": (7, specs.execution.adaptive)}  # runner=cluster: the shared windows
    assert specs.models.agent.api_key == "sk-spec-secret-1234567890" and specs.models.networked
    assert specs.run_dir.output_root == Path(tmp_path) and specs.run.limit == 3
    assert specs.report.model == "openai_compatible" and specs.report.benchmark == "arith_mini"
    assert specs.tracking.kind == "none" and specs.tracking.output_root == str(tmp_path)
    # a key never shows in a spec's repr (a log line, an exception's message)
    assert "sk-spec-secret" not in repr(specs) and "sk-spec-secret" not in repr(specs.models.agent)


def test_local_runs_share_no_window_and_the_cache_can_be_off():
    specs = _specs("model=reference", "run.cache=false")
    assert specs.execution.limits is None and specs.execution.cache_dir is None
    assert not specs.models.networked and specs.models.user_sent_params == {}


def test_a_sweep_reads_its_tracking_from_the_composed_config():
    """The sweep's callback reads ``tracking.*`` before any job validates: the same spec as
    the validated config's."""
    composed = compose(["benchmark=arith_mini", "tracking=mlflow", "tracking.experiment=exp", "run.output_root=out"])
    validated = resolve(composed)[1]
    assert TrackingSpec.of(composed.tracking, composed.run) == build(validated).tracking
    assert build(validated).tracking.experiment == "exp"
