"""cvxpy programs that bound what one speculative-decoding iteration can accept (docs/bounds.md §4).

All programs take the block laws of one iteration as dense float64 arrays: ``p_block`` and
``q_block`` of shape (V,)*L, the joint law of a draft block and of a target block given the
same context (entry [z_1, …, z_L]), plus the number of drafts K ≥ 1.  Each returns a
``ProgramResult``.

- ``cic_program``          concave program over single-draft couplings, K conditionally
                           independent matches given the target prefix; optimum = B(K, L).
- ``cic_block_program``    the stricter reading: independence given the whole target block.
- ``global_ot``            LP over all couplings of K i.i.d. draft blocks with the target
                           block; the ceiling of every lossless rule.
- ``no_modification_lp``   the same with an accept length whose emitted prefix is continued
                           by the unmodified target; the ceiling of rules that leave later
                           iterations untouched (K = 1: BV, Sun et al. ICLR 2025, Theorem 2).

Flat indexing: a block z ∈ Ω^L is the C-order flat index Σ_j z_j V^(L−j) in [0, V^L); its
prefix of length d is ``index // V^(L−d)``.  Only draft blocks with p > 0 and target blocks
with q > 0 get variables (the others carry no mass under the fixed marginals).

Draft symmetry (global_ot, no_modification_lp): both programs are invariant under permuting
the K drafts, so averaging an optimal coupling over the K! permutations gives a symmetric
optimal coupling.  With ``symmetric=True`` (default) the variables are indexed by the
multiset of draft blocks instead of the ordered K-tuple (about K! times fewer variables);
the returned coupling is the symmetric one, expanded to ordered tuples.  ``symmetric=False``
solves the literal program over ordered tuples (same optimum; tests check both).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
import time
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from spectr_gbv.oracle.bounds import check_K, check_block_pair

__all__ = [
    "ProgramResult",
    "cic_program",
    "cic_block_program",
    "global_ot",
    "no_modification_lp",
    "LP_SOLVER_OPTS",
    "CONIC_SOLVER_OPTS",
]

# HiGHS: feasibility tolerances tightened from the default 1e-7 so that the LP optima match
# exact rational values to ~1e-10 (the tests check 1e-9).
LP_SOLVER_OPTS = {"primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9}
# CLARABEL: interior point; duality-gap and feasibility tolerances 1e-8 (its defaults, stated
# here).  The optimum comes out within ~1e-7 of B(K, L) up to ~10^4 variables and within
# ~2e-6 at ~2.6·10^5 (benchmarks/oracle_programs.py); the tests check 1e-6.  Tighter
# tolerances (1e-9, 1e-10) end in "AlmostSolved" (optimal_inaccurate) on some instances
# without a better value, because the power cones stall near c = 1.
CONIC_SOLVER_OPTS = {"tol_gap_abs": 1e-8, "tol_gap_rel": 1e-8, "tol_feas": 1e-8}


@dataclass(frozen=True)
class ProgramResult:
    """Outcome of one oracle program.

    Attributes:
        name: program name ("cic", "cic_block", "global_ot", "no_modification").
        optimum: optimal value in accepted tokens per iteration (expected accepted length);
            NaN when the solver did not return a solution (see ``status``).
        coupling: float64 optimal coupling over the full vocabulary (zero on cells outside
            the supports), or None if not requested or not solved.  Shapes:
            cic / cic_block: (V,)*L + (V,)*L, axes (draft block x, target block s);
            global_ot: (V,)*(L*K) + (V,)*L, axes (x^1, …, x^K, s);
            no_modification: (V,)*(L*K) + (V,)*L + (L+1,), last axis the accept length t.
            Entries are as returned by the solver (may be −1e-10-ish negative).
        status: cvxpy status ("optimal", "optimal_inaccurate", "infeasible", …) or
            "solver_error: <message>".
        solver: cvxpy solver name used.
        seconds: wall seconds for building, canonicalising and solving.
        solve_seconds: seconds reported by the solver itself (None if unavailable).
        n_variables, n_constraints: size of the program as given to cvxpy (after dropping
            cells outside the supports, forbidden cells and redundant rows).
        K, L, V: the instance.
    """

    name: str
    optimum: float
    coupling: np.ndarray | None = field(repr=False)
    status: str
    solver: str
    seconds: float
    solve_seconds: float | None
    n_variables: int
    n_constraints: int
    K: int
    L: int
    V: int


# ---------------------------------------------------------------------------------------
# Index helpers
# ---------------------------------------------------------------------------------------


class _Blocks:
    """Flat-index view of a (p_block, q_block) pair restricted to the supports."""

    def __init__(self, p_block: np.ndarray, q_block: np.ndarray):
        p, q = check_block_pair(p_block, q_block)
        self.V = p.shape[0]
        self.L = p.ndim
        self.N = self.V**self.L
        self.p = p.ravel()
        self.q = q.ravel()
        self.xs = np.flatnonzero(self.p > 0)  # draft blocks with mass, n of them
        self.ss = np.flatnonzero(self.q > 0)  # target blocks with mass, m of them
        self.n = self.xs.size
        self.m = self.ss.size

    def prefix(self, flat: np.ndarray, depth: int) -> np.ndarray:
        """Flat index of the length-``depth`` prefix (0 ≤ depth ≤ L) of flat block indices."""
        return flat // self.V ** (self.L - depth)

    def q_prefix(self, depth: int) -> np.ndarray:
        """Target prefix law at ``depth`` as a flat [V^depth] array."""
        return np.bincount(self.prefix(np.arange(self.N), depth), weights=self.q, minlength=self.V**depth)

    def lcp(self) -> np.ndarray:
        """int [n, m]: longest common prefix length of draft block xs[a] and target block ss[b].
        Prefix equality at depth d implies it at every smaller depth, so LCP is the number of
        depths at which the prefixes agree."""
        out = np.zeros((self.n, self.m), dtype=np.int64)
        for d in range(1, self.L + 1):
            out += self.prefix(self.xs, d)[:, None] == self.prefix(self.ss, d)[None, :]
        return out


def _draft_multisets(n: int, K: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """Index sets for the K drafts over n support blocks.

    Returns:
        (tuples int [M, K], perms float [M]).  symmetric: the non-decreasing K-tuples
        (multisets, lexicographic order) and for each the number of distinct orderings
        K!/Π(multiplicity!); otherwise every ordered K-tuple (C order) with perms = 1.
    """
    if not symmetric:
        tuples = np.indices((n,) * K).reshape(K, -1).T.copy()
        return tuples, np.ones(tuples.shape[0])
    M = math.comb(n + K - 1, K)
    flat = np.fromiter(
        itertools.chain.from_iterable(itertools.combinations_with_replacement(range(n), K)),
        dtype=np.int64,
        count=M * K,
    )
    tuples = flat.reshape(M, K)
    # Π over runs of (run length)! = Π_j (position of j inside its run), for sorted rows.
    run = np.ones(M)
    divisor = np.ones(M)
    for j in range(1, K):
        run = np.where(tuples[:, j] == tuples[:, j - 1], run + 1, 1.0)
        divisor *= run
    return tuples, math.factorial(K) / divisor


def _expand_to_ordered(
    sym: np.ndarray, tuples: np.ndarray, perms: np.ndarray, blocks: _Blocks, K: int, symmetric: bool
) -> np.ndarray:
    """Dense coupling over the full vocabulary from the solution over draft (multi)sets.

    Args:
        sym: float [M, m, ...] mass per (draft multiset, target support block, extra axes).
    Returns:
        float64 array (V,)*(L*K) + (V,)*L + extra axes.
    """
    n, N, L, V = blocks.n, blocks.N, blocks.L, blocks.V
    extra = sym.shape[2:]
    ordered = np.indices((n,) * K).reshape(K, -1).T
    if symmetric:
        # each ordered tuple gets an equal share of its multiset's mass
        lookup = np.empty(n**K, dtype=np.int64)
        lookup[np.ravel_multi_index(tuples.T, (n,) * K)] = np.arange(tuples.shape[0])
        row = lookup[np.ravel_multi_index(np.sort(ordered, axis=1).T, (n,) * K)]
        per_tuple = sym[row] / perms[row].reshape((-1,) + (1,) * (sym.ndim - 1))
    else:
        per_tuple = sym
    full_row = np.ravel_multi_index(blocks.xs[ordered].T, (N,) * K)
    dense = np.zeros((N**K, N) + extra)
    dense[np.ix_(full_row, blocks.ss)] = per_tuple
    return dense.reshape((V,) * (L * K) + (V,) * L + extra)


def _all_pairs(M: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(a_idx, b_idx) of every pair (a, b) in [0, M) x [0, m), variable v = a*m + b."""
    return np.repeat(np.arange(M), m), np.tile(np.arange(m), M)


