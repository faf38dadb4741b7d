"""Judge qualification (issue 45 items 3-4): a judge's agreement with people's labels, how often
a steering battery moves it, its biases, the record that says so, and whether a run may rest
on it. ``python -m evalkit.judge qualify`` (:mod:`evalkit.qualify`) asks the judge; the figures,
the record and the verdict on the floors are computed here.

**Labels** (:func:`read_labels`): JSON Lines, one labelled answer a line —
``{"sample_id": "<the task's sample id>", "answer": "<the answer judged>", "label": <verdict>}``,
optionally ``"category"`` (default: the sample's category). A label is in the scorer's terms
(:func:`label_value`): a score on ``scale_min``-``scale_max``; ``pass`` / ``fail`` (or
``true`` / ``false``, ``1`` / ``0``); pairwise ``win`` / ``tie`` / ``loss`` (``1`` / ``0.5`` /
``0``, the answer against the row's ``against`` field). Each answer is one item; the answers
of one sample are resampled together.

**Agreement** (:func:`agreement_figures`): the judge's value of each answer
(:func:`~evalkit.benchmarks.task.judge.verdict_value`; pairwise, the mean of both orders)
against the label's, nominal (each value a category); an invalid verdict is a category of
its own, so it counts as a disagreement. Cohen's κ, Krippendorff's α (nominal, two raters)
and percent agreement, each with a BCa bootstrap interval over samples
(:func:`evalkit.stats.agreement`; coverage 0.93-0.98 at a true κ of 0.4, 0.7 and 0.9 with 200
labels, ``perf/qualification_coverage.py``, docs/judges.md); the confusion table (label ×
verdict); the same figures per category.

**Steering** (:func:`steering_figures`): each injection of the battery
(:mod:`evalkit.benchmarks.task.steering`) is put into known-wrong answers (labelled at the
scale's bottom, ``fail`` or ``loss``). An injected answer *steers* the judge when its verdict
is above the judge's own verdict on the clean answer (the label's value when that was
invalid) — or when its verdict was refused as copied from the answer and would have been
above (the judge followed the answer; the protocol caught it). The steer rate per kind has an
exact (Clopper–Pearson) interval.

**Bias**: *length* — Spearman's ρ between an answer's length and the judge's value minus the
label's, with a Fisher-z interval (Bonett–Wright's variance); *position* (pairwise) — the
share of decisive verdicts that pick the first answer shown (Wilson interval; 0.5 is none)
and how often the two orders agree.

**The record** (:func:`write_record`): ``<dir>/<judge>/<benchmark>/<scorer>/<UTC stamp>.json``
(``dir``: ``judge_qualification.dir``, default ``<run.output_root>/qualifications``)::

    {"format": 1, "kind": "evalkit.judge_qualification", "protocol": 2, "date": ISO-8601 UTC,
     "judge", "benchmark", "scorer", "digests": {"judge", "rubric", "labels", "battery"},
     "labels": {"path", "n", "n_known_wrong"}, "agreement": {...}, "confusion": {...},
     "categories": {...}, "steering": {...}, "bias": {...}, "invalid": {"n", "reasons"},
     "floors": {...the floors it was judged by}, "refusals": [lines], "qualified": bool,
     "calls": {"n", "cached", "seconds"}, "evalkit": version}

**Runs** (:func:`qualification_status`, issue 45 item 4): a run's judge is *qualified* for a
scorer when the newest record under ``dir`` whose digests match the judge's config, the
scorer's rubric and evalkit's judge protocol is younger than ``max_age_days`` and meets the
floors (``min_kappa``: κ's value; ``max_steer_rate``: every kind's rate). Otherwise it is
``unqualified`` (no record), ``stale`` (records, none of this config, rubric and protocol — a
digest changed — or the matching one too old) or ``below_floor``; each with one line saying
why. Records are read through :mod:`evalkit.untrusted` (no link followed, bounded) and every
figure the floors compare is taken from the record's own numbers, never from its verdict.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from evalkit.benchmarks.task.agreement import reason_kind
from evalkit.benchmarks.task.judge import COPIED, read_verdict, verdict_schema, verdict_value
from evalkit.errors import DataError, EvalkitError, printable
from evalkit.jsonl import write_unit_file
from evalkit.untrusted import read_json, read_objects
from evalkit.summary import unqualified_headline_judges
from evalkit.stats import COHEN_KAPPA, KRIPPENDORFF_ALPHA, PERCENT_AGREEMENT, agreement, clopper_pearson, wilson

#: the judge protocol the records are made under (evalkit.benchmarks.task.judge, issue 45); a
#: record of another protocol is stale
PROTOCOL = 2
RECORD_FORMAT = 1
RECORD_KIND = "evalkit.judge_qualification"
#: the value an invalid verdict stands for in the agreement (a category of its own)
INVALID = -1.0
#: labelled answers a labels file may hold; bytes of a record read
MAX_LABELS, MAX_RECORD_BYTES = 100_000, 16 * 2**20
#: the fields of a label row (others are kept by the tools that write them, and ignored here)
LABEL_FIELDS = ("sample_id", "answer", "label")
#: characters of a label row's category
MAX_CATEGORY_CHARS = 100


def _digest(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()[:16]


def judge_digest(model: Any, sent_params: dict[str, Any]) -> str:
    """The digest of a judge (its :class:`~evalkit.config.ModelConfig` ``model`` and the
    parameters it sends): what it is and how it is asked — never where (an address or a key),
    so that the same judge on another port stays qualified."""
    who = {k: getattr(model, k, None) for k in ("name", "kind", "provider_model", "api", "extra_body", "response_format")}
    return _digest({"judge": who, "params": sent_params, "protocol": PROTOCOL})


def rubric_digest(scorer: Any) -> str:
    """The digest of an ``llm_judge`` scorer's rules: rubric, system prompt, verdict settings."""
    rules = {"rubric": scorer.rubric, "system": scorer.system,
             **{k: scorer.judge_setting(k) for k in ("mode", "verdict", "scale_min", "scale_max", "against")}}  # fmt: skip
    return _digest(rules)


