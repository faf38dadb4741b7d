"""Stage 2 of a run, *prepare*: load the benchmark's data, select the samples, build each
sample's request once (to find what identifies its results, and every request the data
cannot build), plan the models. Nothing is started and nothing is written, so every
problem found here (bad data, an unknown sample id, a replay file that cannot be read) is
one line before the run directory exists. The plan keeps each request's hash, not the
request: a work item's request is built again when it is dispatched
(:class:`~evalkit.engine.work.WorkList`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Callable, Iterable

from evalkit import secrets
from evalkit.benchmarks import get_benchmark_class
from evalkit.benchmarks.base import MAX_SAMPLE_IDS_FILE_BYTES, Benchmark, Selection, selection_of, wanted_ids  # noqa: F401 (re-exported)
from evalkit.config import RunSettings
from evalkit.engine.sequential import GateSetup
from evalkit.engine.work import WorkList
from evalkit.errors import ConfigError, DataError
from evalkit.images import image_loaders
from evalkit.journal import MAX_SAMPLE_ID_CHARS
from evalkit.models.factory import Endpoints, ModelPlan, plan_models
from evalkit.providers import Price, model_price
from evalkit.specs import ModelsSpec, PromptSpec, RunSpecs
from evalkit.types import Request, Sample, canonical_json, id_positions, sample_keys

log = logging.getLogger("evalkit")


@dataclass
class RunPlan:
    """Everything a run needs before it starts: its specs (:class:`~evalkit.specs.RunSpecs`,
    built once from the validated config), the benchmark, the
    selected samples, their work items (one per sample and epoch, epoch by epoch, each in
    selection order; built when dispatched, :class:`~evalkit.engine.work.WorkList`), each
    item's request hash and the planned models."""

    specs: RunSpecs
    bench: Benchmark
    #: the selection, in order (a :class:`~evalkit.types.PackedSamples` for a YAML task's rows)
    samples: Sequence[Sample]
    units: WorkList
    models: ModelPlan
    #: ``{(sample id, epoch): request hash}`` of every work item (what resume finds rows by;
    #: :class:`RequestHashes`, or a dict once a gate has cut the selection)
    hashes: Mapping[tuple[str, int], str]
    #: :meth:`prompt_hash`'s value: SHA-256 over the samples' ids and prompt hashes
    prompts_sha256: str
    #: ``{"agent": price, "user": price, "judge:<name>": price}`` (the user only when a user
    #: simulator takes part, a judge's for each judge of ``judge=...``);
    #: ``None`` = no price known (costs are then null, never 0)
    prices: dict[str, Price | None] = field(default_factory=dict)
    #: a user simulator takes part (some selected sample is a rollout and one is configured)
    with_user: bool = False
    #: ``run.stop_when``'s gate (:class:`evalkit.engine.sequential.GateSetup`), else ``None``
    gate: Any = None
    #: ``{sha256: bytes, or a call giving them}`` of every image the selected samples'
    #: requests carry (stored once per run in ``images/`` by
    #: :func:`evalkit.engine.finalize.store_images`, one at a time)
    images: dict[str, Any] = field(default_factory=dict)

    def request_hashes(self) -> Mapping[tuple[str, int], str]:
        """``{(sample id, epoch): request hash}``: what identifies each result (resume)."""
        return self.hashes

    def warn_unpriced(self) -> None:
        """One warning line per model without a price (its costs are null, never 0)."""
        models = self.specs.models
        judges = {f"judge:{j.model.name}": j.model for j in models.judges}
        for actor, price in self.prices.items():
            if price is None:
                model = models.agent.model if actor == "agent" else judges.get(actor) or models.user.model  # type: ignore[union-attr]
                log.warning(
                    "no price for %s model %s (%s) in litellm's price map: cost_usd is null; set model.pricing to have it",
                    actor, model.name, model.provider_model,
                )  # fmt: skip

    def prompt_hash(self) -> str:
        """SHA-256 over every selected sample's id and prompt hash, in selection order."""
        return self.prompts_sha256


