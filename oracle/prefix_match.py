"""The prefix-match ceiling: what any lossless K-draft rule can accept, computable on real models.

A lossless rule emits, from a context c, tokens whose law is the target's q(· | c).  It accepts
τ ≥ i draft tokens only if its first i emitted tokens z equal the first i tokens of one of its
K i.i.d. draft blocks, an event of probability at most P(z drafted) = 1 − (1 − p(z))^K.  So for
every coupling of the drafts with the output (docs/bounds.md §6)

    P(τ ≥ i) ≤ u_i = Σ_{|z| = i} min(q(z), 1 − (1 − p(z))^K),      E[τ] ≤ U(K, L) = Σ_{i ≤ L} u_i.

Proved for the first iteration of every lossless rule and every iteration of a rule that leaves
later targets untouched.  At a later iteration of a rule that modifies later targets the
emitted law given the context need not be q, and the bound can fail there (docs/bounds.md §6
has a GBV counterexample).  It is above the
global block OT of docs/bounds.md §4.3 (the exact ceiling, which needs V^(K·L) variables) and
equal to it at K = 1, where U(1, L) = B(1, L) is greedy block verification's one-iteration
E[τ] (GBV modifies later targets; block verification, the best rule that does not, accepts
less: Sun et al., Block Verification, ICLR 2025, Theorem 2).  Unlike the OT, u_i is an expectation under the
target, u_i = E_{z ~ q}[min(1, (1 − (1 − p(z))^K) / q(z))], so a text sampled from the target
with both models' probabilities of its tokens gives an unbiased estimate at every position
(``prefix_match_bound_estimate``): no enumeration of V^i prefixes.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from spectr_gbv.oracle.bounds import check_block_pair, prefix_marginals

__all__ = ["prefix_match_bound", "prefix_match_bound_estimate", "drafted_probability"]

# Above this a count can no longer be a float exactly; no draft count or block length gets near.
MAX_COUNT = 2**53


def _check_count(value, name: str) -> int:
    """An integer in [1, MAX_COUNT] (K, L, segment lengths), else a ValueError naming ``name``."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not ok and isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        value, ok = int(value), True
    if not ok or not 1 <= int(value) <= MAX_COUNT:
        raise ValueError(f"{name} must be an integer in [1, 2**53], got {value!r}")
    return int(value)


def drafted_probability(p, K: int) -> np.ndarray:
    """1 − (1 − p)^K, the probability that a prefix of draft probability p is among K i.i.d.
    drafts, computed as −expm1(K·log1p(−p)) so that p ≈ 1e-12 keeps its digits.

    Args:
        p: float array (or scalar) of probabilities in [0, 1].
        K: number of drafts, integer in [1, 2**53].
    Returns:
        float64 array of p's shape, in [0, 1].
    Raises:
        ValueError: naming the argument: p not real, NaN/inf or outside [0, 1]; K not such an
            integer.
    """
    K = _check_count(K, "K")
    p = np.asarray(p)
    if not (np.issubdtype(p.dtype, np.floating) or np.issubdtype(p.dtype, np.integer)) or p.dtype == bool:
        raise ValueError(f"p: expected real probabilities, got dtype {p.dtype}")
    p = p.astype(np.float64)
    if not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError("p: probabilities must be finite and lie in [0, 1]")
    return _drafted(p, K)


def _drafted(p: np.ndarray, K: int) -> np.ndarray:
    with np.errstate(divide="ignore"):  # p = 1: log1p(−1) = −inf, and −expm1(−inf) = 1 exactly
        return -np.expm1(K * np.log1p(-p))


def prefix_match_bound(p_block: np.ndarray, q_block: np.ndarray, K: int) -> np.ndarray:
    """Per-depth prefix-match ceiling u_i = Σ_{|z| = i} min(q(z), 1 − (1 − p(z))^K), i = 1..L
    (docs/bounds.md §6): P(τ ≥ i) ≤ u_i for an iteration of a lossless rule with K i.i.d.
    drafts that starts from the context of these block laws (the first iteration of any lossless
    rule; any iteration of one that leaves later targets untouched; not proved, and false in
    general, for later iterations of a rule that modifies later targets).

    Args:
        p_block, q_block: float arrays of shape (V,)*L, draft and target block laws given the
            same context (docs/bounds.md).
        K: number of drafts, integer ≥ 1.
    Returns:
        float64 [L]; ``u.sum()`` = U(K, L) bounds E[τ] (accepted tokens per iteration), and
        1 + U bounds the block efficiency.  U(1, L) = B(1, L) = GBV's E[τ].
    Raises:
        ValueError: naming the argument, on invalid block laws, a shape mismatch or K not an
            integer in [1, 2**53].
    """
    K = _check_count(K, "K")
    p, q = check_block_pair(p_block, q_block)
    return np.array([float(np.minimum(qz, _drafted(pz, K)).sum())
                     for pz, qz in zip(prefix_marginals(p), prefix_marginals(q))])


