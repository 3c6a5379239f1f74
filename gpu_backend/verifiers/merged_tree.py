"""The merged prefix tree of K drafts as tensors (shared by traversal.py and mdbv.py).

The K drafts of a row are merged into a prefix tree (reference/rules/traversal.py merged_tree):
the node of depth i on draft k's path is the sub-block X^(k)_≤i, named by the lowest draft that
carries it.  With the prefix-equality mask

    eq[b, j, k, i] = (X^(j)_≤i == X^(k)_≤i)      (i = 0..L; i = 0 always True)

the name of draft k's node at depth i is owner[b, k, i] = min{j : eq[b, j, k, i]}, and two
drafts' nodes at depth i coincide iff their owners do.  Children are ordered by their names
(first appearance in draft order), so the first leaf below a node is on the path of its own
name, and the leaves come in post-order sorted by the sequence of names along their paths,
key[b, k] = (owner[b, k, 1], ..., owner[b, k, L]) compared lexicographically (not by their
own names: drafts 011, 000, 010 give the leaf order 011, 010, 000).  ``order[b, c]`` is the
draft naming the c-th leaf; drafts whose block repeats a lower draft's name no leaf and come
last.  The post-order of the tree (what Traversal Verification walks) is then

    for c = 0..K−1, k = order[b, c], for i = L..1:  draft k's node at depth i, if last[b, k, i] == k,

where last[b, k, i] is the name of the last leaf (in that order) below draft k's node at depth
i.  Every node is visited exactly once (with the last leaf of its subtree), and each leaf's
steps form a contiguous run of depths ending at L.  All of it is [B, K, K, L+1] mask arithmetic
and L + 1 stable sorts of K names: no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MergedTree:
    """Tensors of the merged tree of one batch.

    Attributes:
        eq: bool [B, K, K, L+1], eq[b, j, k, i]: drafts j and k agree on their first i tokens.
        owner: int64 [B, K, L+1], name (lowest draft) of draft k's node at depth i (0 at i = 0).
        last: int64 [B, K, L+1], name of the last leaf (in post-order) below draft k's node at
            depth i.
        order: int64 [B, K], order[b, c] = the draft naming the c-th leaf in post-order (drafts
            naming no leaf last).
        pos: int64 [B, K], the inverse permutation of ``order``.
        visit: bool [B, K, L+1], visit[b, k, i]: post-order step (k, i) visits a node
            (last == k, i ≥ 1).
        mult: int64 [B, K, L+1], number of drafts through draft k's node at depth i.
    """

    eq: torch.Tensor
    owner: torch.Tensor
    last: torch.Tensor
    visit: torch.Tensor
    mult: torch.Tensor
    order: torch.Tensor
    pos: torch.Tensor


def merged_tree(tokens: torch.Tensor) -> MergedTree:
    """The merged prefix tree of draft_tokens [B, K, L] (int64).  Source: module doc;
    reference/rules/traversal.py merged_tree (same names, same child order)."""
    B, K, L = tokens.shape
    same = tokens.unsqueeze(2) == tokens.unsqueeze(1)  # [B, K(j), K(k), L]
    prefix = torch.cumprod(same.to(torch.int8), dim=3).bool()
    eq = torch.cat([torch.ones(B, K, K, 1, dtype=torch.bool, device=tokens.device), prefix], dim=3)
    eq8 = eq.to(torch.int8)
    owner = eq8.argmax(dim=1)  # first True along j
    leaf = owner[:, :, L]  # [B, K(j)]: name of draft j's leaf
    ks = torch.arange(K, device=tokens.device)
    # leaves in post-order: the name paths sorted lexicographically (least significant depth
    # first, stable sorts: no packed key to overflow), drafts naming no leaf last
    order = ks.view(1, K).expand(B, K).contiguous()
    for i in range(L, 0, -1):
        names_i = torch.gather(owner[:, :, i], 1, order)
        order = torch.gather(order, 1, names_i.argsort(dim=1, stable=True))
    names_leaf = torch.gather(leaf, 1, order) == order
    order = torch.gather(order, 1, (~names_leaf).to(torch.int8).argsort(dim=1, stable=True))
    pos = order.argsort(dim=1)
    # the last leaf below a node: the leaf, among those of the drafts through it, that comes last
    leaf_pos = torch.gather(pos, 1, leaf)  # [B, K(j)]: position of draft j's leaf
    best = torch.where(eq, leaf_pos.view(B, K, 1, 1), torch.full_like(leaf_pos.view(B, K, 1, 1), -1))
    j_star = best.argmax(dim=1)  # [B, K, L+1]
    last = torch.gather(leaf, 1, j_star.flatten(1)).view(B, K, L + 1)
    visit = last == ks.view(1, K, 1)
    visit[:, :, 0] = False
    mult = eq8.sum(dim=1, dtype=torch.int64)
    return MergedTree(eq, owner, last, visit, mult, order, pos)
