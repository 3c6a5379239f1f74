"""The coarsened G-test (oracle/coarsen.py), the power the G-test states before sampling
(oracle.gtest_power.gtest_power), and what a case of V = 151,936 rows resolves, against planted
defects of known TV.

At V = 151,936 and N = 2·10^5 (α = 10^-6 over five tests, 2·10^-7 each) the joint G-test's δ
on the whole law is 0.24 for one Zipf(1.1) row and 0.64 for five Dirichlet(0.05) branches: it
promises nothing below.  The coarsened test (64 bins of nearly equal exact mass) states
δ = 0.012-0.013 on the coarsened law, and catches at that power every planted defect whose
coarsened TV reaches it; mass moved inside a bin (TV up to 0.29 here) it does not see.  The
counts are multinomial over the V (or 5V) outcomes: the law of counting N i.i.d. samples.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
import pytest

from spectr_gbv.oracle.coarsen import (COARSE_BINS, QWEN_V, branch_law, coarse_gtest, coarse_power,
                                       detection_rate, equal_mass_bins, llm_row, move_mass, move_within_bins,
                                       vocabulary_resolution)
from spectr_gbv.oracle.gtest import gtest
from spectr_gbv.oracle.gtest_power import detectable_tv, gtest_power

N = 200_000
ALPHA = 1e-6 / 5  # one of the five tests of a large case at α = 1e-6


def tv(a, b) -> float:
    return 0.5 * float(np.abs(np.asarray(a) - np.asarray(b)).sum())


# -- gtest_power: what gtest states, before sampling -----------------------------------------------

@pytest.mark.parametrize("n", [50, 400, 5000])
def test_gtest_power_states_what_gtest_states(n):
    rng = np.random.default_rng(n)
    law = rng.dirichlet(np.full(300, 0.2))
    counts = rng.multinomial(n, law)
    r = gtest(counts, law, 1e-3)
    p = gtest_power(law, n, 1e-3)
    assert (p.n_cells, p.merged_mass) == (r.n_cells_after_merge, r.merged_mass)
    assert p.support == int((law > 0).sum()) and p.n_large == int((n * law >= 5).sum())
    if r.rare_observed == 0:  # otherwise gtest's δ uses the n − rare_observed samples left
        assert p.detectable_tv == r.detectable_tv and p.detectable_tv_law == r.detectable_tv_law
    # the mapping form gives the same
    q = gtest_power(dict(enumerate(law)), n, 1e-3)
    assert (q.n_cells, q.merged_mass, q.detectable_tv) == (p.n_cells, p.merged_mass, p.detectable_tv)


def test_gtest_power_errors():
    with pytest.raises(ValueError, match="sum to 1"):
        gtest_power([0.5, 0.4], 100, 0.01)
    with pytest.raises(ValueError, match="n must"):
        gtest_power([0.5, 0.5], 0, 0.01)
    with pytest.raises(ValueError, match="alpha"):
        gtest_power([0.5, 0.5], 10, 1.0)


# -- bins -----------------------------------------------------------------------------------------

def test_equal_mass_bins_follow_group_then_probability():
    law = {("b", i): 0.5 / 40 for i in range(40)}
    law.update({("a", i): 0.5 * w for i, w in enumerate(np.arange(1, 41) / np.arange(1, 41).sum())})
    law[("a", 99)] = 0.0
    bins = equal_mass_bins(law, 8, group=lambda o: o[0])
    idx = dict(zip(bins.outcomes, bins.bin_index))
    assert idx[("a", 99)] == -1  # probability 0: in no bin
    a_bins = [idx[("a", i)] for i in range(40)]
    # group "a" first, its outcomes by decreasing probability, so bins are non-increasing in i
    assert a_bins == sorted(a_bins, reverse=True) and max(a_bins) < min(idx[("b", i)] for i in range(40))
    assert bins.n_bins == 8 and math.fsum(bins.masses) == pytest.approx(1.0, abs=1e-15)
    assert np.all(np.abs(bins.masses - 1 / 8) <= 0.5 * 40 / 820 + 1e-12)  # within the largest cell


def test_heavy_outcomes_fill_a_bin_alone_and_bins_depend_on_the_law_only():
    law = llm_row(QWEN_V)  # Zipf(1.1): the top token has 13 % of the mass
    bins = equal_mass_bins(law)
    assert bins.n_bins < COARSE_BINS and bins.masses[0] == law[0]
    sizes = np.bincount(bins.bin_index)
    assert sizes[0] == 1 and sizes.max() > 40_000  # a tail bin holds tens of thousands of tokens
    again = equal_mass_bins(law.copy())
    assert np.array_equal(again.bin_index, bins.bin_index)


def test_equal_mass_bins_errors():
    with pytest.raises(ValueError, match="m must"):
        equal_mass_bins([0.5, 0.5], 1)
    with pytest.raises(ValueError, match="group"):
        equal_mass_bins([0.5, 0.5], 2, group=np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="sum to 1"):
        equal_mass_bins([0.5, 0.6], 2)


# -- the coarsened test -----------------------------------------------------------------------------

def test_coarse_gtest_states_delta_on_the_bins_and_agrees_across_input_forms():
    rng = np.random.default_rng(3)
    law = rng.dirichlet(np.ones(2000))  # no outcome above 1/64: all 64 bins are used
    counts = rng.multinomial(20_000, law)
    r = coarse_gtest(counts, law, 1e-3)
    assert r.passed and r.bins.n_bins == COARSE_BINS
    # gtest's δ: the plain G-test's at the level its calibration scale s implies (oracle.gtest_power.pooled_detectable_tv)
    s = r.test.null_mean_scale
    assert 1.0 < s < 1.002  # 64 bins of expected count ~312: a small correction
    level = stats.chi2.sf(s * stats.chi2.isf(1e-3, COARSE_BINS - 1), COARSE_BINS - 1)
    assert r.detectable_tv == pytest.approx(detectable_tv(20_000, level, n_cells=COARSE_BINS), rel=1e-12)
    assert r.detectable_tv == coarse_power(law, 20_000, 1e-3).detectable_tv_law
    m = coarse_gtest({i: int(c) for i, c in enumerate(counts) if c}, dict(enumerate(law)), 1e-3)
    assert (m.pvalue, m.test.statistic) == (r.pvalue, r.test.statistic)
    assert "coarsened G-test PASS" in r.summary()


def test_coarse_gtest_fails_on_zero_probability_outcomes():
    law = {"a": 0.5, "b": 0.5, "z": 0.0}
    r = coarse_gtest({"a": 50, "b": 49, "z": 1}, law, 1e-3, m=2)
    assert not r.passed and r.pvalue == 0.0 and r.zero_cell_violations == ("z",)
    r = coarse_gtest({"a": 50, "b": 49, "new": 1}, law, 1e-3, m=2)
    assert not r.passed and r.zero_cell_violations == ("new",)
    arr = coarse_gtest(np.array([50, 49, 1]), np.array([0.5, 0.5, 0.0]), 1e-3, m=2)
    assert not arr.passed and arr.zero_cell_violations == (2,)


# -- V = 151,936 --------------------------------------------------------------------------------------

def test_vocabulary_resolution_at_qwen_v():
    """The numbers README and docs/guarantees.md quote."""
    zipf = vocabulary_resolution(QWEN_V, N, 1e-6, "zipf")
    assert zipf.alpha_per_test == ALPHA and zipf.joint.support == QWEN_V
    assert zipf.joint.n_large == 2429 and zipf.joint.n_cells == 9810
    assert zipf.joint.merged_mass == pytest.approx(0.206, abs=5e-4)
    # 0.243 before gtest's calibration scale (oracle.gtest_cells.gtest_null_mean_scale: s = 1.072 here)
    assert zipf.joint.detectable_tv_law == pytest.approx(0.254, abs=5e-4)
    assert zipf.bins == 51 and zipf.coarse.detectable_tv_law == pytest.approx(0.0122, abs=5e-5)
    dirichlet = vocabulary_resolution(QWEN_V, N, 1e-6, "dirichlet", branches=5)
    assert dirichlet.joint.merged_mass == pytest.approx(0.593, abs=5e-4)
    assert dirichlet.joint.detectable_tv_law > 0.5
    assert dirichlet.coarse.detectable_tv_law == pytest.approx(0.0127, abs=5e-5)
    assert "pooled mass 0.206" in zipf.summary()


def _defects(law, bins, delta_c):
    order = np.argsort(-law, kind="stable")
    top = order[: int(np.searchsorted(np.cumsum(law[order]), 0.1)) + 1]  # ≥ 10 % of the mass
    tail = order[order.size // 2:]  # the less probable half of the outcomes
    first = np.flatnonzero(bins.bin_index < bins.n_bins // 2)
    second = np.flatnonzero(bins.bin_index >= bins.n_bins // 2)
    swap = law.copy()
    g1, g2 = order[50:100], order[5000:5050]
    swap[g1], swap[g2] = law[g2], law[g1]
    return {
        # the least favourable deviation of the coarsened law at its stated δ
        "half of the bins to the other half, TV = δ": move_mass(law, first, second, delta_c),
        "top tokens to the tail, TV 0.02": move_mass(law, top, tail, 0.02),
        "top tokens to the tail, TV 0.05": move_mass(law, top, tail, 0.05),
        "ranks 50-99 swapped with ranks 5000-5049": swap,
    }


def test_planted_defects_at_qwen_v_zipf_row():
    """One Zipf(1.1) row of V = 151,936, N = 2·10^5: the joint test states δ = 0.24, the
    coarsened test 0.0122; each planted defect whose coarsened TV ≥ 0.0122 is caught at ≥ the
    stated power 0.99, a correct sampler passes, and mass moved inside bins is not seen."""
    law, group = branch_law(llm_row(QWEN_V, "zipf"))
    bins = equal_mass_bins(law, group=group)
    joint = gtest_power(law, N, ALPHA)
    delta_c = coarse_power(law, N, ALPHA, bins=bins).detectable_tv_law
    assert joint.detectable_tv_law > 0.2 and delta_c < 0.0125
    assert detection_rate(law, law, N, ALPHA, 200, seed=1, bins=bins) == 0.0  # no false alarm
    for name, planted in _defects(law, bins, delta_c).items():
        coarse_tv = tv(np.bincount(bins.bin_index, weights=planted), bins.masses)
        assert coarse_tv >= delta_c * (1 - 1e-9), name  # the deviation the bound covers
        assert tv(planted, law) < joint.detectable_tv_law  # the joint test promises nothing here
        reps = 300 if "TV = δ" in name else 50
        rate = detection_rate(planted, law, N, ALPHA, reps, seed=2, bins=bins)
        assert rate >= (0.97 if reps == 300 else 1.0), (name, rate)
    blind = move_within_bins(law, bins)
    assert tv(blind, law) > 0.15  # TV 0.16 on the whole law ...
    assert tv(np.bincount(bins.bin_index, weights=blind), bins.masses) < 1e-12  # ... none on the bins
    assert detection_rate(blind, law, N, ALPHA, 50, seed=3, bins=bins) == 0.0


def test_planted_defects_at_qwen_v_five_dirichlet_branches():
    """Five branches of a Dirichlet(0.05) row (large_models' target at V = 151,936), the
    coarsening grouped by branch (as certification groups by τ): the joint test states δ = 0.64
    (> 0.5), the coarsened test 0.0127, which catches the planted defects above it."""
    law, group = branch_law(llm_row(QWEN_V, "dirichlet"), 5)
    bins = equal_mass_bins(law, group=group)
    assert gtest_power(law, N, ALPHA).detectable_tv_law > 0.5
    delta_c = coarse_power(law, N, ALPHA, bins=bins).detectable_tv_law
    assert delta_c < 0.013
    defects = _defects(law, bins, delta_c)
    for name in ("half of the bins to the other half, TV = δ", "top tokens to the tail, TV 0.02"):
        planted = defects[name]
        assert tv(np.bincount(bins.bin_index, weights=planted), bins.masses) >= delta_c * (1 - 1e-9)
        assert detection_rate(planted, law, N, ALPHA, 40, seed=4, bins=bins) == 1.0, name
    blind = move_within_bins(law, bins)
    assert tv(blind, law) > 0.25
    assert detection_rate(blind, law, N, ALPHA, 10, seed=5, bins=bins) == 0.0


def test_move_mass_has_the_stated_tv_and_checks_its_arguments():
    law = np.array([0.4, 0.3, 0.2, 0.1])
    assert tv(move_mass(law, [0, 1], [3], 0.05), law) == pytest.approx(0.05, abs=1e-15)
    with pytest.raises(ValueError, match="disjoint"):
        move_mass(law, [0, 1], [1], 0.05)
    with pytest.raises(ValueError, match="eps"):
        move_mass(law, [3], [0], 0.2)
