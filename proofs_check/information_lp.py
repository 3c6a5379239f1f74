"""A ceiling for practical no-modification rules: the no-modification LP with what a verifier
cannot see.

A verifier sees the draft and target rows only at the drafted prefixes.  The no-modification
LP (docs/bounds.md §4.4; proofs_check/NON_MODIFYING_RULES.md §2) lets the law of the accepted
prefix N, given the drafts, depend on every row of the instance, including the target's rows
below prefixes nobody drafted.  A practical rule is one map from what it sees to a decision,
lossless on *every* pair of models.  So if two instances differ only in the target row q(·|u)
at a prefix u, on every draft tuple that does not contain u the rule must decide the same way on
both, and be lossless on both.

This module solves that LP on an instance M together with perturbed copies M_1..M_J (each with
the target rows at some prefixes u replaced), one decision per (draft tuple, rows seen):

    variables, per decision key κ = (draft multiset D, the rows seen at D's prefixes):
        y_κ(z, x) = P(N = z, correction x | D)    for the prefixes z of D with |z| < L
        π_κ(z)    = P(N = z | D)                  for the blocks z of D (|z| = L: the bonus
                                                  follows from q)
        Σ y_κ + Σ π_κ = 1,  y, π ≥ 0
    per model m ∈ {M, M_1..M_J}, every z with |z| < L and token x (the lossless condition of
    NON_MODIFYING_RULES.md §2, with A_m(z) = P_m(N ⪰ z), A_m(()) = 1):
        Σ_D P(D)·y_κm(D)(z, x) = A_m(z)·q_m(x | z) − A_m(zx)
    maximise E_M[τ] = Σ_D P(D) Σ_z |z|·P(N = z | D).

With J = 0 it is the no-modification LP (tested equal).  Every practical non-modifying rule
(one whose decision depends only on the rows it sees) gives a feasible point, so for any set of
perturbations the optimum bounds its E[τ] on M; more perturbations can only lower it.  The
drafts are indexed by multiset: the models' draft law is exchangeable and the observations of
a permuted tuple are the same, so averaging a rule over the K! orders keeps it feasible and its
objective.

**What it shows: nothing is lost.**  On one instance the optimum is the LP itself: a rule can
carry M's optimal decisions and, on drafts that pass a prefix whose rows differ from M's, map
every outcome below the shallowest such prefix s to s (averaged over what lies below s, whose
law is the only thing a changed draft row alters) with the correction drawn from the target row
seen at s.  That rule decides on what it sees, is lossless on every model, and attains the LP
on M.  So the LP is the right per-instance ceiling for practical rules, and MDBV's gap to it
(claim 12h) is its own, not an information limit; what no rule can do is attain the LP on
every instance with one map, which this program does not measure.

The program is solved as that argument runs, because HiGHS declared the whole program
infeasible on peaked rows where it is not (it has tiny P(D), ~1e-16): (1) the instance's own
program (the LP), then (2) with the instance's decisions fixed at the optimum found, the least
total violation of the perturbed copies' constraints over their own decisions
(``InformationBound.violation``, the largest violation of one constraint, 0 to the solvers'
tolerance when the optimum extends: a certificate that the information-limited optimum equals
the LP).  Columns are joint masses P(D)·y (coefficients 1
and −q rather than products of small probabilities).

Perturbations used by ``default_perturbations``: at every prefix u with 1 ≤ |u| ≤ L − 1, the
target row replaced by each near-vertex (1 − ε)·e_x + ε/V (ε = 0.02) and by ``random_rows``
Dirichlet(1) rows (seeded), one prefix at a time, plus ``joint`` models with every such row
replaced at once.

Solved with scipy.optimize.linprog (HiGHS) on a sparse matrix: the programs have up to ~10^5
columns, where building a cvxpy expression per column would dominate; the same solver as
proofs_check/non_modifying_study.acceptance_lp.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from spectr_gbv.reference.validation import check_positive_int

from spectr_gbv.proofs_check.instances import Instance

EPSILON = 0.02
# (method, feasibility tolerance, presolve), tried in order until one reports success: HiGHS's
# dual simplex and interior point (with crossover) at oracle.programs' 1e-9, with and without
# presolve, then looser.  On peaked rows HiGHS declared some of these programs infeasible
# (presolve on, or tolerances of 1e-10) although "stop at the root" is always feasible, and at
# its default 1e-7 an optimum exceeded the LP by 1e-7; ``violation`` is read against the
# tolerance that solved it (``InformationBound.solver``).  Last, cvxpy's CLARABEL.
SOLVERS = (("highs-ds", 1e-9, True), ("highs-ipm", 1e-9, True), ("highs-ds", 1e-9, False),
           ("highs-ipm", 1e-9, False), ("highs-ds", 1e-8, False), ("highs", 1e-7, True))


@dataclass(frozen=True)
class Perturbation:
    """Rows replaced at some prefixes: ``changed`` the target's, ``changed_p`` the draft's, each
    ((prefix, row_id), ...) with the rows in the ``rows`` mapping passed alongside."""

    changed: tuple = ()
    changed_p: tuple = ()


@dataclass
class InformationBound:
    """What ``information_bound`` found.

    Attributes:
        lp: the no-modification LP on the instance (max E[τ], accepted tokens per iteration);
            NaN with ``observed=False`` (the blind program is solved instead).
        optimum: the information-limited optimum certified: ``lp`` when ``violation`` is 0 (up to
            the solver's ~1e-15), the blind program's optimum with ``observed=False``.
        violation: with the instance's decisions fixed at the LP optimum found, the largest
            |A x − b| over the perturbed copies' constraints (one per (model, z, x) and per key's
            normalisation) at the copies' own decisions that minimise Σ|A x − b|, recomputed
            from those decisions (≥ 0); 0 to the solver's feasibility tolerance (1e-9 per
            constraint) means the optimum extends to every copy: a rule deciding on what it sees
            attains the LP.  0 with ``observed=False``.
        models: 1 + the number of perturbed copies.
        columns, rows: the whole program's size.
        solver: the ``SOLVERS`` entries that solved step 1 and step 2.
    """

    lp: float
    optimum: float
    violation: float
    models: int
    columns: int
    rows: int
    solver: str = ""


def default_perturbations(V: int, L: int, random_rows: int = 2, joint: int = 2, seed: int = 0):
    """(rows, perturbations): at every prefix of length 1..L−1, the target's row and (separately)
    the draft's row replaced by each near-vertex and by ``random_rows`` seeded Dirichlet(1) rows,
    one prefix at a time; and ``joint`` models with every such target and draft row replaced.

    Returns:
        rows: {row_id: float64 [V]}; perturbations: list of Perturbation.
    Raises:
        ValueError: V or L not an integer ≥ 1; random_rows, joint or seed not an integer ≥ 0.
    """
    from spectr_gbv.reference.validation import check_positive_int

    V, L = check_positive_int(V, "V"), check_positive_int(L, "L")
    for name, value in (("random_rows", random_rows), ("joint", joint), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    rng = np.random.default_rng(seed)
    rows, out = {}, []
    prefixes = [u for n in range(1, L) for u in itertools.product(range(V), repeat=n)]
    for side in ("q", "p"):
        for u in prefixes:
            for x in range(V):
                rid = (side, "vertex", u, x)
                rows[rid] = np.full(V, EPSILON / V) + (1.0 - EPSILON) * np.eye(V)[x]
                out.append(Perturbation(**{"changed" if side == "q" else "changed_p": ((u, rid),)}))
            for j in range(random_rows):
                rid = (side, "random", u, j)
                rows[rid] = rng.dirichlet(np.ones(V))
                out.append(Perturbation(**{"changed" if side == "q" else "changed_p": ((u, rid),)}))
    for j in range(joint if prefixes else 0):
        changed = {"q": [], "p": []}
        for side in ("q", "p"):
            for u in prefixes:
                rid = (side, "joint", u, j)
                rows[rid] = rng.dirichlet(np.ones(V))
                changed[side].append((u, rid))
        out.append(Perturbation(tuple(changed["q"]), tuple(changed["p"])))
    return rows, out


def _multisets(blocks: list, K: int, joints: list[dict]) -> list:
    """(multiset D of K blocks, [P_m(D) for each model m]): multinomial weights of the
    exchangeable i.i.d. drafts, per model's block law ``joints[m]``."""
    out = []
    for D in itertools.combinations_with_replacement(blocks, K):
        counts = Counter(D)
        weight = math.factorial(K) / math.prod(math.factorial(c) for c in counts.values())
        out.append((D, [weight * math.prod(j[b] for b in D) for j in joints]))
    return out