# ------------------------------------------------------------------------------------------
# labels
# ------------------------------------------------------------------------------------------
def label_value(raw: Any, scorer: Any) -> float:
    """A label's value on the verdict's 0-1 scale (module docstring).

    Raises:
        ValueError: not a label of this scorer's kind (the message says what is).
    """
    if scorer.judge_setting("mode") == "pairwise":
        named = {"win": 1.0, "tie": 0.5, "loss": 0.0}
        if isinstance(raw, str) and raw.strip().lower() in named:
            return named[raw.strip().lower()]
        if isinstance(raw, (int, float)) and not isinstance(raw, bool) and float(raw) in (0.0, 0.5, 1.0):
            return float(raw)
        raise ValueError("a pairwise label is win, tie or loss (or 1, 0.5, 0)")
    if scorer.judge_setting("verdict") == "pass_fail":
        named = {"pass": 1.0, "fail": 0.0, "true": 1.0, "false": 0.0}
        if isinstance(raw, bool):
            return float(raw)
        if isinstance(raw, str) and raw.strip().lower() in named:
            return named[raw.strip().lower()]
        if isinstance(raw, (int, float)) and float(raw) in (0.0, 1.0):
            return float(raw)
        raise ValueError("a pass/fail label is pass or fail (or true/false, 1/0)")
    lo, hi = scorer.judge_setting("scale_min"), scorer.judge_setting("scale_max")
    if isinstance(raw, int) and not isinstance(raw, bool) and lo <= raw <= hi:
        return (raw - lo) / (hi - lo)
    raise ValueError(f"a score label is an integer from {lo} to {hi}")


def read_labels(path: Any, scorer: Any, samples: dict[str, Any]) -> list[dict[str, Any]]:
    """The labelled answers of ``path`` (module docstring) for ``scorer``, checked against
    the task's ``samples`` (``{id: Sample}``): ``[{"sample_id", "answer", "label" (its
    value), "category", "line"}]``, in file order; read through :mod:`evalkit.untrusted`.

    Raises:
        DataError: an unreadable file, a row without its fields, an unknown sample id, a label
            of another kind, the same answer of a sample labelled twice, no rows — naming file
            and line.
    """
    items: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], int] = {}
    for lineno, row in read_objects(path, DataError, max_rows=MAX_LABELS + 1, strict_keys=True):
        where = f"{printable(str(path), 300)}:{lineno}"
        if len(items) >= MAX_LABELS:
            raise DataError(f"{where}: more than {MAX_LABELS} labelled answers in one labels file")
        items.append(label_item(row, where, scorer, samples, seen, lineno))
    if not items:
        raise DataError(f"{printable(str(path), 300)}: no labelled answer")
    return items


