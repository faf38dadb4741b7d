"""The data contracts every part of evalkit speaks.

A benchmark turns its data into :class:`Sample` objects, each sample into a :class:`Request`
(chat messages or a text prompt), and a model's raw text back into a :class:`SampleScore`.
The engine never looks inside ``Sample.data``; a benchmark never sees how a request was
executed. Records written to ``predictions.jsonl`` / ``failed.jsonl`` follow the record
contract of ARCHITECTURE.md ("extend, don't rename").
"""

from __future__ import annotations

import hashlib
import json
import marshal
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Protocol, overload

#: the most epochs a run may have (``run.repeats``); a journal row's ``epoch`` is below it, and
#: summary.json's ``repeats`` at most it (a count read from a run directory is bounded before use)
MAX_REPEATS = 10_000


class ErrorKind(str, Enum):
    """Why a sample has no scorable answer: the one list of ``error_kind`` values written to
    ``failed.jsonl`` (``Failure.error_kind``), counted in ``summary.json`` → ``failed_by_kind``
    and shown in MLflow. Every failure is resumable: ``run.resume`` asks again for exactly
    the samples whose rows carry one of these kinds. A value is written as its plain string.
    """

    # the provider or the network (``models/litellm_client.error_kind`` classifies exceptions)
    CONNECTION = "connection"  #: the endpoint could not be reached (refused, reset, DNS)
    TIMEOUT = "timeout"  #: no answer within ``backend.timeout_s`` (after the retries)
    RATE_LIMIT = "rate_limit"  #: HTTP 429 until the retry budget ran out
    SERVER_ERROR = "server_error"  #: HTTP 5xx until the retry budget ran out
    MALFORMED_RESPONSE = "malformed_response"  #: an answer that is not the API's shape
    CLIENT_ERROR = "client_error"  #: HTTP 4xx other than auth, 429 and context length
    CLIENT_CONFIG = "client_config"  #: the request could not be built; nothing was sent
    CONTEXT_WINDOW = "context_window"  #: the prompt does not fit the model's context
    AUTH = "auth"  #: the key was refused (HTTP 401/403)
    # the answer came back but holds nothing to score
    EMPTY = "empty"  #: an empty answer
    TRUNCATED_EMPTY = "truncated_empty"  #: empty because ``max_tokens`` ran out (e.g. while reasoning)
    MISSING_OUTPUT = "missing_output"  #: a replay file holds no output for the sample
    # evalkit's own limits and machinery
    BUDGET_EXCEEDED = "budget_exceeded"  #: never sent: ``run.max_cost_usd`` / ``run.max_total_tokens`` spent
    SCORE_BUDGET_EXCEEDED = "score_budget_exceeded"  #: answered, not scored: ``benchmark.score_budget_s`` spent
    WORKER_DIED = "worker_died"  #: the unit's model worker died with it each time it was sent
    ENVIRONMENT = "environment"  #: an agent rollout's simulated environment raised
    #: an LLM judge's call failed after its retries, or no judge gave a verdict matching the
    #: schema (actor ``judge``; the model's answer is kept, a resume asks only the judge again)
    JUDGE_ERROR = "judge_error"
    INTERNAL = "internal"  #: an unexpected exception inside evalkit (its type and message kept)
    # provider batch APIs (``run.batch``)
    BATCH_EXPIRED = "batch_expired"  #: the batch's completion window ended before this request
    BATCH_FAILED = "batch_failed"  #: the provider refused or failed this request (or the whole batch)
    BATCH_CANCELLED = "batch_cancelled"  #: the batch was cancelled (``run.batch_cancel``)
    # read side only: a selected sample with neither a row nor a failure (MLflow's samples table)
    NOT_RUN = "not_run"


class Actor(str, Enum):
    """Who made a model call or failed: the ``actor`` of a trajectory's ``turns`` and of a
    ``failed.jsonl`` row (``Failure.actor``), the key of ``usage_by_actor`` and of a run's
    prices. A value is written as its plain string.

    The model under test is ``agent`` whether it answers one prompt or plays a rollout (the
    name the solver protocol, the turns, the prices and the endpoints already used). Runs
    written before this list called it ``model`` in ``failed.jsonl``; the journal reader
    (:func:`evalkit.journal.read_failures`) reads that as ``agent``.
    """

    AGENT = "agent"  #: the model under test
    USER = "user"  #: the user simulator of a multi-turn rollout (ACEBench ``agent_multi_turn``)
    JUDGE = "judge"  #: an LLM judge of a task's ``llm_judge`` scorer (evalkit.benchmarks.task.judge)
    ENVIRONMENT = "environment"  #: the solver or a rollout's simulated environment raised, or the rollout's worker died
    SCORER = "scorer"  #: the answer came back and was not scored (``benchmark.score_budget_s`` spent)


