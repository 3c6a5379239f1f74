"""transformers' assisted-generation verifier behind the batched contract.

``transformers.generation.utils._speculative_sampling`` is the verifier that
``model.generate(..., assistant_model=...)`` runs at T > 0: token-level speculative sampling
(Leviathan et al. 2023, Alg. 1; this project's rule "sd"), or, with
``assistant_ensemble_weight`` w ∈ (0, 1), the relaxed acceptance v = w·q + (1 − w)·p
(lossy by design).  It takes logits for one sequence and draws from torch's global generator,
so this adapter calls it once per batch row with the global generator seeded from seeds[b]
(``reference.seeds.generator_seed``; tensors on the CPU) and logits log p, log q of the rows.

Its coin is ``u <= ratio`` with u = torch.rand in [0, 1): at u = 0 a drafted token of target
probability 0 is accepted.  ``uniform`` lets a probe force u (``force_uniform``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from spectr_gbv.reference.contract import BatchVerdict, to_numpy
from spectr_gbv.reference.seeds import generator_seed


class TransformersSpeculativeSampling:
    """``_speculative_sampling`` of the installed transformers with the batched contract (K = 1).

    Args:
        assistant_ensemble_weight: None (the default, lossless) or w ∈ (0, 1) (lossy).
    Raises:
        ValueError: w outside (0, 1); at call time K ≠ 1 or malformed shapes (naming the argument).
    """

    def __init__(self, assistant_ensemble_weight: float | None = None):
        w = assistant_ensemble_weight
        if w is not None and not 0.0 < float(w) < 1.0:
            raise ValueError(f"assistant_ensemble_weight must be None or in (0, 1), got {w!r}")
        self.assistant_ensemble_weight = w
        self.forced_uniform: float | None = None

    @contextlib.contextmanager
    def force_uniform(self, u: float):
        """Every acceptance coin sees the uniform ``u`` inside the block (boundary probes)."""
        original = torch.rand_like
        self.forced_uniform = u
        torch.rand_like = lambda x, *a, **k: torch.full_like(x, u)  # noqa: E731
        try:
            yield self
        finally:
            torch.rand_like = original
            self.forced_uniform = None

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None) -> BatchVerdict:
        from transformers.generation.utils import _speculative_sampling

        tokens = torch.tensor(to_numpy(draft_tokens), dtype=torch.int64)
        dp = torch.tensor(np.asarray(to_numpy(draft_probs), dtype=np.float32))
        tp = torch.tensor(np.asarray(to_numpy(target_probs), dtype=np.float32))
        if tokens.dim() != 3 or tokens.shape[1] != 1:
            raise ValueError(f"draft_tokens must have shape [B, 1, L] (token-level SD is single-draft), "
                             f"got {list(tokens.shape)}")
        B, _, L = tokens.shape
        if seeds is None:
            seeds = np.random.default_rng().integers(0, 2**62, size=B)
        seeds = to_numpy(seeds)
        # log of the rows as logits: softmax gives the rows back (−inf where 0)
        log_dp, log_tp = torch.log(dp), torch.log(tp)
        tau = np.zeros(B, dtype=np.int64)
        out = np.full((B, L + 1), -1, dtype=np.int64)
        state = torch.random.get_rng_state()
        try:
            for b in range(B):
                # the CPU generator only: torch.manual_seed also queues lazy CUDA seeding, which
                # records a stack trace per call (ms each)
                torch.default_generator.manual_seed(generator_seed(int(seeds[b])))
                valid, n = _speculative_sampling(tokens[b], log_dp[b], L, log_tp[b],
                                                 self.assistant_ensemble_weight)
                n = int(n)
                tau[b] = n
                out[b, : n + 1] = valid[0, : n + 1].numpy()
        finally:
            torch.random.set_rng_state(state)
        return BatchVerdict(tau, np.where(tau > 0, 0, -1), out, tau + 1)
