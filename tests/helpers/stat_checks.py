"""Shared numbers of the statistical tests' own tests (tests/oracle/test_gtest*.py,
test_conditional_gtest.py, test_mean_tests.py): the binomial bound every randomised check asserts,
the δ of the calibrated G-test, and a law whose small cells are pooled."""

from __future__ import annotations

import numpy as np
from scipy import stats

from spectr_gbv.oracle.gtest_power import detectable_tv

# Per-check probability that a correct implementation is outside the stated binomial bound.
RISK = 1e-6


def scaled_tv(n, alpha, n_cells, scale):
    """The δ gtest states when it compares G/scale with χ²: the plain G-test's at the level
    χ².sf(scale·χ².isf(alpha))."""
    dof = n_cells - 1
    return detectable_tv(n, stats.chi2.sf(scale * stats.chi2.isf(alpha, dof), dof), n_cells=n_cells)


def binom_bounds(trials: int, rate: float, risk: float = RISK) -> tuple[int, int]:
    """[lo, hi] holding Binomial(trials, rate) with probability ≥ 1 − risk (two tails)."""
    lo = int(stats.binom.ppf(risk / 2, trials, rate))
    hi = int(stats.binom.isf(risk / 2, trials, rate))
    return lo, hi


# A 12-cell law whose two smallest cells are pooled at n = 1000 (expected 1 + 4 = 5).
LAW12 = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.03, 0.015, 0.01, 0.004, 0.001])