@dataclass(frozen=True)
class _Drafts:
    """The K drafts of the LPs, indexed by multiset (or ordered tuple) of support blocks.

    Attributes:
        tuples, perms: as ``_draft_multisets``; M = tuples.shape[0] rows.
        mass: float [M], probability Π_k p(x^k) of each row, times its number of orderings.
        best: int [M, m], max_k LCP(x^k, s) for each row and target support block s.
        K, symmetric: the instance's draft count and indexing.
    """

    tuples: np.ndarray
    perms: np.ndarray
    mass: np.ndarray
    best: np.ndarray
    K: int
    symmetric: bool

    @property
    def M(self) -> int:
        return self.tuples.shape[0]

    def expand(self, sym: np.ndarray, blocks: _Blocks) -> np.ndarray:
        """``_expand_to_ordered`` of a solution sym [M, m, ...]."""
        return _expand_to_ordered(sym, self.tuples, self.perms, blocks, self.K, self.symmetric)


def _drafts(blocks: _Blocks, K: int, symmetric: bool) -> _Drafts:
    tuples, perms = _draft_multisets(blocks.n, K, symmetric)
    mass = perms * np.prod(blocks.p[blocks.xs][tuples], axis=1)
    lcp = blocks.lcp()
    best = lcp[tuples[:, 0]]
    for j in range(1, K):
        np.maximum(best, lcp[tuples[:, j]], out=best)
    return _Drafts(tuples, perms, mass, best, K, symmetric)


