"""MDBV — multi-draft block verification on the merged draft tree, batched decide, per-row plan.

Port of reference/rules/mdbv.py (docs/rules.md §2.10; derivation and losslessness argument there and
in proofs_check/NON_MODIFYING_RULES.md §3.3).  Every node z of the merged tree (_tree.py) gets a
budget w(z) and runs S(z): a selection law over its children ("which child wins", the better of
class-K-SEQ over every cut and count-priority, marginal A(x) ≤ w·q(x)), the drafted children
tried in the order of their one-level efficiency loss with budgets s_x/(1 − Σ_before s), and a
fallback coin h = (w − ΣA)/(1 − ΣA) with the correction ∝ w·q − A.  Leaves succeed with
probability w and emit the bonus.  Coins (name, depth), one per node; one draw.

Split, as in the reference: ``plan`` (deterministic) computes every node's budget, fallback and
child order; ``decide`` walks the tree with the coins.

Where the host is involved, and why.  The plan cannot be written as fixed-shape tensor code:
  * the tree's shape (which children exist, their multiplicities) decides which selection
    mechanisms are computed, at which budgets, and the recursion order of the schedule
    (budgets of children depend on the order, which depends on mechanisms evaluated at the
    children at budgets that depend on the parent's mechanism);
  * each mechanism runs two scans over the support sorted by q/p that have no parallel form:
    the singleton free mass F_{t+1} = max(F_t − p_t, (F_t^m − w·q_t)_+^{1/m}) (the regime of each
    token depends on F_t) and the count-priority dynamic programme over the drafts not yet
    assigned (a min() allocation per token);
  * the reference's choices between candidates, between token orders and between child orders
    are made by comparing floats (with reference.ties' tolerance, ties by token id), so
    staying in float64 numpy with the reference's operation order keeps those choices the
    reference's.
So ``plan`` runs per batch row on the host: the tokens and the K·(L+1) node rows of the row
are copied to host float64 (one synchronisation per row; on a GPU a device-to-host copy of
about K·(L+1)·V floats), the mechanisms are computed with numpy — the κ bisections of all cuts
vectorised over the cuts (np.searchsorted over the sorted ratios), the two scans as Python
loops over the sorted support — and memoised on the rows' bytes (the reference does the same).
Expanded (stride-0) batches are planned once (batch.per_case).  ``decide`` is tensor code on
the inputs' device without synchronisation: the walk is the post-order of the tree with the
children in schedule order, so the outcome is the first walked node whose coin succeeds (the
root always does), a masked argmin, and the draw is one race over the selected node's row.

Cost: O(n log n) per mechanism for the sort and the vectorised bisections, plus the two Python
scans over the n tokens of the support (n = V for softmax rows), about 3 mechanisms per
internal node (its own, and the efficiency of each internal child at two budgets).  At the
real vocabulary an iteration takes seconds, orders of magnitude more than SpecTr's port
(timings: benchmarks/MEASUREMENTS.md, "gpu_backend/verifiers/mdbv.py"); matching SpecTr's cost
needs more than a compiled scan: the rule evaluates ~3·(1 + K·(L−1)) mechanisms per iteration,
each with two O(V) sequential scans and a bisection per cut over all V cuts.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np
import torch
from numpy.polynomial import polynomial as npoly

from spectr_gbv.reference.rules.mdbv import plan_nodes
from spectr_gbv.reference.ties import better, descending_order

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import mdbv as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.bv import OneDraftIsBV
from spectr_gbv.gpu_backend.verifiers.batch import batch_index, gather_rows, make_verdict, per_case
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.noise import Noise

_BISECTION_STEPS = 200  # as the reference: the bracket reaches float64 spacing well before
_CACHE: dict = {}
_CACHE_SIZE = 4096


# -- one node's selection law (step 1 of the reference's docstring) ------------------------------

def _covered(F: float, s: float, m: int) -> float:
    """F^m − (F − s)^m without cancellation (reference mdbv._covered)."""
    if F <= 0.0:
        return 0.0
    if s >= F:
        return F**m
    return -(F**m) * np.expm1(m * np.log1p(-s / F))


def _covered_vec(F: np.ndarray, s: np.ndarray, m: int) -> np.ndarray:
    """``_covered`` elementwise (float64 arrays of one shape)."""
    Fs = np.where(F > 0, F, 1.0)
    ratio = np.minimum(s / Fs, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = -(Fs**m) * np.expm1(m * np.log1p(-ratio))
    out = np.where(s >= F, F**m, inner)
    return np.where(F > 0, out, 0.0)


@dataclass
class Mechanism:
    """The selection law of one node.

    Attributes:
        A: float64 [V], probability that the winner's token is x (≤ w·q(x)).
        total: ΣA as the reference sums it (numpy sum of A).
        e: float64 [V], marking probabilities (class kind; zeros for count kind).
        cls: int64 [V], class index of each token in priority order (−1: in no class).
        beta: count kind: token → list of m+1 floats (select x when reached with k drafts);
            None for the class kind.
        rank: int64 [V], position of each token in the q/p order (−1 off the support): the
            order of the tokens inside a class.
    """

    A: np.ndarray
    total: float
    e: np.ndarray
    cls: np.ndarray
    beta: dict | None
    rank: np.ndarray


def _ranks(V: int, order: np.ndarray) -> np.ndarray:
    rank = np.full(V, -1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _empty(V: int) -> Mechanism:
    none = np.full(V, -1, dtype=np.int64)
    return Mechanism(np.zeros(V), 0.0, np.zeros(V), none, None, none)


def _singleton_scan(pp_l: list, wq_l: list, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Singletons in q/p order: marked mass s_t and free mass F_t before token t, float64 [n]
    and [n+1] (a scan: the regime of each token depends on F_t; reference _cut_mechanism)."""
    single, free = [], [1.0]
    for t in range(len(pp_l)):
        F = free[-1]
        if F <= 0.0:
            s = 0.0
        elif wq_l[t] >= F**m:
            s = min(pp_l[t], F)
        else:
            s = min(pp_l[t], -F * float(np.expm1(np.log1p(-wq_l[t] / F**m) / m)))
        single.append(max(s, 0.0))
        free.append(max(F - single[-1], 0.0))
    return np.array(single, dtype=np.float64), np.array(free, dtype=np.float64)


