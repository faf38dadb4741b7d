"""Aggregation of per-sample verdicts into ACEBench metrics (spec §4.2, §4.5, §4.6).

Names: ``accuracy/<category>``, ``process_acc/<multi-turn or agent category>``, ``accuracy/<GROUP>``,
``overall`` and ``overall_upstream_rounded`` (the leaderboard's figure, all three groups only).

``benchmark.language=all``: one block per language, every name with the language after its
first part (``accuracy/en/<category>``, ``process_acc/zh/<category>``, ``accuracy/zh/NORMAL``,
``overall/en``, ``overall_upstream_rounded/zh``), plus the headline ``overall`` = the
unweighted mean of ``overall/<language>`` over the languages the selection holds (spec §8:
upstream's "combined" table is the mean of its en and zh tables); a selection within one
language (``run.limit=10``) has that language's figure as its headline. No other
cross-language figure is computed. Everything is computed at full precision (upstream
rounds each level to 3 decimals).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any, Iterable

from evalkit.benchmarks.acebench.categories import AGENT_CATEGORIES, ALL_CATEGORIES, GROUPS, MULTI_TURN_CATEGORIES, OVERALL_WEIGHTS


def dialogue_id(record_id: str) -> str:
    """Dialogue of a normal multi-turn record: the id without its last ``_<n>`` (spec §1.5)."""
    return record_id.rsplit("_", 1)[0]


def multi_turn_scores(steps: Iterable[tuple[str, bool]]) -> tuple[float, float]:
    """``(accuracy, process_acc)`` of a multi-turn category from ``(record_id, passed)`` steps.

    A dialogue scores 1 only if all its steps passed; its process score is passed/steps
    (spec §4.5). Both are averaged over dialogues.
    """
    dialogues: dict[str, list[bool]] = defaultdict(list)
    for record_id, passed in steps:
        dialogues[dialogue_id(record_id)].append(bool(passed))
    if not dialogues:
        raise ValueError("no dialogue steps")
    end = [1.0 if all(v) else 0.0 for v in dialogues.values()]
    process = [sum(v) / len(v) for v in dialogues.values()]
    return fmean(end), fmean(process)


def group_scores(category_accuracy: dict[str, float]) -> dict[str, float]:
    """Unweighted means of the evaluated categories of every group (spec §4.6)."""
    out = {}
    for group, members in GROUPS.items():
        values = [category_accuracy[c] for c in members if c in category_accuracy]
        if values:
            out[group] = fmean(values)
    return out


def overall_score(groups: dict[str, float]) -> float | None:
    """0.578·NORMAL + 0.2676·SPECIAL + 0.1545·AGENT, the weights renormalised over the
    groups evaluated (spec §4.6). The upstream weights sum to 1.0001, so even with all three
    groups they are divided by their sum: a perfect model scores 1.0, not 1.0001; the value
    differs from the raw upstream formula by less than 0.0001 (see :func:`upstream_overall`).
    ``None`` if no group was evaluated.
    """
    present = {g: w for g, w in OVERALL_WEIGHTS.items() if g in groups}
    if not present:
        return None
    return sum(w * groups[g] for g, w in present.items()) / sum(present.values())


def upstream_overall(groups: dict[str, float]) -> float | None:
    """The leaderboard's OVERALL as upstream prints it: the raw weighted sum (weights as
    published) rounded to 3 decimals; only when all three groups were evaluated."""
    if not all(g in groups for g in OVERALL_WEIGHTS):
        return None
    return round(sum(w * groups[g] for g, w in OVERALL_WEIGHTS.items()), 3)


def language_metrics(
    rows: list[tuple[str, str, float]],
    counts: dict[str, int] | None = None,
    agent_process: dict[str, float] | None = None,
) -> dict[str, float]:
    """Metrics of one language from ``(category, record_id, accuracy)`` rows of scored samples.

    ``counts``, when given, receives the number of scored units per category (records;
    dialogues for the multi-turn categories). ``agent_process`` maps the record ids of agent
    samples to their ``process_acc`` (spec §4.4; the category value is the mean).
    """
    by_category: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for category, record_id, accuracy in rows:
        by_category[category].append((record_id, accuracy))
    metrics: dict[str, float] = {}
    category_accuracy: dict[str, float] = {}
    for category in ALL_CATEGORIES:
        items = by_category.get(category)
        if not items:
            continue
        if category in MULTI_TURN_CATEGORIES:
            acc, process = multi_turn_scores((rid, a >= 1.0) for rid, a in items)
            metrics[f"process_acc/{category}"] = process
            n_units = len({dialogue_id(rid) for rid, _ in items})
        else:
            acc = fmean(a for _, a in items)
            n_units = len(items)
            if category in AGENT_CATEGORIES:
                values = [(agent_process or {}).get(rid, 0.0) for rid, _ in items]
                metrics[f"process_acc/{category}"] = fmean(values)
        if counts is not None:
            counts[category] = n_units
        category_accuracy[category] = acc
        metrics[f"accuracy/{category}"] = acc
    groups = group_scores(category_accuracy)
    for group, value in groups.items():
        metrics[f"accuracy/{group}"] = value
    overall = overall_score(groups)
    if overall is not None:
        metrics["overall"] = overall
    leaderboard = upstream_overall(groups)
    if leaderboard is not None:
        metrics["overall_upstream_rounded"] = leaderboard
    return metrics


def aggregate_records(
    samples: list[Any],
    records: list[dict[str, Any]],
    languages: list[str],
    counts: dict[tuple[str, str], int] | None = None,
) -> dict[str, float]:
    """Metrics from scored records (rows of predictions.jsonl) for the selected samples.

    A multi-turn dialogue counts only once all its selected steps are scored. ``counts``,
    when given, receives the scored units per ``(language, category)``.
    """
    by_id = {s.id: s for s in samples}
    scored: dict[str, float] = {}
    process: dict[str, dict[str, float]] = defaultdict(dict)
    for record in records:
        sample = by_id.get(record.get("sample_id"))
        scores = record.get("scores") or {}
        if sample is not None and "accuracy" in scores:
            scored[sample.id] = float(scores["accuracy"])
            if sample.subset in AGENT_CATEGORIES:
                process[sample.data["language"]][sample.data["prompt"]["id"]] = float(scores.get("process_acc", 0.0))
    # dialogues with an unscored step are left out
    incomplete: set[tuple[str, str]] = set()
    for s in samples:
        if s.subset in MULTI_TURN_CATEGORIES and s.id not in scored:
            incomplete.add((s.data["language"], dialogue_id(s.data["prompt"]["id"])))
    rows: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for s in samples:
        if s.id not in scored:
            continue
        language, record_id = s.data["language"], s.data["prompt"]["id"]
        if s.subset in MULTI_TURN_CATEGORIES and (language, dialogue_id(record_id)) in incomplete:
            continue
        rows[language].append((s.subset, record_id, scored[s.id]))
    per_language_counts: dict[str, dict[str, int]] = {lang: {} for lang in languages}
    if len(languages) == 1:
        metrics = language_metrics(rows.get(languages[0], []), per_language_counts[languages[0]], process[languages[0]])
        _merge_counts(counts, per_language_counts)
        return metrics
    metrics = {}
    for language in languages:
        per = language_metrics(rows.get(language, []), per_language_counts[language], process[language])
        for name, value in per.items():
            kind, _, rest = name.partition("/")  # overall -> overall/en; accuracy/NORMAL -> accuracy/en/NORMAL
            metrics[f"{kind}/{language}/{rest}" if rest else f"{kind}/{language}"] = value
    selected = [lang for lang in languages if any(s.data["language"] == lang for s in samples)]
    overalls = [metrics[f"overall/{lang}"] for lang in selected if f"overall/{lang}" in metrics]
    if overalls and len(overalls) == len(selected):
        metrics["overall"] = fmean(overalls)
    _merge_counts(counts, per_language_counts)
    return metrics


def _merge_counts(out: dict[tuple[str, str], int] | None, per_language: dict[str, dict[str, int]]) -> None:
    if out is not None:
        for language, per in per_language.items():
            for category, n in per.items():
                out[(language, category)] = n


# ------------------------------------------------------------------------------------------
# the same aggregation over independent units, vectorised for intervals (evalkit.stats)
# ------------------------------------------------------------------------------------------
def _metric_name(name: str, language: str, multi: bool) -> str:
    """``accuracy/NORMAL`` → ``accuracy/en/NORMAL`` and ``overall`` → ``overall/en`` when the
    run holds both languages (as :func:`aggregate_records` names them)."""
    if not multi:
        return name
    kind, _, rest = name.partition("/")
    return f"{kind}/{language}/{rest}" if rest else f"{kind}/{language}"


def _units(samples: list[Any], epochs: list[list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Independent units per ``(language, category)``: a record, a multi-turn dialogue (its
    turns together) or an agent rollout, with per-epoch ``accuracy`` / ``process_acc`` values
    (``None`` where the epoch did not score it, as :func:`aggregate_records` leaves it out);
    a unit no epoch scored is not a unit."""
    by_id = {s.id: s for s in samples}
    units: dict[tuple[str, str], dict[str, Any]] = {}
    turns: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for s in samples:
        language, record_id = s.data["language"], s.data["prompt"]["id"]
        if s.subset in MULTI_TURN_CATEGORIES:
            turns[(language, s.subset, dialogue_id(record_id))].append(s)
    for e, records in enumerate(epochs):
        scored: dict[str, dict[str, float]] = {}
        for r in records:
            sample = by_id.get(r.get("sample_id"))
            scores = r.get("scores") or {}
            if sample is not None and "accuracy" in scores:
                scored[sample.id] = scores
        for s in samples:
            language, record_id = s.data["language"], s.data["prompt"]["id"]
            if s.subset in MULTI_TURN_CATEGORIES:
                key = (language, s.subset, dialogue_id(record_id))
                unit_id = f"{language}/{key[2]}"
                steps = turns[key]
                if any(t.id not in scored for t in steps):
                    value = None
                else:
                    passed = [float(scored[t.id]["accuracy"]) >= 1.0 for t in steps]
                    value = (1.0 if all(passed) else 0.0, sum(passed) / len(passed))
            else:
                unit_id = s.id
                sc = scored.get(s.id)
                value = None if sc is None else (float(sc["accuracy"]), float(sc.get("process_acc", 0.0)))
            unit = units.setdefault((unit_id, s.subset), {"language": language, "category": s.subset, "values": {}})
            unit["values"][e] = value
    return {k: u for k, u in units.items() if any(v is not None for v in u["values"].values())}


