"""``run.batch=true``: the run's requests sent through the provider's batch API (about half
the price, answered within 24 hours), never paid twice, recorded as live answers are.

:class:`BatchExecutor` is the run's executor (:mod:`evalkit.engine.protocol`) instead of
the Ray workers; the run's own stages prepare, journal, score and finalize as for a live
run. What it does:

1. **What is pending.** The journal's pending units (single-turn only: a run whose
   selection holds agent rollouts is refused in one line, :func:`check_batchable`) are
   split by request hash (the live request's hash: same model id, parameters, prompt and
   epoch) into those the response cache answers (journaled at once, cost 0, never put in a
   batch), those a recorded batch still owes (polled, never sent again), those a collected
   batch answered (journaled) and the rest, which go into new batches (one line per
   distinct request hash; split by ``run.batch_max_requests`` lines and
   ``run.batch_max_bytes`` bytes per input file, never over the provider's documented limits,
   :data:`PROVIDER_LIMITS`; images travel inline, base64 in their lines, so a vision run's
   files are cut by bytes long before the request count; :func:`input_files` plans them one
   line at a time and each file is built again, alone, when it is uploaded).
2. **Budget.** With ``run.max_cost_usd`` / ``run.max_total_tokens``, the new batches are
   reserved whole before anything is sent: their prompt tokens (litellm's
   ``token_counter``) plus ``generation.max_tokens`` per request, at batch prices, plus
   the spend journaled and the reservations of batches still running. Over a limit: one
   line, nothing sent (:class:`~evalkit.errors.ConfigError`, exit 2).
3. **Record before sending.** ``batch/batches.json`` in the run directory records each
   batch's input digest (SHA-256 of the input file) and request hashes before the upload,
   and the upload's intent, then the provider's file id, then its batch id (each written
   atomically). A driver killed at any point resumes from there: a file whose upload began
   is first looked up at the provider by its digest-bearing name, a recorded file is not
   uploaded again, a file with no recorded batch is first looked up among the provider's batches
   (:meth:`~evalkit.models.litellm_batch.BatchClient.find`) and created only if none was
   made of it, a recorded batch is polled.
4. **The wait.** Each call of the batch API is bounded by ``backend.timeout_s``
   (:class:`BatchError` past it). A light poll loop in the driver (no Ray, no model
   server): every recorded batch not yet collected is retrieved after ``run.batch_poll_s`` seconds, the
   interval growing ×1.5 up to ``run.batch_poll_max_s``; each change of a batch's status
   or counts is one console line. ``run.batch_detach=true`` returns after submitting (exit
   code 3). Ctrl-C leaves the batches running (asked whether to cancel them when the
   console is a terminal) and names the ``run.resume=<dir>`` that collects them;
   ``run.batch_cancel=true`` (with ``run.resume``) cancels them.
5. **Collect.** A batch that ended (completed, expired, failed or cancelled) has its output
   and error files kept in ``batch/<batch id>.output.jsonl`` / ``.errors.jsonl``. Each of
   its units is then solved by the benchmark's own solver through the response cache
   (:func:`~evalkit.engine.solve.solve_unit`), its model answering from those files, and
   journaled, scored and traced by the run's journaler exactly as a live answer. A request
   with no answer is a failure of kind ``batch_expired`` / ``batch_failed`` /
   ``batch_cancelled`` in ``failed.jsonl``, never scored; a resume sends only those again,
   in a new batch.

Costs are at batch prices (:func:`evalkit.providers.batch_price`); ``summary.json`` →
``engine.batch`` says the run was batched, with each batch's ids, counts and timings, and
``engine.phases.batch_wait_s`` how long the driver waited.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

from evalkit import secrets
from evalkit.config import RunSettings
from evalkit.engine.cache import cache_get, open_cache
from evalkit.engine.protocol import Drained, ExecutorBase
from evalkit.engine.solve import solve_unit
from evalkit.engine.work import WorkItem
from evalkit.errors import ConfigError, EvalkitError, RunDirError, first_line, printable, resume_arg, within
from evalkit.models.litellm_batch import (BATCH_CANCELLED, BATCH_EXPIRED, BATCH_FAILED, BatchAnswers, BatchClient, as_plain,
                                          batch_refusal, read_batch_files)
from evalkit.providers import Price, batch_price, estimate_prompt_tokens
from evalkit.specs import ActorSpec
from evalkit.types import Completion, Failure, Trajectory, sha256_hex
from evalkit.untrusted import MAX_RECORD_BYTES, read_json

if TYPE_CHECKING:
    from evalkit.engine.budget import Budget
    from evalkit.engine.plan import RunPlan

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")

#: the run directory's batch records
BATCH_DIR = "batch"
RECORD = "batches.json"
#: a batch's statuses after which the provider does no more work on it
TERMINAL = ("completed", "expired", "failed", "cancelled")
#: consecutive failed polls of one batch before the run stops (it stays at the provider)
MAX_POLL_ERRORS = 8
_KIND_OF_STATUS = {"expired": BATCH_EXPIRED, "cancelled": BATCH_CANCELLED, "failed": BATCH_FAILED}


class BatchError(EvalkitError):
    """The provider's batch API failed in a way retrying did not mend (one line, exit 1);
    whatever was submitted is recorded in ``batch/batches.json`` and a resume polls it."""

    exit_code = 1


# ------------------------------------------------------------------------------------------
# before anything is written: what can be batched
# ------------------------------------------------------------------------------------------
def check_batchable(plan: RunPlan) -> None:
    """Refuse ``run.batch`` in one line when the run cannot be batched: an offline model or
    evalkit's own server (no provider), a provider litellm cannot batch
    (:func:`~evalkit.models.litellm_batch.batch_refusal`), or agent rollouts in the
    selection (a rollout's later turns depend on its earlier answers).

    Raises:
        ConfigError: the reason, before anything is sent or written.
    """
    agent = plan.specs.models.agent
    if agent.model.kind != "litellm" or agent.backend.kind != "api":
        raise ConfigError(f"run.batch: model={agent.model.name} is not a provider's API (model.kind={agent.model.kind}, "
                          f"backend={agent.backend.kind}); batches go to a provider; run without run.batch")  # fmt: skip
    why = batch_refusal(str(agent.model.provider_model))
    if why:
        raise ConfigError(why)
    rollouts = sorted({u.sample.subset for u in plan.units if u.rollout})
    if rollouts:
        n = sum(1 for u in plan.units if u.rollout)
        raise ConfigError(f"run.batch: {n} selected samples are multi-turn agent rollouts (subsets {rollouts}), which a "
                          "batch cannot carry (each turn depends on the last answer); deselect those subsets "
                          "(benchmark.subsets=...) or run them without run.batch")  # fmt: skip


def client_of(agent: ActorSpec) -> BatchClient:
    """The batch endpoint of the run's model (its ``backend.api_base`` and key)."""
    return BatchClient(str(agent.model.provider_model), agent.model.api, agent.api_base, agent.api_key, agent.timeout_s)


def batch_prices(agent: ActorSpec) -> dict[str, Price | None]:
    """The run's prices at batch rates (``model.pricing.batch_*`` or litellm's
    ``*_cost_per_token_batches``); ``None`` (costs null, never 0) when neither is known."""
    return {"agent": batch_price(agent.model, agent.backend.kind)}


def dry_run_section(plan: RunPlan, prompt_tokens: int, requests: int) -> str:
    """The dry run's batched estimate (``run.batch=true``), to print beside the live one:
    the ``prompt_tokens`` of the ``requests`` to send at the batch price, and the bound if
    every answer used ``generation.max_tokens``.

    Raises:
        ConfigError: the run cannot be batched (:func:`check_batchable`).
    """
    check_batchable(plan)
    agent = plan.specs.models.agent
    price = batch_price(agent.model, agent.backend.kind)
    if price is None:
        return "batched: cost unknown (no batch price: set model.pricing.batch_input_per_mtok / batch_output_per_mtok)"
    low = price.cost({"prompt_tokens": prompt_tokens, "completion_tokens": 0}) or 0.0
    text = f"batched ({price.describe()}): estimated cost ≥ ${low:.4f}"
    max_tokens = agent.max_tokens
    if max_tokens:
        high = price.cost({"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens * requests}) or 0.0
        text += f", ≤ ${high:.4f} if every answer used max_tokens={max_tokens}"
    return text


def refuse_live_resume(run_dir: Path) -> None:
    """A run resumed without ``run.batch`` must not buy again what a batch still running at
    the provider will answer.

    Raises:
        RunDirError: ``run_dir`` records batches not yet collected.
    """
    running = [e["batch_id"] or e["input_sha256"][:12] for e in BatchRecord(run_dir).entries if not e.get("collected")]
    if running:
        raise RunDirError(f"run.resume: {run_dir} has batches not yet collected ({', '.join(map(str, running))}); "
                          "resume with run.batch=true to collect them (or run.batch=true run.batch_cancel=true to cancel "
                          "them), then resume live")  # fmt: skip


# ------------------------------------------------------------------------------------------
# input files: split by the provider's limits, one line at a time
# ------------------------------------------------------------------------------------------
#: ``{provider: (most requests, most bytes)}`` of one batch input, as each provider documents
#: it. OpenAI: "The file can contain up to 50,000 requests, and can be up to 200 MB in size"
#: (API reference, Create batch, ``input_file_id``:
#: https://platform.openai.com/docs/api-reference/batch/create). Anthropic: "A Message Batch is
#: limited to either 100,000 Message requests or 256 MB in size, whichever is reached first"
#: (https://docs.anthropic.com/en/docs/build-with-claude/batch-processing, Batch limitations;
#: litellm 1.110 cannot batch it yet, :data:`~evalkit.models.litellm_batch._WHY_NOT`). MB are
#: read as 10^6 bytes, the smaller reading. Providers not named (azure, hosted_vllm,
#: litellm_proxy, xai) are held to ``run.batch_max_requests`` / ``run.batch_max_bytes`` alone,
#: whose defaults are OpenAI's.
PROVIDER_LIMITS = {"openai": (50_000, 200_000_000), "anthropic": (100_000, 256_000_000)}


def batch_limits(provider: str, max_requests: int, max_bytes: int) -> tuple[int, int]:
    """``(requests, bytes)`` one input file of ``provider`` may hold: the configured
    ``run.batch_max_requests`` / ``run.batch_max_bytes``, never over the provider's documented
    limits (:data:`PROVIDER_LIMITS`)."""
    most_requests, most_bytes = PROVIDER_LIMITS.get(provider, (max_requests, max_bytes))
    return min(max_requests, most_requests), min(max_bytes, most_bytes)


@dataclass
class InputFile:
    """One batch input file as planned: its lines' request hashes in order, its size in
    bytes and the SHA-256 of its bytes (the lines themselves are not kept)."""

    request_hashes: list[str]
    bytes: int
    sha256: str


def input_files(lines: Iterable[tuple[str, bytes]], max_requests: int, max_bytes: int,
                who: Callable[[str], str] | None = None) -> list[InputFile]:  # fmt: skip
    """``(request hash, line)`` pairs, in order, cut into input files of at most
    ``max_requests`` lines and ``max_bytes`` bytes each (a file ends before the line that
    would pass either). Each line is read once and let go, only its size and its file's
    running digest kept: a batch whose lines carry images (base64, in each line) is planned
    one line at a time, and each file is built again, alone, when it is uploaded.

    ``who``: the words naming a request hash's sample in a refusal (``sample 'en/x',
    epoch 0``); the hash alone without it.

    Raises:
        ConfigError: one line alone is over ``max_bytes`` (a request whose images pass the
            provider's file limit cannot be batched), naming its sample.
    """
    files: list[InputFile] = []
    digest = hashlib.sha256()
    for h, line in lines:
        if len(line) > max_bytes:
            named = f"{who(h)} (request {h[:12]})" if who is not None else f"request {h[:12]}"
            raise ConfigError(f"run.batch_max_bytes: {named} alone is {len(line)} bytes as a batch line, over the "
                              f"{max_bytes} bytes an input file may hold (run.batch_max_bytes, the provider's limit); "
                              "its images are sent inline, base64: shrink them (prompt.image_max_side) or run it "
                              "without run.batch")  # fmt: skip
        if not files or len(files[-1].request_hashes) >= max_requests or files[-1].bytes + len(line) > max_bytes:
            if files:
                files[-1].sha256 = digest.hexdigest()
            files.append(InputFile([], 0, ""))
            digest = hashlib.sha256()
        files[-1].request_hashes.append(h)
        files[-1].bytes += len(line)
        digest.update(line)
    if files:
        files[-1].sha256 = digest.hexdigest()
    return files


def _sample_words(unit: WorkItem) -> str:
    """``sample 'en/x'`` (``, epoch 2`` after a first epoch; ``, and its N images`` with
    images): a work item as a console line names it."""
    images = len(unit.request.images or {})
    return (f"sample {printable(repr(unit.sample.id), 120)}" + (f", epoch {unit.request.epoch}" if unit.request.epoch else "")
            + (f", with {images} image{'s' if images != 1 else ''}" if images else ""))  # fmt: skip


# ------------------------------------------------------------------------------------------
# the record: batch/batches.json
# ------------------------------------------------------------------------------------------
_ENTRY_FIELDS = {
    "input_sha256": str, "request_hashes": list, "n_requests": int, "bytes": int, "file_id": (str, type(None)),
    "batch_id": (str, type(None)), "status": str, "collected": bool,
}  # fmt: skip


class BatchRecord:
    """``batch/batches.json``: ``{"batches": [entry, ...]}``, one entry per input file:
    ``input_sha256``, ``request_hashes`` (the input's lines, in order), ``n_requests``,
    ``bytes``, ``reserved_usd`` / ``reserved_tokens`` (the budget it holds), ``file_id`` and
    ``batch_id`` (``None`` until the provider gave them), ``status`` (``prepared``,
    ``uploading`` (the upload begun: a resume looks for the file by its name first),
    ``uploaded``, then the provider's), ``counts`` (the provider's request counts),
    ``prepared_at`` / ``submitted_at`` / ``ended_at`` (ISO 8601 UTC), ``provider_times``
    (the provider's Unix timestamps), ``errors`` (a failed batch's reason) and ``collected``
    (its output and error files are kept and its units journaled).

    Raises:
        RunDirError: the file exists but is not such a record (one line).
    """

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir) / BATCH_DIR
        self.path = self.dir / RECORD
        self.entries: list[dict[str, Any]] = []
        if self.path.is_symlink():
            raise RunDirError(f"run.resume: {self.path} is a symbolic link; evalkit reads only the run's own files")
        if self.path.exists():
            self.entries = self._read()

    def _read(self) -> list[dict[str, Any]]:
        obj = read_json(self.path, MAX_RECORD_BYTES, root=self.dir, follow=False, what="a batch record", error=RunDirError)
        entries = obj.get("batches") if isinstance(obj, dict) else None
        if not isinstance(entries, list) or not all(_entry_ok(e) for e in entries):
            raise RunDirError(f"run.resume: {self.path} is not an evalkit batch record")
        return entries

    def save(self) -> None:
        """Write the record atomically (a temporary file renamed over it)."""
        self.dir.mkdir(exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"batches": self.entries}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def owed(self) -> set[str]:
        """Request hashes that batches not yet collected will answer."""
        return {h for e in self.entries if not e["collected"] for h in e["request_hashes"]}

    def reserved(self) -> tuple[float, int]:
        """``(USD, tokens)`` the batches not yet collected hold of the budget."""
        live = [e for e in self.entries if not e["collected"]]
        return (sum(float(e.get("reserved_usd") or 0.0) for e in live), sum(int(e.get("reserved_tokens") or 0) for e in live))


def _entry_ok(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    for key, kind in _ENTRY_FIELDS.items():
        if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool) and kind is int:
            return False
    return all(isinstance(h, str) and len(h) == 64 for h in entry["request_hashes"])


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


# ------------------------------------------------------------------------------------------
# budget: the whole batch reserved before it is sent
# ------------------------------------------------------------------------------------------
def reserve(run: RunSettings, agent: ActorSpec, units: list[WorkItem], price: Price | None, spent: tuple[float | None, int | None],
            held: tuple[float, int]) -> tuple[float | None, int | None]:  # fmt: skip
    """``(USD, tokens)`` the new batch of ``units`` reserves: estimated prompt tokens plus
    ``generation.max_tokens`` per request, at the batch ``price``; ``(None, None)`` without a
    budget. ``spent``: the run's ``(USD, tokens)`` so far (``None``: unknown;
    :attr:`~evalkit.engine.budget.Budget.cost_usd` / ``tokens``); ``held``: what batches
    still running hold already.

    Raises:
        ConfigError: the reservation, what the journal spent and ``held`` together pass
            ``run.max_cost_usd`` or ``run.max_total_tokens``, or cannot be bounded (no
            ``generation.max_tokens``, no batch price, an unknown spend) — nothing is sent.
    """
    if run.max_cost_usd is None and run.max_total_tokens is None:
        return None, None
    max_tokens = agent.max_tokens
    if not max_tokens:
        raise ConfigError("run.batch: a budget (run.max_cost_usd / run.max_total_tokens) needs generation.max_tokens to "
                          "reserve a whole batch before it is sent; set it")  # fmt: skip
    prompt = sum(estimate_prompt_tokens(str(agent.model.provider_model), u.request.messages, u.request.prompt) for u in units)
    tokens = prompt + max_tokens * len(units)
    cost = price.cost({"prompt_tokens": prompt, "completion_tokens": max_tokens * len(units)}) if price is not None else None
    spent_usd, spent_tokens = spent
    fix = "raise it or select fewer samples (run.limit); nothing was sent"
    if run.max_cost_usd is not None:
        if cost is None or spent_usd is None:
            raise ConfigError("run.max_cost_usd: the batch cannot be priced (no batch price, or an earlier spend unknown); "
                              "set model.pricing.batch_input_per_mtok / batch_output_per_mtok; nothing was sent")  # fmt: skip
        total = spent_usd + held[0] + cost
        if total > run.max_cost_usd:
            raise ConfigError(f"run.max_cost_usd: a batch of {len(units)} requests may cost up to ${cost:.6g} at batch prices "
                              f"(prompts + max_tokens={max_tokens} each); with ${spent_usd + held[0]:.6g} spent or held that "
                              f"is over run.max_cost_usd={run.max_cost_usd:g}; {fix}")  # fmt: skip
    if run.max_total_tokens is not None:
        if spent_tokens is None or spent_tokens + held[1] + tokens > run.max_total_tokens:
            raise ConfigError(f"run.max_total_tokens: a batch of {len(units)} requests may use up to {tokens} tokens "
                              f"(prompts + max_tokens={max_tokens} each); with {spent_tokens} spent and {held[1]} held "
                              f"that is over run.max_total_tokens={run.max_total_tokens}; {fix}")  # fmt: skip
    return cost, tokens


# ------------------------------------------------------------------------------------------
# the executor
# ------------------------------------------------------------------------------------------
class BatchExecutor(ExecutorBase):
    """:class:`~evalkit.engine.protocol.Executor` of a ``run.batch`` run over its pending
    units (all known when it is made; steps 1-5 of the module docstring).
    :meth:`wait_ready` sorts them and records the new batches, reserved against the budget;
    the first :meth:`submit` starts the one task that sends, waits and collects; a unit's
    :meth:`submit` returns once its batch is collected (at once for a cache hit), or raises
    :class:`~evalkit.engine.protocol.Drained` for a unit left with the provider
    (``run.batch_detach``, :meth:`drain`). ``ahead``: every unit is taken at once."""

    keeps_window = True

    def __init__(self, plan: "RunPlan", run_dir: Path, pending: list[WorkItem], cache_dir: Path | None):
        self.plan, self.run_dir, self.pending = plan, Path(run_dir), pending
        self.run, self.agent = plan.specs.run, plan.specs.models.agent
        self.ahead = len(pending)
        self.client = client_of(self.agent)
        self.model_id = plan.models.model_id
        self.record = BatchRecord(run_dir)
        self.cache = open_cache(cache_dir)
        self.answers: dict[str, Completion | Failure] = {}
        self.model = BatchAnswers(self.model_id, self.answers)
        self.solver = plan.bench.solver()
        self.by_hash: dict[str, WorkItem] = {}  # request hash → its first unit (the scheduler's are copies)
        for unit in pending:
            self.by_hash.setdefault(self._hash(unit), unit)
        self.spent: tuple[float | None, int | None] = (0.0, 0)
        self.wait_s, self.first_send, self.detached = 0.0, None, False
        self.cache_hits = self.sent = 0
        self.at_once: set[str] = set()  # request hashes answered without waiting (cache hits, collected)
        self.cancelled: set[str] = set()  # new with run.batch_cancel: never sent
        self.ended: dict[str, asyncio.Future[None]] = {}  # input digest → set when its batch is collected
        self.task: asyncio.Future[None] | None = None
        self.ready = False

    # ---- Executor -------------------------------------------------------------------
    @staticmethod
    def check(plan: "RunPlan") -> None:
        """Before anything is written: refuse what cannot be batched (:func:`check_batchable`)
        and price the plan at batch rates (:func:`batch_prices`)."""
        check_batchable(plan)
        plan.prices = batch_prices(plan.specs.models.agent)

    refuse_live_resume = staticmethod(refuse_live_resume)

    def set_budget(self, budget: Budget) -> None:
        """The run's spend so far (its journal and what interrupted attempts left
        unjournaled): new batches are reserved on top of it in :meth:`wait_ready`."""
        self.spent = (budget.cost_usd, budget.tokens)

    def wait_ready(self) -> None:
        """Sort the pending units and record the new batches (each one's input digest,
        request hashes and reservation, before anything is sent).

        Raises:
            ConfigError: the new batches do not fit the budget (nothing sent).
            RunDirError: the record cannot be read.
        """
        if self.ready:
            return
        self.ready = True
        for entry in self.record.entries:
            if entry["collected"]:
                self._load_collected(entry)
        owed, new = self.record.owed(), []
        for unit in self.pending:
            h = self._hash(unit)
            if self.cache is not None and cache_get(self.cache, h) is not None:
                self.cache_hits += 1
                self.at_once.add(h)
            elif isinstance(self.answers.get(h), Completion):
                self.at_once.add(h)  # collected before the driver stopped, not yet journaled
            elif h not in owed:
                new.append(unit)
        if new and self.run.batch_cancel:
            self.cancelled.update(self._hash(u) for u in new)  # a cancelled run sends nothing new
        elif new:
            self._prepare(new)

    async def submit(self, unit: WorkItem) -> Trajectory:
        h = self._hash(unit)
        if h in self.cancelled:
            return Trajectory(failure=Failure(BATCH_CANCELLED, "not sent: run.batch_cancel=true", attempts=0))
        if h not in self.at_once:
            if self.task is None:
                self.task = asyncio.ensure_future(self._drive())
                self.task.add_done_callback(lambda t: t.cancelled() or t.exception())  # its error reaches every submit
            entry = next((e for e in self.record.entries if not e["collected"] and h in e["request_hashes"]), None)
            if entry is not None:  # None: collected meanwhile (cancelled before it was created)
                await asyncio.shield(self._ended(entry))
        return await solve_unit(self.solver, unit, self.model, self.cache, self.agent.sent_params, {})

    def figures(self) -> dict[str, Any]:
        """``batch`` (``batched``, ``detached``, ``cache_hits``, ``requests_batched`` this
        attempt, ``wait_s`` and every recorded batch without its request hashes), the
        ``batch_wait_s`` phase, and the first upload's time as the first request's."""
        public = [{k: v for k, v in e.items() if k != "request_hashes"} for e in self.record.entries]
        figures = {"batched": True, "detached": self.detached, "cache_hits": self.cache_hits,
                   "requests_batched": self.sent, "wait_s": round(self.wait_s, 3), "batches": public}  # fmt: skip
        return {"batch": figures, "phases": {"batch_wait_s": self.wait_s}, "first_dispatch_perf": self.first_send}

    def cancel(self) -> None:
        """Ctrl-C: the batches stay at the provider; on a terminal, the user may cancel them."""
        running = [e["batch_id"] for e in self.record.entries if not e["collected"] and e["batch_id"]]
        if not running:
            return None
        resume = resume_arg(self.run_dir)
        status.info("batches left running at the provider: %s; collect them with %s run.batch=true "
                    "(cancel: %s run.batch=true run.batch_cancel=true)", ", ".join(running), resume, resume)  # fmt: skip
        if sys.stdin.isatty() and sys.stderr.isatty():
            try:
                answer = input("evalkit: cancel these batches at the provider? [y/N] ")
            except (EOFError, KeyboardInterrupt):
                return None
            if answer.strip().lower() in ("y", "yes"):
                self.ended = {}  # the run's loop is gone: no unit waits any more
                asyncio.run(self._cancel_all())
        return None

    def close(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.cache is not None:
            self.cache.close()

    def _hash(self, unit: WorkItem) -> str:
        return unit.request.request_hash(self.model_id)

    # ---- the one task: send, wait, collect --------------------------------------------
    def _ended(self, entry: dict[str, Any]) -> asyncio.Future[None]:
        """Set once ``entry``'s batch is collected (its units' :meth:`submit` go on), or
        failed with why they will not be answered in this attempt."""
        if entry["input_sha256"] not in self.ended:
            future = self.ended[entry["input_sha256"]] = asyncio.get_running_loop().create_future()
            future.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, even if no unit waits
        return self.ended[entry["input_sha256"]]

    def _end(self, entry: dict[str, Any], exc: BaseException | None = None) -> None:
        future = self._ended(entry)
        if future.done():
            return
        if exc is None:
            future.set_result(None)
        elif isinstance(exc, Exception):
            future.set_exception(exc)
        else:
            future.cancel()

    async def _drive(self) -> None:
        try:
            if self.run.batch_cancel:
                await self._cancel_all()
            for entry in self.record.entries:  # this attempt's, and any an earlier one recorded but did not create
                if not entry["collected"] and entry["batch_id"] is None and not self.draining:
                    await self._send(entry)
            left = [e for e in self.record.entries if not e["collected"] and e["batch_id"] is None]
            self.detached = self.run.batch_detach and any(not e["collected"] for e in self.record.entries)
            for entry in self.record.entries if self.detached else left:  # left with the provider, or never sent
                if not entry["collected"]:
                    self._end(entry, Drained(f"batch {entry['batch_id'] or 'not sent'} left running"))
            if not self.detached:
                await self._wait()
        except BaseException as exc:  # every unit waiting learns why: the stage stops with it
            for entry in self.record.entries:
                self._end(entry, exc)
            raise

    # ---- submit ---------------------------------------------------------------------
    def _prepare(self, units: list[WorkItem]) -> None:
        """Record the new batches' inputs (digests, request hashes, reservations): the
        budget is checked for all of them before any is sent."""
        distinct: dict[str, WorkItem] = {}
        for unit in units:
            distinct.setdefault(self._hash(unit), unit)
        run = self.run
        max_requests, max_bytes = batch_limits(self.client.provider, run.batch_max_requests, run.batch_max_bytes)
        files = input_files(((h, self.client.line(h, u.request)) for h, u in distinct.items()), max_requests, max_bytes,
                            who=lambda h: _sample_words(distinct[h]))  # fmt: skip
        if len(files) > 1:
            status.info("batch input split into %d files (at most %d requests and %d bytes each)", len(files), max_requests, max_bytes)
        price = self.plan.prices.get("agent")
        reservations = []
        held = self.record.reserved()
        for file in files:
            cost, tokens = reserve(self.run, self.agent, [distinct[h] for h in file.request_hashes], price, self.spent, held)
            held = (held[0] + (cost or 0.0), held[1] + (tokens or 0))
            reservations.append((cost, tokens))
        for file, (cost, tokens) in zip(files, reservations):
            self.record.entries.append({
                "input_sha256": file.sha256, "request_hashes": file.request_hashes, "n_requests": len(file.request_hashes),
                "bytes": file.bytes, "reserved_usd": cost, "reserved_tokens": tokens, "file_id": None, "batch_id": None,
                "status": "prepared", "counts": None, "prepared_at": _now(), "submitted_at": None, "ended_at": None,
                "provider_times": {}, "errors": None, "collected": False,
            })  # fmt: skip
        self.record.save()  # every digest recorded before anything is sent

    async def _send(self, entry: dict[str, Any]) -> None:
        """Upload (unless recorded) and create (unless the provider made one of the file)."""
        if self.first_send is None:
            self.first_send = time.perf_counter()
        if entry["file_id"] is None:
            data = self._input_of(entry)
            if sha256_hex(data) != entry["input_sha256"]:
                raise RunDirError(f"run.resume: the batch input {entry['input_sha256'][:12]} recorded in "
                                  f"{self.record.path} is not what this run builds; start a new run")  # fmt: skip
            name = f"evalkit-{entry['input_sha256'][:16]}.jsonl"  # the digest in the name: found again by it
            if entry["status"] == "uploading":  # an earlier driver died during this upload: the file may be there
                entry["file_id"] = await self._call("list files", self.client.find_file(name, len(data)))
                if entry["file_id"] is not None:
                    log.info("batch input %s found at the provider as %s: not uploaded again", name, entry["file_id"])
            if entry["file_id"] is None:
                entry["status"] = "uploading"
                self.record.save()  # the intent first: a driver killed during the upload looks for the file
                entry["file_id"] = await self._call("upload", self.client.upload(data, name))
            entry["status"] = "uploaded"
            self.record.save()
        else:
            found = await self._call("list", self.client.find(entry["file_id"]))
            if found is not None:
                self._record(entry, found)
                self.record.save()
                log.info("batch %s of file %s found at the provider: not created again", found.get("id"), entry["file_id"])
                return
        meta = {"evalkit_input_sha256": entry["input_sha256"][:64], "evalkit_run": self.run_dir.name[:500]}
        made = await self._call("create", self.client.create(entry["file_id"], meta))
        entry["submitted_at"] = _now()
        self.sent += entry["n_requests"]
        self._record(entry, made)
        self.record.save()
        status.info("batch %s submitted: %d requests (input sha256 %s, file %s)", made.get("id"), entry["n_requests"],
                    entry["input_sha256"][:12], entry["file_id"])  # fmt: skip

    def _input_of(self, entry: dict[str, Any]) -> bytes:
        by_hash = self.by_hash
        missing = [h for h in entry["request_hashes"] if h not in by_hash]
        if missing:
            raise RunDirError(f"run.resume: batch input {entry['input_sha256'][:12]} holds requests this run does not "
                              f"select ({len(missing)}); resume with the same selection")  # fmt: skip
        return b"".join(self.client.line(h, by_hash[h].request) for h in entry["request_hashes"])

    async def _call(self, what: str, call: Awaitable[Any]) -> Any:
        """One call of the provider's batch API, bounded by ``backend.timeout_s`` in all
        (litellm's own retries included).

        Raises:
            BatchError: it failed or did not answer in time (one line naming the resume).
        """
        try:
            return await within(call, self.client.timeout_s)
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError:
            raise BatchError(f"run.batch: the provider's batch API did not answer ({what}) within {self.client.timeout_s:g} s "
                             f"(backend.timeout_s); what was submitted is recorded in {self.record.path}; resume with "
                             f"{resume_arg(self.run_dir)}") from None  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - one line; the record says what was sent
            raise BatchError(f"run.batch: the provider's batch API failed ({what}: {type(exc).__name__}: "
                             f"{secrets.scrub(first_line(exc, 200))}); what was submitted is recorded in {self.record.path}; "
                             f"resume with {resume_arg(self.run_dir)}") from None  # fmt: skip

    def _record(self, entry: dict[str, Any], batch: dict[str, Any]) -> bool:
        """Copy the provider's view of a batch into its entry; True when it changed."""
        counts = batch.get("request_counts")
        counts = dict(counts) if isinstance(counts, dict) else as_plain(counts)
        before = (entry.get("status"), entry.get("counts"))
        entry["batch_id"] = str(batch.get("id"))
        entry["status"] = str(batch.get("status"))
        entry["counts"] = counts
        for key in ("output_file_id", "error_file_id"):
            if batch.get(key):
                entry[key] = str(batch[key])
        entry["provider_times"] = {k: batch[k] for k in ("created_at", "in_progress_at", "finalizing_at", "completed_at",
                                                         "expired_at", "failed_at", "cancelled_at") if batch.get(k)}  # fmt: skip
        if batch.get("errors"):
            entry["errors"] = json.loads(json.dumps(as_plain(batch["errors"]), default=str))
        return before != (entry["status"], entry["counts"])

    # ---- wait and collect -----------------------------------------------------------
    async def _wait(self) -> None:
        run = self.run
        delay = run.batch_poll_s
        errors: dict[str, int] = {}
        started = time.perf_counter()
        try:
            while True:
                open_entries = [e for e in self.record.entries if not e["collected"] and e["batch_id"]]  # sent
                if not open_entries:
                    return
                for entry in open_entries:
                    if entry["status"] in TERMINAL:
                        collecting = time.perf_counter()
                        await self._collect(entry)
                        started += time.perf_counter() - collecting  # downloading and journaling is not waiting
                if all(e["collected"] or not e["batch_id"] for e in self.record.entries):
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, run.batch_poll_max_s)
                for entry in [e for e in self.record.entries if not e["collected"] and e["batch_id"]]:
                    try:
                        got = await within(self.client.retrieve(entry["batch_id"]), self.client.timeout_s)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - a poll that failed is tried again, up to a bound
                        n = errors[entry["batch_id"]] = errors.get(entry["batch_id"], 0) + 1
                        log.warning("batch %s: poll failed (%s: %s), %d of %d", entry["batch_id"], type(exc).__name__,
                                    str(exc)[:200], n, MAX_POLL_ERRORS)  # fmt: skip
                        if n >= MAX_POLL_ERRORS:
                            await self._call("retrieve", self.client.retrieve(entry["batch_id"]))
                        continue
                    errors.pop(entry["batch_id"], None)
                    if self._record(entry, got):
                        self.record.save()
                        self._show(entry)
        finally:
            self.wait_s += time.perf_counter() - started

    def _show(self, entry: dict[str, Any]) -> None:
        c = entry.get("counts") or {}
        status.info("batch %s: %s, %s/%s done, %s failed", entry["batch_id"], entry["status"], c.get("completed", "?"),
                    c.get("total", entry["n_requests"]), c.get("failed", 0))  # fmt: skip

    async def _collect(self, entry: dict[str, Any]) -> None:
        """Keep an ended batch's files, then journal its units."""
        bdir = self.record.dir
        for key, suffix in (("output_file_id", "output"), ("error_file_id", "errors")):
            file_id = entry.get(key)
            if file_id:
                data = await self._call("content", self.client.content(str(file_id)))
                (bdir / f"{_safe(entry['batch_id'])}.{suffix}.jsonl").write_bytes(data)
        entry["collected"] = True
        entry["ended_at"] = _now()
        self._load_collected(entry)
        self.record.save()
        self._show(entry)
        self._end(entry)  # its units' submit() returns

    def _load_collected(self, entry: dict[str, Any]) -> None:
        """The answers a collected batch's kept files hold; a request of it without any
        line is a failure named by the batch's end (expired, cancelled, failed)."""
        chat = self.client.endpoint.endswith("chat/completions")
        bdir = self.record.dir
        owned = set(entry["request_hashes"])
        paths = [bdir / f"{_safe(entry['batch_id'])}.{suffix}.jsonl" for suffix in ("output", "errors")]
        got = read_batch_files(paths, owned, chat, str(entry["batch_id"]))
        for custom_id, answer in got.items():
            if not isinstance(self.answers.get(custom_id), Completion):
                self.answers[custom_id] = answer
        seen = set(got)
        kind = _KIND_OF_STATUS.get(entry["status"], BATCH_FAILED)
        why = f"batch {entry['batch_id']} ended {entry['status']} without answering it"
        if entry.get("errors"):
            why += f" ({json.dumps(entry['errors'], ensure_ascii=False)[:300]})"
        for h in owned - seen:
            if not isinstance(self.answers.get(h), Completion):
                self.answers[h] = Failure(kind, why, attempts=0)

    # ---- cancel and Ctrl-C ----------------------------------------------------------
    async def _cancel_all(self) -> None:
        for entry in self.record.entries:
            if not entry["collected"] and entry["batch_id"] and entry["status"] not in TERMINAL:
                self._record(entry, await self._call("cancel", self.client.cancel(entry["batch_id"])))
                status.info("batch %s: cancel requested (%s)", entry["batch_id"], entry["status"])
            elif not entry["collected"] and not entry["batch_id"]:
                entry.update(collected=True, status="cancelled", ended_at=_now())  # never created: nothing to cancel
                self._load_collected(entry)
                self._end(entry)
        self.record.save()


def _safe(batch_id: str | None) -> str:
    """A provider's batch id as a file name (anything but ``[A-Za-z0-9_-]`` replaced)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(batch_id or ""))[:200] or "batch"
