"""Per-item set metrics and their per-item (macro) means (spec §6)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

#: per-item score names, in display order
SCORE_NAMES = ("precision", "recall", "f1", "f05")
#: aggregate name of each per-item score (``f1_macro`` is the headline)
MACRO = {"precision": "precision_macro", "recall": "recall_macro", "f1": "f1_macro", "f05": "f05_macro"}


def item_scores(pred: Iterable[str], gold: Iterable[str]) -> dict[str, float]:
    """``{precision, recall, f1, f05}`` of one item, as unrounded fractions (§6).

    ``pred`` and ``gold`` are compared as sets. An empty prediction scores 0 on all four.

    Raises:
        ValueError: empty gold (the loader rejects it; the scorer never invents a value).
    """
    p, g = set(pred), set(gold)
    if not g:
        raise ValueError("empty gold set: KE items always have at least 2 gold steps (spec §2.3)")
    tp = len(p & g)
    fp = len(p - g)
    fn = len(g - p)
    precision = tp / len(p) if p else 0.0
    recall = tp / len(g)
    f1 = 2 * tp / (len(p) + len(g)) if tp else 0.0
    f05 = 1.25 * tp / (1.25 * tp + 0.25 * fn + fp) if tp else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "f05": f05}


def macro_means(items: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per-item means ``{precision_macro, recall_macro, f1_macro, f05_macro}`` ({} if none).

    Each item weighs equally (§6 "Aggregation"); F0.5 is the mean of per-item F0.5, not
    F0.5 of the mean P and R.
    """
    if not items:
        return {}
    return {MACRO[k]: sum(float(s[k]) for s in items) / len(items) for k in SCORE_NAMES}


def scores_of(record: dict[str, Any]) -> dict[str, float] | None:
    """The four per-item scores of a ``predictions.jsonl`` row (evalkit ``scores`` or
    legacy top-level keys), or ``None`` if any is missing."""
    src = record.get("scores") if isinstance(record.get("scores"), dict) else record
    if not all(isinstance(src.get(k), (int, float)) for k in SCORE_NAMES):
        return None
    return {k: float(src[k]) for k in SCORE_NAMES}


def stat_plan(epochs: list[list[tuple[str, str, dict[str, float]]]]) -> Any:
    """:class:`evalkit.stats.StatPlan` of KE: the unit is the item (a graded trajectory),
    stratified by difficulty; every metric is a per-item mean (§6), overall or within a
    difficulty. ``epochs``: per epoch, ``(sample id, difficulty, per-item scores)``."""
    import numpy as np

    from evalkit.stats import GRADED, Column, StatPlan

    difficulty = {sid: diff for rows in epochs for sid, diff, _ in rows}
    ids = sorted(difficulty)
    pos = {sid: i for i, sid in enumerate(ids)}
    n_e, n_u = max(len(epochs), 1), len(ids)
    columns: dict[str, Column] = {}
    for e, rows in enumerate(epochs):
        for sid, diff, scores in rows:
            for k in SCORE_NAMES:
                for name in (MACRO[k], f"{MACRO[k]}/{diff}"):
                    col = columns.get(name)
                    if col is None:  # once per metric, not a pair of arrays per row
                        col = columns[name] = Column(np.zeros((n_e, n_u)), np.zeros((n_e, n_u), dtype=bool), GRADED)
                    col.values[e, pos[sid]], col.mask[e, pos[sid]] = float(scores[k]), True
    strata_keys = sorted(set(difficulty.values()))
    strata = np.array([strata_keys.index(difficulty[sid]) for sid in ids])
    return StatPlan(ids, strata, columns, unit_label="items", stratum_label="difficulty")
