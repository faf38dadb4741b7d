"""Qualify a judge: measure it against people's labels and a steering battery, and record it.

    python -m evalkit.judge qualify judge=<model config> benchmark=<task> labels=FILE.jsonl|mlflow:<run or experiment>
        [scorer=NAME] [battery=FILE.jsonl] [steer_items=10] [judge_overrides=[...]]
        [judge_qualification.KEY=VALUE ...] [run.KEY=VALUE ...] [backend.concurrency=N]

**What it asks.** The judge (one model config, as ``judge=`` of a run, with
``judge_overrides``) rates, by the task's ``llm_judge`` scorer (``scorer=``, needed when the
task has several), each labelled answer of ``labels`` (JSON Lines ``{"sample_id", "answer",
"label"}``, optionally ``"category"``: :func:`evalkit.benchmarks.task.qualification.read_labels`;
or ``mlflow:<run id | experiment id or name>``: the HUMAN feedback named after the scorer on
the traces of that run or experiment in ``tracking.tracking_uri``, :mod:`evalkit.tracking.labels`)
— pairwise in both orders — and then each injection of the steering battery
(:data:`evalkit.benchmarks.task.steering.BATTERY`, plus ``battery=FILE``'s) put into up to
``steer_items`` known-wrong answers (labelled at the bottom of the scale). Every call goes
through the judge protocol of a run (:mod:`evalkit.benchmarks.task.judge`), the response
cache (``run.cache``, ``run.cache_dir``) and the judge's own backend (retries, timeout,
``backend.concurrency`` calls at once).

**What it writes.** One record (:mod:`evalkit.benchmarks.task.qualification`: the judge,
rubric, label-set and battery digests, the date and every figure) under
``judge_qualification.dir`` (default ``<run.output_root>/qualifications``), which runs and
``compare`` read; it prints the figures and the verdict on the floors
(``judge_qualification.min_kappa``, ``max_steer_rate``). With ``tracking=mlflow`` (the
default) the record is also logged as an MLflow run of ``tracking.experiment``
(:func:`evalkit.tracking.labels.log_qualification`); a store that fails is one warning line,
the record stays on disk.

A judge that could not be asked — every labelled call failed after its retries (server
unreachable, an HTTP error to each call) — was not measured: one line naming the judge and
its endpoint, exit 2, no record (:func:`unasked`). A judge that replied, even with no valid
verdict, was measured: its record says NOT qualified and why.

Exit codes: 0 qualified, 1 recorded but below a floor (the lines say which), 2 a bad
argument, labels file or config, or a judge that could not be asked (one line, nothing
written), 130 interrupted.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from evalkit import __version__
from evalkit.benchmarks import get_benchmark_class
from evalkit.benchmarks.task import qualification as Q
from evalkit.benchmarks.task.judge import ORDERS, accepted, judge_value, judgement, response_format
from evalkit.benchmarks.task.solver import judge_messages, judged_answers
from evalkit.benchmarks.task.steering import BATTERY, inject, read_battery
from evalkit.compose import compose, resolve
from evalkit.engine.cache import open_cache
from evalkit.engine.solve import ActorModel
from evalkit.errors import ConfigError, DataError, JudgeError, TrackingError, printable
from evalkit.models.base import ModelCallError, strip_credentials
from evalkit.models.factory import plan_models
from evalkit.specs import QualifySpec, build_qualify
from evalkit.tracking.labels import human_labels, is_mlflow_source, log_qualification
from evalkit.types import Request, Sample

USAGE = ("usage: python -m evalkit.judge qualify judge=<model config> benchmark=<task> labels=FILE.jsonl|mlflow:<run or experiment> [scorer=NAME] "
         "[battery=FILE.jsonl] [steer_items=N] [judge_overrides=[...]] [judge_qualification.KEY=VALUE ...] [run.KEY=VALUE ...]")  # fmt: skip
#: the arguments of the command itself (the rest are config overrides)
OWN = ("labels", "battery", "scorer", "steer_items")
#: the config groups an override may set
ACCEPTED = ("benchmark", "judge", "judge_overrides", "judge_qualification", "run", "backend", "tracking")
#: known-wrong answers each injection goes into, by default, and at most
STEER_ITEMS, MAX_STEER_ITEMS = 10, 1_000


def parse(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """``(own arguments, config overrides)`` of the command line.

    Raises:
        ConfigError: an argument that is neither, or a missing ``labels=`` / ``judge=`` / ``benchmark=``.
    """
    own: dict[str, str] = {}
    overrides: list[str] = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq:
            raise ConfigError(f"{printable(arg, 200)}: expected KEY=VALUE ({USAGE})")
        if key in OWN:
            own[key] = value
        elif key.lstrip("+~").split(".")[0] in ACCEPTED:
            overrides.append(arg)
        else:
            raise ConfigError(f"{printable(key, 100)}: evalkit.judge qualify takes {', '.join(f'{k}=' for k in OWN)} and "
                              f"{', '.join(ACCEPTED)} overrides; the judge is asked about the labelled answers, no model runs")  # fmt: skip
    for need, where in (("labels", own), ("judge", overrides), ("benchmark", overrides)):
        if not any(a.startswith(f"{need}=") for a in overrides) and need not in where:
            raise ConfigError(f"{need}=: missing ({USAGE})")
    if "steer_items" in own:
        if not own["steer_items"].isdigit() or not 0 <= int(own["steer_items"]) <= MAX_STEER_ITEMS:
            raise ConfigError(f"steer_items={printable(own['steer_items'], 40)}: expected an integer from 0 to {MAX_STEER_ITEMS}")
    return own, overrides


def qualify_spec(overrides: list[str]) -> QualifySpec:
    """The spec of the qualification (:class:`~evalkit.specs.QualifySpec`): the task and its one
    judge composed and validated as a run's (``model=reference`` stands in for a model under
    test, which is never asked).

    Raises:
        ConfigError: no task with an ``llm_judge`` scorer, a panel, the reference judge, a config error.
    """
    return build_qualify(resolve(compose(["model=reference", *overrides]))[1])


def judge_scorer(settings: Any, name: str | None) -> Any:
    """The ``llm_judge`` scorer of the task ``settings`` qualified: ``scorer=`` or the task's only one.

    Raises:
        ConfigError: no such scorer, or several and none named.
    """
    scorers = [s for s in settings.scorers if s.kind == "llm_judge"]
    if name is not None:
        for s in scorers:
            if s.score_name == name:
                return s
        raise ConfigError(f"scorer={printable(name, 100)}: not an llm_judge scorer of {settings.name} "
                          f"({', '.join(s.score_name for s in scorers)})")  # fmt: skip
    if len(scorers) > 1:
        raise ConfigError(f"scorer=: {settings.name} has several llm_judge scorers ({', '.join(s.score_name for s in scorers)}); name one")
    return scorers[0]


async def _ask_all(calls: list[tuple[Sample, str, str | None]], scorer: Any, settings: Any, name: str, judge: ActorModel,
                   concurrency: int) -> list[dict[str, Any]]:  # fmt: skip
    """The judgement record of each call ``(sample, answer, order)``, in order; a call that
    failed after its retries is an invalid record naming its failure."""
    gate = asyncio.Semaphore(max(1, concurrency))
    fmt = response_format(scorer)

    async def one(sample: Sample, answer: str, order: str | None) -> dict[str, Any]:
        answers = judged_answers(scorer, sample, answer, order)
        request = Request(sample.id, sample.subset, messages=judge_messages(settings, scorer, sample, answer, order),
                          meta={"params": {"response_format": fmt} if fmt else {}, "turn": {"scorer": scorer.score_name, "order": order}})  # fmt: skip
        async with gate:
            try:
                completion = await judge.generate(request, accept=accepted(scorer, answers))
            except ModelCallError as exc:
                failure = exc.failure
                return judgement(name, scorer, order, None, error=f"the judge's call failed ({failure.error_kind}): {failure.message}"[:500])
        return {**judgement(name, scorer, order, completion.text, cached=bool(completion.cached), answers=answers),
                "cached": bool(completion.cached)}

    return list(await asyncio.gather(*(one(*c) for c in calls)))


def qualify(own: dict[str, str], spec: QualifySpec, out: Any = sys.stdout) -> tuple[dict[str, Any], Path]:
    """Ask the judge, compute every figure, write the record; returns ``(record, path)``.

    Raises:
        EvalkitError: a labels or battery file that cannot be read, a judge that cannot be started.
    """
    started = time.perf_counter()
    settings = spec.benchmark
    scorer = judge_scorer(settings, own.get("scorer"))
    bench = get_benchmark_class(settings.name, kind=getattr(settings, "kind", None))(settings)
    samples = {s.id: s for s in bench.load()}
    source = None
    if is_mlflow_source(own["labels"]):
        items, source = mlflow_items(spec, own["labels"], scorer, samples)
        print(f"evalkit: labels from MLflow {printable(source['uri'], 200)} {own['labels']}: {source['labelled']} labelled answers "
              f"of {source['traces']} traces" + "".join(f"; {n} skipped: {why}" for why, n in source["skipped"].items()), file=out)  # fmt: skip
    else:
        items = Q.read_labels(own["labels"], scorer, samples)
    battery = list(BATTERY) + (read_battery(own["battery"]) if own.get("battery") else [])
    bottom = [i for i in items if i["label"] == 0.0][: int(own.get("steer_items", STEER_ITEMS))]
    orders: tuple[str | None, ...] = ORDERS if scorer.judge_setting("mode") == "pairwise" else (None,)
    against = scorer.judge_setting("against")
    injected = [(inj, item, inject(inj["template"], item["answer"], scorer, str(samples[item["sample_id"]].data.get(against, ""))))
                for inj in battery for item in bottom]  # fmt: skip
    calls = [(samples[i["sample_id"]], i["answer"], o) for i in items for o in orders]
    calls += [(samples[item["sample_id"]], text, o) for _, item, text in injected for o in orders]
    name = spec.judge.model.name
    print(f"evalkit: qualifying judge {name} on {settings.name}/{scorer.score_name}: {len(items)} labelled answers, "
          f"{len(battery)} injections × {len(bottom)} known-wrong answers ({len(calls)} judge calls)", file=out)  # fmt: skip
    plan = plan_models(spec.models, bench, [], with_user=False)
    cache = open_cache(spec.cache_dir)
    asking = time.perf_counter()
    (spec.root / "logs").mkdir(parents=True, exist_ok=True)
    with plan.open(spec.root / "logs") as factory:
        model, params = factory().judges[name]
        actor = ActorModel(model, None if getattr(model, "offline", False) else cache, "judge", params, [], 0)
        records = asyncio.run(_ask_all(calls, scorer, settings, name, actor, spec.concurrency))
    asked_s = time.perf_counter() - asking
    per = len(orders)
    unasked(spec, records[: len(items) * per])
    labelled = [records[k * per:(k + 1) * per] for k in range(len(items))]
    rest = records[len(items) * per:]
    steered = [rest[k * per:(k + 1) * per] for k in range(len(injected))]
    record = figures(spec, scorer, items, labelled, injected, steered, battery, own)
    record["calls"] = {"n": len(records), "cached": sum(1 for r in records if r.get("cached")), "judge_s": round(asked_s, 3),
                       "seconds": round(time.perf_counter() - started, 3)}  # fmt: skip
    if source is not None:
        record["labels"]["source"] = {"kind": "mlflow", **source}
    return record, Q.write_record(spec.root, record)


def endpoint(judge: Any) -> str:
    """Where the judge ``judge`` (:class:`~evalkit.specs.ActorSpec`) is asked, for a line: its
    provider model and base URL as ``scheme://host[:port]/path`` (no credentials, query or fragment)."""
    base = strip_credentials(judge.api_base)
    if base:
        parts = urlsplit(base)
        base = urlunsplit(parts._replace(query="", fragment=""))
    where = base or {"api": "the provider's default endpoint", "llamacpp": "the server evalkit starts"}.get(judge.backend.kind, "no network")
    return f"{printable(str(judge.model.provider_model), 100)} at {printable(where, 200)}"


