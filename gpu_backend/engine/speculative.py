"""Speculative decoding on real models: ``SpeculativeEngine`` (plain sampling, its baseline, is
``engine.plain``; a generation's metrics ``engine.result``).

The models run on a backend the engine is handed (``decoding.backend.Backend``: transformers on
torch by default, ``torch_backend.backend``; llama.cpp, ``llamacpp.backend``).

One iteration of ``SpeculativeEngine`` (Leviathan et al. 2023; SpecTr, Sun et al. 2023;
SpecTr-GBV, Lin et al. 2026 — docs/rules.md §1–§3):

1. **Draft.** The draft model's KV cache holds the context; its pending tokens (usually one,
   two after a bonus) give the first draft row, then the K drafts of L tokens (fewer near the
   end of the generation, ``cap_blocks``) are grown together, one draft forward call per
   depth, each token drawn from exactly the processed row that is handed to the verifier
   (``draft_probs``).
2. **Score.** The target's cache holds the context minus its last token; ONE forward call
   scores the last context token and every draft token: ``target_probs [K, L+1, V]`` (row L
   is the bonus row).
3. **Modify.** Rows still inside a live Algorithm 2 window are replaced by the layered
   modified target (``gpu_backend.engine.stack``; docs/rules.md §3).
4. **Verify.** The verifier (``gpu_backend.verifiers`` contract, batch of one) returns τ, the
   selected draft, the emitted tokens and, for greedy rules, a modification record.
5. **Cut back.** Both caches keep the selected draft's accepted tokens on top of the context;
   the stack continues its windows over the emitted tokens.

The backend's layout (``decoding.backend.Layout``) does steps 1–2 and 5.  The torch backend has
two cache layouts (``gpu_backend.torch_backend.layouts``) that give the same rows.
``"batched"``: the caches are repeated into K rows, the K drafts are a batch of K rows, and
afterwards one row is kept and cropped.  ``"packed"`` (default, faster on CPU): the caches
stay one row; the drafts are fed as a token tree with a 4-D attention mask (drafts with a
common prefix share its nodes), and the selected path is gathered back.

Draft and target logits go through the same ``sampling.probabilities`` (temperature, top-k,
top-p, float32 softmax).  All randomness comes from one seeded ``torch.Generator`` (draft
tokens, and one verifier seed per iteration), so a run is reproducible; any Python int is a
seed (``generator_seed``).  Without a seed (``seed=None``, the default) a run draws a fresh
64-bit seed from the operating system (``reference.seeds.fresh_seed``) and reports it in
``GenerationResult.seed``: calls differ, and any run is replayed by passing its seed back.  The loop reads the verdict back to the host once per iteration
(τ, selected draft, emitted tokens, and an "every row finite" flag); the packed layout also
reads each depth's K draft tokens on the host to build the tree (free on CPU; on a GPU the
batched layout avoids these reads).

What the engine refuses or raises (all ``ValueError``, one line, naming the model):
- at construction, a draft or target whose cache cannot be cut back exactly (the backend's
  ``check_pair``; torch: ``torch_backend.backend.check_model``: sliding-window layers whose window
  can bind, recurrent / convolution /
  hybrid states, any other cache layer than transformers' full ``DynamicLayer``);
- during a generation, a non-finite probability row (NaN / inf logits) of either model
  (``NonFiniteError``, naming the iteration, draft and depth or row), raised after the
  iteration's read and before any token of that iteration is emitted; no token is ever drawn
  from such a row (``sampling.sampleable``).

Metrics (``engine.result.GenerationResult``): τ of an iteration counts the draft tokens it *kept* in the
output (after truncation at the first EOS or at ``max_new_tokens``); the verifier's τ before
truncation is ``taus_raw``.  Mean τ, acceptance rate and per-position acceptance derive from the
kept τ, so that they count only tokens the generation returns; transformers' assisted
generation (``gpu_backend.bench.assisted``) is counted by the same definitions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from spectr_gbv.reference.draft_stopping import block_cap
from spectr_gbv.reference.rules import registry
from spectr_gbv.reference.seeds import resolve_seed

from spectr_gbv.gpu_backend.decoding.backend import Backend, DraftState
from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L, DEFAULT_RULE
from spectr_gbv.gpu_backend.engine.inputs import NonFiniteError, check_positive, prompt_tensor, seeded_generator
from spectr_gbv.gpu_backend.engine.memory import peak_rss_bytes
from spectr_gbv.gpu_backend.engine.result import GenerationResult, kept_tau
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, finite_rows
from spectr_gbv.gpu_backend.engine.stack import ModificationStack
from spectr_gbv.gpu_backend.torch_backend.backend import TORCH
from spectr_gbv.reference.draft_stopping import check_policy
from spectr_gbv.reference.rules import policy


@dataclass
class IterationRecord:
    """One iteration's verifier inputs and verdict (for tests and diagnostics; copies).

    Attributes:
        n: tokens emitted before the iteration.
        context: prompt + emitted tokens before the iteration.
        draft_tokens int64 [K, S]; draft_probs float32 [K, S, V] (S ≤ L the iteration's
        block length); target_probs_raw float32 [K, S+1, V] (the target's processed rows);
        target_probs: what the verifier got (raw rows with Algorithm 2's modified rows);
        verdict: the verifier's verdict; emitted: list of emitted tokens (before truncation).
    """

    n: int
    context: list[int]
    draft_tokens: torch.Tensor
    draft_probs: torch.Tensor
    target_probs_raw: torch.Tensor
    target_probs: torch.Tensor
    verdict: object
    emitted: list[int] = field(default_factory=list)


def load_verifier(rule: str):
    """The batched verifier for ``rule`` (``gpu_backend.verifiers.get_verifier``, default
    parameters).

    Raises:
        ValueError: unknown rule (from the factory).
    """
    # imported on use: importing the verifiers builds every registered rule once
    from spectr_gbv.gpu_backend.verifiers import get_verifier

    return get_verifier(rule)


@dataclass
class _FiniteFlags:
    """Which rows of one iteration are finite: draft bool [K, L], target bool [K, L+1] (raw),
    modified bool [K, L+1] or None (the rows after Algorithm 2, when any were modified)."""

    draft: torch.Tensor
    target: torch.Tensor
    modified: torch.Tensor | None

    def all(self) -> torch.Tensor:
        """bool 0-d tensor on the device: every row finite (no sync)."""
        flag = self.draft.all() & self.target.all()
        return flag & self.modified.all() if self.modified is not None else flag

    def check(self, iteration: int, n: int) -> None:
        """Raise ``NonFiniteError`` naming the first non-finite row (reads the flags: call
        it only once a problem is known, or where the loop synchronises anyway).

        Args:
            iteration: 0-based iteration index; n: tokens emitted before it.
        """
        where = f"at iteration {iteration} (after {n} emitted tokens)"
        for who, flags, what in (("draft model", self.draft, "depth"),
                                 ("target model", self.target, "row"),
                                 ("Algorithm 2's modified target (target model)", self.modified,
                                  "row")):
            if flags is None or bool(flags.all()):
                continue
            k, i = (int(v) for v in (~flags).nonzero()[0])
            detail = (f"depth {i}" if what == "depth" else
                      f"row {i} (rows 0..{flags.shape[1] - 1}; the last is the bonus row)")
            raise NonFiniteError(f"{who} gave a non-finite probability row (NaN or inf "
                                 f"logits) {where}, draft {k}, {detail}; no token of this "
                                 f"iteration was emitted")


class SpeculativeEngine:
    """Speculative decoding with K drafts of L tokens and any verification rule.

    Args:
        target, draft: two models of ``backend``, same vocabulary axis: transformers causal
            LMs on one device for the default torch backend.
        rule: verifier name (``gpu_backend.verifiers``: sd, spectr, bv, gbv, spectr_gbv,
            spectr_gbv_fixed, kseq_gbv, ...); ignored when ``verifier`` is given.
        K: drafts per iteration ≥ 1 (1 for the single-draft rules sd, bv, gbv).
        L: draft block length ≥ 1.
        sampling: temperature / top-k / top-p of the target (the law to reproduce).
        draft_sampling: the draft's processing; default: the same as ``sampling``.  Any
            draft law keeps the output lossless (it only changes acceptance); tests use a
            different one to make exact constructions.
        eos_token_ids: ids that stop the generation (``models.eos.eos_token_ids``).
        verifier: a callable with the verifier contract (default ``load_verifier(rule)``).
        validate: passed to the verifier (input checks on every call).
        layout: "packed" (default): one cache row, the drafts fed as a token tree with a
            4-D attention mask (``gpu_backend.decoding.tree``); "batched": K cache rows, the caches
            repeated K times (simpler, slower on CPU: every row re-reads the context's KV).
            Both hand the verifier the same rows (up to float rounding).
        share_prefixes: with "packed", drafts with a common prefix share its nodes.
        draft_stop: a draft-side stopping policy (``reference.draft_stopping``, e.g.
            ``ConfidenceStop(0.4)``): drafting ends after a depth where it says so, and the
            verifier gets the S ≤ L drafted positions.  Accepted only for rules whose registry
            entry declares ``draft_stopping`` (proved lossless under stopping,
            proofs_check/DRAFT_STOPPING.md); with a custom ``verifier`` the caller vouches,
            except that one declaring ``modifies_targets`` is refused.
        cap_blocks: near the end of a generation, draft only the positions that can still be
            emitted (``reference.draft_stopping.block_cap``: S = max(1, min(L, N − n − 1))
            with n of N tokens out), saving draft forwards whose tokens would be cut off.
            None (default): on for a registered lossless rule (each is checked exactly to keep
            its law under the cap, proofs_check/BLOCK_CAP.md), off for a lossy rule and for a
            custom ``verifier``.
        backend: the ``decoding.backend.Backend`` that runs the models (default: the torch
            backend, ``torch_backend.backend.TORCH``; a pair's own is ``ModelPair.backend``, e.g.
            ``llamacpp.backend.LLAMACPP``: llama.cpp's kernels on the GGUF files, the drafts fed
            as llama.cpp sequences; ``layout`` and ``share_prefixes`` are then not used, the
            tree always shares prefixes).
        rule_verifier: ``load_verifier(rule)`` already loaded (e.g. the one the
            auto-configuration timed), used instead of loading it again; unlike ``verifier``
            it is the rule's own, and every check of the rule applies.
    Raises:
        ValueError: K < 1, L < 1, K ≠ 1 for a single-draft rule, unknown rule or layout, a
            vocabulary mismatch between draft and target, a draft or target whose cache
            cannot be cut back (the backend's ``check_pair``: sliding window, recurrent or hybrid state),
            ``draft_stop`` not a policy or with a rule not certified lossless under stopping (or a
            custom verifier declaring ``modifies_targets``), or a dynamically
            quantised draft (``draft_quant``) with a rule whose registry entry does not declare
            ``varying_draft_rows``.
    """

    def __init__(self, target, draft, rule: str = DEFAULT_RULE, K: int = DEFAULT_K,
                 L: int = DEFAULT_L, sampling: SamplingConfig | None = None,
                 draft_sampling: SamplingConfig | None = None, eos_token_ids=(),
                 verifier=None, validate: bool = False, layout: str = "packed",
                 share_prefixes: bool = True, draft_stop=None, cap_blocks: bool | None = None,
                 rule_verifier=None, backend: Backend | None = None):
        if layout not in ("packed", "batched"):
            raise ValueError(f"layout must be 'packed' or 'batched', got {layout!r}")
        self.layout = layout
        self.share_prefixes = bool(share_prefixes)

        self.K = check_positive(K, "K")
        self.L = check_positive(L, "L")
        if verifier is None:
            policy.check_draft_count(rule, K, "K")
        check_policy(draft_stop, "draft_stop")
        if draft_stop is not None and verifier is None:
            policy.check_draft_stopping(rule, "draft_stop")
        if draft_stop is not None and verifier is not None and getattr(verifier, "modifies_targets", False):
            # a stopped block can be shorter than a live Algorithm 2 window, which the stack
            # cannot extend (ModificationStack.modify): refuse before any forward, not mid-way
            raise ValueError("draft_stop: the custom verifier declares modifies_targets (Algorithm 2 "
                             "windows span the verified block), which drafting that stops early "
                             "cannot keep; no rule that modifies later targets is lossless under "
                             "stopping (proofs_check/DRAFT_STOPPING.md)")
        self.draft_stop = draft_stop
        if cap_blocks is not None and not isinstance(cap_blocks, bool):
            raise ValueError(f"cap_blocks must be True, False or None, got {cap_blocks!r}")
        self.cap_blocks = (verifier is None and registry.spec(rule).lossless) if cap_blocks is None else cap_blocks
        self.backend = backend if backend is not None else TORCH
        self.V = self.backend.check_pair(target, draft, rule, custom_verifier=verifier is not None)
        self.target, self.draft = target, draft
        self.rule = rule
        self.sampling = sampling or SamplingConfig()
        self.draft_sampling = draft_sampling or self.sampling
        self.eos = frozenset(int(e) for e in eos_token_ids)
        if verifier is not None:
            self.verifier = verifier
        else:
            self.verifier = rule_verifier if rule_verifier is not None else load_verifier(rule)
        self.validate = validate
        self.device = self.backend.device(target)
        self._layout = self.backend.layout(target, draft, self.sampling, self.draft_sampling, self.K,
                                           self.L, self.device, draft_stop, layout=layout,
                                           share_prefixes=self.share_prefixes)

    @torch.inference_mode()
    def generate(self, prompt_ids, max_new_tokens: int = 64, seed: int | None = None,
                 on_iteration=None, streamer=None) -> GenerationResult:
        """Sample up to ``max_new_tokens`` new tokens after the prompt.

        Args:
            prompt_ids: token ids (list or 1-D int tensor), at least one.
            max_new_tokens: ≥ 1; the last iteration's output is truncated to it.
            seed: any Python int (negative, or beyond 64 bits, too): the run's
                ``torch.Generator`` is seeded with ``generator_seed(seed)``, a 64-bit hash, so
                that distinct ints give distinct streams (on CPU, torch's generator keeps 32 of
                those bits: a chance collision per pair of 2^-32).  The same seed gives the
                same generation.  None (default): a fresh 64-bit seed from the operating
                system (``reference.seeds.resolve_seed``); the seed used is ``result.seed``.
            on_iteration: optional callable receiving an ``IterationRecord`` per iteration
                (copies tensors: for tests and diagnostics, not for timing).
            streamer: optional transformers-style streamer (e.g. ``transformers.TextStreamer``):
                ``put(int64 tensor)`` with each iteration's kept tokens as they are accepted,
                ``end()`` once the generation ends (the prompt is not put).
        Returns:
            GenerationResult (tokens stop after the first EOS id, which is kept; ``seed``: the
            seed used).
        Raises:
            ValueError: empty prompt, max_new_tokens < 1, seed neither None nor an integer, or a
                generation that could outgrow an accepted model's sliding window (one of at
                least ``max_position_embeddings`` positions).
            NonFiniteError (a ValueError): a draft or target probability row is not finite
                (NaN / inf logits); the message names the model, iteration, draft and depth
                or row.  Raised before any token of that iteration is emitted.
        """
        max_new_tokens = check_positive(max_new_tokens, "max_new_tokens")
        ids = prompt_tensor(prompt_ids, self.V).to(self.device)
        # the cap never grows as tokens come out: the first block is the longest
        most = block_cap(0, max_new_tokens, self.L) if self.cap_blocks else self.L
        self._check_windows(ids.numel() + max_new_tokens, most)
        seed = resolve_seed(seed)
        gen = seeded_generator(seed, self.device)
        start, cpu_start = time.perf_counter(), time.process_time()
        state = self._layout.start(ids, gen, most)
        stack = ModificationStack(self.L)
        out: list[int] = []
        taus: list[int] = []
        taus_raw: list[int] = []
        lengths: list[int] = []
        stop_reason = "max_new_tokens"
        while len(out) < max_new_tokens:
            if self.cap_blocks:
                state.limit = block_cap(len(out), max_new_tokens, self.L)
            tau, emitted = self._iteration(state, stack, len(out), len(taus), on_iteration)
            if not taus:
                first_token = time.perf_counter() - start
            lengths.append(state.S)
            state.context.extend(emitted)
            before = len(out)
            hit_eos = self._emit(out, emitted, max_new_tokens)
            if streamer is not None and len(out) > before:
                streamer.put(torch.tensor(out[before:], dtype=torch.int64))
            taus_raw.append(tau)
            taus.append(kept_tau(tau, len(out) - before))
            if hit_eos:
                stop_reason = "eos"
                break
        if streamer is not None:
            streamer.end()
        return GenerationResult(self.rule, out, int(ids.numel()), len(taus), taus, self.K,
                                self.L, time.perf_counter() - start, peak_rss_bytes(),
                                stop_reason, time.process_time() - cpu_start, taus_raw, lengths,
                                first_token, seed)

    def _check_windows(self, length: int, block: int) -> None:
        """Raise ValueError (the backend's, ``Backend.check_length``) when a generation of
        ``length`` tokens (prompt + new tokens) with blocks of at most ``block`` positions could
        outgrow a model's cache or sliding window."""
        # the most positions a cache holds: the context, the last token and every tree node
        self.backend.check_length(self.target, self.draft, length + self.K * block + 1)

    def _iteration(self, state: DraftState, stack: ModificationStack, n: int, iteration: int,
                   on_iteration) -> tuple[int, list[int]]:
        """Steps 1–5 of iteration ``iteration`` (0-based; ``n`` tokens emitted before it).
        ``state.context`` is not extended here: the cut back and ``on_iteration`` see the
        context the drafts were drawn after.

        Returns:
            (the verifier's τ, the emitted tokens before truncation).
        Raises:
            NonFiniteError: a non-finite draft or target row (before anything is emitted).
        """
        # 1-2. K drafts of S ≤ L tokens, scored by one target call
        target_raw = self._layout.draft_and_score(state)
        S = state.S
        draft_tokens, draft_probs = state.draft_tokens, state.draft_probs
        if S < self.L:  # drafting stopped early: the verifier gets the S drafted positions
            draft_tokens, draft_probs = draft_tokens[:, :S].contiguous(), draft_probs[:, :S].contiguous()
        # 3. Algorithm 2's modified rows
        target_probs, trace = stack.modify(n, draft_tokens, draft_probs, target_raw)
        # one reduction per row, read with the verdict (no extra host sync)
        finite = _FiniteFlags(state.draft_ok[:, :S], finite_rows(target_raw),
                              finite_rows(target_probs) if target_probs is not target_raw
                              else None)
        if self.validate:  # the verifier's own checks would fire first, unnamed
            finite.check(iteration, n)
        # 4. verify
        verdict, tau, selected, is_active, emitted = self._verify(
            state, draft_tokens, draft_probs, target_probs, finite, iteration, n)
        # 5. cut back: keep the selected draft (any when τ = 0: they share the context)
        row = max(selected, 0)
        self._layout.cut_back(state, row, tau)
        stack.advance(n, emitted, row, trace, verdict.modification, bool(is_active), span=S)
        if on_iteration is not None:
            on_iteration(IterationRecord(n, list(state.context), draft_tokens.clone(),
                                         draft_probs.clone(), target_raw.clone(),
                                         target_probs.clone(), verdict, list(emitted)))
        return tau, emitted

    def _verify(self, state: DraftState, draft_tokens: torch.Tensor, draft_probs: torch.Tensor,
                target_probs: torch.Tensor, finite: _FiniteFlags, iteration: int, n: int):
        """Step 4: the verifier on the drafts (int64 [K, S], float32 [K, S, V]) and
        ``target_probs`` float32 [K, S+1, V], and the iteration's one host read.

        Returns:
            (verdict, τ, selected draft, Algorithm 2 window active (0/1), emitted tokens).
        Raises:
            NonFiniteError: a row flagged in ``finite`` is not finite.
        """
        seeds = torch.randint(0, 2**62, (1,), generator=state.gen, device=self.device)
        verdict = self.verifier(draft_tokens[None], draft_probs[None],
                                target_probs[None], seeds=seeds, validate=self.validate)
        mod = verdict.modification
        active = mod.active[:1].to(torch.int64) if mod is not None else verdict.tau.new_zeros(1)
        head = torch.cat([verdict.tau[:1], verdict.selected[:1], verdict.num_emitted[:1],
                          active, finite.all().reshape(1).to(torch.int64),
                          verdict.tokens[0]]).tolist()  # the iteration's host sync
        tau, selected, num_emitted, is_active, all_finite = head[:5]
        if not all_finite:
            finite.check(iteration, n)  # raises, naming the model and the row
        return verdict, tau, selected, is_active, head[5:5 + num_emitted]

    def _emit(self, out: list[int], emitted: list[int], max_new_tokens: int) -> bool:
        """Append ``emitted`` to ``out`` up to the limit; True when an EOS was emitted."""
        for token in emitted:
            if len(out) >= max_new_tokens:
                return False
            out.append(token)
            if token in self.eos:
                return True
        return False


