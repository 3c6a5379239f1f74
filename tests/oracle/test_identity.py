"""The identity test of oracle/identity.py: its exact null moments, its measured false-alarm rate,
its stated δ checked at the least favourable deviation, and planted defects at V = 151,936 that
the coarsened test (oracle/coarsen.py) cannot see.

Counts are multinomial over the V outcomes (the law of counting N i.i.d. samples).  α below is
one of the six tests of a large certification case at α = 10^-6 (1.67·10^-7).  Detection rates
over R replicates: "R / R caught" rules out a detection probability below 0.9 with probability
≥ 1 − 0.9^R (R = 50: 0.995).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from spectr_gbv.oracle.coarsen import (QWEN_V, branch_law, coarse_gtest, equal_mass_bins, llm_row,
                                       move_within_bins)
from spectr_gbv.oracle.identity import (_null_moments, detection_rate, false_alarm_rate, identity_power,
                                        identity_test, instance_optimal_samples, least_favourable)

ALPHA = 1e-6 / 6


def tv(a, b) -> float:
    return 0.5 * float(np.abs(np.asarray(a) - np.asarray(b)).sum())


@pytest.fixture(scope="module")
def zipf():
    return llm_row(QWEN_V, "zipf")


# -- the null: exact moments, measured false-alarm rate ------------------------------------------

def test_null_moments_are_the_multinomial_ones():
    """Mean −nΣp^{4/3} and the variance with the multinomial covariance (2n² − 6n)p_i²p_j²,
    against 40,000 simulated samples (n = 30 over 12 cells): within 4 standard errors."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(12))
    n, reps = 30, 40_000
    x = rng.multinomial(n, p, size=reps).astype(float)
    T = (((x - n * p) ** 2 - x) * p ** (-2 / 3)).sum(axis=1)
    mean, var, _ = _null_moments(p, n)
    assert abs(T.mean() - mean) < 4 * math.sqrt(var / reps)
    # the sample variance's standard error from the fourth moment
    se_var = math.sqrt((((T - T.mean()) ** 4).mean() - T.var() ** 2) / reps)
    assert abs(T.var() - var) < 4 * se_var
    # without the covariance term the variance is off by far more than that here
    cells_only = var - (2 * n * n - 6 * n) * ((p ** (4 / 3)).sum() ** 2 - (p ** (8 / 3)).sum())
    assert abs(T.var() - cells_only) > 8 * se_var


def peaked_row(V: int = QWEN_V) -> np.ndarray:
    """A real model's kind of row, shaped like the Qwen2.5-Coder target's bonus row on a HumanEval
    prompt (top token 0.99676, the next 0.00317, then a cliff to 10^-5): two tokens, then the
    other V − 2 a Zipf(1.1) tail of mass 7·10^-5."""
    tail = np.arange(1, V - 1, dtype=np.float64) ** -1.1
    return np.concatenate([[0.99676, 0.00317], 7e-5 * tail / tail.sum()])


def test_null_skewness_is_the_binomial_one_on_a_peaked_row():
    """The skewness of T on the head: the cells' binomial third moments, not the Poisson's (which
    put 8λ³ on a cell of p ≈ 1 and stated 645 where 3.5 is simulated).  A peaked row's top 45
    cells at n = 8,192: within 35 % of 20,000 simulated replicates (4.1 against 3.1 here; the
    simulated skewness of so heavy a tail converges slowly, and cross-cell third cumulants are left
    out) where the Poisson's is 100× off."""
    p = np.sort(peaked_row())[::-1][:45]
    n, reps = 8192, 20_000
    x = np.random.default_rng(0).multinomial(n, np.append(p, 1.0 - p.sum()), size=reps)[:, :-1].astype(float)
    T = (((x - n * p) ** 2 - x) * p ** (-2 / 3)).sum(axis=1)
    simulated = float(((T - T.mean()) ** 3).mean() / T.std() ** 3)
    _, _, skew = _null_moments(p, n)
    assert simulated > 1.0
    assert abs(skew - simulated) < 0.35 * simulated