def _rest_classes(pp, wq, ratio, m: int, Pp, Sq, F) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rest class of every cut j (tokens j.. in one class after j singletons), vectorised
    over j: κ by bisection, its coverage and validity (reference _rest_class).

    Args:
        pp, wq: float64 [n], p and w·q in q/p order; ratio: float64 [n], w·q/p snapped to ties
        (descending); Pp: prefix sums of pp [n+1]; Sq: suffix sums of wq [n+1]; F: free mass
        before each cut [n].
    Returns:
        (cover, kappa, class_ok), float64/float64/bool [n]: ΣA of the class (0 where no class),
        κ, and whether every A(x) ≤ w·q(x) in it.
    """
    n = len(pp)
    neg_ratio = -ratio  # ascending along the sorted support (ties snapped)
    j_idx = np.arange(n)
    has_class = F > 0
    kappa = m * F ** (m - 1)
    cover = np.zeros(n)
    class_ok = np.ones(n, dtype=bool)
    if n == 0 or not has_class.any():
        return cover, kappa, class_ok

    def s_of(kap):
        lo = np.maximum(j_idx, np.searchsorted(neg_ratio, -kap, side="right"))
        return (Pp[lo] - Pp[j_idx]) + Sq[lo] / kap, lo

    lo_k = np.zeros(n)
    hi_k = m * F ** (m - 1)
    live = has_class.copy()
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo_k + hi_k)
        live &= (mid > lo_k) & (mid < hi_k)
        if not live.any():
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            s, _ = s_of(mid)
            valid = (s > 0) & (_covered_vec(F, s, m) <= mid * s)
        hi_k = np.where(live & valid, mid, hi_k)
        lo_k = np.where(live & ~valid, mid, lo_k)
    # the reference re-checks κ with the summed s and falls back to m·F^(m−1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s, lo = s_of(hi_k)
        cov = _covered_vec(F, s, m)
        good = cov <= hi_k * s * (1.0 + 1e-12)
        kappa = np.where(good, hi_k, m * F ** (m - 1))
        s2, lo2 = s_of(kappa)
        cov2 = _covered_vec(F, s2, m)
    s = np.where(good, s, s2)
    lo = np.where(good, lo, lo2)
    cov = np.where(good, cov, cov2)
    cover = np.where(has_class & (s > 0), cov, 0.0)
    # largest A(x)/(w q(x)) in the class: cover/(κ s) on unsaturated tokens, p/(w q)·cover/s
    # on the last saturated one
    with np.errstate(divide="ignore", invalid="ignore"):
        unsat = np.where(lo < n, cover / (kappa * s), 0.0)
        last_sat = np.maximum(lo - 1, 0)
        sat = np.where((lo > j_idx) & (wq[last_sat] > 0), pp[last_sat] / wq[last_sat] * cover / s, 0.0)
    class_ok = ~(has_class & (s > 0) & ((unsat > 1.0 + 1e-9) | (sat > 1.0 + 1e-9)))
    return cover, kappa, class_ok


def node_mechanism(p: np.ndarray, q: np.ndarray, w: float, m: int) -> Mechanism:
    """Selection law of one node against w·q with m drafts: class-K-SEQ over every cut and
    count-priority, the larger ΣA (ties within reference.ties' tolerance: the earlier candidate,
    K-SEQ first).

    Args:
        p, q: float64 [V] rows of the node; w: budget in [0, 1]; m ≥ 1 drafts through the node.
    Returns:
        Mechanism (memoised on the rows' bytes, w and m).
    Source: reference/rules/mdbv.py node_mechanism, _rest_class, _cut_mechanism,
        _count_priority (same candidates, same tie rule, same numerics where it decides).
    """
    key = (p.tobytes(), q.tobytes(), float(w), int(m))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    V = p.shape[0]
    support = np.flatnonzero(p > 0)
    # the reference's tie-robust order (q/p decreasing, ties by token id) and snapped ratios
    pos, snapped = descending_order(q[support] / p[support], support)
    order = support[pos]
    pp = p[order]
    wq = w * q[order]
    n = len(pp)
    Pp = np.concatenate([[0.0], np.cumsum(pp)])
    Sq = np.concatenate([np.cumsum(wq[::-1])[::-1], [0.0]])  # suffix sums: tiny tails survive
    single_a, free_a = _singleton_scan(pp.tolist(), wq.tolist(), m)
    # singleton acceptances and their validity (A ≤ w·q), as prefix quantities over the cut j
    a_single = _covered_vec(free_a[:n], single_a, m)
    bad_single = a_single > wq * (1.0 + 1e-9) + 1e-300
    a_prefix = np.concatenate([[0.0], np.cumsum(a_single)])
    bad_prefix = np.concatenate([[False], np.cumsum(bad_single) > 0])
    cover, kappa, class_ok = _rest_classes(pp, wq, w * snapped, m, Pp, Sq, free_a[:n])
    totals = np.concatenate([a_prefix[:n] + cover, a_prefix[n:]])
    oks = np.concatenate([~bad_prefix[:n] & class_ok, ~bad_prefix[n:]])
    counts = _count_priority(p, q, w, m, order, pp, wq.tolist())
    counts_ok = bool(np.all(counts.A <= w * q * (1.0 + 1e-9) + 1e-300))
    # the reference's choice: the first valid candidate, replaced by a later one only if larger
    # by more than the tie tolerance (reference.ties)
    best, best_total = None, None
    for j in np.flatnonzero(oks).tolist():
        if best is None or better(float(totals[j]), best_total):
            best, best_total = j, float(totals[j])
    if counts_ok and (best is None or better(counts.total, best_total)):
        mech = counts
    elif best is None:
        mech = _empty(V)
    else:
        mech = _cut(p, V, order, pp, wq, single_a, free_a, m, best, float(kappa[best]) if best < n else None)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[key] = mech
    return mech


def _cut(p, V, order, pp, wq, single, free, m, j, kappa) -> Mechanism:
    """Class-K-SEQ with the first j sorted tokens as singletons and the rest as one class
    (reference _cut_mechanism, including its re-check of κ with the exactly summed s)."""
    n = len(pp)
    e = np.zeros(V)
    A = np.zeros(V)
    cls = np.full(V, -1, dtype=np.int64)
    head = order[:j]
    e[head] = single[:j] / pp[:j]
    A[head] = _covered_vec(free[:j], single[:j], m)
    cls[head] = np.arange(j)
    if j < n and free[j] > 0:
        C = order[j:]
        F = float(free[j])
        for kap in (kappa, m * F ** (m - 1)):
            eC = np.minimum(1.0, wq[j:] / (kap * pp[j:]))
            s = float((p[C] * eC).sum())
            cover = _covered(F, s, m)
            if cover <= kap * s * (1.0 + 1e-12):
                break
        e[C] = eC
        if s > 0:
            A[C] = p[C] * eC * cover / s
        cls[C] = j
    return Mechanism(A, float(A.sum()), e, cls, None, _ranks(V, order))


def _count_priority(p, q, w, m, order, pp, wq_l) -> Mechanism:
    """Count-priority (reference _count_priority): tokens in q/p order; a token reached with k
    of the remaining drafts carrying it is selected with probability beta[x][k], largest counts
    first, A(x) = min(w·q(x), P(x reached and drafted)).  A dynamic programme over the number r
    of drafts not yet assigned, O(n·m²) as a Python scan."""
    V = p.shape[0]
    n = len(pp)
    A = np.zeros(V)
    beta = {}
    tail = np.concatenate([np.cumsum(pp[::-1])[::-1], [0.0]]).tolist()
    binom = [[comb(r, k) for k in range(m + 1)] for r in range(m + 1)]
    state = [0.0] * (m + 1)
    state[m] = 1.0
    a_list = [0.0] * n
    order_l = order.tolist()
    for t in range(n):
        px = min(1.0, pp[t] / tail[t]) if tail[t] > 0 else 0.0
        joint = [[0.0] * (m + 1) for _ in range(m + 1)]
        avail = [0.0] * (m + 1)
        for r in range(m + 1):
            if state[r] > 0:
                for k in range(r + 1):
                    v = state[r] * binom[r][k] * px**k * (1.0 - px) ** (r - k)
                    joint[r][k] = v
        for k in range(m + 1):
            acc = 0.0
            for r in range(m + 1):
                acc += joint[r][k]
            avail[k] = acc
        target = wq_l[t]
        b = [0.0] * (m + 1)
        taken = 0.0
        for k in range(m, 0, -1):
            if avail[k] > 0 and target > 0:
                take = min(avail[k], target)
                b[k] = take / avail[k]
                target -= take
                taken += take
        a_list[t] = taken
        beta[order_l[t]] = b
        new = [0.0] * (m + 1)
        for r in range(m + 1):
            for k in range(r + 1):
                new[r - k] += joint[r][k] * (1.0 - b[k])
        state = new
    A[order] = a_list
    rank = _ranks(V, order)
    return Mechanism(A, float(A.sum()), np.zeros(V), rank, beta, rank)


def selection_given_children(mech: Mechanism, mult: dict) -> dict:
    """s_x = P(winner = x | drafted children with multiplicities ``mult``) (reference
    selection_given_children: products over the classes before, and the polynomial integral
    inside the winner's class)."""
    out: dict = {}
    none_before = 1.0
    # drafted children by class, and inside a class in q/p order (the reference's loops)
    drafted = sorted((int(mech.cls[x]), int(mech.rank[x]), x) for x in mult
                     if mult[x] > 0 and mech.cls[x] >= 0)
    if mech.beta is not None:  # count kind: singletons in q/p order
        for _, _, x in drafted:
            b = float(mech.beta[x][mult[x]])
            out[x] = none_before * b
            none_before *= 1.0 - b
        return out
    groups: dict = {}
    for c, _, x in drafted:
        groups.setdefault(c, []).append(x)
    for c in sorted(groups):
        present = groups[c]
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


# -- the per-row plan ------------------------------------------------------------------------------

def plan_row(tokens: np.ndarray, dp: np.ndarray, tp: np.ndarray) -> list:
    """Budgets, child orders, fallbacks and residuals of every node of one row: the reference's
    recursion (reference.rules.mdbv.plan_nodes) with this module's vectorised node mechanism.

    Args:
        tokens: int64 [K, L]; dp: float64 [K, L, V]; tp: float64 [K, L+1, V] (host numpy).
    Returns:
        the nodes (index 0 the root), with ``order`` the children to try.
    """
    return plan_nodes(tokens, dp, tp, node_mechanism, selection_given_children)


def walk(nodes: list) -> list[int]:
    """The nodes in the order the decide step tries them: post-order, children in schedule
    order (children never scheduled are never tried); the root last.  ``nodes``: plan_row's list."""
    out = []

    def visit(n):
        for c in nodes[n].order:
            visit(c)
        out.append(n)

    visit(0)
    return out


def plan(batch: PreparedBatch):
    """Per-row plan (host, module doc) as padded tensors on the batch's device.

    Returns:
        (k, i, h, rows):  int64 [B, N] names and depths of the walked nodes in walk order
        (padding: depth −1), float64 [B, N] their coin probabilities (the root: 1), and
        float64 [B, N, V] the row each would draw from (the residual w·q − A of an internal
        node, the bonus row of a leaf); N = K·L + 1.
    """
    B, K, L, V = batch.B, batch.K, batch.L, batch.V
    N = K * L + 1
    ks = np.zeros((B, N), dtype=np.int64)
    depth = np.full((B, N), -1, dtype=np.int64)
    h = np.zeros((B, N))
    rows = np.zeros((B, N, V))
    tokens = batch.tokens.cpu().numpy()
    for b in range(B):
        dp = batch.dp[b].double().cpu().numpy()
        tp = batch.tp[b].double().cpu().numpy()
        nodes = plan_row(tokens[b], dp, tp)
        for slot, n in enumerate(walk(nodes)):
            node = nodes[n]
            k, i = node.name
            ks[b, slot] = max(k, 0)
            depth[b, slot] = i
            h[b, slot] = 1.0 if i == 0 else node.fallback
            rows[b, slot] = tp[max(k, 0), L] if i == L else node.residual
    dev = batch.device
    return (torch.from_numpy(ks).to(dev), torch.from_numpy(depth).to(dev), torch.from_numpy(h).to(dev),
            torch.from_numpy(rows).to(dev))


class MultiDraftBlockVerification(OneDraftIsBV, Verifier):
    """MDBV (docs/rules.md §2.10) on the merged draft tree; see the module doc.

    Contract: gpu_backend.verifiers (module doc), except that ``plan`` synchronises once per
    batch row (host-side numpy, module doc).  Source: reference/rules/mdbv.py.
    """

    reference = ref.MultiDraftBlockVerification

    def decide_tree(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        """The rule on the merged draft tree, at any K (``decide`` takes it for K ≥ 2)."""
        b = batch_index(batch)
        ks, depth, h, rows = per_case(batch, plan)
        u = noise.uniforms[b.unsqueeze(1), ks, depth.clamp_min(0)]
        success = (depth >= 0) & ((depth == 0) | (u <= h))
        first = success.to(torch.int8).argmax(dim=1)  # the root (last) always succeeds
        row = ks[b, first]
        tau = depth[b, first]
        weights = rows[b, first].to(batch.dtype)
        q_row = gather_rows(batch.tp, row, tau)
        last = noise.draw(weights, q_row)
        selected = torch.where(tau > 0, row, torch.full_like(row, -1))
        return make_verdict(batch, tau, selected, row, last)
