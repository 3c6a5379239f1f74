"""Tests of oracle.conditional_gtest (and oracle.gtest.law_of): a swap that leaves the marginals
unchanged, the family's false-alarm rate, zero cells and eligibility.

Every randomised check uses fixed seeds and states the binomial bound it asserts; the bounds
are chosen so that a correct implementation fails them with probability ≤ 1e-6 per check
(under the approximation being tested), while a miscalibrated test (too many false alarms,
or power below the stated 0.99) fails them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.stat_checks import binom_bounds
from spectr_gbv.oracle.conditional_gtest import conditional_gtests
from spectr_gbv.oracle.gtest import counts_from_samples, gtest, law_of

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
