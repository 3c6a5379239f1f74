"""The power of the G-test (oracle/gtest.py): the total-variation deviation it detects.

- :func:`detectable_tv`, :func:`sample_size_for_tv` — power of the G-test against
  total-variation deviations, from the non-central χ² approximation.
- :func:`least_favourable_kappa` — the law's own least favourable constant (≥ the law-free 4).
- :func:`pooled_detectable_tv` — the δ ``gtest`` states on its pooled cells (its rare-cell
  split and calibration scale accounted for).
- :func:`gtest_power` (:class:`GTestPower`) — what :func:`oracle.gtest.gtest` will state for a
  law and a sample size, before sampling: its cells after pooling, the pooled mass and the
  detectable δ.

Let the exact law be ``p`` over ``m`` cells and the sampling law be ``p'``.  For ``n``
samples, the G statistic (like Pearson's X², to which it is asymptotically equivalent) is
approximately non-central χ² with ``dof = m − 1`` and non-centrality

    λ = n · Σ_i (p'_i − p_i)² / p_i                       (= n·w², Cohen's effect size w)

(Mitra 1958, Ann. Math. Statist. 29:1221–1233, limiting power under local alternatives;
Cohen 1988, *Statistical Power Analysis for the Behavioral Sciences*, 2nd ed., ch. 7;
Guenther 1977, The American Statistician 31(2):83–85).  The test at level α rejects when
G > c = χ²_{dof}.isf(α), so its approximate power is ``ncx2.sf(c, dof, λ)``, increasing in λ.
Let λ*(α, power, dof) be the λ at which this equals the requested power (found by
``scipy.optimize.brentq``).

A total-variation distance δ = ½·Σ|p'_i − p_i| does not fix λ; the least favourable
deviation does.  By Cauchy–Schwarz with Σ p_i = 1,

    (Σ|p'_i − p_i|)² = (Σ |p'_i − p_i|/√p_i · √p_i)² ≤ Σ (p'_i − p_i)²/p_i · Σ p_i,

so Σ (p'_i − p_i)²/p_i ≥ 4δ² for *every* law ``p`` (law-free bound, the default,
``kappa = 4``).  For a given law the exact minimum over deviations with TV = δ is
``δ² / (s(1 − s))`` with ``s`` the mass of the subset of cells closest to ½ (move mass
proportionally to ``p`` from a subset ``A`` to its complement ``B``: the cost is
``δ²/p(A) + δ²/p(B)``); the bound 4δ² is attained when the cells split into two halves of
mass exactly ½.  :func:`least_favourable_kappa` returns this minimum when one cell has mass
≥ ½ (then ``s`` is that cell's mass) and the law-free 4 otherwise.

Hence every deviation with TV ≥ δ has λ ≥ kappa·n·δ², and

    detectable_tv(n) = sqrt(λ* / (kappa · n))

is the smallest δ such that **every** deviation with TV ≥ δ is detected with power ≥ the
requested power (0.99 by default) at false-alarm rate α, for the given dof.  Smaller
deviations may be detected too; none is promised.  Law-free values at power 0.99 (checked
in tests/oracle/test_gtest_power.py): δ = 0.01, α = 1e-6 needs n = 130 249 at dof 1 and 184 225
at dof 10; n = 2·10⁵, α = 1e-6 detects δ = 0.0081 (dof 1), 0.0090 (dof 5), 0.0096 (dof 10),
0.0134 (dof 100), 0.0212 (dof 1000).

Caveats.  (1) The non-central χ² law is an asymptotic approximation (large n, deviations of
order n^{-1/2}, expected counts not small); with small samples, cells of expected count near
``min_expected`` or large δ the true power can differ from the stated one — the test suite
checks the stated power empirically at the least favourable deviation.  (2) After pooling
small cells (see :func:`oracle.gtest.gtest`) the guarantee is about the TV distance *on the pooled
partition*; a deviation that only moves mass inside one pooled group is invisible.  Since
Σ_{i∈G}|p'_i − p_i| ≤ |p'(G) − p(G)| + 2p(G) for every group G, the TV distance on the
original cells is at most the pooled TV plus ``oracle.gtest.GTestResult.merged_mass``
(``oracle.gtest.GTestResult.detectable_tv_law``).  (3) The χ² approximation of the G statistic is
anti-conservative when many cells have expected counts near ``min_expected`` (its null mean
exceeds dof by about Σ(1/E_i)/6, Williams 1976).  :func:`oracle.gtest.gtest` therefore compares G/s with
χ²_dof, s = 1 + 2(E₀[G]/dof − 1) from the exact null mean (``gtest_null_mean_scale``), and its
stated δ is the power of that corrected test (the level χ²_dof.sf(s·χ²_dof.isf(α)) for G).
The sizes measured by simulation from the exact laws of the certification plan's V = 4,096
cases are in benchmarks/GTEST_SIZE.md (at most α at α = 10^-2, 10^-3, 10^-4); the far tail
(α = 2·10^-7, as certification uses) is an extrapolation from them, stated there.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from spectr_gbv.oracle.gtest_cells import gtest_null_mean_scale, pool_cells
from spectr_gbv.oracle.inputs import LAW_SUM_ATOL, as_law, check_alpha

__all__ = ["LAW_FREE_KAPPA", "GTestPower", "detectable_tv", "gtest_power", "least_favourable_kappa",
           "pooled_detectable_tv", "sample_size_for_tv"]

# Law-free least favourable constant: Σ (p' − p)²/p ≥ 4·TV² (Cauchy–Schwarz, module doc).
LAW_FREE_KAPPA = 4.0


# Cached because gtest reports detectable_tv on every call and the root-finding on ncx2
# costs milliseconds, far more than the test itself.
@functools.lru_cache(maxsize=1024)
def _critical_noncentrality(alpha: float, power: float, dof: int) -> float:
    """λ* with ``ncx2.sf(chi2.isf(alpha, dof), dof, λ*) = power``."""
    crit = stats.chi2.isf(alpha, dof)

    def excess(lam: float) -> float:
        return stats.ncx2.sf(crit, dof, lam) - power

    hi = max(1.0, float(dof))
    while excess(hi) < 0.0:
        hi *= 2.0
    # At λ = 0 the power is α < power, so [0, hi] brackets the root.
    return optimize.brentq(excess, 0.0, hi, xtol=1e-13, rtol=4 * np.finfo(float).eps)


def _check_power_args(alpha, power, n_cells, kappa) -> tuple[float, float, int, float]:
    alpha = check_alpha(alpha)
    power = float(power)
    if not (alpha < power < 1.0):
        raise ValueError(f"power must lie in (alpha, 1) = ({alpha:g}, 1), got {power!r}")
    if int(n_cells) != n_cells or n_cells < 2:
        raise ValueError(f"n_cells must be an integer >= 2 (dof = n_cells - 1), got {n_cells!r}")
    kappa = float(kappa)
    if not (kappa > 0.0):
        raise ValueError(f"kappa must be > 0, got {kappa!r}")
    return alpha, power, int(n_cells), kappa


def detectable_tv(n, alpha: float, power: float = 0.99, *, n_cells: int,
                  kappa: float = LAW_FREE_KAPPA) -> float:
    """Smallest TV distance δ whose every deviation the G-test detects with the given power.

    δ = sqrt(λ*(α, power, dof) / (kappa·n)), dof = n_cells − 1 (module doc: derivation,
    sources and the small-sample caveat).

    Args:
        n: sample size, ≥ 1 (int or float).
        alpha: false-alarm rate of the test, in (0, 1).
        power: requested detection probability, in (alpha, 1); default 0.99.
        n_cells: number of cells the test compares (after pooling), int ≥ 2.
        kappa: lower bound on Σ(p'−p)²/p ÷ TV² over the deviations considered; the default
            4 holds for every law (Cauchy–Schwarz); see :func:`least_favourable_kappa`.
    Returns:
        float δ > 0.  A value ≥ 1 means no deviation is guaranteed to be detected (TV ≤ 1).
    Raises:
        ValueError: n < 1, alpha outside (0, 1), power outside (alpha, 1), n_cells < 2,
            kappa ≤ 0.
    Source: non-central χ² power of χ²/G tests (Mitra 1958; Cohen 1988 ch. 7).
    """
    alpha, power, n_cells, kappa = _check_power_args(alpha, power, n_cells, kappa)
    n = float(n)
    if not (n >= 1.0) or not math.isfinite(n):
        raise ValueError(f"n must be a finite number >= 1, got {n!r}")
    lam = _critical_noncentrality(alpha, power, n_cells - 1)
    return math.sqrt(lam / (kappa * n))


def sample_size_for_tv(delta: float, alpha: float, power: float = 0.99, *, n_cells: int,
                       kappa: float = LAW_FREE_KAPPA) -> int:
    """Smallest n at which every deviation of TV ≥ ``delta`` is detected with ``power``.

    n = ceil(λ*(α, power, dof) / (kappa·δ²)), the inverse of :func:`detectable_tv`
    (``sample_size_for_tv(detectable_tv(n, ...), ...) == n`` for integer n).

    Args:
        delta: total-variation distance, in (0, 1].
        alpha, power, n_cells, kappa: as in :func:`detectable_tv`.
    Returns:
        int n ≥ 1.
    Raises:
        ValueError: delta outside (0, 1] and the cases of :func:`detectable_tv`.
    Source: as :func:`detectable_tv`.
    """
    alpha, power, n_cells, kappa = _check_power_args(alpha, power, n_cells, kappa)
    delta = float(delta)
    if not (0.0 < delta <= 1.0):
        raise ValueError(f"delta must lie in (0, 1], got {delta!r}")
    lam = _critical_noncentrality(alpha, power, n_cells - 1)
    x = lam / (kappa * delta * delta)
    # Relative slack so that an n that round-trips through detectable_tv is not bumped by
    # one ulp of float error.
    return max(1, math.ceil(x * (1.0 - 1e-12)))


def least_favourable_kappa(law) -> float:
    """min over deviations p' of Σ(p'−p)²/p ÷ TV(p, p')², or the law-free bound 4.

    For any subset A of cells with mass s, moving mass proportionally to p from A to its
    complement costs δ²/(s(1−s)), and that is the minimum (module doc).  When the largest
    cell has mass ``p_max ≥ ½`` every subset has s ≥ p_max or s ≤ 1 − p_max, so the minimum
    is exactly 1/(p_max(1 − p_max)); otherwise 4 is returned (a valid lower bound, exact
    when some subset has mass ½).  Pass the result as ``kappa`` to the power functions.

    Args:
        law: mapping ``{outcome: prob}`` or 1-D array; zero cells are ignored (a deviation
            onto them is caught outright by :func:`oracle.gtest.gtest`).
    Returns:
        float ≥ 4; ``inf`` for a point mass.
    Raises:
        ValueError: if ``law`` is not a probability law.
    """
    probs = sorted(as_law(law).values())
    p_max = probs[-1]
    if p_max < 0.5:
        return LAW_FREE_KAPPA
    # The rest's mass is summed, not taken as 1 − p_max, which loses digits near p_max = 1.
    rest = math.fsum(probs[:-1])
    if rest == 0.0:
        return math.inf
    return 1.0 / (p_max * rest)

def pooled_detectable_tv(n_g: int, alpha: float, n_cells: int, has_rare: bool,
                          scale: float = 1.0) -> float:
    """gtest's ``detectable_tv``: with rare cells the G-test runs at alpha/2 (Bonferroni with
    their binomial tail) on the n_g samples outside them; ``inf`` with one cell.  With the null
    mean scale s (``gtest_null_mean_scale``) the test rejects when G > s·χ²_dof.isf(a): the power of
    the uncorrected G at the level a' = χ²_dof.sf(s·χ²_dof.isf(a)) ≤ a."""
    if n_cells < 2:
        return math.inf
    a = alpha / 2.0 if has_rare else alpha
    if scale > 1.0:
        a = float(stats.chi2.sf(scale * stats.chi2.isf(a, n_cells - 1), n_cells - 1))
    return detectable_tv(max(n_g, 1), a, 0.99, n_cells=n_cells)


