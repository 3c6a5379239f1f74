"""Tests of oracle.stats: calibration, stated power, pooling, conditional laws, means.

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

from spectr_gbv.oracle.stats import (
    MeanStats,
    conditional_gtests,
    counts_from_samples,
    detectable_tv,
    gtest,
    gtest_power,
    law_of,
    least_favourable_kappa,
    mean_ci,
    mean_within_ci,
    paired_mean_test,
    sample_size_for_tv,
)

# Per-check probability that a correct implementation is outside the stated binomial bound.
RISK = 1e-6


def scaled_tv(n, alpha, n_cells, scale):
    """The δ gtest states when it compares G/scale with χ²: the plain G-test's at the level
    χ².sf(scale·χ².isf(alpha))."""
    dof = n_cells - 1
    return detectable_tv(n, stats.chi2.sf(scale * stats.chi2.isf(alpha, dof), dof), n_cells=n_cells)


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


def binom_bounds(trials: int, rate: float, risk: float = RISK) -> tuple[int, int]:
    """[lo, hi] holding Binomial(trials, rate) with probability ≥ 1 − risk (two tails)."""
    lo = int(stats.binom.ppf(risk / 2, trials, rate))
    hi = int(stats.binom.isf(risk / 2, trials, rate))
    return lo, hi


# A 12-cell law whose two smallest cells are pooled at n = 1000 (expected 1 + 4 = 5).
LAW12 = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.03, 0.015, 0.01, 0.004, 0.001])

# Six cells that split into two halves of mass exactly 1/2 ({4, 5} vs the rest), so the
# law-free bound Σ(p'−p)²/p ≥ 4·TV² is attained: the least favourable case for power.
LAW6 = np.array([0.05, 0.1, 0.15, 0.2, 0.25, 0.25])
HALF6 = np.array([False, False, False, False, True, True])


def least_favourable(p: np.ndarray, half: np.ndarray, delta: float) -> np.ndarray:
    """p scaled by (1 − 2δ) on ``half`` (mass 1/2) and (1 + 2δ) elsewhere: TV = δ."""
    return np.where(half, p * (1 - 2 * delta), p * (1 + 2 * delta))


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


# ----------------------------------------------------------------------------- power


@pytest.mark.parametrize("n, alpha", [(20_000, 0.01), (200_000, 1e-6), (2_000, 0.01)])
def test_least_favourable_deviation_at_detectable_tv_is_detected(n, alpha):
    # At δ = detectable_tv(n, alpha) the stated power against the least favourable
    # deviation (Σ(p'−p)²/p = 4δ² exactly) is 0.99.  Over 400 trials the misses are
    # ~ Binomial(400, 0.01) if the approximation holds; assert misses ≤ the 1 − 1e-6 upper
    # bound (16, i.e. detection rate ≥ 0.96).  A much smaller δ (δ/10, λ = λ*/100) is
    # detected at about the false-alarm rate: assert ≤ 10% over the same trials.
    trials = 400
    stated = gtest_power(LAW6, n, alpha)  # δ as gtest states it (G/s against χ², s ≈ 1 here)
    delta = stated.detectable_tv
    assert delta == pytest.approx(scaled_tv(n, alpha, 6, stated.null_mean_scale), rel=1e-12)
    assert 1.0 <= stated.null_mean_scale < 1.02
    p_dev = least_favourable(LAW6, HALF6, delta)
    assert 0.5 * np.abs(p_dev - LAW6).sum() == pytest.approx(delta, rel=1e-12)
    assert ((p_dev - LAW6) ** 2 / LAW6).sum() == pytest.approx(4 * delta**2, rel=1e-12)

    rng = np.random.default_rng(12345)
    results = [gtest(rng.multinomial(n, p_dev), LAW6, alpha) for _ in range(trials)]
    assert all(r.n_cells_after_merge == 6 for r in results)
    assert results[0].detectable_tv == pytest.approx(delta, rel=1e-15)
    misses = sum(r.passed for r in results)
    _, hi = binom_bounds(trials, 0.01)
    assert misses <= hi, (misses, hi)

    p_small = least_favourable(LAW6, HALF6, delta / 10)
    small_hits = sum(not gtest(rng.multinomial(n, p_small), LAW6, alpha).passed
                     for _ in range(trials))
    assert small_hits <= 0.10 * trials, small_hits


def test_random_direction_deviations_at_detectable_tv_are_detected():
    # Deviations of TV = δ in random directions have Σ(p'−p)²/p ≥ 4δ², so power ≥ 0.99 too:
    # 200 deviations, one sample each, misses ≤ the 1 − 1e-6 Binomial(200, 0.01) bound.
    n, alpha, trials = 20_000, 0.01, 200
    delta = detectable_tv(n, alpha, n_cells=len(LAW12))
    rng = np.random.default_rng(7)
    misses = 0
    for _ in range(trials):
        d = rng.standard_normal(len(LAW12)) * LAW12
        d -= d.sum() * LAW12  # keep Σp' = 1
        d *= delta / (0.5 * np.abs(d).sum())
        p_dev = LAW12 + d
        assert p_dev.min() > 0  # the scaling keeps every deviation a law at this δ
        assert ((d**2) / LAW12).sum() >= 4 * delta**2 * (1 - 1e-12)
        misses += gtest(rng.multinomial(n, p_dev), LAW12, alpha).passed
    _, hi = binom_bounds(trials, 0.01)
    assert misses <= hi, misses


# ----------------------------------------------------------------------------- power formula


def test_sample_size_delta_0_01_alpha_1e_6_is_130249_at_dof_1_and_184225_at_dof_10():
    # Documented values: δ = 0.01, α = 1e-6, power 0.99, law-free κ = 4.
    assert sample_size_for_tv(0.01, 1e-6, n_cells=2) == 130_249
    assert sample_size_for_tv(0.01, 1e-6, n_cells=11) == 184_225


def test_dof_1_power_matches_the_normal_closed_form():
    # With 1 dof, G ≈ (Z + √λ)², so power = Φ(√λ − c) + Φ(−√λ − c), c = z_{α/2}: an
    # expression independent of scipy's ncx2.
    n, alpha = 200_000, 1e-6
    delta = detectable_tv(n, alpha, n_cells=2)
    root = math.sqrt(4 * n * delta**2)
    c = stats.norm.isf(alpha / 2)
    power = stats.norm.sf(c - root) + stats.norm.cdf(-c - root)
    assert power == pytest.approx(0.99, abs=1e-9)


@pytest.mark.parametrize("n_cells", [2, 6, 101, 10_001])
@pytest.mark.parametrize("alpha", [0.01, 1e-6])
def test_sample_size_and_detectable_tv_are_inverses(n_cells, alpha):
    for n in (100, 1_237, 200_000, 10_000_000):
        delta = detectable_tv(n, alpha, n_cells=n_cells)
        if delta <= 1.0:
            assert sample_size_for_tv(delta, alpha, n_cells=n_cells) == n
    for delta in (0.3, 0.05, 0.01, 0.001):
        n = sample_size_for_tv(delta, alpha, n_cells=n_cells)
        assert detectable_tv(n, alpha, n_cells=n_cells) <= delta
        if n > 1:
            assert detectable_tv(n - 1, alpha, n_cells=n_cells) > delta


def test_power_functions_are_monotone():
    deltas = [0.2, 0.1, 0.05, 0.02, 0.01]
    ns = [sample_size_for_tv(d, 1e-6, n_cells=6) for d in deltas]
    assert all(a < b for a, b in zip(ns, ns[1:]))  # smaller δ needs more samples
    alphas = [1e-1, 1e-2, 1e-4, 1e-6, 1e-9]
    ns = [sample_size_for_tv(0.01, a, n_cells=6) for a in alphas]
    assert all(a < b for a, b in zip(ns, ns[1:]))  # smaller α needs more samples
    tvs = [detectable_tv(2e5, a, n_cells=6) for a in alphas]
    assert all(a < b for a, b in zip(tvs, tvs[1:]))
    tvs = [detectable_tv(n, 1e-6, n_cells=6) for n in (1e3, 1e4, 1e5, 1e6)]
    assert all(a > b for a, b in zip(tvs, tvs[1:]))
    tvs = [detectable_tv(2e5, 1e-6, n_cells=k) for k in (2, 3, 11, 101, 1001)]
    assert all(a < b for a, b in zip(tvs, tvs[1:]))  # more cells, less power
    # Law-free δ scales as 1/√n exactly.
    assert detectable_tv(4e5, 1e-6, n_cells=6) == pytest.approx(
        detectable_tv(1e5, 1e-6, n_cells=6) / 2, rel=1e-12)


def test_least_favourable_kappa_matches_brute_force():
    # min over subsets A of 1/(s(1−s)), s = p(A): the minimum of Σ(p'−p)²/p ÷ TV².
    rng = np.random.default_rng(3)
    for _ in range(50):
        m = int(rng.integers(2, 9))
        p = rng.dirichlet(np.full(m, 0.5))
        # Mass of A and of its complement summed separately: 1 − s loses digits near s = 1.
        splits = [(p[[mask >> i & 1 == 1 for i in range(m)]].sum(),
                   p[[mask >> i & 1 == 0 for i in range(m)]].sum())
                  for mask in range(1, 2**m - 1)]
        exact = min(1 / (a * b) for a, b in splits)
        kappa = least_favourable_kappa(p)
        assert kappa <= exact * (1 + 1e-12)  # a valid lower bound
        if p.max() >= 0.5:
            assert kappa == pytest.approx(exact, rel=1e-12)
        else:
            assert kappa == 4.0
    assert least_favourable_kappa([0.8, 0.2]) == pytest.approx(1 / 0.16, rel=1e-15)
    assert least_favourable_kappa({"x": 1.0}) == math.inf
    # A larger κ means a smaller detectable δ, by √(4/κ).
    assert detectable_tv(1e4, 0.01, n_cells=2, kappa=1 / 0.16) == pytest.approx(
        detectable_tv(1e4, 0.01, n_cells=2) * math.sqrt(4 * 0.16), rel=1e-12)


@pytest.mark.parametrize(
    "fn, kwargs, match",
    [
        (detectable_tv, dict(n=0.5, alpha=0.01, n_cells=3), "n must"),
        (detectable_tv, dict(n=100, alpha=1.5, n_cells=3), "alpha"),
        (detectable_tv, dict(n=100, alpha=0.01, n_cells=1), "n_cells"),
        (detectable_tv, dict(n=100, alpha=0.01, power=0.005, n_cells=3), "power"),
        (sample_size_for_tv, dict(delta=0.0, alpha=0.01, n_cells=3), "delta"),
        (sample_size_for_tv, dict(delta=1.5, alpha=0.01, n_cells=3), "delta"),
        (sample_size_for_tv, dict(delta=0.1, alpha=0.01, n_cells=3, kappa=0.0), "kappa"),
    ],
)
def test_power_functions_reject_bad_input(fn, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn(**kwargs)


# ----------------------------------------------------------------------------- conditional

# Outcomes (tau, token).  Keys 0 and 1 have equal mass and mirror-image conditional laws;
# key 2 is deterministic (one outcome, so not tested conditionally).
_COND = {0: {"a": 0.7, "b": 0.2, "c": 0.1}, 1: {"a": 0.1, "b": 0.2, "c": 0.7}, 2: {"a": 1.0}}
_KEY_MASS = {0: 0.45, 1: 0.45, 2: 0.1}


def _joint(cond):
    return {(k, t): _KEY_MASS[k] * q for k in cond for t, q in cond[k].items()}


COND_LAW = _joint(_COND)
SWAPPED_LAW = _joint({0: _COND[1], 1: _COND[0], 2: _COND[2]})


def _draw(law, n, seed):
    outcomes = list(law)
    probs = np.array([law[o] for o in outcomes])
    idx = np.random.default_rng(seed).choice(len(outcomes), size=n, p=probs / probs.sum())
    return [outcomes[i] for i in idx]


def test_law_of_pushes_forward_exactly():
    tau_law = law_of(COND_LAW, lambda o: o[0])
    assert tau_law == pytest.approx(_KEY_MASS, abs=1e-15)
    token_law = law_of(COND_LAW, lambda o: o[1])
    assert token_law == pytest.approx({"a": 0.46, "b": 0.18, "c": 0.36}, abs=1e-15)
    assert math.fsum(token_law.values()) == pytest.approx(1.0, abs=1e-15)
    assert law_of({"x": 0.0, "y": 1.0}, str.upper) == {"X": 0.0, "Y": 1.0}


def test_conditional_tests_catch_a_swap_that_leaves_marginals_unchanged():
    # Sampling from SWAPPED_LAW: the law of tau and the law of the token are those of
    # COND_LAW, so marginal G-tests pass; the conditional laws given tau differ by TV 0.6.
    assert law_of(SWAPPED_LAW, lambda o: o[0]) == pytest.approx(law_of(COND_LAW, lambda o: o[0]))
    assert law_of(SWAPPED_LAW, lambda o: o[1]) == pytest.approx(law_of(COND_LAW, lambda o: o[1]))
    samples = _draw(SWAPPED_LAW, 3000, seed=99)
    alpha = 1e-3
    assert gtest(counts_from_samples(o[0] for o in samples),
                 law_of(COND_LAW, lambda o: o[0]), alpha).passed
    assert gtest(counts_from_samples(o[1] for o in samples),
                 law_of(COND_LAW, lambda o: o[1]), alpha).passed
    fam = conditional_gtests(samples, COND_LAW, lambda o: o[0], alpha)
    assert not fam.passed
    assert fam.n_tests == 3 and fam.alpha_per_test == pytest.approx(alpha / 3)
    assert fam.marginal.passed
    assert set(fam.conditional) == {0, 1}
    assert all(not r.passed for r in fam.conditional.values())
    assert fam.min_pvalue < 1e-100 and fam.pvalue == pytest.approx(3 * fam.min_pvalue)
    assert "FAIL" in fam.summary()


def test_conditional_family_false_alarm_rate_is_at_most_alpha():
    # 1000 seeds from COND_LAW itself at family alpha 0.05: false alarms ≤ the 1 − 1e-6
    # upper bound of Binomial(1000, 0.05) (Bonferroni makes the true rate ≤ 0.05).  Without
    # the correction the rate would be ≈ 1 − 0.95³ ≈ 0.14, far above the bound (≈ 0.085).
    seeds, alpha = 1000, 0.05
    alarms = 0
    for seed in range(seeds):
        fam = conditional_gtests(_draw(COND_LAW, 600, seed), COND_LAW, lambda o: o[0], alpha)
        assert fam.n_tests == 3 and len(fam.conditional) == 2
        alarms += not fam.passed
    _, hi = binom_bounds(seeds, alpha)
    assert alarms <= hi, (alarms, hi)


def test_conditional_zero_cell_and_eligibility():
    samples = _draw(COND_LAW, 600, seed=5) + [(2, "b")]  # (2, "b") has probability 0
    fam = conditional_gtests(samples, COND_LAW, lambda o: o[0], 0.05)
    assert not fam.passed and fam.zero_cell_violations == ((2, "b"),)
    assert fam.min_pvalue == 0.0 and fam.pvalue == 0.0
    # Keys whose expected count is below min_key_expected are not in the family.
    fam = conditional_gtests(_draw(COND_LAW, 600, seed=5), COND_LAW, lambda o: o[0], 0.05,
                             min_key_expected=300)
    assert fam.n_tests == 1 and fam.conditional == {}
    # Counts given as a mapping are accepted.
    counts = counts_from_samples(_draw(COND_LAW, 600, seed=5))
    a = conditional_gtests(counts, COND_LAW, lambda o: o[0], 0.05)
    b = conditional_gtests(_draw(COND_LAW, 600, seed=5), COND_LAW, lambda o: o[0], 0.05)
    assert a.min_pvalue == b.min_pvalue and a.passed == b.passed


def test_counts_from_samples():
    assert counts_from_samples([(1, ()), (0, (2,)), (1, ())]) == {(1, ()): 2, (0, (2,)): 1}
    assert counts_from_samples([]) == {}


# ----------------------------------------------------------------------------- means

TAU_LAW = np.array([0.3, 0.25, 0.2, 0.15, 0.1])  # P(tau = 0..4)
TAU_MEAN = float((np.arange(5) * TAU_LAW).sum())  # 1.5
TAU_VAR = float((np.arange(5) ** 2 * TAU_LAW).sum() - TAU_MEAN**2)  # 1.65


def test_mean_ci_values_and_sufficient_statistics_agree():
    v = np.array([0, 1, 1, 2, 4, 3, 0, 1], dtype=np.float64)
    a = mean_ci(v, 0.9)
    b = mean_ci((v.sum(), (v**2).sum(), v.size), 0.9)
    c = mean_ci(MeanStats.from_values(v), 0.9)
    assert a == b == c
    se = v.std(ddof=1) / math.sqrt(v.size)
    z = stats.norm.ppf(0.95)
    assert a.mean == pytest.approx(1.5, abs=1e-15)
    assert a.low == pytest.approx(1.5 - z * se, abs=1e-12)
    assert a.high == pytest.approx(1.5 + z * se, abs=1e-12)


def test_mean_ci_coverage_and_mean_test_calibration():
    # 1000 seeds of n = 400 taus: the 95% interval covers E[tau] = 1.5 a Binomial(1000,
    # 0.95) number of times and mean_within_ci at alpha 0.05 (exact variance) rejects a
    # Binomial(1000, 0.05) number of times; both asserted within two-sided 1 − 1e-6 bounds.
    seeds = 1000
    covered = rejected = 0
    for seed in range(seeds):
        taus = np.random.default_rng(seed).choice(5, size=400, p=TAU_LAW).astype(np.float64)
        ci = mean_ci(taus, 0.95)
        covered += ci.low <= TAU_MEAN <= ci.high
        rejected += not mean_within_ci(taus, TAU_MEAN, 0.05, exact_variance=TAU_VAR).passed
    lo, hi = binom_bounds(seeds, 0.95)
    assert lo <= covered <= hi, covered
    lo, hi = binom_bounds(seeds, 0.05)
    assert lo <= rejected <= hi, rejected


def test_mean_within_ci_detects_a_shifted_mean():
    # Shift 0.05 of mass from tau = 0 to tau = 4: the mean moves by 0.2 = 8.8 standard
    # errors at n = 3000, so the z-test at alpha 1e-6 rejects except with negligible
    # probability.
    shifted = TAU_LAW + np.array([-0.05, 0, 0, 0, 0.05])
    taus = np.random.default_rng(1).choice(5, size=3000, p=shifted).astype(np.float64)
    r = mean_within_ci((taus.sum(), (taus**2).sum(), taus.size), TAU_MEAN, 1e-6)
    assert not r.passed and r.statistic > 5 and r.variance_source == "sample"
    assert not (r.low <= TAU_MEAN <= r.high)
    ok = mean_within_ci(taus, float((np.arange(5) * shifted).sum()), 1e-6)
    assert ok.passed and ok.low <= ok.mean <= ok.high


def test_mean_tests_reject_bad_input():
    with pytest.raises(ValueError, match="confidence"):
        mean_ci([1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="n >= 2"):
        mean_ci([1.0])
    with pytest.raises(ValueError, match="tuple"):
        mean_ci((1.0, 2.0))
    with pytest.raises(ValueError, match="alpha"):
        mean_within_ci([1.0, 2.0], 1.5, 0.0)
    with pytest.raises(ValueError, match="exact_variance"):
        mean_within_ci([1.0, 2.0], 1.5, 0.05, exact_variance=-1.0)
    # Zero standard error: equal means pass, different means fail outright.
    assert mean_within_ci([2.0, 2.0, 2.0], 2.0, 0.05).statistic == 0.0
    assert mean_within_ci([2.0, 2.0, 2.0], 1.0, 0.05).pvalue == 0.0


# ----------------------------------------------------------------------------- paired means


def test_paired_mean_test_exact_numbers():
    # Σ(x − μ) = 0.5 − 0.5 + 1 = 1 and Σσ² = 0.25 + 0.25 + 0.5 = 1: z = 1, p = 2Φ(−1);
    # detectable shift (z_{0.975} + z_{0.99}) · 1 / 3.
    r = paired_mean_test([1, 0, 2], [0.5, 0.5, 1.0], [0.25, 0.25, 0.5], 0.05)
    assert (r.statistic, r.n, r.mean, r.variance, r.alpha, r.passed) == (1.0, 3, 1.0, 1.0, 0.05, True)
    assert r.exact_mean == 2.0 / 3.0
    assert r.pvalue == pytest.approx(0.31731050786291415, rel=1e-13)
    assert r.detectable_shift == pytest.approx((1.959963984540054 + 2.3263478740408408) / 3, rel=1e-13)
    assert r.detectable_shift == pytest.approx(1.428770619526965, rel=1e-13)
    # four Bernoulli(1/2) observations, all 1: Σ(x − μ) = 2, Σσ² = 1, z = 2, p = 2Φ(−2)
    r = paired_mean_test([1, 1, 1, 1], [0.5] * 4, [0.25] * 4, 0.05)
    assert (r.statistic, r.mean, r.exact_mean, r.variance) == (2.0, 1.0, 0.5, 1.0)
    assert r.pvalue == pytest.approx(0.04550026389635839, rel=1e-13)
    assert not r.passed and paired_mean_test([1, 1, 1, 1], [0.5] * 4, [0.25] * 4, 0.01).passed
    assert r.detectable_shift == pytest.approx(1.0715779646452237, rel=1e-13)


def test_paired_mean_test_with_certain_observations():
    # every σ² = 0: agreeing sums pass with p = 1, any deviation fails outright
    r = paired_mean_test([1, 2], [1.0, 2.0], [0.0, 0.0], 0.05)
    assert (r.statistic, r.pvalue, r.passed, r.detectable_shift) == (0.0, 1.0, True, 0.0)
    r = paired_mean_test([1, 3], [1.0, 2.0], [0.0, 0.0], 0.05)
    assert (r.statistic, r.pvalue, r.passed) == (math.inf, 0.0, False)
    assert paired_mean_test([1, 1], [1.0, 2.0], [0.0, 0.0], 0.05).statistic == -math.inf


def test_paired_mean_test_with_one_law_is_the_exact_variance_mean_test():
    # identical laws: Σ(x − μ)/√(nσ²) = (x̄ − μ)/√(σ²/n), mean_within_ci's z with the exact variance
    taus = np.random.default_rng(3).choice(5, size=500, p=TAU_LAW).astype(np.float64)
    r = paired_mean_test(taus, [TAU_MEAN] * taus.size, [TAU_VAR] * taus.size, 1e-3)
    m = mean_within_ci(taus, TAU_MEAN, 1e-3, exact_variance=TAU_VAR)
    assert r.statistic == pytest.approx(m.statistic, rel=1e-12)
    assert r.pvalue == pytest.approx(m.pvalue, rel=1e-10) and r.passed == m.passed


def test_paired_mean_test_rejects_bad_input():
    with pytest.raises(ValueError, match="one length"):
        paired_mean_test([1, 2], [1.0], [1.0, 1.0], 0.05)
    with pytest.raises(ValueError, match="one length"):
        paired_mean_test([], [], [], 0.05)
    with pytest.raises(ValueError, match="exact_variances"):
        paired_mean_test([1], [1.0], [-1.0], 0.05)
    with pytest.raises(ValueError, match="finite"):
        paired_mean_test([math.nan], [1.0], [1.0], 0.05)
    with pytest.raises(ValueError, match="alpha"):
        paired_mean_test([1], [1.0], [1.0], 1.0)
