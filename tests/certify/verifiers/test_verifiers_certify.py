"""Statistical certification of the batched verifiers against the reference's exact law
(oracle/certify.py), with the backend's own seeded randomness (grouped exponential race).

Every registry rule on
  * toy fixed-draft cases from oracle.certify_cases.toy_models: V = 3, K = 3, L = 3 in float32
    and V = 4, K = 2, L = 2 in bfloat16 (K = 1 for the single-draft rules);
  * random rows at V = 4,096 (oracle.certify_cases.large_models) in float32, with K = 2, L = 2
    for the multi-draft rules (K = 1, L = 2 for sd, bv, gbv) — except SpecTr, run at K = 2,
    L = 1: beyond depth 1 its ρ* is solved per row (~0.3 ms per row at V = 4,096 on this CPU,
    ~60 s per 2·10^5 samples), while the depth-1 root is shared by all rows of a case; SpecTr's
    deeper levels are certified on the toy cases.  bfloat16 at V = 4,096 for K-SEQ-GBV and
    SpecTr-GBV (fixed) only: the bfloat16 path (renormalisation in prepare) is the same for every
    rule, and each V = 4,096 case costs 10-25 s on this shared 2-core CPU.
  * every registry rule's branch-coverage case (oracle.certify_cases.coverage_case: every outcome class of
    oracle.branches — each τ, the weighted correction at each inner depth, each draft, the
    Algorithm 2 record — with exact probability ≥ 0.02), float32;
  * the law-level planted case of oracle.certify_cases: the released SpecTr-GBV must be caught
    against the target's first-token law (docs/rules.md §2.5), K-SEQ-GBV must pass it.
N = 2·10^5 samples per case at α = 1e-6 (Bonferroni over the case's four tests, six at V = 4,096
with the coarsened test of oracle/coarsen.py and the identity test of oracle/identity.py); the smallest
total-variation deviation detected with power 0.99 is printed per case.  Inputs are one case
expanded over the batch (zero-stride views), 4,096-row chunks (512 at V = 4,096).

Cases are drawn with seeds for which no value of τ has probability above 0.99: when the exact
law puts all but ~1e-16 of its mass on one τ (its probabilities summing to 1 − 4e-16), the
harness's mean test with the exact variance (~1e-31) rejects a sampler that always returns that
τ — a rounding artefact of oracle/certify.py, reported to its owner — and such cases exercise
little of the rule anyway.
bfloat16 cases use rows that are exact in bfloat16 and sum to exactly 1 (``bf16_exact``;
the cases, ``nondegenerate_case`` and the torch adapter live in certify/suite.py):
rounding generic rows to bfloat16 moves the law by up to ~4e-3 (e.g. mean τ 1.9847 instead of
1.9930 for BV on a V = 4 toy), which N = 2·10^5 detects; the reference law must be that of the
rows the backend is given.
"""

from __future__ import annotations

import pytest
import torch

# the cases and the torch adapter are shared with `spectr-gbv certify`
from spectr_gbv.certify.suite import TOY_SEED, large_case, suite_verifier, toy_cases
from spectr_gbv.oracle.certify_cases import coverage_case
from spectr_gbv.gpu_backend.verifiers import VERIFIERS
from spectr_gbv.oracle.certify import certify
from spectr_gbv.oracle.certify_cases import lossless_against_target, released_rule_against_target
from helpers.verifier_cases import one_torch_thread  # noqa: F401  (autouse fixture)

N_SAMPLES = 200_000
ALPHA = 1e-6


def run(cases, dtype, chunk):
    verifiers = {c.rule: suite_verifier(c.rule, dtype) for c in cases}
    report = certify(verifiers, cases, n_samples=N_SAMPLES, alpha=ALPHA, chunk=chunk)
    print("\n" + report.table())
    for r in report.results:
        print(f"{r.name}: N={r.n} alpha={r.alpha:g} detectable TV={r.detectable_tv:.4f} "
              f"mean tau {r.mean_tau:.4f} in [{r.mean_ci[0]:.4f}, {r.mean_ci[1]:.4f}] "
              f"(exact {r.exact_mean_tau:.4f}) -> {r.verdict} in {r.seconds:.1f} s")
    return report


# The non-modifying multi-draft rules (certify_suite.TOY_SEED: kseq_bv, traversal, mdbv, mdbv_kseq) have
# their own certification cases, chosen so that each distinguishes its rule from the others:
# test_verifiers_certify_distinctive.py.
CERTIFIED_HERE = tuple(r for r in VERIFIERS if r not in TOY_SEED)


