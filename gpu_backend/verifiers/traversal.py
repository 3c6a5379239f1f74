"""Traversal Verification on the merged tree of K i.i.d. drafts, batched.

Source: Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi, *Traversal Verification for Speculative Tree
Decoding*, NeurIPS 2025, arXiv 2505.12398; the rule as re-derived and checked in
reference/rules/traversal.py (docs/rules.md §2.9), which this module ports.  Notation: every node X
carries the target and draft rows of its children M_b(·|X), M_s(·|X) and an acceptance
probability p_α(X):

    init  p_α(root) = 1;  p_α(X_t) = min(1, p_α(X_{t-1})·M_b(x_t|X_{t-1})/M_s(x_t|X_{t-1}))
    loop  X = the first leaf in post-order;  X = root: correction ~ M_b(·|root)
          coin (name(X), depth(X)) ≤ p_α(X): accept root → X; bonus (depth L) or
              correction ~ M_b(·|X)
          else, P = parent(X):  M_b(·|P) ← norm((p_α(P)·M_b(·|P) − M_s(·|P))_+),
              p_α(P) ← S/(S + 1 − p_α(P))  (S the mass before normalising; 0/0 → 1),
              M_s(·|P) ← norm(M_s(·|P) without X's token);  delete X; refresh p_α below P.

Batched form.  The updates never depend on the coins: a coin only decides whether the walk
stops.  Rows of different inputs walk with their coins (``walk_with_coins``): a row whose walk
has stopped stops updating, so the accepted node's row is still in its depth's slot at the end.
Expanded batches (one case, many coin draws: Monte Carlo, certification) instead run the walk
once as if every coin failed (``plan``), recording for each visited node its p_α when tested
and the row it would draw from, and take per row the first visited node whose coin succeeds
(a masked argmin over the visit order), or the root.

The walk is the post-order of the merged tree (_tree.py): static steps (k, i) for k = 0..K−1,
i = L..1, each visiting a node in the rows where ``visit[b, k, i]``.  Only the nodes on the
current root-to-leaf path can carry updated rows (a node's rows change when one of its children
is deleted, and it is itself deleted before the walk leaves it), so the state is one slot per
depth: M_b, M_s [B, V] and p_α of the path's node at that depth.  When draft k's steps begin,
the path moves to draft k's branch: the nodes below the branch point are new, and their p_α
is the init formula from the (updated) slot of the branch point — the reference's refresh,
done lazily when it is first needed (the refreshed values are never read before that: the
later siblings of a deleted node are untouched until the walk enters them).  Python loops run
over K and L only; no host synchronisation.  Per step the parent update is a handful of
[B, V] operations.  Later iterations are untouched (modifies_targets = False).
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import traversal as ref

from spectr_gbv.gpu_backend.verifiers.merged_tree import merged_tree
from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.bv import OneDraftIsBV
from spectr_gbv.gpu_backend.verifiers.batch import batch_index, gather_rows, make_verdict, per_case
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.noise import Noise


def _node_scalars(batch: PreparedBatch, owner: torch.Tensor):
    """(q, p) of draft k's i-th token under the rows of its parent node (named owner[..., i−1]),
    float64 [B, K, L+1] (index 0 unused): the init formula's ratio uses the parent's rows, as the
    reference does (the same rows as draft k's own when the inputs are prefix-consistent)."""
    B, K, L = batch.tokens.shape
    b = batch_index(batch).view(B, 1, 1)
    i = torch.arange(L, device=batch.device).view(1, 1, L)
    par = owner[:, :, :L]  # parent names at depths 0..L−1
    x = batch.tokens
    q = batch.tp[b, par, i, x].double()
    p = batch.dp[b, par, i, x].double()
    pad = torch.ones(B, K, 1, dtype=torch.float64, device=batch.device)
    return torch.cat([pad, q], dim=2), torch.cat([pad, p], dim=2)


def _ratio_alpha(alpha: torch.Tensor, mb: torch.Tensor, ms: torch.Tensor) -> torch.Tensor:
    """min(1, p_α·M_b(x)/M_s(x)), 0 where M_s(x) = 0 (the reference's init formula, same order of
    operations)."""
    safe = torch.where(ms > 0, ms, torch.ones_like(ms))
    return torch.where(ms > 0, torch.clamp_max(alpha * mb / safe, 1.0), torch.zeros_like(ms))


def plan(batch: PreparedBatch):
    """The walk with every coin failing (expanded batches: one case, many coin draws).

    Returns:
        (alpha, rows, visit, owner, pos):
        alpha: float64 [B, K, L+1], p_α of the node visited at step (k, i) (draft k, depth i)
            when it is tested.
        rows: [B, K·L + 1, V] work dtype; rows[:, c·L + i − 1] is the row drawn from when the
            node of step (k, i) is accepted, c = pos[b, k] the rank of k's leaf (its updated M_b
            for i < L, its bonus row for i = L); rows[:, K·L] is the root's final M_b (the
            correction when every node fails).
        visit, owner, pos: as in _tree.MergedTree.
    """
    return _walk(batch, None)


def walk_with_coins(batch: PreparedBatch, uniforms: torch.Tensor):
    """The walk with the coins: rows stop updating once their walk has stopped, so the accepted
    node's row is still in its depth's slot at the end (no per-node snapshots).

    Returns:
        (tau, row, weights): int64 [B] depth and name of the accepted node (0, 0: the root) and
        [B, V] the row to draw from (updated M_b, or the bonus row at depth L).
    """
    return _walk(batch, uniforms)


class TraversalPath:
    """State of the walk's current root-to-leaf path, one slot per depth (module doc).

    Attributes (lists indexed by depth):
        mb, ms: M_b, M_s rows [B, V] of the path's node at depths 0..L−1 (None until the walk
            first reaches that depth).
        ms_total: float64 [B], Σ of each slot's M_s.
        dirty: bool [B] per depth 0..L−1, whether the slot's rows were updated since its node
            was entered (a child of it was deleted).
        alpha: float64 [B], p_α of the path's node at depths 0..L.
        name: int64 [B], the path's node name at depths 0..L (−1: none yet below the root).
    """

    def __init__(self, batch: PreparedBatch):
        B, _, L = batch.tokens.shape
        device = batch.device
        self.mb = [batch.tp[:, 0, 0]] + [None] * (L - 1)
        self.ms = [batch.dp[:, 0, 0]] + [None] * (L - 1)
        self.ms_total = [batch.dp[:, 0, 0].sum(dim=1).double()] + [None] * (L - 1)
        self.dirty = [torch.zeros(B, dtype=torch.bool, device=device) for _ in range(L)]
        self.alpha = [torch.ones(B, dtype=torch.float64, device=device) for _ in range(L + 1)]
        self.name = [torch.zeros(B, dtype=torch.int64, device=device)] + \
                    [torch.full((B,), -1, dtype=torch.int64, device=device) for _ in range(L)]

    def enter(self, batch: PreparedBatch, go, own, tok, qk, pk):
        """Move the path to a leaf's branch in the rows where ``go``: the nodes of ``own``
        ([B, L+1] names) that are new get the init formula, from the (updated) slot above."""
        L = len(self.mb)
        b = batch_index(batch)
        for i in range(1, L + 1):
            name = own[:, i]
            fresh = go & (self.name[i] != name)
            x = tok[:, i - 1]
            if self.mb[i - 1] is not None:
                mb = torch.where(self.dirty[i - 1], self.mb[i - 1][b, x].double(), qk[:, i])
                ms = torch.where(self.dirty[i - 1], self.ms[i - 1][b, x].double(), pk[:, i])
            else:
                mb, ms = qk[:, i], pk[:, i]
            self.alpha[i] = torch.where(fresh, _ratio_alpha(self.alpha[i - 1], mb, ms), self.alpha[i])
            self.name[i] = torch.where(fresh, name, self.name[i])
            if i < L:
                self.dirty[i] = self.dirty[i] & ~fresh
                orig_mb = gather_rows(batch.tp, name, torch.full_like(name, i))
                orig_ms = gather_rows(batch.dp, name, torch.full_like(name, i))
                total = orig_ms.sum(dim=1).double()
                if self.mb[i] is None:
                    self.mb[i], self.ms[i], self.ms_total[i] = orig_mb, orig_ms, total
                else:
                    f = fresh.unsqueeze(1)
                    self.mb[i] = torch.where(f, orig_mb, self.mb[i])
                    self.ms[i] = torch.where(f, orig_ms, self.ms[i])
                    self.ms_total[i] = torch.where(fresh, total, self.ms_total[i])

    def delete(self, b, i: int, act, x):
        """Delete the node at depth i (token x [B]) in the rows where ``act``: its parent's
        M_b ← norm((p_α·M_b − M_s)_+) (kept when that mass S is 0), p_α ← S/(S + 1 − p_α),
        M_s ← norm(M_s without x)."""
        lam = self.alpha[i - 1]
        mb, ms = self.mb[i - 1], self.ms[i - 1]
        resid = (lam.to(mb.dtype).unsqueeze(1) * mb - ms).clamp_min_(0)
        S = resid.sum(dim=1).double()  # in the work dtype, as batch.reduce_rows
        new_mb = resid.div_(torch.where(S > 0, S, 1.0).to(mb.dtype).unsqueeze(1))
        den = S + 1.0 - lam
        new_alpha = torch.where(den > 0, S / torch.where(den > 0, den, 1.0), torch.ones_like(S))
        # M_s without the deleted token, renormalised: its mass is the slot's tracked total
        # minus that token's (one pass instead of copy, zero, sum and divide)
        tot = self.ms_total[i - 1] - ms[b, x].double()
        inv = torch.where(tot > 0, 1.0 / torch.where(tot > 0, tot, 1.0), torch.ones_like(tot))
        new_ms = ms * inv.to(ms.dtype).unsqueeze(1)
        new_ms[b, x] = 0
        a = act.unsqueeze(1)
        self.mb[i - 1] = torch.where(a & (S > 0).unsqueeze(1), new_mb, mb)  # S = 0: keep M_b
        self.ms[i - 1] = torch.where(a, new_ms, ms)
        self.alpha[i - 1] = torch.where(act, new_alpha, lam)
        self.ms_total[i - 1] = torch.where(act, torch.where(tot > 0, torch.ones_like(tot), tot),
                                           self.ms_total[i - 1])
        self.dirty[i - 1] = self.dirty[i - 1] | act


def _walk(batch: PreparedBatch, uniforms: torch.Tensor | None):
    B, K, L = batch.tokens.shape
    device = batch.device
    b = batch_index(batch)
    tree = merged_tree(batch.tokens)
    owner, visit = tree.owner, tree.visit
    q0, p0 = _node_scalars(batch, owner)
    path = TraversalPath(batch)
    alpha_test = torch.zeros(B, K, L + 1, dtype=torch.float64, device=device)
    rows = [None] * (K * L + 1)
    with_coins = uniforms is not None
    done = torch.zeros(B, dtype=torch.bool, device=device)
    acc_depth = torch.zeros(B, dtype=torch.int64, device=device)
    acc_name = torch.zeros(B, dtype=torch.int64, device=device)
    for c in range(K):
        k = tree.order[:, c]  # [B]: the draft naming the c-th leaf
        vis = visit[b, k]  # [B, L+1]
        own = owner[b, k]
        tok = batch.tokens[b, k]  # [B, L]
        # the leaf's steps, if any, end at depth L
        path.enter(batch, vis[:, L] & ~done, own, tok, q0[b, k], p0[b, k])
        # the leaf's steps: test the node at depth i, then (all coins failing) delete it
        for i in range(L, 0, -1):
            act = vis[:, i]
            if with_coins:
                name = own[:, i]
                success = act & ~done & (uniforms[b, name, i] <= path.alpha[i])
                acc_depth = torch.where(success, i, acc_depth)
                acc_name = torch.where(success, name, acc_name)
                done = done | success
                act = act & ~done
            else:
                alpha_test[b, k, i] = path.alpha[i]
                if i == L:
                    rows[c * L + i - 1] = gather_rows(batch.tp, own[:, L], torch.full_like(b, L))
                else:
                    rows[c * L + i - 1] = path.mb[i]
            path.delete(b, i, act, tok[:, i - 1])
    if with_coins:
        tau = acc_depth
        row = acc_name
        slots = torch.stack(path.mb, dim=1)  # [B, L, V]: L copies instead of K·L + 1
        weights = slots[b, tau.clamp_max(L - 1)]
        bonus = gather_rows(batch.tp, row, torch.full_like(row, L))
        return tau, row, torch.where((tau == L).unsqueeze(1), bonus, weights)
    rows[K * L] = path.mb[0]
    return alpha_test, torch.stack(rows, dim=1), visit, owner, tree.pos


def order_of(pos: torch.Tensor) -> torch.Tensor:
    """The permutation whose inverse is ``pos`` ([B, K] int64)."""
    return pos.argsort(dim=1)


class TraversalVerification(OneDraftIsBV, Verifier):
    """Traversal Verification (Weng et al., NeurIPS 2025) on the merged tree of K drafts.

    Contract: gpu_backend.verifiers (module doc).  Source: reference/rules/traversal.py.
    """

    reference = ref.TraversalVerification

    def decide_tree(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        """The rule on the merged draft tree, at any K (``decide`` takes it for K ≥ 2)."""
        B, K, L = batch.B, batch.K, batch.L
        device = batch.device
        if not batch.shared:
            tau, row, weights = walk_with_coins(batch, noise.uniforms)
            q_row = gather_rows(batch.tp, row, tau)
            last = noise.draw(weights, q_row)
            selected = torch.where(tau > 0, row, torch.full_like(row, -1))
            return make_verdict(batch, tau, selected, row, last)
        alpha, rows, visit, owner, pos = per_case(batch, plan)
        # coin (name, depth) of the node visited at step (k, i)
        depth = torch.arange(L + 1, device=device).view(1, 1, L + 1).expand(B, K, L + 1)
        u = noise.uniforms[batch_index(batch).view(B, 1, 1), owner, depth]
        success = visit & (u <= alpha)
        # visit order: leaves in post-order (rank pos), then depth descending
        rank = pos.view(B, K, 1) * L + (L - depth)
        none = K * L
        first = torch.where(success, rank, torch.full_like(rank, none)).flatten(1).amin(dim=1)
        accepted = first < none
        c_acc = torch.where(accepted, first // L, torch.zeros_like(first))
        tau = torch.where(accepted, L - first % L, torch.zeros_like(first))
        k_acc = torch.gather(order_of(pos), 1, c_acc.unsqueeze(1)).squeeze(1)
        row = torch.where(accepted, owner[batch_index(batch), k_acc, tau], torch.zeros_like(first))
        slot = torch.where(accepted, c_acc * L + tau - 1, torch.full_like(first, none))
        weights = rows[batch_index(batch), slot]
        q_row = gather_rows(batch.tp, row, tau)
        last = noise.draw(weights, q_row)
        selected = torch.where(tau > 0, row, torch.full_like(row, -1))
        return make_verdict(batch, tau, selected, row, last)
