"""The prefix-match ceiling (oracle/prefix_match.py, docs/bounds.md §6): exact values on the toy,
above the global block OT and every lossless rule's exact P(τ ≥ i), and the text estimator's
expectation equal to the ceiling by enumeration."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import numpy as np
import pytest

from spectr_gbv.oracle.bounds import bound_B
from spectr_gbv.oracle.prefix_match import drafted_probability, prefix_match_bound, prefix_match_bound_estimate
from spectr_gbv.oracle.programs import global_ot
from spectr_gbv.reference.decode import Decoder
from spectr_gbv.reference.exact import iteration_law
from spectr_gbv.reference.models import ContextFree, RandomModel
from spectr_gbv.reference.rules import RULES, registry

TOY_P = ContextFree([2 / 3, 1 / 3])
TOY_Q = ContextFree([1 / 3, 2 / 3])


def test_toy_exact_values():
    # K = 2, L = 1: min(1/3, 8/9) + min(2/3, 5/9) = 8/9 = α* (docs/toy.md);
    # depth 2: aa 1/9, ab 18/81, ba 18/81, bb min(36/81, 17/81) = 17/81 -> 62/81
    u = prefix_match_bound(TOY_P.block_law(2), TOY_Q.block_law(2), 2)
    assert u[0] == pytest.approx(float(F(8, 9)), abs=1e-12)
    assert u[1] == pytest.approx(float(F(62, 81)), abs=1e-12)
    assert u.sum() == pytest.approx(float(F(134, 81)), abs=1e-12)
    ot = global_ot(TOY_P.block_law(2), TOY_Q.block_law(2), 2, return_coupling=False).optimum
    assert ot == pytest.approx(float(F(134, 81)), abs=1e-7)  # tight on the toy


TOY_U = {(1, 1): F(2, 3), (1, 2): F(4, 3), (1, 3): F(50, 27), (2, 1): F(8, 9), (2, 2): F(134, 81),
         (2, 3): F(1760, 729), (3, 1): F(1), (3, 2): F(1351, 729)}  # docs/toy.md §1


@pytest.mark.parametrize("K,L", sorted(TOY_U))
def test_toy_table(K, L):
    assert prefix_match_bound(TOY_P.block_law(L), TOY_Q.block_law(L), K).sum() == pytest.approx(
        float(TOY_U[(K, L)]), abs=1e-12)


def test_strictly_above_the_global_ot_on_the_toy_at_K2_L3():
    ot = global_ot(TOY_P.block_law(3), TOY_Q.block_law(3), 2, return_coupling=False).optimum
    assert ot == pytest.approx(1708 / 729, abs=1e-7)
    assert float(TOY_U[(2, 3)]) - ot > 0.07


@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_K1_is_B1(L, seed):
    p = RandomModel(3, seed, 0.7).block_law(L)
    q = RandomModel(3, seed + 100, 0.7).block_law(L)
    assert prefix_match_bound(p, q, 1).sum() == pytest.approx(bound_B(p, q, 1), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_above_global_ot_and_equal_at_K1(seed):
    p = RandomModel(3, seed, 0.7).block_law(2)
    q = RandomModel(3, seed + 100, 0.7).block_law(2)
    ot2 = global_ot(p, q, 2, return_coupling=False).optimum
    u2 = prefix_match_bound(p, q, 2).sum()
    assert u2 >= ot2 - 1e-7
    assert prefix_match_bound(p, q, 1).sum() == pytest.approx(global_ot(p, q, 1, return_coupling=False).optimum,
                                                             abs=1e-7)
    # non-decreasing in K, at most L
    u = [prefix_match_bound(p, q, K).sum() for K in (1, 2, 3, 8)]
    assert all(a <= b + 1e-15 for a, b in zip(u, u[1:])) and u[-1] <= 2 + 1e-12


LOSSLESS = registry.names(lossless=True)


@pytest.mark.parametrize("rule", LOSSLESS)
@pytest.mark.parametrize("models", ["toy", "random"])
def test_every_lossless_rule_below_the_ceiling_at_every_depth(rule, models):
    if models == "toy":
        draft, target = TOY_P, TOY_Q
    else:
        draft, target = RandomModel(3, 5, 0.8), RandomModel(3, 6, 0.8)
    L = 2
    K = 1 if registry.is_single_draft(rule) else 2
    law = iteration_law(RULES[rule], Decoder(draft, target, K, L))
    survival = [sum(pr for v, pr in law.items() if v.tau >= i) for i in range(1, L + 1)]
    u = prefix_match_bound(draft.block_law(L), target.block_law(L), K)
    assert np.all(np.array(survival) <= u + 1e-12), (rule, survival, u)


def test_gbv_attains_the_ceiling_at_K1_and_bv_does_not():
    """At K = 1 the ceiling is GBV's one-iteration E[τ] (it modifies later targets); BV, the
    best rule that does not, is strictly below on this instance."""
    draft, target = RandomModel(3, 5, 0.8), RandomModel(3, 6, 0.8)
    u = prefix_match_bound(draft.block_law(3), target.block_law(3), 1).sum()
    e_tau = {}
    for rule in ("gbv", "bv"):
        law = iteration_law(RULES[rule], Decoder(draft, target, 1, 3))
        e_tau[rule] = sum(pr * v.tau for v, pr in law.items())
    assert e_tau["gbv"] == pytest.approx(u, abs=1e-12)
    assert e_tau["bv"] < u - 1e-3


def survival_at_iteration_starts(rule, draft, target, K, L, n_tokens):
    """context → (P(an iteration starts after it), P(τ ≥ i | it does), i = 1..L), exactly, over
    the iterations of a generation that start before n_tokens tokens are out (Algorithm 2
    carried; reference.exact.generation_law's walk)."""
    from collections import defaultdict

    from spectr_gbv.reference.decode import DecodeState

    decoder = Decoder(draft, target, K, L)
    frontier = {0: {DecodeState().key(): [DecodeState(), 1.0]}}
    start, reach = defaultdict(float), defaultdict(lambda: np.zeros(L))
    while frontier:
        for state, prob in frontier.pop(min(frontier)).values():
            start[state.tokens] += prob
            for verdict, pr in iteration_law(RULES[rule], decoder, state).items():
                reach[state.tokens][:verdict.tau] += prob * pr
                nxt = decoder.advance(state, verdict)
                if len(nxt.tokens) < n_tokens:
                    slot = frontier.setdefault(len(nxt.tokens), {}).setdefault(nxt.key(), [nxt, 0.0])
                    slot[1] += prob * pr
            decoder.clear_cache()
    return {c: (start[c], reach[c] / start[c]) for c in start}


def ceiling_at(draft, target, context, K, L):
    return prefix_match_bound(draft.block_law(L, context), target.block_law(L, context), K)


def test_ceiling_given_the_context_at_an_iteration_start():
    """docs/bounds.md §6: given the context where an iteration starts, u_i bounds P(τ ≥ i) at every
    iteration of a rule that leaves later targets untouched (its output from there has the
    target's law) and at the first iteration of any lossless rule, but not at the later
    iterations of a rule that modifies later targets: GBV, K = 1, L = 2, after the context
    (1, 0, 0, 0) exceeds u_2 (P(τ ≥ 2) 0.13893 against 0.13834)."""
    from spectr_gbv.proofs_check.instances import random_instance

    inst = random_instance(2, 1, 2, seed=3, concentration=0.5)
    draft, target = inst.draft, inst.target
    bv = survival_at_iteration_starts("bv", draft, target, 1, 2, 5)
    gbv = survival_at_iteration_starts("gbv", draft, target, 1, 2, 5)
    assert set(bv) == set(gbv) and len(gbv) > 20  # every context of fewer than 5 tokens the walk reaches
    for context, (_, survival) in bv.items():
        assert np.all(survival <= ceiling_at(draft, target, context, 1, 2) + 1e-12), context
    np.testing.assert_allclose(gbv[()][1], ceiling_at(draft, target, (), 1, 2), rtol=0, atol=1e-12)
    above = {c: survival - ceiling_at(draft, target, c, 1, 2) for c, (_, survival) in gbv.items()}
    worst = max(above, key=lambda c: above[c].max())
    assert worst == (1, 0, 0, 0) and gbv[worst][0] > 0.02
    assert above[worst][1] == pytest.approx(0.13893435 - 0.13833904, abs=2e-8)


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("L", [1, 2, 3])
def test_estimator_expectation_is_the_ceiling(K, L):
    """Σ over every target block s of q(s)·estimate(s) = u, exactly: the estimator is unbiased."""
    draft, target = RandomModel(3, 11, 0.6, zero_prob=0.2), RandomModel(3, 12, 0.6)
    expected = np.zeros(L)
    for s in itertools.product(range(3), repeat=L):
        q_tok = np.array([target.conditional(s[:i])[s[i]] for i in range(L)])
        if np.any(q_tok == 0):
            continue
        p_tok = np.array([draft.conditional(s[:i])[s[i]] for i in range(L)])
        est = prefix_match_bound_estimate(q_tok, p_tok, [L], K, L)
        assert est.shape == (1, L)
        expected += np.prod(q_tok) * est[0]
    u = prefix_match_bound(draft.block_law(L), target.block_law(L), K)
    np.testing.assert_allclose(expected, u, rtol=0, atol=1e-12)


def test_estimator_hand_values_and_windows():
    # depth 1: (1 − 0.75^2) / 0.5 = 0.875; depth 2: P = Q = 0.25 -> 0.4375 / 0.25 > 1 -> 1
    est = prefix_match_bound_estimate([0.5, 0.5], [0.25, 1.0], [2], K=2, L=2)
    np.testing.assert_allclose(est, [[0.875, 1.0]], rtol=0, atol=1e-15)
    rng = np.random.default_rng(0)
    q, p = rng.uniform(0.1, 1, 10), rng.uniform(0, 1, 10)
    assert prefix_match_bound_estimate(q, p, [10], 1, 3).shape == (8, 3)
    split = prefix_match_bound_estimate(q, p, [4, 6], 1, 3)
    assert split.shape == (2 + 4, 3)
    # windows never cross the boundary: the second segment's first window starts at position 4
    assert split[2, 0] == pytest.approx(min(1.0, p[4] / q[4]), abs=1e-15)
    # texts shorter than L contribute no window
    assert prefix_match_bound_estimate(q, p, [2, 8], 1, 3).shape == (6, 3)


def test_drafted_probability_keeps_small_values_and_checks_its_arguments():
    assert drafted_probability(1e-12, 3) == pytest.approx(3e-12, rel=1e-9)
    assert drafted_probability(1.0, 2) == 1.0 and drafted_probability(0.0, 2) == 0.0
    for p, K, match in ((2.0, 1, "p: probabilities must be finite"), (float("nan"), 1, "p: "),
                        (-0.5, 1, "p: "), (0.5, -1, "K must be"), (0.5, "2", "K must be"),
                        (0.5, 0.5, "K must be"), (True, 1, "p: expected real")):
        with pytest.raises(ValueError, match=match):
            drafted_probability(p, K)


def test_estimator_keeps_ratios_of_products_that_underflow():
    """Q = (1e-200)^2 and P = (1e-250)^2 underflow a float64; in logs the estimate is still
    min(1, K·P/Q) = 4e-100 at depth 2, and 0 where the draft gives the token no mass."""
    est = prefix_match_bound_estimate(np.full(3, 1e-200), np.full(3, 1e-250), [3], K=4, L=2)
    np.testing.assert_allclose(est[:, 0], 4e-50, rtol=1e-12)
    np.testing.assert_allclose(est[:, 1], 4e-100, rtol=1e-12)
    zero = prefix_match_bound_estimate(np.full(3, 1e-200), np.zeros(3), [3], K=1, L=2)
    np.testing.assert_array_equal(zero, 0.0)
    rng = np.random.default_rng(4)
    est = prefix_match_bound_estimate(rng.uniform(1e-3, 1, 40), rng.uniform(0, 1, 40), [40], K=3, L=6)
    # each window's estimate lies in [0, 1]; only its expectation is non-increasing in depth
    assert np.all((est >= 0) & (est <= 1)) and np.any(np.diff(est, axis=1) > 0.1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(q_token=[0.5, np.nan]), "q_token: contains NaN"),
    (dict(q_token=[0.5, 0.0]), "q_token: a token of target probability 0 at position 1"),
    (dict(p_token=[0.5, 1.5]), r"p_token: probabilities must lie in \[0, 1\]"),
    (dict(p_token=[0.5]), "p_token: length 1 differs"),
    (dict(segments=[1]), "segments: .* sum to T = 2"),
    (dict(segments=[0, 2]), "segments"),
    (dict(K=0), r"K must be an integer in \[1, 2\*\*53\], got 0"),
    (dict(L=0), "L must be an integer in"),
    (dict(K=None), "K must be an integer in"),
    (dict(K=10**400), "K must be an integer in"),
    (dict(K=float("nan")), "K must be an integer in"),
    (dict(K=2.5), "K must be an integer in"),
    (dict(K=True), "K must be an integer in"),
    (dict(L=3), "L = 3 exceeds every text's length"),
    (dict(segments=[1.5, 0.5]), "segments: lengths must be integers >= 1"),
    (dict(segments=[True, True]), "segments: lengths must be integers >= 1"),
    (dict(segments=["2"]), "segments: lengths must be integers >= 1"),
    (dict(segments=2), "segments: expected a sequence of text lengths"),
    (dict(segments={2: 1}), "segments: expected a sequence of text lengths"),
    (dict(q_token=[[0.5, 0.5]]), "q_token: expected a non-empty 1-d array"),
])
def test_estimator_errors(kwargs, match):
    args = dict(q_token=[0.5, 0.5], p_token=[0.5, 0.5], segments=[2], K=2, L=2) | kwargs
    with pytest.raises(ValueError, match=match):
        prefix_match_bound_estimate(**args)


def test_exact_bound_errors():
    with pytest.raises(ValueError, match="K must be"):
        prefix_match_bound(TOY_P.block_law(1), TOY_Q.block_law(1), 0)
    with pytest.raises(ValueError):
        prefix_match_bound(TOY_P.block_law(1), TOY_Q.block_law(2), 1)
