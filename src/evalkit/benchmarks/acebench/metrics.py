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
from typing import Any

from evalkit.benchmarks.acebench.categories import AGENT_CATEGORIES, GROUPS, MULTI_TURN_CATEGORIES, OVERALL_WEIGHTS


def dialogue_id(record_id: str) -> str:
    """Dialogue of a normal multi-turn record: the id without its last ``_<n>`` (spec §1.5)."""
    return record_id.rsplit("_", 1)[0]


def dialogue_scores(passed: list[bool]) -> tuple[float, float]:
    """``(accuracy, process_acc)`` of one multi-turn dialogue from whether each of its steps
    passed: accuracy 1 only if every step passed, process_acc = passed / steps (spec §4.5);
    a category's figures are their means over its dialogues."""
    return (1.0 if all(passed) else 0.0), sum(passed) / len(passed)


def group_scores(category_accuracy: dict[str, Any]) -> dict[str, Any]:
    """Unweighted means of the evaluated categories of every group (spec §4.6); values are
    floats or arrays of one value per resample (then so are the means)."""
    import numpy as np

    out = {}
    for group, members in GROUPS.items():
        values = [category_accuracy[c] for c in members if c in category_accuracy]
        if values:
            out[group] = np.mean(values, axis=0)
    return out


def overall_score(groups: dict[str, Any]) -> Any:
    """0.578·NORMAL + 0.2676·SPECIAL + 0.1545·AGENT, the weights renormalised over the
    groups evaluated (spec §4.6). The upstream weights sum to 1.0001, so even with all three
    groups they are divided by their sum: a perfect model scores 1.0, not 1.0001; the value
    differs from the raw upstream formula by less than 0.0001 (see :func:`upstream_overall`).
    ``None`` if no group was evaluated. Floats or arrays, as :func:`group_scores`.
    """
    present = {g: w for g, w in OVERALL_WEIGHTS.items() if g in groups}
    if not present:
        return None
    return sum(w * groups[g] for g, w in present.items()) / sum(present.values())


def upstream_overall(groups: dict[str, Any]) -> Any:
    """The leaderboard's OVERALL as upstream prints it: the raw weighted sum (weights as
    published) rounded to 3 decimals; only when all three groups were evaluated."""
    import numpy as np

    if not all(g in groups for g in OVERALL_WEIGHTS):
        return None
    return np.round(sum(w * groups[g] for g, w in OVERALL_WEIGHTS.items()), 3)


# ------------------------------------------------------------------------------------------
# the metrics, once: over independent units, vectorised (evalkit.stats); the point estimates
# are every weight 1 (Benchmark.aggregate)
# ------------------------------------------------------------------------------------------
def _metric_name(name: str, language: str, multi: bool) -> str:
    """``accuracy/NORMAL`` → ``accuracy/en/NORMAL`` and ``overall`` → ``overall/en`` when the
    run holds both languages."""
    if not multi:
        return name
    kind, _, rest = name.partition("/")
    return f"{kind}/{language}/{rest}" if rest else f"{kind}/{language}"


def _units(samples: list[Any], epochs: list[list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Independent units per ``(language, category)``: a record, a multi-turn dialogue (its
    turns together) or an agent rollout, with per-epoch ``accuracy`` / ``process_acc`` values
    (``None`` where the epoch did not score it: a dialogue counts only once every one of its turns is scored);
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
                    value = dialogue_scores([float(scored[t.id]["accuracy"]) >= 1.0 for t in steps])
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
    mean (spec §4.5, §4.6); ``overall`` with language=all is the mean of the languages' only
    when every selected language has one."""
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
    selected = [lang for lang in languages if any(s.data["language"] == lang for s in samples)]

    def derive(base: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        overalls = []
        for language in languages:
            def acc(c: str) -> Any:
                return base[_metric_name(f"accuracy/{c}", language, multi)]

            groups = group_scores({c: acc(c) for c in present[language]})
            for g, value in groups.items():
                out[_metric_name(f"accuracy/{g}", language, multi)] = value
            overall = overall_score(groups)
            if overall is not None:
                out[_metric_name("overall", language, multi)] = overall
                overalls.append(overall)
            upstream = upstream_overall(groups)
            if upstream is not None:
                out[_metric_name("overall_upstream_rounded", language, multi)] = upstream
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
