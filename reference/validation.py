"""Input checks shared by the reference: every error names the argument and the problem."""

from __future__ import annotations

import numpy as np

# Rows are accepted as normalised when |Σ − 1| ≤ this; loose enough for probabilities that
# passed through float32 (engine outputs), tight enough to catch a forgotten normalisation.
NORMALISATION_ATOL = 1e-5


def check_probability_vector(p: np.ndarray, name: str, axis: int = -1) -> np.ndarray:
    """Check that ``p`` holds probability vectors along ``axis``.

    Args:
        p: float array [..., V].
        name: argument name used in error messages.
    Returns:
        ``p`` as float64.
    Raises:
        ValueError: on NaN/inf, negative entries, or sums away from 1 by more than
            NORMALISATION_ATOL.
    """
    p = np.asarray(p, dtype=np.float64)
    if p.size == 0 or p.shape[axis] == 0:
        raise ValueError(f"{name}: empty probability vector (shape {p.shape})")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    if np.any(p < 0):
        raise ValueError(f"{name}: contains negative probabilities (min {p.min():.3g})")
    sums = p.sum(axis=axis)
    bad = np.abs(sums - 1.0) > NORMALISATION_ATOL
    if np.any(bad):
        if np.ndim(sums) == 0:  # one vector: no row index to show
            raise ValueError(f"{name}: probabilities are not normalised (they sum to {float(sums):.6g})")
        where = np.argwhere(bad)[0]
        raise ValueError(
            f"{name}: probabilities are not normalised "
            f"(row {tuple(int(i) for i in where)} sums to {sums[tuple(where)]:.6g})"
        )
    return p


def check_positive_int(value: int, name: str) -> int:
    """``value`` as an int, if it is an integer ≥ 1 (K, L, token counts).

    Accepts Python and numpy integers and integral finite floats (2.0); refuses bools, None,
    strings, NaN, infinities and fractions.
    Raises:
        ValueError: naming ``name`` and the value, for anything else (never a raw TypeError,
            OverflowError or int()'s own message).
    """
    out = None
    if isinstance(value, (bool, np.bool_, np.timedelta64)):
        pass
    elif isinstance(value, (int, np.integer)):
        out = int.__index__(value) if isinstance(value, int) else int(value)  # not a subclass's __int__
    elif isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        out = int(float(value))
    if out is None or out < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return out


