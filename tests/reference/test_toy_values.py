"""Every exact value of docs/toy.md on the toy: Ω = {a, b}, p = (2/3, 1/3), q = (1/3, 2/3)."""

from fractions import Fraction

import numpy as np
import pytest

from spectr_gbv.oracle.bounds import alpha_star, bound_B
from spectr_gbv.proofs_check.instances import toy
from spectr_gbv.reference.decode import Decoder
from spectr_gbv.reference.exact import expected_tau, generation_law, iteration_law
from spectr_gbv.reference.kseq import rho_star
from spectr_gbv.reference.models import ContextFree
from spectr_gbv.reference.rules import RULES, GreedyBlockVerification, SpecTrGBV

P = ContextFree([2 / 3, 1 / 3])
Q = ContextFree([1 / 3, 2 / 3])

TABLE = [
    # rule, K, L, exact E[τ]
    ("sd", 1, 1, Fraction(2, 3)), ("sd", 1, 2, Fraction(10, 9)), ("sd", 1, 3, Fraction(38, 27)),
    ("bv", 1, 1, Fraction(2, 3)), ("bv", 1, 2, Fraction(11, 9)), ("bv", 1, 3, Fraction(5, 3)),
    ("gbv", 1, 1, Fraction(2, 3)), ("gbv", 1, 2, Fraction(4, 3)), ("gbv", 1, 3, Fraction(50, 27)),
    ("spectr", 2, 1, 0.811420), ("spectr", 2, 2, 1.405487), ("spectr", 2, 3, 1.821025),
    ("kseq_gbv", 2, 1, 0.811420), ("kseq_gbv", 2, 2, 1.526337), ("kseq_gbv", 2, 3, 2.157441),
    ("spectr_gbv", 2, 2, 1.403435),
    # the multi-draft rules that leave later targets untouched (docs/toy.md §2)
    ("kseq_bv", 2, 1, 0.811420), ("kseq_bv", 2, 2, 1.463477), ("kseq_bv", 2, 3, 2.020507),
    ("kseq_bv", 3, 2, 1.605405),
    ("traversal", 2, 1, Fraction(7, 9)), ("traversal", 2, 2, Fraction(115, 81)),
    ("traversal", 2, 3, Fraction(1415, 729)), ("traversal", 3, 1, Fraction(23, 27)),
    ("traversal", 3, 2, Fraction(1136, 729)),
    ("mdbv", 2, 1, Fraction(8, 9)), ("mdbv", 2, 2, Fraction(131, 81)), ("mdbv", 2, 3, Fraction(1615, 729)),
    ("mdbv", 3, 1, Fraction(1)), ("mdbv", 3, 2, Fraction(449, 243)),
]


@pytest.mark.parametrize("rule,K,L,value", TABLE)
def test_expected_tau_matches_spec_table(rule, K, L, value):
    got = expected_tau(RULES[rule], P, Q, K, L)
    if isinstance(value, Fraction):
        assert got == pytest.approx(float(value), abs=1e-12)
    else:  # docs/toy.md gives six decimals
        assert got == pytest.approx(value, abs=5e-7)


@pytest.mark.parametrize("K,L,value", [
    (1, 1, Fraction(2, 3)), (1, 2, Fraction(4, 3)), (1, 3, Fraction(50, 27)),
    (2, 1, Fraction(5, 6)), (2, 2, Fraction(19, 12)), (2, 3, Fraction(485, 216)),
    (3, 1, Fraction(11, 12)), (3, 2, Fraction(83, 48)), (3, 3, Fraction(4277, 1728)),
])
def test_bound_B_table(K, L, value):
    assert bound_B(P.block_law(L), Q.block_law(L), K) == pytest.approx(float(value), abs=1e-12)


def test_gbv_equals_B1():
    for L in (1, 2, 3):
        assert expected_tau(RULES["gbv"], P, Q, 1, L) == pytest.approx(
            bound_B(P.block_law(L), Q.block_law(L), 1), abs=1e-12)


