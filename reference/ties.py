"""Tie-robust orders: data-dependent choices that do not flip when rows are rounded.

A rule that orders tokens or children by a computed value (MDBV: tokens by q/p, children by
their efficiency loss, candidates by their total acceptance) has a law that jumps when two
values are exactly tied and rounding decides which comes first: the same rows rounded to
float32 (≤ 6e-8 relative) once moved MDBV's law by TV 0.12.  Any order keeps these rules
lossless (their proofs hold for every order chosen from the rows), so the order only has to be
reproducible: values within the tolerance below are treated as equal and ordered by a
canonical key (token ids), identically in the numpy reference and the torch port.

Tolerance: two values a, b are tied when |a − b| ≤ ATOL + RTOL·max(|a|, |b|).  RTOL = 1e-6 is
about 16 float32 ulps, well above the rounding of float32 rows and of their float64
renormalisation (≤ 1e-7 relative), and far below any difference that changes an acceptance
rate visibly; ATOL covers values that are differences of nearly equal quantities (an
efficiency loss of ~0 computed as T(b₁) − T(b₂)).  Values that differ by about the tolerance
itself can still flip under rounding; the tests perturb rows by 1e-12 relative and require
the exact law to move by ≤ 1e-9 in total variation.
"""

from __future__ import annotations

import numpy as np

RTOL = 1e-6
ATOL = 1e-9


def tied(a: float, b: float, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Whether ``a`` and ``b`` are equal up to the tie tolerance (module doc).

    Args:
        a, b: finite floats.
        rtol, atol: relative and absolute tolerance (defaults: RTOL, ATOL).
    Returns:
        bool.
    """
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def better(a: float, b: float, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Whether ``a`` exceeds ``b`` by more than the tie tolerance (``a`` strictly better)."""
    return a > b and not tied(a, b, rtol, atol)


def descending_order(values, keys, rtol: float = RTOL, atol: float = ATOL) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``values`` from largest to smallest, ties broken by ``keys`` ascending.

    The values are sorted decreasing; neighbours within the tolerance of each other are chained
    into one tie group, ordered inside by ``keys``.  Vectorised (one sort, one cumulative sum,
    one lexsort): the torch port orders V = 151,936 ratios per node with it.

    Args:
        values: float array [n] (finite).
        keys: int array [n], distinct canonical keys (token ids).
        rtol, atol: tie tolerance (module doc).
    Returns:
        (order, snapped): int64 [n], a permutation of 0..n−1; float64 [n], ``values[order]``
        with every tie group set to its largest value, so that ``snapped`` is non-increasing
        (a bisection over it finds the same boundary in every implementation).
    Raises:
        ValueError: if ``values`` and ``keys`` are not 1-D of one length.
    """
    values = np.asarray(values, dtype=np.float64)
    keys = np.asarray(keys)
    if values.shape != keys.shape or values.ndim != 1:
        raise ValueError(f"values and keys must be 1-D of one length, got {values.shape} and {keys.shape}")
    if values.size == 0:
        return np.zeros(0, dtype=np.int64), values
    # lexsort's last key is the primary one: value decreasing, then key increasing
    rough = np.lexsort((keys, -values))
    v = values[rough]
    gap = v[:-1] - v[1:]
    tie = gap <= atol + rtol * np.maximum(np.abs(v[:-1]), np.abs(v[1:]))
    group = np.concatenate([[0], np.cumsum(~tie)]).astype(np.int64)
    order = rough[np.lexsort((keys[rough], group))]
    # groups are contiguous in both orders; the first member of each in ``v`` is its largest
    first = np.flatnonzero(np.concatenate([[True], ~tie]))
    snapped = v[first][group]
    return order, snapped
