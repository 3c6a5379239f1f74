"""Closed-form bounds and acceptance values for one speculative-decoding iteration.

Every function here takes block laws as dense float64 arrays: ``p_block`` and ``q_block`` of
shape (V,)*L hold the joint law of a draft block and of a target block given the same
context (entry [z_1, …, z_L] is p(z) resp. q(z), docs/rules.md §1).  Sub-block laws p(z), |z| = i,
are the prefix marginals of the block laws.

Sources: docs/rules.md §2.4 (GBV), §2.6 (K-SEQ-GBV); docs/bounds.md §1–§2
(B(K, L), α*); Lin et al., SpecTr-GBV,
arXiv 2604.25925 (B); Hu et al., ICLR 2025, arXiv 2502.18779 (α*).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.kseq import rho_star
from spectr_gbv.reference.validation import check_positive_int, check_probability_vector

__all__ = [
    "check_block",
    "check_block_pair",
    "prefix_marginals",
    "bound_B",
    "expected_tau_gbv",
    "expected_tau_kseq_gbv",
    "alpha_star",
    "alpha_star_brute_force",
]


def check_block(block: np.ndarray, name: str) -> np.ndarray:
    """Validate one block law and return it as float64, renormalised to sum exactly 1.

    Args:
        block: array of shape (V,)*L, L ≥ 1, V ≥ 1: a joint law of L tokens.
        name: argument name used in error messages.
    Returns:
        float64 array of the same shape.  The renormalisation only removes rounding
        (inputs further than reference.validation.NORMALISATION_ATOL = 1e-5 from sum 1 are
        rejected), so that the marginal equalities of the programs are consistent.
    Raises:
        ValueError: (naming ``name``) if the array is 0-d or empty, its axes differ in length,
            or it contains NaN/inf, negative entries, or does not sum to 1.
    """
    arr = np.asarray(block)
    if arr.ndim < 1:
        raise ValueError(f"{name}: a block law needs shape (V,)*L with L >= 1, got a scalar")
    if arr.size == 0:
        raise ValueError(f"{name}: empty block law (shape {arr.shape})")
    if len(set(arr.shape)) != 1:
        raise ValueError(f"{name}: a block law needs shape (V,)*L (all axes equal), got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name}: expected real probabilities, got dtype {arr.dtype}")
    flat = check_probability_vector(arr.astype(np.float64).ravel(), name)
    return (flat / flat.sum()).reshape(arr.shape)


def check_block_pair(p_block: np.ndarray, q_block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate a (draft, target) pair of block laws of the same shape (V,)*L.

    Returns:
        (p_block, q_block) as float64, each renormalised (see ``check_block``).
    Raises:
        ValueError: naming ``p_block`` or ``q_block`` for an invalid law, or both on a
            shape mismatch.
    """
    p = check_block(p_block, "p_block")
    q = check_block(q_block, "q_block")
    if p.shape != q.shape:
        raise ValueError(f"p_block and q_block must have the same shape, got {p.shape} and {q.shape}")
    return p, q


def check_K(K: int) -> int:
    """``K`` as an int ≥ 1; ValueError naming K otherwise."""
    try:
        return check_positive_int(K, "K")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"K must be an integer >= 1, got {K!r}") from exc


def prefix_marginals(block: np.ndarray) -> list[np.ndarray]:
    """Laws of the prefixes of a block.

    Args:
        block: float array of shape (V,)*L, a block law (validated, see ``check_block``).
    Returns:
        list of L float64 arrays; entry i-1 has shape (V,)*i and holds P(z_1..z_i), the law of
        the first i tokens (the last entry is the block law itself).
    Raises:
        ValueError: on an invalid block law (the message names ``block``).
    """
    law = check_block(block, "block")
    L = law.ndim
    return [law.sum(axis=tuple(range(i, L))) if i < L else law for i in range(1, L + 1)]