def test_rho_star_closed_form():
    assert rho_star(P.conditional(()), Q.conditional(()), 2) == pytest.approx((5 + np.sqrt(13)) / 6, abs=1e-14)


def test_released_spectr_gbv_first_token_defect():
    """docs/rules.md §2.5: released rule, K = L = 2: P(first token = a) = 4125/13328, not 1/3."""
    law = iteration_law(RULES["spectr_gbv"], Decoder(P, Q, 2, 2))
    p_a = sum(pr for v, pr in law.items() if v.tokens[0] == 0)
    assert p_a == pytest.approx(4125 / 13328, abs=1e-12)
    assert abs(p_a - 1 / 3) > 0.02


@pytest.mark.parametrize("residual", ["released", "consistent"])
@pytest.mark.parametrize("algorithm2", [False, True])
def test_spectr_gbv_lossy_first_token_every_variant(residual, algorithm2):
    law = iteration_law(SpecTrGBV(residual, algorithm2), Decoder(P, Q, 2, 2))
    p_a = sum(pr for v, pr in law.items() if v.tokens[0] == 0)
    assert abs(p_a - 1 / 3) > 1e-3


def test_gbv_without_algorithm2_second_token_defect():
    """docs/rules.md §3: without Algorithm 2, GBV at L = 2 gives P(b, a) = 1/3 instead of 2/9."""
    wrong = generation_law(GreedyBlockVerification(algorithm2=False), P, Q, 1, 2, 2).token_law
    right = generation_law(RULES["gbv"], P, Q, 1, 2, 2).token_law
    assert wrong[(1, 0)] == pytest.approx(1 / 3, abs=1e-12)
    assert right[(1, 0)] == pytest.approx(2 / 9, abs=1e-12)


def test_spectr_gbv_k1_equals_gbv():
    """docs/rules.md §2.4: GBV is the K = 1 case of the released SpecTr-GBV code (same law to 1e-12;
    branches of probability ~1e-17 may exist in one and not the other through rounding)."""
    for L in (1, 2, 3):
        la, lb = {}, {}
        for law, out in ((iteration_law(RULES["spectr_gbv"], Decoder(P, Q, 1, L)), la),
                         (iteration_law(GreedyBlockVerification(algorithm2=False), Decoder(P, Q, 1, L)), lb)):
            for v, pr in law.items():
                out[(v.tau, v.tokens)] = out.get((v.tau, v.tokens), 0.0) + pr
        for key in set(la) | set(lb):
            assert la.get(key, 0.0) == pytest.approx(lb.get(key, 0.0), abs=1e-12)


def test_traversal_and_mdbv_are_not_kseq_at_L1():
    """At L = 1 Traversal is recursive rejection sampling without replacement over the distinct
    drafted tokens (7/9 on the toy) and MDBV the better of class-K-SEQ and count-priority (here
    α* = 8/9, the optimum); K-SEQ gets 0.811420."""
    assert expected_tau(RULES["spectr"], P, Q, 2, 1) == pytest.approx(0.811420, abs=5e-7)
    assert expected_tau(RULES["traversal"], P, Q, 2, 1) == pytest.approx(7 / 9, abs=1e-12)
    mdbv = expected_tau(RULES["mdbv"], P, Q, 2, 1)
    assert mdbv == pytest.approx(alpha_star(P.conditional(()), Q.conditional(()), 2), abs=1e-12)
    assert mdbv == pytest.approx(8 / 9, abs=1e-12)


def test_mdbv_reaches_the_lp_on_the_toy():
    """Toy K = L = 2: MDBV = no-modification LP = 131/81; at L = 3 it is 6/729 below 1621/729."""
    from helpers.no_modification_lp import lp_optimum

    assert lp_optimum(toy(2, 2)) == pytest.approx(131 / 81, abs=1e-9)
    assert lp_optimum(toy(2, 3)) == pytest.approx(1621 / 729, abs=1e-9)
    assert expected_tau(RULES["mdbv"], P, Q, 2, 3) == pytest.approx(1621 / 729 - 6 / 729, abs=1e-12)
