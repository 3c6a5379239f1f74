"""The speculative engine's steps 1–2 (draft, score) and 5 (cut back) on llama.cpp models
(``LlamaCppModel``): the same rows as ``torch_backend.layouts.PackedLayout``, with the draft tree fed
as llama.cpp sequences instead of a 4-D attention mask, and the draft tokens drawn by inverse
CDF (``sampling.inverse_cdf_rows``: the same law as ``torch.multinomial``, cheaper) from the
run's generator.

Cache layout (both models), between iterations: sequence 0 holds the first ``state.t_len``
(target) or ``state.d_len`` (draft) positions of the context, in cache cells whose order is
the order of their positions; sequences 1..K−1 are empty.  One iteration:

1. sequences 1..K−1 are given the context (``seq_cp``: no data copied, the cache is unified);
2. the draft is fed its pending tokens (on every sequence) and then, depth by depth, the
   tree's new nodes (``decoding.tree.DraftTree``), each node on the sequences of the drafts that
   pass through it, at position n + d − 1 for depth d (n = context length): llama.cpp lets each
   node attend to its sequence's cells, i.e. the context, its ancestors and itself;
3. the target scores [its pending tokens, every node] in ONE batch (the pending tokens are
   the last context token, and after a K > 1 iteration also the accepted drafts), the logits
   of the last pending token and of every node kept;
4. cut back.  K = 1: the accepted nodes stay (the rejected ones lie in later cells).  K > 1:
   every node is dropped and the accepted tokens become pending, fed again at the next
   iteration: kept nodes would sit above freed cells of rejected siblings, a later token would
   then fill such a cell below a cell of an earlier position, and llama.cpp 0.3.36's CPU path
   computes wrong logits once a sequence's cells are out of position order (found by
   tests/gpu_backend/llamacpp/test_llamacpp_backend.py; the reproducer is
   docs/upstream/llamacpp_out_of_order_kv_cells.md).  This costs both models τ more tokens at the
   next iteration (the cost model charges it: ``speed_model.iteration_seconds``).

The target rows go through ``decoding.sampling.probabilities`` exactly as in the torch layouts,
so the verifier (the rule layer) is unchanged.
"""

from __future__ import annotations

import torch

from spectr_gbv.gpu_backend.decoding.backend import DraftState, Layout
from spectr_gbv.gpu_backend.decoding.sampling import finite_rows, inverse_cdf_rows, probabilities, sampleable
from spectr_gbv.gpu_backend.decoding.tree import DraftTree
from spectr_gbv.gpu_backend.llamacpp.model import Feed


