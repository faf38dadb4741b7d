"""What each selected sample of a finished run came to, read from its run directory: a
scored row of ``predictions.jsonl`` or a failure of ``failed.jsonl`` — one
:class:`Outcome` per selected sample (and epoch), which a tracker turns into one trace and
one row of the per-sample table.

The selection comes from the run's requests (the engine hands them to the observer; the
``evalkit.track`` command rebuilds them from the data): a journal row counts by the
journal's one rule (:mod:`evalkit.journal`, the engine's own). Without the requests (data
no longer at hand) the selection is every sample the journal holds plus the summary's
``failed_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evalkit.journal import FAILED, PREDICTIONS, read_failures, read_journal
from evalkit.errors import RunDirError
from evalkit.summary import Summary, read_summary
from evalkit.types import Request, canonical_json, sha256_hex

#: what a selected sample without a scored row and without a failure record failed of
NOT_RUN = {"error_kind": "not_run", "message": "no result and no failure was recorded for this sample", "actor": None}


def key_of(sample_id: str, epoch: int = 0) -> str:
    """A sample's key in a run: its id, or ``<id>@<epoch>`` for a repeat (epoch > 0)."""
    return f"{sample_id}@{epoch}" if epoch else str(sample_id)


@dataclass
class Outcome:
    """One selected sample of a run: its ``row`` (scored) or its ``failure`` (a
    ``failed.jsonl`` row, or :data:`NOT_RUN`), and the prompt it was sent (``messages`` for
    chat, ``prompt`` for completion mode; both ``None`` when unknown)."""

    sample_id: str
    subset: str
    epoch: int = 0
    row: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    #: builds the request whose prompt ``messages`` / ``prompt`` are, when they were left
    #: unbuilt (:meth:`loaded`); ``None`` once built, or when there is none
    source: Callable[[], Request] | None = field(default=None, compare=False, repr=False)

    def loaded(self) -> "Outcome":
        """This outcome, with ``messages`` / ``prompt`` built from :attr:`source` when they
        were left unbuilt (:func:`outcomes` builds only the prompts a tracker shows)."""
        if self.source is not None:
            request, self.source = self.source(), None
            self.messages, self.prompt = request.messages, request.prompt
        return self

    @property
    def key(self) -> str:
        return key_of(self.sample_id, self.epoch)

    @property
    def ok(self) -> bool:
        return self.row is not None

    def digest(self) -> str:
        """SHA-256 (hex) of what the sample's trace shows: the scored row's request hash,
        status, scores and output, or the failure's kind, actor and message; and, when the
        record holds LLM judges' verdicts (``judgements``), those. A trace whose digest is
        unchanged is not logged again."""
        if self.row is not None:
            r = self.row
            shown = ["ok", r.get("request_hash"), r.get("status"), r.get("scores"), r.get("output")]
        else:
            r = self.failure or NOT_RUN
            shown = ["failed", r.get("error_kind"), r.get("actor"), r.get("message"), r.get("request_hash")]
        if r.get("judgements"):
            shown.append(r.get("judgements"))
        return sha256_hex(canonical_json(shown))