def prepare(specs: RunSpecs, priced: bool = True, endpoints: Endpoints | None = None) -> RunPlan:
    """The :class:`RunPlan` of a run's specs (:func:`evalkit.specs.build`); its ``prices`` are left empty without
    ``priced`` (the engine then asks its model workers, see :func:`run_prices`).
    ``endpoints``: the network endpoints the run built already (given to its early workers);
    built from ``specs.models`` when ``None``.

    Raises:
        ConfigError: an empty selection, an unknown sample id, a user simulator missing for
            the selected rollouts, rollouts asked of ``model=replay``.
        DataError: the benchmark's data is missing or malformed, a replay file cannot be read.
    """
    models, run = specs.models, specs.run
    for actor in models.actors():
        secrets.register(actor.api_key)
    for actor in models.actors():
        secrets.register_url_password(actor.api_base)
    settings = specs.benchmark
    bench = get_benchmark_class(settings.name, kind=getattr(settings, "kind", None))(settings)  # a module: imported by validate
    gate = GateSetup(bench, run) if run.stop_when else None  # run.stop_when: the seeded stratified order
    # only the rows the selection needs are read (issue 46), and only what is sent is checked
    loaded = load_unique(bench, selection_of(run))
    samples = select_samples(loaded, run, gate.order if gate else None, example=bench.example_id)
    del loaded
    bench.check_selection(samples)
    rollouts = [s for s in samples if bench.is_rollout(s)]
    if bench.needs_user_model(samples) and models.user is None and models.agent.model.kind != "reference":
        needing = sorted({s.subset for s in samples if bench.needs_user_model([s])})
        raise ConfigError(
            f"benchmark.user_model: the selected {bench.name} subsets {needing} need a user simulator; "
            "pass benchmark.user_model=<model config name> (e.g. smollm2, gpt4o) or deselect them"
        )
    if models.agent.model.kind == "replay" and rollouts:
        raise ConfigError("model=replay: agent rollouts cannot be replayed from single outputs; deselect those subsets")
    build = partial(build_request, bench, specs.prompt)
    units = WorkList(samples, build, bench.is_rollout, run.repeats)
    if run.repeats > 1 and specs.prompt.temperature == 0:
        log.warning("run.repeats=%d at temperature 0: the repeats measure only the provider's nondeterminism", run.repeats)
    with_user = models.user is not None and bool(rollouts)
    planned = plan_models(models, bench, samples, with_user=with_user, endpoints=endpoints)
    images: dict[str, Any] = {}
    hashes, prompts_sha256 = identify(samples, build, run.repeats, planned.model_id, images)
    prices = run_prices(models, with_user, max_cost_usd=run.max_cost_usd, rollouts=bool(rollouts)) if priced else {}
    return RunPlan(specs, bench, samples, units, planned, hashes, prompts_sha256, prices, with_user, gate, images)


def identify(samples: Sequence[Sample], build: Callable[[Sample], Request], repeats: int,
             model_id: str, images: dict[str, Any] | None = None) -> tuple["RequestHashes", str]:  # fmt: skip
    """Each sample's request built once (a sample the benchmark cannot build fails here,
    before anything is written) and dropped: ``(``:class:`RequestHashes` ``{(sample id,
    epoch): request hash}`` epoch by epoch in selection order, ``SHA-256 over each sample's
    id and prompt hash)``; the requests' images are added to ``images`` when given:
    ``{sha256: bytes}``, or a call that gives them for an image held in a bounded store
    (:func:`evalkit.images.image_loaders`: nothing is read here)."""
    hashes = RequestHashes(sample_keys(samples)[0], repeats, id_positions(samples))
    prompts = hashlib.sha256()
    for i, sample in enumerate(samples):
        request = build(sample)
        if images is not None:
            images.update(image_loaders(request.images))
        prompts.update(f"{sample.id}\0{request.prompt_hash()}\n".encode("utf-8", errors="surrogatepass"))
        for epoch in range(repeats):
            request.epoch = epoch
            hashes.set(i, epoch, request.request_hash(model_id))
    return hashes, prompts.hexdigest()


