"""Verifiers written from scratch from the batched contract (reference/contract.py), as a new user
would write them, for the blind spots of docs/guarantees.md ("What each certification can and
cannot see"): each defective one has a correct twin that differs from it in the defect only.

Numpy, vectorised over the batch; token-level speculative sampling (SD: Leviathan et al. 2023,
Alg. 1; Chen et al. 2023) on draft 0 unless stated, through ``helpers.planted_verifiers.sd``
(accept x_i when u_i < min(1, q(x_i)/p(x_i)); at the first rejection draw from (q − p)_+, after L
acceptances from the bonus row; inverse-CDF draws).  Row b's uniforms come from
``numpy.random.default_rng(seeds[b])`` unless the defect says otherwise.

| verifier | defect | its twin |
|---|---|---|
| ``one_stream_sd`` | every row drawn from ONE generator seeded by seeds[0] (row b's draws depend on its position and its neighbours; each row's law is SD's) | ``sd`` |
| ``neighbour_seed_sd`` | row b draws from seeds[(b + 1) mod B] (a permutation of the seeds: each row's law is SD's) | ``sd`` |
| ``nan_accepting_sd`` | no input check, and the ratio min(1, q/p) by ``numpy.fmin`` (NaN-ignoring): a draft of draft probability NaN is accepted (min(1, q/NaN) = 1) | ``sd`` (refuses non-finite, negative, unnormalised rows and drafts of draft probability 0 with ValueError) |
"""

from __future__ import annotations

import numpy as np

from helpers import planted_verifiers as pv

# |Σ − 1| above this is an unnormalised row (the reference's tolerance, reference/validation.py)
ROW_SUM_ATOL = 1e-5


def check_rows(draft_tokens, draft_probs, target_probs) -> None:
    """The contract's refusals (reference/contract.py, "Inputs a verifier must refuse"): ValueError
    naming the argument for NaN or infinite entries, negative entries, rows whose sum is off 1 by
    more than ``ROW_SUM_ATOL``, and a drafted token of draft probability 0."""
    for name, rows in (("draft_probs", draft_probs), ("target_probs", target_probs)):
        rows = np.asarray(rows, dtype=np.float64)
        if not np.isfinite(rows).all():
            raise ValueError(f"{name}: contains NaN or infinite values")
        if (rows < 0).any():
            raise ValueError(f"{name}: contains negative probabilities")
        if (np.abs(rows.sum(-1) - 1.0) > ROW_SUM_ATOL).any():
            raise ValueError(f"{name}: a row does not sum to 1")
    p_x = np.take_along_axis(np.asarray(draft_probs), np.asarray(draft_tokens)[..., None], -1)[..., 0]
    if (p_x <= 0).any():
        raise ValueError("draft_tokens: a drafted token has draft probability 0")


def sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Correct SD (module doc), inputs checked as the contract says."""
    check_rows(draft_tokens, draft_probs, target_probs)
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds)


def one_stream_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose B rows draw their uniforms, row after row, from one generator seeded by
    seeds[0]: the same batch with the same seeds replays, fresh seeds change it, every row's law
    is SD's — but row b's output depends on its position and on the batch."""
    check_rows(draft_tokens, draft_probs, target_probs)
    B, _, L = np.shape(draft_tokens)
    u = np.random.default_rng(int(seeds[0]) % 2**64).random((B, L + 1))
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds, uniform=u)


def neighbour_seed_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose row b draws from its neighbour's seed seeds[(b + 1) mod B] (an off-by-one
    index into the seeds)."""
    check_rows(draft_tokens, draft_probs, target_probs)
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=np.roll(np.asarray(seeds), -1))


def nan_accepting_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD with no input check whose acceptance ratio is ``numpy.fmin(1, q/p)``: fmin ignores NaN,
    so a draft token whose draft (or target) probability is NaN is accepted with probability 1.
    On valid rows it is ``sd``."""
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds,
                 ratio=lambda q_x, p_x: np.fmin(1.0, q_x / p_x))
