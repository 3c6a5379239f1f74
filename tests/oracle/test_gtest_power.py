"""Tests of oracle.gtest_power: the stated power of the G-test, checked at the least favourable
deviation and in random directions, and the power formulae.

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

from helpers.stat_checks import LAW12, binom_bounds, scaled_tv
from spectr_gbv.oracle.gtest import gtest
from spectr_gbv.oracle.gtest_power import detectable_tv, gtest_power, least_favourable_kappa, sample_size_for_tv

# Six cells that split into two halves of mass exactly 1/2 ({4, 5} vs the rest), so the
# law-free bound Σ(p'−p)²/p ≥ 4·TV² is attained: the least favourable case for power.
LAW6 = np.array([0.05, 0.1, 0.15, 0.2, 0.25, 0.25])
HALF6 = np.array([False, False, False, False, True, True])


def least_favourable(p: np.ndarray, half: np.ndarray, delta: float) -> np.ndarray:
    """p scaled by (1 − 2δ) on ``half`` (mass 1/2) and (1 + 2δ) elsewhere: TV = δ."""
    return np.where(half, p * (1 - 2 * delta), p * (1 + 2 * delta))


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
