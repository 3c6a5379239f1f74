"""The G-test of sampled outcomes against an exact law.

An *outcome* is any hashable value (for one speculative-decoding iteration, e.g.
``(tau, accepted_prefix_tuple, emitted_token)``).  An *exact law* is a mapping
``{outcome: probability}`` (float64, non-negative, summing to 1), as produced by the
reference's enumerating randomness source.  Results are frozen objects (scipy style); nothing
is printed.

- :func:`gtest` (:class:`GTestResult`) — G-test (log-likelihood ratio) of counts against an
  exact law, with deterministic, law-based pooling of small cells (oracle/gtest_cells.py), a
  calibration scale from the exact null mean, and an outright failure for any count on a
  zero-probability outcome.  Its stated power (``detectable_tv``) is derived in
  oracle/gtest_power.py.
- :func:`zero_probability_outcomes` — the observed outcomes of probability 0.
- :func:`counts_from_samples` — ``{outcome: count}`` from an iterable of outcomes.
- :func:`law_of` — push an exact law forward through a function (e.g. the law of τ).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from spectr_gbv.oracle.gtest_cells import gtest_null_mean_scale, pool_cells
from spectr_gbv.oracle.gtest_power import pooled_detectable_tv
from spectr_gbv.oracle.inputs import as_counts, as_law, check_alpha

__all__ = ["GTestResult", "counts_from_samples", "gtest", "law_of", "zero_probability_outcomes"]


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
        detectable_tv: ``oracle.gtest_power.detectable_tv`` (n, alpha, 0.99, n_cells=n_cells_after_merge),
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
    violations = zero_probability_outcomes(counts, law)
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


def zero_probability_outcomes(counts: dict, law: dict) -> tuple:
    """The outcomes with a positive count in ``counts`` ({outcome: int}) and probability 0 in
    ``law`` ({outcome: float}), or absent from it, in the order of ``counts``."""
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
