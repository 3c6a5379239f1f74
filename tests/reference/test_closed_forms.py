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
    """SPEC §2.4: E[τ] = Σ_i Σ_|z|=i min(p(z), q(z)) = B(1, L)."""
    got = expected_tau(RULES["gbv"], inst.draft, inst.target, 1, inst.L)
    want = bound_B(inst.draft.block_law(inst.L), inst.target.block_law(inst.L), 1)
    assert got == pytest.approx(want, abs=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=instances(budget=729))
def test_kseq_gbv_expected_tau_formula(inst):
    """SPEC §2.6: E[τ] = Σ_i Σ_|z|=i min(ρ*·p(z), q(z))."""
    got = expected_tau(RULES["kseq_gbv"], inst.draft, inst.target, inst.K, inst.L)
    want = expected_tau_kseq_gbv(inst.draft.block_law(inst.L), inst.target.block_law(inst.L), inst.K)
    assert got == pytest.approx(want, abs=1e-12)
