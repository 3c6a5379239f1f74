"""The certification harness passes the reference's own sampler and catches wrong rules.

Each case runs N samples at case-level false-alarm rate α = 1e-6 (four tests at α/4); the
detectable TV (power 0.99) of each case is asserted below the deviation it must catch."""

import numpy as np
import pytest

from spectr_gbv.oracle.certify import TEST_NAMES, certify, certify_case, exact_verdict_law
from spectr_gbv.oracle.certify_cases import (fixed_case, lossless_against_target, released_rule_against_target,
                                             toy_models)
from helpers.planted_rules import FirstFailureBV, SharedUniformBV
from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import RULES, registry

N = 200_000
ALPHA = 1e-6


def test_exact_verdict_law_sums_to_one_and_matches_rule():
    draft, target = toy_models(3, 4)
    case = fixed_case("c", "kseq_gbv", draft, target, 2, 3, seed=1)
    law = exact_verdict_law(RULES["kseq_gbv"], case.draft_tokens, case.draft_probs, case.target_probs)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(0 <= tau <= 3 and len(prefix) == tau for tau, prefix, _ in law)


@pytest.mark.parametrize("rule", ["bv", "spectr", "kseq_gbv", "spectr_gbv"])
def test_reference_sampler_certifies(rule):
    """The reference's own sampler passes against its exact law (toy V = 3 case, N = 2e5)."""
    K = 1 if registry.is_single_draft(rule) else 3
    case = fixed_case(f"{rule} toy V=3 K={K} L=3", rule, *toy_models(3, 12), K, 3, 12)
    result = certify_case(RULES, case, N, ALPHA)  # the reference rules are batched verifiers
    assert result.passed, result
    assert result.detectable_tv < 0.02
    assert result.tests_passed == (True,) * 4 and result.failed_tests == []


@pytest.mark.parametrize("planted", [SharedUniformBV(), FirstFailureBV()])
def test_planted_bv_caught(planted):
    """Planted BV variants certified against BV's exact law: caught (p ≈ 0)."""
    draft, target = toy_models(3, 5)
    case = fixed_case("planted", planted.name, draft, target, 1, 3, seed=3, reference_rule="bv",
                      expect_pass=False, backend_dtype="float64")
    result = certify_case(planted, case, N, ALPHA)
    assert not result.passed and result.ok and result.verdict == "CAUGHT"
    # the decisions certify_case took, each test at α/4: the failed ones are named
    assert len(result.tests_passed) == 4 and result.failed_tests
    assert result.failed_tests == [n for n, ok in zip(TEST_NAMES, result.tests_passed) if not ok]
    assert "joint outcome" in result.failed_tests  # the joint G-test sees every deviation of the law


def test_released_rule_caught_against_target_law_and_lossless_rule_passes():
    """First-token law at K = L = 2 on the toy: released SpecTr-GBV 4125/13328 vs 1/3 (TV
    0.024), detectable TV at N = 2e5 is 0.008."""
    report = certify(RULES, [released_rule_against_target(), lossless_against_target("kseq_gbv")],
                     N, ALPHA)
    released, lossless = report.results
    assert released.verdict == "CAUGHT" and released.detectable_tv < 0.01
    assert lossless.verdict == "PASS"
    assert report.ok
    assert released.failed_tests == ["first-token law"] and lossless.failed_tests == []
    table = report.table().splitlines()
    assert table[0].startswith("| case | rule | V | K | L | dtype | N | α | detectable TV | measured TV | min p | "
                               "failed tests | mean τ | exact E[τ] | verdict |")
    assert f"| {released.empirical_tv:.4f} |" in table[2] and "| first-token law |" in table[2]
    assert "| — |" in table[3] and table[2].endswith("| CAUGHT |")