#: the name old runs gave the model under test in ``failed.jsonl`` (read as :attr:`Actor.AGENT`)
LEGACY_AGENT_ACTOR = "model"


def canonical_json(obj: Any) -> str:
    """Deterministic JSON text (sorted keys, no whitespace, UTF-8 kept) used for hashing."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def sha256_hex(text: str | bytes) -> str:
    """SHA-256 hex digest of ``text`` (str is UTF-8 encoded; a lone surrogate, which model
    text may hold, as its three bytes: ``surrogatepass``, the same digest for any other text)."""
    if isinstance(text, str):
        text = text.encode("utf-8", errors="surrogatepass")
    return hashlib.sha256(text).hexdigest()


@dataclass
class Sample:
    """One graded unit of a benchmark.

    Attributes:
        id: stable id across runs (the benchmark's own id, e.g. ``en/normal_atom_bool_0``).
        subset: the category / subset the sample belongs to (e.g. ``normal_atom_bool``).
        data: benchmark-private payload (prompt record, gold answer, language, ...).
    """

    id: str
    subset: str
    data: dict[str, Any] = field(default_factory=dict)


class PackedSamples(Sequence[Sample]):
    """Samples held packed, for selections of a million samples (issue 46 item 3: the
    driver's memory flat in the number of samples): the ids and subsets as lists (a subset's
    string held once), each sample's ``data`` serialized (:mod:`marshal`, exact for JSON
    values, tuples and bytes; a ``data`` that holds anything else is kept as it is) and
    compressed :attr:`BLOCK` samples at a time (zlib: the field names a row repeats are held
    once a block). About 0.1 KB per sample of an arith row (its id and the lists included)
    against 0.75 KB held as :class:`Sample` objects. A read decompresses its block (the last
    :attr:`RAW_BLOCKS` read are kept: reads in order cost one decompression a block).

    ``samples[i]`` and iteration give a new :class:`Sample` each time (its ``data`` a new
    dict: a change to it is not kept — pack samples once they are final); a slice is a
    :class:`PackedSamples`. Only evalkit's own bytes are ever unpacked.
    """

    #: samples per compressed block of the data buffer
    BLOCK = 512
    #: blocks kept decompressed: readers a block apart (the dispatch ahead, the offline
    #: model's answers behind it) do not decompress a block a read
    RAW_BLOCKS = 4

    def __init__(self, samples: Iterable[Sample] = ()):
        self.ids: list[str] = []
        self.subsets: list[str] = []
        self._names: dict[str, str] = {}
        self._blocks: list[bytes] = []  # zlib of every full block's marshal bytes
        self._open = bytearray()  # the last block's, not yet compressed
        self._ends = array("Q")  # each sample's end within its block (a block may pass 4 GiB)
        self._raws: tuple[tuple[int, bytes], ...] = ()  # the last blocks decompressed, newest first (replaced whole)
        self._kept: dict[int, Sample] = {}  # a sample whose data marshal cannot hold (or a subclass)
        self._positions: dict[str, int] | None = None
        for sample in samples:
            self.append(sample)

    def append(self, sample: Sample) -> None:
        """Add ``sample`` at the end (packed now: later changes to it are not seen)."""
        i = len(self.ids)
        self._positions = None
        self.ids.append(sample.id)
        self.subsets.append(self._names.setdefault(sample.subset, sample.subset))
        if type(sample) is Sample:
            try:
                self._open += marshal.dumps(sample.data)
            except ValueError:  # an object marshal does not know: held as it is
                self._kept[i] = sample
        else:
            self._kept[i] = sample
        self._ends.append(len(self._open))
        if len(self.ids) % self.BLOCK == 0:  # a full block: compressed (an arith row's ~130 bytes hold in ~25)
            self._blocks.append(zlib.compress(self._open, 1))
            self._open = bytearray()

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> Sample: ...

    @overload
    def __getitem__(self, i: slice) -> "PackedSamples": ...

    def __getitem__(self, i: int | slice) -> "Sample | PackedSamples":
        if isinstance(i, slice):
            return PackedSamples(self[j] for j in range(len(self))[i])
        if i < 0:
            i += len(self.ids)
        if not 0 <= i < len(self.ids):
            raise IndexError(i)
        kept = self._kept.get(i)
        if kept is not None:
            return kept
        block = i // self.BLOCK
        if block == len(self._blocks):
            raw: bytes | bytearray = self._open
        else:
            raws = self._raws  # one snapshot: another thread may replace it meanwhile
            raw = next((r for b, r in raws if b == block), None)  # type: ignore[assignment]
            if raw is None:
                raw = zlib.decompress(self._blocks[block])
                self._raws = ((block, raw), *raws[: self.RAW_BLOCKS - 1])
        start = self._ends[i - 1] if i % self.BLOCK else 0
        return Sample(self.ids[i], self.subsets[i], marshal.loads(memoryview(raw)[start : self._ends[i]]))

    def __iter__(self) -> Iterator[Sample]:
        for i in range(len(self.ids)):
            yield self[i]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the caches (a worker's copy, a digest of what is sent: the same
        bytes whatever was read before)."""
        return {**self.__dict__, "_raws": (), "_positions": None}

    def id_positions(self) -> dict[str, int]:
        """``{sample id: position}``, built once and shared by every reader of the selection
        (request hashes, the journal's epochs, the statistics): one index per run, not one each."""
        if self._positions is None:
            self._positions = {sid: i for i, sid in enumerate(self.ids)}
        return self._positions

    def nbytes(self) -> int:
        """The packed data's size in bytes, compressed (the data only, not the ids)."""
        return sum(map(len, self._blocks)) + len(self._open)