def stat_plan(samples: list[Any], epochs: list[list[dict[str, Any]]], languages: list[str]) -> Any:
    """:class:`evalkit.stats.StatPlan` of ACEBench: units are records, multi-turn dialogues
    and agent rollouts, stratified by (language, category); category metrics are means over
    units, groups the unweighted mean of their categories, OVERALL the renormalised weighted
    mean (spec §4.5, §4.6) — the rules of :func:`aggregate_records`, on arrays."""
    import numpy as np

    from evalkit.stats import BINARY, GRADED, Column, StatPlan

    multi = len(languages) > 1
    units = _units(samples, epochs)
    ids = [u[0] for u in units]
    info = list(units.values())
    n_e = max(len(epochs), 1)
    strata_keys = sorted({(u["language"], u["category"]) for u in info})
    strata = np.array([strata_keys.index((u["language"], u["category"])) for u in info])
    columns: dict[str, Column] = {}
    present: dict[str, list[str]] = defaultdict(list)
    for language, category in strata_keys:
        idx = [i for i, u in enumerate(info) if u["language"] == language and u["category"] == category]
        for k, metric in ((0, "accuracy"), (1, "process_acc")):
            if metric == "process_acc" and category not in MULTI_TURN_CATEGORIES + AGENT_CATEGORIES:
                continue
            values, mask = np.zeros((n_e, len(ids))), np.zeros((n_e, len(ids)), dtype=bool)
            for i in idx:
                for e, v in info[i]["values"].items():
                    if v is not None:
                        values[e, i], mask[e, i] = v[k], True
            if mask.any():
                name = _metric_name(f"{metric}/{category}", language, multi)
                columns[name] = Column(values, mask, BINARY if metric == "accuracy" else GRADED)
                if metric == "accuracy":
                    present[language].append(category)
    selected = [lang for lang in languages if any(u["language"] == lang for u in info)]

    def derive(base: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        overalls = []
        for language in languages:
            def acc(c: str) -> Any:
                return base[_metric_name(f"accuracy/{c}", language, multi)]

            groups = {g: np.mean([acc(c) for c in members if c in present[language]], axis=0)
                      for g, members in GROUPS.items() if any(c in present[language] for c in members)}  # fmt: skip
            for g, value in groups.items():
                out[_metric_name(f"accuracy/{g}", language, multi)] = value
            weights = {g: w for g, w in OVERALL_WEIGHTS.items() if g in groups}
            if weights:
                overall = sum(w * groups[g] for g, w in weights.items()) / sum(weights.values())
                out[_metric_name("overall", language, multi)] = overall
                overalls.append(overall)
            if all(g in groups for g in OVERALL_WEIGHTS):
                out[_metric_name("overall_upstream_rounded", language, multi)] = np.round(sum(w * groups[g] for g, w in OVERALL_WEIGHTS.items()), 3)
        if multi and overalls and len(overalls) == len(selected):
            out["overall"] = np.mean(overalls, axis=0)
        return out

    derived_n: dict[str, int] = {}
    for language in languages:
        per_cat = {c: sum(1 for u in info if u["language"] == language and u["category"] == c) for c in present[language]}
        for g, members in GROUPS.items():
            if any(c in per_cat for c in members):
                derived_n[_metric_name(f"accuracy/{g}", language, multi)] = sum(per_cat.get(c, 0) for c in members)
        if per_cat:
            derived_n[_metric_name("overall", language, multi)] = sum(per_cat.values())
            derived_n[_metric_name("overall_upstream_rounded", language, multi)] = sum(per_cat.values())
    return StatPlan(ids, strata, columns, derive, derived_n=derived_n,
                    unit_label="records, dialogues and rollouts", stratum_label="language × category")  # fmt: skip
