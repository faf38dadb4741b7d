"""One run: validated config → samples → requests → execution → journal → summary.

Data flow (ARCHITECTURE.md): load benchmark data (+ fingerprint) → build requests (prompt
hash) → execute (Ray / in-process) → journal each finished sample at once → score →
aggregate → ``summary.json``, ``report.md`` → MLflow. Scoring reads only the journal, so
a resumed run and an uninterrupted one give the same metrics.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import logging
import os
import shutil
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalkit import __version__, secrets
from evalkit.benchmarks.base import Benchmark, get_benchmark_class
from evalkit.config import EvalConfig
from evalkit.engine.executor import LocalExecutor, RayExecutor, ensure_ray, open_cache, run_units, shutdown_ray
from evalkit.engine.journal import JsonlAppender, latest_by_sample, read_jsonl, unreadable_lines
from evalkit.errors import ConfigError, DataError, RunDirError, RunInterrupted, TrackingError, first_line
from evalkit.types import Completion, Failure, Request, Sample, Trajectory, canonical_json, sha256_hex

log = logging.getLogger("evalkit")

PREDICTIONS = "predictions.jsonl"
FAILED = "failed.jsonl"
SUMMARY = "summary.json"


@dataclass
class RunResult:
    """What a finished run left: its directory, its summary, and the process exit code
    (0 complete, 1 incomplete)."""

    run_dir: Path
    summary: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return 0 if self.summary["status"] == "complete" else 1


# ------------------------------------------------------------------------------------------
# selection and identity
# ------------------------------------------------------------------------------------------
def select_samples(samples: list[Sample], cfg: EvalConfig) -> list[Sample]:
    """Apply ``run.sample_ids`` / ``run.sample_ids_file`` then ``run.limit`` (first N).

    Raises:
        ConfigError: a requested id that the benchmark does not have.
    """
    wanted: list[str] | None = None
    if cfg.run.sample_ids is not None:
        wanted = list(cfg.run.sample_ids)
    if cfg.run.sample_ids_file is not None:
        try:
            lines = Path(cfg.run.sample_ids_file).read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise ConfigError(f"run.sample_ids_file: {cfg.run.sample_ids_file} is not UTF-8 text (one id per line)") from None
        stripped = (ln.strip() for ln in lines)
        wanted = (wanted or []) + [ln for ln in stripped if ln and not ln.startswith("#")]
    if wanted is not None:
        by_id = {s.id: s for s in samples}
        unknown = [sid for sid in wanted if sid not in by_id]
        if unknown:
            example = samples[0].id if samples else "none"
            raise ConfigError(f"run.sample_ids: unknown sample id {unknown[0]!r} (ids look like {example!r})")
        seen: set[str] = set()
        samples = [by_id[sid] for sid in wanted if not (sid in seen or seen.add(sid))]
    if cfg.run.limit is not None:
        samples = samples[: cfg.run.limit]
    return samples


def data_fingerprint(samples: list[Sample]) -> str:
    """SHA-256 over the evaluated records (id, subset and payload, in selection order)."""
    h = sha256_hex("".join(canonical_json([s.id, s.subset, s.data]) + "\n" for s in samples))
    return h


def code_version() -> str:
    """``<version>+<sha256 of evalkit's sources, 12 hex>``: identifies the code that scored."""
    root = Path(__file__).resolve().parents[1]
    digest = sha256_hex(
        "".join(
            f"{p.relative_to(root)}\0{sha256_hex(p.read_bytes())}\n" for p in sorted(root.rglob("*.py"))
        )
    )
    return f"{__version__}+{digest[:12]}"


# ------------------------------------------------------------------------------------------
# run directory
# ------------------------------------------------------------------------------------------
#: config parts a resumed run may change: the selection, where things go, and how requests
#: are scheduled and retried (none of these changes what a request asks)
RESUMABLE_KEYS = {"run", "tracking", "runner", "hydra"} | {
    f"backend.{k}"
    for k in ("concurrency", "adaptive_concurrency", "timeout_s", "max_retries", "retry_initial_wait_s",
              "retry_max_wait_s", "retry_budget_s")
}  # fmt: skip


def _first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if f"{prefix}{key}" in RESUMABLE_KEYS:
                continue
            diff = _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
            if diff:
                return diff
        return None
    return None if a == b else prefix.rstrip(".")