def draw_inverse_cdf(rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One token per row of ``rows`` float32 [R, V] (sampleable) → int64 [R], by inverse CDF
    (``sampling.inverse_cdf_rows``: the law of ``torch.multinomial``, 20× cheaper at V = 151,936),
    one float64 uniform per row from ``gen``: the llama.cpp backend's draws, drafts and plain
    sampling alike."""
    return inverse_cdf_rows(rows, torch.rand(rows.shape[0], generator=gen, dtype=torch.float64))


def _drafts_through(tree: DraftTree, depth: int, first: int, last: int) -> list[tuple[int, ...]]:
    """For nodes ``first..last-1`` (all of depth ``depth``, 1-based), the drafts through each
    (sorted sequence ids)."""
    seqs: list[list[int]] = [[] for _ in range(last - first)]
    for k, node in enumerate(tree.node_of[depth - 1]):
        seqs[node - first].append(k)
    return [tuple(s) for s in seqs]


class LlamaCppLayout(Layout):
    """``Layout`` for two ``LlamaCppModel``s (same arguments; ``device`` is the CPU).

    Raises (at construction):
        ValueError: K larger than either model's ``n_seq_max``.
    """

    def __init__(self, *args):
        super().__init__(*args)
        for role, m in (("target", self.target), ("draft", self.draft)):
            if self.K > m.n_seq_max:
                raise ValueError(f"K={self.K} drafts need {self.K} llama.cpp sequences but the "
                                 f"{role} model's context has n_seq_max={m.n_seq_max}")

    def draw(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return draw_inverse_cdf(rows, gen)

    def start(self, ids: torch.Tensor, gen: torch.Generator, L: int) -> DraftState:
        """A generation's state for the prompt ``ids`` int64 [T]: both caches emptied, the
        target fed the prompt minus its last token (no logits kept)."""
        K, V = self.K, self.target.V
        self.target.clear()
        self.draft.clear()
        context = ids.tolist()
        state = DraftState(None, None, context, gen,
                           torch.empty(K, L, dtype=torch.int64),
                           torch.empty(K, L, V, dtype=torch.float32),
                           torch.ones(K, L, dtype=torch.bool))
        if len(context) > 1:
            n = len(context) - 1
            self.target.decode(Feed(tuple(context[:-1]), tuple(range(n)), ((0,),) * n, ()))
        state.t_len = len(context) - 1
        return state

    def draft_and_score(self, state: DraftState) -> torch.Tensor:
        """K drafts grown as a tree (kept in ``state.tree``), then [c_last, every node]
        scored in one target batch.  Returns the target rows float32 [K, S+1, V]."""
        K, n_ctx = self.K, len(state.context)
        every = tuple(range(K))
        for s in range(1, K):
            self.draft.seq_cp(0, s)
            self.target.seq_cp(0, s)
        # the first draft row: the draft's pending tokens on every sequence
        pending = state.context[state.d_len:]
        n_p = len(pending)
        logits = self.draft.decode(Feed(tuple(pending), tuple(range(state.d_len, n_ctx)),
                                        (every,) * n_p, (n_p - 1,)))
        p_first = probabilities(logits, self.draft_sampling)
        ok = finite_rows(p_first)
        state.draft_ok[:, 0] = ok
        state.draft_probs[:, 0] = p_first
        state.draft_tokens[:, 0] = self.draw(sampleable(p_first, ok).expand(K, -1), state.gen)
        state.tree = tree = DraftTree(K, share_prefixes=True)

        def depth_rows(i, new, first, last):  # depth i's nodes, each on its drafts' sequences
            logits = self.draft.decode(Feed(tuple(new), (n_ctx + i - 1,) * (last - first),
                                            tuple(_drafts_through(tree, i, first, last)),
                                            tuple(range(last - first))))
            return probabilities(logits, self.draft_sampling)
        node_tokens = self.grow_tree(state, tree, depth_rows)
        return self._score_tree(state, tree, node_tokens)

    def _score_tree(self, state: DraftState, tree: DraftTree, node_tokens: list[int]) -> torch.Tensor:
        K, S, n_ctx = self.K, state.S, len(state.context)
        pending = state.context[state.t_len:]
        n_p = len(pending)
        positions, seqs = list(range(state.t_len, n_ctx)), [tuple(range(K))] * n_p
        for d in range(1, S + 1):
            first, last = tree.depth_start[d - 1], tree.depth_start[d]
            positions += [n_ctx - 1 + d] * (last - first)
            seqs += _drafts_through(tree, d, first, last)
        n = n_p + len(node_tokens)
        logits = self.target.decode(Feed(tuple(pending + node_tokens), tuple(positions),
                                         tuple(seqs), tuple(range(n_p - 1, n))))
        rows = probabilities(logits, self.sampling)
        index = torch.zeros(K, S + 1, dtype=torch.int64)
        index[:, 1:] = torch.tensor(tree.node_of).T + 1
        return rows[index]

    def cut_back(self, state: DraftState, row: int, tau: int) -> None:
        """K = 1: keep the first ``tau`` nodes in both caches.  K > 1: drop every node (the
        accepted tokens become pending, module docstring); sequence 0 only."""
        n_ctx = len(state.context)
        if self.K == 1:
            # target: the context (its last token was fed this iteration) + τ nodes
            state.t_len = n_ctx + tau
            # the draft never saw X_S: after τ = S it stays pending with the bonus token
            state.d_len = n_ctx + min(tau, state.S - 1)
        else:
            state.t_len = state.d_len = n_ctx
        _keep(self.target, row, state.t_len)
        _keep(self.draft, row, state.d_len)
        state.tree = None


def _keep(model, row: int, length: int) -> None:
    """Leave sequence 0 holding sequence ``row``'s cells at positions < ``length``, and no
    other sequence holding anything."""
    model.seq_keep(row)
    model.seq_rm(row, length, -1)
    if row != 0:
        model.seq_cp(row, 0)
        model.seq_rm(row)
