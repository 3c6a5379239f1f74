"""Tests of oracle.mean_tests: intervals, the mean test's calibration and power, paired means.

Every randomised check uses fixed seeds and states the binomial bound it asserts; the bounds
are chosen so that a correct implementation fails them with probability ≤ 1e-6 per check
(under the approximation being tested), while a miscalibrated test (too many false alarms,
or power below the stated 0.99) fails them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from helpers.stat_checks import binom_bounds
from spectr_gbv.oracle.mean_tests import MeanStats, mean_ci, mean_within_ci, paired_mean_test

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
