"""Statistical tests of sampled outcomes against an exact law, with stated power.

An *outcome* is any hashable value (for one speculative-decoding iteration, e.g.
``(tau, accepted_prefix_tuple, emitted_token)``).  An *exact law* is a mapping
``{outcome: probability}`` (float64, non-negative, summing to 1), as produced by the
reference's enumerating randomness source.  Everything here returns a frozen result object
(scipy style) and prints nothing.

Contents
--------
- :func:`gtest` — G-test (log-likelihood ratio) of counts against an exact law, with
  deterministic, law-based pooling of small cells and an outright failure for any count on a
  zero-probability outcome.
- :func:`sample_size_for_tv`, :func:`detectable_tv` — power of the G-test against
  total-variation deviations, from the non-central χ² approximation.
- :func:`gtest_power` — what :func:`gtest` will state for a law and a sample size, before
  sampling: its cells after pooling, the pooled mass and the detectable δ.
- :func:`conditional_gtests` — marginal law of a conditioning key plus the conditional law
  of the outcome given each key, Bonferroni-corrected as one family.
- :func:`law_of` — push an exact law forward through a function (e.g. the law of τ).
- :func:`mean_ci`, :func:`mean_within_ci` — normal-approximation interval for a mean and a
  z-test of a sample mean against an exact mean.
- :func:`paired_mean_test` — z-test of observations against their own exact means and
  variances (one exact law per observation, e.g. τ of each engine iteration given its rows).
- :func:`counts_from_samples` — ``{outcome: count}`` from an iterable of outcomes.

Power of the G-test (used by :func:`detectable_tv` and :func:`sample_size_for_tv`)
---------------------------------------------------------------------------------
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
in tests/oracle/test_stats.py): δ = 0.01, α = 1e-6 needs n = 130 249 at dof 1 and 184 225
at dof 10; n = 2·10⁵, α = 1e-6 detects δ = 0.0081 (dof 1), 0.0090 (dof 5), 0.0096 (dof 10),
0.0134 (dof 100), 0.0212 (dof 1000).

Caveats.  (1) The non-central χ² law is an asymptotic approximation (large n, deviations of
order n^{-1/2}, expected counts not small); with small samples, cells of expected count near
``min_expected`` or large δ the true power can differ from the stated one — the test suite
checks the stated power empirically at the least favourable deviation.  (2) After pooling
small cells (see :func:`gtest`) the guarantee is about the TV distance *on the pooled
partition*; a deviation that only moves mass inside one pooled group is invisible.  Since
Σ_{i∈G}|p'_i − p_i| ≤ |p'(G) − p(G)| + 2p(G) for every group G, the TV distance on the
original cells is at most the pooled TV plus ``GTestResult.merged_mass``
(``GTestResult.detectable_tv_law``).  (3) The χ² approximation of the G statistic is
anti-conservative when many cells have expected counts near ``min_expected`` (its null mean
exceeds dof by about Σ(1/E_i)/6, Williams 1976).  :func:`gtest` therefore compares G/s with
χ²_dof, s = 1 + 2(E₀[G]/dof − 1) from the exact null mean (``gtest_null_mean_scale``), and its
stated δ is the power of that corrected test (the level χ²_dof.sf(s·χ²_dof.isf(α)) for G).
The sizes measured by simulation from the exact laws of the certification plan's V = 4,096
cases are in benchmarks/GTEST_SIZE.md (at most α at α = 10^-2, 10^-3, 10^-4); the far tail
(α = 2·10^-7, as certification uses) is an extrapolation from them, stated there.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special, stats

from spectr_gbv.oracle.inputs import LAW_SUM_ATOL, as_counts, as_law, check_alpha

__all__ = [
    "GTestPower",
    "GTestResult",
    "ConditionalGTestResult",
    "MeanCI",
    "MeanStats",
    "MeanTestResult",
    "PairedMeanTestResult",
    "conditional_gtests",
    "counts_from_samples",
    "detectable_tv",
    "gtest",
    "gtest_power",
    "law_of",
    "least_favourable_kappa",
    "mean_ci",
    "mean_within_ci",
    "paired_mean_power",
    "paired_mean_test",
    "sample_size_for_tv",
]

# Law-free least favourable constant: Σ (p' − p)²/p ≥ 4·TV² (Cauchy–Schwarz, module doc).
LAW_FREE_KAPPA = 4.0


# ----------------------------------------------------------------------------- power


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
            onto them is caught outright by :func:`gtest`).
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


# ----------------------------------------------------------------------------- G-test


@dataclass(frozen=True)
class GTestResult:
    """Result of :func:`gtest`.

    Attributes:
        statistic: G = 2 Σ O ln(O/E) over the pooled cells (float; ``inf`` when a
            zero-probability outcome was observed; 0 when only one cell remains).
        dof: degrees of freedom, n_cells_after_merge − 1.
        pvalue: χ²_{dof} survival function at G; 0 on a zero-cell violation; 1 when dof = 0.
        n: sample size (total count, including counts on zero-probability outcomes).
        alpha: false-alarm rate used.
        passed: ``pvalue >= alpha`` and no zero-cell violation.
        n_cells_after_merge: number of cells compared.
        zero_cell_violations: tuple of outcomes with probability 0 (or absent from the law)
            that have a positive count.
        detectable_tv: :func:`detectable_tv` (n, alpha, 0.99, n_cells=n_cells_after_merge),
            on the pooled partition; ``inf`` when dof = 0.  It covers deviations seen on the
            pooled cells only: mass moved between cells of one pooled group is invisible to the
            test.  For the whole law use ``detectable_tv_law``.
        min_expected: pooling threshold used.
        merged_mass: total law probability of the cells that were pooled.
        reason: empty when the test ran normally, otherwise why it failed or is uninformative.
        observed, expected: float64 arrays [n_cells_after_merge] of pooled counts and their
            expected counts (given the rare cells' count, when there are rare cells).
        rare_observed, rare_expected: count and expected count n·p of the rare cells (cells too
            small to form a pooled group, tested apart by a binomial tail; 0 when none).
        null_mean_scale: s = max(1, 1 + 2(E₀[G]/dof − 1)), from the exact null mean of G
            (``gtest_null_mean_scale``); ``pvalue`` is χ²_dof's tail at G/s (1 when dof = 0).
    """

    statistic: float
    dof: int
    pvalue: float
    n: int
    alpha: float
    passed: bool
    n_cells_after_merge: int
    zero_cell_violations: tuple
    detectable_tv: float
    min_expected: float
    merged_mass: float
    reason: str = ""
    observed: np.ndarray = field(default=None, repr=False, compare=False)
    expected: np.ndarray = field(default=None, repr=False, compare=False)
    rare_observed: int = 0
    rare_expected: float = 0.0
    null_mean_scale: float = 1.0

    @property
    def detectable_tv_law(self) -> float:
        """Smallest TV deviation of the whole (unpooled) law detected with power 0.99:
        ``detectable_tv + merged_mass``, capped at 1 (a value of 1: no guarantee at all).

        Guarantee: for any alternative law P', TV(P', P) ≤ TV_pooled(P', P) + Σ_groups
        min(P(g), P'(g)) ≤ TV_pooled + merged_mass (inside a pooled group g at most the
        group's mass can be moved between its cells), so TV(P', P) ≥ detectable_tv +
        merged_mass implies TV_pooled ≥ detectable_tv, which the test detects with power 0.99.
        """
        return min(1.0, self.detectable_tv + self.merged_mass)

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        s = (f"G-test {verdict}: G={self.statistic:.6g}, dof={self.dof}, "
             f"p={self.pvalue:.4g}, alpha={self.alpha:g}, n={self.n}, "
             f"cells={self.n_cells_after_merge} (pooled mass {self.merged_mass:.3g}), "
             f"detectable TV={self.detectable_tv:.4g} at power 0.99 on the pooled cells, "
             f"{self.detectable_tv_law:.4g} on the whole law")
        if self.zero_cell_violations:
            shown = ", ".join(repr(o) for o in self.zero_cell_violations[:5])
            more = len(self.zero_cell_violations) - 5
            s += f"; counts on zero-probability outcomes: {shown}" + (
                f" (+{more} more)" if more > 0 else "")
        if self.reason:
            s += f"; {self.reason}"
        return s


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


def gtest(counts, law, alpha: float, min_expected: float = 5.0) -> GTestResult:
    """G-test (log-likelihood ratio) of observed counts against an exact law.

    Cells are the outcomes with positive probability.  Cells with expected count n·p below
    ``min_expected`` are pooled by a rule that depends only on the law and n (see
    ``pool_cells``: smallest first, greedily, each pooled group reaching ``min_expected``;
    no mass dropped), then ``scipy.stats.power_divergence(..., lambda_="log-likelihood")``
    is applied with dof = cells − 1.  Small cells too rare to form a group of their own
    (n·Σp < min_expected, e.g. outcomes of probability 1e-16 from rounding) are tested apart:
    their total count against the exact binomial upper tail, the other groups by the G-test
    given that count, each at α/2; ``pvalue`` is then min(1, 2·min of the two).  Any positive count on an outcome with probability 0,
    or absent from ``law``, fails outright (p-value 0, statistic inf).

    Args:
        counts: mapping ``{outcome: int ≥ 0}`` or 1-D integer array (outcome = index).
        law: mapping ``{outcome: float64 prob}`` summing to 1, or 1-D array (outcome =
            index).
        alpha: false-alarm rate, in (0, 1).
        min_expected: pooling threshold on expected counts, > 0 (default 5).
    Returns:
        :class:`GTestResult`.  With a single cell left (point-mass law, or n < min_expected)
        the test has no information: dof 0, p-value 1, ``reason`` says so.
    Raises:
        ValueError: negative or non-integer counts, total count < 1, law with negative or
            non-finite entries or not summing to 1, alpha outside (0, 1), min_expected ≤ 0.
    Source: Sokal & Rohlf, *Biometry* (G-test); power via the module doc.
    """
    alpha, min_expected, law, counts, n = _gtest_inputs(counts, law, alpha, min_expected)
    violations = _zero_cell_violations(counts, law)
    cells = _pooled_cells(law, counts, n, min_expected)
    scale = gtest_null_mean_scale(cells.expected, cells.n_g)
    tv = pooled_detectable_tv(cells.n_g, alpha, cells.n_cells, cells.has_rare, scale)
    common = dict(dof=cells.dof, n=n, alpha=alpha, n_cells_after_merge=cells.n_cells,
                  zero_cell_violations=violations, detectable_tv=tv,
                  min_expected=min_expected, merged_mass=cells.merged_mass,
                  observed=cells.observed, expected=cells.expected,
                  rare_observed=cells.rare_observed, rare_expected=n * cells.rare_mass,
                  null_mean_scale=scale)
    if violations:
        total_bad = sum(counts[o] for o in violations)
        return GTestResult(statistic=math.inf, pvalue=0.0, passed=False,
                           reason=(f"{total_bad} count(s) on {len(violations)} "
                                   "zero-probability outcome(s)"), **common)
    if cells.dof == 0 and not cells.has_rare:
        return GTestResult(statistic=0.0, pvalue=1.0, passed=True,
                           reason="one cell after pooling: the test has no information",
                           **common)
    statistic, p_g = _g_statistic(cells, scale)
    if not cells.has_rare:
        return GTestResult(statistic=statistic, pvalue=p_g, passed=p_g >= alpha, **common)
    return _with_rare_cells(statistic, p_g, cells, n, alpha, common)


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
    """What :func:`gtest` states for a law and n, known before sampling (:func:`gtest_power`).

    Attributes:
        n: sample size.  alpha: the test's false-alarm rate.  min_expected: pooling threshold.
        support: cells of positive probability.
        n_large: cells with expected count n·p ≥ min_expected (compared alone).
        n_cells: cells compared after pooling (``GTestResult.n_cells_after_merge``).
        merged_mass: law mass of the pooled groups and rare cells (``GTestResult.merged_mass``).
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
        (``GTestResult.detectable_tv_law``)."""
        return min(1.0, self.detectable_tv + self.merged_mass)


def gtest_power(law, n: int, alpha: float, min_expected: float = 5.0) -> GTestPower:
    """The cells, pooled mass and detectable δ that :func:`gtest` states for ``law`` and ``n``.

    The pooling depends on the law and n only (``pool_cells``), so this is known before
    sampling; ``gtest`` on n samples states the same numbers, except that with rare cells its δ
    uses the n_g = n − (count on the rare cells) samples outside them, where this uses n (their
    expected count is below ``min_expected``, so the difference is a factor √(n/n_g) ≈ 1).

    Args:
        law: mapping ``{outcome: prob}`` or 1-D array.  n: integer ≥ 1.
        alpha: the test's false-alarm rate, in (0, 1).  min_expected: as in :func:`gtest`.
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
    # as _pooled_cells computes GTestResult.merged_mass
    merged = math.fsum(probs[i] for g in groups if len(g) > 1 for i in g) + rare_mass
    # the expected counts exactly as _pooled_cells computes them (n_g = n), so the scale agrees
    scale = gtest_null_mean_scale(np.array([n * math.fsum(probs[g]) / (1.0 - rare_mass) for g in groups],
                                      dtype=np.float64), n)
    return GTestPower(n=n, alpha=alpha, min_expected=min_expected, support=int(probs.size),
                      n_large=sum(1 for g in groups if len(g) == 1), n_cells=len(groups),
                      merged_mass=merged, rare_mass=rare_mass,
                      detectable_tv=pooled_detectable_tv(n, alpha, len(groups), bool(rare), scale),
                      null_mean_scale=scale)


def _gtest_inputs(counts, law, alpha, min_expected):
    """gtest's validated (alpha, min_expected, law, counts, n), checked in that order."""
    alpha = check_alpha(alpha)
    min_expected = float(min_expected)
    if not (min_expected > 0.0) or not math.isfinite(min_expected):
        raise ValueError(f"min_expected must be a finite number > 0, got {min_expected!r}")
    law = as_law(law)
    counts = as_counts(counts)
    n = sum(counts.values())
    if n < 1:
        raise ValueError(f"counts must total at least 1 (n >= 1), got n = {n}")
    return alpha, min_expected, law, counts, n


def _zero_cell_violations(counts: dict, law: dict) -> tuple:
    """The outcomes with a positive count and probability 0 (or absent from the law)."""
    return tuple(o for o, c in counts.items() if c > 0 and law.get(o, 0.0) == 0.0)


@dataclass(frozen=True)
class _PooledCells:
    """The cells gtest compares, from ``pool_cells``.

    Rare cells (module doc of pool_cells) are tested apart: an exact upper binomial tail for
    their count, and the G-test on the other groups conditional on that count (a multinomial
    given its total is again multinomial, with the probabilities renormalised).

    Attributes:
        observed, expected: float64 [n_cells], pooled counts and their expected counts given
            the rare cells' count (n_g samples over the law renormalised outside them).
        merged_mass: law mass of the pooled groups of ≥ 2 cells plus the rare cells'.
        n_g: samples outside the rare cells.
        has_rare, rare_mass, rare_observed: whether there are rare cells, their total
            probability and their total count (0.0 and 0 when none).
    """

    observed: np.ndarray
    expected: np.ndarray
    merged_mass: float
    n_g: int
    has_rare: bool
    rare_mass: float
    rare_observed: int

    @property
    def n_cells(self) -> int:
        return self.observed.size

    @property
    def dof(self) -> int:
        return self.n_cells - 1


def _pooled_cells(law: dict, counts: dict, n: int, min_expected: float) -> _PooledCells:
    support = [o for o, p in law.items() if p > 0.0]
    probs = np.array([law[o] for o in support], dtype=np.float64)
    obs_cells = np.array([counts.get(o, 0) for o in support], dtype=np.float64)
    groups, rare = pool_cells(probs, n, min_expected)
    p_rare_mass = math.fsum(probs[rare]) if rare else 0.0
    o_rare = int(obs_cells[rare].sum()) if rare else 0
    n_g = n - o_rare
    observed = np.array([obs_cells[g].sum() for g in groups], dtype=np.float64)
    expected = np.array([n_g * math.fsum(probs[g]) / (1.0 - p_rare_mass) for g in groups], dtype=np.float64)
    merged_mass = math.fsum(probs[i] for g in groups if len(g) > 1 for i in g) + p_rare_mass
    return _PooledCells(observed, expected, merged_mass, n_g, bool(rare), p_rare_mass, o_rare)


def _g_statistic(cells: _PooledCells, scale: float = 1.0) -> tuple[float, float]:
    """(G, the χ²_dof p-value of G/scale) on the pooled cells; (0, 1) with one cell or no
    sample left."""
    if cells.dof >= 1 and cells.n_g >= 1:
        res = stats.power_divergence(cells.observed, cells.expected, ddof=0, lambda_="log-likelihood")
        # a perfect fit can give G = −3e-11 from rounding, whose χ² tail scipy returns as NaN
        statistic = max(float(res.statistic), 0.0)
        return statistic, float(stats.chi2.sf(statistic / scale, cells.dof))
    return 0.0, 1.0


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


def _rare_tail(rare_observed: int, n: int, rare_mass: float) -> float:
    """P(Binomial(n, rare_mass) ≥ rare_observed): the rare cells' exact upper tail."""
    return float(stats.binom.sf(rare_observed - 1, n, rare_mass)) if rare_observed > 0 else 1.0


def _with_rare_cells(statistic: float, p_g: float, cells: _PooledCells, n: int, alpha: float,
                     common: dict) -> GTestResult:
    """The result when there are rare cells: the G-test and the rare cells' binomial tail each
    at alpha/2, family p-value min(1, 2·min of the two)."""
    p_rare = _rare_tail(cells.rare_observed, n, cells.rare_mass)
    pvalue = min(1.0, 2.0 * min(p_g, p_rare))
    reason = (f"rare cells (mass {cells.rare_mass:.3g}, expected count {n * cells.rare_mass:.3g}) "
              f"observed {cells.rare_observed} times, binomial tail p = {p_rare:.3g}"
              ) if p_rare < alpha / 2.0 else ""
    return GTestResult(statistic=statistic, pvalue=pvalue,
                       passed=p_g >= alpha / 2.0 and p_rare >= alpha / 2.0, reason=reason, **common)


def counts_from_samples(samples: Iterable[Hashable]) -> dict:
    """``{outcome: count}`` of an iterable of hashable outcomes (insertion order kept).

    Raises:
        TypeError: if an outcome is not hashable (e.g. a numpy array; use tuples).
    """
    return dict(Counter(samples))


def law_of(law, fn: Callable[[Hashable], Hashable]) -> dict:
    """Push an exact law forward through ``fn``: ``{fn(o): Σ_{o ↦ key} p(o)}``.

    Sums use ``math.fsum`` so that the result is exact to float64 rounding.  Outcomes of
    probability 0 keep their key with probability 0 (so a key reachable only through
    impossible outcomes stays a zero cell).

    Args:
        law: mapping ``{outcome: prob}`` or 1-D array.
        fn: outcome → hashable key.
    Returns:
        dict ``{key: float64 prob}``.
    Raises:
        ValueError: if ``law`` is not a probability law.
    """
    parts: dict = defaultdict(list)
    for o, p in as_law(law).items():
        parts[fn(o)].append(p)
    return {k: math.fsum(v) for k, v in parts.items()}


# ----------------------------------------------------------------------------- conditional


@dataclass(frozen=True)
class ConditionalGTestResult:
    """Result of :func:`conditional_gtests`.

    Attributes:
        alpha: family-wise false-alarm rate.
        alpha_per_test: alpha / n_tests (Bonferroni).
        n_tests: family size: 1 (the key marginal) + number of eligible keys.  Fixed by the
            law and n, not by the counts, so the union bound holds.
        marginal: :class:`GTestResult` of the key counts against the key law.
        conditional: dict key → :class:`GTestResult` of the outcome given the key, for the
            eligible keys whose test had at least two cells.
        untested_keys: eligible keys with too few samples to form two cells (they still
            count in n_tests, which keeps the correction conservative).
        zero_cell_violations: outcomes of probability 0 (or absent) that were observed.
        min_pvalue: smallest p-value in the family (raw; 0 on a violation).
        pvalue: Bonferroni-adjusted family p-value, min(1, n_tests · min_pvalue).
        passed: no zero-cell violation and every test passed at alpha_per_test.
    """

    alpha: float
    alpha_per_test: float
    n_tests: int
    marginal: GTestResult
    conditional: dict
    untested_keys: tuple
    zero_cell_violations: tuple
    min_pvalue: float
    pvalue: float
    passed: bool

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        failed = [k for k, r in self.conditional.items() if not r.passed]
        s = (f"Conditional G-tests {verdict}: family alpha={self.alpha:g} over "
             f"{self.n_tests} tests (per test {self.alpha_per_test:.3g}), "
             f"min p={self.min_pvalue:.4g}, adjusted p={self.pvalue:.4g}; "
             f"marginal p={self.marginal.pvalue:.4g}; "
             f"{len(self.conditional)} conditional tested, {len(failed)} failed, "
             f"{len(self.untested_keys)} untested")
        if failed:
            s += "; failed keys: " + ", ".join(repr(k) for k in failed[:5])
        if self.zero_cell_violations:
            s += ("; counts on zero-probability outcomes: "
                  + ", ".join(repr(o) for o in self.zero_cell_violations[:5]))
        return s


def conditional_gtests(samples, law, condition: Callable[[Hashable], Hashable],
                       alpha: float, min_expected: float = 5.0,
                       min_key_expected: float | None = None) -> ConditionalGTestResult:
    """G-tests of the law of ``condition(outcome)`` and of the outcome given each key.

    A deviation can leave a marginal untouched (e.g. two keys of equal mass exchanging
    their conditional laws), so the family tests the key marginal and, for every eligible
    key k, the conditional law ``p(o | condition(o) = k)`` on the samples with that key.
    Given the key counts, the samples of each key are i.i.d. from its conditional law, so
    each conditional G-test is valid conditionally; Bonferroni over a family whose size is
    fixed in advance makes the family-wise false-alarm rate ≤ alpha.

    A key is eligible when its conditional law has ≥ 2 outcomes of positive probability
    and its *expected* count n·P(k) ≥ ``min_key_expected`` (decided from the law and n, not
    from the counts).  An eligible key whose observed count still gives only one cell is
    reported in ``untested_keys``.

    Args:
        samples: iterable of hashable outcomes, or a mapping ``{outcome: count}``.
        law: exact law, mapping ``{outcome: prob}``.
        condition: outcome → hashable key, e.g. ``lambda o: (o[0], o[1])``.
        alpha: family-wise false-alarm rate, in (0, 1).
        min_expected: pooling threshold passed to :func:`gtest`.
        min_key_expected: eligibility threshold on n·P(k); default ``10 * min_expected``.
    Returns:
        :class:`ConditionalGTestResult`.
    Raises:
        ValueError: as :func:`gtest`; min_key_expected ≤ 0.
    """
    alpha, law, counts, min_key_expected, n = _conditional_inputs(
        samples, law, alpha, min_expected, min_key_expected)
    split = _split_by_key(law, counts, condition)
    eligible = [k for k, pk in split.key_law.items()
                if n * pk >= min_key_expected
                and sum(1 for p in split.law[k].values() if p > 0.0) >= 2]
    n_tests = 1 + len(eligible)
    alpha_each = alpha / n_tests

    violations = _zero_cell_violations(counts, law)
    marginal = gtest(dict(split.key_counts), split.key_law, alpha_each, min_expected)
    conditional, untested = _per_key_gtests(split, eligible, alpha_each, min_expected)
    pvalues = [marginal.pvalue] + [r.pvalue for r in conditional.values()]
    if violations:
        pvalues.append(0.0)
    min_p = min(pvalues)
    passed = (not violations) and marginal.passed and all(
        r.passed for r in conditional.values())
    return ConditionalGTestResult(
        alpha=alpha, alpha_per_test=alpha_each, n_tests=n_tests, marginal=marginal,
        conditional=conditional, untested_keys=tuple(untested),
        zero_cell_violations=violations, min_pvalue=min_p,
        pvalue=min(1.0, n_tests * min_p), passed=passed)


def _conditional_inputs(samples, law, alpha, min_expected, min_key_expected):
    """conditional_gtests' validated (alpha, law, counts, min_key_expected, n), checked in
    that order."""
    alpha = check_alpha(alpha)
    law = as_law(law)
    counts = as_counts(samples if isinstance(samples, Mapping)
                        else counts_from_samples(samples), name="samples")
    if min_key_expected is None:
        min_key_expected = 10.0 * float(min_expected)
    min_key_expected = float(min_key_expected)
    if not (min_key_expected > 0.0):
        raise ValueError(f"min_key_expected must be > 0, got {min_key_expected!r}")
    n = sum(counts.values())
    if n < 1:
        raise ValueError(f"samples must hold at least one outcome (n >= 1), got n = {n}")
    return alpha, law, counts, min_key_expected, n


@dataclass(frozen=True)
class _ByKey:
    """A law and counts split by the key ``condition(outcome)``: the key law (``law_of``),
    the law and the counts of the outcomes of each key, and the count of each key."""

    key_law: dict
    law: dict
    counts: dict
    key_counts: dict


def _split_by_key(law: dict, counts: dict, condition) -> _ByKey:
    key_law = law_of(law, condition)
    by_key_law: dict = defaultdict(dict)
    for o, p in law.items():
        by_key_law[condition(o)][o] = p
    by_key_counts: dict = defaultdict(dict)
    key_counts: dict = defaultdict(int)
    for o, c in counts.items():
        k = condition(o)
        by_key_counts[k][o] = c
        key_counts[k] += c
    return _ByKey(key_law, by_key_law, by_key_counts, key_counts)


def _per_key_gtests(split: _ByKey, eligible: list, alpha_each: float, min_expected: float):
    """(conditional, untested): the G-test of p(o | key) on each eligible key's samples, and
    the eligible keys left untested (no sample, or one cell and no zero-cell violation)."""
    conditional: dict = {}
    untested = []
    for k in eligible:
        nk = split.key_counts.get(k, 0)
        if nk < 1:
            untested.append(k)
            continue
        pk = split.key_law[k]
        cond_law = {o: p / pk for o, p in split.law[k].items()}
        r = gtest(split.counts[k], cond_law, alpha_each, min_expected)
        if r.dof == 0 and not r.zero_cell_violations:
            untested.append(k)
        else:
            conditional[k] = r
    return conditional, untested


# ----------------------------------------------------------------------------- means


class MeanStats(tuple):
    """Sufficient statistics ``(total, total_sq, n)`` of a sample for its mean and variance.

    A plain 3-tuple ``(sum, sum_of_squares, n)`` is accepted wherever a ``MeanStats`` is.
    """

    __slots__ = ()

    def __new__(cls, total: float, total_sq: float, n: int):
        return super().__new__(cls, (float(total), float(total_sq), int(n)))

    @classmethod
    def from_values(cls, values) -> MeanStats:
        v = np.asarray(values, dtype=np.float64).ravel()
        return cls(math.fsum(v), math.fsum(v * v), v.size)

    @property
    def total(self) -> float:
        return self[0]

    @property
    def total_sq(self) -> float:
        return self[1]

    @property
    def n(self) -> int:
        return self[2]


def _mean_stats(data, name: str) -> MeanStats:
    if isinstance(data, tuple):
        if len(data) != 3:
            raise ValueError(f"{name}: a tuple must be (sum, sum_of_squares, n), "
                             f"got length {len(data)}; pass values as a list or array")
        s, ss, n = data
        if int(n) != n:
            raise ValueError(f"{name}: n must be an integer, got {n!r}")
        ms = MeanStats(s, ss, int(n))
    else:
        v = np.asarray(data, dtype=np.float64)
        if v.ndim != 1:
            raise ValueError(f"{name} must be 1-D values, got shape {v.shape}")
        ms = MeanStats.from_values(v)
    if not (math.isfinite(ms.total) and math.isfinite(ms.total_sq)):
        raise ValueError(f"{name} has non-finite sums")
    if ms.n < 2:
        raise ValueError(f"{name} needs n >= 2 values for a variance, got n = {ms.n}")
    return ms


def _mean_and_var(ms: MeanStats) -> tuple[float, float]:
    mean = ms.total / ms.n
    # Rounding can make the centred sum of squares slightly negative for constant data.
    var = max(0.0, (ms.total_sq - ms.total * mean) / (ms.n - 1))
    return mean, var


@dataclass(frozen=True)
class MeanCI:
    """Normal-approximation confidence interval for a mean.

    Attributes: mean, low, high, std_error (float64), confidence, n.
    """

    mean: float
    low: float
    high: float
    std_error: float
    confidence: float
    n: int

    def summary(self) -> str:
        return (f"mean {self.mean:.6g}, {100 * self.confidence:g}% CI "
                f"[{self.low:.6g}, {self.high:.6g}] (se {self.std_error:.3g}, n={self.n})")


def mean_ci(data, confidence: float = 0.95) -> MeanCI:
    """Normal-approximation (CLT) confidence interval ``mean ± z·s/√n`` for a mean.

    Args:
        data: 1-D values (list, array), or ``(sum, sum_of_squares, n)`` as a tuple or
            :class:`MeanStats` — a bare tuple is always read as sufficient statistics.
        confidence: coverage, in (0, 1).
    Returns:
        :class:`MeanCI` with s the sample standard deviation (ddof = 1) and
        z = ``norm.ppf((1 + confidence)/2)``.
    Raises:
        ValueError: confidence outside (0, 1), n < 2, non-finite sums, malformed tuple.
    Note: valid for large n (CLT); for small n or heavy skew the coverage is approximate.
    """
    confidence = check_alpha(confidence, "confidence")
    ms = _mean_stats(data, "data")
    mean, var = _mean_and_var(ms)
    se = math.sqrt(var / ms.n)
    z = float(stats.norm.isf((1.0 - confidence) / 2.0))
    return MeanCI(mean=mean, low=mean - z * se, high=mean + z * se, std_error=se,
                  confidence=confidence, n=ms.n)


@dataclass(frozen=True)
class MeanTestResult:
    """Result of :func:`mean_within_ci`.

    Attributes:
        mean: sample mean.  exact_mean: the value tested.  std_error: standard error used.
        statistic: z = (mean − exact_mean)/std_error.  pvalue: two-sided normal p-value.
        alpha: false-alarm rate.  passed: pvalue ≥ alpha.
        low, high: the (1 − alpha) interval around the sample mean.  n: sample size.
        variance_source: "exact" when the exact variance was given, else "sample".
    """

    mean: float
    exact_mean: float
    std_error: float
    statistic: float
    pvalue: float
    alpha: float
    passed: bool
    low: float
    high: float
    n: int
    variance_source: str

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"mean test {verdict}: sample mean {self.mean:.6g} vs exact "
                f"{self.exact_mean:.6g}, z={self.statistic:.3g}, p={self.pvalue:.4g}, "
                f"alpha={self.alpha:g}, {100 * (1 - self.alpha):g}% CI "
                f"[{self.low:.6g}, {self.high:.6g}], n={self.n} ({self.variance_source} var)")


