"""Tests of oracle.gtest (and the pooling and calibration of oracle.gtest_cells): the G statistic,
pooling, zero cells, bad input and the false-alarm rate.

Every randomised check uses fixed seeds and states the binomial bound it asserts; the bounds
are chosen so that a correct implementation fails them with probability ≤ 1e-6 per check
(under the approximation being tested), while a miscalibrated test (too many false alarms,
or power below the stated 0.99) fails them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from helpers.stat_checks import LAW12, binom_bounds, scaled_tv
from spectr_gbv.oracle.gtest import counts_from_samples, gtest
from spectr_gbv.oracle.gtest_power import detectable_tv


def exact_null_mean_g(n, probs):
    """E₀[G] by enumerating every multinomial outcome of n counts on the cells (small n)."""
    probs = np.asarray(probs, dtype=np.float64)
    total = 0.0
    for i in range(n + 1):
        for j in range(n - i + 1):
            o = np.array([i, j, n - i - j], dtype=np.float64)
            pr = math.exp(math.lgamma(n + 1) - sum(math.lgamma(x + 1) for x in o) + float(o @ np.log(probs)))
            e = n * probs
            total += pr * 2 * sum(x * math.log(x / y) for x, y in zip(o, e) if x > 0)
    return total


# ----------------------------------------------------------------------------- G-test basics


def test_g_statistic_matches_hand_computation_and_scipy():
    counts = {"a": 3, "b": 5, "c": 2}
    law = {"a": 0.2, "b": 0.5, "c": 0.3}
    r = gtest(counts, law, alpha=0.05, min_expected=1.0)
    hand = 2 * (3 * math.log(3 / 2) + 5 * math.log(5 / 5) + 2 * math.log(2 / 3))
    assert r.statistic == pytest.approx(hand, abs=1e-12)
    assert r.statistic == pytest.approx(0.8109302162163288, abs=1e-12)
    ref = stats.power_divergence([3, 5, 2], [2, 5, 3], lambda_="log-likelihood")
    assert abs(r.statistic - ref.statistic) <= 1e-12
    # the p-value is χ²_2's tail at G/s, s = 1 + 2(E₀[G]/dof − 1) (E₀[G] by enumeration here)
    ratio = exact_null_mean_g(10, [0.2, 0.5, 0.3]) / 2
    assert ratio == pytest.approx(1.1231576823079623, rel=1e-9)
    scale = 1 + 2 * (ratio - 1)
    assert r.null_mean_scale == pytest.approx(scale, rel=1e-12)
    assert abs(r.pvalue - stats.chi2.sf(hand / scale, 2)) <= 1e-12
    assert (r.dof, r.n, r.n_cells_after_merge, r.merged_mass) == (2, 10, 3, 0.0)
    assert r.passed and r.zero_cell_violations == () and r.reason == ""


def test_g_statistic_with_an_empty_cell():
    # O ln(O/E) → 0 as O → 0: the empty cell contributes nothing.
    r = gtest([0, 7, 3], [0.2, 0.5, 0.3], alpha=0.05, min_expected=1.0)
    hand = 2 * (7 * math.log(7 / 5) + 3 * math.log(3 / 3))
    assert r.statistic == pytest.approx(hand, abs=1e-12)


def test_arrays_and_dicts_give_the_same_result():
    counts = np.array([40, 25, 20, 15])
    law = np.array([0.4, 0.3, 0.2, 0.1])
    a = gtest(counts, law, 0.01)
    b = gtest(dict(enumerate(counts.tolist())), dict(enumerate(law.tolist())), 0.01)
    assert a == b


def test_zero_probability_cell_with_one_count_fails_outright():
    law = {"a": 0.5, "b": 0.5, "z": 0.0}
    ok = gtest({"a": 50, "b": 50, "z": 0}, law, 0.01)
    assert ok.passed and ok.pvalue == 1.0  # perfect fit, zero cell empty
    bad = gtest({"a": 50, "b": 49, "z": 1}, law, 0.01)
    assert not bad.passed
    assert bad.pvalue == 0.0 and bad.statistic == math.inf
    assert bad.zero_cell_violations == ("z",)
    assert "zero-probability" in bad.reason and "zero-probability" in bad.summary()
    # An outcome absent from the law is a zero cell too.
    absent = gtest({"a": 50, "b": 50, ("never",): 1}, law, 0.01)
    assert not absent.passed and absent.zero_cell_violations == (("never",),)
    assert absent.n == 101


def test_pooling_hand_example_keeps_mass_and_n():
    # n = 100: expected 50, 30, 15 stay; 3, 1, 0.5, 0.5 pool (smallest first) into one
    # cell of expected exactly 5.
    law = [0.5, 0.3, 0.15, 0.03, 0.01, 0.005, 0.005]
    counts = [47, 33, 12, 4, 2, 1, 1]
    r = gtest(counts, law, 0.05)
    assert r.n_cells_after_merge == 4 and r.dof == 3
    np.testing.assert_allclose(r.expected, [50, 30, 15, 5], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(r.observed, [47, 33, 12, 8])
    assert r.merged_mass == pytest.approx(0.05, abs=1e-15)
    ref = stats.power_divergence([47, 33, 12, 8], [50, 30, 15, 5], lambda_="log-likelihood")
    assert r.statistic == pytest.approx(ref.statistic, abs=1e-12)
    assert r.null_mean_scale > 1.0
    assert r.detectable_tv == pytest.approx(scaled_tv(100, 0.05, 4, r.null_mean_scale), rel=1e-12)
    assert r.detectable_tv > detectable_tv(100, 0.05, n_cells=4)


def test_pooling_leftover_is_tested_apart_as_rare_cells():
    # n = 100: expected 90, 6, 4; the lone small cell (4) closes no group: it is tested on its
    # own (binomial tail P(X >= 5 | 100, 0.04)), the other two by the G-test given the 95
    # samples outside it (expected 95·0.9/0.96, 95·0.06/0.96), each at alpha/2.
    r = gtest([88, 7, 5], [0.9, 0.06, 0.04], 0.05)
    np.testing.assert_allclose(r.expected, [95 * 0.9 / 0.96, 95 * 0.06 / 0.96], rtol=1e-12)
    np.testing.assert_array_equal(r.observed, [88, 7])
    assert r.merged_mass == pytest.approx(0.04, abs=1e-15)
    g = stats.power_divergence([88, 7], [95 * 0.9 / 0.96, 95 * 0.06 / 0.96], lambda_="log-likelihood")
    p_rare = stats.binom.sf(4, 100, 0.04)
    assert r.statistic == pytest.approx(g.statistic, abs=1e-12)
    p_g = stats.chi2.sf(g.statistic / r.null_mean_scale, 1)
    assert r.pvalue == pytest.approx(min(1.0, 2 * min(p_g, p_rare)), rel=1e-12)
    assert r.detectable_tv == pytest.approx(scaled_tv(95, 0.025, 2, r.null_mean_scale), rel=1e-12)
    assert r.detectable_tv_law == r.detectable_tv + r.merged_mass


def test_mass_moved_into_rounding_noise_cells_is_caught():
    """A large cell and two outcomes of probability ~1e-16 (rounding noise of an exact law):
    before the rare cells were tested apart they were pooled into the large cell, and a
    sampler putting 7.9 % of its mass on them instead passed (pooled mass 0.079 invisible)."""
    law = {"a": 0.0785 - 2e-16, "b": 1e-16, "c": 1e-16, "d": 0.5, "e": 0.4215}
    n = 200_000
    honest = gtest({"a": 15_700, "d": 100_000, "e": 84_300}, law, 1e-6)
    assert honest.passed and honest.merged_mass == pytest.approx(2e-16, abs=1e-18)
    moved = gtest({"b": 15_700, "d": 100_000, "e": 84_300}, law, 1e-6)
    assert not moved.passed and "rare cells" in moved.reason


def test_one_cell_left_is_reported_as_uninformative():
    r = gtest({"x": 20}, {"x": 1.0}, 0.01)
    assert r.dof == 0 and r.pvalue == 1.0 and r.passed
    assert "no information" in r.reason and r.detectable_tv == math.inf
    # n below min_expected: all cells pooled into one.
    r = gtest([1, 2], [0.5, 0.5], 0.01)
    assert r.n_cells_after_merge == 1 and "no information" in r.reason


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.integers(0, 1000), min_size=1, max_size=40).filter(lambda w: sum(w) > 0),
    n=st.integers(1, 5000),
    min_expected=st.sampled_from([1.0, 5.0, 20.0]),
    seed=st.integers(0, 2**32 - 1),
)
# rare cells over-observed (11 where 10 expected): the kept cell's conditional expected is 19
@example(weights=[1, 2], n=30, min_expected=20.0, seed=0)
def test_pooling_never_drops_mass_or_samples(weights, n, min_expected, seed):
    p = np.array(weights, dtype=np.float64)
    p /= p.sum()
    counts = np.random.default_rng(seed).multinomial(n, p)
    r = gtest(counts, p, 0.05, min_expected=min_expected)
    assert r.n == n
    assert r.observed.sum() + r.rare_observed == n
    assert r.expected.sum() == pytest.approx(n - r.rare_observed, rel=1e-12)
    assert r.rare_expected < min_expected
    assert r.n_cells_after_merge <= int((p > 0).sum())
    assert 0.0 <= r.merged_mass <= 1.0 + 1e-12
    if n >= min_expected and r.n > r.rare_observed:
        # pooling depends on the law and n only: every kept group has n·p ≥ min_expected.
        # r.expected is conditional on the rare cells' count (n_g = n − rare_observed samples
        # over the law renormalised outside them), so it is scaled back to n·p here; without
        # rare cells the factor is exactly 1.
        law_expected = r.expected * (n - r.rare_expected) / (n - r.rare_observed)
        assert law_expected.min() >= min_expected * (1 - 1e-12)
    assert 0.0 <= r.pvalue <= 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(counts={"a": -1, "b": 3}), "counts"),
        (dict(counts={"a": 1.5, "b": 3}), "counts"),
        (dict(counts={"a": 0, "b": 0}), "n >= 1"),
        (dict(law={"a": 0.5, "b": 0.6}), "law"),
        (dict(law={"a": -0.1, "b": 1.1}), "law"),
        (dict(law={"a": float("nan"), "b": 1.0}), "law"),
        (dict(alpha=0.0), "alpha"),
        (dict(alpha=1.0), "alpha"),
        (dict(min_expected=0.0), "min_expected"),
    ],
)
def test_gtest_rejects_bad_input(kwargs, match):
    args = dict(counts={"a": 5, "b": 5}, law={"a": 0.5, "b": 0.5}, alpha=0.05)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        gtest(**args)


# ----------------------------------------------------------------------------- calibration


def test_false_alarm_rate_matches_alpha_under_the_exact_law():
    # 4000 seeds, n = 1000 draws each from LAW12 itself (pooling active).  The number of
    # rejections at level a is Binomial(4000, a) for a calibrated test; assert it lies in
    # the two-sided 1 − 1e-6 binomial interval for a = 0.01, 0.05 and 0.2.
    seeds = 4000
    results = [gtest(np.random.default_rng(seed).multinomial(1000, LAW12), LAW12, 0.01)
               for seed in range(seeds)]
    assert all(r.n_cells_after_merge == 11 for r in results)
    assert all(r.passed == (r.pvalue >= 0.01) for r in results)
    pvalues = np.array([r.pvalue for r in results])
    for a in (0.01, 0.05, 0.2):
        lo, hi = binom_bounds(seeds, a)
        alarms = int((pvalues < a).sum())
        assert lo <= alarms <= hi, (a, alarms, lo, hi)


def test_false_alarm_rate_on_tuple_outcomes_via_counts_from_samples():
    # Outcomes shaped like one iteration's (tau, accepted prefix, emitted token).
    outcomes = [(0, (), 1), (0, (), 2), (1, (3,), 0), (1, (3,), 2), (2, (3, 1), 0),
                (2, (3, 1), 4), (2, (3, 2), 0)]
    probs = np.array([0.25, 0.15, 0.2, 0.1, 0.15, 0.1, 0.05])
    law = dict(zip(outcomes, probs.tolist()))
    # 300 seeds at alpha = 0.01: false alarms ~ Binomial(300, 0.01), bound at risk 1e-6.
    seeds, alpha = 300, 0.01
    alarms = 0
    for seed in range(seeds):
        idx = np.random.default_rng(10_000 + seed).choice(len(outcomes), size=500, p=probs)
        counts = counts_from_samples(outcomes[i] for i in idx)
        r = gtest(counts, law, alpha)
        assert r.n == 500 and not r.zero_cell_violations
        alarms += not r.passed
    lo, hi = binom_bounds(seeds, alpha)
    assert alarms <= hi, (alarms, hi)


def test_counts_from_samples():
    assert counts_from_samples([(1, ()), (0, (2,)), (1, ())]) == {(1, ()): 2, (0, (2,)): 1}
    assert counts_from_samples([]) == {}