def _cache_dir(cfg: EvalConfig) -> Path | None:
    """The response cache's directory (``run.cache_dir``, default ``<output_root>/cache``), or
    ``None`` with ``run.cache=false``."""
    return (cfg.run.cache_dir or cfg.run.output_root / "cache") if cfg.run.cache else None


def make_run_dir(cfg: EvalConfig, raw_cfg: dict[str, Any]) -> tuple[Path, bool]:
    """The run directory and whether it is resumed.

    New runs go to ``<output_root>/runs/<benchmark>/<model>/<YYYYmmdd-HHMMSS>-<pid>``
    (``-2``, ``-3``… appended if a run of the same process started in the same second),
    or to ``run.dir``, which must not exist. A resumed run must have the same benchmark,
    model, backend and generation settings as the run it continues (only ``run.*``,
    ``runner.*`` and ``tracking.*`` may change, e.g. a larger ``run.limit``).

    Raises:
        RunDirError: the directory exists, cannot be created, or the resume target is not
            a run of this configuration.
    """
    if cfg.run.resume is not None:
        run_dir = Path(cfg.run.resume)
        try:
            prev = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise RunDirError(f"run.resume: {run_dir}/config.yaml cannot be read ({type(exc).__name__})") from None
        if not isinstance(prev, dict) or not isinstance(prev.get("benchmark"), dict) or not isinstance(prev.get("model"), dict):
            raise RunDirError(f"run.resume: {run_dir}/config.yaml is not an evalkit run config")
        for key, now in (("benchmark", cfg.benchmark.name), ("model", cfg.model.name)):
            was = prev[key].get("name")
            if was != now:
                raise RunDirError(f"run.resume: {run_dir} is a run of {key}={was}, not {key}={now}")
        diff = _first_difference(prev, secrets.redact_config(raw_cfg))
        if diff:
            raise RunDirError(
                f"run.resume: {diff} differs from the run being resumed ({run_dir}); "
                "only run.*, runner.*, tracking.* and backend.{concurrency, adaptive_concurrency, timeout_s, "
                "max_retries, retry_*} may change on resume"
            )
        bad = unreadable_lines(run_dir / PREDICTIONS)
        if bad > 1:  # one torn last line is what a killed process leaves
            log.warning("run.resume: %d unreadable lines in %s skipped; their samples are asked again", bad, run_dir / PREDICTIONS)
        return run_dir, True
    if cfg.run.dir is not None:
        run_dir = Path(cfg.run.dir)
        if run_dir.exists():
            raise RunDirError(f"run.dir: {run_dir} already exists; use run.resume={run_dir} to continue it")
    else:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        parent = cfg.run.output_root / "runs" / cfg.benchmark.name / cfg.model.name
        run_dir = parent / f"{stamp}-{os.getpid()}"
        k = 2
        while run_dir.exists():
            run_dir = parent / f"{stamp}-{os.getpid()}-{k}"
            k += 1
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        key = "run.dir" if cfg.run.dir is not None else "run.output_root"
        raise RunDirError(f"{key}: cannot create {run_dir} ({exc.strerror or type(exc).__name__})") from None
    return run_dir, False


def write_config(run_dir: Path, raw_cfg: dict[str, Any]) -> None:
    """``config.yaml``: the resolved config with secrets redacted."""
    text = yaml.safe_dump(secrets.redact_config(raw_cfg), sort_keys=False, allow_unicode=True)
    (run_dir / "config.yaml").write_text(text, encoding="utf-8")


