"""MLflow, as an observer of runs and sweeps (:class:`MlflowObserver`) — the comparison UI of
evalkit's runs. The MLflow client and the experiment set-up live here only; what is shown is
chosen by :mod:`~evalkit.tracking.curate` (params, metrics, tables, description, names),
:mod:`~evalkit.tracking.samples` and :mod:`~evalkit.tracking.traces` (one trace per sample).

Per run (logged when it finishes, from its run directory):

* an MLflow run whose start and end are the run's ``started_at`` / ``finished_at`` (so its
  Duration is the run's ``wall_s``; a resumed run keeps its first start and gets the last
  attempt's end); tags: benchmark, model, shots, status, data
  fingerprint, prompt hash, code version, ``headline_name``, ``evalkit.kind=run``,
  ``suite``, and for a job of a sweep ``sweep`` + ``sweep_dir`` + ``mlflow.parentRunId``
  (named after its point: ``model=a shots=3``); a one-paragraph description
  (``mlflow.note.content``);
* the curated params (at most 25) and metrics (``headline`` in a complete run) of
  :mod:`~evalkit.tracking.curate`;
* the evaluation data as an MLflow dataset (context ``eval``): named after the benchmark,
  language and subsets, digest = the data fingerprint's first 36 hex characters;
* the per-sample table, one artifact whatever the run's size: ``tables/samples.parquet``
  (:func:`samples_frame`: one row per selected sample — sample_id, subset, epoch, status,
  every score, the output cut, the trace id of a traced sample — replaced whole on every
  logging);
* tables (``log_table``, replaced whole on every logging): ``tables/samples.json`` (the
  rows of the traced samples, for MLflow's Artifact evaluation view: sample_id, subset,
  status, the primary score, the output cut; none under ``tracking.traces=none``),
  ``tables/subsets.json`` (counts per subset), ``tables/breakdown_<dimension>.json``;
* every file of the run directory as an artifact;
* one trace per sample that ``tracking.traces`` chooses (:meth:`MlflowObserver.choose_traces`:
  ``sample``, the default — every failure, every flip against ``run.baseline`` and a seeded
  ``tracking.traces_per_category`` per subset; ``all``; ``none``), at most
  ``tracking.max_traces`` (a seeded sample, failed samples first —
  :func:`~evalkit.tracking.traces.traced_sample`); the tag ``evalkit.traces`` and the
  description say what was traced (``sample: 75 of 10,000 (all 0 failures, …)``, or ``all N
  samples`` when every sample is), linked to the run
  (``mlflow.sourceRun``): scores as assessments, rollouts as spans. Each trace is written
  with its assessments in one ``start_trace`` call (to a server, :data:`TRACE_THREADS` at a time)
  and the spans of a batch of traces in one
  ``log_spans`` call, synchronously, and the store's count is checked afterwards.

Logging again (a resumed run, ``python -m evalkit.track``) adds only what is new:
``tracking.json`` (:mod:`~evalkit.tracking.ledger`) records the MLflow run and every trace
logged; a sample that failed and now scored has its error trace replaced. A run resumed into
another tracking store gets a new MLflow run there.

Per sweep: one parent run (``evalkit.kind=sweep``) with the counts, each job's headline
named by its point (``f1_macro/model:baseline_first_k shots:3``), the sweep summary as a
table and the summary and report files.

Default store: ``sqlite:///<run.output_root>/mlflow.db`` with artifacts under
``<run.output_root>/mlartifacts``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


from evalkit import secrets
from evalkit.config import TRACES_PER_CATEGORY, traces_policy
from evalkit.errors import EvalkitError, RunDirError, TrackingError, first_line, printable, shell_line
from evalkit.images import image_facts
from evalkit.untrusted import read_run_text, read_run_yaml
from evalkit.summary import Summary, read_summary_record
import evalkit.tracking.curate as curate
from evalkit.specs import TrackingSpec
from evalkit.tracking.base import Observer, RunInfo
from evalkit.tracking.ledger import FILE as LEDGER_FILE
from evalkit.tracking.ledger import RUN_KEY_TAG, Ledger, checked_traces, key_digest, owner_problem
from evalkit.tracking.ledger import read_file as read_ledger_file
from evalkit.tracking.permissions import prove_write, refusal
from evalkit.tracking.samples import Outcome, flipped_keys, outcomes, primary_score
from evalkit.tracking.store import current_http_bounds, open_client, register_credentials, use_http_bounds
from evalkit.tracking.traces import (build_trace, cut, mlflow_obj, mlflow_text, policy_sample, trace_id_of, traced_sample,
                                     upload_attachments)

log = logging.getLogger(__name__)
say = logging.getLogger("evalkit.status")  # what is being logged now, on the console (__main__)

SWEEP_FILES = ("sweep_summary.json", "sweep_report.md")
#: traces written per batch (one ``log_spans`` call and one ``tracking.json`` update each)
TRACE_BATCH = 200
#: traces asked for per page when listing a run's traces: the most a tracking server answers
#: (``mlflow server`` refuses ``max_results`` above 500 in ``/api/3.0/mlflow/traces/search``,
#: MLflow 3.x ``server/handlers.py::_search_traces_v3``); a SQLite store pages the same way
TRACE_PAGE = 500
#: ``start_trace`` requests in flight at once to a tracking server (each is one HTTP round
#: trip: one at a time, 1,200 traces took 199 s on a loaded 2-core host, 165 ms each)
TRACE_THREADS = 8
#: characters of each output in the per-sample table
TABLE_OUTPUT_CHARS = 500
#: the experiment's description (``mlflow.note.content``), set when it has none
EXPERIMENT_NOTE = (
    "evalkit evaluations. One run per evaluation of a model on a benchmark (a sweep: a parent run with one child "
    "per point). Compare runs by the `headline` metric (every complete run has one; `headline_name` says which "
    "benchmark metric it is, incomplete runs have only `partial_*` figures). Each run holds traces of its samples "
    "(request, output, each score as an assessment; agent rollouts span by span) — by default every failure, every flip "
    "against its baseline and a seeded few per subset; its `evalkit.traces` tag says which — the per-sample table "
    "`tables/samples.parquet` (every sample; the traced ones also in `tables/samples.json`), the benchmark's breakdown "
    "tables and the run directory's files."
)


class StoreUnreachable(TrackingError):
    """The tracking server could not be reached (refused, timed out, answered 5xx until
    MLflow's retries ran out, or hit a bound of :mod:`~evalkit.tracking.http_bounds`:
    trickled past ``tracking.request_deadline_s`` or sent more than
    ``tracking.max_response_bytes``): a run goes on and logs at its end if it can (else its one
    retry line, :func:`retry_line`); ``python -m evalkit.track`` exits 1, a retryable failure."""

    exit_code = 1


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (``__cause__``, else ``__context__``)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and all(cur is not e for e in seen):
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def bound_hit(exc: BaseException) -> str | None:
    """The one line of the bound that stopped ``exc`` — or an exception it was raised from —
    (:mod:`evalkit.tracking.http_bounds`: ``tracking.request_deadline_s`` or
    ``tracking.max_response_bytes``, naming the server), or ``None``."""
    return next((str(e) for e in _chain(exc) if getattr(e, "evalkit_bound", False)), None)


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` — or an exception it was raised from (MLflow's REST client re-raises
    ``requests``' errors as ``MlflowException`` inside the ``except``) — is a transport failure:
    ``requests``' ``ConnectionError``, ``Timeout`` or ``RetryError``, or a bound of
    :mod:`evalkit.tracking.http_bounds` (:func:`bound_hit`). A refusal by the server (401,
    403, 400, 404) or a malformed address is not."""
    import requests  # MLflow's own HTTP client, present wherever MLflow is

    transport = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.RetryError)
    return any(isinstance(e, transport) or getattr(e, "evalkit_bound", False) for e in _chain(exc))


def track_command(uri: str, run_dir: Path | str) -> str:
    """The command that logs ``run_dir`` into the store ``uri`` later, shell-quoted
    (:func:`~evalkit.errors.shell_line`: a directory named ``x;touch PWNED;y`` stays one
    argument); credentials in ``uri`` scrubbed."""
    return shell_line("python", "-m", "evalkit.track", "--tracking-uri", secrets.scrub(uri), run_dir)


def tracking_uri(spec: TrackingSpec) -> str:
    """``tracking.tracking_uri``, or the SQLite store under ``run.output_root``."""
    if spec.tracking_uri:
        return spec.tracking_uri
    return f"sqlite:///{Path(spec.output_root).resolve() / 'mlflow.db'}"


