"""The coarsened test in a certification case (oracle/certify.py): a case whose exact law has
more than 64 outcomes runs six tests at α/6, the fifth the coarsened G-test of oracle/coarsen.py,
the sixth the identity test of oracle/identity.py; ``case_power`` states before sampling the δ's
that ``certify_case`` then reports."""

from __future__ import annotations

import math

import pytest

from spectr_gbv.oracle.certify import case_power, certify_case, exact_verdict_law, family_size
from spectr_gbv.oracle.certify_cases import case_family
from spectr_gbv.oracle.coarsen import COARSE_BINS
from spectr_gbv.reference.rules import RULES, get_rule

N = 20_000
ALPHA = 1e-6


def test_large_case_runs_the_coarsened_test_and_case_power_predicts_its_deltas():
    case = case_family("large", "sd", 1, 2)
    law = exact_verdict_law(get_rule("sd"), case.draft_tokens, case.draft_probs, case.target_probs)
    assert len(law) > COARSE_BINS and family_size(law) == 6
    r = certify_case(RULES, case, N, ALPHA)
    assert r.passed and r.n_tests == 6 and 2 <= r.coarse_bins <= COARSE_BINS
    assert 0.0 < r.pvalue_coarse <= 1.0 and ALPHA / 6 <= r.pvalue_identity <= 1.0
    planned = case_power(case, N, ALPHA)
    assert planned.n_tests == 6 and planned.alpha_per_test == ALPHA / 6
    # the same pooling and bins: the stated δ's agree (gtest's δ uses the samples outside the
    # rare cells, none here)
    assert planned.joint.merged_mass == r.pooled_mass
    assert planned.detectable_tv == pytest.approx(r.detectable_tv, rel=1e-12)
    assert planned.coarse.detectable_tv_law == pytest.approx(r.detectable_tv_coarse, rel=1e-12)
    assert r.detectable_tv_coarse < 0.05 < r.detectable_tv  # the coarsened law is resolved far finer
    # the identity test states δ on the whole law, as case_power predicts, below the joint test's
    assert planned.identity.detectable_tv == pytest.approx(r.detectable_tv_identity, rel=1e-12)
    assert planned.identity.tail_mass == r.identity_tail_mass
    assert r.detectable_tv_identity < r.detectable_tv
    assert r.resolved["identity (whole law)"] == (r.detectable_tv_identity, "whole law")
    assert r.resolved["joint outcome"] == (r.detectable_tv, "whole law")
    assert set(r.resolved) == {"joint outcome", "coarsened law", "identity (whole law)"}
    assert len(r.pvalues) == 6 and r.pvalues[-1] == r.pvalue_identity


def test_toy_case_keeps_four_tests():
    case = case_family("toy", "sd", 1, 3)
    r = certify_case(RULES, case, N, ALPHA)
    assert r.passed and r.n_tests == 4 and r.coarse_bins == 0
    assert math.isnan(r.pvalue_coarse) and math.isnan(r.detectable_tv_coarse)
    assert math.isnan(r.pvalue_identity) and math.isnan(r.detectable_tv_identity)
    assert set(r.resolved) == {"joint outcome"}
    planned = case_power(case, N, ALPHA)
    assert planned.n_tests == 4 and planned.coarse is None and planned.identity is None
    assert planned.detectable_tv == pytest.approx(r.detectable_tv, rel=1e-12)


def test_case_power_needs_a_fixed_case():
    from spectr_gbv.oracle.certify_cases import lossless_against_target

    with pytest.raises(TypeError, match="FixedCase"):
        case_power(lossless_against_target("sd", 1, 2), N)
