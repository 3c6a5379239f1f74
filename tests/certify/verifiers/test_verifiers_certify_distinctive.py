"""Certification (oracle.certify) of the batched verifiers of the multi-draft rules that leave
later targets untouched (K-SEQ-BV, Traversal, MDBV, MDBV-KSEQ) against the reference's exact law, at
N = 2·10^5, α = 1e-6, on float32 inputs, with the smallest detectable TV printed: per rule a
toy case and a V = 4,096 case chosen to be *distinctive* (gpu_backend.certify.suite: no τ above
probability 0.99, TV ≥ 0.05 from each other rule of DISTINCT_FROM, so a port of the wrong rule
would be caught), and MDBV's tie case in bfloat16.  The other rules are certified on the
generic cases of test_verifiers_certify.py.
"""

from __future__ import annotations

import pytest
import torch

from spectr_gbv.certify.suite import (DISTINCT_FROM, TOY_SEED, distinctive_case, large_case, rows_seed,
                                      suite_verifier, toy_cases)
from spectr_gbv.oracle.certify import FixedCase, certify
from spectr_gbv.oracle.certify_cases import fixed_case, large_models, toy_models
from helpers.verifier_cases import one_torch_thread  # noqa: F401  (autouse fixture)

# the rules with distinctive cases (certify_suite.TOY_SEED: seeds chosen per rule)
DISTINCTIVE = tuple(TOY_SEED)

N_SAMPLES = 200_000
ALPHA = 1e-6


def certify_and_check(case: FixedCase, chunk: int, max_tv: float, dtype=torch.float32):
    report = certify(suite_verifier(case.rule, dtype), [case], n_samples=N_SAMPLES, alpha=ALPHA, chunk=chunk)
    r = report.results[0]
    print(f"\n{r.name}: N={r.n} alpha={r.alpha:g} detectable TV={r.detectable_tv:.4f} "
          f"mean tau {r.mean_tau:.4f} in [{r.mean_ci[0]:.4f}, {r.mean_ci[1]:.4f}] "
          f"(exact {r.exact_mean_tau:.4f}) p-values joint {r.pvalue_joint:.3g} tau {r.pvalue_tau:.3g} "
          f"conditional {r.pvalue_conditional:.3g} mean {r.pvalue_mean:.3g} -> {r.verdict} in {r.seconds:.1f} s")
    assert r.passed, (r.name, r.pvalue_joint, r.pvalue_tau, r.pvalue_conditional, r.pvalue_mean)
    assert r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]
    # max_tv bounds the G-test's power on its pooled cells; the whole-law guarantee adds the
    # pooled mass (≈ 1e-16 on the toy; measured 0.7-1.4 % at V = 4,096 and N = 2e5)
    assert r.detectable_tv_pooled < max_tv and r.zero_cell_violations == 0
    assert r.detectable_tv == r.detectable_tv_pooled + r.pooled_mass and r.detectable_tv < max_tv + 0.02


# distinctive_case checks that the case is worth certifying (no τ above 0.99, TV ≥ 0.05 from
# each of OTHERS); it, the seeds and the cases are shared with `spectr-gbv certify`
# (certify/suite.py).
OTHERS = DISTINCT_FROM


@pytest.mark.parametrize("name", DISTINCTIVE)
def test_certify_toy_case(name):
    """V = 3, K = 3, L = 3 toy drafts (oracle.certify_cases.toy_models, seeds TOY_SEED), float32."""
    others = tuple(r for r in OTHERS if r != name)
    case = distinctive_case(f"{name} toy V=3 K=3 L=3 float32", name, toy_models(3, 12), 3, 3,
                            TOY_SEED[name], others)
    certify_and_check(case, chunk=16384, max_tv=0.015)


@pytest.mark.parametrize("name", DISTINCTIVE)
def test_certify_random_rows_V4096(name):
    """Random peaked rows at V = 4,096 (oracle.certify_cases.large_models(4096, 21), drafts of
    seed certify_suite.rows_seed(name): 29, or 38 for MDBV-KSEQ), K = 2, L = 2, float32."""
    others = tuple(r for r in OTHERS if r != name)
    case = distinctive_case(f"{name} rows V=4096 K=2 L=2 float32", name, large_models(4096, 21), 2, 2, rows_seed(name),
                            others)
    certify_and_check(case, chunk=2048, max_tv=0.03)


def test_certify_mdbv_tie_case_bfloat16():
    """The toy case whose exact tie in MDBV's child schedule made float32 certification fail on
    some CPUs (V = 3, K = L = 3, seed TOY_SEED['mdbv']), with its rows rounded to bfloat16 the
    plain way (not bf16-exact): the port renormalises them in its own precision, the reference
    in float64, so the two see rows that differ by rounding only; the tie rule
    (reference.ties) must give both the same schedule.  float32: test_certify_toy_case[mdbv]."""
    draft, target = toy_models(3, 12)
    case = fixed_case("mdbv toy V=3 K=3 L=3 bfloat16 (tie)", "mdbv", draft, target, 3, 3, TOY_SEED["mdbv"],
                      backend_dtype="bfloat16")
    report = certify(suite_verifier("mdbv", torch.bfloat16), [case], n_samples=N_SAMPLES, alpha=ALPHA, chunk=16384)
    r = report.results[0]
    assert r.passed, (r.name, r.pvalue_joint, r.pvalue_tau, r.pvalue_conditional, r.pvalue_mean)
    assert r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]
    assert r.detectable_tv < 0.015 and r.zero_cell_violations == 0


@pytest.mark.parametrize("which", ["toy V=4 K=2 L=2", "rows V=4096 K=2 L=2", "tie V=3 K=3 L=3"])
def test_certify_mdbv_kseq_bfloat16(which):
    """MDBV-KSEQ (the batched port with no host plan) on bfloat16 inputs: the generic bf16-exact
    toy and V = 4,096 cases (certify_suite.toy_cases / large_case) and MDBV's tie case rounded
    to bfloat16 the plain way (the port renormalises in its own precision; the tie rule must
    still give it the reference's schedule)."""
    if which.startswith("toy"):
        case, chunk, max_tv = toy_cases("mdbv_kseq")[1], 16384, 0.015
    elif which.startswith("rows"):
        case, chunk, max_tv = large_case("mdbv_kseq", "bfloat16"), 2048, 0.03
    else:
        draft, target = toy_models(3, 12)
        case = fixed_case("mdbv_kseq toy V=3 K=3 L=3 bfloat16 (tie)", "mdbv_kseq", draft, target, 3, 3,
                          TOY_SEED["mdbv"], backend_dtype="bfloat16")
        chunk, max_tv = 16384, 0.015
    certify_and_check(case, chunk, max_tv, torch.bfloat16)