def _min_ratio(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """m(z) = min(1, p(z)/q(z)), 1 where q(z) = 0 (docs/rules.md §1); no division by zero."""
    safe_q = np.where(q > 0, q, 1.0)
    return np.where(q > 0, np.minimum(1.0, p / safe_q), 1.0)


def bound_B(p_block: np.ndarray, q_block: np.ndarray, K: int) -> float:
    """B(K, L) = Σ_{i≤L} Σ_{|z|=i} q(z)·[1 − (1 − m(z))^K]   (docs/bounds.md §1; SpecTr-GBV's bound
    over conditionally independent couplings).

    Args:
        p_block, q_block: float arrays of shape (V,)*L, draft and target block laws.
        K: number of drafts, integer ≥ 1.
    Returns:
        float, in accepted tokens per iteration (0 ≤ B ≤ L).  B(1, L) is the GBV E[τ].
    Raises:
        ValueError: naming the argument, on invalid block laws, a shape mismatch or K < 1.
    """
    K = check_K(K)
    p, q = check_block_pair(p_block, q_block)
    total = 0.0
    for pz, qz in zip(prefix_marginals(p), prefix_marginals(q)):
        total += float(np.sum(qz * (1.0 - (1.0 - _min_ratio(pz, qz)) ** K)))
    return total


def expected_tau_gbv(p_block: np.ndarray, q_block: np.ndarray) -> float:
    """GBV's expected accepted length E[τ] = Σ_{i≤L} Σ_{|z|=i} min(p(z), q(z))  (docs/rules.md §2.4).

    Args:
        p_block, q_block: float arrays of shape (V,)*L.
    Returns:
        float in [0, L], accepted tokens per iteration; equals bound_B(p, q, 1).
    Raises:
        ValueError: on invalid block laws or a shape mismatch.
    """
    p, q = check_block_pair(p_block, q_block)
    return float(sum(np.minimum(pz, qz).sum() for pz, qz in zip(prefix_marginals(p), prefix_marginals(q))))


def expected_tau_kseq_gbv(p_block: np.ndarray, q_block: np.ndarray, K: int) -> float:
    """K-SEQ-GBV's expected accepted length E[τ] = Σ_{i≤L} Σ_{|z|=i} min(ρ*·p(z), q(z))
    (docs/rules.md §2.6), with ρ* = reference.kseq.rho_star(p_1, q_1, K) of K-SEQ on the first
    position's marginals p_1, q_1.

    Args:
        p_block, q_block: float arrays of shape (V,)*L.
        K: number of drafts, integer ≥ 1 (K = 1 gives expected_tau_gbv).
    Returns:
        float in [0, L], accepted tokens per iteration.
    Raises:
        ValueError: naming the argument, on invalid block laws, a shape mismatch or K < 1.
    """
    K = check_K(K)
    p, q = check_block_pair(p_block, q_block)
    pm, qm = prefix_marginals(p), prefix_marginals(q)
    rho = rho_star(pm[0], qm[0], K)
    return float(sum(np.minimum(rho * pz, qz).sum() for pz, qz in zip(pm, qm)))


def _check_position_pair(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p)
    q = np.asarray(q)
    if p.ndim != 1:
        raise ValueError(f"p: expected shape [V], got {p.shape}")
    if q.ndim != 1:
        raise ValueError(f"q: expected shape [V], got {q.shape}")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    return check_probability_vector(p, "p"), check_probability_vector(q, "q")


def alpha_star(p: np.ndarray, q: np.ndarray, K: int) -> float:
    """Optimal acceptance probability of K i.i.d. drafts at ONE position (Hu et al., ICLR 2025,
    arXiv 2502.18779; docs/bounds.md §2):

        α* = max over couplings of (X^1..X^K i.i.d. p, Y ~ q) of P(Y ∈ {X^1..X^K})
           = min_{H ⊆ Ω} [ q(H) + 1 − p(H)^K ].

    The min-cut form: for any H, P(Y ∈ X) ≤ P(Y ∈ H) + P(Y ∉ H, Y ∈ X)
    ≤ q(H) + P(some X^k ∉ H) = q(H) + 1 − p(H)^K; Hu et al. show the bound is attained.

    Computation in O(V log V): sort tokens by p/q decreasing (q = 0 first, p = 0 last) and
    take the minimum over the V + 1 prefixes H_j of that order.  Why prefixes suffice: for a
    fixed (fractional) mass t = p(H), the least q(H) is a fractional knapsack, solved greedily
    in that order, so φ(t) = min q is piecewise linear with breakpoints at the prefix masses;
    on each piece φ(t) − t^K is concave, so its minimum sits at a breakpoint, i.e. at a prefix.
    (Equivalently H^c is a prefix of the tokens sorted by q/p decreasing, the form in which
    docs/bounds.md §2 states it.)  ``alpha_star_brute_force`` checks this over all 2^V subsets.

    Args:
        p: float array [V], draft law at the position.
        q: float array [V], target law at the position.
        K: number of i.i.d. drafts, integer ≥ 1 (K = 1 gives Σ min(p, q)).
    Returns:
        float α* in [0, 1], acceptance probability.
    Raises:
        ValueError: naming the argument, on NaN/negative/unnormalised input, a shape mismatch
            or K < 1.
    """
    K = check_K(K)
    p, q = _check_position_pair(p, q)
    # Sort key p/q decreasing without dividing by zero: q = 0 tokens get +inf (always worth
    # putting in H: they add p-mass for free), p = q = 0 tokens are irrelevant.
    ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    order = np.argsort(-ratio, kind="stable")
    cum_p = np.concatenate([[0.0], np.cumsum(p[order])])
    cum_q = np.concatenate([[0.0], np.cumsum(q[order])])
    # Clip: cumulative sums may exceed 1 by rounding, and p(H)^K must not exceed 1.
    values = cum_q + 1.0 - np.minimum(cum_p, 1.0) ** K
    return float(np.clip(values.min(), 0.0, 1.0))


def alpha_star_brute_force(p: np.ndarray, q: np.ndarray, K: int) -> float:
    """α* = min_{H ⊆ Ω} [ q(H) + 1 − p(H)^K ] by enumerating all 2^V subsets (a check of
    ``alpha_star``; same arguments and errors).  Raises ValueError if V > 20."""
    K = check_K(K)
    p, q = _check_position_pair(p, q)
    V = p.shape[0]
    if V > 20:
        raise ValueError(f"p: brute force over 2^V subsets needs V <= 20, got V = {V}")
    masks = ((np.arange(2**V)[:, None] >> np.arange(V)[None, :]) & 1).astype(np.float64)
    return float(np.clip((masks @ q + 1.0 - np.minimum(masks @ p, 1.0) ** K).min(), 0.0, 1.0))