def _check_token_probs(a, name: str, positive: bool) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-d array of token probabilities, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name}: expected real probabilities, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or inf")
    if np.any(arr < 0) or np.any(arr > 1):
        raise ValueError(f"{name}: probabilities must lie in [0, 1], got range [{arr.min()}, {arr.max()}]")
    if positive and np.any(arr == 0):
        raise ValueError(f"{name}: a token of target probability 0 at position {int(np.argmin(arr))}: "
                         "the text must be a sample of the target")
    return arr


def prefix_match_bound_estimate(q_token, p_token, segments, K: int, L: int) -> np.ndarray:
    """Unbiased per-window estimates of the prefix-match ceiling on a text sampled from the target.

    For a window starting at position s of a text x drawn from the target (each x_t ~ q(· | x_<t)),
    and depth i ≤ L, with Q = Π_{j < i} q(x_{s+j} | x_<s+j) and P the same product of the
    draft's probabilities,

        min(1, (1 − (1 − P)^K) / Q)

    has expectation u_i at the context x_<s (docs/bounds.md §6).  Averaging over windows
    averages the ceiling over the contexts the text visits; the mean over windows of
    ``1 + row.sum()`` estimates the ceiling of tokens per target call.

    Args:
        q_token: float [T], the target's (processed, e.g. tempered) probability of each token of
            the text given the text before it; > 0, since the text is sampled from it.
        p_token: float [T], the draft's probability of the same tokens, in [0, 1].
        segments: ints ≥ 1, lengths of the texts concatenated in q_token (windows stay inside
            one).
        K: number of drafts, integer in [1, 2**53].
        L: block length, integer in [1, 2**53]; windows start at s with s + L ≤ the segment's
            length.
    Returns:
        float64 [W, L], W windows in order of segment and start; entry [w, i − 1] estimates
        P(τ ≥ i) ≤ u_i at window w's context.  Values are in [0, 1] (one window's values need
        not decrease with i; their expectations do); computed in logs, so products that
        underflow a float64 keep their ratio.
    Raises:
        ValueError: naming the argument: non-1-d, NaN/inf or out-of-[0, 1] probabilities, a zero
            target probability, q_token/p_token of different lengths, segments that are not
            positive integers or do not sum to T, K or L not an integer in [1, 2**53], or L
            longer than every segment.
    """
    K = _check_count(K, "K")
    L = _check_count(L, "L")
    q = _check_token_probs(q_token, "q_token", positive=True)
    p = _check_token_probs(p_token, "p_token", positive=False)
    if q.shape != p.shape:
        raise ValueError(f"p_token: length {p.size} differs from q_token's {q.size}")
    if isinstance(segments, (str, bytes, dict)) or not hasattr(segments, "__iter__"):
        raise ValueError(f"segments: expected a sequence of text lengths, got {segments!r}")
    segments = list(segments)
    for length in segments:
        if isinstance(length, (bool, np.bool_)) or not isinstance(length, (int, np.integer)) or length < 1:
            raise ValueError(f"segments: lengths must be integers >= 1, got {segments!r}")
    if sum(int(x) for x in segments) != q.size:
        raise ValueError(f"segments: {segments} must sum to T = {q.size}")
    if all(int(x) < L for x in segments):
        raise ValueError(f"L = {L} exceeds every text's length (segments {segments}): no window")
    log_q, log_p = np.log(q), _log0(p)
    out, start = [], 0
    for length in map(int, segments):
        if length >= L:
            # in logs, so that products of many small probabilities neither underflow to 0/0
            # nor lose the draft's side: log r = log(1 − (1 − P)^K), ≈ log K + log P below e^-700
            lq = np.cumsum(sliding_window_view(log_q[start:start + length], L), axis=1)
            lp = np.cumsum(sliding_window_view(log_p[start:start + length], L), axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                big = lp > -700.0
                log_r = np.where(big, _log0(_drafted(np.exp(np.where(big, lp, 0.0)), K)), np.log(K) + lp)
            out.append(np.exp(np.minimum(0.0, log_r - lq)))
        start += length
    return np.concatenate(out, axis=0)


def _log0(a: np.ndarray) -> np.ndarray:
    """log with log 0 = −inf, without the warning."""
    with np.errstate(divide="ignore"):
        return np.log(a)
