"""Closed forms and reductions, exactly: E[τ] of the greedy rules against their closed forms,
and the multi-draft rules' iteration laws against the rules they reduce to (K = 1, L = 1), on
random prefix-dependent models."""

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings

from spectr_gbv.oracle.bounds import bound_B, expected_tau_kseq_gbv
from spectr_gbv.proofs_check.instances import instances
from spectr_gbv.reference.decode import Decoder
from spectr_gbv.reference.exact import expected_tau, iteration_law
from spectr_gbv.reference.rules import RULES, registry

TOL = 1e-12
FUZZ = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def max_diff(a, b):
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def law_of_emission(rule, inst):
    """Exact law of (τ, emitted tokens) of the first iteration (the selected draft index left
    out: rules may name different drafts carrying the same prefix)."""
    out = defaultdict(float)
    for v, pr in iteration_law(rule, Decoder(inst.draft, inst.target, inst.K, inst.L)).items():
        out[(v.tau, v.tokens)] += pr
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=instances(Ks=(1,)))
def test_gbv_expected_tau_is_B1(inst):
    """docs/rules.md §2.4: E[τ] = Σ_i Σ_|z|=i min(p(z), q(z)) = B(1, L)."""
    got = expected_tau(RULES["gbv"], inst.draft, inst.target, 1, inst.L)
    want = bound_B(inst.draft.block_law(inst.L), inst.target.block_law(inst.L), 1)
    assert got == pytest.approx(want, abs=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=instances(budget=729))
def test_kseq_gbv_expected_tau_formula(inst):
    """docs/rules.md §2.6: E[τ] = Σ_i Σ_|z|=i min(ρ*·p(z), q(z))."""
    got = expected_tau(RULES["kseq_gbv"], inst.draft, inst.target, inst.K, inst.L)
    want = expected_tau_kseq_gbv(inst.draft.block_law(inst.L), inst.target.block_law(inst.L), inst.K)
    assert got == pytest.approx(want, abs=1e-12)


def test_gbv_long_block_underflowing_joints():
    """L = 16, V = 8: draft tokens at p = 0.5 against q = 0.25 give P(τ = L) = q(X)/p(X) = 2^-16.
    With per-token probabilities near 1e-30 the joints (≈1e-480) underflow to 0, yet h comes
    from the ratio q(z)/p(z), summed in log space: finite and right (no 0/0)."""
    import numpy as np

    from spectr_gbv.reference.randomness import enumerate_law

    V, L = 8, 16
    dp = np.full((1, L, V), 0.5 / (V - 1))
    tp = np.full((1, L + 1, V), 0.75 / (V - 1))
    dp[0, :, 0], tp[0, :, 0] = 0.5, 0.25
    tokens = np.zeros((1, L), dtype=int)
    block = RULES["gbv"].prepare(tokens, dp, tp)
    law = enumerate_law(lambda src: RULES["gbv"].decide(block, src))
    assert sum(pr for v, pr in law.items() if v.tau == L) == pytest.approx(2.0**-16, rel=1e-12)
    tiny = dp.copy()
    tiny_tp = tp.copy()
    tiny[0, :, 0], tiny[0, :, 1:] = 1e-30, (1 - 1e-30) / (V - 1)
    tiny_tp[0, :, 0], tiny_tp[0, :, 1:] = 2e-30, (1 - 2e-30) / (V - 1)
    h = RULES["gbv"].prepare(tokens, tiny, tiny_tp).plan["h"]
    assert np.all(np.isfinite(h)) and h[L] == pytest.approx(1.0)  # q/p = 2^16 > 1: accept
    tiny_tp[0, :, 0] = 0.5e-30
    h = RULES["gbv"].prepare(tokens, tiny, tiny_tp).plan["h"]
    assert h[L] == pytest.approx(2.0**-16, rel=1e-9)  # the joints (1e-480) underflow to 0


def test_rho_star_nearly_disjoint_supports():
    """1 − (1 − β)^k without cancellation: β ≈ 2e-9, k = 3 → ρ* = 3 − 4e-9 (series)."""
    import numpy as np

    from spectr_gbv.reference.kseq import rho_star

    got = rho_star(np.array([1 - 1e-9, 1e-9]), np.array([1e-9, 1 - 1e-9]), 3)
    # β(ρ) = 1e-9 + 1e-9/ρ·... : the root satisfies 3 − 3β + β² = ρ with β = 1e-9(1 + 1/ρ)
    assert got == pytest.approx(3 - 3 * 1e-9 * (1 + 1 / 3), rel=1e-12)


# -- reductions --------------------------------------------------------------------------------

# The multi-draft rules that leave later targets untouched, and the single-draft rule each is
# at K = 1: K-SEQ verifies token by token (token verification), the others verify the block.
NON_MODIFYING_MULTI = registry.names(lossless=True, single_draft=False, modifies_targets=False)
AT_K1 = {name: "sd" if name == "spectr" else "bv" for name in NON_MODIFYING_MULTI}


@pytest.mark.parametrize("name", NON_MODIFYING_MULTI)
@FUZZ
@given(inst=instances(Ks=(1,)))
def test_k1_reduces_to_a_single_draft_rule(name, inst):
    """K = 1: the same iteration law as BV (token verification for K-SEQ), Verdict by Verdict
    (draft index, τ, tokens)."""
    dec = Decoder(inst.draft, inst.target, 1, inst.L)
    assert max_diff(iteration_law(RULES[name], dec), iteration_law(RULES[AT_K1[name]], dec)) <= TOL


@FUZZ
@given(inst=instances(Ls=(1,), Ks=(2, 3)))
def test_kseq_bv_is_kseq_at_L1(inst):
    assert max_diff(law_of_emission(RULES["kseq_bv"], inst), law_of_emission(RULES["spectr"], inst)) <= TOL
