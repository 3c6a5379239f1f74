"""K-SEQ acceptance scale ρ* of SpecTr (Sun et al., NeurIPS 2023, arXiv 2310.15141, Algorithm 3).

One position, k i.i.d. candidates drawn from the draft ``p``, target ``q``:
candidate j is accepted with probability ``min(1, q(x_j) / (ρ·p(x_j)))`` and, when none is
accepted, the residual is ``(q − ρ·p)_+``.  The rule is lossless exactly when ρ solves

    1 − (1 − β(ρ))^k = ρ · β(ρ),          β(ρ) = Σ_x min(p(x), q(x)/ρ)        (docs/rules.md §2.2)

which has a root in [1, k].  Shared by every rule that runs K-SEQ (spectr, kseq_gbv, kseq_bv).
"""

from __future__ import annotations

import numpy as np

# 200 halvings of [1, k] reach the float64 spacing near ρ*; the loop exits earlier when the
# bracket stops shrinking.
_MAX_BISECTION_STEPS = 200


def beta(p: np.ndarray, q: np.ndarray, rho: float) -> float:
    """β(ρ) = Σ_x min(p(x), q(x)/ρ)  (SpecTr, Sun et al. 2023, §4).

    Args:
        p, q: float64 arrays of shape [V], probability vectors (not checked here).
        rho: scale ≥ 1.
    Returns:
        float in [0, 1].
    """
    return float(np.minimum(p, q / rho).sum())


def rho_star(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """ρ* of K-SEQ (see ``_rho_star``); memoised on the exact bytes of p and q."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    key = (p.tobytes(), q.tobytes(), int(k))
    hit = _RHO_CACHE.get(key)
    if hit is None:
        if len(_RHO_CACHE) > 100_000:
            _RHO_CACHE.clear()
        hit = _RHO_CACHE[key] = _rho_star(p, q, int(k))
    return hit


_RHO_CACHE: dict = {}


def _rho_star(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """ρ* of K-SEQ for one position with ``k`` i.i.d. candidates, by bisection on [1, k].

    The returned value sits on the valid side ``1 − (1 − β(ρ))^k ≤ ρ·β(ρ)`` (so every
    acceptance weight stays below the target mass) within float64 resolution of the root.

    Args:
        p: float64 [V], draft probabilities of the position (non-negative, sums to 1).
        q: float64 [V], target probabilities of the position.
        k: number of candidates, int ≥ 1.  k = 1 gives ρ* = 1 (token verification).
    Returns:
        float ρ* in [1, k].  When p and q have disjoint supports (β ≡ 0) any ρ is a root and 1
        is returned.
    Raises:
        ValueError: if k < 1 or the shapes of p and q differ.
    Source: SpecTr (Sun et al., 2023), K-SEQ, the equation 1 − (1 − β)^k = ρβ; docs/rules.md §2.2.
    """
    if k == 1:
        return 1.0

    def valid(rho: float) -> bool:
        b = beta(p, q, rho)
        if b < 0.5:
            # 1 − (1 − β)^k without cancellation when β is tiny (nearly disjoint supports)
            return -np.expm1(k * np.log1p(-b)) <= rho * b
        # β ≥ 1/2: the same inequality as E ≤ D^k, E = Σ(q − ρp)_+ = 1 − ρβ (the residual mass),
        # D = Σ(p − q/ρ)_+ = 1 − β, formed from positive parts: when p ≈ q, 1 − ρβ computed
        # from β carries ~1e-16 of rounding against D^k ~ 1e-24, which moved ρ* by ~2e-9 (and
        # the law by ~4e-9) under 1e-12 relative changes of the rows
        E = float(np.maximum(q - rho * p, 0.0).sum())
        D = float(np.maximum(p - q / rho, 0.0).sum())
        return E <= D**k

    if valid(1.0):
        return 1.0
    return smallest_valid(valid, 1.0, float(k))


def smallest_valid(valid, lo: float, hi: float) -> float:
    """Bisection for the smallest x in [lo, hi] with ``valid(x)`` (valid monotone, valid(hi)
    true): the upper end after ≤ 200 halvings or when the interval stops shrinking in float64."""
    for _ in range(_MAX_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if valid(mid):
            hi = mid
        else:
            lo = mid
    return hi
