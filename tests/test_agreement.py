"""Agreement between the judges of a panel (issue 24, item 3): Cohen's κ and Krippendorff's α
against independent computations — by hand, and Krippendorff's own published example."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from evalkit.stats import COHEN_KAPPA, KRIPPENDORFF_ALPHA, agreement

NAN = float("nan")


def test_cohen_kappa_matches_a_hand_computation():
    a = [1, 1, 0, 0, 1, 0, 1, 1, 0, 1]
    b = [1, 0, 0, 0, 1, 0, 1, 1, 1, 1]
    # by hand: 8 of 10 agree, p_o = 0.8; both raters say 1 six times in ten:
    # p_e = 0.6·0.6 + 0.4·0.4 = 0.52; κ = (0.8 − 0.52) / (1 − 0.52) = 0.28 / 0.48
    out = agreement(np.array([a, b], float).T, np.arange(10), 0.95, 500, 0)
    assert out["method"] == COHEN_KAPPA
    assert out["value"] == pytest.approx(0.28 / 0.48, abs=1e-6)
    assert out["n_items"] == 10 and out["n_excluded"] == 0
    assert out["ci"]["low"] <= out["value"] <= out["ci"]["high"]
    assert out["ci"]["low"] < 0.5 < 0.7 < out["ci"]["high"]  # ten items: a wide interval


def test_cohen_kappa_leaves_out_items_a_judge_did_not_label_and_the_categories_are_values():
    # three categories (a pairwise judge's 0 / 0.5 / 1); item 4 has an invalid verdict of b
    a = [0.0, 0.5, 1.0, 1.0, 0.5, 0.0]
    b = [0.0, 0.5, 1.0, 0.5, NAN, 1.0]
    out = agreement(np.array([a, b]).T, np.arange(6), 0.95, 200, 1)
    # by hand over the 5 labelled items: agree on 3 → p_o = 0.6; a's margins (0, .5, 1) =
    # (2, 1, 2)/5, b's = (1, 2, 2)/5 → p_e = (2 + 2 + 4)/25 = 0.32; κ = 0.28 / 0.68
    assert out["value"] == pytest.approx(0.28 / 0.68, abs=1e-6)
    assert out["n_items"] == 5 and out["n_excluded"] == 1
    assert out["categories"] == [0.0, 0.5, 1.0]


def _alpha_by_pairs(matrix: list[list[float]]) -> float:
    """Krippendorff's nominal α from its definition, pair by pair: 1 − D_o / D_e, D_o the
    share of disagreeing ordered pairs within units (each unit's pairs weighted 1/(m − 1)),
    D_e the share among all pairable values."""
    units = [[v for v in column if not math.isnan(v)] for column in zip(*matrix)]
    units = [u for u in units if len(u) >= 2]
    values = [v for u in units for v in u]
    n = len(values)
    d_o = sum(sum(x != y for x, y in itertools.permutations(u, 2)) / (len(u) - 1) for u in units) / n
    d_e = sum(x != y for x, y in itertools.permutations(values, 2)) / (n * (n - 1))
    return 1 - d_o / d_e


#: Krippendorff (2011), "Computing Krippendorff's alpha-reliability", example C: 4 observers,
#: 12 units, missing values; the paper's nominal α is 0.743
KRIPPENDORFF_EXAMPLE = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
    [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
]


def test_krippendorff_alpha_matches_the_published_example_and_the_pairwise_definition():
    labels = np.array(KRIPPENDORFF_EXAMPLE, float).T  # items × raters
    out = agreement(labels, np.arange(12), 0.95, 300, 0)
    assert out["method"] == KRIPPENDORFF_ALPHA
    assert out["value"] == pytest.approx(0.743, abs=5e-4)
    assert out["value"] == pytest.approx(_alpha_by_pairs(KRIPPENDORFF_EXAMPLE), abs=1e-6)
    assert out["n_items"] == 11 and out["n_excluded"] == 1  # the last unit has one value only


def test_no_agreement_figure_when_every_verdict_is_one_category():
    out = agreement(np.ones((8, 2)), np.arange(8), 0.95, 100, 0)
    assert out["value"] is None and out["ci"] is None


def test_the_bootstrap_resamples_samples_with_their_epochs_together_and_is_seeded():
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, 40).astype(float)
    noisy = np.where(rng.random(40) < 0.2, 1 - truth, truth)
    labels = np.stack([truth, noisy], axis=1)
    per_item = agreement(labels, np.arange(40), 0.95, 400, 7)
    assert per_item == agreement(labels, np.arange(40), 0.95, 400, 7)
    # the same 40 answers as 20 samples × 2 epochs whose two epochs are identical copies
    twice = np.concatenate([labels[:20], labels[:20]])
    clustered = agreement(twice, np.concatenate([np.arange(20), np.arange(20)]), 0.95, 400, 7)
    alone = agreement(twice, np.arange(40), 0.95, 400, 7)
    assert clustered["value"] == alone["value"]
    width = lambda o: o["ci"]["high"] - o["ci"]["low"]  # noqa: E731
    assert width(clustered) > 1.2 * width(alone)  # copies are not independent evidence
    assert "20 samples" in clustered["ci"]["method"]


def _row(sample_id, epoch, verdicts):
    """A scored journal row judged pass/fail by each judge of ``verdicts`` (``None``: an
    invalid verdict), as the judged solver records it."""
    judgements = [{"judge": judge, "scorer": "correct", "order": None, "text": "…", "verdict": None if v is None else {"verdict": v},
                   "valid": v is not None, "value": None if v is None else float(v == "pass"), "error": None, "cached": False}
                  for judge, v in verdicts.items()]  # fmt: skip
    return {"sample_id": sample_id, "epoch": epoch, "scores": {"correct": 1.0}, "judgements": judgements}


def test_panel_agreement_of_journal_rows_and_its_report_section():
    from evalkit.benchmarks.task.agreement import panel_agreement
    from evalkit.report.summary import agreement_lines
    from evalkit.summary import Summary

    a = ["pass", "pass", "fail", "fail", "pass", "fail", "pass", "pass", "fail", "pass"]
    b = ["pass", "fail", "fail", "fail", "pass", "fail", "pass", "pass", "pass", "pass"]
    c = ["pass", "pass", "fail", None, "pass", "fail", "pass", "fail", "fail", "pass"]
    rows = [_row(f"s{i}", 0, {"ja": a[i], "jb": b[i], "jc": c[i]}) for i in range(10)]
    out = panel_agreement(rows, ["ja", "jb", "jc"], 0.95, 300, 0)["correct"]
    ab, ac, bc = out["pairs"]
    assert ab["judges"] == ["ja", "jb"] and ab["value"] == pytest.approx(0.28 / 0.48, abs=1e-6)  # the hand computation above
    # ja and jc over the 9 answers jc judged: 8 agree; ja passes 6 of 9, jc 5 of 9:
    # p_e = (6·5 + 3·4) / 81 = 42/81; κ = (8/9 − 42/81) / (1 − 42/81) = 30/39
    assert ac["n_items"] == 9 and ac["value"] == pytest.approx(30 / 39, abs=1e-6)
    matrix = [[{"pass": 1.0, "fail": 0.0}.get(v, NAN) for v in judge] for judge in (a, b, c)]
    assert out["panel"]["method"] == KRIPPENDORFF_ALPHA and out["panel"]["value"] == pytest.approx(_alpha_by_pairs(matrix), abs=1e-6)
    assert panel_agreement(rows, ["ja"], 0.95, 300, 0) == {}  # one judge: nothing to agree with

    report = "\n".join(agreement_lines(Summary.model_construct(judge_agreement={"correct": out})))
    assert "## Agreement between judges" in report and "ja & jb" in report and f"{0.28 / 0.48:.3f} [" in report
    assert "panel (3 judges)" in report and "krippendorff_alpha_nominal" in report
