"""A run's plan holds its samples and each work item's request hash, never the requests:
a request is built when its work item is dispatched (issue 23 item 2, the driver's memory
at N = 20,000; figures in docs/performance.md, ``perf/footprint.py``)."""

from __future__ import annotations

from evalkit.compose import compose, resolve
from evalkit.engine.plan import data_fingerprint, prepare
from evalkit.specs import build
from evalkit.types import Request, canonical_json, sha256_hex
from tests.support.reachable import held

N, REPEATS = 80, 2


def _requests_held(root: object) -> int:
    """The Request objects reachable from ``root``."""
    return held(root, Request)


def _plan(acebench_dir):
    _, cfg = resolve(compose([f"benchmark.data_dir={acebench_dir}", "model=openai_compatible", "model.provider_model=openai/fake",
                              "backend.api_base=http://127.0.0.1:9/v1", "benchmark.subsets=[normal_single_turn_single_function]",
                              f"run.limit={N}", f"run.repeats={REPEATS}", "tracking=none"]))  # fmt: skip
    return prepare(build(cfg))


def test_a_plan_of_n_samples_holds_no_request_before_dispatch(acebench_dir):
    plan = _plan(acebench_dir)
    assert len(plan.samples) == N and len(plan.units) == N * REPEATS
    assert _requests_held(plan) == 0  # the eager plan held N × REPEATS of them
    first = plan.units[0]
    assert _requests_held(first) == 1 and first.request.messages  # a dispatched item carries its request
    assert first.request is not plan.units[0].request  # built anew at each dispatch, kept by no one
    assert _requests_held(plan) == 0


def test_requests_built_at_dispatch_are_those_the_plan_identified(acebench_dir):
    """The hashes resume finds journal rows by, and the prompt hash of the summary, are those
    of the requests the work items carry when dispatched (each epoch its own hash)."""
    plan = _plan(acebench_dir)
    model_id = plan.models.model_id
    built = list(plan.units)
    assert [u.key for u in built] == list(plan.units.keys()) == list(plan.request_hashes())
    assert {u.key: u.request.request_hash(model_id) for u in built} == plan.request_hashes()
    assert len(set(plan.request_hashes().values())) == N * REPEATS
    assert [u.request.epoch for u in built] == [0] * N + [1] * N
    first_epoch = "".join(f"{u.sample.id}\0{u.request.prompt_hash()}\n" for u in built if u.request.epoch == 0)
    assert plan.prompt_hash() == sha256_hex(first_epoch)
    assert all(u.request.params == plan.specs.prompt.sent_params and u.request.messages for u in built)
    done = {built[0].key, built[N + 3].key}
    pending = plan.units.without(done)
    assert len(pending) == N * REPEATS - 2 and built[0].key not in set(pending.keys())
    assert [u.key for u in pending[N - 1 :]] == [built[N + i].key for i in range(N) if i != 3]  # a slice is built on access too
    fingerprint = sha256_hex("".join(canonical_json([s.id, s.subset, s.data]) + "\n" for s in plan.samples))
    assert data_fingerprint(plan.samples) == fingerprint  # hashed one record at a time, the same digest
