"""The seam between the speculative engine and a model backend.

A backend runs the two models of a pair on its own kernels and hands the engine probability
rows; the engine (``engine.speculative``), the plain-sampling baseline and the
auto-configuration (``tuning.autoconfig``) only call the methods below, so a new backend is one
folder that implements ``Backend`` and its ``Layout`` (docs/howto/add_a_backend.md).  Two
exist: transformers on torch (``torch_backend.backend.TorchBackend``, the engine's default, with
its layouts ``torch_backend.layouts`` and cache surgery ``torch_backend.kv``) and llama.cpp
(``llamacpp.backend.LlamaCppBackend``, the GGUF files on llama.cpp's kernels).  A backend is
handed to the engine (``SpeculativeEngine(..., backend=)``, ``models.pair.ModelPair.backend``);
nothing in the engine asks which backend it runs on.

Terms: a *layout* does the engine's steps 1–2 (draft K blocks, score them with ONE target
call) and 5 (cut both caches back to the selected draft's accepted tokens) over one
generation's ``DraftState``; the rows it returns go through ``decoding.sampling.probabilities``
on every backend, so the verifier (the rule layer) never sees a backend.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from spectr_gbv.reference.draft_stopping import ConfidenceStop, decision

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, finite_rows, sampleable
from spectr_gbv.gpu_backend.decoding.tree import DraftTree


@dataclass
class DraftState:
    """One generation's mutable state: caches, context, RNG, reused draft buffers
    (``draft_tokens`` int64 [K, L], ``draft_probs`` float32 [K, L, V], ``draft_ok`` bool
    [K, L]: which draft rows are finite, ``sampling.finite_rows``).

    ``d_len``: positions of the context held by the draft's cache (its pending tokens are
    ``context[d_len:]``).  The torch layouts' target cache always holds the context minus its
    last token; ``t_len``: the positions of the context the llama.cpp layout's target cache
    holds (its pending tokens are ``context[t_len:]``, at least the last one).
    ``tree``: the packed layout's token tree of the current iteration (None in the batched
    layout).  ``S``: the current iteration's block length (L, or less when a draft-side
    stopping policy or ``limit`` ended drafting early); the buffers' first S depths are the
    drafts.  ``limit``: the most positions the next iteration may draft (the engine sets it
    from the tokens still needed, ``reference.draft_stopping.block_cap``; 0: no limit, L).
    """

    t_cache: object
    d_cache: object
    context: list
    gen: torch.Generator
    draft_tokens: torch.Tensor
    draft_probs: torch.Tensor
    draft_ok: torch.Tensor
    d_len: int = 0
    tree: DraftTree | None = None
    t_len: int = 0
    S: int = 0
    limit: int = 0


class Layout:
    """Steps 1–2 and 5 of an iteration on one backend: what every layout shares (the models,
    their processing, K, L, the device and the draft-side stopping policy).

    Args:
        target, draft: the backend's models on ``device``.
        sampling, draft_sampling: the target's and the draft's processing
            (``sampling.probabilities``).
        K, L: drafts per iteration and the longest block (≥ 1, checked by the engine).
        device: the models' device.
        stop: a draft-side stopping policy (``reference.draft_stopping``) consulted after each
            drafted depth < L, or None (always L).  It sees draft-side information only.
    """

    def __init__(self, target, draft, sampling: SamplingConfig, draft_sampling: SamplingConfig,
                 K: int, L: int, device: torch.device, stop=None):
        self.target, self.draft = target, draft
        self.sampling, self.draft_sampling = sampling, draft_sampling
        self.K, self.L, self.device = K, L, device
        self.stop = stop

    def start(self, ids: torch.Tensor, gen: torch.Generator, L: int) -> DraftState:
        """A generation's state for the prompt ``ids`` int64 [T] (on the device): empty caches
        and draft buffers of ``L`` ≤ self.L positions (the longest block it will draft); the
        target's cache gets the prompt minus its last token."""
        raise NotImplementedError

    def draft_and_score(self, state: DraftState) -> torch.Tensor:
        """Steps 1–2: fill ``state.draft_tokens`` / ``draft_probs`` / ``draft_ok`` with K
        drafts of S ≤ L tokens (``state.S``: L unless a stopping policy or ``state.limit`` ends
        drafting earlier) and score them with ONE target call.

        Returns:
            the target's processed rows float32 [K, S+1, V] (row S is the bonus row).
        """
        raise NotImplementedError

    def cut_back(self, state: DraftState, row: int, tau: int) -> None:
        """Step 5: keep draft ``row``'s first ``tau`` tokens on top of the context in both
        caches and update ``state.d_len``.  Call it before the iteration's emitted tokens are
        appended to ``state.context``."""
        raise NotImplementedError

    def draw(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """One draft token per row of ``rows`` float32 [R, V] (sampleable) → int64 [R], from the
        run's generator (the backend's own sampler, ``Backend.draw``'s law)."""
        raise NotImplementedError

    def draw_depth(self, state: DraftState, i: int) -> None:
        """Flag the K draft rows of depth ``i`` (``state.draft_ok``) and draw each draft's token
        into ``state.draft_tokens[:, i]`` (``draw``); a non-finite row is replaced by a
        placeholder (``sampling.sampleable``), never sampled."""
        ok = finite_rows(state.draft_probs[:, i])
        state.draft_ok[:, i] = ok
        state.draft_tokens[:, i] = self.draw(sampleable(state.draft_probs[:, i], ok), state.gen)

    def grow_tree(self, state: DraftState, tree: DraftTree, depth_rows) -> list[int]:
        """Depths 2..S of the K drafts as a token tree (S = L unless the stopping policy or
        ``state.limit`` ends them; sets ``state.S``), the first depth already drawn into
        ``state.draft_tokens[:, 0]``.  Each depth: ``depth_rows(i, new, first, last)`` feeds the
        draft the ``new`` node tokens of depth i (node ids first..last−1) and returns their
        processed rows float32 [last − first, V]; each draft's row is the one of its node, and
        its token is drawn (``draw_depth``).

        Returns:
            every node's token in creation order (the tree's nodes).
        """
        tokens, probs = state.draft_tokens, state.draft_probs
        new, nodes = tree.add_depth(tokens[:, 0].tolist())
        node_tokens = list(new)
        state.S = 1
        while state.S < self._most(state) and not self._stops(state, state.S - 1):
            i = state.S
            state.S += 1
            first, last = tree.depth_start[i - 1], tree.depth_start[i]
            rows = depth_rows(i, new, first, last)
            probs[:, i] = rows[torch.tensor(nodes, device=rows.device) - first]
            self.draw_depth(state, i)
            new, nodes = tree.add_depth(tokens[:, i].tolist())
            node_tokens += new
        return node_tokens

    def _most(self, state: DraftState) -> int:
        """The block length this iteration drafts up to: L, or ``state.limit`` when smaller."""
        return min(self.L, state.limit) if state.limit > 0 else self.L

    def _stops(self, state: DraftState, i: int) -> bool:
        """Whether drafting ends after depth ``i`` (0-based; the policy sees position i + 1).
        A ``ConfidenceStop`` (exactly that class: a subclass may override ``__call__``) gets
        the K drafted tokens' probabilities (K numbers read on the host); any other policy is
        called as the reference calls it, with the rows and tokens as numpy arrays."""
        if self.stop is None or i + 1 >= self.L:
            return False
        tokens, rows = state.draft_tokens[:, i], state.draft_probs[:, i]
        if type(self.stop) is ConfidenceStop:
            return self.stop.decide(rows.gather(1, tokens[:, None])[:, 0].tolist())
        return decision(self.stop, self.stop(i + 1, rows.cpu().numpy(), tokens.cpu().numpy()))


class Backend(abc.ABC):
    """What a model backend gives the engine, the plain-sampling baseline and the
    auto-configuration.  Subclasses implement every method (abstract: a backend missing one cannot be made); ``name`` appears in messages and in
    the auto-configuration's cache keys.
    """

    name: str = "?"
    #: whether the layout feeds a K > 1 iteration's accepted tokens again at the next one
    #: (the auto-configuration charges them, ``speed_model.Costs.refeed_accepted``)
    refeeds_accepted: bool = False

    # -- the speculative engine --------------------------------------------------------------
    @abc.abstractmethod
    def check_pair(self, target, draft, rule: str, custom_verifier: bool) -> int:
        """Check that ``target`` and ``draft`` run on this backend and can draft for each other
        under ``rule`` (``custom_verifier``: the caller handed its own verifier).

        Returns:
            the shared logits axis V (int).
        Raises:
            ValueError: a model of another backend, different vocabularies, a cache that cannot
                be cut back exactly, or a draft the rule does not accept; naming the model.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def device(self, model) -> torch.device:
        """The device the model's rows come out on."""
        raise NotImplementedError

    @abc.abstractmethod
    def check_length(self, target, draft, positions: int) -> None:
        """Raise ValueError, naming the model, when a generation holding up to ``positions``
        positions in a cache (prompt, new tokens and one iteration's draft tree) cannot run."""
        raise NotImplementedError

    @abc.abstractmethod
    def layout(self, target, draft, sampling: SamplingConfig, draft_sampling: SamplingConfig,
               K: int, L: int, device: torch.device, stop, layout: str,
               share_prefixes: bool) -> Layout:
        """The ``Layout`` of one engine (``layout``/``share_prefixes``: the engine's arguments,
        which a backend with one layout ignores)."""
        raise NotImplementedError

    # -- plain sampling ------------------------------------------------------------------------
    @abc.abstractmethod
    def vocab_size(self, model) -> int:
        """The model's logits axis V."""
        raise NotImplementedError

    @abc.abstractmethod
    def plain_logits(self, model, prompt_tokens: int, max_new_tokens: int):
        """A function ``pending int64 [1, n] -> logits [1, V]`` feeding the model the pending
        tokens after those already fed (an empty cache first) and returning the last row.

        Raises:
            ValueError: the model cannot hold ``prompt_tokens + max_new_tokens`` positions.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def draw(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """One token per row of ``rows`` float32 [R, V] (sampleable) → int64 [R]."""
        raise NotImplementedError

    # -- the auto-configuration's measurements -------------------------------------------------
    @abc.abstractmethod
    def forward_costs(self, model, context_ids: list[int], ns, sampling: SamplingConfig, timer,
                      repeats: int):
        """Seconds of a forward over n new tokens after a cached context, with every row's
        probability processing, for each n in ``ns``; the context's prefill seconds.

        Args:
            timer: ``tuning.timing.timed_interleaved`` (medians of interleaved rounds).
        Returns:
            (seconds per n, prefill seconds, ``tuning.timing.TimingQuality``).
        """
        raise NotImplementedError

    @abc.abstractmethod
    def teacher_forced_rows(self, model, prompt_ids: list[int], continuation: list[int],
                            sampling: SamplingConfig) -> torch.Tensor:
        """float32 [n, V]: the model's processed row before each token of ``continuation``."""
        raise NotImplementedError

    @abc.abstractmethod
    def device_label(self, model) -> str:
        """What the model's timings depend on besides the machine (a cache key)."""
        raise NotImplementedError
