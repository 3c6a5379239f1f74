"""The best rule of MDBV's family at L = 2, bracketed: how far one-bit subtrees can go.

**The family (one-bit compositional rules on the merged draft tree).**  A rule of the family
gives every node z of the merged tree of the K drafts a budget b(z) and a sub-rule that succeeds
with probability exactly b(z) and, given success, emits a q(·|z)-distributed continuation; a
parent sees of each child's sub-rule only its success bit.  Given the drafted children of z
(tokens and multiplicities), z picks the children's budgets (possibly at random, with its own
coins) and a winner among the children that succeeded; the children's sub-rules run on disjoint
drafts and coins, so their success bits are independent.  MDBV and MDBV-KSEQ (children tried in
turn with budgets s/(1 − Σ before)) are members, and so is SpecTr without modification (every
accepted child has budget 1).  What the family cannot do is let the winner depend on how deep a
child's subtree verifies; the no-modification LP (NON_MODIFYING_RULES.md §2) can.

**Its optimum at L = 2**, by the argument in NON_MODIFYING_RULES.md §7b.  A depth-1 node x with
m drafts and budget b is worth W_x(b) = b + α*(b·q(·|x), p(·|x), m) accepted tokens, where

    α*(c·q, p, m) = min over H ⊆ Ω of [c·q(Ω∖H) + 1 − (1 − p(H))^m]

is the best one-position acceptance against the sub-probability target c·q (the coverage
polymatroid of m drafts capped by c·q: Hu et al., ICLR 2025, at c = 1).  Given x wins, it
contributes g_x(b) = W_x(b)/b = 1 + α*/b tokens (non-increasing in b; g_x(0+) = 1 + q(supp p)).
At the root, a configuration c (multiset of first tokens, probability P(c) from p) with children
x of multiplicity m_x chooses budgets b and winning probabilities s; feasible iff
s(T) ≤ 1 − Π_{x∈T} (1 − b_x) for every set T of children (a winner among independent successes,
Artstein's selection theorem), and Σ_c P(c) s_x(c) ≤ q(x) (the root's target).  E[τ] =
Σ_c P(c) Σ_x s_x(c) g_x(b_x(c)).  Mixing strategies with the root's coins is allowed, so the
optimum is an LP over mixtures: variables λ_{c,β} (weight of budget vector β in configuration c)
and y_{c,β,x} = λ_{c,β}·s_x, constraints y(T) ≤ λ·cap_T(β), Σ_β λ_{c,β} = 1, the target rows.

**The bracket.**  Each child's budget axis [0, 1] is cut into cells.  *Lower bound:* budgets at
the cell edges only (every column is a rule of the family).  *Upper bound:* per cell, the
efficiency at the cell's lower edge and the capacities at its upper edge (a relaxation of every
strategy whose budgets lie in the cell, since g is non-increasing and the capacities increase in
b).  The cells a solution uses are split and the LPs solved again.  The upper bound is rigorous up
to the LP solver's tolerances (HiGHS, 1e-9 feasibility; CLARABEL if HiGHS fails).  So an
instance whose upper bound lies more than 2 % below the no-modification LP is one where **no rule
of the family** comes within 2 % of it, whatever it knows of the rows.

Run ``python -m spectr_gbv.proofs_check.one_bit_family --quick --md OUT.md`` for the study table
(NON_MODIFYING_RULES.md §7b).  Source: this project (proofs_check/NON_MODIFYING_RULES.md §2, §7b).
"""

from __future__ import annotations

import itertools
import math
import numbers
import sys
import time
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from spectr_gbv.oracle import programs
from spectr_gbv.reference.validation import check_positive_int, check_probability_vector

from spectr_gbv.proofs_check import quantities as Q
from spectr_gbv.proofs_check.instances import Instance, random_instance, toy


def _rows(q, p) -> tuple[np.ndarray, np.ndarray]:
    q, p = check_probability_vector(q, "q"), check_probability_vector(p, "p")
    if q.ndim != 1 or q.shape != p.shape:
        raise ValueError(f"q and p must be one-dimensional rows of one vocabulary, got shapes {q.shape} and {p.shape}")
    return q, p


