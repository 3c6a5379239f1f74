"""The torch backend's two cache layouts (transformers models): steps 1–2 (draft, score) and 5
(cut back) of ``SpeculativeEngine``.

Both give the verifier the same rows (up to float rounding) and draw the same draft tokens
from the same generator.

- ``BatchedLayout`` (``"batched"``): the caches are repeated into K rows
  (``batch_repeat_interleave``), the K drafts are a batch of K rows, and afterwards one row
  is kept (``batch_select_indices``) and cropped.  No host read while drafting.
- ``PackedLayout`` (``"packed"``, the engine's default, faster on CPU): the caches stay one
  row; the drafts are fed as a token tree with a 4-D attention mask and per-node position
  ids (``gpu_backend.decoding.tree``), drafts with a common prefix share its nodes, and the selected
  path is gathered back (``kv.keep_positions``).  Each depth's K draft tokens are read on the
  host to build the tree (free on CPU; on a GPU the batched layout avoids these reads).

Interface (``decoding.backend.Layout``): ``start(ids, gen, L)``, ``draft_and_score(state)`` fills the state's draft buffers and returns
the target rows; ``cut_back(state, row, tau)`` keeps the selected draft's accepted tokens in
both caches.  A layout holds no per-generation data: that lives in ``DraftState``.
"""

from __future__ import annotations

import torch

from spectr_gbv.gpu_backend.decoding.backend import DraftState, Layout
from spectr_gbv.gpu_backend.torch_backend.kv import cache_length, keep_positions, keep_row, new_cache, widen
from spectr_gbv.gpu_backend.decoding.sampling import finite_rows, probabilities, sampleable
from spectr_gbv.gpu_backend.decoding.tree import DraftTree, attention_mask_for
from spectr_gbv.gpu_backend.models.weights import vocab_size