def mean_within_ci(sample_mean_stats, exact_mean: float, alpha: float,
                   exact_variance: float | None = None) -> MeanTestResult:
    """Two-sided z-test that a sample mean (e.g. mean τ) agrees with an exact mean.

    Args:
        sample_mean_stats: values or ``(sum, sum_of_squares, n)``, as in :func:`mean_ci`.
        exact_mean: the mean under the exact law.
        alpha: false-alarm rate, in (0, 1); the interval reported has confidence 1 − alpha.
        exact_variance: the variance under the exact law, when known (then the standard
            error does not depend on the sample); otherwise the sample variance is used.
    Returns:
        :class:`MeanTestResult`.  With a zero standard error, its statistic z is 0 when the means agree
        exactly and ±inf (p-value 0) otherwise.
    Raises:
        ValueError: alpha outside (0, 1), non-finite exact_mean, negative exact_variance,
            and the cases of :func:`mean_ci`.
    """
    alpha = check_alpha(alpha)
    exact_mean = float(exact_mean)
    if not math.isfinite(exact_mean):
        raise ValueError(f"exact_mean must be finite, got {exact_mean!r}")
    ms = _mean_stats(sample_mean_stats, "sample_mean_stats")
    mean, var = _mean_and_var(ms)
    source = "sample"
    if exact_variance is not None:
        var = float(exact_variance)
        if not (var >= 0.0) or not math.isfinite(var):
            raise ValueError(f"exact_variance must be finite and >= 0, got {exact_variance!r}")
        source = "exact"
    se = math.sqrt(var / ms.n)
    diff = mean - exact_mean
    if se > 0.0:
        z = diff / se
    else:
        z = 0.0 if diff == 0.0 else math.copysign(math.inf, diff)
    pvalue = float(2.0 * stats.norm.sf(abs(z)))
    half = float(stats.norm.isf(alpha / 2.0)) * se
    return MeanTestResult(mean=mean, exact_mean=exact_mean, std_error=se, statistic=z, pvalue=pvalue,
                          alpha=alpha, passed=pvalue >= alpha, low=mean - half,
                          high=mean + half, n=ms.n, variance_source=source)


