"""The cells a G-test compares, and the scale of its null: law-based pooling and calibration.

- :func:`pool_cells` — which cells of an exact law the G-test (oracle/gtest.py) compares alone,
  which it pools, and which are too rare to pool (tested apart by a binomial tail); decided
  from the law and n only, never from the counts.
- :func:`gtest_null_mean_scale`, :func:`gtest_null_mean_ratio` — the exact null mean of the G
  statistic on those cells and the calibration scale s that ``gtest`` divides G by.

Both are shared by the test itself (oracle/gtest.py) and by its power before sampling
(oracle/gtest_power.py), so they live below both.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special

__all__ = ["CALIBRATION_FACTOR", "gtest_null_mean_ratio", "gtest_null_mean_scale", "pool_cells"]


def pool_cells(probs: np.ndarray, n: int, min_expected: float) -> tuple[list[list[int]], list[int]]:
    """Groups of cell indices such that each group has n·p ≥ min_expected, and the rare rest.

    Scheme (depends on the law and n only, never on the counts, so the null distribution
    is untouched): cells with n·p ≥ min_expected stay alone; the others are sorted by
    probability (ties in law order) and pooled greedily, smallest first, closing a group
    as soon as its expected count reaches min_expected.  A final group that stays below is
    joined to the last closed pooled group; if none closed it is returned apart as the *rare*
    cells (n·Σp < min_expected), which ``gtest`` tests on their own (an exact binomial tail)
    instead of hiding them inside a large cell, where mass moved between the large cell and
    the rare ones would be invisible.  If there is no other group (n·Σp < min_expected for the
    whole law) every cell ends up in one group.  Each cell lands in exactly one place: no mass
    is dropped.

    Returns:
        (groups, rare): lists of cell indices; ``rare`` may be empty.
    """
    expected = n * probs
    large = [i for i in range(len(probs)) if expected[i] >= min_expected]
    small = sorted((i for i in range(len(probs)) if expected[i] < min_expected),
                   key=lambda i: probs[i])
    groups: list[list[int]] = [[i] for i in large]
    pooled: list[list[int]] = []
    current: list[int] = []
    acc = 0.0
    for i in small:
        current.append(i)
        acc += expected[i]
        if acc >= min_expected:
            pooled.append(current)
            current, acc = [], 0.0
    rare: list[int] = []
    if current:
        if pooled:
            pooled[-1].extend(current)
        elif groups:
            rare = current
        else:
            pooled.append(current)
    return groups + pooled, rare


# Cells of expected count at least this take the series of E₀[G]'s cell term (its error is
# about 0.3/E³ per cell, < 1e-6 here, measured against the binomial sum); smaller cells are
# summed over their binomial law.
_SERIES_MIN_EXPECTED = 100.0


# gtest divides G by s = 1 + CALIBRATION_FACTOR·(E₀[G]/dof − 1): twice the exact mean excess.
# Once (G·dof/E₀[G], null mean exactly dof) left the null's third cumulant 10-15 % above χ²'s
# and sizes 1.06-1.3× α at α = 10^-2, 10^-3 on the V = 4,096 rows; twice puts the null mean one
# excess below dof and the measured sizes at 0.2-0.4× α there (benchmarks/GTEST_SIZE.md).
CALIBRATION_FACTOR = 2.0


def gtest_null_mean_scale(expected: np.ndarray, n: int) -> float:
    """gtest's calibration scale s = max(1, 1 + CALIBRATION_FACTOR·(E₀[G]/dof − 1)), from the
    exact null mean E₀[G] of the G statistic of ``n`` multinomial counts on cells of expected
    counts ``expected`` (float [cells], Σ = n) (``gtest_null_mean_ratio``).

    G = 2 Σ_i (O_i ln(O_i/E_i) − (O_i − E_i)) (the second sum is 0), and each O_i is
    Binomial(n, p_i) exactly, so E₀[G] is a sum of one-cell expectations: summed over the
    binomial law (±10 sd + 10) for E_i < ``_SERIES_MIN_EXPECTED``, else the series
    (1 − p) + (1 − p²)/(6E) + 1/(6E²) (whose sum over the cells is Williams' correction,
    dof + (Σ 1/p_i − 1)/(6n), plus the next term).  With many cells of small expected count
    the χ² approximation of G is anti-conservative, its mean exceeding dof by (Σ 1/E_i)/6 and
    more (benchmarks/GTEST_SIZE.md: +31 at dof 2,778 on a V = 4,096 case at N = 10^6, size
    2.8× at α = 10^-2); ``gtest`` compares G/s with χ²_dof, whose null mean is then below dof
    (Williams 1976, Biometrika 63:33-37, with the exact mean for his series; the factor
    ``CALIBRATION_FACTOR`` for the tail, measured).  Never below 1: the test is never made more
    liberal than the plain χ² one.  1 with fewer than two cells.
    """
    return max(1.0, 1.0 + CALIBRATION_FACTOR * (gtest_null_mean_ratio(expected, n) - 1.0))


def gtest_null_mean_ratio(expected: np.ndarray, n: int) -> float:
    """E₀[G] / dof, exactly (``gtest_null_mean_scale``'s doc); 1 with fewer than two cells."""
    e = np.asarray(expected, dtype=np.float64)
    if e.size < 2 or n < 1:
        return 1.0
    return _null_mean_scale_of(e.tobytes(), int(n))


# Cached: a law tested again at the same n (simulations, repeated certifications) costs nothing.
@functools.lru_cache(maxsize=256)
def _null_mean_scale_of(expected_bytes: bytes, n: int) -> float:
    e = np.frombuffer(expected_bytes, dtype=np.float64)
    p = e / e.sum()
    e = n * p
    big = e >= _SERIES_MIN_EXPECTED
    # every term is ≥ 0: numpy's pairwise sums lose nothing that matters here
    total = float(np.sum((1.0 - p[big]) + (1.0 - p[big] ** 2) / (6.0 * e[big]) + 1.0 / (6.0 * e[big] ** 2)))
    if not big.all():
        es, ps = e[~big], p[~big]
        width = 10.0 * np.sqrt(es) + 10.0
        lo = np.maximum(0, np.floor(es - width)).astype(np.int64)
        hi = np.minimum(n, np.ceil(es + width)).astype(np.int64)
        lengths = hi - lo + 1
        cell = np.repeat(np.arange(es.size), lengths)
        o = (lo[cell] + np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
             ).astype(np.float64)
        ec = es[cell]
        with np.errstate(divide="ignore", invalid="ignore"):
            dev = np.where(o > 0, o * np.log(o / ec), 0.0) - (o - ec)
        pc = ps[cell]  # the binomial log-pmf, written out (scipy's binom.logpmf is 4× slower)
        log_pmf = (special.gammaln(n + 1.0) - special.gammaln(o + 1.0) - special.gammaln(n - o + 1.0)
                   + o * np.log(pc) + (n - o) * np.log1p(-pc))
        weight = np.exp(log_pmf)
        total += 2.0 * float(np.sum(weight * dev))
    return total / (e.size - 1)
