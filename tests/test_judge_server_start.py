"""Issue 35 item 7: ``judge=smollm2`` when every answer of the model under test is cached.
The run skips starting llama.cpp's server for the model (``serve=False``), but a judge's
requests are known only once the answers are, so the judge's server must start: before, every
judge call went to NOT_STARTED and failed with a connection error (a resume the same).
Quick: the decision in :meth:`ModelPlan.open` with a fake server pool, nothing started."""

from __future__ import annotations

from pathlib import Path

from evalkit.backends.llamacpp import NOT_STARTED
from evalkit.compose import compose, resolve
from evalkit.models.factory import network_endpoints, plan_models
from evalkit.specs import build


class FakePool:
    """A :class:`~evalkit.backends.llamacpp.ServerPool` that records what it was asked to start."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def endpoint(self, backend, log_file: Path) -> str:
        self.started.append(Path(log_file).name)
        return f"http://127.0.0.1:{9000 + len(self.started)}/v1"

    def close(self) -> None:
        pass


def _plan(*overrides: str):
    _, cfg = resolve(compose(["benchmark=explain_mini", "tracking=none", *overrides]))
    models = build(cfg).models
    return plan_models(models, _Bench(), [], False, network_endpoints(models))


class _Bench:
    """The little of a benchmark an offline plan reads (no samples selected)."""

    reference_agents = None

    def is_rollout(self, sample) -> bool:
        return False


def test_a_llamacpp_judge_starts_its_server_when_every_answer_is_cached(tmp_path):
    plan = _plan("model=smollm2", "judge=smollm2")
    pool = FakePool()
    with plan.open(tmp_path, pool=pool, serve=False) as factory:
        agent_kwargs, _user, judges = factory.args
    assert pool.started == ["llama-server-judge-smollm2.log"]  # the judge's, not the model's
    assert agent_kwargs["api_base"] == NOT_STARTED  # the model's answers come from the cache
    ((name, judge_kwargs, _params),) = judges
    assert name == "smollm2" and judge_kwargs["api_base"] == "http://127.0.0.1:9001/v1"
    assert plan.endpoints["judge:smollm2"] == "http://127.0.0.1:9001/v1" and plan.endpoints["agent"] is None
    assert plan.starts_servers and plan.judged_by_own_server


def test_an_offline_model_judged_by_llamacpp_starts_the_judges_server(tmp_path):
    plan = _plan("model=reference", "judge=smollm2")
    pool = FakePool()
    with plan.open(tmp_path, pool=pool, serve=False) as factory:
        (_offline, judges) = factory.args
    assert pool.started == ["llama-server-judge-smollm2.log"] and judges[0][1]["api_base"] != NOT_STARTED


def test_without_a_judge_a_cached_run_starts_no_server(tmp_path):
    plan = _plan("model=smollm2", "benchmark=arith_mini")
    assert plan.starts_servers and not plan.judged_by_own_server
    pool = FakePool()
    with plan.open(tmp_path, pool=pool, serve=False) as factory:
        assert factory.args[0]["api_base"] == NOT_STARTED
    assert pool.started == []
