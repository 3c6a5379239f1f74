"""oracle.programs: the cvxpy programs against docs/toy.md toy values, the closed forms of
oracle.bounds, an independent BV enumeration, and literal dense re-statements of the LPs."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import cvxpy as cp
import numpy as np
import pytest

from spectr_gbv.oracle.bounds import alpha_star, bound_B, expected_tau_kseq_gbv, prefix_marginals
from spectr_gbv.oracle.programs import cic_block_program, cic_program, global_ot, no_modification_lp
from spectr_gbv.reference.models import ContextFree, RandomModel

LP_TOL = 1e-9  # HiGHS simplex, feasibility tolerances 1e-9
CONIC_TOL = 1e-6  # CLARABEL interior point, tolerances 1e-8

TOY_P = ContextFree([2 / 3, 1 / 3])
TOY_Q = ContextFree([1 / 3, 2 / 3])


def toy(L):
    return TOY_P.block_law(L), TOY_Q.block_law(L)


def random_pair(V, L, seed, concentration=0.7, zero_prob=0.0):
    p = RandomModel(V, seed, concentration, zero_prob).block_law(L)
    q = RandomModel(V, seed + 1000, concentration, zero_prob).block_law(L)
    return p, q


def optimum(result):
    assert result.status == "optimal", result
    return result.optimum


# ---------------------------------------------------------------------------------------
# Independent references (written here from docs/, sharing no code with oracle.programs)
# ---------------------------------------------------------------------------------------


def bv_expected_tau(p_block, q_block):
    """E[τ] of BV (docs/rules.md §2.3, Sun et al. Algorithm 2) by enumerating the draft block."""
    L = p_block.ndim
    V = p_block.shape[0]
    Pp = [np.ones(())] + prefix_marginals(p_block)
    Pq = [np.ones(())] + prefix_marginals(q_block)
    total = 0.0
    for x in itertools.product(range(V), repeat=L):
        if p_block[x] == 0:
            continue
        acc, h = 1.0, []
        for i in range(1, L + 1):
            z, prev = x[:i], x[: i - 1]
            p_cond = Pp[i][z] / Pp[i - 1][prev]
            q_cond = Pq[i][z] / Pq[i - 1][prev] if Pq[i - 1][prev] > 0 else 0.0
            acc = min(1.0, acc * q_cond / p_cond)
            if i < L:
                p_next = Pp[i + 1][z] / Pp[i][z]
                q_next = Pq[i + 1][z] / Pq[i][z] if Pq[i][z] > 0 else np.zeros(V)
                Z = np.maximum(acc * q_next - p_next, 0).sum()
                h.append(1.0 if Z + 1 - acc == 0 else Z / (Z + 1 - acc))
            else:
                h.append(acc)
        for i in range(1, L + 1):  # τ = the last i with η_i ≤ h_i
            total += p_block[x] * i * h[i - 1] * np.prod([1 - hj for hj in h[i:]])
    return total


def literal_lp(p_block, q_block, K, no_modification):
    """The LPs exactly as docs/bounds.md §4.3–§4.4 word them: dense variables π(x^1..x^K, s, t) over
    ordered draft tuples and the full vocabulary, t ≤ max_k LCP(x^k, s); with
    ``no_modification`` the law of (t, s) must factor as g_t(s_≤t+1)·q(s_>t+1 | s_≤t+1)."""
    V, L = p_block.shape[0], p_block.ndim
    blocks = list(itertools.product(range(V), repeat=L))
    N = len(blocks)
    p, q = p_block.ravel(), q_block.ravel()

    def lcp(x, s):
        n = 0
        while n < L and x[n] == s[n]:
            n += 1
        return n

    tuples = list(itertools.product(range(N), repeat=K))
    best = np.array([[max(lcp(blocks[x], blocks[s]) for x in T) for s in range(N)] for T in tuples])
    pi = cp.Variable((len(tuples) * N, L + 1), nonneg=True)
    allowed = (np.arange(L + 1)[None, :] <= best.reshape(-1, 1)).astype(float)
    cons = [cp.multiply(1 - allowed, pi) == 0]
    by_tuple = cp.reshape(cp.sum(pi, axis=1), (len(tuples), N), order="C")
    cons += [cp.sum(by_tuple, axis=1) == [np.prod([p[x] for x in T]) for T in tuples]]
    cons += [cp.sum(by_tuple, axis=0) == q]
    if no_modification:
        for t in range(L - 1):
            law_ts = cp.reshape(pi[:, t], (len(tuples), N), order="C")
            law_ts = cp.sum(law_ts, axis=0)  # P(t, s) over s
            q_y = prefix_marginals(q_block)[t].ravel()
            G = np.zeros((N, V ** (t + 1)))
            for s, blk in enumerate(blocks):
                y = np.ravel_multi_index(blk[: t + 1], (V,) * (t + 1))
                if q_y[y] > 0:
                    G[s, y] = q[s] / q_y[y]
            g = cp.Variable(V ** (t + 1))
            cons.append(law_ts == G @ g)
    prob = cp.Problem(cp.Maximize(cp.sum(pi @ np.arange(L + 1.0))), cons)
    prob.solve(solver="HIGHS")
    assert prob.status == "optimal"
    return prob.value


# ---------------------------------------------------------------------------------------
# Toy values (docs/toy.md)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("K", [1, 2, 3])
def test_cic_equals_B_on_toy(K, L):
    p, q = toy(L)
    assert optimum(cic_program(p, q, K)) == pytest.approx(bound_B(p, q, K), abs=CONIC_TOL)


def test_cic_toy_exact_values():
    p, q = toy(2)
    assert optimum(cic_program(p, q, 2)) == pytest.approx(19 / 12, abs=CONIC_TOL)
    assert optimum(cic_program(p, q, 3)) == pytest.approx(83 / 48, abs=CONIC_TOL)


def test_cic_block_toy_value():
    # docs/bounds.md §4.2: below 19/12.  The value is 31/20: at K = 2 the program is a convex QP,
    # which HiGHS solves by active set to machine precision.
    p, q = toy(2)
    assert optimum(cic_block_program(p, q, 2)) == pytest.approx(31 / 20, abs=CONIC_TOL)
    assert optimum(cic_block_program(p, q, 2, solver="HIGHS")) == pytest.approx(31 / 20, abs=1e-9)
    assert 31 / 20 < 19 / 12 - 0.03


TOY_LP = {
    # (program, K, L): exact value.  docs/toy.md rows; K = 1 rows: B(1, L) = GBV and BV.
    (global_ot, 1, 1): F(2, 3),
    (global_ot, 1, 2): F(4, 3),
    (global_ot, 1, 3): F(50, 27),
    (global_ot, 2, 1): F(8, 9),
    (global_ot, 2, 2): F(134, 81),
    (global_ot, 3, 1): F(1),  # α* at K = 3
    (no_modification_lp, 1, 1): F(2, 3),
    (no_modification_lp, 1, 2): F(11, 9),
    (no_modification_lp, 1, 3): F(5, 3),
    (no_modification_lp, 2, 1): F(8, 9),
    (no_modification_lp, 2, 2): F(131, 81),
}


@pytest.mark.parametrize("program,K,L", sorted(TOY_LP, key=lambda k: (k[0].__name__, k[1], k[2])))
@pytest.mark.parametrize("symmetric", [True, False])
def test_lp_toy_exact(program, K, L, symmetric):
    p, q = toy(L)
    assert optimum(program(p, q, K, symmetric=symmetric)) == pytest.approx(
        float(TOY_LP[(program, K, L)]), abs=LP_TOL
    )


# Values found by this module on the toy (also listed in docs/toy.md §1); pinned so that a change shows.
# Each is also reproduced by literal_lp in test_lp_equals_literal_statement.
TOY_LP_FOUND = {
    (global_ot, 3, 2): F(1351, 729),
    (no_modification_lp, 3, 2): F(1351, 729),
    (global_ot, 2, 3): F(1708, 729),
    (no_modification_lp, 2, 3): F(1621, 729),
}


@pytest.mark.parametrize("program,K,L", sorted(TOY_LP_FOUND, key=lambda k: (k[0].__name__, k[1], k[2])))
def test_lp_toy_found_values(program, K, L):
    p, q = toy(L)
    assert optimum(program(p, q, K)) == pytest.approx(float(TOY_LP_FOUND[(program, K, L)]), abs=LP_TOL)


# ---------------------------------------------------------------------------------------
# Random models
# ---------------------------------------------------------------------------------------

CASES = [(V, L, seed, zp) for V in (2, 3) for L in (1, 2) for seed in (0, 1) for zp in (0.0, 0.35)]


@pytest.mark.parametrize("V,L,seed,zero_prob", CASES)
def test_cic_equals_B_random(V, L, seed, zero_prob):
    p, q = random_pair(V, L, seed, zero_prob=zero_prob)
    for K in (1, 2, 3):
        cic = optimum(cic_program(p, q, K))
        assert cic == pytest.approx(bound_B(p, q, K), abs=CONIC_TOL)
        block = optimum(cic_block_program(p, q, K))
        assert block <= cic + CONIC_TOL
        if K == 1 or L == 1:  # the two readings coincide
            assert block == pytest.approx(cic, abs=CONIC_TOL)


@pytest.mark.parametrize("V,L,seed,zero_prob", CASES)
def test_lp_relations_random(V, L, seed, zero_prob):
    p, q = random_pair(V, L, seed, zero_prob=zero_prob)
    previous_nomod = 0.0
    for K in (1, 2, 3):
        glob = optimum(global_ot(p, q, K))
        nomod = optimum(no_modification_lp(p, q, K))
        B = bound_B(p, q, K)
        assert glob >= B - LP_TOL
        assert glob >= expected_tau_kseq_gbv(p, q, K) - LP_TOL  # a lossless K-draft rule
        assert nomod <= glob + LP_TOL
        assert nomod >= previous_nomod - LP_TOL  # a K-draft rule can ignore one draft
        previous_nomod = nomod
        if K == 1:
            assert glob == pytest.approx(B, abs=LP_TOL)
            assert nomod == pytest.approx(bv_expected_tau(p, q), abs=LP_TOL)
        if L == 1:
            assert glob == pytest.approx(alpha_star(p.ravel(), q.ravel(), K), abs=LP_TOL)
            assert nomod == pytest.approx(glob, abs=LP_TOL)


@pytest.mark.parametrize("seed", range(3))
def test_no_modification_K1_is_bv_at_L3(seed):
    p, q = random_pair(2, 3, seed, zero_prob=0.2 * seed)
    assert optimum(no_modification_lp(p, q, 1)) == pytest.approx(bv_expected_tau(p, q), abs=LP_TOL)
    assert optimum(global_ot(p, q, 1)) == pytest.approx(bound_B(p, q, 1), abs=LP_TOL)


@pytest.mark.parametrize(
    "V,L,K,seed", [(2, 2, 2, 0), (2, 2, 3, 1), (3, 2, 2, 2), (2, 3, 2, 3), (2, 3, 1, 4)]
)
def test_lp_equals_literal_statement(V, L, K, seed):
    p, q = random_pair(V, L, seed, zero_prob=0.25 if seed % 2 else 0.0)
    for symmetric in (True, False):
        assert optimum(global_ot(p, q, K, symmetric=symmetric)) == pytest.approx(
            literal_lp(p, q, K, no_modification=False), abs=LP_TOL
        )
        assert optimum(no_modification_lp(p, q, K, symmetric=symmetric)) == pytest.approx(
            literal_lp(p, q, K, no_modification=True), abs=LP_TOL
        )


@pytest.mark.parametrize("program,K,L", sorted(TOY_LP_FOUND, key=lambda k: (k[0].__name__, k[1], k[2])))
def test_literal_statement_toy_found_values(program, K, L):
    p, q = toy(L)
    value = literal_lp(p, q, K, no_modification=program is no_modification_lp)
    assert value == pytest.approx(float(TOY_LP_FOUND[(program, K, L)]), abs=LP_TOL)


@pytest.mark.parametrize("V,L,seed,zero_prob", CASES + [(2, 3, 5, 0.0), (4, 2, 6, 0.2)])
def test_global_ot_pot_equals_highs(V, L, seed, zero_prob):
    pytest.importorskip("ot")
    p, q = random_pair(V, L, seed, zero_prob=zero_prob)
    for K in (1, 2, 3):
        assert optimum(global_ot(p, q, K, solver="POT")) == pytest.approx(
            optimum(global_ot(p, q, K)), abs=LP_TOL
        )


def test_global_ot_pot_toy():
    pytest.importorskip("ot")
    p, q = toy(2)
    assert optimum(global_ot(p, q, 2, solver="POT")) == pytest.approx(134 / 81, abs=1e-12)
    p, q = toy(1)
    assert optimum(global_ot(p, q, 2, solver="POT")) == pytest.approx(8 / 9, abs=1e-12)


# ---------------------------------------------------------------------------------------
# Couplings
# ---------------------------------------------------------------------------------------


def _lcp_table(V, L):
    blocks = np.array(list(itertools.product(range(V), repeat=L)))
    eq = np.cumprod(blocks[:, None, :] == blocks[None, :, :], axis=2)
    return eq.sum(axis=2)  # [N, N]


def _product_law(p, K):
    law = np.ones(())
    for _ in range(K):
        law = np.multiply.outer(law, p.ravel())
    return law.ravel()


@pytest.mark.parametrize("symmetric,solver", [(True, "HIGHS"), (False, "HIGHS"), (True, "POT")])
@pytest.mark.parametrize("V,L,K,seed", [(2, 2, 2, 0), (3, 2, 2, 1), (2, 3, 3, 2), (2, 2, 3, 3)])
def test_global_ot_coupling(V, L, K, seed, symmetric, solver):
    if solver == "POT":
        pytest.importorskip("ot")
    p, q = random_pair(V, L, seed, zero_prob=0.3 if seed % 2 else 0.0)
    res = global_ot(p, q, K, symmetric=symmetric, solver=solver)
    assert res.status == "optimal"
    N = V**L
    assert res.coupling.shape == (V,) * (L * (K + 1))
    pi = res.coupling.reshape(N**K, N)
    assert pi.min() >= -1e-9
    np.testing.assert_allclose(pi.sum(axis=1), _product_law(p, K), atol=1e-9)
    np.testing.assert_allclose(pi.sum(axis=0), q.ravel(), atol=1e-9)
    lcp = _lcp_table(V, L)
    best = np.zeros((N,) * K + (N,), dtype=int)
    for k in range(K):
        shape = [1] * (K + 1)
        shape[k], shape[K] = N, N
        best = np.maximum(best, lcp.reshape(shape))
    assert (pi * best.reshape(N**K, N)).sum() == pytest.approx(res.optimum, abs=1e-9)
    if symmetric:  # exchangeable drafts: swapping x^1 and x^2 leaves the coupling unchanged
        full = res.coupling.reshape((N,) * (K + 1))
        np.testing.assert_allclose(full, np.swapaxes(full, 0, 1), atol=1e-12)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("V,L,K,seed", [(2, 2, 2, 0), (3, 2, 2, 1), (2, 3, 2, 2), (2, 3, 1, 3)])
def test_no_modification_coupling(V, L, K, seed, symmetric):
    p, q = random_pair(V, L, seed, zero_prob=0.3 if seed % 2 else 0.0)
    res = no_modification_lp(p, q, K, symmetric=symmetric)
    N = V**L
    assert res.coupling.shape == (V,) * (L * (K + 1)) + (L + 1,)
    pi = res.coupling.reshape(N**K, N, L + 1)
    assert pi.min() >= -1e-9
    np.testing.assert_allclose(pi.sum(axis=(1, 2)), _product_law(p, K), atol=1e-9)
    np.testing.assert_allclose(pi.sum(axis=(0, 2)), q.ravel(), atol=1e-9)
    assert (pi * np.arange(L + 1)).sum() == pytest.approx(res.optimum, abs=1e-9)
    lcp = _lcp_table(V, L)
    best = np.zeros((N,) * K + (N,), dtype=int)
    for k in range(K):
        shape = [1] * (K + 1)
        shape[k], shape[K] = N, N
        best = np.maximum(best, lcp.reshape(shape))
    forbidden = np.arange(L + 1)[None, None, :] > best.reshape(N**K, N)[:, :, None]
    assert np.abs(pi[forbidden]).max(initial=0.0) <= 1e-9
    # the law of (t, s) factors as g_t(s_≤t+1)·q(s_>t+1 | s_≤t+1) for t ≤ L−2
    law_ts = pi.sum(axis=0)  # [N, L+1]
    for t in range(L - 1):
        y = np.arange(N) // V ** (L - t - 1)
        g = np.bincount(y, weights=law_ts[:, t], minlength=V ** (t + 1))
        q_y = np.bincount(y, weights=q.ravel(), minlength=V ** (t + 1))
        expected = np.where(q_y[y] > 0, g[y] * q.ravel() / np.where(q_y[y] > 0, q_y[y], 1), 0)
        np.testing.assert_allclose(law_ts[:, t], expected, atol=1e-9)


@pytest.mark.parametrize("program", [cic_program, cic_block_program])
def test_cic_coupling(program):
    V, L, K = 3, 2, 2
    p, q = random_pair(V, L, 5, zero_prob=0.3)
    res = program(p, q, K)
    N = V**L
    assert res.coupling.shape == (V,) * (2 * L)
    pi = res.coupling.reshape(N, N)
    np.testing.assert_allclose(pi.sum(axis=1), p.ravel(), atol=1e-7)
    np.testing.assert_allclose(pi.sum(axis=0), q.ravel(), atol=1e-7)
    lcp = _lcp_table(V, L)
    qs = q.ravel()
    value = 0.0
    for i in range(1, L + 1):
        match = pi * (lcp >= i)  # x_≤i = s_≤i
        if program is cic_block_program:
            mass, weight = match.sum(axis=0), qs
        else:
            z = np.arange(N) // V ** (L - i)
            mass = np.bincount(z, weights=match.sum(axis=0), minlength=V**i)
            weight = np.bincount(z, weights=qs, minlength=V**i)
        ok = weight > 0
        value += np.sum(weight[ok] * (1 - (1 - mass[ok] / weight[ok]) ** K))
    assert value == pytest.approx(res.optimum, abs=1e-6)


# ---------------------------------------------------------------------------------------
# Degenerate inputs
# ---------------------------------------------------------------------------------------

ALL = [cic_program, cic_block_program, global_ot, no_modification_lp]


@pytest.mark.parametrize("program", ALL)
def test_disjoint_supports_accept_nothing(program):
    p = np.zeros((2, 2))
    p[0, 0] = 1.0
    q = np.zeros((2, 2))
    q[1, 1] = 1.0
    assert optimum(program(p, q, 2)) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("program", ALL)
def test_equal_laws_accept_everything(program):
    p, _ = random_pair(3, 2, 9)
    assert optimum(program(p, p, 2)) == pytest.approx(2.0, abs=1e-6)


@pytest.mark.parametrize("program", ALL)
def test_one_token_vocabulary(program):
    block = np.ones((1, 1, 1))
    assert optimum(program(block, block, 3)) == pytest.approx(3.0, abs=1e-6)


def test_first_token_disjoint_second_shared():
    # p puts all first-token mass on a, q on b: nothing can be accepted at depth 1, hence
    # nothing at all (acceptance is a prefix).
    p = np.array([[0.5, 0.5], [0.0, 0.0]])
    q = np.array([[0.0, 0.0], [0.5, 0.5]])
    for program in ALL:
        assert optimum(program(p, q, 3)) == pytest.approx(0.0, abs=1e-7)


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------

GOOD = np.full((2, 2), 0.25)


@pytest.mark.parametrize("program", ALL)
@pytest.mark.parametrize(
    "p,q,K,match",
    [
        (np.array([[0.25, np.nan], [0.25, 0.25]]), GOOD, 1, "p_block: contains NaN"),
        (GOOD, np.array([[0.5, -0.1], [0.3, 0.3]]), 1, "q_block: contains negative"),
        (np.full((2, 2), 0.3), GOOD, 1, "p_block: probabilities are not normalised"),
        (GOOD, np.full((2, 2, 2), 0.125), 1, "same shape"),
        (GOOD, GOOD, 0, "K must be an integer >= 1"),
    ],
)
def test_bad_inputs(program, p, q, K, match):
    with pytest.raises(ValueError, match=match):
        program(p, q, K)


@pytest.mark.parametrize("program", [global_ot, no_modification_lp])
def test_bad_flag(program):
    with pytest.raises(ValueError, match="symmetric must be a bool"):
        program(GOOD, GOOD, 2, symmetric="yes")


def test_result_fields():
    p, q = toy(2)
    res = global_ot(p, q, 2, return_coupling=False)
    assert res.coupling is None
    assert (res.name, res.solver, res.K, res.L, res.V) == ("global_ot", "HIGHS", 2, 2, 2)
    # 4 draft blocks → 10 multisets of 2; 4 target blocks; rows 10 + 4 − 1
    assert (res.n_variables, res.n_constraints) == (40, 13)
    assert res.seconds >= 0


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")
@pytest.mark.parametrize("program", ALL)
def test_time_limit_gives_nan_and_status(program):
    p, q = random_pair(6, 2, 11, concentration=1.0)
    res = program(p, q, 2, time_limit=1e-9)
    assert res.status not in ("optimal", "optimal_inaccurate")
    assert np.isnan(res.optimum)
    assert res.coupling is None


def test_cic_solves_a_target_cell_of_mass_1e18():
    """q = (1.8e-18, 0.0023, 0.9977) scales a match fraction by ~1e18: CLARABEL fails outright
    there, and the program falls back to SCS at 1e-10 (found by `spectr-gbv prove`)."""
    p = np.array([8.33381560e-01, 1.66572639e-01, 4.58012695e-05])
    q = np.array([1.79966905e-18, 2.30084816e-03, 9.97699152e-01])
    p, q = p / p.sum(), q / q.sum()
    res = cic_program(p, q, 3)
    assert res.status == "optimal", res.status
    assert res.optimum == pytest.approx(bound_B(p, q, 3), abs=1e-8)
    assert res.solver.startswith("SCS")  # the case still exercises the fallback