def information_bound(inst: Instance, rows: dict | None = None, perturbations=None,
                      observed: bool = True) -> InformationBound:
    """Solve the LP of the module doc on ``inst`` and its perturbed copies.

    Args:
        inst: the instance (K drafts of L tokens).
        rows, perturbations: from ``default_perturbations`` (None: those defaults); an empty
            list gives the no-modification LP.
        observed: False makes the decisions blind to the replaced rows (one decision per draft
            multiset in every model): not a verifier's situation, a check that the shared
            decisions constrain the program when information is really missing.
    Returns:
        InformationBound.
    Raises:
        ValueError: K or L not integers ≥ 1; draft and target vocabularies differ; ``observed``
            not a bool; a perturbation that is not a Perturbation of (prefix, row id) pairs, a
            prefix that is not a tuple of token ids of length 1..L−1, a row that is not a real
            probability vector over V tokens; a program not solved.
    """
    K, L, V = check_positive_int(inst.K, "K"), check_positive_int(inst.L, "L"), inst.V
    if inst.draft.vocab_size != V:
        raise ValueError(f"inst: vocabulary mismatch: draft has V = {inst.draft.vocab_size}, target has V = {V}")
    if not isinstance(observed, (bool, np.bool_)):
        raise ValueError(f"observed must be True or False, got {observed!r}")
    if perturbations is None:
        rows, perturbations = default_perturbations(V, L)
    rows = {} if rows is None else rows
    if not isinstance(rows, dict):
        raise ValueError(f"rows must map row ids to probability vectors, got {type(rows).__name__}")
    perturbations = list(perturbations)
    for pert in perturbations:
        if not isinstance(pert, Perturbation):
            raise ValueError(f"perturbations: {pert!r} is not a Perturbation")
        for pair in tuple(pert.changed) + tuple(pert.changed_p):
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ValueError(f"perturbations: {pair!r} is not a (prefix, row id) pair")
            u, rid = pair
            if not (isinstance(u, tuple) and 1 <= len(u) <= L - 1
                    and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and 0 <= t < V for t in u)):
                raise ValueError(f"perturbations: prefix {u!r} is not a prefix of length 1..L-1 = {L - 1} over V = {V}")
            try:
                r = np.asarray(rows[rid]) if rid in rows else None
            except TypeError:  # an unhashable id
                r = None
            if (r is None or r.dtype.kind not in "fiu" or r.shape != (V,) or not np.all(np.isfinite(r))
                    or np.any(r < 0) or abs(float(r.sum()) - 1) > 1e-9):
                raise ValueError(f"perturbations: row {rid!r} is not a probability vector over V = {V} tokens")
    models = [({}, {})] + [(dict(p.changed), dict(p.changed_p)) for p in perturbations]

    def q_row(m, z: tuple) -> np.ndarray:
        return np.asarray(rows[m[0][z]], dtype=float) if z in m[0] else inst.target.conditional(z)

    def p_row(m, z: tuple) -> np.ndarray:
        return np.asarray(rows[m[1][z]], dtype=float) if z in m[1] else inst.draft.conditional(z)

    all_blocks = list(itertools.product(range(V), repeat=L))
    joints = [{b: math.prod(float(p_row(m, b[:i])[b[i]]) for i in range(L)) for b in all_blocks} for m in models]
    blocks = [b for b in all_blocks if any(j[b] > 0 for j in joints)]
    drafts = _multisets(blocks, K, joints)

    # columns: per decision key, y(z, x) for inner prefixes z of D, π(z) for its blocks
    keys: dict = {}
    col_of: list = []  # per key: {("y", z, x) | ("pi", z): column}
    n_cols = 0
    tree_of = []
    for D, _ in drafts:
        nodes = sorted({b[:n] for b in D for n in range(L + 1)}, key=lambda z: (len(z), z))
        tree_of.append(nodes)
    key_of = np.empty((len(models), len(drafts)), dtype=np.int64)
    mass: list = []  # per key: P(D) of every (model, D) deciding with it (None: they differ)
    for mi, m in enumerate(models):
        for di, (D, weights) in enumerate(drafts):
            seen = tuple((z, side, m[i][z]) for z in tree_of[di] if len(z) < L
                         for i, side in ((0, "q"), (1, "p")) if z in m[i])
            key = (di, seen if observed else ())
            if key not in keys:
                cols = {}
                for z in tree_of[di]:
                    if len(z) < L:
                        for x in range(V):
                            cols[("y", z, x)] = n_cols
                            n_cols += 1
                    else:
                        cols[("pi", z)] = n_cols
                        n_cols += 1
                keys[key] = len(col_of)
                col_of.append(cols)
                mass.append(weights[mi])
            k = keys[key]
            key_of[mi, di] = k
            if mass[k] is not None and mass[k] != weights[mi]:
                mass[k] = None
    # Columns in joint mass Y = P(D)·y where every use of a key has one P(D) (always, when the
    # rows seen include the draft's: a replaced draft row changes P(D) only of the drafts that
    # pass it): coefficients 1 and −q instead of products of small P(D) (HiGHS declared a
    # feasible program on peaked rows infeasible in the conditional form).  Else (blind
    # decisions) the conditional form, unit 1.
    joint_unit = list(mass) if all(x is not None for x in mass) else [1.0] * len(mass)

    def build(unit, n_models=len(models), n_keys=len(col_of)):
        # the program with columns y·unit per key (unit 1: conditional probabilities), for the
        # first n_models models and n_keys keys (whose columns come first)
        inner = [z for n in range(L) for z in itertools.product(range(V), repeat=n)]
        slot = {(z, x): j for j, (z, x) in enumerate((z, x) for z in inner for x in range(V))}
        r_idx, c_idx, vals, rhs = [], [], [], []
        row = 0
        for mi, m in enumerate(models[:n_models]):
            base = row
            q_of = {z: q_row(m, z) for z in inner}
            # row (z, x):  Σ_D P(D) [y(z, x) + N-mass ⪰ zx − q(x|z)·N-mass ⪰ z] = q(x) at the root
            # (A(()) = 1 moved to the right side), else 0.  A column at node zc enters the N-mass of
            # every prefix of zc; a y column also its own (zc, x) row.
            for di, (D, weights) in enumerate(drafts):
                if weights[mi] == 0.0:
                    continue
                w = weights[mi] / unit[key_of[mi, di]]
                for name, c in col_of[key_of[mi, di]].items():
                    zc = name[1]
                    if name[0] == "y":
                        r_idx.append(base + slot[(zc, name[2])])
                        c_idx.append(c)
                        vals.append(w)
                    for j in range(1, len(zc) + 1):  # zx = zc[:j] ⪯ zc
                        r_idx.append(base + slot[(zc[:j - 1], zc[j - 1])])
                        c_idx.append(c)
                        vals.append(w)
                    for j in range(1, min(len(zc), L - 1) + 1):  # z = zc[:j] ⪯ zc, z ≠ ()
                        z = zc[:j]
                        for x in range(V):
                            if q_of[z][x]:
                                r_idx.append(base + slot[(z, x)])
                                c_idx.append(c)
                                vals.append(-w * q_of[z][x])
            rhs.extend(q_of[z][x] if not z else 0.0 for z in inner for x in range(V))
            row += len(slot)
        for k, cols in enumerate(col_of[:n_keys]):  # normalisation per key: Σ y = 1, i.e. Σ Y = unit
            for c in cols.values():
                r_idx.append(row)
                c_idx.append(c)
                vals.append(1.0)
            rhs.append(unit[k])
            row += 1
        cols_used = sum(len(cols) for cols in col_of[:n_keys])
        A = sp.csr_matrix((vals, (r_idx, c_idx)), shape=(row, cols_used))
        b = np.array(rhs)
        objective = np.zeros(cols_used)
        for di, (D, weights) in enumerate(drafts):
            if weights[0] == 0.0:
                continue
            for name, c in col_of[key_of[0, di]].items():
                objective[c] -= weights[0] / unit[key_of[0, di]] * len(name[1])
        return A, b, objective, row

    A, b, objective, row = build(joint_unit)
    if not observed:  # blind decisions: one joint program (the keys are shared by every model)
        res, label = _solve(objective, A, b, inst, "the blind program")
        return InformationBound(float("nan"), -res.fun, 0.0, len(models), n_cols, row, label)
    # 1. the instance's own program (the base keys come first, the base rows are its model's
    #    and the base keys' normalisations): the no-modification LP
    n_base = 1 + max(key_of[0])
    base_cols = sum(len(col_of[k]) for k in range(n_base))
    n_slot = V * sum(V ** n for n in range(L))  # rows per model: (z, x) with |z| < L
    base_rows = np.r_[np.arange(n_slot), len(models) * n_slot + np.arange(n_base)]
    other_rows = np.setdiff1d(np.arange(row), base_rows)
    # in conditional form (the joint form's tiny right sides made HiGHS fail on peaked rows),
    # converted to joint masses for step 2
    Ac, bc, objc, _ = build([1.0] * len(mass), n_models=1, n_keys=n_base)
    res, label = _solve(objc, Ac, bc, inst, "the no-modification LP")
    x0 = res.x * np.repeat(np.asarray(joint_unit[:n_base], dtype=float),
                           [len(col_of[k]) for k in range(n_base)])
    # 2. extend that optimum's decisions to every perturbed copy: the least total violation
    #    Σ|A x − b| over the other keys' columns with the base columns fixed at x0
    if len(other_rows) == 0:
        return InformationBound(-res.fun, -res.fun, 0.0, len(models), n_cols, row, label)
    A1 = A[other_rows]
    fixed = A1[:, :base_cols] @ x0
    free = A1[:, base_cols:]
    m = len(other_rows)
    slack = sp.hstack([free, sp.eye(m), -sp.eye(m)], format="csr")
    cost = np.r_[np.zeros(free.shape[1]), np.ones(2 * m)]
    ext, label2 = _solve(cost, slack, b[other_rows] - fixed, inst, "the extension to the perturbed copies")
    # the violation recomputed from the decisions found (clipped to ≥ 0), not read off the
    # solver's objective: its slacks may come back negative within tolerance
    x_free = np.maximum(ext.x[:free.shape[1]], 0.0)
    residual = np.abs(free @ x_free + fixed - b[other_rows])
    return InformationBound(-res.fun, -res.fun, float(residual.max()), len(models), n_cols, row,
                            f"{label}; {label2}")


