"""The K drafts of one iteration as a token tree, packed into ONE row for the models.

Instead of K cache rows (the context's KV repeated K times), the K drafts are fed as one
sequence of tree nodes on top of a batch-1 cache, with a 4-D attention mask that lets each
node see the context, its ancestors and itself, and position ids that give each node its
depth ("tree attention", as in SpecInfer and Medusa).  Drafts that share a prefix share its
nodes (a trie), so a confident draft model costs fewer target positions.  Each draft keeps
its own tokens and its own row of probabilities: sharing a node only shares the computation
of identical rows.

Cache layout (both models): the context, then the nodes in creation order (depth by depth);
the target also has the last context token before the nodes.  After verification the
selected draft's path is kept with ``kv.keep_positions``.
"""

from __future__ import annotations

import torch


class DraftTree:
    """A trie of K draft blocks, grown one depth at a time.

    Attributes:
        K: number of drafts.
        share_prefixes: merge drafts with the same prefix into one node (default True).
        parent: parent node id per node (-1 for depth-1 nodes).
        depth_start: node id of the first node of each depth (depth d at index d − 1), plus
            the total node count at the end.
        node_of: node_of[d − 1][k] = node holding draft k's token at depth d.
    """

    def __init__(self, K: int, share_prefixes: bool = True):
        self.K = K
        self.share_prefixes = share_prefixes
        self.parent: list[int] = []
        self.depth_start: list[int] = [0]
        self.node_of: list[list[int]] = []

    @property
    def num_nodes(self) -> int:
        return len(self.parent)

    @property
    def depth(self) -> int:
        return len(self.node_of)

    def add_depth(self, tokens: list[int]) -> tuple[list[int], list[int]]:
        """Add the drafts' tokens of the next depth.

        Args:
            tokens: the K tokens (draft k's token at this depth).
        Returns:
            (new node tokens in id order, node id of each draft).
        """
        prev = self.node_of[-1] if self.node_of else [-1] * self.K
        seen: dict[tuple[int, int], int] = {}
        node_tokens, nodes = [], []
        for k, token in enumerate(tokens):
            # without sharing every draft gets its own node (a key no other draft has)
            key = (prev[k], token) if self.share_prefixes else (k, len(self.node_of))
            node = seen.get(key)
            if node is None:
                node = seen[key] = self.num_nodes
                self.parent.append(prev[k])
                node_tokens.append(token)
            nodes.append(node)
        self.node_of.append(nodes)
        self.depth_start.append(self.num_nodes)
        return node_tokens, nodes

    def path(self, k: int, length: int) -> list[int]:
        """Node ids of draft k's first ``length`` tokens (root first)."""
        return [self.node_of[d][k] for d in range(length)]

    def ancestors(self, node: int) -> list[int]:
        """The node and its ancestors' ids."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parent[node]
        return out

    def mask(self, first: int, last: int, prefix: int) -> torch.Tensor:
        """Attention of nodes ``first..last-1`` when the cache holds ``prefix`` positions
        before node 0 and the nodes before ``first``.

        Returns:
            bool [1, 1, last − first, prefix + last]: True where a query may attend
            (every prefix position, its ancestors, itself).
        """
        m = torch.zeros(1, 1, last - first, prefix + last, dtype=torch.bool)
        m[..., :prefix] = True
        for q, node in enumerate(range(first, last)):
            for a in self.ancestors(node):
                m[0, 0, q, prefix + a] = True
        return m


def attention_mask_for(model, mask: torch.Tensor, device) -> torch.Tensor:
    """A boolean 4-D mask in the form ``model``'s attention implementation takes it: boolean
    for SDPA (True = attend), additive float (0 / dtype min) otherwise."""
    mask = mask.to(device)
    if getattr(model.config, "_attn_implementation", "sdpa") == "sdpa":
        return mask
    dtype = next(model.parameters()).dtype
    return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(
        ~mask, torch.finfo(dtype).min)