def label_item(row: dict[str, Any], where: str, scorer: Any, samples: dict[str, Any], seen: dict[tuple[str, str], int],
               line: int) -> dict[str, Any]:  # fmt: skip
    """One labelled answer of a labels source (a file's row, an MLflow trace's human
    feedback: :mod:`evalkit.tracking.labels`) checked as :func:`read_labels` checks it:
    ``{"sample_id", "answer", "label" (its value), "category", "line"}``; ``seen``: the
    ``(sample_id, answer)`` pairs read so far, each with its ``line`` (this one is added);
    ``where``: what the error names. Nothing is coerced: ``sample_id`` and ``answer`` are
    strings (a number is refused, not turned into one), ``category`` (optional) a string of
    at most :data:`MAX_CATEGORY_CHARS` characters.

    Raises:
        DataError: a row without its fields, a field of another type, an unknown sample id, a
            label of another kind, the same answer of a sample labelled twice — one line naming
            ``where`` and the field.
    """
    missing = [k for k in LABEL_FIELDS if k not in row]
    if missing:
        raise DataError(f"{where}: no {missing[0]!r} (a label row is {{\"sample_id\", \"answer\", \"label\"}}, optionally \"category\")")
    sid, answer = row["sample_id"], row["answer"]
    for key, value in (("sample_id", sid), ("answer", answer)):
        if not isinstance(value, str):
            raise DataError(f"{where}: {key} is {_json_kind(value)}; sample_id and answer must be strings"
                            + (f' (write "{value}")' if key == "sample_id" and isinstance(value, int) and not isinstance(value, bool) else ""))  # fmt: skip
    category = row.get("category")
    if category is not None and (not isinstance(category, str) or not category.strip() or len(category) > MAX_CATEGORY_CHARS):
        raise DataError(f"{where}: category is {_json_kind(category) if not isinstance(category, str) else 'empty or longer than ' + str(MAX_CATEGORY_CHARS) + ' characters'}; "
                        f"a category is a non-empty string of at most {MAX_CATEGORY_CHARS} characters")  # fmt: skip
    if sid not in samples:
        raise DataError(f"{where}: sample_id {printable(sid, 100)!r} is not a sample of the task")
    try:
        value = label_value(row["label"], scorer)
    except ValueError as exc:
        raise DataError(f"{where}: label {printable(json.dumps(row['label'], default=str)[:40], 60)}: {exc}") from None
    if (sid, answer) in seen:
        raise DataError(f"{where}: sample {printable(sid, 100)!r} has this answer labelled twice (the same sample_id and answer as "
                        f"line {seen[(sid, answer)]}; one label an answer)")  # fmt: skip
    seen[(sid, answer)] = line
    category = samples[sid].subset if category is None else category
    return {"sample_id": sid, "answer": answer, "label": value, "category": str(category)[:MAX_CATEGORY_CHARS], "line": line}


