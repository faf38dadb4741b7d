"""Agreement between the judges of a panel (``judge=[a,b,…]``), per ``llm_judge`` scorer:
how often the judges give an answer the same value, beyond chance.

**Items.** Each scored answer (sample × epoch) is an item; a judge's label is its value for
the answer (:func:`evalkit.benchmarks.task.judge.judge_value`: a pointwise verdict's value,
or the mean of a pairwise judge's two orders), and each distinct value is a category
(nominal agreement: a 1-5 score is five categories). A judge with an invalid verdict has no
label for that item. Answers that failed (``failed.jsonl``, ``judge_error`` included) are
not items: the figure describes the answers the run scored.

**Figures** (:func:`evalkit.stats.agreement`): Cohen's κ for every pair of judges, over the
items both labelled; with more than two judges also Krippendorff's α (nominal) over the
panel, which uses every item at least two judges labelled. Each has a percentile bootstrap
interval over samples (the epochs of a sample resampled together), seeded by ``run.seed``.

``summary.json`` → ``judge_agreement``::

    {"<scorer>": {"judges": [names], "pairs": [{"judges": [a, b], "method": "cohen_kappa",
      "value", "ci": {"low", "high", "level", "method", "undefined_resamples"} | null,
      "n_items", "n_excluded", "categories"}, …],
      "panel": {…the same, "method": "krippendorff_alpha_nominal"} (3 judges or more)}}

**Invalid verdicts** (:func:`invalid_verdicts`, issue 45 item 2): per ``llm_judge`` scorer, the
panel's policy (``invalid_verdict``: ``fail`` or ``exclude``) and, per judge, how many answers
(sample × epoch, scored or failed) it gave no valid verdict on, by reason (the error's first
clause). ``summary.json`` → ``judge_invalid``::

    {"<scorer>": {"policy": "fail" | "exclude",
                  "judges": {"<judge>": {"samples": n, "reasons": {"<reason>": n, …}}, …}}}
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any, Iterable

import numpy as np

from evalkit.benchmarks.task.judge import judge_value
from evalkit.stats import agreement


def judge_labels(records: list[dict[str, Any]], scorer: str, judges: list[str]) -> list[list[float | None]]:
    """``[[label of judge j for row i]]``: each row's value from each judge of ``judges``
    for ``scorer`` (``None``: no valid value)."""
    out = []
    for row in records:
        calls = [j for j in row.get("judgements") or [] if isinstance(j, dict) and j.get("scorer") == scorer]
        out.append([judge_value([c for c in calls if c.get("judge") == name]) for name in judges])
    return out


def panel_agreement(records: list[dict[str, Any]], judges: list[str], level: float, resamples: int, seed: int) -> dict[str, Any]:
    """``judge_agreement`` of the module docstring, from a run's scored rows; ``{}`` with
    fewer than two judges or no judged row."""
    if len(judges) < 2:
        return {}
    judged = [r for r in records if isinstance(r.get("judgements"), list)]
    scorers = list(dict.fromkeys(str(j.get("scorer")) for r in judged for j in r["judgements"] if isinstance(j, dict)))
    groups = np.array([str(r.get("sample_id")) for r in judged], dtype=object)
    out: dict[str, Any] = {}
    for scorer in scorers:
        labels = np.array([[np.nan if v is None else v for v in row] for row in judge_labels(judged, scorer, judges)], dtype=float)
        entry: dict[str, Any] = {"judges": list(judges), "pairs": []}
        for a, b in itertools.combinations(range(len(judges)), 2):
            pair = agreement(labels[:, [a, b]], groups, level, resamples, seed)
            entry["pairs"].append({"judges": [judges[a], judges[b]], **pair})
        if len(judges) > 2:
            entry["panel"] = agreement(labels, groups, level, resamples, seed)
        out[scorer] = entry
    return out


def reason_kind(error: str) -> str:
    """The reason an invalid verdict is counted under: its error's first clause (up to the
    first ``:``, without a character position), at most 80 characters."""
    return re.sub(r" at character \d+", "", str(error).split(":", 1)[0]).strip()[:80] or "invalid"


def invalid_verdicts(rows: Iterable[dict[str, Any]], scorers: list[Any], judges: list[str]) -> dict[str, Any]:
    """``judge_invalid`` of the module docstring, from the judged answers' rows (scored rows
    and failed ones: each with its ``judgements``; read once, a row at a time); ``{}``
    without ``llm_judge`` scorers or judges."""
    if not scorers or not judges:
        return {}
    names = [scorer.score_name for scorer in scorers]
    tally = {name: {j: Counter() for j in judges} for name in names}
    samples = {name: Counter() for name in names}
    for row in rows:
        judgements = [c for c in row.get("judgements") or [] if isinstance(c, dict)]
        for name in names:
            calls = [c for c in judgements if c.get("scorer") == name]
            for judge in judges:
                bad = [c for c in calls if c.get("judge") == judge and not c.get("valid")]
                if bad:
                    samples[name][judge] += 1
                    tally[name][judge][reason_kind(str(bad[0].get("error") or "no verdict"))] += 1
    out: dict[str, Any] = {}
    for scorer, name in zip(scorers, names):
        out[name] = {"policy": scorer.judge_setting("invalid_verdict"),
                     "judges": {j: {"samples": samples[name][j], "reasons": dict(tally[name][j].most_common())} for j in judges}}  # fmt: skip
    return out