@dataclass(frozen=True)
class GTestPower:
    """What :func:`oracle.gtest.gtest` states for a law and n, known before sampling
    (:func:`gtest_power`).

    Attributes:
        n: sample size.  alpha: the test's false-alarm rate.  min_expected: pooling threshold.
        support: cells of positive probability.
        n_large: cells with expected count n·p ≥ min_expected (compared alone).
        n_cells: cells compared after pooling (``GTestResult.n_cells_after_merge``).
        merged_mass: law mass of the pooled groups and rare cells (``oracle.gtest.GTestResult.merged_mass``).
        rare_mass: law mass of the rare cells (tested apart by a binomial tail; 0 when none).
        detectable_tv: δ on the pooled cells (``GTestResult.detectable_tv``), computed with no
            count on the rare cells (n_g = n); ``inf`` with one cell.
        null_mean_scale: ``GTestResult.null_mean_scale`` at n_g = n.
    """

    n: int
    alpha: float
    min_expected: float
    support: int
    n_large: int
    n_cells: int
    merged_mass: float
    rare_mass: float
    detectable_tv: float
    null_mean_scale: float = 1.0

    @property
    def detectable_tv_law(self) -> float:
        """δ on the whole law: ``detectable_tv + merged_mass`` capped at 1
        (``oracle.gtest.GTestResult.detectable_tv_law``)."""
        return min(1.0, self.detectable_tv + self.merged_mass)


