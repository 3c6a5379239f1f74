"""MDBV — multi-draft block verification on the merged draft tree, no modification.

A construction of this project (docs/rules.md §2.10); lossless by construction (argument below)
and checked with the exact engine (tests/reference/test_lossless.py).  It uses every draft
at every depth, like SpecTr (Sun et al., NeurIPS 2023, arXiv 2310.15141), and decides each
prefix jointly with its subtree, like BV (Sun et al., ICLR 2025, arXiv 2403.10444, Algorithm 2;
docs/rules.md §2.3).  Derivation, study and numbers: proofs_check/NON_MODIFYING_RULES.md.

The K drafts are merged into a prefix tree (as for Traversal Verification): a node z of depth
i carries m(z) drafts (its multiplicity) and is named (k, i), k the lowest draft carrying it;
coin (k, i) is that node's only coin.  Every node z gets a budget w(z) ∈ [0, 1] and runs the
sub-rule S(z) below; S(z) SUCCEEDS with probability exactly w(z) (averaged over the drafts
below z and the coins) and, given success, emits tokens whose continuation by the plain target
has law q(· | z).  The root has w = 1, so the iteration is lossless and leaves later
iterations untouched (modifies_targets = False).

S(z), depth i = L (a leaf):  succeed iff coin (k, L), probability w(z); emit the bonus.

S(z), depth i < L, rows p = p(·|z), q = q(·|z), m = m(z), scaled target w·q:
 1. Selection law ("which child wins"), a function of the m next tokens only, with marginal
    A(x) = P(winner = x) ≤ w·q(x) in closed form.  Two families; the one with the larger
    ΣA is used (ties: K-SEQ):
    a. class-K-SEQ: sort the tokens with p > 0 by q/p decreasing; the first j are singleton
       classes, the rest one class (every cut j = 0..n is tried; j = 0 is K-SEQ).  Each draft
       is "marked" independently with probability e(x) if its next token is x; the winner is
       a uniformly random marked draft of the first class that has one.  Per class
       e(x) = min(1, w·q(x)/(κ·p(x))), κ the smallest value on the valid side of
           (1 − c)^m − (1 − c − s)^m ≤ κ·s,   s = Σ_{x∈C} p(x)e(x),  c = marked mass before C
       (K-SEQ's ρ* equation, docs/rules.md §2.2, per class), so that
           A(x) = p(x)e(x)·[(1 − c)^m − (1 − c − s)^m]/s ≤ min(κ·p(x), w·q(x)).
    b. count-priority: tokens in the same q/p order; the first drafted token not yet declined
       is selected with a probability β_x(k) that depends on how many drafts k carry it,
       largest counts first, up to A(x) = min(w·q(x), P(x reached and drafted)) (exact by a
       dynamic programme over the drafts not yet assigned, O(V·m²)).
 2. Given the drafted children (tokens x with multiplicities m_x) the conditional probability
    s_x = P(winner = x | multiplicities) has a closed form (class-K-SEQ: products and a
    polynomial integral ∫_0^1 m_x e_x (1 − e_x + e_x t)^{m_x−1} Π_{y≠x}(1 − e_y + e_y t)^{m_y} dt
    inside the last class; count-priority: Π_{earlier}(1 − β_y(m_y))·β_x(m_x)).
 3. Try the drafted children one after another; the j-th child tried gets the budget
    w(zx) = s_x / (1 − Σ_{children tried before} s) and runs S(zx); the first success wins.
    This realises "the winner is x" with probability s_x given the multiplicities, and the
    winner's acceptance event is its subtree's success (the BV look-ahead: a prefix is kept
    when its continuation verifies).  Order: by how much a child's one-level efficiency
    T(b) = (acceptance of its own children at budget b)/b drops if it is tried last rather
    than first (budgets grow along the order; a large budget on a child whose drafts cannot
    carry it is wasted).  The order uses the rows at z and at its drafted children and the
    multiplicities, never the tokens drafted below the children, so each child's success
    probability stays exactly its budget.  Losses equal to reference.ties' tolerance are
    ordered by token id: rounding must not decide an exact tie (float32 rows once moved the law
    by TV 0.12 that way).  Among tied orders the one with the best E[τ] cannot be taken: E[τ]
    given the drafts depends on the tokens below the children, which the order must not use.
 4. No child succeeded: succeed at z with probability h = (w − ΣA)/(1 − ΣA) (coin (k, i); the
    root's h is 1) and emit the correction ∝ w·q − A.

Losslessness, by induction on L − i: the children succeed with total probability ΣA, the
token after z being x with probability A(x) ≤ w·q(x), followed by a q(·|zx)-continuation
(induction); the fallback adds w·q(x) − A(x); so S(z) succeeds with probability w and its next
token has law q(·|z).  The subtrees of distinct children are independent given the
multiplicities, so a child's success probability is its budget whatever happened before it.
The selection parameters of a node (step 1) may depend only on the node's own rows, w and m:
the residual needs A(x) for every token x, also for children that were not drafted, whose
rows the verifier never sees.

Reductions: K = 1 (every m = 1) is exactly BV — both families give e = min(1, w·q/p), the
child's budget min(1, w·q/p) = p_i, h = Z/(Z + 1 − w), the same coins (0, i).  It does NOT
reduce to K-SEQ at L = 1: there it is the better of class-K-SEQ and count-priority, ≥ K-SEQ.

Cost per iteration: O(K·L) nodes; per node an O(V log V) sort, O(V) per bisection step of κ
for each of the n + 1 cuts (the reference evaluates them plainly; with prefix sums over the
sorted ratios a cut costs O(log V) per step), O(V·m²) for count-priority, O(K²) per child for
the selection polynomials.  Randomness: one coin per tree node, keys (k, i), each asked at
most once; exactly one draw (the correction or the bonus).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import comb

import numpy as np
from numpy.polynomial import polynomial as npoly

from spectr_gbv.reference.kseq import smallest_valid
from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.ties import better, descending_order
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual
from spectr_gbv.reference.rules.traversal import merged_tree

_CACHE: dict = {}


def _covered(F: float, s: float, m: int) -> float:
    """F^m − (F − s)^m for 0 ≤ s ≤ F, without cancellation when s ≪ F (expm1/log1p form).

    The probability that some of m drafts lands in a set of mass s, given that none landed in
    a set of mass 1 − F (times F^m).  Tiny target masses (1e-18 next to 1) made the plain
    difference round to 0, which once turned a class's κ bisection to the wrong side.
    """
    if F <= 0.0:
        return 0.0
    if s >= F:
        return F**m
    return -(F**m) * np.expm1(m * np.log1p(-s / F))


@dataclass
class Mechanism:
    """The selection law of one node (step 1 of the module docstring).

    Attributes:
        classes: list of int arrays (token ids), in priority order.
        e: float64 [V], per-draft marking probability of each token (class-K-SEQ kind).
        A: float64 [V], probability that the winner's token is x (≤ w·q(x)).
        beta: count-priority kind only (then every class is a singleton): token x →
            float64 [m+1], beta[x][k] = probability of selecting x when it is the highest-
            priority drafted child not yet declined and k drafts carry it; None otherwise.
    """

    classes: list
    e: np.ndarray
    A: np.ndarray
    beta: dict | None = None  # count-priority kind: token → float64 [m+1], budget by count

    @property
    def total(self) -> float:
        return float(self.A.sum())


def _rest_class(pp, wq, ratio, Pp, Sq, j, free, m) -> float:
    """κ of the class made of the sorted tokens j..n−1, after the marked mass 1 − free.

    pp, wq: Python lists of p and w·q in q/p-decreasing order; ratio: w·(q/p) in that order with
    tie groups snapped to one value (reference.ties), non-increasing, so that "saturated"
    (ratio ≥ κ) is a prefix and every implementation's bisection finds the same boundary; Pp
    the prefix sums of pp, Sq the suffix sums of wq (suffix sums: a tail of tiny target masses
    must not cancel to 0).
    Returns the smallest κ (to bisection resolution) with
        free^m − (free − s(κ))^m ≤ κ·s(κ),   s(κ) = Σ_{t ≥ j} min(pp[t], wq[t]/κ).
    The upper end m·free^(m−1) is always valid (the left side is concave in s with that slope
    at 0).  The caller re-checks the result with the exactly summed s.  Source: docs/rules.md §2.2
    (K-SEQ's ρ*), restricted to the class.
    """
    n = len(pp)

    def s_of(kappa: float) -> float:
        # tokens with wq/pp ≥ κ are saturated (e = 1); they are a prefix of j..n−1
        lo, hi = j, n
        while lo < hi:
            mid = (lo + hi) // 2
            if ratio[mid] >= kappa:
                lo = mid + 1
            else:
                hi = mid
        return (Pp[lo] - Pp[j]) + Sq[lo] / kappa

    def valid(kappa: float) -> bool:
        s = s_of(kappa)
        return s > 0 and _covered(free, s, m) <= kappa * s

    return smallest_valid(valid, 0.0, m * free ** (m - 1))


def node_mechanism(p: np.ndarray, q: np.ndarray, w: float, m: int,
                   families: tuple[str, ...] = ("classes", "counts"), max_cut: int | None = None) -> Mechanism:
    """Selection law of one node against the scaled target w·q with m drafts (step 1).

    The support of p is sorted by q/p decreasing.  Candidates: class-K-SEQ for every cut j
    (first j tokens singleton classes, the rest one class; j = 0 is K-SEQ) and count-priority;
    the largest ΣA wins (ties within reference.ties' tolerance: the earlier candidate, K-SEQ
    first; tokens whose q/p are tied to that tolerance are ordered by token id).  A singleton
    class x after marked mass 1 − F gets the largest s = p(x)e(x) with
    F^m − (F − s)^m ≤ w·q(x), i.e. s = min(p(x), F − (F^m − w q(x))_+^{1/m}).

    Args:
        p, q: float64 [V], draft and target rows of the node.
        w: budget in [0, 1].
        m: number of drafts through the node, ≥ 1.
        families: the candidate families ("classes": class-K-SEQ over every cut, "counts":
            count-priority); the rule uses both, the study compares them one by one.
        max_cut: largest cut j tried by "classes" (None: every cut).  With a small max_cut
            only the first max_cut sorted tokens need the sequential singleton scan.
    Returns:
        Mechanism (memoised on the exact bytes of p, q and on w, m, families).
    Cost: O(V log V) sort, O(V · bisection · log V) per cut, O(V·m²) count-priority.
    """
    key = (p.tobytes(), q.tobytes(), float(w), int(m), tuple(families), max_cut)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    V = p.shape[0]
    support = np.flatnonzero(p > 0)
    # q/p decreasing; ratios tied to rounding are ordered by token id (reference.ties), so that
    # rows rounded to float32 give this node the same classes as the float64 rows
    pos, snapped = descending_order(q[support] / p[support], support)
    order = support[pos]
    pp = [float(x) for x in p[order]]
    wq = [float(w * x) for x in q[order]]
    ratio = [float(w * x) for x in snapped]
    n = len(pp)
    Pp = [0.0]
    for a in pp:
        Pp.append(Pp[-1] + a)
    Sq = [0.0] * (n + 1)
    for t in range(n - 1, -1, -1):
        Sq[t] = Sq[t + 1] + wq[t]
    # singletons: marked mass s_t and the free mass F_t before token t;
    # s = F − (F^m − wq)^{1/m} = −F·expm1(log1p(−wq/F^m)/m) (no cancellation for tiny wq)
    single, free = [], [1.0]
    n_cuts = n if max_cut is None else min(n, int(max_cut))
    for t in range(n_cuts):
        F = free[-1]
        if F <= 0.0:
            s = 0.0
        elif wq[t] >= F**m:
            s = min(pp[t], F)
        else:
            s = min(pp[t], -F * float(np.expm1(np.log1p(-wq[t] / F**m) / m)))
        single.append(max(s, 0.0))
        free.append(max(F - single[-1], 0.0))
    candidates = []
    if "classes" in families:
        for j in range(n_cuts + 1):
            F = free[j]
            kappa = _rest_class(pp, wq, ratio, Pp, Sq, j, F, m) if j < n and F > 0 else None
            candidates.append(_cut_mechanism(p, V, order, pp, wq, single, free, m, j, kappa))
    # the second family: count-dependent priority (see _count_priority); the larger ΣA wins,
    # ties (reference.ties tolerance) to the earlier candidate, K-SEQ first
    if "counts" in families:
        candidates.append(_count_priority(p, q, w, m, order))
    # every candidate satisfies A ≤ w·q by construction; the check guards the rounding
    ok = [c for c in candidates if np.all(c.A <= w * q * (1.0 + 1e-9) + 1e-300)]
    mech = ok[0] if ok else Mechanism([], np.zeros(V), np.zeros(V))  # nothing: A = 0 is valid
    for cand in ok[1:]:
        if better(cand.total, mech.total):
            mech = cand
    if len(_CACHE) > 200_000:
        _CACHE.clear()
    _CACHE[key] = mech
    return mech


def _cut_mechanism(p, V, order, pp, wq, single, free, m, j, kappa) -> Mechanism:
    """Class-K-SEQ with the first j sorted tokens as singletons and the rest as one class."""
    e = np.zeros(V)
    A = np.zeros(V)
    for t in range(j):
        x = order[t]
        e[x] = single[t] / pp[t]
        A[x] = _covered(free[t], single[t], m)
    classes = [order[t : t + 1] for t in range(j)]
    if kappa is not None:
        C = order[j:]
        F = free[j]
        for kap in (kappa, m * F ** (m - 1)):  # the bisection's κ, else the always-valid end
            eC = np.minimum(1.0, np.array(wq[j:]) / (kap * np.array(pp[j:])))
            s = float((p[C] * eC).sum())
            cover = _covered(F, s, m)
            if cover <= kap * s * (1.0 + 1e-12):
                break
        e[C] = eC
        if s > 0:
            A[C] = p[C] * eC * cover / s
        classes.append(C)
    return Mechanism(classes, e, A)


def _count_priority(p, q, w, m, order) -> Mechanism:
    """Priority by q/p with count-dependent budgets (the second selection family).

    Tokens are visited in ``order``; when token x is reached (no earlier drafted child
    selected) and k of the remaining drafts carry it, x is selected with probability
    beta[x][k], the largest counts first ("select x when it is drafted often"): a draft that x
    does not use stays available to the tokens after it, so x should spend its target w·q(x)
    where it leaves the fewest drafts behind.  A(x) = min(w·q(x), P(x reached and drafted)).
    Exact by a dynamic programme over the number r of drafts not yet assigned to a visited
    token, O(V·m²).  With m = 1 it coincides with class-K-SEQ (both give BV's min(p, w q)).
    """
    V = p.shape[0]
    A = np.zeros(V)
    beta = {}
    state = np.zeros(m + 1)  # state[r]: P(nothing selected yet, r drafts not yet assigned)
    state[m] = 1.0
    # p-mass of the tokens not yet visited, as suffix sums (no cancellation)
    tail = np.concatenate([np.cumsum(p[order][::-1])[::-1], [0.0]])
    binom = [[comb(r, k) for k in range(m + 1)] for r in range(m + 1)]
    for t, x in enumerate(order):
        px = min(1.0, float(p[x]) / tail[t]) if tail[t] > 0 else 0.0
        joint = np.zeros((m + 1, m + 1))  # joint[r, k]: r unassigned, k of them carry x
        for r in range(m + 1):
            if state[r] > 0:
                for k in range(r + 1):
                    joint[r, k] = state[r] * binom[r][k] * px**k * (1.0 - px) ** (r - k)
        avail = joint.sum(axis=0)
        target = float(w * q[x])
        b = np.zeros(m + 1)
        for k in range(m, 0, -1):
            if avail[k] > 0 and target > 0:
                take = min(avail[k], target)
                b[k] = take / avail[k]
                target -= take
                A[x] += take
        beta[int(x)] = b
        new = np.zeros(m + 1)
        for r in range(m + 1):
            for k in range(r + 1):
                new[r - k] += joint[r, k] * (1.0 - b[k])
        state = new
    return Mechanism([order[t : t + 1] for t in range(len(order))], np.zeros(V), A, beta)


def selection_given_children(mech: Mechanism, mult: dict[int, int]) -> dict[int, float]:
    """s_x = P(winner = x | the drafted children and their multiplicities) (step 2).

    Args:
        mech: the node's mechanism.
        mult: token → multiplicity m_x ≥ 1 of the drafted children.
    Returns:
        token → s_x ≥ 0; Σ_x s_x = 1 − Π_x (1 − e_x)^{m_x} ≤ 1.
    """
    out: dict[int, float] = {}
    none_before = 1.0  # P(no marked draft in the classes before)
    if mech.beta is not None:  # count-priority: singletons, budget by multiplicity
        for C in mech.classes:
            x = int(C[0])
            if mult.get(x, 0) > 0:
                b = float(mech.beta[x][mult[x]])
                out[x] = none_before * b
                none_before *= 1.0 - b
        return out
    for C in mech.classes:
        present = [int(x) for x in C if mult.get(int(x), 0) > 0]
        if not present:
            continue
        factors = {x: np.array([1.0 - mech.e[x], mech.e[x]]) for x in present}
        for x in present:
            # ∫_0^1 m_x e_x (1 − e_x + e_x t)^{m_x − 1} Π_{y ≠ x} (1 − e_y + e_y t)^{m_y} dt
            poly = np.array([mult[x] * mech.e[x]])
            for y in present:
                for _ in range(mult[y] - (1 if y == x else 0)):
                    poly = npoly.polymul(poly, factors[y])
            out[x] = none_before * float(npoly.polyval(1.0, npoly.polyint(poly)))
        for y in present:
            none_before *= (1.0 - mech.e[y]) ** mult[y]
    return out


@dataclass
class _Node:
    name: tuple[int, int]
    depth: int
    mult: int
    budget: float = 1.0
    order: list = field(default_factory=list)  # children to try, in order
    fallback: float = 1.0  # h of step 4 (leaves: the budget itself)
    residual: np.ndarray | None = None  # w·q − A


def plan_nodes(tokens: np.ndarray, dp: np.ndarray, tp: np.ndarray, mechanism,
               selection=None) -> list[_Node]:
    """Budgets, child orders, fallbacks and residuals of every node of the merged tree (steps
    1-4 of the module docstring, computed before any coin is asked).

    Args:
        tokens: int [K, L]; dp: float64 [K, L, V]; tp: float64 [K, L+1, V].
        mechanism: (p, q, w, m) → Mechanism of one node (step 1).
        selection: (mechanism, {token: multiplicity}) → {token: s_x} (step 2); default
            ``selection_given_children``.  The torch port passes its vectorised pair.
    Returns:
        the nodes (index 0 the root), ``order`` the children to try.
    """
    selection = selection or selection_given_children
    names, parent, children = merged_tree(tokens)
    K, L = tokens.shape
    mult = [K] + [0] * (len(names) - 1)
    for k in range(K):
        node = 0
        for i in range(1, L + 1):
            # the child of `node` carrying draft k's i-th token
            node = next(c for c in children[node] if tokens[names[c][0], i - 1] == tokens[k, i - 1])
            mult[node] += 1
    nodes = [_Node(names[n], names[n][1], mult[n]) for n in range(len(names))]
    token = [int(tokens[k, i - 1]) if i else -1 for k, i in names]

    def rows(n):
        k, i = names[n]
        k = max(k, 0)  # the root's rows are every draft's first-position rows
        return dp[k, i], tp[k, i]

    def transfer(n: int, b: float) -> float:
        # one-level efficiency T(b) of node n: acceptance of its children per unit budget
        if names[n][1] == L or b <= 0:
            return 1.0
        p, q = rows(n)
        return mechanism(p, q, b, mult[n]).total / b

    def schedule(n: int) -> None:
        node = nodes[n]
        if node.depth == L:
            node.fallback = node.budget
            return
        p, q = rows(n)
        w = node.budget
        mech = mechanism(p, q, w, node.mult)
        node.residual = w * q - mech.A
        tot = mech.total
        node.fallback = (w - tot) / (1.0 - tot) if tot < 1.0 else 1.0
        kids = {token[c]: c for c in children[n]}
        s = selection(mech, {x: mult[c] for x, c in kids.items()})
        live = [x for x in kids if s.get(x, 0.0) > 0.0]
        slack = 1.0 - sum(s[x] for x in live)

        def loss_if_last(x):
            first, last = s[x], s[x] / (s[x] + slack) if s[x] + slack > 0 else 1.0
            return s[x] * (transfer(kids[x], min(1.0, first)) - transfer(kids[x], min(1.0, last)))

        # largest loss first; losses tied to rounding (reference.ties) by token id, so that the
        # schedule (hence the law) does not jump when rounding breaks an exact tie
        if live:
            pos, _ = descending_order([loss_if_last(x) for x in live], live)
            live = [live[t] for t in pos]
        left = 1.0
        for x in live:
            c = kids[x]
            nodes[c].budget = min(1.0, s[x] / left) if left > 0 else 1.0
            left -= s[x]
            node.order.append(c)
            schedule(c)

    schedule(0)
    return nodes


class MultiDraftBlockVerification(Rule):
    """MDBV (docs/rules.md §2.10): per-node selection (class-K-SEQ or count-priority) over the merged
    draft tree, BV-style budgets, subtrees shared by the drafts that carry them."""

    name = "mdbv"
    modifies_targets = False

    def __init__(self, families: tuple[str, ...] = ("classes", "counts"), max_cut: int | None = None):
        """Args: families, max_cut — the per-node candidate selection laws (see
        ``node_mechanism``); every choice is lossless, the default is the strongest."""
        unknown = set(families) - {"classes", "counts"}
        if not families or unknown:
            raise ValueError(f"families must be a non-empty subset of ('classes', 'counts'), got {families!r}")
        if max_cut is not None and (int(max_cut) != max_cut or max_cut < 0):
            raise ValueError(f"max_cut must be an integer >= 0 or None, got {max_cut!r}")
        self.families = tuple(families)
        self.max_cut = max_cut

    def __repr__(self) -> str:
        return f"MultiDraftBlockVerification(families={self.families!r}, max_cut={self.max_cut!r})"

    def _mechanism(self, p, q, w, m) -> Mechanism:
        return node_mechanism(p, q, w, m, self.families, self.max_cut)

    def plan(self, block: Block) -> None:
        block.plan["nodes"] = plan_nodes(block.tokens, block.dp, block.tp, self._mechanism)

    def decide(self, block: Block, source: Source) -> Verdict:
        nodes = block.plan["nodes"]
        L = block.L

        def attempt(n: int) -> Verdict | None:
            node = nodes[n]
            k, i = node.name
            if i == L:
                if source.coin(node.fallback, (k, L)):
                    return Verdict(L, k, block.prefix(k, L) + (source.draw(block.tp[k, L]),))
                return None
            for c in node.order:
                verdict = attempt(c)
                if verdict is not None:
                    return verdict
            if i == 0 or source.coin(node.fallback, (k, i)):  # the root's h is 1
                q_row = block.tp[max(k, 0), i]
                token = draw_residual(source, node.residual, q_row)
                return Verdict(i, k if i else -1, block.prefix(max(k, 0), i) + (token,))
            return None

        return attempt(0)


class MDBVKSeq(MultiDraftBlockVerification):
    """MDBV with K-SEQ as every node's selection law: ``families=("classes",), max_cut=0`` (one
    class, no singleton classes, no count-priority).  Steps 2-4 are MDBV's.  Lossless for
    MDBV's reason (any node selection with A ≤ w·q from the node's own rows); each node's
    mechanism is one ρ*-type root, which the batched port (gpu_backend/verifiers/mdbv_kseq.py)
    solves without a host plan.  Numbers against MDBV: proofs_check/NON_MODIFYING_RULES.md §8."""

    name = "mdbv_kseq"

    def __init__(self):
        super().__init__(families=("classes",), max_cut=0)

    def __repr__(self) -> str:
        return "MDBVKSeq()"
