"""One interval family for bounded per-unit differences (issue 44): the score interval of a
weighted stratified mean, the gate's reading of it (tolerance, wording), a sequential stop
that says what its interval excludes, and a NaN score that is never read as 0."""

from __future__ import annotations

import re

import numpy as np
import pytest

from evalkit import sequential, stats
from evalkit.sequential import Look, decide
from evalkit.stats import (BINARY, SCORE_TEST, Column, StatPlan, bounded_means, gate, gate_reading, paired, paired_binary, score_bounds,
                           score_p, shown)  # fmt: skip
from tests.conftest import REPO_ROOT


def _weighted(values: np.ndarray, strata: np.ndarray, weights: list[float]) -> StatPlan:
    """A headline Σ w_k·(rate of stratum k), as ACEBench's OVERALL over its categories."""
    cats = sorted(set(strata.tolist()))
    cols = {f"acc/{c}": Column(values[None, :].astype(float), (strata == c)[None, :], BINARY) for c in cats}

    def derive(base):
        return {"headline": sum(w * base[f"acc/{c}"] for w, c in zip(weights, cats))}

    return StatPlan([str(i) for i in range(values.size)], strata, cols, derive)


def test_the_null_fit_of_0_1_differences_is_tangos_constrained_mle():
    """The score interval's null (the tilted fit over the values seen and the bounds) is, for
    paired 0/1 differences, Tango's constrained MLE of P(A right only) at the same Δ0."""
    from evalkit.stats import _tilt, tango_nuisance

    for only_a, only_b, n in ((3, 0, 22), (5, 9, 40), (0, 0, 30), (12, 2, 50)):
        x = np.array([[[-1.0, 0.0, 1.0]]])
        counts = np.array([[[only_a, n - only_a - only_b, only_b]]], dtype=float)
        for s in (-40.0, -3.0, 0.5, 7.0, 60.0):
            mean, var, _, _ = _tilt(x, counts, np.array([[s]]), np.array([[-1.0]]), np.array([[1.0]]), None)
            q_a = float(tango_nuisance(only_a, only_b, n, float(mean[0, 0])))
            q_b = q_a + float(mean[0, 0])
            assert float(var[0, 0]) == pytest.approx(q_a + q_b - (q_b - q_a) ** 2, abs=1e-9), (only_a, only_b, n, s)


def test_a_total_loss_fails_and_a_wide_loss_never_passes():
    """Issue 44: a candidate wrong on all 60 units a perfect baseline gets right printed
    INCONCLUSIVE ("se = 0 → p = 1"). Every difference −1: the interval lies far below −0.02."""
    strata = np.arange(60) % 3
    base, new = _weighted(np.ones(60), strata, [0.578, 0.2676, 0.1544]), _weighted(np.zeros(60), strata, [0.578, 0.2676, 0.1544])
    m = paired(base, new, 0.95, 200, 0)["headline"]
    assert m["test"] == SCORE_TEST and m["delta"] == pytest.approx(-1.0) and m["high"] < -0.8 and m["p"] < 1e-6
    verdict = gate(m, "noninferior", 0.02, 0.95, "headline")
    assert (verdict["verdict"], verdict["exit"]) == ("FAIL", 1) and "upper bound -0.8" in verdict["line"] and "< −0.02" in verdict["line"]


def test_identical_stratified_runs_get_an_honest_width_and_pass_equivalence_once_it_allows():
    """Issue 44: 2,000 identical units in 5 strata (each ≥ 30 units) had no interval; a plain
    mean gives about ±0.005. Few identical units cannot PASS a tight equivalence."""
    strata = np.arange(2000) % 5
    v = (np.arange(2000) % 7 < 4).astype(float)
    m = paired(_weighted(v, strata, [0.2] * 5), _weighted(v, strata, [0.2] * 5), 0.95, 200, 0)["headline"]
    assert m["delta"] == 0.0 and m["p"] == 1.0 and -0.005 < m["low"] < 0 < m["high"] < 0.005
    assert gate(m, "equivalent", 0.01, 0.95, "headline")["verdict"] == "PASS"
    few = paired(_weighted(v[:60], strata[:60], [0.2] * 5), _weighted(v[:60], strata[:60], [0.2] * 5), 0.95, 200, 0)["headline"]
    assert few["high"] > 0.02 and gate(few, "equivalent", 0.02, 0.95, "headline")["verdict"] == "INCONCLUSIVE"