def sample_rows(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One token per row of ``probs`` [R, V] → int64 [R].

    ``replacement=True`` draws from the same law for one sample, and on CPU it takes the
    cumulative-sum path instead of the slower exponential race (benchmarks/MEASUREMENTS.md).
    """
    return torch.multinomial(probs, 1, replacement=True, generator=gen)[:, 0]


class TorchLayout(Layout):
    """What both torch layouts share: the start of a generation and the first draft row
    (``decoding.backend.Layout``'s arguments; ``target``, ``draft``: transformers causal LMs)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.V = vocab_size(self.target)

    def draw(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return sample_rows(rows, gen)

    def start(self, ids: torch.Tensor, gen: torch.Generator, L: int) -> DraftState:
        K, V, dev = self.K, self.V, self.device
        state = DraftState(new_cache(self.target), new_cache(self.draft), ids.tolist(), gen,
                           torch.empty(K, L, dtype=torch.int64, device=dev),
                           torch.empty(K, L, V, dtype=torch.float32, device=dev),
                           torch.ones(K, L, dtype=torch.bool, device=dev))
        if ids.numel() > 1:
            self.target(ids[None, :-1], cache=state.t_cache, use_cache=True, logits_to_keep=1)
        return state

    def _first_draft_row(self, state: DraftState) -> None:
        """Feed the draft its pending tokens (batch 1) and draw the K first draft tokens."""
        pending = torch.tensor([state.context[state.d_len:]], dtype=torch.int64,
                               device=self.device)
        logits = self.draft(pending, cache=state.d_cache, use_cache=True, logits_to_keep=1).logits
        p_first = probabilities(logits[:, -1], self.draft_sampling)
        ok = finite_rows(p_first)
        state.draft_ok[:, 0] = ok
        state.draft_probs[:, 0] = p_first
        state.draft_tokens[:, 0] = torch.multinomial(sampleable(p_first, ok), self.K,
                                                     replacement=True, generator=state.gen)[0]


class BatchedLayout(TorchLayout):
    """K cache rows: the caches repeated K times, the drafts a batch of K rows."""

    def draft_and_score(self, state: DraftState) -> torch.Tensor:
        """The draft's cache repeated after the first row, the K blocks drafted as a batch of
        K rows, the target's cache repeated and K rows [c_last, X_1..X_S] scored in one call.
        Returns the target rows float32 [K, S+1, V] (S = ``state.S``)."""
        K = self.K
        tokens, probs = state.draft_tokens, state.draft_probs
        self._first_draft_row(state)
        widen(state.d_cache, K)
        state.S = 1
        while state.S < self._most(state) and not self._stops(state, state.S - 1):
            i = state.S
            logits = self.draft(tokens[:, i - 1:i], cache=state.d_cache, use_cache=True).logits
            probs[:, i] = probabilities(logits[:, -1], self.draft_sampling)
            self.draw_depth(state, i)
            state.S += 1
        widen(state.t_cache, K)
        last = torch.full((K, 1), state.context[-1], dtype=torch.int64, device=self.device)
        logits = self.target(torch.cat([last, tokens[:, :state.S]], dim=1), cache=state.t_cache,
                             use_cache=True).logits
        return probabilities(logits, self.sampling)

    def cut_back(self, state: DraftState, row: int, tau: int) -> None:
        n_ctx = len(state.context)
        keep_row(state.t_cache, row, self.K, n_ctx + tau)
        # after τ = S the draft's cache lacks X_S: it stays pending with the bonus token
        state.d_len = min(cache_length(state.d_cache), n_ctx + tau)
        keep_row(state.d_cache, row, self.K, state.d_len)


class PackedLayout(TorchLayout):
    """One cache row: the drafts fed as a token tree (``gpu_backend.decoding.tree``).

    Args:
        share_prefixes: drafts with a common prefix share its nodes (default True); the other
            arguments as ``Layout``.
    """

    def __init__(self, *args, share_prefixes: bool = True):
        super().__init__(*args)
        self.share_prefixes = bool(share_prefixes)

    def draft_and_score(self, state: DraftState) -> torch.Tensor:
        """The K drafts grown as a token tree (kept in ``state.tree``), each depth's new nodes
        fed to the draft in one call, then the last context token and every node scored by
        the target in one call.  Returns the target rows float32 [K, S+1, V] (S = ``state.S``)."""
        self._first_draft_row(state)
        state.tree = tree = DraftTree(self.K, share_prefixes=self.share_prefixes)
        node_tokens = self._grow_tree(state, tree)
        return self._score_tree(state, tree, node_tokens)

    def _grow_tree(self, state: DraftState, tree: DraftTree) -> list[int]:
        """Depths 2..S (``Layout.grow_tree``), one draft call per depth on that depth's new nodes
        (a 4-D mask: each node sees the context, its ancestors and itself)."""
        dev, n_ctx = self.device, len(state.context)

        def depth_rows(i, new, first, last):
            mask = attention_mask_for(self.draft, tree.mask(first, last, n_ctx), dev)
            pos = torch.full((1, last - first), n_ctx + i - 1, dtype=torch.int64, device=dev)
            logits = self.draft(torch.tensor([new], dtype=torch.int64, device=dev),
                                attention_mask=mask, position_ids=pos, cache=state.d_cache,
                                use_cache=True).logits[0]
            return probabilities(logits, self.draft_sampling)
        return self.grow_tree(state, tree, depth_rows)

    def _score_tree(self, state: DraftState, tree: DraftTree,
                    node_tokens: list[int]) -> torch.Tensor:
        """One target call on [c_last, every node]; the rows gathered per draft and depth,
        float32 [K, S+1, V]."""
        K, L, dev = self.K, state.S, self.device
        n_ctx, N = len(state.context), tree.num_nodes
        # query 0 is the last context token (it sees the cache and itself), then the nodes
        mask = torch.zeros(1, 1, 1 + N, n_ctx + N, dtype=torch.bool)
        mask[0, 0, 0, :n_ctx] = True
        mask[:, :, 1:] = tree.mask(0, N, n_ctx)
        depth = [d + 1 for d in range(L) for _ in range(tree.depth_start[d], tree.depth_start[d + 1])]
        pos = torch.tensor([[n_ctx - 1] + [n_ctx - 1 + d for d in depth]], device=dev)
        inp = torch.tensor([[state.context[-1]] + node_tokens], dtype=torch.int64, device=dev)
        logits = self.target(inp, attention_mask=attention_mask_for(self.target, mask, dev),
                             position_ids=pos, cache=state.t_cache, use_cache=True).logits[0]
        rows = probabilities(logits, self.sampling)
        index = torch.zeros(K, L + 1, dtype=torch.int64)
        index[:, 1:] = torch.tensor(tree.node_of).T + 1
        return rows[index.to(dev)]

    def cut_back(self, state: DraftState, row: int, tau: int) -> None:
        n_ctx = len(state.context)
        path = [n_ctx + node for node in state.tree.path(row, tau)]
        keep_positions(state.t_cache, list(range(n_ctx)) + path)
        # the draft never saw X_S: after τ = S it stays pending with the bonus token
        state.d_len = n_ctx + min(tau, state.S - 1)
        keep_positions(state.d_cache, list(range(n_ctx)) + path[: min(tau, state.S - 1)])
        state.tree = None