# ---------------------------------------------------------------------------------------
# Solving
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _stdout_to_devnull():
    """Silence file descriptor 1: the HiGHS library prints a banner on its first use in a
    process, which no cvxpy option stops, and it would corrupt ``--json`` output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


# The transport LPs are always feasible (the independent coupling satisfies every row), so an
# "infeasible" from HiGHS is a numerical artefact of near-degenerate data (probabilities around
# 1e-25 beside masses near 1); the interior-point solver copes, so the LPs retry with it.
LP_FALLBACK_SOLVER = "CLARABEL"
# CLARABEL can fail outright on a CIC program whose target has a cell of mass ~1e-18 (its match
# fraction is scaled by 1/q, ~1e18); the first-order SCS, run to 1e-10, copes (found on
# V = 3, K = 3, L = 1, conc = 0.1, where it gives B to 1e-15).
CIC_FALLBACK_SOLVER = "SCS"
FALLBACK_OPTS = {"CLARABEL": None, "SCS": {"eps_abs": 1e-10, "eps_rel": 1e-10, "max_iters": 200_000}}
_NOT_SOLVED = ("infeasible", "unbounded", "infeasible_inaccurate", "unbounded_inaccurate")


def solve_program(problem: cp.Problem, solver: str, opts: dict, time_limit: float | None,
                  fallback: str | None = None):
    """Solve a cvxpy ``problem`` with ``solver`` and its options ``opts`` (solver output silenced),
    within ``time_limit`` seconds when given; on a solver error or a status that is not solved,
    once more with ``fallback`` (its ``FALLBACK_OPTS``).

    Returns:
        (status: cvxpy's status or ``"solver_error: ..."``, solve seconds or None, the solver
        that produced the status, e.g. ``"SCS (after HIGHS: infeasible_inaccurate)"``).
    """
    opts = dict(opts)
    if time_limit is not None:
        opts["time_limit_secs" if solver == "SCS" else "time_limit"] = float(time_limit)
    try:
        with _stdout_to_devnull():
            problem.solve(solver=solver, **opts)
    except cp.error.SolverError as exc:
        if fallback is None:
            return f"solver_error: {exc}", None, solver
        first = "solver_error"
    else:
        first = problem.status
    if fallback is not None and (first in _NOT_SOLVED or first == "solver_error"):
        opts = FALLBACK_OPTS[fallback] or CONIC_SOLVER_OPTS
        status, solve_s, _ = solve_program(problem, fallback, opts, time_limit)
        return status, solve_s, f"{fallback} (after {solver}: {first})"
    stats = problem.solver_stats
    return problem.status, (stats.solve_time if stats is not None else None), solver


def _transport_rows(blocks: _Blocks, M: int, cols_a: np.ndarray, cols_b: np.ndarray) -> sp.csc_matrix:
    """Marginal rows of a transport block: variable v = (a, b) contributes 1 to row a (draft
    side, M rows) and to row M + b (target side, m rows); returns the [M + m, #vars] matrix."""
    nv = cols_a.size
    rows = np.concatenate([cols_a, M + cols_b])
    cols = np.concatenate([np.arange(nv), np.arange(nv)])
    return sp.csc_matrix((np.ones(2 * nv), (rows, cols)), shape=(M + blocks.m, nv))


def _check_flags(**flags):
    for name, v in flags.items():
        if not isinstance(v, (bool, np.bool_)):
            raise ValueError(f"{name} must be a bool, got {v!r}")


def _setup(K, p_block, q_block, **flags) -> tuple[int, _Blocks]:
    """Validated K (first), bool flags, then the block pair: the checks every program makes."""
    K = check_K(K)
    _check_flags(**flags)
    return K, _Blocks(p_block, q_block)


def _marginal_constraints(A: sp.spmatrix, blocks: _Blocks, draft_mass: np.ndarray):
    """(rows, rhs) of the marginal equalities ``A @ x == rhs`` from the full [M + m, #vars]
    matrix of a transport program: draft rows = draft_mass, target rows = q on its support.
    The last target row is dropped: it is implied, since both marginals sum to 1."""
    return A[:-1], np.concatenate([draft_mass, blocks.q[blocks.ss][:-1]])


@dataclass(frozen=True)
class _Solution:
    """What a program reports of its solve: status, solver used, solver seconds, optimum (NaN
    when not solved) and the variable's value (None when not solved)."""

    status: str
    solver: str
    solve_seconds: float | None
    optimum: float
    x: np.ndarray | None


def _run(problem: cp.Problem, x: cp.Variable, solver: str, opts: dict, time_limit: float | None,
         fallback: str | None) -> _Solution:
    status, solve_s, used = solve_program(problem, solver, opts, time_limit, fallback)
    if status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        return _Solution(status, used, solve_s, float("nan"), None)
    return _Solution(status, used, solve_s, float(problem.value), np.asarray(x.value))


def _solve_lp(c: np.ndarray, A: sp.spmatrix, rhs: np.ndarray, solver: str, solver_opts: dict | None,
              time_limit: float | None) -> _Solution:
    """maximise c @ x subject to A @ x == rhs, x ≥ 0 (HiGHS by default, LP_SOLVER_OPTS, with
    the LP_FALLBACK_SOLVER retry)."""
    x = cp.Variable(c.size, nonneg=True)
    problem = cp.Problem(cp.Maximize(c @ x), [A @ x == rhs])
    opts = LP_SOLVER_OPTS if solver_opts is None and solver == "HIGHS" else (solver_opts or {})
    return _run(problem, x, solver, opts, time_limit, LP_FALLBACK_SOLVER)


def _result(name: str, t0: float, blocks: _Blocks, K: int, sol: _Solution, coupling,
            n_variables: int, n_constraints: int) -> ProgramResult:
    return ProgramResult(
        name=name,
        optimum=sol.optimum,
        coupling=coupling,
        status=sol.status,
        solver=sol.solver,
        seconds=time.perf_counter() - t0,
        solve_seconds=sol.solve_seconds,
        n_variables=n_variables,
        n_constraints=n_constraints,
        K=K,
        L=blocks.L,
        V=blocks.V,
    )


# ---------------------------------------------------------------------------------------
# CIC programs
# ---------------------------------------------------------------------------------------


def _match_fractions(blk: _Blocks, a_idx: np.ndarray, b_idx: np.ndarray, per_block: bool):
    """(C, w): c = C @ π stacks, depth by depth, the match fractions c_i(z) (per_block: c_i(s))
    of the coupling variables π(xs[a_idx], ss[b_idx]); w the weights q(z) (or q(s)).

    Cells with q = 0 carry no term: their weight is 0 and their match mass is forced to 0 by
    the target marginal, so they are left out rather than divided by 0.
    """
    C_parts, w_parts = [], []
    for d in range(1, blk.L + 1):
        px = blk.prefix(blk.xs, d)[a_idx]
        ps = blk.prefix(blk.ss, d)[b_idx]
        match = np.flatnonzero(px == ps)
        if per_block:
            rows = b_idx[match]
            weight = blk.q[blk.ss]
        else:
            qd = blk.q_prefix(d)
            zs, rows_all = np.unique(blk.prefix(blk.ss, d), return_inverse=True)
            rows = rows_all[b_idx[match]]
            weight = qd[zs]
        C_parts.append(
            sp.csr_matrix((1.0 / weight[rows], (rows, match)), shape=(weight.size, a_idx.size))
        )
        w_parts.append(weight)
    return sp.vstack(C_parts).tocsr(), np.concatenate(w_parts)


def _cic(name, p_block, q_block, K, per_block, solver, solver_opts, time_limit, return_coupling):
    t0 = time.perf_counter()
    K, blk = _setup(K, p_block, q_block, return_coupling=return_coupling)
    n, m = blk.n, blk.m
    # variables π(xs[a], ss[b]), v = a*m + b
    a_idx, b_idx = _all_pairs(n, m)
    A, rhs = _marginal_constraints(_transport_rows(blk, n, a_idx, b_idx), blk, blk.p[blk.xs])
    C, w = _match_fractions(blk, a_idx, b_idx, per_block)

    x = cp.Variable(n * m, nonneg=True)
    shortfall = 1.0 - C @ x  # 1 − c ≥ 0 holds at every feasible point
    objective = cp.Maximize(float(w.sum()) - w @ cp.power(shortfall, K))
    problem = cp.Problem(objective, [A @ x == rhs])
    opts = CONIC_SOLVER_OPTS if solver_opts is None and solver == "CLARABEL" else (solver_opts or {})
    fallback = CIC_FALLBACK_SOLVER if solver != CIC_FALLBACK_SOLVER else None
    sol = _run(problem, x, solver, opts, time_limit, fallback)
    coupling = None
    if sol.x is not None and return_coupling:
        dense = np.zeros((blk.N, blk.N))
        dense[np.ix_(blk.xs, blk.ss)] = sol.x.reshape(n, m)
        coupling = dense.reshape((blk.V,) * (2 * blk.L))
    return _result(name, t0, blk, K, sol, coupling, n * m, A.shape[0])


def cic_program(
    p_block: np.ndarray,
    q_block: np.ndarray,
    K: int,
    *,
    solver: str = "CLARABEL",
    solver_opts: dict | None = None,
    time_limit: float | None = None,
    return_coupling: bool = True,
) -> ProgramResult:
    """The CIC program (docs/bounds.md §4.1; SpecTr-GBV's "conditionally independent couplings").

    Variables: one single-draft coupling π(x, s) ≥ 0 of a draft block x ~ p_block and a
    target block s ~ q_block (both marginals fixed).  At each depth i the K drafts' match
    events are taken as conditionally independent given the target prefix z = s_≤i, each with
    probability

        c_i(z) = Σ_{x,s: x_≤i = s_≤i = z} π(x, s) / q(z),

    and the program maximises  Σ_{i≤L} Σ_{|z|=i, q(z)>0} q(z)·[1 − (1 − c_i(z))^K],
    a concave function of π (cp.power(1 − c, K) is convex, DCP).  Its optimum equals
    ``oracle.bounds.bound_B(p_block, q_block, K)``: c_i(z) ≤ m(z) for every coupling, and the
    GBV coupling attains c_i(z) = m(z) at every (i, z) simultaneously.

    Args:
        p_block, q_block: float arrays of shape (V,)*L, draft and target block laws.
        K: number of drafts, integer ≥ 1.
        solver: cvxpy solver name; CLARABEL (interior point, installed with cvxpy).
        solver_opts: solver options; default CONIC_SOLVER_OPTS (tolerances 1e-8; the optimum
            agrees with B(K, L) to ~1e-7 up to ~10^4 variables, ~2e-6 at ~2.6·10^5).
        time_limit: solver time limit in seconds (None: none).
        return_coupling: whether to fill ``coupling`` (shape (V,)*L + (V,)*L).
    Returns:
        ProgramResult; optimum in accepted tokens per iteration.
    Raises:
        ValueError: naming the argument, on invalid block laws, a shape mismatch or K < 1.
    Size: |supp p|·|supp q| ≤ V^(2L) variables, Σ_i V^i power terms.
    """
    return _cic("cic", p_block, q_block, K, False, solver, solver_opts, time_limit, return_coupling)


def cic_block_program(
    p_block: np.ndarray,
    q_block: np.ndarray,
    K: int,
    *,
    solver: str = "CLARABEL",
    solver_opts: dict | None = None,
    time_limit: float | None = None,
    return_coupling: bool = True,
) -> ProgramResult:
    """The block-conditioned CIC program (docs/bounds.md §4.2, "a stricter reading").

    Same coupling π(x, s) as ``cic_program``, but the K drafts' matches are independent given
    the whole target block s:

        c_i(s) = Σ_x π(x, s)·1[x_≤i = s_≤i] / q(s),
        maximise  Σ_{i≤L} Σ_{s: q(s)>0} q(s)·[1 − (1 − c_i(s))^K].

    By Jensen (averaging c_i(s) over the s extending z gives c_i(z), and 1 − (1−c)^K is
    concave) its optimum is ≤ B(K, L), strictly below it in general (toy, K = L = 2: 1.5556
    < 19/12).  Equal to B at K = 1 or L = 1.

    Args, Returns, Raises: as ``cic_program`` (CLARABEL, tolerances 1e-8).
    Size: |supp p|·|supp q| variables, L·|supp q| power terms.
    """
    return _cic("cic_block", p_block, q_block, K, True, solver, solver_opts, time_limit, return_coupling)


# ---------------------------------------------------------------------------------------
# Global block OT
# ---------------------------------------------------------------------------------------


def global_ot(
    p_block: np.ndarray,
    q_block: np.ndarray,
    K: int,
    *,
    symmetric: bool = True,
    solver: str = "HIGHS",
    solver_opts: dict | None = None,
    time_limit: float | None = None,
    return_coupling: bool = True,
) -> ProgramResult:
    """Global block optimal transport (docs/bounds.md §4.3): the most any lossless K-draft rule can
    accept in one iteration, modifications of later targets allowed.

    LP over couplings π(x^1, …, x^K, s) ≥ 0 of K i.i.d. draft blocks (marginal
    Π_k p(x^k)) and a target block s ~ q:

        maximise  Σ π(x^1..x^K, s) · max_k LCP(x^k, s),     LCP = longest common prefix length.

    Any lossless rule induces such a coupling of its drafts with its first L emitted tokens,
    with τ ≤ max_k LCP.  K = 1 gives B(1, L) (the GBV value; LCP is an ultrametric-type
    profit), L = 1 gives α* (``oracle.bounds.alpha_star``).  Toy (docs/toy.md): 8/9 at
    (K, L) = (2, 1), 134/81 at (2, 2).

    Args:
        p_block, q_block: float arrays of shape (V,)*L.
        K: number of drafts, integer ≥ 1.
        symmetric: index the drafts by multiset (see module docstring); same optimum.
        solver: cvxpy solver name, default HIGHS (installed with cvxpy); or "POT": the
            program is a transportation problem between draft multisets and target blocks,
            which POT's network simplex (``ot.emd``, package ``pot``, optional) solves
            exactly and ~100x faster than HiGHS at 10^5–10^6 variables.
        solver_opts: solver options; default LP_SOLVER_OPTS (feasibility tolerances 1e-9;
            the optimum matches exact rationals to ~1e-10 on the tested sizes).  For POT,
            keyword arguments of ``ot.emd`` (default numItermax = 10^9).
        time_limit: solver time limit in seconds (None: none); not supported by POT (ignored).
        return_coupling: whether to fill ``coupling`` (shape (V,)*(L*K) + (V,)*L; dense,
            V^(L(K+1)) entries).
    Returns:
        ProgramResult; optimum in accepted tokens per iteration.
    Raises:
        ValueError: naming the argument, on invalid block laws, a shape mismatch, K < 1, or a
            non-bool flag.
        ImportError: solver="POT" without the ``pot`` package.
    Size: M·|supp q| variables (M = C(n+K−1, K) multisets or n^K tuples of the n = |supp p|
        draft blocks), M + |supp q| − 1 equality rows.
    """
    t0 = time.perf_counter()
    K, blk = _setup(K, p_block, q_block, symmetric=symmetric, return_coupling=return_coupling)
    drafts = _drafts(blk, K, bool(symmetric))
    M, m = drafts.M, blk.m
    if solver == "POT":
        sol = _global_ot_pot(drafts.mass, blk.q[blk.ss], drafts.best, solver_opts)
        n_rows = M + m
    else:
        A, rhs = _marginal_constraints(_transport_rows(blk, M, *_all_pairs(M, m)), blk, drafts.mass)
        sol = _solve_lp(drafts.best.ravel().astype(np.float64), A, rhs, solver, solver_opts, time_limit)
        n_rows = A.shape[0]
    coupling = None
    if sol.x is not None and return_coupling:
        coupling = drafts.expand(sol.x.reshape(M, m), blk)
    return _result("global_ot", t0, blk, K, sol, coupling, M * m, n_rows)


def _global_ot_pot(mass, q_support, best, solver_opts):
    """Global OT as a transportation problem solved by POT's network simplex.

    Returns a ``_Solution`` (solver "POT", x the coupling [M, m]).  The status is "optimal"
    when ot.emd reports result_code 1 (optimal), else "pot_result_code_<code>: <warning>",
    with a NaN optimum and no coupling.
    """
    import ot  # optional dependency (package ``pot``)

    opts = {"numItermax": 10**9}
    opts.update(solver_opts or {})
    start = time.perf_counter()
    plan, log = ot.emd(mass, q_support, -best.astype(np.float64), log=True, **opts)
    seconds = time.perf_counter() - start
    if log.get("result_code") != 1:
        status = f"pot_result_code_{log.get('result_code')}: {log.get('warning')}"
        return _Solution(status, "POT", seconds, float("nan"), None)
    return _Solution(cp.OPTIMAL, "POT", seconds, float(np.sum(plan * best)), plan)


# ---------------------------------------------------------------------------------------
# No-modification LP
# ---------------------------------------------------------------------------------------


def no_modification_lp(
    p_block: np.ndarray,
    q_block: np.ndarray,
    K: int,
    *,
    symmetric: bool = True,
    solver: str = "HIGHS",
    solver_opts: dict | None = None,
    time_limit: float | None = None,
    return_coupling: bool = True,
) -> ProgramResult:
    """The no-modification LP (docs/bounds.md §4.4): the most a lossless K-draft rule can accept in
    one iteration when later iterations run on the plain target.

    Variables π(x^1..x^K, s, t) ≥ 0 with t ∈ {0..L} the accepted length, t ≤ max_k LCP(x^k, s),
    draft marginal Π_k p(x^k), target marginal q(s); maximise E[t] subject to

        P(t, s) = g_t(s_≤t+1) · q(s_>t+1 | s_≤t+1)        for every t and s.

    Meaning: an iteration that accepts t tokens emits s_≤t (accepted) and s_{t+1} (the
    correction); positions t+2..L are produced by later iterations, which use the unmodified
    target, so given what was emitted they follow q(· | s_≤t+1).  At t = L−1 the emitted
    t + 1 = L tokens are the whole block, and at t = L the extra (bonus) token lies outside
    the block, so for t ∈ {L−1, L} the constraint is vacuous; it binds only for t ≤ L−2.
    (At L = 1 this LP is therefore global_ot.)

    Formulation solved: for t ≤ L−2, variables γ_t over (drafts, emitted prefix s_≤t+1); same
    optimum as the law-of-(t, s) statement (``_no_modification_columns`` says why; the test
    suite also solves the literal form on small cases and checks equality).

    K = 1 gives BV's E[τ] (Sun et al., ICLR 2025, Algorithm 2 / Theorem 2; toy L = 2: 11/9);
    toy K = L = 2 gives 131/81 (docs/toy.md).

    Args:
        p_block, q_block: float arrays of shape (V,)*L.
        K: number of drafts, integer ≥ 1.
        symmetric: index the drafts by multiset (see module docstring); same optimum.
        solver: cvxpy solver name; HIGHS.
        solver_opts: default LP_SOLVER_OPTS (feasibility tolerances 1e-9).
        time_limit: solver time limit in seconds (None: none).
        return_coupling: whether to fill ``coupling``, shape (V,)*(L*K) + (V,)*L + (L+1,),
            last axis t (dense: V^(L(K+1))·(L+1) entries).
    Returns:
        ProgramResult; optimum in accepted tokens per iteration.
    Raises:
        ValueError: naming the argument, on invalid block laws, a shape mismatch, K < 1, or a
            non-bool flag.
    """
    t0 = time.perf_counter()
    K, blk = _setup(K, p_block, q_block, symmetric=symmetric, return_coupling=return_coupling)
    drafts = _drafts(blk, K, bool(symmetric))
    columns, c, layout = _no_modification_columns(blk, drafts)
    A, rhs = _marginal_constraints(columns, blk, drafts.mass)
    sol = _solve_lp(c, A, rhs, solver, solver_opts, time_limit)
    coupling = None
    if sol.x is not None and return_coupling:
        coupling = drafts.expand(_no_modification_coupling(sol.x, layout, drafts.M, blk), blk)
    return _result("no_modification", t0, blk, K, sol, coupling, c.size, A.shape[0])


def _no_modification_columns(blk: _Blocks, drafts: _Drafts):
    """The variables of the no-modification LP as columns of its marginal rows.

    Formulation solved: for t ≤ L−2 the variables are γ_t(x, y) over emitted prefixes
    y = s_≤t+1 with q(y) > 0, and π(x, s, t) = γ_t(x, s_≤t+1)·q(s)/q(s_≤t+1).  This is the
    stronger "s_>t+1 independent of the drafts given (t, s_≤t+1)", which later iterations with
    fresh drafts satisfy anyway; it has the same optimum as the law-of-(t, s) statement
    because, for t ≤ L−1, the condition t ≤ max_k LCP(x^k, s) depends on s only through s_≤t,
    so replacing the conditional law of s_>t+1 given (x, t, s_≤t+1) by q(· | s_≤t+1) keeps
    every constraint and the objective.  The support restriction t ≤ max LCP is imposed by
    creating no variable on forbidden cells.  (The test suite also solves the literal
    law-of-(t, s) form on small cases and checks equality.)

    Returns:
        (A, c, layout): A the csr [M + m, #vars] marginal rows (drafts, then target blocks;
        none dropped), c the objective (t of each column), layout one entry (kind, t, a_idx,
        other, E) per block of columns: "prefix" (t ≤ L−2; other the emitted prefix of each
        column, E [m, #prefixes] how γ_t spreads over the target blocks) or "block"
        (t ∈ {L−1, L}; other the target block, E None).
    """
    M, K, tuples, best = drafts.M, drafts.K, drafts.tuples, drafts.best
    m, L, V = blk.m, blk.L, blk.V
    blocks_A, blocks_c, layout = [], [], []
    # t ≤ L−2: variables γ_t(multiset a, emitted prefix y), |y| = t+1.
    for t in range(0, L - 1):
        q_y = blk.q_prefix(t + 1)
        ys = np.flatnonzero(q_y > 0)
        # allowed iff some draft carries y_≤t (always at t = 0)
        allowed = np.zeros((M, ys.size), dtype=bool)
        y_head = ys // V
        x_head = blk.prefix(blk.xs, t)
        for j in range(K):
            allowed |= x_head[tuples[:, j]][:, None] == y_head[None, :]
        a_idx, y_idx = np.nonzero(allowed)
        # E[b, y] = q(s_b)/q(y) where y = s_b,≤t+1: how γ_t spreads over the target blocks
        s_y = np.searchsorted(ys, blk.prefix(blk.ss, t + 1))
        E = sp.csc_matrix(
            (blk.q[blk.ss] / q_y[ys[s_y]], (np.arange(m), s_y)), shape=(m, ys.size)
        )
        draft_rows = sp.csc_matrix(
            (np.ones(a_idx.size), (a_idx, np.arange(a_idx.size))), shape=(M, a_idx.size)
        )
        blocks_A.append(sp.vstack([draft_rows, E[:, y_idx]]).tocsc())
        blocks_c.append(np.full(a_idx.size, float(t)))
        layout.append(("prefix", t, a_idx, y_idx, E))
    # t ∈ {L−1, L}: variables π_t(multiset a, target block b) on cells with max LCP ≥ t.
    for t in range(L - 1, L + 1):
        a_idx, b_idx = np.nonzero(best >= t)
        blocks_A.append(_transport_rows(blk, M, a_idx, b_idx))
        blocks_c.append(np.full(a_idx.size, float(t)))
        layout.append(("block", t, a_idx, b_idx, None))
    return sp.hstack(blocks_A).tocsr(), np.concatenate(blocks_c), layout


def _no_modification_coupling(values: np.ndarray, layout, M: int, blk: _Blocks) -> np.ndarray:
    """π(multiset a, target block b, t) as float [M, m, L+1] from the LP's solution."""
    sym = np.zeros((M, blk.m, blk.L + 1))
    start = 0
    for kind, t, a_idx, other, E in layout:
        part = values[start : start + a_idx.size]
        start += a_idx.size
        if kind == "block":
            sym[a_idx, other, t] = part
        else:
            gamma = sp.csr_matrix((part, (a_idx, other)), shape=(M, E.shape[1]))
            sym[:, :, t] = (gamma @ E.T).toarray()
    return sym