def efficiency(q: np.ndarray, p: np.ndarray, m: int):
    """g(b) = 1 + α*(b·q, p, m)/b of a depth-1 node with rows (q, p) and m drafts.

    Args:
        q, p: float64 [V] target and draft rows at the node (probability vectors); m: drafts
            through the node (an integer ≥ 1).  Cost: 2^V subsets, tabulated once.
    Returns:
        a function of budgets b (a float or float64 array, values in [0, 1]) → float64 array of
        b's shape (at least 1-D), the expected accepted tokens of the node and its subtree given
        that it succeeds; g(0) = 1 + q(supp p) (the limit b → 0).
    Raises:
        ValueError: q or p not a probability vector (NaN, negative, unnormalised), shapes that
            differ, m not an integer ≥ 1; from g, a budget that is NaN or outside [0, 1].
    Source: module doc; α* of the coverage polymatroid capped by b·q (min over subsets H).
    """
    q, p = _rows(q, p)
    m = check_positive_int(m, "m")
    V = len(q)
    cover, free = [], []
    for r in range(V + 1):
        for H in itertools.combinations(range(V), r):
            mask = np.zeros(V, bool)
            mask[list(H)] = True
            free.append(float(q[~mask].sum()))
            cover.append(1.0 - (1.0 - float(p[mask].sum())) ** m)
    a, f = np.array(free), np.array(cover)
    at_zero = 1.0 + float(q[p > 0].sum())

    def g(b):
        b = np.atleast_1d(np.asarray(b, dtype=np.float64))
        if not np.all((b >= 0) & (b <= 1)):  # NaN fails both
            raise ValueError(f"b: budgets must lie in [0, 1], got {b[~((b >= 0) & (b <= 1))][:3]}")
        safe = np.where(b > 0, b, 1.0)
        return np.where(b > 0, 1.0 + np.min(a + f / safe[..., None], axis=-1), at_zero)

    return g


def configurations(p: np.ndarray, K: int):
    """The multisets of K first tokens drawn i.i.d. from p.

    Args:
        p: float64 [V] draft row at the root (a probability vector); K: drafts (integer ≥ 1).
    Yields:
        (n, probability): n a tuple of V multiplicities summing to K, probability the
        multinomial mass K!/Π n_x! · Π p(x)^n_x (> 0 only; they sum to 1).
    Raises:
        ValueError: p not a probability vector, K not an integer ≥ 1.
    """
    p = check_probability_vector(p, "p")
    K = check_positive_int(K, "K")
    V = len(p)
    for n in itertools.product(range(K + 1), repeat=V):
        if sum(n) != K:
            continue
        prob = math.factorial(K) * float(np.prod([p[x] ** n[x] / math.factorial(n[x]) for x in range(V)]))
        if prob > 0:
            yield n, prob


@dataclass(frozen=True)
class Bracket:
    """lower ≤ the family's optimum E[τ] ≤ upper; rounds of refinement, columns of the last
    upper-bound LP, the solver that solved it."""

    lower: float
    upper: float
    rounds: int
    columns: int
    solver: str


def _program(inst: Instance, grids: dict, eff: dict, upper: bool):
    K, V = inst.K, inst.V
    p0, q0 = inst.draft.conditional(()), inst.target.conditional(())
    obj, Ar, Ac, Av, Er, Ec = [], [], [], [], [], []
    nrow, ncol, neq = V, 0, 0
    layout = []
    for n, prob in configurations(p0, K):
        kids = [x for x in range(V) if n[x] > 0]
        r = len(kids)
        pts = [np.asarray(grids.setdefault((n, x), list(grids["start"]))) for x in kids]
        lo = [pt[:-1] for pt in pts] if upper else pts
        hi = [pt[1:] for pt in pts] if upper else pts
        combos = np.array(list(itertools.product(*[range(len(x)) for x in lo])), dtype=np.int64).reshape(-1, r)
        N = len(combos)
        gv = np.stack([eff[(x, n[x])](lo[i][combos[:, i]]) for i, x in enumerate(kids)], axis=1)
        b_hi = np.stack([hi[i][combos[:, i]] for i in range(r)], axis=1)
        lam = ncol + np.arange(N) * (r + 1)
        ys = lam[:, None] + 1 + np.arange(r)[None, :]
        ncol += N * (r + 1)
        o = np.zeros((N, r + 1))
        o[:, 1:] = prob * gv
        obj.append(o.ravel())
        Er.append(np.full(N, neq))
        Ec.append(lam)
        neq += 1
        for i, x in enumerate(kids):
            Ar.append(np.full(N, x))
            Ac.append(ys[:, i])
            Av.append(np.full(N, prob))
        for t in range(1, r + 1):
            for T in itertools.combinations(range(r), t):
                cap = 1.0 - np.prod(1.0 - b_hi[:, list(T)], axis=1)
                rows = nrow + np.arange(N)
                nrow += N
                for i in T:
                    Ar.append(rows)
                    Ac.append(ys[:, i])
                    Av.append(np.ones(N))
                Ar.append(rows)
                Ac.append(lam)
                Av.append(-cap)
        layout.append((n, kids, combos, lam))
    A = sp.csr_matrix((np.concatenate(Av), (np.concatenate(Ar), np.concatenate(Ac))), shape=(nrow, ncol))
    E = sp.csr_matrix((np.ones(sum(len(e) for e in Er)), (np.concatenate(Er), np.concatenate(Ec))),
                      shape=(neq, ncol))
    rhs = np.concatenate([q0, np.zeros(nrow - V)])
    x = cp.Variable(ncol, nonneg=True)
    problem = cp.Problem(cp.Maximize(np.concatenate(obj) @ x), [A @ x <= rhs, E @ x == 1])
    status, _, used = programs.solve_program(problem, "HIGHS", programs.LP_SOLVER_OPTS, None, programs.LP_FALLBACK_SOLVER)
    if status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"the family LP did not solve ({status}, {used}) on {inst}")
    return float(problem.value), np.asarray(x.value), layout, ncol, used