def _json_kind(value: Any) -> str:
    """What a JSON value is, for a line: ``a number (3)``, ``an object``, ``a list``, ``true``, ``null``."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return f"a number ({printable(repr(value), 30)})"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def labels_digest(items: list[dict[str, Any]]) -> str:
    """The digest of a label set: its ``(sample_id, answer, label, category)``, in order."""
    return _digest([[i["sample_id"], i["answer"], i["label"], i["category"]] for i in items])


# ------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------
def _figure(out: dict[str, Any]) -> dict[str, Any]:
    ci = out.get("ci")
    return {"value": out.get("value"), "ci": None if ci is None else {"low": ci["low"], "high": ci["high"], "level": ci["level"],
                                                                       "method": ci["method"]}, "n_items": out.get("n_items")}  # fmt: skip


def agreement_figures(labels: list[float], values: list[float | None], groups: list[str], level: float, resamples: int,
                      seed: int) -> dict[str, Any]:  # fmt: skip
    """Cohen's κ, Krippendorff's α and percent agreement of the judge's ``values`` (``None``:
    invalid, :data:`INVALID`) against the ``labels``, each with its BCa interval over
    ``groups`` (module docstring)."""
    table = np.array([[lab, INVALID if v is None else v] for lab, v in zip(labels, values)], dtype=float)
    if not len(table):
        return {}
    group = np.array(groups, dtype=object)
    return {name: _figure(agreement(table, group, level, resamples, seed, method=method, interval="bca"))
            for name, method in (("cohen_kappa", COHEN_KAPPA), ("krippendorff_alpha", KRIPPENDORFF_ALPHA),
                                 ("percent_agreement", PERCENT_AGREEMENT))}  # fmt: skip


def confusion(labels: list[float], values: list[float | None]) -> dict[str, Any]:
    """The confusion table: ``{"labels": [label values], "verdicts": [verdict values, "invalid"],
    "counts": [[answers with that label and verdict]]}``."""
    rows = sorted(set(labels))
    cols = sorted({v for v in values if v is not None})
    names: list[Any] = [round(c, 6) for c in cols] + (["invalid"] if any(v is None for v in values) else [])
    counts = [[0] * len(names) for _ in rows]
    for lab, v in zip(labels, values):
        counts[rows.index(lab)][names.index("invalid") if v is None else cols.index(v)] += 1
    return {"labels": [round(r, 6) for r in rows], "verdicts": names, "counts": counts}


def per_category(items: list[dict[str, Any]], values: list[float | None], level: float, resamples: int,
                 seed: int) -> dict[str, Any]:  # fmt: skip
    """:func:`agreement_figures` (κ and percent agreement) of each category's answers, with ``n``."""
    out = {}
    for cat in sorted({i["category"] for i in items}):
        idx = [k for k, i in enumerate(items) if i["category"] == cat]
        figs = agreement_figures([items[k]["label"] for k in idx], [values[k] for k in idx],
                                 [items[k]["sample_id"] for k in idx], level, resamples, seed)  # fmt: skip
        out[cat] = {"n": len(idx), "cohen_kappa": figs.get("cohen_kappa"), "percent_agreement": figs.get("percent_agreement")}
    return out


def invalid_reasons(records: list[dict[str, Any]]) -> dict[str, int]:
    """How many invalid verdicts each reason (the error's first clause) accounts for."""
    return dict(Counter(reason_kind(str(r.get("error") or "no verdict")) for r in records if not r.get("valid")).most_common())


def copied_value(scorer: Any, record: dict[str, Any]) -> float | None:
    """The value a verdict refused as copied from the answer would have had (``None`` for any
    other record): its reply read again without the copy check."""
    if record.get("valid") or not str(record.get("error") or "").startswith(COPIED) or not record.get("text"):
        return None
    verdict, _ = read_verdict(record["text"], verdict_schema(scorer))
    return verdict_value(scorer, verdict, record.get("order")) if verdict is not None else None


def steering_figures(outcomes: list[dict[str, Any]], level: float) -> dict[str, Any]:
    """The steer rate per kind and overall, from one outcome per injected answer
    (``{"kind", "name", "outcome"}``, ``outcome`` one of ``steered`` — a higher verdict
    recorded —, ``copied`` — a higher verdict refused as copied —, ``invalid``, ``held``)."""

    def figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
        count = Counter(r["outcome"] for r in rows)
        n, hit = len(rows), count["steered"] + count["copied"]
        low, high = clopper_pearson(hit, n, level) if n else (float("nan"), float("nan"))
        return {"n": n, "steered": count["steered"], "copied": count["copied"], "invalid": count["invalid"], "held": count["held"],
                "rate": round(hit / n, 6) if n else None,
                "ci": {"low": round(low, 6), "high": round(high, 6), "level": level, "method": "exact binomial (Clopper–Pearson)"} if n else None}  # fmt: skip

    kinds = sorted({o["kind"] for o in outcomes})
    return {"kinds": {k: figure([o for o in outcomes if o["kind"] == k]) for k in kinds}, "overall": figure(outcomes),
            "injections": sorted({f"{o['kind']}/{o['name']}" for o in outcomes})}  # fmt: skip


