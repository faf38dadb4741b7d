"""Per-question scores and their aggregation (spec §10).

Per question: ``sample_pass``, ``constraint_pass_rate``, ``format_pass``,
``content_pass``, ``task_pass`` (§10.1). Over questions: the five arithmetic means plus
``balance_score``, the geometric mean of the family × difficulty cell pass rates with a
floor of 0.01 (§10.2), and breakdowns by family, difficulty, cell, source and target
notation, length tier and prompt register, per-constraint pass rates over the questions
where each applied, and format/content/task rates per family.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any, Iterable

from evalkit.benchmarks.sobhard.constraints import CONSTRAINT_IDS, Result

BALANCE_FLOOR = 0.01
RATES = {
    "sample_pass": "sample_pass_rate",
    "constraint_pass_rate": "constraint_pass_rate",
    "format_pass": "format_pass_rate",
    "content_pass": "content_pass_rate",
    "task_pass": "task_pass_rate",
}
HEADLINE = ("sample_pass_rate", "balance_score", "constraint_pass_rate", "format_pass_rate", "content_pass_rate", "task_pass_rate")
#: breakdown name → categories key (§10.2 "breakdowns")
BREAKDOWNS = {
    "family": "family",
    "difficulty": "difficulty",
    "source": "source_format",
    "target": "target_format",
    "length": "length_tier",
    "register": "prompt_style",
}


def question_scores(results: list[Result], empty: bool, parsed: bool) -> dict[str, float]:
    """The per-question metrics of §10.1 from the applicable constraints' results.

    An empty normalised answer, or a question with no applicable constraint, scores 0 on
    everything.
    """
    if empty or not results:
        return {k: 0.0 for k in RATES}
    passed = {r.id: r.passed for r in results}
    fmt = [p for cid, p in passed.items() if cid.startswith("pack.") or cid == "syn.parses_target"]
    val = [p for cid, p in passed.items() if cid.startswith("val.")]
    fam = [r.passed for r in results if r.layer == "family"]
    content = parsed and all(val)
    task = parsed and (all(fam) if fam else content)
    return {
        "sample_pass": float(all(passed.values())),
        "constraint_pass_rate": sum(passed.values()) / len(passed),
        "format_pass": float(all(fmt)),
        "content_pass": float(content),
        "task_pass": float(task),
    }


def balance_of(rates: Any) -> Any:
    """``exp(mean over cells of ln(max(rate, 0.01)))`` of cell pass rates (§10.2): ``rates``
    has one row per cell (and one column per resample); ``nan`` rates (a cell without items
    in a resample) are skipped."""
    import numpy as np

    return np.exp(np.nanmean(np.log(np.maximum(rates, BALANCE_FLOOR)), axis=0))


def balance_score(pairs: Iterable[tuple[str, float]]) -> float:
    """:func:`balance_of` the cells' pass rates, from ``(cell, sample_pass)`` pairs; cells
    without items are skipped; no items at all → 0 (§10.2)."""
    cells: dict[str, list[float]] = defaultdict(list)
    for cell, value in pairs:
        cells[cell].append(float(value))
    if not cells:
        return 0.0
    return float(balance_of([[fmean(v)] for v in cells.values()])[0])


def stat_plan(samples: list[Any], epochs: list[list[dict[str, Any]]], categories: dict[str, dict[str, str]]) -> Any:
    """:class:`evalkit.stats.StatPlan` of SOBHard: the unit is the question (a session is
    scored on its last turn only, so it is one question), stratified by family × difficulty
    cell. The metrics, each defined once (their point estimates are every weight 1):
    the six headline metrics; ``sample_pass_rate/<breakdown>/<value>`` for every breakdown;
    ``sample_pass_rate/cell/<family>/<difficulty>``; ``<rate>/family/<family>`` for format,
    content and task; ``constraint/<id>`` over the questions where it applied — each a mean
    over the questions it covers — and ``balance_score`` derived from the cell rates
    (:func:`balance_of`, §10.2)."""
    import numpy as np

    from evalkit.stats import BINARY, GRADED, NONLINEAR, Column, StatPlan

    ids = sorted({r["sample_id"] for records in epochs for r in records}, key=lambda sid: (len(sid), sid))
    pos = {sid: i for i, sid in enumerate(ids)}
    n_e, n_u = max(len(epochs), 1), len(ids)
    cells = [f"{categories.get(sid, {}).get('family', '?')}/{categories.get(sid, {}).get('difficulty', '?')}" for sid in ids]
    columns: dict[str, Column] = {}

    def column(name: str, kind: str) -> Column:
        if name not in columns:
            columns[name] = Column(np.zeros((n_e, n_u)), np.zeros((n_e, n_u), dtype=bool), kind)
        return columns[name]

    for e, records in enumerate(epochs):
        for r in records:
            i, cats, scores = pos[r["sample_id"]], categories.get(r["sample_id"], {}), r["scores"]
            entries = [(name, float(scores.get(key, 0.0)), GRADED if key == "constraint_pass_rate" else BINARY) for key, name in RATES.items()]
            sp = float(scores.get("sample_pass", 0.0))
            entries.append((f"sample_pass_rate/cell/{cells[i]}", sp, BINARY))
            entries += [(f"sample_pass_rate/{name}/{cats.get(key) or '?'}", sp, BINARY) for name, key in BREAKDOWNS.items()]
            entries += [(f"{RATES[key]}/family/{cats.get('family', '?')}", float(scores.get(key, 0.0)), BINARY)
                        for key in ("format_pass", "content_pass", "task_pass")]  # fmt: skip
            entries += [(f"constraint/{cid}", float(bool(ok)), BINARY) for cid, ok in (r.get("checks") or {}).items() if cid in CONSTRAINT_IDS]
            for name, value, kind in entries:
                col = column(name, kind)
                col.values[e, i], col.mask[e, i] = value, True
    cell_names = [n for n in columns if n.startswith("sample_pass_rate/cell/")]

    def derive(base: dict[str, Any]) -> dict[str, Any]:
        if not cell_names:
            return {"balance_score": np.zeros(1)}
        return {"balance_score": balance_of(np.stack([base[n] for n in cell_names]))}

    cell_index = {c: i for i, c in enumerate(sorted(set(cells)))}
    return StatPlan(ids, np.array([cell_index[c] for c in cells], dtype=int), columns, derive, kinds={"balance_score": NONLINEAR},
                    unit_label="questions", stratum_label="family × difficulty cell")  # fmt: skip
