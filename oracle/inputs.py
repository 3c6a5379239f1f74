"""Validation of the inputs every test in :mod:`spectr_gbv.oracle` takes: exact laws, counts, levels.

- :func:`as_law` — a validated copy ``{outcome: float}`` of an exact law (a mapping or a 1-D
  array), non-negative, finite, summing to 1 within :data:`LAW_SUM_ATOL`.
- :func:`as_counts` — a validated copy ``{outcome: int}`` of sample counts.
- :func:`check_alpha` — a level (false-alarm rate, or a requested power) in the open interval (0, 1).

Each raises ``ValueError`` naming the argument and the problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

__all__ = ["LAW_SUM_ATOL", "as_counts", "as_law", "check_alpha"]

# Exact laws come from enumeration and sum to 1 within ~1e-12; the slack admits laws that
# were pushed forward or conditioned (a few more roundings) while still rejecting laws that
# are wrong.  It stays far below scipy's 1e-8 relative check that observed and expected
# totals agree in power_divergence.
LAW_SUM_ATOL = 1e-9


def check_alpha(alpha: float, name: str = "alpha") -> float:
    """``float(alpha)`` if it lies in the open interval (0, 1); ``ValueError`` naming ``name`` otherwise."""
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in the open interval (0, 1), got {alpha!r}") from None
    if not (0.0 < a < 1.0):
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {alpha!r}")
    return a


def as_law(law, name: str = "law") -> dict:
    """A validated copy ``{outcome: float}`` of ``law``; a 1-D array becomes ``{index: prob}``.

    Raises ``ValueError`` (naming ``name``) for an empty law, a negative or non-finite
    probability, or a total farther than :data:`LAW_SUM_ATOL` from 1.
    """
    if isinstance(law, Mapping):
        items = list(law.items())
    else:
        arr = np.asarray(law, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be a mapping or a 1-D array, got shape {arr.shape}")
        items = list(enumerate(arr.tolist()))
    if not items:
        raise ValueError(f"{name} is empty")
    out = {}
    for k, v in items:
        fv = float(v)
        if not math.isfinite(fv) or fv < 0.0:
            raise ValueError(f"{name} has a negative or non-finite probability {v!r} at {k!r}")
        out[k] = fv
    total = math.fsum(out.values())
    if abs(total - 1.0) > LAW_SUM_ATOL:
        raise ValueError(f"{name} must sum to 1 (within {LAW_SUM_ATOL:g}), sums to {total!r}")
    return out


def as_counts(counts, name: str = "counts") -> dict:
    """A validated copy ``{outcome: int}`` of ``counts``; a 1-D array becomes ``{index: count}``.

    Raises ``ValueError`` (naming ``name``) for a non-integer or negative count.
    """
    if isinstance(counts, Mapping):
        items = list(counts.items())
    else:
        arr = np.asarray(counts)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be a mapping or a 1-D array, got shape {arr.shape}")
        items = list(enumerate(arr.tolist()))
    out = {}
    for k, v in items:
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must hold integers, got {v!r} at {k!r}") from None
        if not math.isfinite(fv) or fv != math.floor(fv):
            raise ValueError(f"{name} must hold integers, got {v!r} at {k!r}")
        if fv < 0:
            raise ValueError(f"{name} must be non-negative, got {v!r} at {k!r}")
        out[k] = int(fv)
    return out
