"""Traversal Verification on the tree of K i.i.d. drafts (shared prefixes merged).

Source: Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi, *Traversal Verification for Speculative Tree
Decoding*, NeurIPS 2025, arXiv 2505.12398 (abstract and §1 read from arxiv.org/html/2505.12398v2;
the update rules as re-implemented in the public code brian030128/subspec_v2,
specdecodes/models/utils/traversal_verification.py, which follows the paper's pseudo-code; the
rule below was re-derived and checked here, not copied).  See docs/rules.md §2.9.

Notation of the paper: M_b = target, M_s = draft; every tree node X carries the rows
M_b(·|X), M_s(·|X) of its children and an acceptance probability p_α(X).

    init  p_α(root) = 1;  p_α(X_t) = min(1, p_α(X_{t-1})·M_b(x_t|X_{t-1})/M_s(x_t|X_{t-1}))
    loop  X = the first leaf in post-order (from the root, always into the first live child)
          X = root: accept the empty prefix; correction ~ M_b(·|root)
          coin(p_α(X)) succeeds: accept the path root → X;
              depth L: bonus ~ q(·|X);  depth < L: correction ~ M_b(·|X) (updated, see below)
          else, with P = parent of X (p_α, M_b, M_s all at P):
              M_b(·|P) ← norm( (p_α(P)·M_b(·|P) − M_s(·|P))_+ )
              p_α(P)   ← S/(S + 1 − p_α(P)),  S = Σ_x (p_α(P)·M_b(x|P) − M_s(x|P))_+   (0/0 → 1)
              M_s(·|P) ← norm( M_s(·|P) with the token of X set to 0 )
              delete X; recompute p_α over P's remaining subtree with the init formula

On a chain (K = 1) this is exactly BV (Sun et al., ICLR 2025, Algorithm 2): the leaf is tried
with h_L = p_L, each rejection turns the parent into a leaf with h_i = Z_i/(Z_i + 1 − p_i), and
the correction is (p_i·q − p)_+.  At the root (p_α = 1) the sibling update is token-level
recursive rejection sampling without replacement (RRSw).

The tree here.  The K drafts are merged into a prefix tree: a node is a distinct sub-block
X^(k)_≤i, named by the lowest k that carries it, so coin (k, i) is the acceptance test of that
node (each node is tested at most once: a rejected node is deleted).  Children are ordered by
first appearance in draft order, so the first leaf is always a prefix of the lowest-indexed
live draft.  One draw per iteration (the correction or the bonus).

Where the paper's assumptions about how the tree was drawn differ from K i.i.d. drafts:
  * The paper draws the children of a node *without replacement* from M_s(·|node), a fixed
    number of them given by a tree topology chosen in advance (EAGLE-style static or dynamic
    trees); its M_s update (drop the rejected token, renormalise) encodes that.
  * Merged i.i.d. drafts give distinct siblings whose order of first appearance is indeed a
    without-replacement sequence, but the NUMBER of children of a node is random and depends
    on the tokens drawn (a high-p token is often drawn twice, leaving fewer distinct
    siblings), and the subtree under a child is shaped by how many drafts share it (its
    multiplicity is Binomial in p(child)), so subtree shapes are correlated with their
    tokens.  The paper's proof (fixed topology, sibling count independent of the tokens) does
    not cover this; at depth 1 the argument still goes through (given that another distinct
    sibling exists it is p-distributed without the rejected tokens, and the residual law is
    right whether or not it exists), but not obviously below.
  * Losslessness on this tree is therefore decided by the exact engine: see
    tests/reference/test_lossless.py and proofs_check/NON_MODIFYING_RULES.md.
Later iterations are untouched (modifies_targets = False).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual


def merged_tree(tokens: np.ndarray) -> tuple[list[tuple[int, int]], list[int], list[list[int]]]:
    """The prefix tree of the K drafts ``tokens`` (int [K, L]).

    Returns:
        (names, parent, children): node 0 is the root (name (-1, 0)); node n ≥ 1 is the distinct
        sub-block X^(k)_≤i named (k, i) with k the lowest draft carrying it; parent[n] its
        parent node (−1 for the root); children[n] its children in order of first appearance.
    Cost: O(K²·L) comparisons.
    """
    K, L = tokens.shape
    names: list[tuple[int, int]] = [(-1, 0)]
    parent = [-1]
    children: list[list[int]] = [[]]
    node_of = {}  # (lowest k, i) → node
    for k in range(K):
        up = 0
        for i in range(1, L + 1):
            owner = next(j for j in range(k + 1) if np.array_equal(tokens[j, :i], tokens[k, :i]))
            key = (owner, i)
            if key not in node_of:
                node_of[key] = len(names)
                names.append(key)
                parent.append(up)
                children.append([])
                children[up].append(node_of[key])
            up = node_of[key]
    return names, parent, children


class TraversalVerification(Rule):
    """Traversal Verification (Weng et al., NeurIPS 2025) on the merged tree of K drafts."""

    name = "traversal"
    modifies_targets = False

    def plan(self, block: Block) -> None:
        names, parent, children = merged_tree(block.tokens)
        block.plan["tree"] = (names, parent, children)

    @staticmethod
    def _rows(block: Block, name: tuple[int, int]) -> tuple[np.ndarray, np.ndarray | None]:
        """(M_b, M_s) of a node: the target and draft rows of its children (M_s None at depth L)."""
        k, i = name
        k = max(k, 0)  # the root's rows are those of every draft's first position
        return block.tp[k, i], (block.dp[k, i] if i < block.L else None)

    def decide(self, block: Block, source: Source) -> Verdict:
        names, parent, children0 = block.plan["tree"]
        L = block.L
        n_nodes = len(names)
        children = [list(c) for c in children0]
        Mb, Ms = [], []
        for name in names:
            b, s = self._rows(block, name)
            Mb.append(b)
            Ms.append(s)
        token = [int(block.tokens[k, i - 1]) if i else -1 for k, i in names]
        alpha = np.ones(n_nodes)

        def refresh(n: int) -> None:
            # p_α of n's live descendants from p_α(n) and the (possibly updated) rows
            stack = [n]
            while stack:
                u = stack.pop()
                for c in children[u]:
                    s = Ms[u][token[c]]
                    alpha[c] = min(1.0, alpha[u] * Mb[u][token[c]] / s) if s > 0 else 0.0
                    stack.append(c)

        refresh(0)
        while True:
            n = 0
            while children[n]:
                n = children[n][0]
            k, i = names[n]
            if n == 0:
                return Verdict(0, -1, (draw_residual(source, Mb[0], block.tp[0, 0]),))
            if source.coin(alpha[n], (k, i)):
                if i == L:
                    return Verdict(L, k, block.prefix(k, L) + (source.draw(block.tp[k, L]),))
                return Verdict(i, k, block.prefix(k, i) + (draw_residual(source, Mb[n], block.tp[k, i]),))
            P = parent[n]
            lam = alpha[P]
            resid = np.maximum(lam * Mb[P] - Ms[P], 0.0)
            S = float(resid.sum())
            if S > 0:  # S = 0: no target mass left here; the row is then never drawn from
                Mb[P] = resid / S
            den = S + 1.0 - lam
            alpha[P] = S / den if den > 0 else 1.0
            ms = Ms[P].copy()
            ms[token[n]] = 0.0
            tot = ms.sum()
            Ms[P] = ms / tot if tot > 0 else ms
            children[P].remove(n)
            refresh(P)