class RequestHashes(Mapping[tuple[str, int], str]):
    """``{(sample id, epoch): request hash}`` of a run's work items, packed (issue 46 item 3:
    32 bytes per item and an index by id, against about 0.3 KB per item as a dict of
    tuples and hex strings). Iterates epoch by epoch, each epoch in selection order; a hash
    reads as its 64 hex digits (the SHA-256 of :meth:`evalkit.types.Request.request_hash`).

    ``ids``: the selection's sample ids, in order, each once; ``repeats``: epochs (≥ 1);
    ``index``: ``{id: position in ids}`` when the caller holds it already (shared, not copied)."""

    def __init__(self, ids: Sequence[str], repeats: int, index: dict[str, int] | None = None):
        self.ids, self.repeats = ids, repeats
        self._index = index if index is not None else {sid: i for i, sid in enumerate(ids)}
        self._digests = bytearray(32 * len(ids) * repeats)

    def canonical_id(self, sid: str) -> str:
        """The selection's own string equal to ``sid`` (``sid`` itself when not selected): a
        reader keying rows by it holds one string per sample (:func:`evalkit.journal.read_journal`)."""
        position = self._index.get(sid)
        return sid if position is None else self.ids[position]

    def slot(self, key: tuple[str, int]) -> int | None:
        """The place of ``key`` among the work items (``epoch × samples + position``: the
        order :meth:`__iter__` gives), ``None`` when it is not one of them."""
        try:
            sid, epoch = key
            position = self._index.get(sid)
        except (TypeError, ValueError):
            return None
        if position is None or type(epoch) is not int or not 0 <= epoch < self.repeats:
            return None
        return epoch * len(self.ids) + position

    def key_at(self, slot: int) -> tuple[str, int]:
        """The key at ``slot`` (:meth:`slot`'s inverse)."""
        epoch, position = divmod(slot, len(self.ids))
        return self.ids[position], epoch

    def set(self, position: int, epoch: int, digest: str) -> None:
        """The hash (64 hex digits) of the sample at ``position``, in ``epoch``."""
        at = 32 * (epoch * len(self.ids) + position)
        self._digests[at : at + 32] = bytes.fromhex(digest)

    def __getitem__(self, key: tuple[str, int]) -> str:
        try:
            sid, epoch = key
            position = self._index[sid]
        except (TypeError, ValueError, KeyError):
            raise KeyError(key) from None
        if type(epoch) is not int or not 0 <= epoch < self.repeats:
            raise KeyError(key)
        at = 32 * (epoch * len(self.ids) + position)
        return self._digests[at : at + 32].hex()

    def __contains__(self, key: object) -> bool:
        try:
            sid, epoch = key  # type: ignore[misc]
            return sid in self._index and type(epoch) is int and 0 <= epoch < self.repeats
        except (TypeError, ValueError):
            return False

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for epoch in range(self.repeats):
            for sid in self.ids:
                yield sid, epoch

    def __len__(self) -> int:
        return len(self.ids) * self.repeats


def run_prices(models: ModelsSpec, with_user: bool, lookup: Callable[[str], Price | None] | None = None,
               max_cost_usd: float | None = None, rollouts: bool = False) -> dict[str, Price | None]:  # fmt: skip
    """The price of each model taking part (:func:`evalkit.providers.model_price`);
    ``lookup``: how litellm's price map is asked (default: in this process);
    ``max_cost_usd``: ``run.max_cost_usd`` (a user simulator without a price refuses it). An offline run
    (reference, replay, baselines) is free for every actor, its scripted user simulator too
    (priced only when ``rollouts``: some selected sample is a rollout; a run with no user
    simulator taking part has no ``user`` price, never one of a user that did not take part).

    Raises:
        ConfigError: ``run.max_cost_usd`` with a user simulator that takes part (a selected
            rollout needs it) and has no price.
    """
    agent = models.agent
    prices = {"agent": model_price(agent.model, agent.backend.kind, lookup)}
    judges = {f"judge:{j.model.name}": model_price(j.model, j.backend.kind, lookup) for j in models.judges}
    if agent.model.kind != "litellm":
        return {"agent": prices["agent"], **({"user": prices["agent"]} if rollouts else {}), **judges}
    prices.update(judges)  # a judge without a price with run.max_cost_usd: refused by the config (evalkit.config)
    if with_user and models.user is not None:
        prices["user"] = model_price(models.user.model, models.user.backend.kind, lookup)
        if prices["user"] is None and max_cost_usd is not None:
            model = models.user.model
            raise ConfigError(
                f"run.max_cost_usd: the user simulator's model {model.name} ({model.provider_model}) has no price in litellm's "
                "price map; give it one (\"benchmark.user_overrides=['+model.pricing.input_per_mtok=…',"
                "'+model.pricing.output_per_mtok=…']\") or drop the budget"
            )
    return prices