def _setup_file_logging(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "evalkit.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(secrets.ScrubFilter())
    logging.getLogger().addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


# ------------------------------------------------------------------------------------------
# model construction
# ------------------------------------------------------------------------------------------
def _offline_outputs(cfg: EvalConfig, bench: Benchmark, samples: list[Sample]) -> tuple[dict[str, str], str]:
    if cfg.model.kind == "reference":
        outputs = {s.id: bench.reference_output(s) for s in samples}
        return outputs, "gold"
    if cfg.model.kind == "baseline":
        assert cfg.model.baseline is not None
        return {s.id: bench.baseline_output(cfg.model.baseline, s) for s in samples}, f"baseline-{cfg.model.baseline}"
    from evalkit.models.offline import file_digest, load_replay_file

    assert cfg.model.path is not None
    return load_replay_file(cfg.model.path), file_digest(cfg.model.path)


def served_weights_identity(backend: Any) -> str | None:
    """For ``backend=llamacpp``: ``llamacpp:<alias>:<gguf file name>:<bytes>[:fresh]`` — what
    answers, independent of the port the server got."""
    if backend.kind != "llamacpp":
        return None
    from evalkit.backends.llamacpp import smollm2_gguf

    gguf = Path(backend.gguf) if backend.gguf else smollm2_gguf()
    size = gguf.stat().st_size if gguf.exists() else 0
    return f"llamacpp:{backend.model_alias}:{gguf.name}:{size}{':fresh' if backend.fresh_prompt_eval else ''}"


def _model_factory(model: Any, backend: Any, api_base: str | None, api_key: str | None, timeout_s: float) -> Any:
    from evalkit.models.litellm_client import LiteLLMModel

    return functools.partial(
        LiteLLMModel,
        identity=served_weights_identity(backend),
        provider_model=model.provider_model,
        api=model.api,
        api_base=api_base,
        api_key=api_key,
        timeout_s=timeout_s,
        max_retries=backend.max_retries,
        retry_initial_wait_s=backend.retry_initial_wait_s,
        retry_max_wait_s=backend.retry_max_wait_s,
        retry_budget_s=backend.retry_budget_s,
        extra_body=dict(model.extra_body),
    )


def _litellm_factory(cfg: EvalConfig, api_base: str | None) -> Any:
    return _model_factory(cfg.model, cfg.backend, api_base, cfg.api_key(), cfg.request_timeout_s())


def _user_factory(cfg: EvalConfig, api_base: str | None) -> Any:
    assert cfg.user is not None
    secrets.register(cfg.user_api_key())
    return _model_factory(cfg.user.model, cfg.user.backend, api_base, cfg.user_api_key(), cfg.request_timeout_s())


# ------------------------------------------------------------------------------------------
# records
# ------------------------------------------------------------------------------------------
def _verdict_fields(
    sample: Sample, request: Request, model_id: str, scored: Any, status: str, output: str | None
) -> dict[str, Any]:
    """The fields every ``predictions.jsonl`` row has, in contract order."""
    return {
        "sample_id": sample.id,
        "subset": sample.subset,
        "status": status,
        "output": output,
        "parsed": scored.parsed,
        "scores": scored.scores,
        "checks": scored.checks,
        "failed_checks": scored.failed_checks,
        "detail": scored.detail,
        "request_hash": request.request_hash(model_id),
        "prompt_hash": request.prompt_hash(),
    }


def prediction_record(bench: Benchmark, sample: Sample, request: Request, model_id: str, completion: Completion) -> dict[str, Any]:
    """One ``predictions.jsonl`` row (record contract of ARCHITECTURE.md)."""
    prefix = request.meta.get("answer_prefix") or ""
    output = prefix + (completion.text or "")
    scored = bench.score(sample, output)
    status = scored.status
    if status == "ok" and completion.finish_reason == "length":
        status = "truncated"
    return {
        **_verdict_fields(sample, request, model_id, scored, status, output),
        **({"raw_output": completion.text} if prefix else {}),
        "usage": completion.usage,
        "latency_s": round(completion.latency_s, 4),
        "attempts": completion.attempts,
        "throttled": completion.throttled,
        "cached": completion.cached,
        "finish_reason": completion.finish_reason,
        "reasoning": completion.reasoning,
    }


def rollout_record(
    bench: Benchmark, sample: Sample, request: Request, model_id: str, trajectory: Trajectory, run_dir: Path
) -> dict[str, Any]:
    """The ``predictions.jsonl`` row of a finished rollout; the full transcript is kept in
    the row (``trajectory``, so rescoring needs nothing else) and in
    ``trajectories/<sample id>.json`` for reading."""
    traj = trajectory.to_dict()
    scored = bench.score_trajectory(sample, traj)
    tdir = run_dir / "trajectories"
    tdir.mkdir(exist_ok=True)
    (tdir / (sample.id.replace("/", "__") + ".json")).write_text(
        json.dumps(secrets.scrub_obj({"sample_id": sample.id, **traj}), ensure_ascii=False, indent=1, default=str),
        encoding="utf-8",
        errors="backslashreplace",
    )
    usage: dict[str, int] = {}
    for turn in trajectory.turns:
        for k, v in (turn.get("usage") or {}).items():
            usage[k] = usage.get(k, 0) + int(v)
    return {
        **_verdict_fields(sample, request, model_id, scored, scored.status, trajectory.final_output),
        "usage": usage,
        "latency_s": round(sum(t.get("latency_s", 0.0) for t in trajectory.turns), 4),
        "attempts": sum(t.get("attempts", 0) for t in trajectory.turns),
        "cached": bool(trajectory.turns) and all(t.get("cached") for t in trajectory.turns),
        "n_turns": len(trajectory.turns),
        "trajectory": traj,
    }


def failure_record(sample: Sample, request: Request, model_id: str, failure: Failure) -> dict[str, Any]:
    """One ``failed.jsonl`` row: the sample is not scored."""
    return {
        "sample_id": sample.id,
        "subset": sample.subset,
        "error_kind": failure.error_kind,
        "message": failure.message,
        "attempts": failure.attempts,
        "actor": failure.actor,
        "request_hash": request.request_hash(model_id),
    }


# ------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------
def run_evaluation(cfg: EvalConfig, raw_cfg: dict[str, Any]) -> RunResult:
    """Execute one validated run end to end and return where it left its results.

    Raises:
        ConfigError / DataError / RunDirError: before any request is sent.
    """
    secrets.register(cfg.api_key())
    for backend in (cfg.backend, cfg.user.backend if cfg.user is not None else None):
        secrets.register_url_password(getattr(backend, "api_base", None))
    bench_cls = get_benchmark_class(cfg.benchmark.name)
    bench = bench_cls(cfg.benchmark)
    loaded = bench.load()
    seen_ids: set[str] = set()
    for sample in loaded:
        if sample.id in seen_ids:
            raise DataError(f"{bench.name}: sample id {sample.id!r} occurs twice in the data; ids must be unique")
        seen_ids.add(sample.id)
    samples = select_samples(loaded, cfg)
    if not samples:
        raise ConfigError("run: the selection is empty (check benchmark.subsets, run.sample_ids, run.limit)")

    if bench.needs_user_model(samples) and cfg.user is None and cfg.model.kind != "reference":
        subsets = sorted({s.subset for s in samples if bench.is_rollout(s)})
        raise ConfigError(
            f"benchmark.user_model: the selected {bench.name} subsets {subsets} need a user simulator; "
            "pass benchmark.user_model=<model config name> (e.g. smollm2, gpt4o)"
        )
    if cfg.model.kind == "replay" and any(bench.is_rollout(s) for s in samples):
        raise ConfigError("model=replay: agent rollouts cannot be replayed from single outputs; deselect those subsets")
    params = cfg.generation_params()
    requests: dict[str, Request] = {}
    completion = cfg.model.api == "completion" and cfg.model.kind == "litellm"
    for sample in samples:
        if completion and not bench.is_rollout(sample):
            req = bench.build_completion(sample, cfg.shots.n)
        else:
            req = bench.build(sample, cfg.shots.n)
        req.params = dict(params)
        requests[sample.id] = req

    offline = None
    if cfg.backend.kind == "offline":  # read replay files etc. before anything is written
        offline = _offline_outputs(cfg, bench, [s for s in samples if not bench.is_rollout(s)])
    cache_dir = _cache_dir(cfg)
    if cache_dir is not None and cache_dir.exists() and cfg.backend.kind != "offline":
        open_cache(cache_dir).close()  # a corrupt cache: one line before anything runs (opening one writes nothing)
    # connect to Ray before anything is written: an unreachable cluster leaves nothing behind
    started_ray = cfg.backend.kind != "offline" and ensure_ray(cfg.runner.address, cfg.runner.num_cpus)
    try:
        if cfg.tracking.kind == "mlflow":  # a bad tracking setting: one line before the run starts
            from evalkit.tracking import check_tracking

            check_tracking(cfg)
        run_dir, resumed = make_run_dir(cfg, raw_cfg)
        handler = _setup_file_logging(run_dir)
        try:
            return _run_in_dir(cfg, raw_cfg, bench, samples, requests, run_dir, resumed, offline)
        except KeyboardInterrupt as exc:
            if isinstance(exc, RunInterrupted):
                raise
            log.info("interrupted; resume with run.resume=%s", run_dir)  # evalkit.log; the console gets one line
            raise RunInterrupted(run_dir) from exc
        except Exception as exc:  # a bug: __main__.report_crash logs its traceback to this run's evalkit.log
            exc.evalkit_run_dir = run_dir  # type: ignore[attr-defined]
            raise
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()
    finally:
        if started_ray:
            shutdown_ray()


def _run_in_dir(
    cfg: EvalConfig,
    raw_cfg: dict[str, Any],
    bench: Benchmark,
    samples: list[Sample],
    requests: dict[str, Request],
    run_dir: Path,
    resumed: bool,
    offline: tuple[dict[str, str], str] | None = None,
) -> RunResult:
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    if not resumed:
        write_config(run_dir, raw_cfg)
    elif (run_dir / FAILED).exists():
        # failures of earlier attempts are history: this attempt retries them
        k = 1
        while (run_dir / f"failed.prev-{k}.jsonl").exists():
            k += 1
        shutil.move(str(run_dir / FAILED), str(run_dir / f"failed.prev-{k}.jsonl"))
    (run_dir / FAILED).touch()

    by_id = {s.id: s for s in samples}
    cache_dir = _cache_dir(cfg)

    rollout_ids = {s.id for s in samples if bench.is_rollout(s)}
    with ExitStack() as stack:
        servers: dict[str, str] = {}  # llama.cpp servers started for this run, by backend config

        def endpoint(backend: Any, log_name: str) -> str | None:
            """api_base of a backend, starting evalkit's own llama.cpp server if needed."""
            if backend.kind != "llamacpp" or backend.api_base:
                return getattr(backend, "api_base", None)
            key = backend.model_dump_json()
            if key not in servers:
                from evalkit.backends.llamacpp import LlamaCppServer

                server = LlamaCppServer(
                    gguf=backend.gguf, model_alias=backend.model_alias, port=backend.port, n_ctx=backend.n_ctx,
                    n_threads=backend.n_threads, fresh_prompt_eval=backend.fresh_prompt_eval,
                    startup_timeout_s=backend.startup_timeout_s, log_file=backend.log_file or run_dir / log_name,
                )  # fmt: skip
                servers[key] = stack.enter_context(server)
            return servers[key]

        runner = bench.rollout_runner() if rollout_ids else None
        agent_params = cfg.generation_params()
        user_params = cfg.user_generation_params()
        if cfg.backend.kind == "offline":
            assert offline is not None
            outputs, source = offline
            from evalkit.models.offline import TableModel

            model_id = TableModel(cfg.model.name, {}, source).model_id
            executor: Any = LocalExecutor(
                TableModel(cfg.model.name, outputs, source), None, runner=runner,
                rollout_models=bench.reference_agents if cfg.model.kind == "reference" else None,
                agent_params=agent_params, user_params=user_params,
            )  # fmt: skip
        else:
            agent_base = endpoint(cfg.backend, "llama-server.log")
            factory = _litellm_factory(cfg, agent_base)
            model_id = factory().model_id
            user_factory = None
            if cfg.user is not None and rollout_ids:
                same = cfg.user.model.name == cfg.model.name and cfg.user.backend.kind == cfg.backend.kind
                user_base = agent_base if same else endpoint(cfg.user.backend, "llama-server-user.log")
                user_factory = _user_factory(cfg, user_base)
                model_id = f"{model_id}|user={user_factory().model_id}"
            executor = RayExecutor(
                factory, cache_dir, cfg.runner.num_workers, cfg.backend.concurrency,
                user_factory=user_factory, runner=runner, agent_params=agent_params, user_params=user_params,
            )  # fmt: skip
        stack.callback(executor.close)

        hashes = {sid: req.request_hash(model_id) for sid, req in requests.items()}
        done = latest_by_sample(run_dir / PREDICTIONS, hashes)
        pending = [(s, requests[s.id], s.id in rollout_ids) for s in samples if s.id not in done]
        log.info("run %s: %d samples, %d already journaled, %d to run", run_dir, len(samples), len(done), len(pending))

        predictions = stack.enter_context(JsonlAppender(run_dir / PREDICTIONS))
        failed = stack.enter_context(JsonlAppender(run_dir / FAILED))
        progress = _progress(len(pending), f"{cfg.benchmark.name}/{cfg.model.name}", cfg.run.progress)
        stack.callback(progress.close)
        n_fail = 0

        def on_result(sample: Sample, request: Request, result: Any) -> None:
            nonlocal n_fail
            if isinstance(result, Trajectory):
                if result.failure is None:
                    predictions.append(rollout_record(bench, sample, request, model_id, result, run_dir))
                else:
                    n_fail += 1
                    failure = result.failure
                    failure.attempts = max(failure.attempts, 1)
                    failed.append(failure_record(sample, request, model_id, failure))
            elif isinstance(result, Completion):
                predictions.append(prediction_record(bench, sample, request, model_id, result))
            else:
                n_fail += 1
                failed.append(failure_record(sample, request, model_id, result))
            progress.update(1)
            if n_fail:
                progress.set_postfix(failed=n_fail, refresh=False)

        engine: dict[str, Any] | None = None
        if pending:
            engine = asyncio.run(
                run_units(executor, pending, cfg.backend.concurrency, on_result, cfg.backend.adaptive_concurrency)
            )
            engine["units"] = len(pending)

    finished_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    summary = finalize(
        cfg, bench, samples, requests, model_id, run_dir, started_at, finished_at, time.perf_counter() - t0, engine
    )
    return RunResult(run_dir, summary)


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="sample", file=sys.stderr, disable=not enabled or total == 0, dynamic_ncols=True)