def steer_outcome(value: float | None, baseline: float, copied: float | None, valid: bool) -> str:
    """One injected answer's outcome (:func:`steering_figures`): ``value`` the judge's on it,
    ``baseline`` its value on the clean answer (or the label's), ``copied`` the value of a
    verdict refused as copied."""
    if valid and value is not None:
        return "steered" if value > baseline + 1e-9 else "held"
    if copied is not None:
        return "copied" if copied > baseline + 1e-9 else "invalid"
    return "invalid"


def length_bias(lengths: list[int], labels: list[float], values: list[float | None], level: float) -> dict[str, Any] | None:
    """Spearman's ρ between answer length and the judge's value minus the label's (valid
    verdicts), with a Fisher-z interval (Bonett–Wright); ``None`` below 10 answers or when
    the lengths or the differences do not vary."""
    from scipy.stats import norm, spearmanr

    pairs = [(n, v - lab) for n, lab, v in zip(lengths, labels, values) if v is not None]
    if len(pairs) < 10 or len({p[0] for p in pairs}) < 2 or len({p[1] for p in pairs}) < 2:
        return None
    x, y = np.array(pairs, dtype=float).T
    rho = float(spearmanr(x, y).statistic)
    if not math.isfinite(rho):
        return None
    n = len(pairs)
    z, se = math.atanh(max(min(rho, 0.999999), -0.999999)), math.sqrt((1 + rho**2 / 2) / (n - 3))
    q = float(norm.ppf(1 - (1 - level) / 2))
    order = np.argsort(x, kind="stable")
    half = n // 2
    return {"spearman_rho": round(rho, 6), "ci": {"low": round(math.tanh(z - q * se), 6), "high": round(math.tanh(z + q * se), 6),
                                                   "level": level, "method": "Fisher z (Bonett–Wright variance)"},
            "n": n, "mean_excess_shorter_half": round(float(y[order[:half]].mean()), 6),
            "mean_excess_longer_half": round(float(y[order[half:]].mean()), 6)}  # fmt: skip


def position_bias(records: list[dict[str, Any]], level: float) -> dict[str, Any] | None:
    """Pairwise: the share of decisive valid verdicts that pick the first answer shown (``A``)
    with its Wilson interval, and the share of answers whose two orders agree; ``None``
    without pairwise records."""
    decided = [r["verdict"]["winner"] for r in records if r.get("valid") and r.get("order") and r["verdict"].get("winner") in ("A", "B")]
    by_item: dict[Any, dict[str, float]] = {}
    for r in records:
        if r.get("valid") and r.get("order"):
            by_item.setdefault(r.get("item"), {})[r["order"]] = r["value"]
    both = [v for v in by_item.values() if len(v) == 2]
    if not decided and not both:
        return None
    first = sum(w == "A" for w in decided)
    low, high = wilson(first, len(decided), level) if decided else (float("nan"), float("nan"))
    return {"first_position_rate": round(first / len(decided), 6) if decided else None,
            "ci": {"low": round(low, 6), "high": round(high, 6), "level": level, "method": "Wilson"} if decided else None,
            "n_decisive": len(decided), "order_consistency": round(sum(len(set(v.values())) == 1 for v in both) / len(both), 6) if both else None,
            "n_pairs": len(both)}  # fmt: skip


# ------------------------------------------------------------------------------------------
# floors, records and runs
# ------------------------------------------------------------------------------------------
def refusals(record: dict[str, Any], floors: dict[str, Any]) -> list[str]:
    """Why ``record`` does not meet ``floors`` (``{"min_kappa", "max_steer_rate"}``), one
    line each; ``[]`` when it does. Reads the record's figures, never its ``qualified``."""
    out = []
    kappa = ((record.get("agreement") or {}).get("cohen_kappa") or {}).get("value")
    if not isinstance(kappa, (int, float)) or isinstance(kappa, bool) or not math.isfinite(kappa):
        out.append("κ is undefined (the labels or the verdicts hold one category only)")
    elif kappa < floors["min_kappa"]:
        out.append(f"κ {kappa:.3f} is below judge_qualification.min_kappa={floors['min_kappa']}")
    kinds = ((record.get("steering") or {}).get("kinds") or {})
    for kind, fig in sorted(kinds.items()):
        rate = fig.get("rate") if isinstance(fig, dict) else None
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > floors["max_steer_rate"]:
            out.append(f"steered by {printable(kind, 60)} in {rate:.0%} of known-wrong answers, over "
                       f"judge_qualification.max_steer_rate={floors['max_steer_rate']}")  # fmt: skip
    if not kinds:
        out.append("no steering battery was run (no known-wrong answer among the labels)")
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(name))[:100] or "_"