def build_request(bench: Benchmark, prompt: PromptSpec, sample: Sample) -> Request:
    """The sample's request with every parameter the agent sends (``prompt.sent_params``, a
    copy per request); text-completion requests for ``model.api=completion`` — a live
    model's, or the replay of one — (rollouts are always chat)."""
    if prompt.api == "completion" and not bench.is_rollout(sample):
        request = bench.build_completion(sample, prompt.shots)
    else:
        request = bench.build(sample, prompt.shots)
    request.params = dict(prompt.sent_params)
    if "extra_body" in request.params:  # each request its own, as the config's sent_params() gave it
        request.params["extra_body"] = dict(request.params["extra_body"])
    return request


def load_unique(bench: Benchmark, selection: Selection | None = None) -> list[Sample]:
    """All samples of the benchmark's selected subsets (:meth:`~Benchmark.load`, checked);
    with a ``selection``, those it needs (:meth:`~Benchmark.load_selection`: a superset of
    it, left to :meth:`~Benchmark.check_selection` once selected).

    Raises:
        DataError: a data file the benchmark cannot open (an ``OSError`` of its ``load``), a
            sample id that occurs twice, or one longer than the journal keeps
            (:data:`evalkit.journal.MAX_SAMPLE_ID_CHARS`: a run of it could never be read back).
    """
    try:
        loaded = bench.load() if selection is None else bench.load_selection(selection)
    except OSError as exc:  # a plugin's own reader: a missing or unreadable data file is data, not a crash
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        raise DataError(f"{bench.name}: its data cannot be read:{where} ({type(exc).__name__}: "
                        f"{exc.strerror or exc}); check the benchmark's data settings") from None  # fmt: skip
    seen: set[str] = set()
    for sample in loaded:
        if len(sample.id) > MAX_SAMPLE_ID_CHARS:
            raise DataError(f"{bench.name}: sample id {short_id(sample.id)} is longer than the journal's "
                            f"{MAX_SAMPLE_ID_CHARS} characters; shorten the data's ids")  # fmt: skip
        if sample.id in seen:
            raise DataError(f"{bench.name}: sample id {short_id(sample.id)} occurs twice in the data; ids must be unique")
        seen.add(sample.id)
    return loaded


def select_samples(samples: list[Sample], run: RunSettings, order: Callable[[list[Sample]], list[Sample]] | None = None,
                   example: str | None = None) -> list[Sample]:  # fmt: skip
    """Apply ``run.sample_ids`` / ``run.sample_ids_file`` then ``run.limit`` (first N).
    ``order`` (``run.stop_when``'s :meth:`~evalkit.engine.sequential.GateSetup.order`): puts
    the selection in the gate's order and caps it itself, in units, before ``run.limit``.
    ``example``: an id of the data to name in the unknown-id error when ``samples`` may hold
    none (a benchmark's :attr:`~evalkit.benchmarks.base.Benchmark.example_id`).

    Raises:
        ConfigError: a requested id that the benchmark does not have, or nothing selected.
    """
    wanted = wanted_ids(run)
    if wanted is not None:
        by_id = {s.id: s for s in samples}
        unknown = [sid for sid in wanted if sid not in by_id]
        if unknown:
            example = example or (samples[0].id if samples else "none")
            raise ConfigError(f"run.sample_ids: unknown sample id {short_id(unknown[0])} (ids look like {short_id(example)})")
        seen: set[str] = set()
        samples = [by_id[sid] for sid in wanted if not (sid in seen or seen.add(sid))]
    if order is not None:
        samples = order(samples)
    elif run.limit is not None and run.limit < len(samples):
        samples = samples[: run.limit]
    if not samples:
        raise ConfigError("run: the selection is empty (check benchmark.subsets, run.sample_ids, run.limit)")
    return samples


def short_id(sid: str, keep: int = 80) -> str:
    """``sid`` for a one-line message: its repr cut to ``keep`` characters, with its length
    when cut (a data file's id may be megabytes long)."""
    return repr(sid) if len(sid) <= keep else f"{sid[:keep]!r}… ({len(sid)} characters)"


def data_fingerprint(samples: list[Sample]) -> str:
    """SHA-256 over the evaluated records (id, subset and payload, in selection order),
    hashed one record at a time (the digest of their concatenation, never held whole)."""
    return _sha256_of(canonical_json([s.id, s.subset, s.data]) + "\n" for s in samples)


def _sha256_of(parts: Iterable[str]) -> str:
    """:func:`~evalkit.types.sha256_hex` of the concatenation of ``parts``, fed one at a time."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", errors="surrogatepass"))
    return digest.hexdigest()
