"""MDBV-KSEQ — MDBV with K-SEQ as every node's selection law, batched, no host plan.

Port of reference/rules/mdbv.py with ``families=("classes",), max_cut=0`` (docs/rules.md §2.10,
proofs_check/NON_MODIFYING_RULES.md §3.3 and §8): the merged draft tree, a budget w(z) per node,
the drafted children tried in the order of their one-level efficiency loss with budgets
s_x/(1 − Σ_before s), a fallback coin h = (w − ΣA)/(1 − ΣA) with the correction ∝ w·q − A, and
leaves that succeed with probability w and emit the bonus.  What differs from ``mdbv`` is step 1
only: every node selects with K-SEQ against the scaled target w·q (one class; no singleton
classes, no count-priority), so that a node's mechanism is one ρ*-type root instead of two
sequential scans over the sorted vocabulary.  Lossless for the same reason as MDBV (any
selection law with A ≤ w·q that depends only on the node's rows, w and m).

A node z of depth i with rows p, q, m drafts and budget w:
    θ  = the K-SEQ threshold on q/p: smallest θ ∈ [1/w, m/w] with 1 − (1 − β(θ))^m ≤ w·θ·β(θ),
         β(θ) = Σ_x min(p(x), q(x)/θ)                              (kseq.threshold_scaled; κ = wθ)
    e(x) = min(1, q(x)/(θ p(x))),  s = β(θ),  ΣA = 1 − (1 − s)^m,  A(x) = p(x) e(x) ΣA / s
    s_x  = P(winner = x | children) = m_x e_x ∫_0^1 (1 − e_x + e_x t)^{m_x−1} Π_{y≠x} (1 − e_y + e_y t)^{m_y} dt
           (Gauss–Legendre with K nodes: the integrand has degree ≤ K − 1, so the rule is exact)
    order of the children: loss_x = s_x·(T_x(min(1, s_x)) − T_x(min(1, s_x/(s_x + slack)))),
           T_x(b) = ΣA of child x at budget b, divided by b (1 at depth L), largest first; losses
           within reference.ties' tolerance by token id (chained tie groups, as descending_order)

Batched layout: the nodes of depth i are the draft slots k with owner[b, k, i] = k (_tree.py),
so every depth is one [B, K] step.  Solves per row: the root's, then for each depth i + 1 < L
two per child slot (its first/last budgets, for the order); at K ≤ 2 a node has at most two
children, whose budgets are exactly those two, so their own mechanisms are taken from these
solves (1 + 2·K·(L − 1) solves); at K ≥ 3 each child is solved once more at its budget
(1 + 3·K·(L − 1)).  The rows' float64 copies and q/p are formed once and shared.  Each solve is
kseq.py's fixed number of histogram passes over V: O(K·L·V) work per row.  On a CPU at
V ≥ kseq.LARGE_V the plan instead solves only the nodes it reads (``_HostNodes``; reading masks
there waits for no device): each merged-tree node once, a child's last budget only beside a
sibling, one pass without q/p at a node with one draft — identical drafts take L solves, as
SpecTr does, and the plan is the fixed one's bit for bit.  With one draft the rule is BV coin
for coin, and ``decide`` hands K = 1 to BV's verifier (``decide_tree`` is the walk).  The decision runs
bottom-up: a node's outcome is its lowest-ranked successful child's outcome, else its own
fallback coin (the root's always succeeds), which is the reference's depth-first walk.  No host
synchronisation off the CPU; Python loops only over K, L and the solver's fixed passes (and, on
the host path, over the nodes solved).  An expanded batch (one case repeated) is planned once
(batch.per_case).

Numerics: θ comes from the histogram solver (resolution (m − 1)/w·2^-36, always on the valid
side) where the reference bisects in κ over snapped ratios; they agree to ~1e-10 relative on
well-conditioned rows, which the matched-noise tests check.  Everything else is float64.
Source: reference/rules/mdbv.py (node_mechanism with families=("classes",), max_cut=0;
selection_given_children; plan_nodes; decide).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import mdbv as ref
from spectr_gbv.reference.ties import ATOL, RTOL, descending_order

from spectr_gbv.gpu_backend.verifiers.merged_tree import merged_tree
from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.bv import OneDraftIsBV
from spectr_gbv.gpu_backend.verifiers.batch import batch_index, gather_rows, make_verdict, per_case
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.kseq import LARGE_V, ratios, single_candidate, threshold_scaled
from spectr_gbv.gpu_backend.verifiers.noise import Noise


def _cover(s: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """1 − (1 − s)^m for s ∈ [0, 1], without cancellation when s ≪ 1 (reference mdbv._covered
    at F = 1): the probability that some of m drafts is marked when each is with probability s."""
    sc = s.clamp(0.0, 1.0)
    inner = torch.where(sc < 1.0, sc, torch.zeros_like(sc))
    return torch.where(sc < 1.0, -torch.expm1(m.to(torch.float64) * torch.log1p(-inner)), torch.ones_like(sc))


def node_totals(rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor], m: torch.Tensor,
                w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K-SEQ against w·q at N nodes: threshold θ, s = β(θ) and ΣA.

    Args:
        rows: (p, q, q/p) float64 [N, V] (kseq.ratios; stride-0 views allowed); m: int64 [N]
            drafts through each node; w: float64 [N] budgets in [0, 1].
    Returns:
        (theta, s, total), float64 [N] each; total = 1 − (1 − s)^m, 0 where w = 0 or s = 0
        (the node accepts nothing).
    Source: module doc; reference/rules/mdbv.py _rest_class and _cut_mechanism at j = 0.
    """
    theta, s = threshold_scaled(*rows, m, w)
    total = torch.where((w > 0) & (s > 0), _cover(s, m), torch.zeros_like(s))
    return theta, s, total


