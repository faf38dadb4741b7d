"""A run's models, built from its resolved config: the one place that knows model kinds.

:func:`plan_models` reads what an offline model answers from (a replay file, the
benchmark's gold or baseline answers) and fixes the model ids; it starts nothing and writes
nothing, so a bad replay file is one line before the run directory exists.
:meth:`ModelPlan.open` starts the servers evalkit runs itself (llama.cpp, through
:mod:`evalkit.backends`) and yields the picklable factory a worker calls to build its
:class:`Agents`; leaving the context stops them. The engine sees only this handle and the
model protocol.

The agent and the user simulator of multi-turn rollouts are each built from their own
resolved config (model + backend): a user simulator whose backend names another endpoint
is sent there, whatever its model is called.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from evalkit.backends.llamacpp import NOT_STARTED, ServerPool, served_weights_identity, starts_server
from evalkit.models.base import endpoint_model_id, strip_credentials
from evalkit.models.offline import (ReferenceJudge, SampleAnswers, TableModel, file_digest, load_replay_file, load_run_outputs,
                                    table_digest)
from evalkit.specs import ActorSpec, ModelsSpec
from evalkit.types import PackedSamples, Sample


class OfflineAnswers(Protocol):
    """What the offline models read of the run's benchmark
    (:class:`evalkit.benchmarks.base.Benchmark` has each; the models sit beside the
    benchmarks and import none of them)."""

    def is_rollout(self, sample: Sample) -> bool: ...

    def reference_output(self, sample: Sample) -> str: ...

    def baseline_output(self, name: str, sample: Sample) -> str: ...

    def reference_agents(self, sample: Sample) -> tuple[Any, Any]: ...


@dataclass
class Agents:
    """The models answering one worker's samples. ``pair(sample)`` gives ``(agent, user)``:
    the run's models, or, for the rollout samples of ``model=reference``, the benchmark's
    scripted reference agent and user of that sample; ``judges`` rate the answers of a task's
    ``llm_judge`` scorers."""

    agent: Any
    user: Any | None = None
    scripted: Callable[[Sample], tuple[Any, Any]] | None = None
    is_rollout: Callable[[Sample], bool] | None = None
    #: the run's judges, ``{judge name: (model, parameters sent)}`` in panel order (``judge=...``)
    judges: dict[str, tuple[Any, dict[str, Any]]] = field(default_factory=dict)

    def pair(self, sample: Sample) -> tuple[Any, Any | None]:
        if self.scripted is not None and self.is_rollout is not None and self.is_rollout(sample):
            return self.scripted(sample)
        return self.agent, self.user


@dataclass
class _Endpoint:
    """One network model to build: its config, backend, key and per-attempt timeout."""

    model: Any
    backend: Any
    api_key: str | None
    timeout_s: float

    @property
    def identity(self) -> str | None:
        return served_weights_identity(self.backend)

    def model_id(self) -> str:
        return endpoint_model_id(self.model.provider_model, getattr(self.backend, "api_base", None), self.identity)

    def client_kwargs(self, api_base: str | None) -> dict[str, Any]:
        b = self.backend
        if api_base is None and starts_server(b):  # its server was not started (ModelPlan.open)
            api_base = NOT_STARTED
        return dict(
            provider_model=self.model.provider_model, api=self.model.api, api_base=api_base, api_key=self.api_key,
            timeout_s=self.timeout_s, max_retries=b.max_retries, retry_initial_wait_s=b.retry_initial_wait_s,
            retry_max_wait_s=b.retry_max_wait_s, retry_budget_s=b.retry_budget_s, identity=self.identity,
            response_format=self.model.response_format,
            **({"stall_s": b.stall_timeout_s, "prompt_s_per_token": b.prompt_s_per_token,
                "output_s_per_token": b.output_s_per_token} if getattr(b, "kind", None) == "llamacpp" else {}),
        )  # fmt: skip


def _network_agents(agent_kwargs: dict[str, Any], user_kwargs: dict[str, Any] | None,
                    judge_kwargs: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...] = ()) -> Agents:  # fmt: skip
    """Runs in a worker: the litellm clients of the agent, the user simulator and the judges
    (``(name, client kwargs, parameters sent)`` each)."""
    from evalkit.models.litellm_client import LiteLLMModel  # deferred: litellm's import is heavy

    judges = {name: (LiteLLMModel(**kwargs), params) for name, kwargs, params in judge_kwargs}
    return Agents(LiteLLMModel(**agent_kwargs), LiteLLMModel(**user_kwargs) if user_kwargs is not None else None, judges=judges)


def _judged_offline_agents(offline: Agents, judge_kwargs: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...]) -> Agents:
    """Runs in a worker: an offline model under test (reference, replay, a baseline) with
    the litellm clients of its network judges."""
    from evalkit.models.litellm_client import LiteLLMModel  # deferred: litellm's import is heavy

    judges = {name: (LiteLLMModel(**kwargs), params) for name, kwargs, params in judge_kwargs}
    return Agents(offline.agent, offline.user, offline.scripted, offline.is_rollout, {**offline.judges, **judges})


@dataclass
class ModelPlan:
    """The models of a run, not yet started.

    Attributes:
        model_id: the identity every request hash uses (``<agent id>|user=<user id>`` when a
            user simulator takes part).
        offline: True for models that need no network (reference, replay, baselines): the
            engine runs them in its own process.
        endpoints: ``{"agent": url | None, "user": url | None}``, credentials stripped;
            evalkit's own servers' addresses once :meth:`open` started them.
    """

    model_id: str
    offline: bool
    endpoints: dict[str, str | None] = field(default_factory=dict)
    _offline: Agents | None = None
    _agent: _Endpoint | None = None
    _user: _Endpoint | None = None
    #: the network judges: ``(name, endpoint, parameters sent)`` in panel order
    _judges: tuple[tuple[str, _Endpoint, dict[str, Any]], ...] = ()

    @property
    def starts_servers(self) -> bool:
        """True when :meth:`open` starts a server of evalkit's own (llama.cpp) for the agent,
        the user simulator or a judge."""
        return any(e is not None and starts_server(e.backend) for e in (self._agent, self._user, *(j[1] for j in self._judges)))

    @property
    def judged_by_own_server(self) -> bool:
        """True when a judge's server is one evalkit starts (started even when every answer
        is cached: :meth:`open`)."""
        return any(starts_server(j[1].backend) for j in self._judges)

    @contextmanager
    def open(self, log_dir: Path, pool: ServerPool | None = None, serve: bool = True) -> Iterator[Callable[[], Agents]]:
        """Start evalkit's own servers (in ``pool``, a new one when ``None``: stopped on exit)
        and yield the factory of :class:`Agents` (picklable for network models).

        ``serve=False`` (every request of the model under test is answered from the response
        cache) starts none for the agent and the user simulator: their endpoint is recorded
        as ``None`` and the client is given :data:`~evalkit.backends.llamacpp.NOT_STARTED`,
        where a request fails at once. A judge's server is started all the same: its requests
        are known only once the answers are (issue 35 item 7: ``judge=smollm2`` on cached
        answers failed every judge call with a connection error)."""
        if self._offline is not None and not self._judges:
            offline = self._offline
            yield lambda: offline
            return
        own = pool is None
        servers = pool or ServerPool()

        def endpoint(e: _Endpoint, log_name: str, needed: bool = False) -> str | None:
            if not (serve or needed) and starts_server(e.backend):
                return None  # not started: nothing will be asked of it
            return servers.endpoint(e.backend, Path(log_dir) / log_name)

        try:
            judges = []
            for name, judge, params in self._judges:
                base = endpoint(judge, f"llama-server-judge-{name}.log", needed=True)
                self.endpoints[f"judge:{name}"] = strip_credentials(base)
                judges.append((name, judge.client_kwargs(base), params))
            if self._offline is not None:  # an offline model under test, judged over the network
                yield functools.partial(_judged_offline_agents, self._offline, tuple(judges))
                return
            assert self._agent is not None
            agent_base = endpoint(self._agent, "llama-server.log")
            self.endpoints["agent"] = strip_credentials(agent_base)
            user_kwargs = None
            if self._user is not None:
                user_base = endpoint(self._user, "llama-server-user.log")
                self.endpoints["user"] = strip_credentials(user_base)
                user_kwargs = self._user.client_kwargs(user_base)
            yield functools.partial(_network_agents, self._agent.client_kwargs(agent_base), user_kwargs, tuple(judges))
        finally:
            if own:
                servers.close()


@dataclass(frozen=True)
class Endpoints:
    """A run's network endpoints, built once from the config (:func:`network_endpoints`) and
    handed to both users: the early model workers (:func:`serverless_agents`) and the plan
    (:func:`plan_models`). ``agent`` / ``user``: the model under test's and the user
    simulator's (``None`` for an offline model, and ``user`` without a user simulator);
    ``judges``: ``(name, endpoint, parameters sent)`` of each network judge."""

    agent: _Endpoint | None
    user: _Endpoint | None
    judges: tuple[tuple[str, _Endpoint, dict[str, Any]], ...]


def network_endpoints(models: ModelsSpec) -> Endpoints:
    """The one place a run's network endpoints are built from its models' spec (each its own
    model, backend and key; a judge's per-attempt timeout is its own backend's ``timeout_s``)."""
    agent = user = None
    if models.agent.model.kind == "litellm":
        agent = _endpoint(models.agent)
        if models.user is not None:
            user = _endpoint(models.user)
    judges = tuple((j.model.name, _endpoint(j), j.sent_params) for j in models.judges if j.model.kind == "litellm")
    return Endpoints(agent, user, judges)


def _endpoint(actor: ActorSpec) -> _Endpoint:
    return _Endpoint(actor.model, actor.backend, actor.api_key, actor.timeout_s)


def plan_models(models: ModelsSpec, bench: OfflineAnswers, samples: list[Sample], with_user: bool,
                endpoints: Endpoints | None = None) -> ModelPlan:  # fmt: skip
    """The :class:`ModelPlan` of a run's models (:class:`~evalkit.specs.ModelsSpec`).

    ``with_user``: a user simulator takes part (some selected sample is a rollout that
    needs one and ``models.user`` is set). ``endpoints``: those the run already built
    (:func:`network_endpoints`, also given to its early workers); built here when ``None``.

    Raises:
        DataError: a replay file that cannot be read (names file and line).
    """
    model = models.agent.model
    kind = model.kind
    built = endpoints or network_endpoints(models)
    if kind == "litellm":
        judges = built.judges
        agent, user = built.agent, built.user if with_user else None
        assert agent is not None
        model_id = agent.model_id() + (f"|user={user.model_id()}" if user is not None else "")
        endpoints = {"agent": strip_credentials(models.agent.api_base)}
        if user is not None:
            endpoints["user"] = strip_credentials(getattr(user.backend, "api_base", None))
        endpoints.update({f"judge:{name}": strip_credentials(getattr(e.backend, "api_base", None)) for name, e, _ in judges})
        return ModelPlan(model_id, False, endpoints, _agent=agent, _user=user, _judges=judges)
    singles = (s for s in samples if not bench.is_rollout(s))  # one at a time (a packed selection holds no Sample)
    if kind == "reference" and isinstance(samples, PackedSamples):  # each answer made when asked, not held
        outputs, source = SampleAnswers(samples, bench.reference_output, bench.is_rollout), "gold"
    elif kind == "reference":
        outputs, source = {s.id: bench.reference_output(s) for s in singles}, "gold"
    elif kind == "baseline":
        outputs = {s.id: bench.baseline_output(model.baseline, s) for s in singles}
        source = f"baseline-{model.baseline}"
    elif Path(model.path).is_dir():  # replay of a finished run's answers, per sample and epoch
        outputs = load_run_outputs(model.path, continuation=model.api == "completion")
        source = "run-" + table_digest(outputs) + (":completion" if model.api == "completion" else "")
    else:  # replay
        outputs = load_replay_file(model.path, continuation=model.api == "completion")
        source = file_digest(model.path) + (":completion" if model.api == "completion" else "")
    table = TableModel(model.name, outputs, source)
    scripted = bench.reference_agents if kind == "reference" else None
    judges = {j.model.name: (ReferenceJudge(), {}) for j in models.judges if j.model.kind == "reference"}
    network = built.judges  # an offline model judged over the network runs on the model workers
    endpoints = {"agent": None, **{f"judge:{name}": strip_credentials(getattr(e.backend, "api_base", None)) for name, e, _ in network}}
    return ModelPlan(table.model_id, not network, endpoints, _offline=Agents(table, None, scripted, bench.is_rollout, judges), _judges=network)


def serverless_agents(models: ModelsSpec, endpoints: Endpoints) -> Callable[[], Agents] | None:
    """The picklable factory of a network model's :class:`Agents` straight from the config
    — the agent, the judges and, when ``models.user`` is set, the user simulator — when none of their
    endpoints is a server evalkit starts (``None`` otherwise, and for offline models): the
    engine starts the model workers with it before the benchmark's data is loaded."""
    if models.agent.model.kind != "litellm":
        return None
    agent, user, judges = endpoints.agent, endpoints.user, endpoints.judges
    assert agent is not None
    if any(starts_server(e.backend) for e in (agent, user, *(j[1] for j in judges)) if e is not None):
        return None
    user_kwargs = user.client_kwargs(getattr(user.backend, "api_base", None)) if user is not None else None
    judge_kwargs = tuple((name, e.client_kwargs(getattr(e.backend, "api_base", None)), params) for name, e, params in judges)
    return functools.partial(_network_agents, agent.client_kwargs(getattr(agent.backend, "api_base", None)), user_kwargs, judge_kwargs)


def server_pool() -> ServerPool:
    """A new pool of evalkit's own model servers (to share between runs: a sweep's session)."""
    return ServerPool()