def test_many_small_strata_keep_their_estimate_inside_and_do_not_pass_a_margin_it_holds():
    """Issue 44: 40 strata × 3 units at Δ −0.3333 got [−0.2832, −0.1168] (shrunk towards 0)
    and PASSed noninferior:0.3."""
    strata = np.repeat(np.arange(40), 3)
    a = np.ones(120)
    b = a.copy()
    b[::3] = 0.0  # one loss in every stratum: Δ = −1/3
    m = paired(_weighted(a, strata, [1 / 40] * 40), _weighted(b, strata, [1 / 40] * 40), 0.95, 200, 0)["headline"]
    assert m["delta"] == pytest.approx(-1 / 3) and m["low"] < -1 / 3 < m["high"] and "40 strata" in m["method"]
    assert gate(m, "noninferior", 0.3, 0.95, "headline")["verdict"] != "PASS"


def test_the_interval_and_its_p_agree_on_random_problems():
    rng = np.random.default_rng(11)
    problems = []
    for _ in range(60):
        k, n = int(rng.integers(1, 5)), int(rng.integers(3, 50))
        vals = [np.clip(np.round(rng.normal(rng.normal(0, 0.15), 0.4, n) * 4) / 4, -1, 1) for _ in range(k)]
        problems.append((vals, list(rng.dirichlet(np.ones(k))), (-1.0, 1.0)))
    data, _ = bounded_means(problems)
    low, high = score_bounds(data, 0.95)
    p = score_p(data)
    est = data.estimate
    assert np.all(low <= est) and np.all(est <= high) and np.all(low >= -1) and np.all(high <= 1)
    assert np.array_equal((low > 0) | (high < 0), p < 0.05) and 5 < np.sum(p < 0.05) < 55


def test_strata_of_one_unit_are_pooled_and_said_so():
    data, notes = bounded_means([([np.array([1.0]), np.array([0.0]), np.array([-1.0, 0.0, 0.0])], [0.2, 0.3, 0.5], (-1.0, 1.0)),
                                 ([np.array([1.0]), np.array([0.0, 0.0, -1.0])], [0.5, 0.5], (-1.0, 1.0))])  # fmt: skip
    assert notes == ["; 2 strata of one unit pooled into one", "; a stratum of one unit pooled with the smallest other"]
    assert data.estimate == pytest.approx([0.2 - 0.5 / 3, 0.5 - 0.5 / 3])
    assert data.w[0, :2].tolist() == pytest.approx([0.5, 0.5]) and data.c2[0, 0] == pytest.approx(0.2**2 + 0.3**2)


@pytest.mark.parametrize(("kind", "margin", "low", "high", "verdict", "text"), [
    ("noninferior", 0.02, -0.01, 0.03, "PASS", "lower bound -0.0100 > −0.02"),
    ("noninferior", 0.02, -0.05, -0.020004, "FAIL", "upper bound -0.020004 < −0.02"),
    ("noninferior", 0.05, -0.049996, 0.01, "PASS", "lower bound -0.049996 > −0.05"),
    ("noninferior", 0.1, -0.1 + 1e-17, 0.2, "INCONCLUSIVE", "holds −0.1"),
    ("noninferior", 0.1, -0.3, -0.1 - 1e-12, "INCONCLUSIVE", "holds −0.1"),
    ("superior", 0.0, 1e-16, 0.2, "INCONCLUSIVE", "holds 0"),
    ("superior", 0.0, -0.2, -0.00001, "FAIL", "upper bound -0.00001 < 0"),
    ("equivalent", 0.05, -0.0499999, 0.03, "PASS", "inside (−0.05, 0.05)"),
    ("equivalent", 0.05, 0.05 * (1 - 1e-12), 0.2, "FAIL", "≥ 0.05"),
])  # fmt: skip
def test_every_comparison_with_a_margin_has_a_tolerance_and_its_numbers_agree(kind, margin, low, high, verdict, text):
    """Issue 44: a census with Δ exactly −0.1 PASSed noninferior:0.1 by round-off; a FAIL
    printed "upper bound −0.0200 < −0.02" and a PASS its bound as −0.0500."""
    got, why = gate_reading(kind, margin, low, high)
    assert got == verdict and text in why, why
    line = gate({"delta": (low + high) / 2, "low": low, "high": high, "test": "t", "n": 9}, kind, margin, 0.95, "m")["line"]
    assert line.startswith(f"gate {stats.gate_name(kind, margin)}: {verdict} — {why}")


