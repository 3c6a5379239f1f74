"""Closed forms of oracle.bounds against docs/toy.md exact toy values and brute force."""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest

from spectr_gbv.oracle.bounds import (
    alpha_star,
    alpha_star_brute_force,
    bound_B,
    expected_tau_gbv,
    expected_tau_kseq_gbv,
    prefix_marginals,
)
from spectr_gbv.reference.kseq import beta, rho_star
from spectr_gbv.reference.models import ContextFree, RandomModel

TOY_P = ContextFree([2 / 3, 1 / 3])
TOY_Q = ContextFree([1 / 3, 2 / 3])


def toy(L):
    return TOY_P.block_law(L), TOY_Q.block_law(L)


def random_pair(V, L, seed, concentration=0.7, zero_prob=0.0):
    p = RandomModel(V, seed, concentration, zero_prob).block_law(L)
    q = RandomModel(V, seed + 1000, concentration, zero_prob).block_law(L)
    return p, q


# docs/toy.md
TOY_B = {
    (1, 1): F(2, 3), (1, 2): F(4, 3), (1, 3): F(50, 27),
    (2, 1): F(5, 6), (2, 2): F(19, 12), (2, 3): F(485, 216),
    (3, 1): F(11, 12), (3, 2): F(83, 48), (3, 3): F(4277, 1728),
}  # fmt: skip


@pytest.mark.parametrize("K,L", sorted(TOY_B))
def test_bound_B_toy_exact(K, L):
    p, q = toy(L)
    assert bound_B(p, q, K) == pytest.approx(float(TOY_B[(K, L)]), abs=1e-12)


@pytest.mark.parametrize("L", [1, 2, 3])
def test_gbv_is_B1_on_toy(L):
    p, q = toy(L)
    assert expected_tau_gbv(p, q) == pytest.approx(float(TOY_B[(1, L)]), abs=1e-12)


@pytest.mark.parametrize("L,value", [(1, 0.811420), (2, 1.526337), (3, 2.157441)])
def test_kseq_gbv_toy(L, value):
    p, q = toy(L)
    assert expected_tau_kseq_gbv(p, q, 2) == pytest.approx(value, abs=1e-6)