@pytest.mark.parametrize("n", [8192, 10**6])
def test_a_peaked_row_leaves_the_head_untested_and_correct_samples_pass(n):
    """On a peaked row no head is both low-skew (≤ HEAD_MAX_SKEW) and free of cells whose double
    hit moves T by more than HEAD_MAX_JUMP sd: the head is the top cell, untested, the stated δ 1,
    and the tail's exact binomial test alone decides.  20 correct samples pass (before, the
    Poisson skewness made the Edgeworth tail negative and every correct sample failed, p = 0)."""
    law = peaked_row()
    pw = identity_power(law, n, ALPHA)
    assert pw.head_cells == 1 and pw.detectable_tv == 1.0
    for counts in np.random.default_rng(n).multinomial(n, law, size=20):
        r = identity_test(counts, law, ALPHA)
        assert r.passed and r.pvalue_head == 1.0 and r.pvalue > 1e-3


def test_false_alarm_rate_measured_on_a_small_law():
    """V = 2,000 Dirichlet(0.3) law, n = 10^4 (most cells expect < 5): 4,000 correct samples,
    rejections at α = 10^-2 and 10^-3 within the binomial 99.9 % upper bound of the nominal rate,
    and the head test's rate at 0.05 within [0.035, 0.065] (the band holds a correct test with
    probability > 0.999)."""
    rng = np.random.default_rng(1)
    law = rng.dirichlet(np.full(2000, 0.3))
    reps = 4000
    x = np.random.default_rng(2).multinomial(10_000, law, size=reps)
    results = [identity_test(c, law, 0.5) for c in x]
    p = np.array([r.pvalue for r in results])
    for a in (1e-2, 1e-3):
        assert (p < a).sum() <= stats.binom.isf(1e-3, reps, a), a
    # and the head's Edgeworth p-value (the approximate part; the tail's binomial test is exact
    # and, with an expected count ≈ 0.1, discrete and conservative) not grossly conservative
    # either: about the nominal rate at 0.05 (211 / 4,000 measured)
    head = np.array([r.pvalue_head for r in results])
    assert 0.035 * reps <= (head < 0.05).sum() <= 0.065 * reps


@pytest.mark.slow
def test_false_alarm_rate_measured_at_qwen_v(zipf):
    """One Zipf(1.1) row of V = 151,936 at N = 10^6: 300 correct samples, rejections at
    α = 10^-2 within the binomial 99.9 % bound (measured 2 / 300), none at the certification's α."""
    reps = 300
    rate = false_alarm_rate(zipf, 10**6, 1e-2, reps, seed=3)
    assert rate * reps <= stats.binom.isf(1e-3, reps, 1e-2)
    assert false_alarm_rate(zipf, 10**6, ALPHA, 50, seed=4) == 0.0


# -- power: the stated δ -------------------------------------------------------------------------

def test_zipf_row_resolves_the_whole_law_to_0_02_at_one_million(zipf):
    """δ on the whole, un-pooled law at N = 10^6 (the joint G-test needs 1.4·10^7 for 0.02),
    within 10× of Valiant–Valiant's instance-optimal sample count."""
    pw = identity_power(zipf, 10**6, ALPHA)
    assert pw.detectable_tv <= 0.02 and pw.detectable_tv < pw.detectable_tv_worst_case < 0.03
    # every token expects ≥ 0.26 samples: all in the head, no tail chosen
    assert pw.head_cells == QWEN_V and pw.tail_mass == 0.0
    assert 10**6 / instance_optimal_samples(zipf, pw.detectable_tv) < 10