_GL: dict = {}


def _gauss_legendre(n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes and weights of n-point Gauss–Legendre on [0, 1] (exact to degree 2n − 1); made once
    per (n, device) (numpy's leggauss is too slow to call per verification: benchmarks/MEASUREMENTS.md)."""
    key = (n, str(device))
    if key not in _GL:
        x, wts = np.polynomial.legendre.leggauss(n)
        _GL[key] = (torch.tensor((x + 1.0) / 2.0, dtype=torch.float64, device=device),
                    torch.tensor(wts / 2.0, dtype=torch.float64, device=device))
    return _GL[key]


def _ranks_descending(value: torch.Tensor, key: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Rank of each entry among the entries of its group: value decreasing, neighbours within
    reference.ties' tolerance chained into tie groups ordered by key (reference.ties.
    descending_order, applied per group).

    Args:
        value: float64 [B, K]; key: int64 [B, K] (token ids, distinct within a group);
        group: int64 [B, K] (entries of one group are ranked among themselves).
    Returns:
        int64 [B, K], 0 for the first entry of each group.
    """
    B, K = value.shape
    idx = torch.arange(K, device=value.device).expand(B, K)
    # sorted by (group, −value, key): stable sorts, least significant key first
    order = key.argsort(dim=1, stable=True)
    order = torch.gather(order, 1, torch.gather(-value, 1, order).argsort(dim=1, stable=True))
    order = torch.gather(order, 1, torch.gather(group, 1, order).argsort(dim=1, stable=True))
    v, g = torch.gather(value, 1, order), torch.gather(group, 1, order)
    tie = (g[:, 1:] == g[:, :-1]) & ((v[:, :-1] - v[:, 1:]).abs()
                                      <= ATOL + RTOL * torch.maximum(v[:, :-1].abs(), v[:, 1:].abs()))
    chain_sorted = torch.cat([torch.zeros_like(g[:, :1]), torch.cumsum((~tie).to(torch.int64), dim=1)], dim=1)
    chain = torch.empty_like(chain_sorted).scatter_(1, order, chain_sorted)
    # entries by (chain, key): the chains keep the groups contiguous and in value order
    final = key.argsort(dim=1, stable=True)
    final = torch.gather(final, 1, torch.gather(chain, 1, final).argsort(dim=1, stable=True))
    gf = torch.gather(group, 1, final)
    new = torch.cat([torch.ones_like(gf[:, :1], dtype=torch.bool), gf[:, 1:] != gf[:, :-1]], dim=1)
    start = torch.cummax(torch.where(new, idx, torch.zeros_like(idx)), dim=1).values
    return torch.empty_like(final).scatter_(1, final, idx - start)


def _ranks_descending_host(value: torch.Tensor, key: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """``_ranks_descending`` on CPU tensors: reference.ties.descending_order on each group of
    several entries (a lone entry has rank 0), without ~20 tensor operations on [B, K] entries
    per depth."""
    v, k, g = value.numpy(), key.numpy(), group.numpy()
    rank = np.zeros(g.shape, dtype=np.int64)
    for b in range(g.shape[0]):
        ids, counts = np.unique(g[b], return_counts=True)
        for grp in ids[counts > 1]:
            idx = np.flatnonzero(g[b] == grp)
            order, _ = descending_order(v[b, idx], k[b, idx])
            rank[b, idx[order]] = np.arange(len(idx))
    return torch.from_numpy(rank)


class _HostNodes:
    """On a CPU, the node solves that the plan uses, one row at a time (``plan``'s host path).

    Reading masks on a CPU waits for no device, so the plan solves only the nodes it reads: a
    merged-tree node once (not once per draft slot through it), a child's last-in-order budget
    only when it has a sibling (alone, its order is decided without it), a node's own budget
    only when it is neither of those two.  A node with several drafts gets its float64 rows and
    q/p when it is solved, in buffers reused across calls (fresh ones cost a CPU page faults:
    benchmarks/MEASUREMENTS.md); a node with one draft takes one pass over its
    rows (kseq.single_candidate).  The fixed path forms [B, K, L, V] float64 copies up front and
    solves every slot at both budgets: 1 + 2·K·(L − 1) solves.
    """

    _local = threading.local()  # the buffers are per thread: two threads must not share them

    def __init__(self, batch: PreparedBatch, mult: torch.Tensor):
        self.dp, self.tp, self.mult = batch.dp, batch.tp, mult
        buffers = self._local.__dict__.setdefault("buffers", {})
        key = (batch.V, str(batch.device))
        if key not in buffers:
            buffers[key] = torch.empty(4, 1, batch.V, dtype=torch.float64, device=batch.device)
        self.buf = buffers[key]

    def solve(self, i: int, budgets: torch.Tensor, need: torch.Tensor):
        """θ, s, ΣA [B, K, n] of the depth-i nodes at budgets [B, K, n] where ``need`` [B, K, n]
        (elsewhere θ = 1, s = ΣA = 0: entries the plan does not read)."""
        shape = budgets.shape
        theta = torch.ones(shape, dtype=torch.float64)
        s = torch.zeros(shape, dtype=torch.float64)
        total = torch.zeros(shape, dtype=torch.float64)
        where = torch.nonzero(need)
        if not len(where):
            return theta, s, total
        bs, ks, js = where.unbind(1)
        m = self.mult[bs, ks, i]
        w = budgets[bs, ks, js]
        th_e, s_e = torch.ones_like(w), torch.empty_like(w)
        p64, q64, t, scratch = self.buf
        solved = None
        # one entry at a time: a pass over one row reuses the scratch rows in cache (a gathered
        # [n, V] stack of the same rows is slower); the bookkeeping is done for all at once
        for e, (b, k, mult) in enumerate(zip(bs.tolist(), ks.tolist(), m.tolist())):
            p_row, q_row = self.dp[b, k, i].unsqueeze(0), self.tp[b, k, i].unsqueeze(0)
            if mult > 1:
                if solved != (b, k):  # a node's float64 rows and q/p serve all its budgets
                    ratios(p_row, q_row, out=(p64, q64, t))
                    solved = (b, k)
                th, sj = threshold_scaled(p64, q64, t, m[e:e + 1], w[e:e + 1])
            else:
                # the work-dtype rows are converted into p64 and scratch: the same values as
                # the fixed plan's float64 copies
                th, sj = single_candidate(p_row, q_row, w[e:e + 1], out=(p64, scratch))
            th_e[e], s_e[e] = th[0], sj[0]
        tot = torch.where((w > 0) & (s_e > 0), _cover(s_e, m), torch.zeros_like(s_e))
        theta[bs, ks, js], s[bs, ks, js], total[bs, ks, js] = th_e, s_e, tot
        return theta, s, total


def host_plan(batch: PreparedBatch) -> bool:
    """Whether ``plan`` takes the host path: on a CPU at V ≥ kseq.LARGE_V (below, the fixed
    path's batched passes over tiny rows cost less than per-node calls)."""
    return batch.device.type == "cpu" and batch.V >= LARGE_V


def plan(batch: PreparedBatch, host: bool | None = None):
    """Budgets, coin probabilities, child ranks and node mechanisms of every node (steps 1-4 of
    reference/rules/mdbv.py, with K-SEQ selection), as tensors.

    Args:
        batch: the prepared batch.
        host: take the host path (``_HostNodes``: solve only the nodes read; CPU only) or the
            fixed one (every slot at both budgets, no host read); default ``host_plan(batch)``.
            Both give the same plan (tests/gpu_backend/verifiers/test_mdbv_kseq_host_plan.py).

    Returns:
        (w, h, rank, live, theta, ratio, owner), each [B, K, L+1] (slot k, depth i: draft k's
        node of depth i, meaningful where owner[b, k, i] = k): float64 budgets; float64 coin
        probabilities (fallback h inside, the budget at depth L, 1 at the root); int64 position
        of the node in its parent's try order; bool "tried at all" (s_x > 0); float64 θ and
        ΣA/s of the node's selection (depth < L; they form the residual w·q − A); int64 the
        merged tree's node names (_tree.MergedTree.owner).
    """
    B, K, L, V = batch.B, batch.K, batch.L, batch.V
    dev = batch.device
    tree = merged_tree(batch.tokens)
    owner, mult = tree.owner, tree.mult
    ks = torch.arange(K, device=dev).view(1, K)
    canon = owner == ks.unsqueeze(2)  # [B, K, L+1]
    f64 = dict(dtype=torch.float64, device=dev)
    w = torch.zeros(B, K, L + 1, **f64)
    w[:, 0, 0] = 1.0
    h = torch.zeros(B, K, L + 1, **f64)
    theta = torch.ones(B, K, L + 1, **f64)
    ratio = torch.zeros(B, K, L + 1, **f64)
    rank = torch.zeros(B, K, L + 1, dtype=torch.int64, device=dev)
    live = torch.zeros(B, K, L + 1, dtype=torch.bool, device=dev)
    live[:, 0, 0] = True
    t_gl, w_gl = _gauss_legendre(K, dev)
    b_idx = batch_index(batch).view(B, 1)
    if host is None:
        host = host_plan(batch)
    if host:
        nodes = _HostNodes(batch, mult)

        def totals(i, slots_w, need):
            return nodes.solve(i, slots_w, need)

        root = tuple(x[:, 0, 0] for x in nodes.solve(0, w[:, :, :1], (ks == 0).expand(B, K).unsqueeze(2)))
    else:
        P64, Q64, T = ratios(batch.dp, batch.tp[:, :, :L])  # [B, K, L, V], shared by every solve

        def totals(i, slots_w, need):
            # the nodes of depth i (slot rows) at budgets slots_w [B, K, n] → θ, s, ΣA [B, K, n];
            # every entry is solved (reading ``need`` would wait for the device)
            n = slots_w.shape[2]
            rows = tuple(x[:, :, i].unsqueeze(2).expand(B, K, n, V).reshape(B * K * n, V) for x in (P64, Q64, T))
            m = mult[:, :, i].unsqueeze(2).expand(B, K, n).reshape(-1)
            return tuple(x.view(B, K, n) for x in node_totals(rows, m, slots_w.reshape(-1)))

        # the root (slot 0 of depth 0, budget 1): one solve
        root = node_totals(tuple(x[:, 0, 0] for x in (P64, Q64, T)), mult[:, 0, 0], w[:, 0, 0])
    pad = (torch.ones(B, K - 1, **f64), torch.zeros(B, K - 1, **f64), torch.zeros(B, K - 1, **f64))
    own = tuple(torch.cat([r.unsqueeze(1), z], dim=1) for r, z in zip(root, pad))
    for i in range(L):
        wi = w[:, :, i]
        th, s, tot = own
        theta[:, :, i] = th
        ratio[:, :, i] = torch.where(s > 0, tot / s.clamp_min(1e-300), torch.zeros_like(s))
        fallback = torch.where(tot < 1.0, (wi - tot) / (1.0 - tot).clamp_min(1e-300), torch.ones_like(tot))
        h[:, :, i] = fallback if i else torch.ones_like(fallback)
        # marking probability of each draft's next token at its node of depth i
        parent = owner[:, :, i]  # [B, K(j)]
        x = batch.tokens[:, :, i]
        p_x = batch.dp[b_idx, parent, i, x].to(torch.float64)
        q_x = batch.tp[b_idx, parent, i, x].to(torch.float64)
        th_j = torch.gather(th, 1, parent)
        w_j = torch.gather(wi, 1, parent)
        e = torch.where((p_x > 0) & (w_j > 0), torch.clamp_max(q_x / (th_j * p_x.clamp_min(1e-300)), 1.0),
                        torch.zeros_like(p_x))
        # I_j = ∫_0^1 Π_{j' ≠ j at the same node} (1 − e_j' + e_j' t) dt
        factor = 1.0 - e.unsqueeze(2) + e.unsqueeze(2) * t_gl  # [B, K(j'), G]
        others = (parent.unsqueeze(2) == parent.unsqueeze(1)) & ~torch.eye(K, dtype=torch.bool, device=dev)
        prod = torch.where(others.unsqueeze(3), factor.unsqueeze(1), torch.ones_like(factor).unsqueeze(1)).prod(dim=2)
        integral = (prod * w_gl).sum(-1)  # [B, K(j)]
        # s of child slot c: Σ over the drafts through it of e_j·I_j
        child = owner[:, :, i + 1]  # [B, K(j)]
        s_child = torch.zeros(B, K, **f64).scatter_add_(1, child, e * integral)
        # child slot c's parent is owner[b, c, i] (= parent[b, c]); live nodes are named nodes
        alive = canon[:, :, i + 1] & (s_child > 0) & torch.gather(live[:, :, i], 1, parent)
        s_child = torch.where(alive, s_child, torch.zeros_like(s_child))
        if i + 1 < L:
            sum_live = torch.zeros(B, K, **f64).scatter_add_(1, parent, s_child)
            slack = 1.0 - torch.gather(sum_live, 1, parent)
            first = s_child.clamp_max(1.0)
            denom = s_child + slack
            last = torch.where(denom > 0, s_child / denom.clamp_min(1e-300), torch.ones_like(s_child)).clamp_max(1.0)
            budgets = torch.stack([first, last], dim=2)
            # a child alone under its parent is ranked without its last budget's solve
            siblings = torch.gather(torch.zeros(B, K, dtype=torch.int64, device=dev).scatter_add_(
                1, parent, alive.to(torch.int64)), 1, parent)
            need = torch.stack([alive, alive & (siblings > 1)], dim=2)
            th2, s2, t2 = totals(i + 1, torch.where(alive.unsqueeze(2), budgets, torch.ones_like(budgets)), need)
            eff = torch.where(budgets > 0, t2 / budgets.clamp_min(1e-300), torch.ones_like(t2))
            loss = s_child * (eff[:, :, 0] - eff[:, :, 1])
        else:
            loss = torch.zeros_like(s_child)
        # children of one parent ranked together; slots that are no live child go last, apart
        group = torch.where(alive, parent, torch.full_like(parent, K))
        r = (_ranks_descending_host if host else _ranks_descending)(
            torch.where(alive, loss, torch.zeros_like(loss)), x, group)
        # budgets along the order: left = 1 − Σ s of the siblings tried before
        before = (group.unsqueeze(2) == group.unsqueeze(1)) & (r.unsqueeze(2) < r.unsqueeze(1))  # [B, c', c]
        left = 1.0 - (before.to(torch.float64) * s_child.unsqueeze(2)).sum(dim=1)
        budget = torch.where(left > 0, torch.clamp_max(s_child / left.clamp_min(1e-300), 1.0), torch.ones_like(left))
        w[:, :, i + 1] = torch.where(alive, budget, torch.zeros_like(budget))
        rank[:, :, i + 1] = r
        live[:, :, i + 1] = alive
        if i + 1 < L:
            if K <= 2:
                # at most two children per node: the first tried has budget min(1, s) and the
                # last s/(s + slack), the two budgets solved for the order above
                pick = (r > 0).unsqueeze(2)
                own = tuple(torch.where(pick, x[:, :, 1:], x[:, :, :1]).squeeze(2) for x in (th2, s2, t2))
            elif host:
                # a budget equal to one already solved (the first tried: min(1, s)) reuses it
                wn = w[:, :, i + 1].unsqueeze(2)
                same = [wn == budgets[:, :, j:j + 1] for j in range(2)]
                same[1] &= need[:, :, 1:]
                solved = totals(i + 1, wn, alive.unsqueeze(2) & ~same[0] & ~same[1])
                own = tuple(torch.where(same[0], x2[:, :, :1], torch.where(same[1], x2[:, :, 1:], x)).squeeze(2)
                            for x, x2 in zip(solved, (th2, s2, t2)))
            else:
                own = tuple(x.squeeze(2) for x in totals(i + 1, w[:, :, i + 1].unsqueeze(2), None))
    h[:, :, L] = w[:, :, L]
    return w, h, rank, live, theta, ratio, owner


class MDBVKSeq(OneDraftIsBV, Verifier):
    """MDBV with K-SEQ node selection (docs/rules.md §2.10), batched with no host plan; see the
    module doc.  Contract: gpu_backend.verifiers (module doc).  Source: reference/rules/mdbv.py
    with families=("classes",), max_cut=0."""

    reference = ref.MDBVKSeq

    def decide_tree(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        """The rule on the merged draft tree, at any K (``decide`` takes it for K ≥ 2)."""
        B, K, L = batch.B, batch.K, batch.L
        b = batch_index(batch)
        w, h, rank, live, theta, ratio, owner = per_case(batch, plan)
        ks = torch.arange(K, device=batch.device).view(1, K).expand(B, K)
        u = noise.uniforms  # [B, K, L+1]: coin (k, i)
        big = torch.full_like(rank[:, :, 0], K + 1)
        ok = live[:, :, L] & (u[:, :, L] <= h[:, :, L])
        res_tau = torch.full_like(ks, L)
        res_k = ks.clone()
        for i in range(L - 1, -1, -1):
            parent = owner[:, :, i]  # parent slot of each child slot c at depth i + 1
            cand = ok & live[:, :, i + 1]  # [B, K(c)]
            # node k's successful children: parent == k; the lowest rank wins
            mine = cand.unsqueeze(1) & (parent.unsqueeze(1) == ks.unsqueeze(2))  # [B, K(k), K(c)]
            score = torch.where(mine, rank[:, :, i + 1].unsqueeze(1), big.unsqueeze(1))
            best = score.argmin(dim=2)
            found = mine.any(dim=2)
            own = live[:, :, i] & ((u[:, :, i] <= h[:, :, i]) if i else torch.ones_like(found))
            res_tau = torch.where(found, torch.gather(res_tau, 1, best), torch.full_like(res_tau, i))
            res_k = torch.where(found, torch.gather(res_k, 1, best), ks)
            ok = found | own
        tau, row = res_tau[:, 0], res_k[:, 0]
        q_row = gather_rows(batch.tp, row, tau)
        inner = tau < L
        p_row = gather_rows(batch.dp, row, tau.clamp_max(L - 1)).to(torch.float64)
        th = theta[b, row, tau].unsqueeze(1)
        # residual (w·q − A)_+, A = min(p, q/θ)·ΣA/s, in float64; in place where it can be (each
        # fresh [B, V] temporary costs a CPU page faults)
        q64 = q_row.to(torch.float64)
        A = q64 / th
        torch.minimum(p_row, A, out=A).mul_(ratio[b, row, tau].unsqueeze(1))
        residual = q64.mul_(w[b, row, tau].unsqueeze(1)).sub_(A).clamp_min_(0.0)
        weights = torch.where(inner.unsqueeze(1), residual.to(batch.dtype), q_row)
        last = noise.draw(weights, q_row)
        selected = torch.where(tau > 0, row, torch.full_like(row, -1))
        return make_verdict(batch, tau, selected, row, last)