def _solve(cost, A, b, inst, what):
    """linprog with the first of ``SOLVERS`` that reports success; (result, solver label)."""
    messages = []
    for method, tol, presolve in SOLVERS:
        res = linprog(cost, A_eq=A, b_eq=b, bounds=(0, None), method=method,
                      options=dict(primal_feasibility_tolerance=tol, dual_feasibility_tolerance=tol,
                                   presolve=presolve))
        label = f"{method} at {tol:g}{'' if presolve else ', no presolve'}"
        messages.append(f"{label}: {res.message}")
        if res.status == 0:
            return res, label
    res = _clarabel(cost, A, b)
    messages.append(f"CLARABEL: {res.message}")
    if res.status == 0:
        return res, "CLARABEL"
    raise ValueError(f"information bound on {inst}: {what} was not solved ({'; '.join(messages)})")


def _clarabel(cost, A, b):
    """The same program by cvxpy's CLARABEL (interior point, tolerances 1e-8): the last resort
    where every HiGHS setting declared it infeasible.  Returns an object with linprog's fields
    status (0: solved), fun, x, message."""
    import types

    import cvxpy as cp

    x = cp.Variable(A.shape[1], nonneg=True)
    problem = cp.Problem(cp.Minimize(cost @ x), [A @ x == b])
    try:
        problem.solve(solver="CLARABEL")
    except cp.error.SolverError as err:
        return types.SimpleNamespace(status=2, fun=float("nan"), x=None, message=str(err))
    ok = problem.status == cp.OPTIMAL
    return types.SimpleNamespace(status=0 if ok else 2, fun=float(problem.value) if ok else float("nan"),
                                 x=np.maximum(x.value, 0.0) if ok else None, message=problem.status)


