"""Each thing a run needs is built once (issue 26 item 17): the network endpoints are built
from the config in one call, whose result both the early model workers and the plan use."""

from __future__ import annotations

import pytest

from evalkit.models import factory

pytestmark = pytest.mark.slow  # Ray and the fake server through a whole run


def test_a_network_run_builds_its_endpoints_once(fake_openai, ray_address, run_eval, monkeypatch):
    built: list[factory.Endpoints] = []
    real = factory.network_endpoints

    def counting(cfg):
        built.append(real(cfg))
        return built[-1]

    monkeypatch.setattr(factory, "network_endpoints", counting)
    import evalkit.engine.run as run_module

    monkeypatch.setattr(run_module, "network_endpoints", counting)
    fake_openai.set_plan({"default": {"content": "[]", "latency_s": 0.0}})
    res = run_eval(["model=openai_compatible", "model.provider_model=openai/fake", f"backend.api_base={fake_openai.api_base}",
                    "run.cache=false", "run.limit=2", "runner.num_workers=1"])  # fmt: skip
    assert res.summary["status"] == "complete"
    assert len(built) == 1 and built[0].agent is not None