def test_backend_output_checked():
    draft, target = toy_models(2, 1)
    case = fixed_case("c", "bv", draft, target, 1, 2, seed=0)

    def bad(t, d, q, *, seeds):
        B = t.shape[0]
        return BatchVerdict(np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64),
                            np.full((B, 3), 7), np.ones(B, dtype=np.int64))

    r = certify_case(bad, case, 10, ALPHA)  # a verdict, not an exception
    assert not r.passed and r.verdict == "FAIL" and r.tests_passed == () and r.failed_tests == ["verifier output"]
    (name, detail), = r.failed_checks
    assert detail.startswith("the verifier broke the contract on call 0 (after 0 of 10 rows): ContractViolation: "
                             "verifier emitted a token id outside [0, 2)")

    def raises(t, d, q, *, seeds):
        raise RuntimeError("boom")

    r = certify_case(raises, case, 10, ALPHA)
    assert not r.passed and r.failed_checks == [("verifier output", "the verifier raised on call 0 (after 0 of 10 "
                                                                    "rows): RuntimeError: boom")]


def test_round_to_dtype():
    from spectr_gbv.oracle.certify import round_to_dtype

    x = np.array([1 / 3, 1e-30, 0.7])
    assert np.array_equal(round_to_dtype(x, "float64"), x)
    assert round_to_dtype(x, "float32").dtype == np.float32
    b = round_to_dtype(x, "bfloat16")
    # bfloat16 keeps 8 significant bits: 1/3 → 0.333984375, 0.7 → 0.69921875
    assert b[0] == np.float32(0.333984375) and b[2] == np.float32(0.69921875)
    assert (b.view(np.uint32) & 0xFFFF).max() == 0 and b[1] > 0


def test_deterministic_tau_passes_mean_test():
    """A case whose exact τ is deterministic (L = 1, q/p ≥ 1 on the draft token: τ = 1 surely)
    must not fail the mean test on float rounding of the exact law."""
    V = 5
    dp = np.full((1, 1, V), 0.2)
    tp = np.array([[[0.6, 0.1, 0.1, 0.1, 0.1], [0.2] * 5]])
    from spectr_gbv.oracle.certify import FixedCase

    case = FixedCase("det", "sd", "sd", np.array([[0]]), dp, tp, backend_dtype="float64")
    result = certify_case(RULES, case, 20_000, ALPHA)
    assert result.passed and result.mean_tau == 1.0


def test_case_pvalue_is_bonferroni_over_the_family():
    """CaseResult.pvalues lists the family's n_tests p-values in TEST_NAMES order and
    case_pvalue = min(1, n_tests × the smallest); a first-token case has one test."""
    import math
    from spectr_gbv.oracle.certify import CaseResult

    base = dict(name="c", rule="sd", kind="k", expect_pass=True, n=10, alpha=1e-6, detectable_tv=0.1,
                pvalue_joint=0.3, pvalue_tau=0.02, pvalue_conditional=0.5, pvalue_mean=0.9, mean_tau=1.0,
                exact_mean_tau=1.0, mean_ci=(0.9, 1.1), zero_cell_violations=0, passed=True, seconds=0.0,
                V=3, K=1, L=3, dtype="float64")
    four = CaseResult(**base, tests_passed=(True,) * 4)
    assert four.pvalues == (0.3, 0.02, 0.5, 0.9) and math.isclose(four.case_pvalue, 0.08, rel_tol=1e-12)
    five = CaseResult(**base, n_tests=5, pvalue_coarse=0.001, tests_passed=(True,) * 5)
    assert five.pvalues[-1] == 0.001 and math.isclose(five.case_pvalue, 0.005, rel_tol=1e-12)
    six = CaseResult(**base, n_tests=6, pvalue_coarse=0.001, pvalue_identity=1e-4, tests_passed=(True,) * 6)
    assert six.pvalues[-2:] == (0.001, 1e-4) and math.isclose(six.case_pvalue, 6e-4, rel_tol=1e-12)
    assert six.test_names[-1] == "identity (whole law)"
    first = CaseResult(**{**base, "pvalue_joint": 0.7}, tests_passed=(True,))
    assert first.pvalues == (0.7,) and first.case_pvalue == 0.7