def test_stated_delta_holds_at_the_least_favourable_deviation(zipf):
    """At TV = δ in the least favourable direction the detection rate is the stated 0.99
    (≥ 95 / 100 measured: P(≤ 94 | 0.99) = 5·10^-4); at TV = δ/2 it is far lower, so δ is not
    loose there."""
    n = 10**6
    pw = identity_power(zipf, n, ALPHA)
    at = least_favourable(zipf, pw.detectable_tv, n, ALPHA, seed=1)
    assert tv(at, zipf) == pytest.approx(pw.detectable_tv, rel=1e-9)
    assert detection_rate(at, zipf, n, ALPHA, 100, seed=5) >= 0.95
    half = least_favourable(zipf, pw.detectable_tv / 2, n, ALPHA, seed=1)
    assert detection_rate(half, zipf, n, ALPHA, 40, seed=6) < 0.5


# -- planted defects at V = 151,936 that the coarsened test does not see ------------------------

def _tail_permutation(law, bins, first_rank=1000, seed=0):
    """Token ids permuted at random inside each bin of ``bins`` (equal-mass groups of adjacent
    rank), for the tokens of rank ≥ first_rank: tail tokens of similar probability exchange their
    probabilities (the groups' masses unchanged)."""
    out = law.copy()
    rank = np.empty(law.size, dtype=np.int64)
    rank[np.argsort(-law, kind="stable")] = np.arange(law.size)
    rng = np.random.default_rng(seed)
    for b in range(bins.n_bins):
        idx = np.flatnonzero((bins.bin_index == b) & (rank >= first_rank))
        out[idx] = law[rng.permutation(idx)]
    return out


def _coarse_catches(planted, law, bins, n, reps, seed):
    rng = np.random.default_rng(seed)
    return sum(not coarse_gtest(rng.multinomial(n, planted), law, ALPHA, bins=bins).passed
               for _ in range(reps)) / reps


@pytest.mark.slow
def test_planted_defects_at_qwen_v(zipf):
    """N = 10^6, 50 samples from each defective law, all caught (detection ≥ 0.9 with
    probability ≥ 0.995); the first two pass the coarsened test (its blind spot)."""
    n, reps = 10**6, 50
    bins = equal_mass_bins(zipf)
    flat = llm_row(QWEN_V, "dirichlet")
    within = move_within_bins(zipf, bins)
    # ranks ≥ 1,000 permuted inside 16 equal-mass groups (probabilities within a factor 4.9 in
    # a group): TV 0.055; inside the coarsened test's own 64 bins (a factor 1.5): TV 0.014
    groups16 = equal_mass_bins(zipf, 16)
    perm = _tail_permutation(zipf, groups16)
    perm64 = _tail_permutation(zipf, bins)
    order = np.argsort(-flat, kind="stable")
    top40 = np.zeros(QWEN_V)
    top40[order[:40]] = flat[order[:40]] / flat[order[:40]].sum()
    hot = zipf ** (1 / 1.1) / (zipf ** (1 / 1.1)).sum()  # temperature 1.1 instead of 1
    assert tv(within, zipf) == pytest.approx(0.164, abs=5e-4)
    assert tv(perm, zipf) >= 0.05 and 0.01 < tv(perm64, zipf) < 0.02
    assert tv(np.bincount(bins.bin_index, weights=perm64), bins.masses) < 1e-12
    assert tv(np.bincount(groups16.bin_index, weights=perm), groups16.masses) < 1e-12
    # the coarsened test does not see the within-bin move and the within-bin permutation
    assert _coarse_catches(within, zipf, bins, n, 10, seed=7) == 0.0
    assert _coarse_catches(perm64, zipf, bins, n, 10, seed=8) == 0.0
    for name, planted, law in (("within bins", within, zipf), ("tail permutation", perm, zipf),
                               ("tail permutation inside the 64 bins", perm64, zipf),
                               ("top-40 of a flat row", top40, flat), ("temperature 1.1", hot, zipf)):
        assert detection_rate(planted, law, n, ALPHA, reps, seed=9) == 1.0, name