def gtest_power(law, n: int, alpha: float, min_expected: float = 5.0) -> GTestPower:
    """The cells, pooled mass and detectable δ that :func:`oracle.gtest.gtest` states for
    ``law`` and ``n``.

    The pooling depends on the law and n only (``pool_cells``), so this is known before
    sampling; ``gtest`` on n samples states the same numbers, except that with rare cells its δ
    uses the n_g = n − (count on the rare cells) samples outside them, where this uses n (their
    expected count is below ``min_expected``, so the difference is a factor √(n/n_g) ≈ 1).

    Args:
        law: mapping ``{outcome: prob}`` or 1-D array.  n: integer ≥ 1.
        alpha: the test's false-alarm rate, in (0, 1).  min_expected: as in :func:`oracle.gtest.gtest`.
    Returns:
        :class:`GTestPower`.
    Raises:
        ValueError: law not a probability law, n < 1, alpha outside (0, 1), min_expected ≤ 0.
    """
    alpha = check_alpha(alpha)
    min_expected = float(min_expected)
    if not (min_expected > 0.0) or not math.isfinite(min_expected):
        raise ValueError(f"min_expected must be a finite number > 0, got {min_expected!r}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    n = int(n)
    arr = None if isinstance(law, Mapping) else np.asarray(law, dtype=np.float64)
    if (arr is not None and arr.ndim == 1 and arr.size and np.all(np.isfinite(arr))
            and np.all(arr >= 0.0) and abs(math.fsum(arr) - 1.0) <= LAW_SUM_ATOL):
        probs = arr[arr > 0.0]  # a valid array law: checked without building a dict
    else:
        probs = np.array([p for p in as_law(law).values() if p > 0.0], dtype=np.float64)
    groups, rare = pool_cells(probs, n, min_expected)
    rare_mass = math.fsum(probs[rare]) if rare else 0.0
    # as oracle.gtest.gtest computes GTestResult.merged_mass
    merged = math.fsum(probs[i] for g in groups if len(g) > 1 for i in g) + rare_mass
    # the expected counts exactly as oracle.gtest.gtest computes them (n_g = n), so the scale agrees
    scale = gtest_null_mean_scale(np.array([n * math.fsum(probs[g]) / (1.0 - rare_mass) for g in groups],
                                      dtype=np.float64), n)
    return GTestPower(n=n, alpha=alpha, min_expected=min_expected, support=int(probs.size),
                      n_large=sum(1 for g in groups if len(g) == 1), n_cells=len(groups),
                      merged_mass=merged, rare_mass=rare_mass,
                      detectable_tv=pooled_detectable_tv(n, alpha, len(groups), bool(rare), scale),
                      null_mean_scale=scale)