def _real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) and math.isfinite(x)


def family_bracket(inst: Instance, rounds: int = 12, parts: int = 4, tol: float = 1e-6,
                   decide_at: float | None = None) -> Bracket:
    """Lower and upper bounds on the best E[τ] of a one-bit compositional rule (module doc).

    Args:
        inst: an instance with L = 2 (any V, K ≥ 1; the LP has Π_x |cells| columns per
            configuration, so V = 3, K = 3 is slow).
        rounds: refinements at most (≥ 1); parts: each used cell is cut into this many (≥ 2);
        tol: stop when upper − lower < tol (> 0); decide_at: also stop once the bracket lies on
            one side of this value (lower ≥ decide_at or upper < decide_at), e.g. 0.98·LP.
    Returns:
        Bracket (E[τ] in accepted tokens per iteration).
    Raises:
        ValueError: inst.K not an integer ≥ 1, inst.L ≠ 2, rounds < 1, parts < 2, tol not a
        positive number, decide_at not a finite number (bools are refused); RuntimeError: an LP
        that no solver solved.
    Source: module doc; proofs_check/NON_MODIFYING_RULES.md §7b.
    """
    check_positive_int(inst.K, "inst.K")
    if isinstance(inst.L, (bool, np.bool_)) or check_positive_int(inst.L, "inst.L") != 2:
        raise ValueError(f"inst: the family's optimum is computed at L = 2 only, got L = {inst.L!r}")
    rounds = check_positive_int(rounds, "rounds")
    parts = check_positive_int(parts, "parts")
    if parts < 2:
        raise ValueError(f"parts must be at least 2, got {parts}")
    if not (_real(tol) and tol > 0):
        raise ValueError(f"tol must be a positive finite number, got {tol!r}")
    if decide_at is not None and not _real(decide_at):
        raise ValueError(f"decide_at must be a finite number or None, got {decide_at!r}")
    eff = {(x, m): efficiency(inst.target.conditional((x,)), inst.draft.conditional((x,)), m)
           for x in range(inst.V) for m in range(1, inst.K + 1)}
    # one budget axis per (configuration, child): a cell is cut only where its configuration uses it
    grids = {"start": sorted({*np.linspace(0.0, 1.0, 11).tolist(), 1e-3, 1e-2})}
    lower, upper = -math.inf, math.inf
    for done in range(1, rounds + 1):
        bound, xv, layout, ncol, used = _program(inst, grids, eff, upper=True)
        upper = min(upper, bound)  # every round's bound is valid; keep the tightest
        lower = max(lower, _program(inst, grids, eff, upper=False)[0])
        decided = decide_at is not None and (lower >= decide_at or upper < decide_at)
        if upper - lower < tol or decided or done == rounds:
            break
        cut: dict = {}
        for n, kids, combos, lam in layout:
            for j in np.nonzero(xv[lam] > 1e-9)[0]:
                for i, x in enumerate(kids):
                    cut.setdefault((n, x), set()).add(int(combos[j, i]))
        for key, cells in cut.items():
            pts = grids[key]
            new = {pts[c] + (pts[c + 1] - pts[c]) * k / parts for c in cells for k in range(1, parts)}
            grids[key] = sorted(set(pts) | new)
    return Bracket(lower, upper, done, ncol, used)


def study_instances(quick: bool = False) -> list[Instance]:
    """The instances of claim 12h's space at L = 2 (V ∈ {2, 3}, K ∈ {2, 3}, V^(2K) ≤ 81): the
    toy at K = 2, 3, the claim's counterexample, and seeded random ones (concentrations 0.3-30,
    some zero-probability tokens)."""
    out = [toy(2, 2), toy(3, 2), random_instance(2, 2, 2, 0, 0.3)]
    settings = [(0.3, 0.0), (1.0, 0.0), (3.0, 0.0), (30.0, 0.0), (1.0, 0.3)]
    shapes = [(2, 2), (2, 3), (3, 2)]
    seeds = range(1, 3) if quick else range(1, 7)
    for V, K in shapes:
        for seed in seeds:
            for conc, zero in (settings[:2] if quick else settings):
                out.append(random_instance(V, K, 2, 10 * seed + V + K, conc, zero))
    return out