def test_within_bin_defect_at_two_hundred_thousand(zipf):
    """The coarsened test's 0 / 50 case of docs/guarantees.md (N = 2·10^5, TV 0.164): caught in
    20 / 20 by the identity test at the same N."""
    bins = equal_mass_bins(zipf)
    within = move_within_bins(zipf, bins)
    assert detection_rate(within, zipf, 200_000, ALPHA, 20, seed=10) == 1.0


# -- the test's contract --------------------------------------------------------------------------

def test_mapping_and_array_forms_agree_and_zero_cells_fail():
    rng = np.random.default_rng(11)
    law = rng.dirichlet(np.full(500, 0.5))
    counts = rng.multinomial(5000, law)
    a = identity_test(counts, law, 1e-3)
    m = identity_test({("o", i): int(c) for i, c in enumerate(counts) if c},
                      {("o", i): float(p) for i, p in enumerate(law)}, 1e-3)
    assert (a.statistic, a.pvalue, a.detectable_tv, a.n) == pytest.approx(
        (m.statistic, m.pvalue, m.detectable_tv, m.n), rel=1e-9)
    assert a.passed and "identity test PASS" in a.summary()
    law0 = law.copy()
    law0[0] += law0[1]
    law0[1] = 0.0
    counts[1] = max(counts[1], 1)
    r = identity_test(counts, law0, 1e-3)
    assert not r.passed and r.pvalue == 0.0 and r.zero_cell_violations == (1,)
    r = identity_test({"x": 3, "y": 1}, {"x": 1.0}, 1e-3)
    assert not r.passed and r.zero_cell_violations == ("y",)


def test_identity_power_matches_the_test_and_point_masses_are_uninformative():
    rng = np.random.default_rng(12)
    law = rng.dirichlet(np.full(3000, 0.1))
    r = identity_test(rng.multinomial(20_000, law), law, 1e-4)
    pw = identity_power(law, 20_000, 1e-4)
    assert (r.detectable_tv, r.tail_mass, r.head_cells) == (pw.detectable_tv, pw.tail_mass, pw.head_cells)
    assert r.tail_expected == pytest.approx(20_000 * pw.tail_mass)
    one = identity_test([7, 0], [1.0, 0.0], 1e-3)
    assert one.passed and one.detectable_tv == 1.0 and "no information" in one.reason


def test_instance_optimal_samples_of_a_uniform_law():
    """Uniform over 1,000: the max and the 100 smallest cells (mass 0.1 ≤ ε) removed, 899 left:
    ‖·‖_{2/3} = (899 · 10^-2)^{3/2}."""
    law = np.full(1000, 1e-3)
    eps = 0.1005
    assert instance_optimal_samples(law, eps) == pytest.approx((899 * 1e-2) ** 1.5 / eps ** 2, rel=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="alpha"):
        identity_test([1, 2], [0.5, 0.5], 0.0)
    with pytest.raises(ValueError, match="sum to 1"):
        identity_test([1, 2], [0.5, 0.4], 0.01)
    with pytest.raises(ValueError, match="non-negative integers"):
        identity_test([1.5, 2], [0.5, 0.5], 0.01)
    with pytest.raises(ValueError, match="n >= 1"):
        identity_test([0, 0], [0.5, 0.5], 0.01)
    with pytest.raises(ValueError, match="tail_mass"):
        identity_test([1, 2], [0.5, 0.5], 0.01, tail_mass=1.0)
    with pytest.raises(ValueError, match="n must"):
        identity_power([0.5, 0.5], 0, 0.01)
    with pytest.raises(ValueError, match="power"):
        identity_power([0.5, 0.5], 10, 0.01, power=0.001)
    with pytest.raises(ValueError, match="eps"):
        instance_optimal_samples([0.5, 0.5], 0.0)
    with pytest.raises(ValueError, match="tv"):
        least_favourable(np.array([0.5, 0.5]), 1.5, 10, 0.01)
    with pytest.raises(ValueError, match="same shape|one shape"):
        detection_rate(np.ones(3) / 3, np.ones(2) / 2, 10, 0.01, 1)
