"""Exact E[τ] of the greedy rules against their closed forms on random prefix-dependent models."""

import pytest
from hypothesis import HealthCheck, given, settings

from oracle.bounds import bound_B, expected_tau_kseq_gbv
from proofs_check.instances import instances
from reference.exact import expected_tau
from reference.rules import RULES


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

    from reference.randomness import enumerate_law

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

    from reference.kseq import rho_star

    got = rho_star(np.array([1 - 1e-9, 1e-9]), np.array([1e-9, 1 - 1e-9]), 3)
    # β(ρ) = 1e-9 + 1e-9/ρ·... : the root satisfies 3 − 3β + β² = ρ with β = 1e-9(1 + 1/ρ)
    assert got == pytest.approx(3 - 3 * 1e-9 * (1 + 1 / 3), rel=1e-12)