def check_iteration_inputs(
    draft_tokens: np.ndarray, draft_probs: np.ndarray, target_probs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate one iteration's inputs against the verifier contract of docs/design.md §2.

    Args:
        draft_tokens: int [K, L], token ids of the K draft blocks.
        draft_probs: float [K, L, V], draft_probs[k, i] = p(· | c, X^(k)_≤i) (0-based i).
        target_probs: float [K, L+1, V], target_probs[k, i] = q(· | c, X^(k)_≤i); row L is the
            bonus row.
    Returns:
        (draft_tokens int64, draft_probs float64, target_probs float64).
    Raises:
        ValueError: K < 1 or L < 1, shape or vocabulary mismatch, non-integer or out-of-range
            token ids, a draft token with draft probability 0, NaN / negative / unnormalised rows.
    """
    tokens = np.asarray(draft_tokens)
    if tokens.ndim != 2:
        raise ValueError(f"draft_tokens must have shape [K, L], got shape {tokens.shape}")
    K, L = tokens.shape
    if K < 1:
        raise ValueError(f"draft_tokens: K must be >= 1, got K = {K}")
    if L < 1:
        raise ValueError(f"draft_tokens: L must be >= 1, got L = {L}")
    if not np.issubdtype(tokens.dtype, np.integer):
        if np.issubdtype(tokens.dtype, np.floating) and np.all(np.isfinite(tokens)) and np.all(tokens == np.round(tokens)):
            tokens = tokens.astype(np.int64)
        else:
            raise ValueError(f"draft_tokens must hold integer token ids, got dtype {tokens.dtype}")
    tokens = tokens.astype(np.int64)
    dp = np.asarray(draft_probs)
    tp = np.asarray(target_probs)
    if dp.ndim != 3 or dp.shape[:2] != (K, L):
        raise ValueError(f"draft_probs must have shape [K, L, V] = [{K}, {L}, V], got {dp.shape}")
    if tp.ndim != 3 or tp.shape[:2] != (K, L + 1):
        raise ValueError(
            f"target_probs must have shape [K, L+1, V] = [{K}, {L + 1}, V], got {tp.shape}"
        )
    V = dp.shape[2]
    if tp.shape[2] != V:
        raise ValueError(
            f"vocabulary mismatch: draft_probs has V = {V}, target_probs has V = {tp.shape[2]}"
        )
    if np.any(tokens < 0) or np.any(tokens >= V):
        bad = tokens[(tokens < 0) | (tokens >= V)][0]
        raise ValueError(f"draft_tokens: token id {bad} outside [0, V) with V = {V}")
    dp = check_probability_vector(dp, "draft_probs")
    tp = check_probability_vector(tp, "target_probs")
    chosen = np.take_along_axis(dp, tokens[:, :, None], axis=2)[:, :, 0]
    if np.any(chosen <= 0):
        k, i = np.argwhere(chosen <= 0)[0]
        raise ValueError(
            f"draft_tokens[{k}, {i}] = {tokens[k, i]} has draft probability 0: "
            "it cannot have been drawn from draft_probs"
        )
    return tokens, dp, tp


def check_batch_inputs(draft_tokens, draft_probs, target_probs) -> None:
    """``check_iteration_inputs`` for a batch of the batched contract (reference/contract.py),
    vectorised: the refusals a verifier owes its caller (reference/contract.py, "Inputs a
    verifier refuses") in one call.

    Args:
        draft_tokens: int [B, K, L].  draft_probs: float [B, K, L, V].  target_probs: float
            [B, K, L+1, V].
    Raises:
        ValueError: naming the argument: shapes that do not match, non-integer token ids or ids
            outside [0, V), a NaN or infinite entry, a negative entry, a row whose sum is off 1
            by more than ``NORMALISATION_ATOL``, a drafted token of draft probability 0.
    """
    tokens, dp, tp = np.asarray(draft_tokens), np.asarray(draft_probs), np.asarray(target_probs)
    if tokens.ndim != 3 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"draft_tokens must be integers of shape [B, K, L], got {tokens.dtype} {list(tokens.shape)}")
    B, K, L = tokens.shape
    if dp.ndim != 4 or dp.shape[:3] != (B, K, L) or tp.shape != (B, K, L + 1, dp.shape[-1]):
        raise ValueError(f"draft_probs {list(dp.shape)} and target_probs {list(tp.shape)} do not match draft_tokens "
                         f"[B, K, L] = {[B, K, L]} (need [B, K, L, V] and [B, K, L+1, V])")
    V = dp.shape[-1]
    if ((tokens < 0) | (tokens >= V)).any():
        raise ValueError(f"draft_tokens: a token id outside [0, V) with V = {V}")
    for name, rows in (("draft_probs", dp), ("target_probs", tp)):
        if not np.isfinite(rows).all():
            raise ValueError(f"{name}: contains NaN or infinite values")
        if (rows < 0).any():
            raise ValueError(f"{name}: contains negative probabilities")
        sums = rows.sum(axis=-1)
        if (np.abs(sums - 1.0) > NORMALISATION_ATOL).any():
            where = tuple(int(i) for i in np.argwhere(np.abs(sums - 1.0) > NORMALISATION_ATOL)[0])
            raise ValueError(f"{name}: probabilities are not normalised (row {where} sums to {sums[where]:.6g})")
    chosen = np.take_along_axis(dp, tokens[..., None], axis=-1)[..., 0]
    if (chosen <= 0).any():
        b, k, i = (int(x) for x in np.argwhere(chosen <= 0)[0])
        raise ValueError(f"draft_tokens[{b}, {k}, {i}] = {int(tokens[b, k, i])} has draft probability 0: it cannot "
                         "have been drawn from draft_probs")