def is_server(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (``http(s)://``), not a database."""
    return uri.startswith(("http://", "https://"))


def artifact_root(spec: TrackingSpec) -> str:
    """``tracking.artifact_root``; else, for a tracking server, ``""``: a new experiment's
    artifacts go where the server says (``--serve-artifacts``: uploaded through it,
    ``--default-artifact-root``: that store), never to a folder only this machine sees;
    else ``<run.output_root>/mlartifacts`` as a file URI."""
    if spec.artifact_root:
        return spec.artifact_root
    if is_server(tracking_uri(spec)):
        return ""
    return (Path(spec.output_root).resolve() / "mlartifacts").as_uri()


def client(uri: str) -> Any:
    """An ``MlflowClient`` of the store at ``uri`` (synchronous logging, quiet loggers); a
    SQLite store is created or migrated by one process at a time (:func:`open_client`)."""
    import mlflow  # deferred: MLflow's import is heavy and tracking=none never needs it

    # MLflow also exports the URI as MLFLOW_TRACKING_URI, to this process and every child it
    # starts later; evalkit reads that variable as the user's own choice of store (compare
    # --log lets a run directory name it), so the environment is left as the user set it
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before
    return open_client(uri)


def trace_client(uri: str) -> Any:
    """MLflow's ``TracingClient`` of the store at ``uri`` (open it with :func:`client` first):
    ``start_trace`` of a ``TraceInfo`` with its assessments, ``log_spans`` of many traces."""
    from mlflow.tracing.client import TracingClient  # deferred: heavy import

    return TracingClient(uri)


def experiment_id(mlflow_client: Any, name: str, location: str) -> str:
    """The id of experiment ``name``, created (artifacts at ``location``) when it is new —
    also when another process creates it at the same moment. An experiment without a
    description gets evalkit's, and ``headline`` as its primary metric."""
    tags = {"mlflow.note.content": EXPERIMENT_NOTE, "mlflow.experiment.primaryMetric.name": "headline",
            "mlflow.experiment.primaryMetric.greaterIsBetter": "True"}  # fmt: skip
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is not None:
        if "mlflow.note.content" not in exp.tags:
            for key, value in tags.items():
                mlflow_client.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id
    try:  # no location (""): the store's default (a server's own artifact root)
        return mlflow_client.create_experiment(name, artifact_location=location or None, tags=tags)
    except Exception:  # noqa: BLE001 - created meanwhile by another process
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def log_values(mlflow_client: Any, run_id: str, params: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None,
               tags: dict[str, str] | None = None, timestamp_ms: int | None = None) -> None:  # fmt: skip
    """Log params, numeric metrics (at ``timestamp_ms``, default now) and tags in MLflow's
    batch sizes (100 params, 1000 metrics and tags per call)."""
    from mlflow.entities import Metric, Param, RunTag

    items = [Param(k[:250], mlflow_text(str(v)[:6000])) for k, v in (params or {}).items()]
    for i in range(0, len(items), 100):
        mlflow_client.log_batch(run_id, params=items[i : i + 100])
    now = timestamp_ms or int(time.time() * 1000)
    entries = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if isinstance(v, (int, float))]
    run_tags = [RunTag(k, mlflow_text(str(v)[:8000])) for k, v in (tags or {}).items()]
    for i in range(0, max(len(entries), len(run_tags)), 1000):
        mlflow_client.log_batch(run_id, metrics=entries[i : i + 1000], tags=run_tags[i : i + 1000])


def _ms(timestamp: str | None) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 time (``None`` when absent or unreadable)."""
    try:
        return int(dt.datetime.fromisoformat(str(timestamp)).timestamp() * 1000) if timestamp else None
    except ValueError:
        return None


def _local_path(location: str) -> Path | None:
    from urllib.parse import unquote, urlparse

    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    return None if not location or ":" in location.split("/", 1)[0] else Path(location)  # "", "s3://", "mlflow-artifacts:/x"


def _sha256(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def dataset_input(summary: Summary, recorded: dict[str, Any]) -> Any:
    """The run's evaluation data as an MLflow ``DatasetInput`` (context ``eval``): named
    ``<benchmark> <language> <subsets>`` (``acebench en all subsets``), digest = the data fingerprint's first 36 hex
    characters, source = where the data was read (the summary's ``data_source``), profile = the number of samples."""
    from mlflow.entities import Dataset, DatasetInput, InputTag  # deferred: heavy import

    bench = recorded.get("benchmark") or {}
    subsets = bench.get("subsets")
    language = bench.get("language")
    parts = [summary.benchmark, *(["all languages" if language == "all" else str(language)] if language else []),
             "+".join(map(str, subsets)) if subsets else "all subsets"]  # fmt: skip
    where = summary.data_source  # declared by the benchmark (Benchmark.declared); older runs: the same rule here
    if where is None:
        where = next((str(v) for k, v in bench.items() if v and (k == "dataset" or k.endswith(("_dir", "_path", "_url")))), "")
    dataset = Dataset(name=mlflow_text(cut(" ".join(parts), 200)), digest=str(summary.data_fingerprint)[:36], source_type="local",
                      source=json.dumps({"uri": where}), profile=json.dumps({"num_rows": summary.n_samples}))  # fmt: skip
    return DatasetInput(dataset=dataset, tags=[InputTag(key="mlflow.data.context", value="eval")])


#: attempts of :func:`log_dataset` (each but the last may meet another process's insert)
DATASET_ATTEMPTS = 4
#: how SQLite, PostgreSQL and MySQL word a unique-key violation
_UNIQUE_VIOLATION = ("UNIQUE constraint failed", "duplicate key value violates unique constraint", "Duplicate entry")


def log_dataset(mlflow_client: Any, run_id: str, dataset: Any) -> None:
    """Link ``dataset`` (a ``DatasetInput``) to run ``run_id``. MLflow's SQL store looks the
    dataset up and inserts it when absent, in two steps: two processes logging the same data
    to a fresh store at once may both insert, and the second fails on the store's UNIQUE
    constraint (experiment, name, digest) — which once left a run RUNNING without traces.
    That failure is retried: the next lookup finds the other process's row.

    Raises:
        Any MLflow error but that race, or the race ``DATASET_ATTEMPTS`` times over.
    """
    for attempt in range(DATASET_ATTEMPTS):
        try:
            mlflow_client.log_inputs(run_id, datasets=[dataset])
            return
        except Exception as exc:  # noqa: BLE001 - MLflow wraps the driver's IntegrityError in its own exception
            if not any(m in str(exc) for m in _UNIQUE_VIOLATION) or attempt == DATASET_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def samples_table(outs: list[Outcome], headline: str) -> dict[str, list[Any]]:
    """The per-sample table: sample_id, subset, status (``failed: <kind>`` for a failure),
    the primary score (column named after it) and the output cut to
    :data:`TABLE_OUTPUT_CHARS` characters; ``epoch`` when the run repeats samples; ``images``
    (each image's SHA-256, space-separated, in order) when the requests carry images."""
    names = list(dict.fromkeys(k for o in outs if o.row for k in (o.row.get("scores") or {})))
    primary = primary_score(names, headline) or "score"
    table: dict[str, list[Any]] = {"sample_id": [], "subset": [], "status": [], primary: [], "output": []}
    if any(o.epoch for o in outs):
        table["epoch"] = [o.epoch for o in outs]
    images = [image_facts(o.messages) for o in outs]
    if any(images):  # each sample's images by digest (the run's images/<sha256>.<ext>)
        table["images"] = [" ".join(f"{f.get('sha256')}" for f in facts) for facts in images]
    for o in outs:
        row = o.row or {}
        table["sample_id"].append(o.sample_id)
        table["subset"].append(o.subset)
        table["status"].append(row.get("status") if o.ok else f"failed: {(o.failure or {}).get('error_kind')}")
        table[primary].append((row.get("scores") or {}).get(primary))
        table["output"].append(secrets.scrub(cut(row.get("output") or "", TABLE_OUTPUT_CHARS)) if o.ok else None)
    return table


#: the per-sample table's artifact (issue 46: one artifact, whatever the number of samples)
SAMPLES_ARTIFACT = "tables/samples.parquet"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def samples_frame(outs: list[Outcome], trace_ids: dict[int, str] | None = None) -> Any:
    """The full per-sample table as a ``pyarrow.Table``, one row per outcome in selection
    order: ``sample_id``, ``subset``, ``epoch`` (int), ``status`` (``failed: <kind>`` for a
    failure), one float column per score name any row has (null where a row has none, or a
    non-numeric value), ``output`` (cut to :data:`TABLE_OUTPUT_CHARS`, secrets scrubbed,
    :func:`~evalkit.tracking.traces.mlflow_text`; null for a failure), ``images`` (each
    image's SHA-256, space-separated; only when the requests carry images) and ``trace_id``
    (``trace_ids[id(outcome)]``: the sample's trace, null when it has none). Linear in the
    outcomes. ``images`` is filled for the outcomes whose prompt is built (the traced ones
    under ``tracking.traces=sample``: :meth:`~evalkit.tracking.samples.Outcome.loaded`)."""
    import pyarrow as pa  # deferred: MLflow's and the data layer's dependency

    trace_ids = trace_ids or {}
    names = list(dict.fromkeys(k for o in outs if o.row for k in (o.row.get("scores") or {})))
    table: dict[str, list[Any]] = {
        "sample_id": [mlflow_text(str(o.sample_id)) for o in outs],
        "subset": [mlflow_text(str(o.subset)) for o in outs],
        "epoch": [int(o.epoch) for o in outs],
        "status": [mlflow_text(str((o.row or {}).get("status"))) if o.ok else f"failed: {(o.failure or {}).get('error_kind')}" for o in outs],
    }  # fmt: skip
    for name in names:
        table[mlflow_text(str(name))] = [_number(((o.row or {}).get("scores") or {}).get(name)) for o in outs]
    table["output"] = [mlflow_text(secrets.scrub(cut((o.row or {}).get("output") or "", TABLE_OUTPUT_CHARS))) if o.ok else None
                       for o in outs]  # fmt: skip
    images = [image_facts(o.messages) for o in outs]
    if any(images):
        table["images"] = [" ".join(f"{f.get('sha256')}" for f in facts) for facts in images]
    table["trace_id"] = [trace_ids.get(id(o)) for o in outs]
    types = {"epoch": pa.int64(), **{mlflow_text(str(n)): pa.float64() for n in names}}
    return pa.table({k: pa.array(v, type=types.get(k, pa.string())) for k, v in table.items()})


def subsets_table(outs: list[Outcome], headline: str) -> dict[str, list[Any]]:
    """Counts per subset: samples, scored, failed, and the mean primary score of the scored."""
    names = list(dict.fromkeys(k for o in outs if o.row for k in (o.row.get("scores") or {})))
    primary = primary_score(names, headline) or "score"
    groups: dict[str, list[Outcome]] = {}
    for o in outs:
        groups.setdefault(o.subset, []).append(o)
    rows = []
    for subset, members in groups.items():
        values = [float(v) for o in members if o.ok and isinstance(v := (o.row or {}).get("scores", {}).get(primary), (int, float))]
        rows.append((subset, len(members), sum(o.ok for o in members), values))
    return {"subset": [r[0] for r in rows], "n_samples": [r[1] for r in rows], "n_scored": [r[2] for r in rows],
            "n_failed": [r[1] - r[2] for r in rows], f"mean_{primary}": [sum(r[3]) / len(r[3]) if r[3] else None for r in rows]}  # fmt: skip


class MlflowObserver(Observer):
    """Records runs and sweeps in an MLflow store.

    ``uri`` / ``experiment`` / ``artifact_root``: the store (:meth:`from_spec` reads them
    from a :class:`~evalkit.specs.TrackingSpec`); ``suite``: the ``suite`` tag; ``sweep``: the ``sweep.json`` of the sweep
    this run is a job of (``None`` outside a sweep); ``traces``: ``tracking.traces``' policy
    (``sample``, ``all``, ``none``; a boolean as :func:`~evalkit.config.traces_policy` reads it),
    with ``traces_per_category`` and ``baseline`` (``run.baseline``'s run directory, whose flips
    are traced; ``None``: none); ``max_traces``: at most this many (``None``: no cap), chosen
    with ``seed`` (``run.seed``).
    ``request_deadline_s`` / ``max_response_bytes``: the bounds of each HTTP call to a tracking
    server (:func:`~evalkit.tracking.store.use_http_bounds`; ``None``: those in force).
    """

    def __init__(self, uri: str, experiment: str, artifact_root: str, suite: str | None = None,
                 sweep: dict[str, Any] | None = None, traces: str | bool = "sample", max_traces: int | None = None,
                 seed: int = 0, request_deadline_s: float | None = None, max_response_bytes: int | None = None,
                 traces_per_category: int = TRACES_PER_CATEGORY, baseline: str | None = None):  # fmt: skip
        register_credentials(uri)  # before the run writes anything: they are scrubbed from it
        if request_deadline_s is not None or max_response_bytes is not None:
            deadline, size = current_http_bounds()
            use_http_bounds(request_deadline_s or deadline, max_response_bytes or size)
        self.uri = uri
        self.experiment = experiment
        self.artifact_root = artifact_root
        self.suite = suite
        self.sweep = sweep
        self.traces = traces_policy(traces)
        self.traces_per_category = traces_per_category
        self.baseline = baseline
        self.max_traces = max_traces
        self.seed = seed
        self._checked = False  # the store checked (run_started, or preflight for a server)

    @classmethod
    def from_spec(cls, spec: TrackingSpec, sweep: dict[str, Any] | None = None) -> "MlflowObserver":
        """The observer of a run's (or a sweep's) ``tracking.*`` settings."""
        return cls(tracking_uri(spec), spec.experiment, artifact_root(spec), spec.suite, sweep, spec.traces, spec.max_traces,
                   spec.seed, spec.request_deadline_s, spec.max_response_bytes, spec.traces_per_category, spec.baseline)  # fmt: skip

    # ---- runs ---------------------------------------------------------------------------
    def preflight(self, run: RunInfo) -> None:
        """A tracking server is checked (:meth:`check`: credentials, the experiment, the
        user's write permission) before Ray or any worker starts; a database store is checked
        by :meth:`run_started`, once the run's data is known to load (issue 47)."""
        if is_server(self.uri):
            self.run_started(run)

    def run_started(self, run: RunInfo) -> None:
        """Check the store (:meth:`check`) before the run writes anything (once: a server
        checked by :meth:`preflight` is not asked again). A server that
        cannot be reached does not stop the run: its results go to the run directory as
        always, and :meth:`run_finished` tries the server again (then prints its one line
        if it is still down)."""
        if self._checked:
            return
        try:
            self.check()
        except StoreUnreachable:
            pass
        self._checked = True

    def check(self) -> None:
        """Open the store, check that the experiment's artifact location (a local one) can
        be written, create the experiment when it is new, and — for a tracking server — prove
        that this user may write to it (:mod:`~evalkit.tracking.permissions`: one experiment
        tag set and deleted) — so that a bad ``tracking.*`` setting, a wrong password or a
        missing permission is one line before anything runs (exit 2).

        Raises:
            PermissionRefused: the server refused the user (401) or a permission (403).
            StoreUnreachable: the server cannot be reached (a run goes on; ``track`` exits 1).
            TrackingError: naming the setting and the cause (one line).
        """
        try:
            mlflow_client = client(self.uri)
            exp = mlflow_client.get_experiment_by_name(self.experiment)
        except Exception as exc:  # noqa: BLE001 - any store error becomes one line
            refused = refusal(exc, self.uri, "reading the experiment", "READ", self.experiment)
            if refused is not None:  # a wrong password, or no READ: before anything starts (issue 47)
                raise refused from None
            bound = bound_hit(exc)
            if bound:  # a server that trickles or floods: as one that cannot be reached (try again later)
                raise StoreUnreachable(f"tracking: {secrets.scrub(bound)}") from None
            if is_unreachable(exc):
                raise StoreUnreachable(f"tracking: the MLflow server {secrets.scrub(self.uri)} cannot be reached "
                                       f"({type(exc).__name__}: {secrets.scrub(first_line(exc))})") from None  # fmt: skip
            raise TrackingError(f"tracking: cannot open the MLflow store {self.uri} ({type(exc).__name__}: {first_line(exc)})") from None
        location = exp.artifact_location if exp else self.artifact_root
        path = _local_path(location)
        if path is not None:
            try:
                path.mkdir(parents=True, exist_ok=True)
                probe = path / f".evalkit-write-check-{os.getpid()}"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as exc:
                why = exc.strerror or type(exc).__name__
                if exp:
                    raise TrackingError(
                        f"tracking: experiment {self.experiment!r} keeps its artifacts in {path} (set when it was "
                        f"created), which cannot be written ({why}); use another tracking.experiment"
                    ) from None
                raise TrackingError(f"tracking.artifact_root: {path} cannot be written ({why})") from None
        exp_id = exp.experiment_id if exp else None
        if exp is None:
            try:
                exp_id = experiment_id(mlflow_client, self.experiment, location)
            except Exception as exc:  # noqa: BLE001
                refused = refusal(exc, self.uri, "creating it", "create-experiment", self.experiment)
                if refused is not None:
                    raise refused from None
                raise TrackingError(f"tracking.experiment: cannot create {self.experiment!r} ({first_line(exc)})") from None
        if is_server(self.uri):
            self._prove_write(mlflow_client, str(exp_id))

    def _prove_write(self, mlflow_client: Any, exp_id: str) -> None:
        """A tracking server's proof that this user may write to the experiment
        (:func:`~evalkit.tracking.permissions.prove_write`), before anything starts.

        Raises:
            PermissionRefused: 401 or 403 (exit 2).
            StoreUnreachable: the server went away (or hit a bound) meanwhile.
        """
        try:
            prove_write(mlflow_client, self.uri, exp_id, self.experiment)
        except TrackingError:
            raise
        except Exception as exc:  # noqa: BLE001 - any other store error becomes one line
            why = bound_hit(exc) or f"{type(exc).__name__}: {first_line(exc)}"
            cls = StoreUnreachable if is_unreachable(exc) else TrackingError
            raise cls(f"tracking: the MLflow server {secrets.scrub(self.uri)} failed the write check ({secrets.scrub(why)})") from None

    def run_finished(self, run: RunInfo, summary: Summary) -> None:
        """Log the finished run (:meth:`log_run`). A failure does not fail the run (its
        results are on disk): it is one line on stderr naming the command that logs the run
        again, ``python -m evalkit.track <run dir>``; the traceback goes to the run's log."""
        try:
            self.log_run(run.run_dir, summary, run.requests, run.request_hashes)
        except Exception as exc:  # noqa: BLE001 - any tracking failure becomes one line
            log.info("MLflow logging of %s failed", run.run_dir, exc_info=True)  # evalkit.log only
            line = retry_line(run.run_dir, exc, self.uri)
            log.info("%s", line)
            print(line, file=sys.stderr)
            self.failure = line
            self._end_unfinished(run.run_dir)

    def _end_unfinished(self, run_dir: Path) -> None:
        """The MLflow run a failed logging left RUNNING (its id in ``tracking.json``) is ended
        FAILED, so that no run stays RUNNING (issue 47); ``python -m evalkit.track`` completes it
        later and ends it FINISHED. A server that cannot be told is left as it is (one debug line)."""
        try:
            ledger = Ledger.load(Path(run_dir), self.uri)
            if ledger.run_id is not None:
                client(self.uri).set_terminated(ledger.run_id, status="FAILED")
        except Exception as exc:  # noqa: BLE001 - the failure's line is printed already
            log.debug("MLflow run of %s not ended (%s: %s)", run_dir, type(exc).__name__, first_line(exc))

    def sweep_tags(self) -> dict[str, str]:
        """Tags that put a sweep's job under the sweep's parent run (none outside a sweep).
        The parent is named only if it lives in the same tracking store and experiment."""
        if not self.sweep:
            return {}
        info = self.sweep
        tags = {"sweep": str(info.get("sweep_id")), "sweep_dir": str(info.get("sweep_dir"))}
        if info.get("parent_run_id") and info.get("tracking_uri") == self.uri and info.get("experiment") == self.experiment:
            tags["mlflow.parentRunId"] = str(info["parent_run_id"])
        return tags

    def run_name(self, run_dir: Path, summary: Summary) -> str:
        """``<benchmark>-<model>-<run dir name>``; a sweep's job is named by its point
        (``model=a shots=3``), its number being its directory's ``<num>-`` prefix."""
        name = Path(run_dir).name
        if self.sweep:
            num = name.split("-", 1)[0]
            label = curate.point_label(curate.swept_point(self.sweep.get("points"), int(num))) if num.isdigit() else ""
            return label or name
        return f"{summary.benchmark}-{summary.model}-{name}"

    def choose_traces(self, outs: list[Outcome], summary: Summary) -> tuple[list[Outcome], dict[str, Any]]:
        """The outcomes to trace (``tracking.traces``' policy,
        :func:`~evalkit.tracking.traces.policy_sample`, then ``tracking.max_traces``,
        :func:`~evalkit.tracking.traces.traced_sample`) and what the choice is made of (the
        counts of ``policy_sample``, plus ``chosen``: the policy's count before the cap, and
        ``baseline``: ``None`` without ``run.baseline``, ``"unreadable"`` when its journal
        could not be read — one warning, no flips — else ``"read"``). Deterministic: the same
        directory, seed and baseline choose the same outcomes on every logging."""
        flipped, state = None, None
        if self.traces == "sample" and self.baseline:
            try:
                flipped, state = flipped_keys(outs, Path(self.baseline), summary), "read"
            except EvalkitError as exc:  # the run's traces go on without flips
                log.warning("tracking: run.baseline: flips not traced (%s)", printable(first_line(exc), 300))
                state = "unreadable"
        chosen, counts = policy_sample(outs, self.traces, self.traces_per_category, self.seed, flipped)
        traced = [o.loaded() for o in traced_sample(chosen, self.max_traces, self.seed)]  # their prompts, built now
        return traced, {**counts, "chosen": len(chosen), "baseline": state}

    def traces_note(self, n_traced: int, n_outcomes: int, counts: dict[str, Any] | None = None) -> str:
        """What the run's traces cover, for the ``evalkit.traces`` tag and the description
        (``counts``: :meth:`choose_traces`' second value): ``all N samples`` when every sample
        is traced (whatever the policy: a small run's sample is all of it), else
        ``sample: 75 of 10,000 (all 0 failures, 0 flips against run.baseline, 25 per category
        in 3, run.seed=0)``, or ``N of M samples, sampled (tracking.max_traces=…)`` when the
        cap chose."""
        counts = counts or {}
        if self.traces == "none":
            return "none (tracking.traces=none)"
        if n_traced >= n_outcomes:
            return f"all {n_outcomes} samples"
        if self.max_traces is not None and n_traced < counts.get("chosen", n_outcomes):
            of = f", of the {counts['chosen']:,} tracking.traces=sample chose" if self.traces == "sample" else ""
            return (f"{n_traced} of {n_outcomes} samples, sampled (tracking.max_traces={self.max_traces}, "
                    f"run.seed={self.seed}; failed samples first{of})")  # fmt: skip
        flips = {None: "no run.baseline for flips", "unreadable": "flips unknown: run.baseline unreadable"}.get(
            counts.get("baseline"), f"{counts.get('flips', 0):,} flips against run.baseline")
        return (f"sample: {n_traced:,} of {n_outcomes:,} (all {counts.get('failures', 0):,} failures, {flips}, "
                f"{counts.get('per_category', self.traces_per_category)} per category in {counts.get('categories', 0):,}, "
                f"run.seed={self.seed})")  # fmt: skip

    def _run_tags(self, run_dir: Path, summary: Summary, traced: str) -> dict[str, str]:
        return {
            "benchmark": summary.benchmark,
            "model": summary.model,
            "shots": str(summary.shots),
            "status": summary.status,
            "headline_name": str(summary.headline),
            "data_fingerprint": str(summary.data_fingerprint),
            "prompt_hash": str(summary.prompt_hash),
            "code_version": str(summary.code_version),
            "run_dir": str(Path(run_dir).resolve()),
            **({"user_model": str(summary.user_model)} if summary.user_model is not None else {}),  # none: no tag, never "None"
            "mlflow.runName": self.run_name(run_dir, summary),
            "mlflow.note.content": f"{curate.description(summary, run_dir)} Traces: {traced}.",
            "evalkit.traces": traced,
            "evalkit.kind": "run",
            **({"suite": str(self.suite)} if self.suite else {}),
            **self.sweep_tags(),
            **rejudge_tags(summary, self.uri),
        }

    def log_run(self, run_dir: Path, summary: Summary, requests: list[Any] | None = None,
                request_hashes: dict[tuple[str, int], str] | None = None) -> str:  # fmt: skip
        """Log (or complete the logging of) the finished run in ``run_dir`` whose
        ``summary.json`` is ``summary``; returns the MLflow run id. ``requests``: the run's
        requests (the selection and its prompts), ``request_hashes``: the plan's (see
        :func:`~evalkit.tracking.samples.outcomes`).

        Raises:
            TrackingError: the store holds another number of traces for the run than it
                has selected samples.
            Any MLflow or file error.
        """
        run_dir = Path(run_dir)
        mlflow_client = client(self.uri)
        ledger = Ledger.load(run_dir, self.uri)
        outs = outcomes(run_dir, summary, requests, request_hashes)
        traced, counts = self.choose_traces(outs, summary)
        if self.traces == "none":
            traced = []
        tags = self._run_tags(run_dir, summary, self.traces_note(len(traced), len(outs), counts))
        if ledger.run_id is None:
            tags[RUN_KEY_TAG] = key_digest(ledger.new_key())
            exp_id = experiment_id(mlflow_client, self.experiment, self.artifact_root)
            run = mlflow_client.create_run(exp_id, start_time=_ms(summary.started_at), tags=mlflow_obj(tags))
            ledger.run_id, ledger.experiment_id = run.info.run_id, exp_id
            ledger.save()
        else:
            ledger.experiment_id = self._owned_run(mlflow_client, run_dir, ledger)
            tags[RUN_KEY_TAG] = key_digest(ledger.new_key())
            kept = compared_lines(mlflow_client.get_run(ledger.run_id).data.tags.get("mlflow.note.content", ""))
            tags["mlflow.note.content"] = "\n\n".join([tags["mlflow.note.content"], *kept[-MAX_COMPARED_LINES:]])
            log_values(mlflow_client, ledger.run_id, tags=tags)
        trace_ids = {id(o): trace_id_of(ledger.run_id, o) for o in traced}
        digest = _sha256([summary.record(), sorted(trace_ids.values())])  # the table names the traces
        if ledger.summary_sha256 != digest:
            say.info("MLflow: logging the run's params, metrics, tables and files to %s…", self.uri)
            self._log_record(mlflow_client, ledger.run_id, run_dir, summary, outs, trace_ids)
        if self.traces != "none":
            self._log_traces(mlflow_client, ledger, run_dir, summary, traced)
        status = "FINISHED" if summary.complete else "FAILED"
        mlflow_client.set_terminated(ledger.run_id, status=status, end_time=_ms(summary.finished_at))
        ledger.summary_sha256 = digest
        ledger.save()
        return ledger.run_id

    @staticmethod
    def _owned_run(mlflow_client: Any, run_dir: Path, ledger: Ledger) -> str:
        """The experiment id of the MLflow run ``tracking.json`` names, after checking that the
        run belongs to ``run_dir`` (:func:`~evalkit.tracking.ledger.owner_problem`).

        Raises:
            RunDirError: the store has no such run, or it belongs to another directory.
        """
        try:
            run = mlflow_client.get_run(ledger.run_id)
        except Exception as exc:  # noqa: BLE001 - MLflow's "not found" is a generic MlflowException
            raise RunDirError(f"{ledger.path}: names MLflow run {ledger.run_id}, which {ledger.tracking_uri} cannot give "
                              f"({type(exc).__name__}); remove the file to log the run anew") from None  # fmt: skip
        problem = owner_problem(run_dir, ledger, dict(run.data.tags))
        if problem:
            raise RunDirError(f"{ledger.path}: names MLflow run {ledger.run_id}, which does not belong to {run_dir} "
                              f"({problem}); nothing written — remove the file to log this directory as a new run")  # fmt: skip
        return str(run.info.experiment_id)

    def _log_record(self, mlflow_client: Any, run_id: str, run_dir: Path, summary: Summary, outs: list[Outcome],
                    trace_ids: dict[int, str]) -> None:  # fmt: skip
        """Params (those not logged yet), metrics, the dataset, the tables (``trace_ids``:
        ``{id(outcome): trace id}`` of the traced outcomes) and the files."""
        recorded = read_run_yaml(run_dir / "config.yaml") or {}
        recorded = secrets.redact_config(recorded)
        data = mlflow_client.get_run(run_id).data
        params = {k: v for k, v in curate.run_params(recorded, summary).items() if k not in data.params}
        metrics = curate.run_metrics(summary)
        # an earlier attempt's partial_* figures no longer hold (MLflow keeps a metric's last
        # value and cannot delete it): their latest value becomes NaN, "not applicable"
        metrics.update({k: float("nan") for k in data.metrics if k.startswith("partial_") and k not in metrics})
        log_values(mlflow_client, run_id, params=params, metrics=metrics, timestamp_ms=_ms(summary.finished_at))
        _log_gate_steps(mlflow_client, run_id, summary)
        log_dataset(mlflow_client, run_id, dataset_input(summary, recorded))
        self._log_tables(mlflow_client, run_id, summary, outs, trace_ids)
        for path, folder in run_files(run_dir):
            mlflow_client.log_artifact(run_id, str(path), artifact_path=folder)

    def _log_tables(self, mlflow_client: Any, run_id: str, summary: Summary, outs: list[Outcome], trace_ids: dict[int, str]) -> None:
        """``tables/``: written whole (what an earlier logging left there is removed first,
        since ``log_table`` appends to an existing table): :data:`SAMPLES_ARTIFACT` (every
        outcome, :func:`samples_frame`), ``samples.json`` (the traced outcomes' rows,
        :func:`samples_table`), ``subsets.json`` and the breakdowns."""
        import tempfile

        import pandas as pd  # deferred: MLflow's own dependency, loaded by log_table anyway
        import pyarrow.parquet as pq
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository  # deferred: heavy

        if any(a.path == "tables" for a in mlflow_client.list_artifacts(run_id)):
            get_artifact_repository(mlflow_client.get_run(run_id).info.artifact_uri).delete_artifacts("tables")
        with tempfile.TemporaryDirectory(prefix="evalkit-table-") as tmp:
            path = Path(tmp) / Path(SAMPLES_ARTIFACT).name
            pq.write_table(samples_frame(outs, trace_ids), path)
            mlflow_client.log_artifact(run_id, str(path), artifact_path=str(Path(SAMPLES_ARTIFACT).parent))
        headline = str(summary.headline)
        traced = [o for o in outs if id(o) in trace_ids]
        tables = {**({"samples": samples_table(traced, headline)} if traced else {}), "subsets": subsets_table(outs, headline)}
        tables.update({f"breakdown_{curate.mlflow_name(k).replace('/', '_')}": v for k, v in curate.breakdown_tables(summary).items()})
        for name, table in tables.items():  # object columns: values as they are (no string dtype)
            mlflow_client.log_table(run_id, data=pd.DataFrame(mlflow_obj(table), dtype=object), artifact_file=f"tables/{name}.json")

    def _log_traces(self, mlflow_client: Any, ledger: Ledger, run_dir: Path, summary: Summary, outs: list[Outcome]) -> None:
        """One trace per outcome of ``outs`` (those chosen to be traced) that the store does
        not hold as it is now (see the module docstring); traces of samples no longer
        selected or chosen, or whose outcome changed, are deleted. The ledger is saved after every batch."""
        tracer, run_id, exp_id = trace_client(self.uri), str(ledger.run_id), str(ledger.experiment_id)
        ledger.traces = self.logged_traces(tracer, exp_id, run_id, self.uri)  # the store's, never ids read from the directory
        wanted = {mlflow_text(o.key): (o, trace_id_of(run_id, o)) for o in outs}  # keys as the store's evalkit.key tags
        stale = [tid for key, tid in ledger.traces.items() if key not in wanted or wanted[key][1] != tid]
        for i in range(0, len(stale), 100):
            tracer.delete_traces(exp_id, trace_ids=stale[i : i + 100])
        ledger.traces = {k: t for k, t in ledger.traces.items() if k in wanted and wanted[k][1] == t}
        ledger.save()
        todo = [(o, tid) for key, (o, tid) in wanted.items() if key not in ledger.traces]
        if todo:
            say.info("MLflow: logging %d traces (%d already there), %d per batch…", len(todo), len(ledger.traces), TRACE_BATCH)
        start_s = (_ms(summary.started_at) or int(time.time() * 1000)) / 1000
        # a server: TRACE_THREADS start_trace requests at a time (one HTTP round trip each);
        # a database store: one at a time (SQLite takes one writer)
        pool = ThreadPoolExecutor(TRACE_THREADS, thread_name_prefix="evalkit-traces") if is_server(self.uri) and todo else None
        try:
            self._write_traces(tracer, pool, ledger, run_dir, summary, todo, run_id, exp_id, start_s)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        held = self.logged_traces(tracer, exp_id, run_id, self.uri)
        if held != ledger.traces:
            raise TrackingError(f"tracking: the store holds {len(held)} traces of the run, {len(wanted)} expected")

    @staticmethod
    def _write_traces(tracer: Any, pool: ThreadPoolExecutor | None, ledger: Ledger, run_dir: Path, summary: Summary,
                      todo: list[tuple[Outcome, str]], run_id: str, exp_id: str, start_s: float) -> None:  # fmt: skip
        """Write ``todo``'s traces batch by batch (:data:`TRACE_BATCH`), saving the ledger after each."""
        for i in range(0, len(todo), TRACE_BATCH):
            batch = todo[i : i + TRACE_BATCH]
            files: list[dict[str, tuple[str, bytes]]] = [{} for _ in batch]  # each trace's image attachments
            built = [build_trace(o, run_dir, run_id, exp_id, summary, start_s, f) for (o, _), f in zip(batch, files)]
            if pool is None:
                started = [tracer.start_trace(info) for info, _ in built]
            else:  # list(): the first failure is raised here
                started = list(pool.map(tracer.start_trace, [info for info, _ in built]))
            for info, f in zip(started, files):  # the bytes of the images the spans reference (evalkit.tracking.traces)
                upload_attachments(tracer, info, f)
            tracer.log_spans(exp_id, [span for _, spans in built for span in spans])
            ledger.traces.update({mlflow_text(o.key): tid for o, tid in batch})
            ledger.save()

    @staticmethod
    def logged_traces(tracer: Any, exp_id: str, run_id: str, uri: str) -> dict[str, str]:
        """``{sample key: trace id}`` of the traces the store ``uri`` links to MLflow run
        ``run_id``.

        Raises:
            StoreAnswerRefused: a key or id it lists breaks ``tracking.json``'s bounds.
        """
        found: dict[str, str] = {}
        token = None
        while True:
            page = tracer.search_traces(locations=[exp_id], run_id=run_id, max_results=TRACE_PAGE, include_spans=False, page_token=token)
            for trace in page:
                found[trace.info.tags.get("evalkit.key", trace.info.trace_id)] = trace.info.trace_id
            token = page.token
            if not token:
                return checked_traces(found, uri)  # the store's answers, bound for tracking.json

    # ---- sweeps -------------------------------------------------------------------------
    def sweep_started(self, sweep_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
        """Open the sweep's parent run; its id goes into ``sweep.json`` for the jobs. A
        server that cannot be reached gives no parent run (``{}``); the sweep runs."""
        try:
            mlflow_client = client(self.uri)
            exp_id = experiment_id(mlflow_client, self.experiment, self.artifact_root)
        except Exception as exc:  # noqa: BLE001 - only an unreachable server is let through
            if not is_unreachable(exc):
                raise
            log.info("sweep %s: the MLflow server cannot be reached; no parent run", info.get("sweep_id"), exc_info=True)
            return {}  # the jobs run and log (or print their retry line) without a parent run
        tags = {
            "sweep": info["sweep_id"],
            "evalkit.kind": "sweep",
            "sweep_dir": info["sweep_dir"],
            "mlflow.runName": f"sweep-{info['sweep_id']}",
            "mlflow.note.content": f"Sweep `{info['sweep_id']}` over `{' '.join(info['overrides'])[:2000]}`; one child run per point.",
            "overrides": " ".join(info["overrides"])[:5000],
            **({"suite": str(info["suite"])} if info.get("suite") else {}),
        }
        run = mlflow_client.create_run(exp_id, start_time=_ms(info.get("started_at")), tags=tags)
        return {"tracking_uri": self.uri, "experiment": self.experiment, "parent_run_id": run.info.run_id}

    def sweep_finished(self, sweep_dir: Path, info: dict[str, Any], summary: dict[str, Any], status: str) -> None:
        """Log the sweep's counts, each job's headline named by its point
        (:func:`~evalkit.tracking.curate.sweep_metrics`), the sweep summary as a table
        (``tables/sweep.json``) and its files to the parent run, and end it with ``status``."""
        run_id = info.get("parent_run_id")
        if not run_id:
            return
        mlflow_client = client(info.get("tracking_uri") or self.uri)
        log_values(mlflow_client, run_id, metrics=curate.sweep_metrics(summary))
        import pandas as pd  # deferred: MLflow's own dependency

        mlflow_client.log_table(run_id, data=pd.DataFrame(curate.sweep_table(summary), dtype=object), artifact_file="tables/sweep.json")
        for name in SWEEP_FILES:
            mlflow_client.log_artifact(run_id, str(Path(sweep_dir) / name))
        self._log_sweep_comparisons(info.get("tracking_uri") or self.uri, run_id, summary)
        mlflow_client.set_terminated(run_id, status=status)

    def _log_sweep_comparisons(self, uri: str, parent_run_id: str, summary: dict[str, Any]) -> None:
        """Each paired headline comparison of the sweep (``sweep_summary.json`` → ``paired``,
        with its Holm and BH p over the sweep's family) as a comparison run
        (:func:`log_comparison`), nested under the sweep's parent run and linked to both
        jobs' runs, with its flips table (the pair's ``flips``, :func:`evalkit.sweep.summarize`)."""
        jobs = {j.get("num"): j for j in summary.get("jobs") or []}
        family = summary.get("multiplicity") or {}
        for pair in summary.get("paired") or []:
            if pair.get("delta") is None or pair.get("base") not in jobs or pair.get("job") not in jobs:
                continue
            ends = tuple(_sweep_end(jobs[pair[k]]) for k in ("base", "job"))
            notes = list(pair.get("notes") or []) + [
                f"Swept key `{pair.get('key')}`; p_holm / p_bh adjusted over {family.get('family', 'the sweep')} "
                f"(family size {family.get('family_size', '?')})"]  # fmt: skip
            compared = {"primary": pair.get("headline"), "level": pair.get("level", 0.95), "notes": notes,
                        "instrument_changed": pair.get("instrument_changed"),
                        "metrics": {pair.get("headline"): {k: pair.get(k) for k in
                                                           ("delta", "low", "high", "p", "p_holm", "p_bh", "mde", "test", "n")}}}  # fmt: skip
            log_comparison(uri, compared, pair.get("flips") or None, ends, experiment=self.experiment, parent_run_id=parent_run_id)


#: the ``evalkit.answers_source`` tag of a re-judge (``python -m evalkit.judge``): its answers are RUN's, replayed
REPLAY_SOURCE = "replay"


def rejudge_tags(summary: Summary, uri: str) -> dict[str, str]:
    """The tags of a re-judge's MLflow run (its summary's ``replayed_run`` = RUN; ``{}`` for
    any other run; issue 47): ``model`` = RUN's model (read from RUN's ``summary.json``, no
    link followed, bounded; cut to 200 characters), ``evalkit.answers_source`` =
    :data:`REPLAY_SOURCE`, ``evalkit.judged_run_dir`` = RUN, ``evalkit.judged_run_id`` = RUN's
    MLflow run when its ``tracking.json`` names one in this store ``uri``, and the name
    ``<benchmark>-<RUN's model>-judged-by-<judge>[+<judge>…]``. An unreadable RUN keeps the
    re-judge's own model and name (one debug line in the run's log)."""
    replayed = getattr(summary, "replayed_run", None)
    if not replayed:
        return {}
    tags = {"evalkit.answers_source": REPLAY_SOURCE, "evalkit.judged_run_dir": str(replayed)}
    judges = [str(j.get("name")) for j in ((summary.instrument or {}).get("judge") or {}).get("judges") or [] if isinstance(j, dict)]
    try:
        original = read_summary_record(Path(str(replayed)) / "summary.json")
        state = read_ledger_file(Path(str(replayed)) / LEDGER_FILE)
    except (RunDirError, OSError) as exc:
        log.debug("the judged run %s cannot be read (%s); its model is not tagged", replayed, first_line(exc))
        return tags
    model = original.get("model") if isinstance(original, dict) else None
    if isinstance(model, str) and model:
        tags["model"] = printable(cut(model, 200))
        tags["mlflow.runName"] = f"{summary.benchmark}-{tags['model']}-judged-by-{'+'.join(judges) or 'judges'}"
    if state is not None and state.mlflow_run_id and state.tracking_uri == uri:
        tags["evalkit.judged_run_id"] = state.mlflow_run_id
    return tags


def _sweep_end(job: dict[str, Any]) -> dict[str, Any]:
    """A sweep job as one end of a comparison: its directory, its point as the name, and the
    MLflow run its ``tracking.json`` names (none when it was not logged)."""
    label = " ".join(job.get("point") or []) or f"job {job.get('num')}"
    end: dict[str, Any] = {"dir": str(job.get("run_dir")), "name": label, "label": label, "benchmark": job.get("benchmark")}
    try:
        state = read_ledger_file(Path(str(job.get("run_dir"))) / LEDGER_FILE)
    except RunDirError:
        state = None
    if state is not None and state.mlflow_run_id:
        end.update(mlflow_run_id=state.mlflow_run_id, experiment_id=state.experiment_id)
    return end


def run_files(run_dir: Path) -> list[tuple[Path, str | None]]:
    """The run directory's files to upload as artifacts, as ``(path, artifact folder)``
    (``None``: the top), sorted: every regular file except ``tracking.json`` and hidden
    top-level files. A symbolic link — to a file or a folder, inside or outside the
    directory — is never followed nor uploaded: each one is skipped with one warning."""
    found: list[tuple[Path, str | None]] = []
    for top, dirs, files in os.walk(run_dir, followlinks=False):
        rel = Path(top).relative_to(run_dir)
        for name in sorted(dirs + files):
            path = Path(top) / name
            if path.is_symlink():
                log.warning("%s: a symbolic link, not uploaded (evalkit never follows links out of a run directory)",
                            printable(str(path)))  # fmt: skip
                if name in dirs:
                    dirs.remove(name)
            elif name in files and path.is_file() and (rel.parts or (name != LEDGER_FILE and not name.startswith("."))):
                found.append((path, rel.as_posix() if rel.parts else None))
        dirs.sort()
    return found


def retry_line(run_dir: Path, exc: BaseException, uri: str) -> str:
    """The one line a run prints when its MLflow logging fails: the cause (the bound hit,
    :func:`bound_hit`, naming the server) and the command that logs the run again into the
    same store ``uri`` (``track`` never takes the store from the directory), shell-quoted
    (:func:`track_command`)."""
    bound = bound_hit(exc)
    if bound:
        what = printable(secrets.scrub(bound))
    elif is_unreachable(exc):  # MLflow's message is the whole urllib3 chain: the server's state says it
        what = f"the server {secrets.scrub(uri)} cannot be reached"
    elif isinstance(exc, TrackingError):  # evalkit's own line (a store's answer refused, a count that differs)
        what = printable(secrets.scrub(first_line(exc).removeprefix("tracking: ")))
    else:
        what = printable(secrets.scrub(f"{type(exc).__name__}: {first_line(exc)}"))
    return (
        f"evalkit: warning: tracking: MLflow logging failed ({what}); the run's results are in {printable(str(run_dir))} — "
        f"log them with: {printable(track_command(uri, run_dir))}"
    )


#: the first words of the line a compared run's description gets for each comparison of it
COMPARED_LINE = "Compared in "
#: the most such lines a description keeps (the latest; every id stays in ``evalkit.comparisons``)
MAX_COMPARED_LINES = 20


def _comparison_note(runs: tuple[dict[str, Any], dict[str, Any]], exp_id: str, pair: dict[str, Any], said: str,
                     verdict: dict[str, Any] | None) -> str:  # fmt: skip
    """The description of :func:`log_comparison`'s run: both runs linked, the headline's Δ and
    verdict, the pair's notes and each run's judge qualification (markdown)."""
    base, new = runs
    head, level = pair.get("primary"), pair.get("level", 0.95)
    m = (pair.get("metrics") or {}).get(head) or {}

    def link(r: dict[str, Any]) -> str:
        rid = r.get("mlflow_run_id")
        where = f"[{rid}](#/experiments/{r.get('experiment_id') or exp_id}/runs/{rid})" if rid else "(not in MLflow)"
        return f"{r.get('name') or r['dir']} {where}, directory `{r['dir']}`"

    text = [f"evalkit comparison: Δ = NEW − BASE over the units scored in both ({int(round(100 * level))}% intervals).",
            f"BASE: {link(base)}", f"NEW: {link(new)}"]  # fmt: skip
    if m.get("delta") is not None and m.get("low") is not None:
        text.append(f"Headline `{head}`: Δ {m['delta']:+.4f} [{m['low']:+.4f}, {m['high']:+.4f}], p = {m['p']:.3g} "
                    f"({m['test']}, n = {m['n']}); verdict: {said}" + (f" — {verdict['line']}" if verdict else ""))  # fmt: skip
    text += [f"Note: {n}" for n in pair.get("notes") or []] + _qualification_notes(base, new)
    return "\n\n".join(text)


def preflight_store(uri: str, experiment: str = "evalkit", exp_id: str | None = None) -> None:
    """``compare --log``'s preflight, the one a run has (:meth:`MlflowObserver.check`), before
    anything is logged to a tracking server ``uri``: the experiment ``exp_id`` (the compared
    runs', when known) or ``experiment`` (created if absent and allowed), and the user's write
    permission in it. Nothing for a database store (its check is opening it).

    Raises:
        PermissionRefused: 401 or 403 (one line naming the server, the user and the permission).
        TrackingError: the server cannot be used (one line).
    """
    if not is_server(uri):
        return
    observer = MlflowObserver(uri, experiment, "")
    if exp_id is None:
        observer.check()
        return
    try:
        mlflow_client = client(uri)
        observer.experiment = str(mlflow_client.get_experiment(exp_id).name)
    except Exception as exc:  # noqa: BLE001 - any store error becomes one line
        refused = refusal(exc, uri, "reading the experiment", "READ", f"id {exp_id}")
        if refused is not None:
            raise refused from None
        why = bound_hit(exc) or f"{type(exc).__name__}: {first_line(exc)}"
        raise TrackingError(f"tracking: the MLflow server {secrets.scrub(uri)} cannot give experiment {exp_id} "
                            f"({secrets.scrub(why)})") from None  # fmt: skip
    observer._prove_write(mlflow_client, exp_id)


def log_comparison(uri: str, pair: dict[str, Any], flips: dict[str, Any] | None, runs: tuple[dict[str, Any], dict[str, Any]],
                   experiment: str = "evalkit", verdict: dict[str, Any] | None = None,
                   parent_run_id: str | None = None) -> str:  # fmt: skip
    """Record one paired comparison (``pair``: an entry of :func:`evalkit.compare.compare`'s
    ``paired``) as an MLflow run of its own in the store ``uri``; returns its run id.

    ``runs``: ``({"dir", "mlflow_run_id", "experiment_id", "name", "label", "benchmark", "judge_qualification"}, ...)``
    of BASE and NEW (``label``: what tells them apart in the name; ``judge_qualification``: lines for the description).
    The run is named by what it compares and what it found
    (:func:`~evalkit.tracking.curate.comparison_name`: ``Δ overall acebench: reference →
    replay −0.28 (p 0.0003, worse)``), tagged ``evalkit.kind=comparison``,
    ``evalkit.base_run_id`` / ``evalkit.new_run_id`` (and their directories); its description
    links both runs (MLflow has one parent per run and no run-to-run links), and each compared
    run logged in this store gets the tag ``evalkit.compared_in`` (this comparison's id; every
    one in ``evalkit.comparisons``) and a description line ``Compared in [<name>](link)``.
    Metrics (:func:`~evalkit.tracking.curate.comparison_metrics`, prefixed ``compare/``): the
    headline's ``delta``, ``delta_ci_low``/``_high``, ``p``, ``p_holm``, ``p_bh``, ``mde`` and
    the paired ``n`` — never ``headline``, so it does not mix into the runs' columns. Tables:
    ``tables/paired.json`` (every metric) and ``tables/flips.json`` (the flipped samples).
    ``parent_run_id``: a sweep's parent run, under which the comparison is nested.

    The comparison run and NEW's run also get what MLflow 3.18's own views read
    (:func:`_baseline_views`); outside a sweep BASE becomes the experiment's baseline.
    """
    mlflow_client = client(uri)
    base, new = runs
    exp_id = base.get("experiment_id") or new.get("experiment_id") or experiment_id(mlflow_client, experiment, "")
    head = pair.get("primary")
    m = (pair.get("metrics") or {}).get(head) or {}
    level = pair.get("level", 0.95)
    changed = pair.get("instrument_changed")
    said = verdict["verdict"] if verdict else curate.comparison_verdict(m, level, changed)
    labels = [str(r.get("label") or r.get("name") or Path(str(r["dir"])).name) for r in (base, new)]
    if labels[0] == labels[1]:  # the same model twice: the run directories tell them apart
        labels = [f"{label} ({Path(str(r['dir'])).name})" for label, r in zip(labels, (base, new))]
    bench = str(base.get("benchmark") or new.get("benchmark") or "")
    name = curate.comparison_name(str(head), bench, labels[0], labels[1], m, level, changed)
    tags = {"evalkit.kind": "comparison", "evalkit.verdict": said, "headline_name": str(head),
            "evalkit.base_run_dir": str(base["dir"]), "evalkit.new_run_dir": str(new["dir"]),
            "mlflow.runName": name, "mlflow.note.content": _comparison_note(runs, exp_id, pair, said, verdict),
            **({"benchmark": bench} if bench else {}), **({"mlflow.parentRunId": parent_run_id} if parent_run_id else {})}  # fmt: skip
    tags.update({f"evalkit.{k}_run_id": str(r["mlflow_run_id"]) for k, r in (("base", base), ("new", new)) if r.get("mlflow_run_id")})
    views_tags, views_metrics = _baseline_views(base, str(head), m, level, verdict)
    tags.update(views_tags)
    run = mlflow_client.create_run(exp_id, tags=mlflow_obj(tags))
    rid = run.info.run_id
    log_values(mlflow_client, rid, metrics={**curate.comparison_metrics(m), **views_metrics})
    _comparison_tables(mlflow_client, rid, pair, flips)
    for side, end in (("base", base), ("new", new)):
        if end.get("mlflow_run_id"):
            extra = (views_tags, views_metrics) if side == "new" else ({}, {})
            _link_compared(mlflow_client, str(end["mlflow_run_id"]), rid, exp_id, name, side, *extra)
    if parent_run_id is None and views_tags and new.get("mlflow_run_id") and base.get("experiment_id") == new.get("experiment_id"):
        _set_experiment_baseline(mlflow_client, str(base.get("experiment_id") or exp_id), str(base["mlflow_run_id"]))
    mlflow_client.set_terminated(rid, status="FINISHED")
    return rid


#: characters of a gate's verdict line in the ``evalkit.gate`` tag
GATE_TAG_CHARS = 500


def _baseline_views(base: dict[str, Any], head: str, m: dict[str, Any], level: float,
                    verdict: dict[str, Any] | None) -> tuple[dict[str, str], dict[str, float]]:  # fmt: skip
    """``(tags, metrics)`` that MLflow 3.18's evaluation views read (docs/tracking-mlflow-views.md),
    for the comparison run and NEW's run of a comparison against BASE; none when BASE is not an
    MLflow run: the tag :data:`~evalkit.tracking.curate.BASELINE_TAG` (BASE's run id), the
    figures named as ``mlflow.genai.compare_evaluations`` names them
    (:func:`~evalkit.tracking.curate.baseline_metrics`: ``compare/<base8>/<head>/diff``,
    ``ci_low``, ``ci_high``, ``p_value``, ``p_holm``, ``p_bh``, ``mde``, ``n_paired``) and, with
    a gate's ``verdict``, :data:`~evalkit.tracking.curate.QUALITY_CRITERIA_TAG` (the gate's
    interval test and its verdict, :func:`~evalkit.tracking.curate.quality_criteria`) and
    ``evalkit.gate`` (the verdict's line). :func:`log_comparison` also sets the tag on the
    experiment (:func:`_set_experiment_baseline`, what the "Evaluation runs" page reads) when
    NEW is in BASE's experiment, outside a sweep. Older MLflow versions store the same tags
    and metrics and show them as plain tags and metrics."""
    base_id = str(base.get("mlflow_run_id") or "")
    if not base_id:
        return {}, {}
    tags = {curate.BASELINE_TAG: base_id}
    if verdict:
        tags[curate.QUALITY_CRITERIA_TAG] = curate.quality_criteria(verdict, base_id, head, m, level)
        tags["evalkit.gate"] = gate_tag(verdict)
    return tags, curate.baseline_metrics(base_id, head, m)


def gate_tag(verdict: dict[str, Any]) -> str:
    """The ``evalkit.gate`` tag of a gate's ``verdict`` (``{"gate", "verdict", "line"}``): the
    verdict first, as a tag chip cut short still shows it — ``FAIL (noninferior:0.05) — upper
    bound −0.08 < −0.05; overall Δ …`` — at most :data:`GATE_TAG_CHARS` characters."""
    name, said, line = str(verdict.get("gate")), str(verdict.get("verdict")), str(verdict.get("line") or "")
    rest = line.removeprefix(f"gate {name}: {said} — ")
    return f"{said} ({name}) — {rest}"[:GATE_TAG_CHARS] if rest else f"{said} ({name})"


def _set_experiment_baseline(mlflow_client: Any, exp_id: str, base_run_id: str) -> None:
    """Make ``base_run_id`` the baseline of experiment ``exp_id`` in MLflow 3.18's "Evaluation
    runs" page (the experiment tag :data:`~evalkit.tracking.curate.BASELINE_TAG`, as its "Set as
    baseline" writes it). An experiment that cannot be tagged (no permission) is one warning:
    the comparison stands."""
    try:
        mlflow_client.set_experiment_tag(exp_id, curate.BASELINE_TAG, base_run_id)
    except Exception as exc:  # noqa: BLE001 - a courtesy to the UI, as _link_compared's
        log.warning("experiment %s: could not mark run %s as its baseline (%s: %s)", exp_id, base_run_id, type(exc).__name__,
                    first_line(exc))  # fmt: skip


def _qualification_notes(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The description's lines on the compared runs' judges (each end's ``judge_qualification`` lines)."""
    return [f"Judge qualification of {side}: {line}" for side, r in (("BASE", base), ("NEW", new)) for line in r.get("judge_qualification") or []]


def _comparison_tables(mlflow_client: Any, rid: str, pair: dict[str, Any], flips: dict[str, Any] | None) -> None:
    """A comparison run's ``tables/paired.json`` (every metric of ``pair``) and
    ``tables/flips.json`` (each flipped sample of ``flips``, the side it is better in)."""
    import pandas as pd  # deferred: MLflow's own dependency

    rows = [{"metric": name, **{k: e.get(k) for k in ("a", "b", "delta", "low", "high", "p", "p_holm", "p_bh", "mde", "test", "n")},
             "note": e.get("note", "")} for name, e in (pair.get("metrics") or {}).items()]  # fmt: skip
    if rows:
        mlflow_client.log_table(rid, data=pd.DataFrame(rows, dtype=object), artifact_file="tables/paired.json")
    flipped = [{"sample_id": e["sample_id"], "subset": e.get("subset"), "base": e["a"], "new": e["b"], "better_in": side}
               for side, key in (("base", "a_better"), ("new", "b_better")) for e in (flips or {}).get(key, [])]  # fmt: skip
    if flipped:
        mlflow_client.log_table(rid, data=pd.DataFrame(mlflow_obj(flipped), dtype=object), artifact_file="tables/flips.json")


def _link_compared(mlflow_client: Any, run_id: str, comparison_id: str, exp_id: str, name: str, side: str,
                   tags: dict[str, str] | None = None, metrics: dict[str, float] | None = None) -> None:  # fmt: skip
    """Tie a compared run to its comparison: the tags ``evalkit.compared_in`` (the latest) and
    ``evalkit.comparisons`` (every one, comma-separated) and a description line
    ``Compared in [<name>](#/experiments/<exp>/runs/<id>) (as BASE|NEW).``, plus ``tags`` and
    ``metrics`` (NEW's: :func:`_baseline_views`). A run that cannot
    be read or tagged (deleted, no permission) is one warning: the comparison stands."""
    try:
        data = mlflow_client.get_run(run_id).data
        known = [x for x in str(data.tags.get("evalkit.comparisons", "")).split(",") if x]
        note = str(data.tags.get("mlflow.note.content", ""))
        text = name.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")  # a point such as judge=[a,b] stays link text
        line = f"{COMPARED_LINE}[{text}](#/experiments/{exp_id}/runs/{comparison_id}) (as {side.upper()})."
        kept = compared_lines(note)[-(MAX_COMPARED_LINES - 1) :]
        own = [part for part in note.split("\n\n") if part and not part.startswith(COMPARED_LINE)]
        log_values(mlflow_client, run_id, metrics=metrics, tags={
            **(tags or {}),
            "evalkit.compared_in": comparison_id,
            "evalkit.comparisons": ",".join([*known, comparison_id])[-5000:],
            "mlflow.note.content": "\n\n".join([*own, *kept, line]),
        })  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the comparison is recorded; the link is a courtesy
        log.warning("comparison %s: could not link MLflow run %s to it (%s: %s)", comparison_id, run_id, type(exc).__name__, first_line(exc))


def compared_lines(note: str) -> list[str]:
    """The ``Compared in …`` lines of a run's description (kept when the run is logged again)."""
    return [line for line in str(note).split("\n\n") if line.startswith(COMPARED_LINE)]


def _log_gate_steps(mlflow_client: Any, run_id: str, summary: Summary) -> None:
    """A ``run.stop_when`` run's running interval (:mod:`evalkit.engine.sequential`) as MLflow
    metrics with steps — ``gate_delta``, ``gate_low``, ``gate_high`` at step n (paired units
    used) of each look — so that the UI draws how the interval narrowed. Written whole each
    time (a metric's history is replaced by logging the same steps again)."""
    from mlflow.entities import Metric  # deferred: heavy

    looks = (getattr(summary, "sequential", None) or {}).get("looks") or []
    stamp = _ms(summary.finished_at) or 0
    entries = [Metric(f"gate_{k}", float(look[k]), stamp, int(look["n"])) for look in looks for k in ("delta", "low", "high")]
    for i in range(0, len(entries), 900):  # MLflow's log_batch takes at most 1000 metrics
        mlflow_client.log_batch(run_id, metrics=entries[i : i + 900])