def sample_keys(samples: Sequence[Sample]) -> tuple[Sequence[str], Sequence[str]]:
    """``(ids, subsets)`` of ``samples`` in order, each a sequence: a :class:`PackedSamples`'
    own lists (no sample unpacked), else read from the samples."""
    if isinstance(samples, PackedSamples):
        return samples.ids, samples.subsets
    return [s.id for s in samples], [s.subset for s in samples]


def id_positions(samples: Sequence[Sample]) -> dict[str, int]:
    """``{sample id: position in samples}``: a :class:`PackedSamples`' shared index, else a new dict."""
    if isinstance(samples, PackedSamples):
        return samples.id_positions()
    return {s.id: i for i, s in enumerate(samples)}


@dataclass
class Request:
    """What is sent to a model for one sample.

    Exactly one of ``messages`` (chat: list of ``{"role", "content"}``) or ``prompt``
    (text completion) is set. ``params`` are every parameter sent besides the prompt: the
    resolved generation parameters (temperature, max_tokens, top_p, stop, seed) and, when
    the model config has one, ``extra_body`` (provider fields, e.g. reasoning settings); the
    engine fills them from the resolved config. ``epoch`` is the repeat index of the sample
    (0 for the first). ``images``: the bytes of each image part of ``messages`` by SHA-256
    (:mod:`evalkit.images`); not hashed — the parts carry the digests, which the
    hashes cover —, resolved into ``data:`` URLs only when the request is sent.
    """

    sample_id: str
    subset: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    #: benchmark hints for the engine, not sent (e.g. ``answer_prefix`` of completion mode)
    meta: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    images: dict[str, bytes] = field(default_factory=dict, repr=False)

    def prompt_hash(self) -> str:
        """SHA-256 of the exact prompt (messages or text), independent of the model."""
        return sha256_hex(canonical_json({"messages": self.messages, "prompt": self.prompt}))

    def request_hash(self, model_id: str) -> str:
        """SHA-256 over model id + every parameter sent + exact prompt (+ the epoch when it is
        not 0); keys the response cache and resume. An empty ``extra_body`` is not sent and
        not hashed, and epoch 0 hashes as before epochs existed, so older caches stay valid."""
        identity: dict[str, Any] = {"model": model_id, "params": self.params, "messages": self.messages, "prompt": self.prompt}
        if self.epoch:
            identity["epoch"] = self.epoch
        return sha256_hex(canonical_json(identity))