@dataclass(frozen=True)
class PairedMeanTestResult:
    """Result of :func:`paired_mean_test`.

    Attributes:
        statistic: z = Σ(x_i − μ_i) / √Σσ_i² (when Σσ_i² = 0: 0 if the sums agree, else ±inf).
        pvalue: two-sided normal p-value 2·Φ(−|z|) (when Σσ_i² = 0: 1 if the sums agree,
            else 0).
        n: observations.  mean: Σx_i / n.  exact_mean: Σμ_i / n.  variance: Σσ_i².
        alpha: false-alarm rate.  passed: pvalue ≥ alpha.
        detectable_shift: the shift of the mean per observation that the test detects with
            power 0.99 at level alpha, (z_{1−α/2} + z_{0.99}) · √Σσ_i² / n.
    """

    statistic: float
    pvalue: float
    n: int
    mean: float
    exact_mean: float
    variance: float
    alpha: float
    passed: bool
    detectable_shift: float

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"paired mean test {verdict}: mean {self.mean:.6g} vs exact {self.exact_mean:.6g}, "
                f"z={self.statistic:.3g}, p={self.pvalue:.4g}, alpha={self.alpha:g}, n={self.n}, "
                f"detectable shift {self.detectable_shift:.3g}")


def paired_mean_test(values, exact_means, exact_variances, alpha: float) -> PairedMeanTestResult:
    """Two-sided z-test of observations x_i against their own exact means μ_i and variances σ_i².

    Each observation has its own law (e.g. τ of one engine iteration given that iteration's
    rows); under the null, conditionally on the past each x_i − μ_i has mean 0 and variance
    σ_i², so Σ(x_i − μ_i) is a martingale and, by the martingale CLT, z = Σ(x_i − μ_i) / √Σσ_i²
    is approximately standard normal.

    Args:
        values: 1-D observations x_i.
        exact_means, exact_variances: 1-D, one per observation (variances ≥ 0).
        alpha: false-alarm rate, in (0, 1).
    Returns:
        :class:`PairedMeanTestResult`.
    Raises:
        ValueError: no observations, arrays of different lengths or not 1-D, non-finite
            values or means, negative or non-finite variances, alpha outside (0, 1).
    """
    alpha = check_alpha(alpha)
    x = np.asarray(values, dtype=np.float64)
    means = np.asarray(exact_means, dtype=np.float64)
    variances = np.asarray(exact_variances, dtype=np.float64)
    if x.ndim != 1 or means.shape != x.shape or variances.shape != x.shape or x.size == 0:
        raise ValueError(f"values, exact_means and exact_variances must be 1-D of one length "
                         f"≥ 1, got shapes {x.shape}, {means.shape}, {variances.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(means))):
        raise ValueError("values and exact_means must be finite")
    if not (np.all(np.isfinite(variances)) and np.all(variances >= 0.0)):
        raise ValueError("exact_variances must be finite and >= 0")
    n = x.size
    diff = float(np.sum(x - means))
    var = float(variances.sum())
    if var > 0:
        z = diff / math.sqrt(var)
        pvalue = float(2 * stats.norm.sf(abs(z)))
    else:  # every observation was certain: any deviation is impossible under the null
        z = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        pvalue = 1.0 if diff == 0 else 0.0
    shift = float((stats.norm.isf(alpha / 2) + stats.norm.isf(0.01)) * math.sqrt(var) / n)
    return PairedMeanTestResult(statistic=z, pvalue=pvalue, n=n, mean=float(np.mean(x)),
                                exact_mean=float(means.mean()), variance=var, alpha=alpha,
                                passed=pvalue >= alpha, detectable_shift=shift)


def paired_mean_power(shift: float, null_variance: float, alt_variance: float, alpha: float) -> float:
    """Power of ``paired_mean_test`` against a known alternative: the observations' sum of
    deviations Σ(x_i − μ_i) has mean ``shift`` (Σ of the per-observation mean shifts) and
    variance ``alt_variance`` (Σ of the alternative's per-observation variances), and the test
    rejects when |Σ(x_i − μ_i)| > z_{1−α/2}·√``null_variance`` (normal approximation, as the
    test's own):

        power = Φ((shift − z√V0) / √V1) + Φ((−shift − z√V0) / √V1).

    Args:
        shift: float, the expected sum of deviations under the alternative.
        null_variance: Σσ_i² of the null (the test's denominator), > 0.
        alt_variance: Σ of the alternative's variances, ≥ 0 (0: a certain sum).
        alpha: the test's false-alarm rate, in (0, 1).
    Returns:
        float in [0, 1].
    Raises:
        ValueError: alpha outside (0, 1), null_variance ≤ 0, alt_variance < 0, or non-finite input.
    """
    alpha = check_alpha(alpha)
    if not (math.isfinite(shift) and math.isfinite(null_variance) and math.isfinite(alt_variance)):
        raise ValueError("shift and variances must be finite")
    if not null_variance > 0 or alt_variance < 0:
        raise ValueError(f"need null_variance > 0 and alt_variance >= 0, got {null_variance}, {alt_variance}")
    edge = stats.norm.isf(alpha / 2) * math.sqrt(null_variance)
    if alt_variance == 0:
        return float(abs(shift) > edge)
    sd = math.sqrt(alt_variance)
    return float(stats.norm.cdf((shift - edge) / sd) + stats.norm.cdf((-shift - edge) / sd))