@dataclass(frozen=True)
class Row:
    """One instance of the study: E[τ] values in accepted tokens per iteration; the family's
    bracket [lower, upper] after ``rounds``; the solver of its last upper-bound LP."""

    label: str
    lp: float
    lower: float
    upper: float
    mdbv: float
    mdbv_kseq: float
    spectr: float
    rounds: int
    solver: str


def study(instances: list[Instance], rounds: int = 12, log=sys.stderr) -> list[Row]:
    """One Row per instance (L = 2 each): its LP, the family's bracket refined until it lies on
    one side of 98 % of the LP (or ``rounds`` are spent), and the exact E[τ] of MDBV, MDBV-KSEQ
    and SpecTr; progress lines go to ``log``.

    Raises:
        ValueError, RuntimeError: as ``family_bracket``; RuntimeError: an LP that did not solve.
    """
    rows = []
    for inst in instances:
        t0 = time.time()
        lp = Q.program(inst, "no_modification")
        br = family_bracket(inst, rounds=rounds, decide_at=0.98 * lp)
        row = Row(str(inst), lp, br.lower, br.upper, Q.e_tau(inst, "mdbv"),
                  Q.e_tau(inst, "mdbv_kseq"), Q.e_tau(inst, "spectr"), br.rounds, br.solver)
        rows.append(row)
        print(f"  {inst}: LP {row.lp:.6f} family [{row.lower:.6f}, {row.upper:.6f}] MDBV {row.mdbv:.6f} "
              f"({time.time() - t0:.1f} s)", file=log)
    return rows


def _pct(ceiling: float, value: float) -> str:
    return f"{100 * Q.gap_to(ceiling, value):.2f} %"


def verdict(r: Row) -> str:
    """Whether some rule of the family is within 2 % of the LP on this row's instance."""
    if Q.gap_to(r.lp, r.lower) <= 0.02:
        return "yes"
    if Q.gap_to(r.lp, r.upper) > 0.02:
        return "**no**"
    return f"undecided ({r.rounds} rounds)"


def markdown(rows: list[Row]) -> str:
    """The study's table (ONE_BIT_FAMILY.md) and its summary line, from ``study``'s rows."""
    out = ["| instance | no-mod LP | family optimum ≥ | family optimum ≤ | MDBV | MDBV-KSEQ | SpecTr "
           "| a family rule within 2 % of the LP | MDBV gap to LP | family's gap to LP ≥ | MDBV below the family's lower bound |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.label} | {r.lp:.6f} | {r.lower:.6f} | {r.upper:.6f} | {r.mdbv:.6f} | "
                   f"{r.mdbv_kseq:.6f} | {r.spectr:.6f} | {verdict(r)} | {_pct(r.lp, r.mdbv)} | "
                   f"{_pct(r.lp, min(r.upper, r.lp))} | {_pct(r.lower, r.mdbv)} |")
    counts = {v: sum(verdict(r).startswith(v) for r in rows) for v in ("yes", "**no**", "undecided")}
    mdbv_out = sum(Q.gap_to(r.lp, r.mdbv) > 0.02 for r in rows)
    worst = max(rows, key=lambda r: Q.gap_to(r.lower, r.mdbv))
    out += ["", f"Instances: {len(rows)}.  Some rule of the family within 2 % of the LP: yes on "
            f"{counts['yes']}, no on {counts['**no**']}, undecided on {counts['undecided']}.  MDBV more "
            f"than 2 % below the LP: {mdbv_out}.  A rule of the family beats MDBV by at least "
            f"{_pct(worst.lower, worst.mdbv)} on {worst.label} (the lower bound is attained by a rule of the "
            f"family); the family's lower bound equals MDBV to 1e-9 on "
            f"{sum(abs(r.lower - r.mdbv) <= 1e-9 for r in rows)}."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    import argparse
    import os

    class OneLineParser(argparse.ArgumentParser):  # a refusal is one line naming the flag
        def error(self, message):
            self.exit(2, f"{self.prog}: error: {message}\n")

    def positive(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
        return value

    def writable(text: str) -> str:
        folder = os.path.dirname(os.path.abspath(text))
        if not os.path.isdir(folder):
            raise argparse.ArgumentTypeError(f"{folder} is not a folder")
        return text

    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds and 2 settings per shape (15 instances)")
    ap.add_argument("--rounds", type=positive, default=12, help="refinement rounds per instance (default 12)")
    ap.add_argument("--md", type=writable, help="write the Markdown table here (default: stdout)")
    args = ap.parse_args(argv)
    text = markdown(study(study_instances(args.quick), rounds=args.rounds))
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