def study(instances, log=None) -> list[dict]:
    """``information_bound`` on each instance beside oracle.programs' no-modification LP.

    Returns:
        one dict per instance: label, V, K, L, lp (this program's step 1), oracle (the oracle's
        LP), violation (step 2), models, columns, solver, seconds; or error (a program not solved).
    """
    import time

    from spectr_gbv.proofs_check.quantities import program

    out = []
    for inst in instances:
        t0 = time.perf_counter()
        row = dict(label=str(inst), V=inst.V, K=inst.K, L=inst.L, oracle=program(inst, "no_modification"))
        try:
            b = information_bound(inst)
            row.update(lp=b.lp, violation=b.violation, models=b.models, columns=b.columns, solver=b.solver)
        except ValueError as err:
            row["error"] = str(err)
        row["seconds"] = time.perf_counter() - t0
        out.append(row)
        if log:
            log(f"  {row['label']}: " + (f"violation {row['violation']:.1e}" if "violation" in row else "not solved"))
    return out


def markdown(rows: list[dict]) -> str:
    """The study as a markdown table."""
    lines = ["| instance | no-modification LP (oracle) | step 1 − oracle | largest violation of a copy's "
             "constraint (step 2) | copies | columns | solver (steps 1; 2) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | {r['oracle']:.9f} | not solved | – | – | – | {r['error'][:80]} |")
            continue
        lines.append(f"| {r['label']} | {r['oracle']:.9f} | {r['lp'] - r['oracle']:+.1e} | {r['violation']:.1e} | "
                     f"{r['models'] - 1} | {r['columns']} | {r['solver']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m spectr_gbv.proofs_check.information_lp [--quick]``: the study over
    non_modifying_study.study_instances, printed as markdown."""
    import argparse
    import sys

    from spectr_gbv.proofs_check.non_modifying_study import study_instances

    ap = argparse.ArgumentParser(description="the no-modification LP with what a verifier cannot see")
    ap.add_argument("--quick", action="store_true", help="leave out the cells with V^(K·L) > 729")
    args = ap.parse_args(argv)
    rows = study(study_instances(quick=args.quick), log=lambda line: print(line, file=sys.stderr, flush=True))
    print(markdown(rows))
    worst = max((r["violation"] for r in rows if "violation" in r), default=float("nan"))
    print(f"\n{sum('violation' in r for r in rows)} of {len(rows)} instances solved; worst violation {worst:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