@pytest.mark.parametrize("rule", CERTIFIED_HERE)
def test_certify_toy_cases(rule):
    f32, bf16 = toy_cases(rule)
    report = run([f32], torch.float32, chunk=16384)
    report.results += run([bf16], torch.bfloat16, chunk=16384).results
    for r in report.results:
        assert r.passed, (r.name, r.pvalue_joint, r.pvalue_tau, r.pvalue_conditional, r.pvalue_mean)
        assert r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]
        assert r.detectable_tv < 0.015 and r.zero_cell_violations == 0  # whole law: no pooled mass here


@pytest.mark.parametrize("rule", tuple(VERIFIERS))
def test_certify_coverage_case(rule):
    """Every rule (the distinctive ones too) on its branch-coverage case (oracle.certify_cases.coverage_case:
    every outcome class of oracle.branches has exact probability ≥ 0.02,
    tests/oracle/test_case_coverage.py), float32, N = 2·10^5, α = 1e-6.  The torch BV verifier
    with the residual (q − p)_+ instead of (p_τ·q − p)_+ moves this law by TV 0.0822 and fails
    here (p < 1e-100 on the bv case, 2026-12-02); it passed every case before (issue 27)."""
    report = run([coverage_case(rule)], torch.float32, chunk=16384)
    r = report.results[0]
    assert r.passed, (r.name, r.pvalue_joint, r.pvalue_tau, r.pvalue_conditional, r.pvalue_mean)
    assert r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]
    assert r.detectable_tv < 0.015 and r.zero_cell_violations == 0


LARGE = [(rule, "float32") for rule in CERTIFIED_HERE] + [("kseq_gbv", "bfloat16"), ("spectr_gbv_fixed", "bfloat16")]


@pytest.mark.parametrize("rule,dtype", LARGE, ids=[f"{r}-{d}" for r, d in LARGE])
def test_certify_random_rows_V4096(rule, dtype):
    report = run([large_case(rule, dtype)], getattr(torch, dtype), chunk=512)
    r = report.results[0]
    assert r.passed, (r.name, r.pvalue_joint, r.pvalue_tau, r.pvalue_conditional, r.pvalue_mean)
    assert r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]
    # the G-test's bound on its pooled cells; the whole-law guarantee adds the pooled mass
    # (outcomes of expected count < 5: measured 0.7-4.3 % of the mass at V = 4,096, N = 2e5).
    # 0.031: the calibrated G-test (oracle.gtest.gtest, G/s with the exact null mean) at α/6 states
    # a δ 3-18 % above the old χ² one (benchmarks/GTEST_SIZE.md); largest here spectr_gbv_fixed
    # bfloat16, 0.0303 (it was < 0.03 only under the anti-conservative χ² p-value)
    assert r.detectable_tv_pooled < 0.031 and r.zero_cell_violations == 0
    assert r.detectable_tv == r.detectable_tv_pooled + r.pooled_mass and r.detectable_tv < 0.075
    # the coarsened test (64 bins of nearly equal exact mass): δ 0.0127 on the coarsened law
    assert r.n_tests == 6 and r.pvalue_coarse >= ALPHA / 6 and r.detectable_tv_coarse < 0.013
    # the identity test (oracle.identity): δ on the whole law, below the joint test's
    assert r.pvalue_identity >= ALPHA / 6 and r.detectable_tv_identity < r.detectable_tv


def test_certify_law_level_planted_case():
    """Fresh toy drafts every sample, first emitted token against the target (docs/rules.md §2.5):
    the released SpecTr-GBV is caught (P(first = a) = 4125/13328, not 1/3), K-SEQ-GBV passes."""
    report = run([released_rule_against_target(2, 2), lossless_against_target("kseq_gbv", 2, 2)],
                 torch.float64, chunk=4096)
    caught, lossless = report.results
    assert caught.verdict == "CAUGHT" and caught.pvalue_joint < ALPHA
    assert lossless.verdict == "PASS"
    assert report.ok


def test_a_verifier_that_raises_is_a_failed_row_with_its_reason():
    """certify_case turns a verifier's error into a failed "verifier output" check (a verdict,
    oracle/certify.py); the plan's row keeps its reason and is FAIL, not ERROR."""
    from spectr_gbv.certify.verifiers.run import Entry, _row
    from spectr_gbv.oracle.certify import certify_case
    from spectr_gbv.oracle.certify_cases import case_family

    def raises(draft_tokens, draft_probs, target_probs, *, seeds):
        raise RuntimeError("kernel failed")

    case = case_family("toy", "sd", 1, 3)
    row = _row(Entry("rule", "sd", "sd", "toy", None), case, certify_case(raises, case, 100, 1e-6))
    assert row.verdict == "FAIL" and row.error is None and not row.ok
    assert row.statistic == "verifier output" and row.pvalues == {}
    assert row.failed_checks == ("verifier output: the verifier raised on call 0 (after 0 of 100 rows): "
                                 "RuntimeError: kernel failed",)
    assert row.to_json()["failed_checks"] == list(row.failed_checks)