def test_a_printed_bound_always_stands_on_its_own_side_of_the_margin():
    rng = np.random.default_rng(3)
    for margin in (0.02, 0.05, 0.1, 0.0):
        for x in -margin + rng.normal(0, 1, 300) * 10.0 ** rng.integers(-9, -1, 300):
            printed = float(shown(x, -margin))
            assert stats.beyond(printed, -margin) == stats.beyond(x, -margin), (x, margin, printed)


def test_a_futile_stop_says_what_its_interval_excludes_and_compare_reads_it_the_same():
    """Issue 44: a replay at Δ ≈ −0.19 stopped FUTILE after 97 units and compare said
    INCONCLUSIVE [−0.3147, +0.0651]. A stop below −δ FAILs; else FUTILE says what the
    interval excludes, and compare's gate of that run agrees (exit 3)."""
    look = Look(n=97, delta=-0.19, low=-0.3147, high=0.0651)
    verdict, why = decide(look, "noninferior", 0.05, 120)
    assert verdict == "FUTILE" and "excludes Δ < -0.3147 and Δ > +0.0651" in why and "still holds -0.05" in why
    assert decide(Look(n=97, delta=-0.19, low=-0.3147, high=-0.0501), "noninferior", 0.05, 120)[0] == "FAIL"
    entry = {"delta": -0.19, "low": -0.3147, "high": 0.0651, "n": 97, "test": "anytime-valid confidence sequence (run.stop_when)",
             "stopped": {"gate": "noninferior:0.05", "verdict": "FUTILE", "why": why}}  # fmt: skip
    got = gate(entry, "noninferior", 0.05, 0.95, "overall")
    assert (got["verdict"], got["exit"]) == ("FUTILE", 3) and why in got["line"]
    assert gate(entry, "noninferior", 0.1, 0.95, "overall")["verdict"] == "INCONCLUSIVE"  # another gate: the interval alone


def test_a_nan_score_marked_as_scored_is_never_read_as_zero():
    v = np.array([[1.0, np.nan, 1.0, 0.0]])
    col = Column(v, np.ones((1, 4), bool), BINARY)
    covered, means = col.unit_means()
    assert covered.tolist() == [True, False, True, True] and means[2] == 1.0
    plan = StatPlan(list("abcd"), np.zeros(4, dtype=int), {"rate": col})
    assert plan.point()["rate"] == pytest.approx(2 / 3) and plan.n_of("rate") == 3
    from evalkit.benchmarks.base import score_means_plan
    from evalkit.types import Sample

    samples = [Sample(id=s, subset="x", data={}) for s in "abc"]
    rows = [{"sample_id": "a", "scores": {"f1": 0.5}}, {"sample_id": "b", "scores": {"f1": float("nan")}}, {"sample_id": "c", "scores": {"f1": 1.0}}]
    assert score_means_plan(samples, [rows]).point()["f1"] == pytest.approx(0.75)


def test_the_docstrings_figures_are_the_codes():
    """Issue 44: a docstring said ±0.149 where the code gives ±0.1637. Every "±0.xxx at
    n = N" of the statistics' docstrings is the no-discordance interval the code gives."""
    texts = [stats.__doc__, stats._paired_binary.__doc__, stats.gate.__doc__, sequential.__doc__,
             (REPO_ROOT / "docs" / "performance.md").read_text(), (REPO_ROOT / "README.md").read_text(),
             *(p.read_text() for p in sorted((REPO_ROOT / "docs").glob("*.md")))]  # fmt: skip
    found = [(float(w), int(n)) for t in texts for w, n in re.findall(r"±(0\.\d+) at n = (\d+)", t or "")]
    assert len(found) >= 2
    for width, n in found:
        got = paired_binary(0, 0, n, 0.95)["high"]
        digits = len(str(width).split(".")[1])
        assert round(got, digits) == width, (width, n, got)
    assert sequential.fixed_n(0.05, 0.2) == 841 and "841" in (REPO_ROOT / "docs" / "performance.md").read_text()