def test_kseq_gbv_toy_closed_form_L2():
    # ρ* = (5 + √13)/6; depth 1: 1/3 + ρ/3; depth 2: 1/9 + 2/9 + 2/9 + ρ/9.
    rho = (5 + math.sqrt(13)) / 6
    p, q = toy(2)
    assert expected_tau_kseq_gbv(p, q, 2) == pytest.approx(1 / 3 + rho / 3 + 5 / 9 + rho / 9, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("K", [1, 2, 3, 5])
def test_kseq_gbv_at_L1_is_kseq_acceptance(seed, K):
    # At L = 1 K-SEQ accepts with probability 1 − (1 − β(ρ*))^K = ρ*·β(ρ*) = Σ min(ρ* p, q).
    p, q = random_pair(4, 1, seed)
    rho = rho_star(p, q, K)
    assert expected_tau_kseq_gbv(p, q, K) == pytest.approx(1 - (1 - beta(p, q, rho)) ** K, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("V,L", [(2, 3), (3, 2), (4, 2)])
def test_prefix_marginals_match_model_joint(seed, V, L):
    model = RandomModel(V, seed, 0.8)
    marg = prefix_marginals(model.block_law(L))
    assert [m.shape for m in marg] == [(V,) * i for i in range(1, L + 1)]
    rng = np.random.default_rng(seed)
    for i, m in enumerate(marg, start=1):
        z = tuple(int(t) for t in rng.integers(V, size=i))
        assert m[z] == pytest.approx(model.joint(z), rel=1e-12)
        assert m.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("V,L", [(2, 2), (3, 2), (2, 3)])
def test_B_properties(seed, V, L):
    p, q = random_pair(V, L, seed, zero_prob=0.2)
    values = [bound_B(p, q, K) for K in range(1, 7)]
    assert values[0] == pytest.approx(expected_tau_gbv(p, q), abs=1e-12)
    assert np.all(np.diff(values) >= -1e-12)
    assert 0 <= values[-1] <= L + 1e-12
    # ρ* ≥ 1, so K-SEQ-GBV accepts at least what GBV accepts
    assert expected_tau_kseq_gbv(p, q, 3) >= values[0] - 1e-12


def test_B_tends_to_L_when_supports_nested():
    p, q = random_pair(3, 2, 7, concentration=2.0)  # full supports, m(z) bounded away from 0
    assert bound_B(p, q, 400) == pytest.approx(2.0, abs=1e-9)
    assert bound_B(p, p, 1) == pytest.approx(2.0, abs=1e-12)


def test_B_with_zero_target_cells_counts_nothing_there():
    # q(z) = 0 ⇒ m(z) = 1 by convention and the term q(z)·[…] vanishes; p(b) > 0 = q(b).
    p = np.array([0.5, 0.5])
    q = np.array([1.0, 0.0])
    assert bound_B(p, q, 1) == pytest.approx(0.5, abs=1e-15)
    assert bound_B(p, q, 2) == pytest.approx(0.75, abs=1e-15)


# ---------------------------------------------------------------------------------------
# α*
# ---------------------------------------------------------------------------------------


def test_alpha_star_toy():
    p, q = [2 / 3, 1 / 3], [1 / 3, 2 / 3]
    assert alpha_star(p, q, 1) == pytest.approx(2 / 3, abs=1e-15)
    assert alpha_star(p, q, 2) == pytest.approx(8 / 9, abs=1e-15)  # H = {a}: 1/3 + 1 − 4/9
    assert alpha_star(p, q, 3) == pytest.approx(1.0, abs=1e-15)  # 1/3 + 1 − 8/27 > 1: H = ∅


def test_alpha_star_sorted_prefix_equals_brute_force():
    rng = np.random.default_rng(2025)
    worst = 0.0
    for _ in range(1500):
        V = int(rng.integers(2, 10))
        K = int(rng.integers(1, 8))
        p = rng.dirichlet(np.full(V, rng.choice([0.2, 1.0, 5.0])))
        q = rng.dirichlet(np.full(V, rng.choice([0.2, 1.0, 5.0])))
        if rng.random() < 0.3:  # zero draft mass on a token
            p[rng.integers(V)] = 0.0
            p /= p.sum()
        if rng.random() < 0.3:  # zero target mass on a token
            q[rng.integers(V)] = 0.0
            q /= q.sum()
        if rng.random() < 0.2:  # ties in q/p
            q = p.copy() if rng.random() < 0.5 else np.roll(p, 1)
        worst = max(worst, abs(alpha_star(p, q, K) - alpha_star_brute_force(p, q, K)))
    assert worst < 1e-12


@pytest.mark.parametrize("seed", range(10))
def test_alpha_star_dominates_kseq_and_single_draft(seed):
    rng = np.random.default_rng(seed)
    V = 5
    p = rng.dirichlet(np.ones(V) * 0.5)
    q = rng.dirichlet(np.ones(V) * 0.5)
    assert alpha_star(p, q, 1) == pytest.approx(np.minimum(p, q).sum(), abs=1e-12)
    for K in (2, 3, 4):
        kseq = 1 - (1 - beta(p, q, rho_star(p, q, K))) ** K
        assert alpha_star(p, q, K) >= kseq - 1e-12
        assert alpha_star(p, q, K) >= alpha_star(p, q, K - 1) - 1e-12


def test_alpha_star_disjoint_and_equal():
    assert alpha_star([1.0, 0.0], [0.0, 1.0], 5) == 0.0
    assert alpha_star([0.3, 0.7], [0.3, 0.7], 1) == pytest.approx(1.0, abs=1e-15)


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


GOOD = np.full((2, 2), 0.25)


@pytest.mark.parametrize(
    "p,q,K,match",
    [
        (np.array([[0.25, np.nan], [0.25, 0.25]]), GOOD, 1, "p_block: contains NaN"),
        (GOOD, np.array([[0.5, -0.1], [0.3, 0.3]]), 1, "q_block: contains negative"),
        (GOOD, np.array([[0.3, 0.3], [0.3, 0.3]]), 1, "q_block: probabilities are not normalised"),
        (GOOD, np.full((2, 2, 2), 0.125), 1, "same shape"),
        (np.full((2, 3), 1 / 6), np.full((2, 3), 1 / 6), 1, r"p_block: a block law needs shape \(V,\)\*L"),
        (np.array(1.0), np.array(1.0), 1, "p_block: .*scalar"),
        (GOOD, GOOD, 0, "K must be an integer >= 1"),
        (GOOD, GOOD, 1.5, "K must be an integer >= 1"),
    ],
)
def test_bad_block_inputs(p, q, K, match):
    with pytest.raises(ValueError, match=match):
        bound_B(p, q, K)


def test_bad_inputs_other_functions():
    with pytest.raises(ValueError, match="K must be"):
        expected_tau_kseq_gbv(GOOD, GOOD, 0)
    with pytest.raises(ValueError, match="q_block"):
        expected_tau_gbv(GOOD, np.full((2, 2), 0.3))
    with pytest.raises(ValueError, match="block: contains NaN"):
        prefix_marginals(np.array([np.nan, 1.0]))
    with pytest.raises(ValueError, match="p: contains negative"):
        alpha_star([1.2, -0.2], [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="q: probabilities are not normalised"):
        alpha_star([0.5, 0.5], [0.5, 0.6], 2)
    with pytest.raises(ValueError, match="same shape"):
        alpha_star([0.5, 0.5], [1 / 3, 1 / 3, 1 / 3], 2)
    with pytest.raises(ValueError, match=r"p: expected shape \[V\]"):
        alpha_star(GOOD, GOOD, 2)
    with pytest.raises(ValueError, match="K must be"):
        alpha_star([0.5, 0.5], [0.5, 0.5], 0)
