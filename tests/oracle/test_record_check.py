"""Algorithm 2's record certified (oracle/record_check.py): for a rule that modifies later targets,
``certify_verifier`` and the pytest plugin check every sampled row's record against the
reference's record for its outcome, and the report says so.

A greedy block verifier written from scratch (tests/helpers/scratch_verifiers.py) whose record
carries the joints of the accepted prefix only — one position short — has GBV's outcome law: it
passes every statistical test of every family, and fails the deterministic "Algorithm 2 record"
check on every family where τ < L has mass; its twin with the right record passes.  The check is
deterministic (a verifier computing its record as the contract says never fails it; its
tolerances: oracle.record_check.RHO_RTOL, LOG_TOL); the statistical tests run at α = 1e-6 per
case, N = 4,000 (δ ≈ 0.07 on V ≤ 8).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.scratch_verifiers import gbv, gbv_record_off_by_one
from spectr_gbv.oracle.certify_cases import case_family, coverage_case
from spectr_gbv.oracle.harness import certify_lossless, certify_verifier
from spectr_gbv.oracle.pytest_plugin import CertificationFailed, assert_lossless
from spectr_gbv.oracle.record_check import RECORD_CHECK, RecordCheck, reference_records
from spectr_gbv.reference.rules import RULES, get_rule, registry
from spectr_gbv.reference.rules.gbv import GreedyBlockVerification

N = 4_000
ALPHA = 1e-6


def _record(result):
    return next(c for c in result.checks if c[0] == RECORD_CHECK)


def test_the_from_scratch_gbv_passes_and_the_report_says_how_its_record_was_checked():
    report = certify_verifier(gbv, "gbv", K=1, L=3, n_samples=N, alpha=ALPHA)
    assert report.ok, report.table()
    for r in report.results:
        name, ok, detail = _record(r)
        assert ok and "against the reference's record for its outcome" in detail
    toy = next(r for r in report.results if r.name.split()[1] == "toy")
    assert int(_record(toy)[2].split()[0]) > 500  # records of τ < L rows were checked, not 0


def test_a_record_off_by_one_position_fails_with_a_verdict():
    report = certify_verifier(gbv_record_off_by_one, "gbv", K=1, L=3, n_samples=N, alpha=ALPHA)
    assert not report.ok
    # its outcome law is GBV's: every statistical test passes; only the record check fails
    assert all(all(r.tests_passed) for r in report.results), report.table()
    failed = {r.name.split()[1] for r in report.results if not r.passed}
    assert failed == {"toy", "large", "vocab", "zeros", "disjoint", "coverage", "onehot", "deep"}  # prefix, equal: τ = L
    for r in report.results:
        if not r.passed:
            assert r.failed_tests == [RECORD_CHECK]
            assert "carry a record other than the reference's" in r.failed_checks[0][1]
    assert "Failed checks:" in report.table()
    with pytest.raises(CertificationFailed, match="Algorithm 2 record: .* rows carry a record other than"):
        assert_lossless(gbv_record_off_by_one, "gbv", K=1, L=3, families=("toy",), n_samples=N, alpha=ALPHA)


def test_certify_lossless_sees_it_through_two_iterations():
    """The law of the generation (records carried, oracle/lossless.py) fails too; the twin passes."""
    assert certify_lossless(gbv, K=1, L=3, n_samples=N).ok
    bad = certify_lossless(gbv_record_off_by_one, K=1, L=3, n_samples=N)
    assert "joint" in bad.failed["toy"]


def test_a_rule_registered_as_target_modifying_gets_the_check():
    class UserGBV(GreedyBlockVerification):
        name = "user_gbv"

    registry.register(registry.RuleSpec("user_gbv", UserGBV, lossless=True, citation="a user's rule",
                                        summary="GBV under another name"))
    try:
        ok = certify_verifier(gbv, "user_gbv", K=1, L=3, families=("toy",), n_samples=N, alpha=ALPHA)
        assert ok.ok and _record(ok.results[0])[1]
        bad = certify_verifier(gbv_record_off_by_one, "user_gbv", K=1, L=3, families=("toy",), n_samples=N,
                               alpha=ALPHA)
        assert bad.results[0].failed_tests == [RECORD_CHECK]
    finally:
        registry.unregister("user_gbv")


def test_rules_without_a_record_are_not_checked():
    report = certify_verifier(RULES["bv"], "bv", K=1, L=3, families=("toy",), n_samples=1_000, alpha=ALPHA)
    assert [c[0] for c in report.results[0].checks] == ["verifier output"]


@pytest.mark.parametrize("rule", registry.names(modifies_targets=True))
def test_the_reference_records_are_the_contracts_joints(rule):
    """Exact (float64): every registered rule that modifies targets, through the numpy reference
    on its coverage case and on "toy", passes the check on 2,000 rows — its record is the joint
    of the emitted tokens (the contract's definition) and its (kind, K, ρ) the enumeration's."""
    K = registry.default_K(rule, 2)
    for case in (coverage_case(rule, "float64"), case_family("toy", rule, K, 3)):
        check = RecordCheck(get_rule(rule), case)
        rows = [np.broadcast_to(a, (2_000,) + a.shape) for a in
                (case.draft_tokens, case.backend_draft_probs, case.backend_target_probs)]
        out = RULES[rule](*rows, seeds=np.arange(2_000))
        outcomes = [(int(t), tuple(int(x) for x in row[:t]), int(row[t])) for t, row in zip(out.tau, out.tokens)]
        check.add(out.modification, outcomes)
        name, ok, detail = check.result()
        assert ok and check.with_record > 100, detail


def test_mutated_records_are_caught():
    """Break one field of the reference's own records at a time: ρ, the kind, a joint, active."""
    case = case_family("toy", "kseq_gbv", 2, 3)
    rows = [np.broadcast_to(a, (500,) + a.shape) for a in
            (case.draft_tokens, case.backend_draft_probs, case.backend_target_probs)]
    out = RULES["kseq_gbv"](*rows, seeds=np.arange(500))
    outcomes = [(int(t), tuple(int(x) for x in row[:t]), int(row[t])) for t, row in zip(out.tau, out.tokens)]
    m = out.modification
    rho_star = float(m.rho[m.active][0])
    assert rho_star > 1.01  # ρ* of K-SEQ: a ρ of 1 is a real defect here
    for mutate in (lambda m: setattr(m, "rho", np.ones_like(m.rho)),
                   lambda m: setattr(m, "kind", "spectr_gbv"),
                   lambda m: setattr(m, "log_q_joint", m.log_q_joint + 0.01),
                   lambda m: setattr(m, "active", np.zeros_like(m.active))):
        import copy

        bad = copy.deepcopy(m)
        mutate(bad)
        check = RecordCheck(get_rule("kseq_gbv"), case)
        check.add(bad, outcomes)
        assert not check.result()[1], mutate


def test_reference_records_of_gbv_on_a_toy_case():
    case = case_family("toy", "gbv", 1, 2)
    table = reference_records(get_rule("gbv"), case.draft_tokens, case.draft_probs, case.target_probs)
    for (tau, accepted, token), keys in table.items():
        assert keys == ({(None, None, None)} if tau == 2 else {("excess", 1, 1.0)})
    assert math.isclose(sum(1 for o in table if o[0] < 2), sum(1 for o in table) - case.V, abs_tol=0)