def unasked(spec: QualifySpec, records: list[dict[str, Any]]) -> None:
    """Refuse a judge none of whose calls on the labelled answers got a reply (``records``:
    their judgement records, each a call that failed after its retries): it was not measured,
    so nothing is recorded. A judge that replied without a valid verdict was measured (its
    record is NOT qualified, with the reasons).

    Raises:
        JudgeError: one line naming the judge, its endpoint (:func:`endpoint`) and the reasons counted.
    """
    if not records or any(r["text"] is not None for r in records):  # a failed call's record has no text (judge.judgement)
        return
    reasons = ", ".join(f"{why}: {n}" for why, n in Q.invalid_reasons(records).items())
    raise JudgeError(f"judge {spec.judge.model.name} ({endpoint(spec.judge)}) could not be asked: every one of its "
                     f"{len(records)} labelled calls failed ({printable(reasons, 300)}); no qualification recorded")  # fmt: skip


def mlflow_items(spec: QualifySpec, labels: str, scorer: Any, samples: dict[str, Sample]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The labelled answers of ``labels=mlflow:…`` (:func:`evalkit.tracking.labels.human_labels`),
    each checked as a labels file's row (:func:`~evalkit.benchmarks.task.qualification.label_item`),
    in the task's order of samples (then by answer): the label-set digest and the figures do
    not depend on the order the store lists traces in, and equal those of a labels file in that order;
    a trace whose ``sample_id`` is not a sample of the task is skipped (counted), as an
    experiment may hold several tasks' traces. Returns ``(items, source)``.

    Raises:
        DataError: a label of another kind (naming its trace), no labelled answer at all.
        TrackingError: the store cannot be read.
    """
    rows, source = human_labels(spec.tracking, labels, scorer.score_name)
    order = {sid: k for k, sid in enumerate(samples)}  # the task's order, whatever order the store answered in
    rows.sort(key=lambda r: (order.get(r["sample_id"], len(order)), r["answer"]))
    items: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], int] = {}
    other = 0
    for row in rows:
        if row["sample_id"] not in samples:
            other += 1
            continue
        items.append(Q.label_item(row, f"labels={printable(labels, 200)}: {row['where']}", scorer, samples, seen, len(items) + 1))
    if other:
        source["skipped"][f"sample_id not a sample of {spec.benchmark.name}"] = other
    if not items:
        raise DataError(f"labels={printable(labels, 200)}: no HUMAN feedback named {scorer.score_name!r} on a trace of a sample of "
                        f"{spec.benchmark.name} with its answer ({source['traces']} traces read"
                        + "".join(f"; {n} skipped: {why}" for why, n in source["skipped"].items()) + ")")  # fmt: skip
    return items, source


def log_record(spec: QualifySpec, record: dict[str, Any], path: Path) -> str | None:
    """Log the record to MLflow when ``tracking=mlflow`` (:func:`evalkit.tracking.labels.log_qualification`);
    the line to print: where it went, or why it did not (the record stays on disk); ``None`` without tracking."""
    if spec.tracking.kind != "mlflow":
        return None
    try:
        run_id = log_qualification(spec.tracking, record, path)
    except TrackingError as exc:
        return f"evalkit: warning: the qualification was not logged to MLflow ({exc}); its record is {path}"
    return f"MLflow: logged as run {run_id} of experiment {printable(spec.tracking.experiment, 100)}"


def figures(spec: QualifySpec, scorer: Any, items: list[dict[str, Any]], labelled: list[list[dict[str, Any]]],
            injected: list[tuple[dict[str, str], dict[str, Any], str]], steered: list[list[dict[str, Any]]],
            battery: list[dict[str, str]], own: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """The qualification record (:mod:`evalkit.benchmarks.task.qualification`) of the judge's
    records: ``labelled`` (per labelled answer, its calls) and ``steered`` (per injected answer)."""
    level, resamples, seed = spec.ci_level, max(spec.resamples, 200), spec.seed
    labels = [i["label"] for i in items]
    values = [judge_value(recs) for recs in labelled]
    groups = [i["sample_id"] for i in items]
    clean = {(i["sample_id"], i["answer"]): v for i, v in zip(items, values)}
    outcomes = []
    for (inj, item, _), recs in zip(injected, steered):
        baseline = clean.get((item["sample_id"], item["answer"]))
        baseline = item["label"] if baseline is None else baseline
        value = judge_value(recs)
        copied = [Q.copied_value(scorer, r) for r in recs]
        copied_v = None
        if value is None and any(c is not None for c in copied):  # a copied verdict in some order: the value it would have had
            parts = [c if c is not None else r.get("value") for c, r in zip(copied, recs)]
            copied_v = sum(parts) / len(parts) if all(p is not None for p in parts) else max(c for c in copied if c is not None)
        outcomes.append({"kind": inj["kind"], "name": inj["name"], "sample_id": item["sample_id"],
                         "outcome": Q.steer_outcome(value, baseline, copied_v, value is not None)})  # fmt: skip
    flat = [r for recs in labelled for r in recs]
    pairwise = [{**r, "item": k} for k, recs in enumerate(labelled) for r in recs] if scorer.judge_setting("mode") == "pairwise" else []
    record: dict[str, Any] = {
        "format": Q.RECORD_FORMAT, "kind": Q.RECORD_KIND, "protocol": Q.PROTOCOL, "date": Q.now_iso(),
        "judge": spec.judge.model.name, "benchmark": spec.benchmark.name, "scorer": scorer.score_name,
        "digests": {"judge": Q.judge_digest(spec.judge.model, spec.judge.sent_params), "rubric": Q.rubric_digest(scorer),
                    "labels": Q.labels_digest(items), "battery": Q._digest(battery)},
        "labels": {"path": printable(str(own["labels"]), 500), "n": len(items), "n_samples": len(set(groups)),
                   "n_known_wrong": sum(1 for lab in labels if lab == 0.0)},
        "agreement": Q.agreement_figures(labels, values, groups, level, resamples, seed),
        "confusion": Q.confusion(labels, values),
        "categories": Q.per_category(items, values, level, resamples, seed),
        "invalid": {"n": sum(v is None for v in values), "reasons": Q.invalid_reasons(flat)},
        "steering": {**Q.steering_figures(outcomes, level), "items_per_injection": len(injected) // max(len(battery), 1),
                     "outcomes": outcomes},
        "bias": {"length": Q.length_bias([len(i["answer"]) for i in items], labels, values, level),
                 "position": Q.position_bias(pairwise, level) if pairwise else None},
        "items": [{"sample_id": i["sample_id"], "line": i["line"], "label": i["label"], "value": v} for i, v in zip(items, values)],
        "interval": {"level": level, "resamples": resamples, "seed": seed},
        "evalkit": __version__,
    }  # fmt: skip
    floors = spec.floors
    record["floors"] = floors
    record["refusals"] = Q.refusals(record, floors)
    record["qualified"] = not record["refusals"]
    return record


def _ci(fig: dict[str, Any] | None, digits: int = 3) -> str:
    if not fig or fig.get("value") is None:
        return "undefined"
    ci = fig.get("ci")
    inner = f" [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]" if ci else ""
    return f"{fig['value']:.{digits}f}{inner}"


def lines(record: dict[str, Any], path: Path) -> list[str]:
    """What the command prints of a record: agreement, steering, bias, the verdict, where."""
    agree = record["agreement"]
    out = [f"agreement with people ({record['labels']['n']} answers, {record['invalid']['n']} invalid verdicts): "
           f"κ {_ci(agree.get('cohen_kappa'))}, α {_ci(agree.get('krippendorff_alpha'))}, "
           f"agreement {_ci(agree.get('percent_agreement'))}"]  # fmt: skip
    steering = record["steering"]
    kinds = ", ".join(f"{k} {f['steered'] + f['copied']}/{f['n']} [{f['ci']['low']:.2f}, {f['ci']['high']:.2f}]"
                      for k, f in steering["kinds"].items() if f.get("ci"))  # fmt: skip
    out.append(f"steering ({steering['overall']['n']} injected known-wrong answers): {kinds or 'none run'}")
    length, position = record["bias"]["length"], record["bias"]["position"]
    bias = [f"length ρ {length['spearman_rho']:.3f} [{length['ci']['low']:.3f}, {length['ci']['high']:.3f}]" if length else "length: not measured (under 10 valid verdicts, or no variation in lengths or in the judge's excess over the label)"]
    if position and position.get("first_position_rate") is not None:
        bias.append(f"first position chosen {position['first_position_rate']:.3f} [{position['ci']['low']:.3f}, {position['ci']['high']:.3f}]"
                    f", orders agree {position['order_consistency']}")  # fmt: skip
    out.append("bias: " + "; ".join(bias))
    if record["qualified"]:
        out.append(f"qualified: κ ≥ {record['floors']['min_kappa']} and every steer rate ≤ {record['floors']['max_steer_rate']} → {path}")
    else:
        out += [f"NOT qualified: {why}" for why in record["refusals"]] + [f"recorded → {path}"]
    return out


def main(args: list[str]) -> int:
    """``python -m evalkit.judge qualify ...``; returns the exit code (errors raise)."""
    if not args or args[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 2)[2], file=sys.stderr)
        return 0 if args else 2
    own, overrides = parse(args)
    spec = qualify_spec(overrides)
    record, path = qualify(own, spec, sys.stderr)
    for line in lines(record, path):
        print(line)
    logged = log_record(spec, record, path)
    if logged:
        print(logged, file=sys.stderr if logged.startswith("evalkit: warning") else sys.stdout)
    return 0 if record["qualified"] else 1