def finalize(
    cfg: EvalConfig,
    bench: Benchmark,
    samples: list[Sample],
    requests: dict[str, Request],
    model_id: str,
    run_dir: Path,
    started_at: str,
    finished_at: str,
    wall_s: float,
    engine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Read the journal back, aggregate, write ``summary.json`` and ``report.md``, log to
    MLflow. The headline metrics are withheld (``partial_*`` instead) when any selected
    sample has no scored prediction. ``engine`` (the figures of :func:`run_units` for the
    units this attempt ran) goes to ``summary["engine"]``."""
    from evalkit.report.summary import build_summary, write_report
    from evalkit.tracking import log_run

    hashes = {sid: req.request_hash(model_id) for sid, req in requests.items()}
    done = latest_by_sample(run_dir / PREDICTIONS, hashes)
    records = [done[s.id] for s in samples if s.id in done]
    failures = {r["sample_id"]: r for r in read_jsonl(run_dir / FAILED) if r.get("sample_id") in hashes and r["sample_id"] not in done}
    missing = [s.id for s in samples if s.id not in done]
    metrics = bench.aggregate(samples, records)
    prompt_hash = sha256_hex("".join(f"{s.id}\0{requests[s.id].prompt_hash()}\n" for s in samples))
    summary = build_summary(
        cfg=cfg,
        bench=bench,
        samples=samples,
        records=records,
        failures=failures,
        missing=missing,
        metrics=metrics,
        fingerprint=data_fingerprint(samples),
        prompt_hash=prompt_hash,
        code_version=code_version(),
        model_id=model_id,
        started_at=started_at,
        finished_at=finished_at,
        wall_s=wall_s,
    )
    if engine is not None:
        summary["engine"] = engine
    summary = secrets.scrub_obj(summary)
    (run_dir / SUMMARY).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        bench.write_plots(run_dir / "plots", metrics, records)
    except Exception:  # noqa: BLE001 - a figure must never cost the run its summary
        log.exception("plotting failed")
    write_report(run_dir, summary, bench)
    if cfg.tracking.kind == "mlflow":
        try:
            log_run(cfg, run_dir, summary)
        except Exception as exc:  # noqa: BLE001 - any tracking failure becomes one line
            log.exception("MLflow logging failed")
            first = first_line(exc)
            raise TrackingError(
                f"tracking: MLflow logging failed ({type(exc).__name__}: {first}); the run's results are in {run_dir} "
                f"— fix tracking.tracking_uri and log them again with run.resume={run_dir}"
            ) from None
    return summary