def outcomes(run_dir: Path, summary: Summary, requests: list[Request] | None = None,
             hashes: dict[tuple[str, int], str] | None = None) -> list[Outcome]:  # fmt: skip
    """Every selected sample of the finished run in ``run_dir`` (its ``summary.json`` is
    ``summary``), in selection order. ``requests``: the run's requests, one per selected
    sample and epoch (see the module docstring for what happens without them). Rows count
    by the journal's one rule (:mod:`evalkit.journal`): with the requests, a row counts
    when its request hash is the request's; without them, the lines the engine found stale
    (``stale_lines``) are skipped; of the rest the first row wins. A row that cannot count
    (a bad ``sample_id``, ``epoch`` or ``scores``) is skipped, as the engine skips it
    (``evalkit.track`` refuses such a run before it gets here). The requests are read once
    (the engine's are built as they are read: each read renders the prompt again).

    ``hashes``: the plan's ``{(sample id, epoch): request hash}``. Given with engine
    requests that list their keys without building them (``requests.keys()`` →
    ``(sample id, epoch, subset)``, :class:`evalkit.engine.work.Requests`), no request is
    built here: each outcome's prompt is built when asked for (:meth:`Outcome.loaded`), so
    a run whose traces are a sample renders only those prompts."""
    run_dir = Path(run_dir)
    if requests is not None and hashes is not None and callable(getattr(requests, "keys", None)):
        return _unbuilt(run_dir, summary, requests, hashes)
    hashes = None
    if requests is not None:
        model_id = str(summary.model_id)
        selected = [(req.sample_id, req.subset, req.epoch, req.request_hash(model_id), req.messages, req.prompt) for req in requests]
        hashes = {(sid, epoch): digest for sid, _, epoch, digest, _, _ in selected}
    journal = read_journal(run_dir / PREDICTIONS, hashes, summary.stale_lines)
    failures = read_failures(run_dir / FAILED)
    if requests is None:
        out = [Outcome(sid, str(r.get("subset")), epoch, row=r) for (sid, epoch), r in journal.rows.items()]
        for sid in summary.failed_ids:
            failure = failures.get((sid, 0)) or NOT_RUN
            out.append(Outcome(str(sid), str(failure.get("subset")), failure=failure))
        return out
    return [
        Outcome(sid, subset, epoch, row=journal.rows.get((sid, epoch)),
                failure=None if (sid, epoch) in journal.rows else failures.get((sid, epoch)) or NOT_RUN,
                messages=messages, prompt=prompt)
        for sid, subset, epoch, _, messages, prompt in selected
    ]  # fmt: skip


def _unbuilt(run_dir: Path, summary: Summary, requests: Any, hashes: dict[tuple[str, int], str]) -> list[Outcome]:
    """:func:`outcomes` of engine requests and the plan's hashes: no prompt built."""
    journal = read_journal(run_dir / PREDICTIONS, hashes, summary.stale_lines)
    failures = read_failures(run_dir / FAILED)
    out = []
    for i, (sid, epoch, subset) in enumerate(requests.keys()):
        row = journal.rows.get((sid, epoch))
        failure = None if row is not None else failures.get((sid, epoch)) or NOT_RUN
        out.append(Outcome(sid, subset, epoch, row=row, failure=failure, source=lambda i=i: requests[i]))
    return out


def flipped_keys(outs: list[Outcome], baseline_dir: Path, summary: Summary) -> set[str]:
    """The keys of ``outs`` whose primary score differs from the baseline run's
    (``run.baseline``, a run directory of the same benchmark): both scored, both numeric,
    unequal — ``evalkit.compare``'s flips in either direction. The primary score is the
    benchmark's declared ``primary_score`` (else :func:`primary_score` of the headline). The
    baseline's journal is read by the journal's one rule (its ``summary.json``'s stale lines
    skipped), through :mod:`evalkit.untrusted`; memory: one number per baseline row.

    Raises:
        RunDirError: the baseline's ``summary.json`` or journal cannot be read, or it is a
            run of another benchmark (one line, naming it).
    """
    baseline_dir = Path(baseline_dir)
    base = read_summary(baseline_dir / "summary.json")
    if base.benchmark != summary.benchmark:
        raise RunDirError(f"run.baseline: {baseline_dir} is a {base.benchmark} run, this run is {summary.benchmark}")
    names = list(dict.fromkeys(k for o in outs if o.row for k in (o.row.get("scores") or {})))
    key = summary.primary_score or primary_score(names, str(summary.headline)) or "score"

    def number(row: dict[str, Any] | None) -> float | None:
        value = ((row or {}).get("scores") or {}).get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    before = {k: number(r) for k, r in read_journal(baseline_dir / PREDICTIONS, skip_lines=base.stale_lines,
                                                           view=lambda r: {"scores": r.get("scores")}).rows.items()}  # fmt: skip
    flipped = set()
    for o in outs:
        a, b = before.get((o.sample_id, o.epoch)), number(o.row)
        if a is not None and b is not None and a != b:
            flipped.add(o.key)
    return flipped


def primary_score(names: list[str], headline: str) -> str | None:
    """The per-sample score a run's headline is built from: the longest score name that
    begins the headline metric's name (``f1`` of ``f1_macro``, ``sample_pass`` of
    ``sample_pass_rate``), else the first score (ACEBench's ``accuracy`` of ``overall``)."""
    matching = [n for n in names if headline.startswith(n)]
    if matching:
        return max(matching, key=len)
    return names[0] if names else None