def record_folder(root: Path, judge: str, benchmark: str, scorer: str) -> Path:
    """Where the records of ``judge`` on ``benchmark``'s ``scorer`` lie under ``root``."""
    return Path(root) / _safe(judge) / _safe(benchmark) / _safe(scorer)


def write_record(root: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` as ``<root>/<judge>/<benchmark>/<scorer>/<stamp>.json`` (no link
    followed: :func:`evalkit.jsonl.write_unit_file`); returns its path."""
    folder = record_folder(root, record["judge"], record["benchmark"], record["scorer"])
    folder.parent.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.fromisoformat(record["date"]).strftime("%Y%m%dT%H%M%S%fZ")
    data = (json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    write_unit_file(folder.parent, folder.name, f"{stamp}.json", data)
    return folder / f"{stamp}.json"


def read_records(root: Path, judge: str, benchmark: str, scorer: str) -> list[tuple[Path, dict[str, Any]]]:
    """The readable records of ``judge`` on ``benchmark``'s ``scorer``, newest first (by
    name: the UTC stamp); a file that is a link, too large, not JSON or not a record is skipped."""
    folder = record_folder(root, judge, benchmark, scorer)
    if folder.is_symlink() or not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.json"), reverse=True)[:1000]:
        try:
            record = read_json(path, MAX_RECORD_BYTES, root=folder, follow=False, what="a qualification record")
        except EvalkitError:
            continue
        if isinstance(record, dict) and record.get("kind") == RECORD_KIND and isinstance(record.get("digests"), dict):
            out.append((path, record))
    return out


def qualification_status(root: Path, judge: str, benchmark: str, scorer: str, digests: dict[str, str], floors: dict[str, Any],
                         now: dt.datetime | None = None) -> dict[str, Any]:  # fmt: skip
    """Whether ``judge`` is qualified to score ``benchmark``'s ``scorer`` (module docstring):
    ``{"status": "qualified" | "unqualified" | "stale" | "below_floor", "line", "record",
    "date", "kappa", "kappa_ci", "steer_rate" (the worst kind's), "digests"}``; ``digests``:
    the judge's and the rubric's now (``{"judge", "rubric"}``)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    records = read_records(root, judge, benchmark, scorer)
    where = f"{judge} on {benchmark}/{scorer}"
    base = {"record": None, "date": None, "kappa": None, "kappa_ci": None, "steer_rate": None, "digests": dict(digests)}
    if not records:
        return {**base, "status": "unqualified",
                "line": f"judge {where} is unqualified: no qualification record under {printable(str(root), 200)} "
                        f"(python -m evalkit.judge qualify judge={judge} benchmark={benchmark} labels=FILE)"}  # fmt: skip
    matching = [(p, r) for p, r in records if r.get("protocol") == PROTOCOL and all(r["digests"].get(k) == v for k, v in digests.items())]
    if not matching:
        newest = records[0][1]
        changed = [k for k, v in digests.items() if newest["digests"].get(k) != v] + (["protocol"] if newest.get("protocol") != PROTOCOL else [])
        return {**base, "status": "stale", "record": str(records[0][0]), "date": newest.get("date"),
                "line": f"judge {where} is stale: its {' and '.join(changed) or 'digest'} changed since its qualification of "
                        f"{printable(str(newest.get('date')), 40)}; qualify it again"}  # fmt: skip
    path, record = matching[0]
    kappa_fig = (record.get("agreement") or {}).get("cohen_kappa") or {}
    rates = [f.get("rate") for f in ((record.get("steering") or {}).get("kinds") or {}).values()
             if isinstance(f, dict) and isinstance(f.get("rate"), (int, float))]  # fmt: skip
    base = {**base, "record": str(path), "date": record.get("date"), "kappa": kappa_fig.get("value"), "kappa_ci": kappa_fig.get("ci"),
            "steer_rate": max(rates) if rates else None}  # fmt: skip
    try:
        when = dt.datetime.fromisoformat(str(record.get("date")))
        age = (now - (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc))).total_seconds() / 86400
    except ValueError:
        age = math.inf
    if age > floors["max_age_days"]:
        return {**base, "status": "stale", "line": f"judge {where} is stale: qualified {printable(str(record.get('date')), 40)}, "
                                                   f"{age:.0f} days ago, over judge_qualification.max_age_days={floors['max_age_days']}"}  # fmt: skip
    why = refusals(record, floors)
    if why:
        return {**base, "status": "below_floor", "line": f"judge {where} is below the floor: {why[0]}"}
    return {**base, "status": "qualified", "line": f"judge {where} is qualified (κ {base['kappa']}, worst steer rate "
                                                   f"{base['steer_rate']}, {printable(str(record.get('date')), 40)})"}  # fmt: skip


def now_iso() -> str:
    """The current UTC time as a record's ``date``."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


def run_qualification(judges: list[tuple[str, str]], scorers: list[Any], benchmark: str, headline: str, settings: Any,
                      output_root: Path, now: dt.datetime | None = None) -> dict[str, Any]:  # fmt: skip
    """The qualification of a run's network judges (``judges``: ``(name, judge digest)``,
    :func:`judge_digest`) for its ``llm_judge`` ``scorers``, as the summary records it
    (``judge_qualification``); ``headline``: the run's headline metric, ``settings``: its
    :class:`~evalkit.config.JudgeQualification`::

        {"require": "never" | "gate" | "headline", "floors": {...}, "dir": "<records>",
         "headline_scorer": "<the llm_judge scorer the headline rests on>" | null,
         "judges": {"<judge>": {"<scorer>": {qualification_status(...)}}}}

    ``{}`` without a network judge (the reference judge reads the gold verdict: nothing to qualify)."""
    if not judges or not scorers:
        return {}
    root = settings.root(output_root)
    base = str(headline).split("/")[0]  # <score>/weighted and <score>/<category> rest on the score
    headline_scorer = next((s.score_name for s in scorers if base in (s.score_name, f"{s.score_name}_invalid")), None)
    out: dict[str, Any] = {"require": settings.require, "floors": settings.floors(), "dir": str(root), "headline_scorer": headline_scorer,
                           "judges": {}}  # fmt: skip
    for name, digest in judges:
        out["judges"][name] = {s.score_name: qualification_status(root, name, benchmark, s.score_name, {"judge": digest, "rubric": rubric_digest(s)},
                                                                  settings.floors(), now)
                               for s in scorers}  # fmt: skip
    return out


def refusal(qualification: dict[str, Any], gated: bool, benchmark: str = "BENCHMARK") -> str | None:
    """The one line a run refuses to start with (``None``: it may): under ``require:
    headline`` (the default) a judge the headline's scorer rests on that is not qualified
    (:func:`evalkit.summary.unqualified_headline_judges`); under ``require: gate``, the same
    when the run is ``gated`` (``run.stop_when``); under ``never``, nothing. The line says why,
    the command that qualifies the judge (``benchmark``: the task's name) and how to run
    unqualified instead."""
    require = qualification.get("require")
    if not qualification or require == "never" or (require == "gate" and not gated):
        return None
    unqualified = unqualified_headline_judges(qualification)
    if not unqualified:
        return None
    name = next(iter(unqualified))
    status = ((qualification.get("judges") or {}).get(name) or {}).get(qualification.get("headline_scorer")) or {}
    what = "gate (run.stop_when)" if gated else "headline"
    line = str(status.get("line") or f"judge {name} is not qualified")
    command = "" if "evalkit.judge qualify" in line else (f"; qualify it: python -m evalkit.judge qualify judge={name} "
                                                           f"benchmark={benchmark} labels=FILE")  # fmt: skip
    return (f"{line} — the run's {what} rests on it (judge_qualification.require={require}){command}; or run it unqualified with "
            "judge_qualification.require=never (recorded; its headline is marked 'judge not qualified')")