@dataclass
class Completion:
    """A model's answer to one request.

    ``text`` is the final content (reasoning returned in a separate provider field goes
    to ``reasoning``, never into ``text``). ``usage`` holds the provider's token counts
    (``prompt_tokens``, ``completion_tokens``, and ``reasoning_tokens`` /
    ``cached_prompt_tokens`` when reported, see :mod:`evalkit.providers`), ``None`` when it
    reported none (offline models report none); ``latency_s`` is wall seconds of the
    successful attempt; ``attempts`` counts tries including the successful one (0 for a
    cache hit); ``throttled`` counts the attempts the provider answered with HTTP 429 (the
    engine's concurrency control backs off on them).
    """

    text: str | None
    finish_reason: str | None = None
    reasoning: str | None = None
    usage: dict[str, int] | None = None
    latency_s: float = 0.0
    attempts: int = 1
    cached: bool = False
    throttled: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Its fields as a new dict (``usage`` copied): what :func:`dataclasses.asdict` gives,
        without its deep copy of every value (this is on every answer's path)."""
        return {**self.__dict__, "usage": dict(self.usage) if self.usage is not None else None}


@dataclass
class Failure:
    """A request that did not produce a scorable answer (never scored, see failure protocol).

    ``error_kind`` is an :class:`ErrorKind` value (its plain string; the list and meaning of
    each live there). ``actor`` names who failed, an :class:`Actor` value
    (``agent``: the model under test; ``user``; ``judge``; ``environment``; ``scorer``). ``throttled`` counts HTTP 429
    answers among the attempts. ``usage``: the tokens the failed answer reported (an empty
    answer still read its prompt and may have reasoned), ``None`` when none were
    reported. ``budget_exceeded``: the sample was never sent because the run's budget was
    spent (``run.max_cost_usd`` / ``run.max_total_tokens``; ``attempts`` 0).
    ``score_budget_exceeded``: the answer came back but was not scored because the run's
    scoring time (``benchmark.score_budget_s``) was spent; a resume scores it. ``reasoning``:
    reasoning text the failed answer carried (an answer that reasoned and said nothing).
    """

    error_kind: str
    message: str
    attempts: int = 1
    actor: str = Actor.AGENT.value
    throttled: int = 0
    usage: dict[str, int] | None = None
    reasoning: str | None = None


@dataclass
class SampleScore:
    """A benchmark's verdict on one sample.

    Attributes:
        scores: flat ``{name: number}`` (ACEBench ``accuracy``; SOBHard ``sample_pass``...).
        parsed: the decoded answer (JSON-serialisable) or ``None`` if it did not decode.
        checks: ``{check_name: bool}`` where the benchmark has named checks.
        failed_checks: names of the failed checks (SOBHard: constraint ids).
        status: ``ok`` | ``truncated`` | ``format_error``.
        detail: human-readable reason of a failed verdict (first error of the scorer).
        scoring_rule: which of the benchmark's scoring rules decided the verdict, where it
            has several (ACEBench ``benchmark.scoring``); ``None`` (not recorded) otherwise.
    """

    scores: dict[str, float]
    parsed: Any = None
    checks: dict[str, bool] = field(default_factory=dict)
    failed_checks: list[str] = field(default_factory=list)
    status: str = "ok"
    detail: str | None = None
    scoring_rule: str | None = None


@dataclass
class Trajectory:
    """What solving one sample produced: one ``generate`` for a single-turn sample, the
    whole conversation for an agent rollout (multi-step or multi-turn).

    Attributes:
        messages: the transcript of a rollout, in order: ``{"role": "user"|"agent"|
            "execution"|..., "content": str}`` plus any per-message fields the benchmark
            keeps (calls, observation, turn index). Empty for a single generate (the
            request and ``final_output`` are the whole exchange).
        turns: one entry per model call, filled by the engine: ``{"actor": "agent"|"user",
            "latency_s", "usage", "attempts", "throttled", "cached", "finish_reason",
            "reasoning", "started_at", "ended_at"}`` (the last two: Unix seconds when the
            call began and ended, retries included; absent in journals written before them).
        final_output: the answer to score: the model's text (with a completion-mode answer
            prefix in front of it), or the last message of a rollout (``output`` in the
            journal).
        data: benchmark results needed to score offline (ACEBench: the end state and the
            process trace) and, in completion mode, ``raw_output`` (the bare continuation).
        failure: set when a model call failed after its retries (actor ``agent`` /
            ``user``) or the environment crashed (actor ``environment``); such a sample is
            recorded in ``failed.jsonl`` and never scored.
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    final_output: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    failure: Failure | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, obj: Any) -> "Trajectory":
        """The trajectory of a journal row's ``trajectory`` field (``to_dict()`` output).
        Tolerant: fields of the wrong type come back empty, unknown keys are ignored (a
        journal is data, and scoring must never raise on it)."""
        obj = obj if isinstance(obj, dict) else {}
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in obj.items() if k in names and k != "failure"}
        for key, kind, empty in (("messages", list, []), ("turns", list, []), ("data", dict, {})):
            if not isinstance(kw.get(key), kind):
                kw[key] = empty
        if not isinstance(kw.get("final_output"), str):
            kw["final_output"] = ""
        return cls(**kw)


class Generator(Protocol):
    """Anything a solver can ask: ``async generate(Request) -> Completion``; a failed call
    raises (``evalkit.models.base.ModelCallError``), and the solver lets it propagate."""

    async def generate(self, request: Request) -> Completion:  # pragma: no cover - protocol
        ...
