"""Identity test of sampled counts against a known large, sparse law, near the information limit.

One job: decide whether N samples were drawn from a known law p over many outcomes (a V =
151,936-token row, several branches of rows, a verdict law of 10^5–10^6 outcomes) when most
outcomes expect fewer than 5 samples — where the G-test (oracle.gtest.gtest) must pool them and
states δ = 0.2–0.65 on the whole law at N = 2·10^5 (docs/guarantees.md, "What a case of
V = 151,936 rows can and cannot resolve").

The test (Valiant & Valiant 2014, "An automatic inequality prover and instance optimal identity
testing", FOCS, §2; Balakrishnan & Wasserman 2019, "Hypothesis testing for densities and
high-dimensional multinomials: sharp local minimax rates", Ann. Statist. 47(4), the 2/3-power
weighted χ² with a tail bucket; the unbiased cell term ((N_i − n p_i)² − N_i) is that of
Acharya, Daskalakis & Kamath, NeurIPS 2015, and Chan, Diakonikolas, Valiant & Valiant 2014):

* the **tail** S: the cells of expected count n·p_i < ``HEAD_MIN_EXPECTED`` (10^-3) and the
  cells of smallest probability whose total mass is at most ``tail_mass`` (chosen from the law
  and n alone, never from the counts, to minimise the stated δ; often empty), tested by its
  total count against the exact binomial upper tail;
* the **head** H (the other cells of positive probability), tested by

      T = Σ_{i∈H} ((N_i − n p_i)² − N_i) / p_i^{2/3},

  standardised with its exact multinomial null mean −n Σ p_i^{4/3} and exact null variance
  (binomial central moments per cell plus the multinomial covariance (2n² − 6n) p_i² p_j²,
  both derived in ``_null_moments``), and referred to a one-term Edgeworth expansion with the
  statistic's skewness (Poisson cumulants κ3 = 4λ² + 8λ³ of each cell's term, λ = n p_i);
* the two at α/2 each (Bonferroni); ``pvalue`` = min(1, 2·min); a count on an outcome of
  probability 0 (or absent from the law) fails outright.

Why the 2/3 power: with weights p_i^{-2/3} the null variance is 2n²·Σ_H p_i^{2/3} and, by
Cauchy–Schwarz, a head ℓ1 deviation D shifts the mean by ≥ n²D²/Σ_H p_i^{2/3}, so the samples
needed scale as ‖p_H‖_{2/3}/D² — Valiant & Valiant's instance-optimal rate, against √V/ε² for
the uniform worst case and V/ε² for the G-test's cells of expected count ≥ 5.

**Calibration (what is exact, what is approximate).**  The tail test is exact (binomial).  The
head's mean and variance are exact for the multinomial; its p-value is the Edgeworth-corrected
normal tail — an approximation, not a bound.  Its false-alarm rate is *measured* by simulation
from the exact law (multinomial counts, :func:`false_alarm_rate`) at α = 10^-2 … 10^-3, where
R = 10^3–10^4 replicates resolve it, and in tests/oracle/test_identity.py; the Edgeworth term
moves the critical value from the normal's 5.2 to ≈ 5.3 standard deviations at α = 10^-7
(skewness ≈ 0.03 on the V = 151,936 rows).  α = 10^-6 itself is not simulated
(10^7 replicates); the stated rate there is the expansion's.

**Power (what δ means).**  Every sampling law q either puts ≥ t* more mass on the tail than p
(then the binomial test, whose power is exact, rejects with probability ≥ 0.99), or carries a
head ℓ1 deviation D = Σ_H |q_i − p_i| ≥ 2·TV(q, p) − 2p(S) − t*.  The head test detects a head
deviation D ≥ D* with probability ≥ 0.99 under the normal approximation of T under q (the
Poissonized variance Σ a_i²(2n²q_i² + 4n³q_iΔ_i²), Δ = q − p; ``_head_detectable_l1``), so it
states δ = (D* + 2p(S) + t*)/2 on the **whole, un-pooled law** — the tail's mass is inside δ,
not beside it.  Two D*'s are computed:

* ``detectable_tv`` — D* in the *least favourable direction*, |Δ_i| ∝ p_i^{2/3} on the head,
  the deviation of smallest mean shift for its ℓ1 size (Cauchy–Schwarz equality).  This is the
  convention of the G-test's δ (oracle.gtest_power: the least favourable deviation and the
  non-central χ² approximation), and the one certification reports; it is checked by
  simulation at that deviation (:func:`least_favourable`; tests and
  benchmarks/identity_vs_gtest.py).  A law deviating in another direction has a larger mean
  shift for its size, but its variance can be larger too, so it is not covered by a proof.
* ``detectable_tv_worst_case`` — D* for every direction, from bounds that pair the smallest
  mean shift with the largest variance (the smallest and largest head probabilities enter);
  valid for every q under the normal approximation, and loose.

Contents: :func:`identity_test` (:class:`IdentityTestResult`), :func:`identity_power`
(:class:`IdentityPower`: what the test states for a law and n before sampling),
:func:`instance_optimal_samples` (Valiant–Valiant's ‖p_{-max}^{-ε}‖_{2/3}/ε²),
:func:`false_alarm_rate` and :func:`detection_rate` (simulated from multinomial counts),
:func:`least_favourable` (the planted law at which ``detectable_tv`` is checked).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from spectr_gbv.oracle.inputs import LAW_SUM_ATOL, as_counts, as_law, check_alpha

__all__ = [
    "IdentityPower",
    "IdentityTestResult",
    "detection_rate",
    "false_alarm_rate",
    "identity_power",
    "identity_test",
    "instance_optimal_samples",
    "least_favourable",
]

POWER = 0.99
# Candidate tail masses (the tail's share of the law); the one giving the smallest stated δ for
# the law and n is used.  0 = no tail.
TAIL_MASSES = (0.0, 1e-4, 1e-3, 1e-2)
# A head cell expects at least this many samples (n·p_i ≥ HEAD_MIN_EXPECTED); rarer cells join the
# tail whatever its mass budget.  Below it one cell's double hit (probability ≈ (n p_i)²/2) would
# move T by 2 p_i^{-2/3}, a sizeable fraction of its null sd (0.3 sd at n = 10^6 on a V = 151,936
# Zipf row), and the normal/Edgeworth tail would no longer describe the null's far tail.
HEAD_MIN_EXPECTED = 1e-3
# The head's null law must be one a one-term Edgeworth expansion can describe: skewness at most
# HEAD_MAX_SKEW, and no single cell able to carry the statistic (a double hit on a head cell
# moves T by 2·p_i^{-2/3}, at most HEAD_MAX_JUMP null sd).  The rarest cells join the tail until
# both hold (``_shape_cut``); when no cut does, the head is one cell, not tested, and the stated
# δ is 1 (the G-test resolves such a law).  That is a peaked row: a real model's (top token
# 0.997, V = 151,936) keeps cells of n·p_i ≈ 10^-3 whose double hit is 8–40 null sd, and its few
# large cells make the statistic χ²-like (skewness 2–3.5, simulated) at every cut.  The laws of
# benchmarks/IDENTITY.md (Zipf(1.1), Dirichlet(0.05) rows, n ≥ 10^5: skewness ≤ 0.05) meet both
# as they are.
HEAD_MAX_SKEW = 0.5
HEAD_MAX_JUMP = 1.0


# ----------------------------------------------------------------------------- law and head


@dataclass(frozen=True)
class _Split:
    """The law's positive cells split into head and tail (``_split``); arrays are float64."""

    p_head: np.ndarray      # probabilities of the head cells
    head_index: np.ndarray  # int64 positions (in the positive cells' order) of the head cells
    tail_index: np.ndarray  # int64 positions of the tail cells
    tail_mass: float        # p(S)


def _law_arrays(law) -> tuple[tuple | None, np.ndarray]:
    """(outcomes or None for an array law, float64 probabilities), validated."""
    if not isinstance(law, Mapping):
        arr = np.asarray(law, dtype=np.float64)
        # numpy's pairwise sum is accurate to ~1e-13 here, far inside LAW_SUM_ATOL
        if (arr.ndim == 1 and arr.size and np.all(np.isfinite(arr)) and np.all(arr >= 0.0)
                and abs(float(arr.sum()) - 1.0) <= LAW_SUM_ATOL):
            return None, arr
    checked = as_law(law)
    return tuple(checked), np.fromiter(checked.values(), dtype=np.float64, count=len(checked))


def _split(probs_pos: np.ndarray, tail_mass: float, n: int) -> _Split:
    """Tail = the cells of smallest probability (stable sort: ties in law order) whose cumulative
    mass stays ≤ tail_mass, every cell with n·p_i < HEAD_MIN_EXPECTED, and the rarest cells that
    ``_shape_cut`` moves out of the head; head = the rest (at least one cell).  Depends on the
    law and n only."""
    order = np.argsort(probs_pos, kind="stable")
    sorted_p = probs_pos[order]
    cum = np.cumsum(sorted_p)
    k = int(np.searchsorted(cum, tail_mass, side="right")) if tail_mass > 0 else 0
    k = max(k, int(np.searchsorted(sorted_p * float(n), HEAD_MIN_EXPECTED, side="left")))
    k = max(k, _shape_cut(sorted_p, n))
    k = min(k, probs_pos.size - 1)  # keep at least one head cell
    tail = np.sort(order[:k])
    head = np.sort(order[k:])
    return _Split(probs_pos[head], head, tail, float(math.fsum(probs_pos[tail])) if k else 0.0)


def _cell_moments(p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cell, for Y_i = a_i((N_i − n p_i)² − N_i) with N_i ~ Binomial(n, p_i), a_i = p_i^{-2/3}:
    (Var Y_i, third central moment of Y_i, a_i p_i² = p_i^{4/3}), float64 arrays.

    With D = N − np, Y/a = D² − D − np; from the binomial central moments μ2..μ6 (from its
    cumulants κ2 = npq, κ3 = npq(q − p), κ4 = npq(1 − 6pq), κ5 = npq(q − p)(1 − 12pq),
    κ6 = npq(1 − 30pq(1 − 4pq)); μ4 = κ4 + 3κ2², μ5 = κ5 + 10κ3κ2, μ6 = κ6 + 15κ4κ2 + 10κ3² + 15κ2³):
    Var(D² − D) = μ4 − 2μ3 + μ2 − μ2², and with U = D² − μ2,
    E[(U − D)³] = μ6 − 3μ2μ4 + 2μ2³ − 3(μ5 − 2μ2μ3) + 3(μ4 − μ2²) − μ3
    (→ 4λ² + 8λ³ as p → 0 with λ = np, the Poisson cumulant).  The binomial's, not the
    Poisson's: a cell of p near 1 has almost no spread, and the Poisson's 8λ³ would overstate
    the skewness of a peaked row a hundredfold (645 against 3.5 simulated, a real model's row).
    """
    nf = float(n)
    a = p ** (-2.0 / 3.0)
    q = 1.0 - p
    k2 = nf * p * q
    k3 = k2 * (q - p)
    pq = p * q
    k4 = k2 * (1.0 - 6.0 * pq)
    k5 = k3 * (1.0 - 12.0 * pq)
    k6 = k2 * (1.0 - 30.0 * pq * (1.0 - 4.0 * pq))
    mu2, mu3 = k2, k3
    mu4 = k4 + 3.0 * k2 * k2
    mu5 = k5 + 10.0 * k3 * k2
    mu6 = k6 + 15.0 * k4 * k2 + 10.0 * k3 * k3 + 15.0 * k2 ** 3
    var_cells = mu4 - 2.0 * mu3 + mu2 - mu2 * mu2
    third = mu6 - 3.0 * mu2 * mu4 + 2.0 * mu2 ** 3 - 3.0 * (mu5 - 2.0 * mu2 * mu3) + 3.0 * (mu4 - mu2 * mu2) - mu3
    return a * a * var_cells, a ** 3 * third, a * p * p


def _null_moments(p: np.ndarray, n: int) -> tuple[float, float, float]:
    """(mean, variance, skewness) of T = Σ_i a_i((N_i − n p_i)² − N_i), a_i = p_i^{-2/3}, when
    (N_i) over the head cells are part of a Multinomial(n, p) (the other cells' counts absorb the
    rest).

    Mean: E[(N − np)² − N] = np(1 − p) − np = −np², so E[T] = −n Σ p_i^{4/3}.
    Variance: the cells' binomial variances (``_cell_moments``) plus, for i ≠ j, the
    multinomial covariances: the factorial moments E[Π N_i^{(r_i)}] = n^{(Σr)} Π p_i^{r_i} give
    Cov = (2n² − 6n) p_i² p_j² (checked at n = 1: −4p_i²p_j², and by simulation in the tests).
    Skewness: the cells' binomial third central moments (``_cell_moments``) over the
    variance^{3/2}; the multinomial's cross third cumulants are left out (the tests check the
    result against simulation, peaked and flat laws).
    """
    nf = float(n)
    var_cells, third_cells, ap2 = _cell_moments(p, n)
    mean = -nf * math.fsum(ap2)
    cross = (2.0 * nf * nf - 6.0 * nf) * (math.fsum(ap2) ** 2 - math.fsum(ap2 * ap2))
    var = math.fsum(var_cells) + cross
    return mean, var, math.fsum(third_cells) / var ** 1.5


def _shape_cut(sorted_p: np.ndarray, n: int) -> int:
    """The fewest rarest cells (``sorted_p`` ascending) to leave out of the head so that the
    head's null skewness is ≤ HEAD_MAX_SKEW and a double hit on any head cell, 2·p_i^{-2/3}, is
    ≤ HEAD_MAX_JUMP null sd (``_null_moments`` for every cut at once, by suffix sums); the
    number of cells minus 1 when no cut qualifies."""
    nf = float(n)
    var_cells, third_cells, ap2 = _cell_moments(sorted_p, n)
    suffix = lambda x: np.cumsum(x[::-1])[::-1]  # noqa: E731  Σ over cells k..end, per k
    s_ap2 = suffix(ap2)
    var = suffix(var_cells) + (2.0 * nf * nf - 6.0 * nf) * (s_ap2 ** 2 - suffix(ap2 * ap2))
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = ((suffix(third_cells) <= HEAD_MAX_SKEW * var * sd)
              & (2.0 * sorted_p ** (-2.0 / 3.0) <= HEAD_MAX_JUMP * sd) & (var > 0.0))
    good = np.flatnonzero(ok)
    return int(good[0]) if good.size else sorted_p.size - 1


def _edgeworth_sf(z: float, skew: float) -> float:
    """One-term Edgeworth upper tail P(Z > z) ≈ Φ̄(z) + φ(z)·skew·(z² − 1)/6, clipped to [0, 1]."""
    return float(min(1.0, max(0.0, stats.norm.sf(z) + stats.norm.pdf(z) * skew * (z * z - 1.0) / 6.0)))


def _edgeworth_isf(alpha: float, skew: float) -> float:
    """The z whose Edgeworth upper tail is alpha (the head's critical value in null sd)."""
    z0 = float(stats.norm.isf(alpha))
    lo, hi = z0 - 1.0, z0 + 3.0
    while _edgeworth_sf(hi, skew) > alpha:
        hi += 2.0
    return optimize.brentq(lambda z: _edgeworth_sf(z, skew) - alpha, lo, hi, xtol=1e-10)


# ----------------------------------------------------------------------------- power


def _head_detectable_l1(p: np.ndarray, n: int, alpha: float, power: float = POWER) -> tuple[float, float]:
    """(D_lf, D_wc): head ℓ1 deviations Σ_H |q_i − p_i| that the head test detects with
    probability ≥ ``power`` (normal approximation of T under q), at the least favourable
    direction (D_lf) and for every q (D_wc, worst case).

    With Δ = q − p on the head, a_i = p_i^{-2/3}, M = Σ Δ_i²/p_i^{2/3}, W = Σ p_i^{2/3}:
      shift E_q[T] − E_p[T] = n(n−1)M − 2n Σ p_i^{1/3}Δ_i (exact, multinomial);
      Var_q[T] ≈ Σ a_i²(2n²q_i² + 4n³q_iΔ_i²) (Poissonized).
    Power ≥ ``power`` when shift − c ≥ z_power·√Var, c the critical value above the null mean.

    Least favourable direction: Cauchy–Schwarz gives M ≥ D²/W, with equality iff
    |Δ_i| = κ p_i^{2/3}, κ = D/W — the deviation whose mean shift is smallest for its ℓ1 size
    (the analogue of the G-test's least favourable deviation, oracle.gtest_power module doc).  There
    Σ p^{1/3}|Δ| = κ, Σ a²q² ≤ W + 2κ Σ p^{1/3} + κ²|H| and Σ a²qΔ² ≤ κ²(1 + D), and D_lf is
    the smallest D meeting the condition (bisection; the margin increases with D).

    Worst case over q: shift ≥ n(n−1)M − 2n √(M Σ p^{4/3}),
    Var ≤ 2n²(W + 2√(M|H|) + M p_min^{-2/3}) + 4n³(p_max^{1/3} M + p_min^{-1/3} M^{3/2})
    (Cauchy–Schwarz; p_min ≤ p_i ≤ p_max on the head; Δ_i³ ≤ 0 where mass is removed); the
    margin is found ≥ 0 for all M ≥ M* (grid, then bisection) and D_wc = √(M* W).  These bounds
    combine the smallest mean with the largest variance, which no single q attains, so D_wc is
    loose (benchmarks/IDENTITY.md).  ``inf`` when no deviation qualifies.
    """
    _, var0, skew = _null_moments(p, n)
    c = _edgeworth_isf(alpha, skew) * math.sqrt(var0)
    zb = float(stats.norm.isf(1.0 - power))
    nf = float(n)
    W = math.fsum(p ** (2.0 / 3.0))
    S13 = math.fsum(p ** (1.0 / 3.0))
    S43 = math.fsum(p ** (4.0 / 3.0))
    H = float(p.size)
    pmin, pmax = float(p.min()), float(p.max())

    def f_lf(D):
        k = D / W
        shift = nf * (nf - 1.0) * k * k * W - 2.0 * nf * k
        var = 2.0 * nf * nf * (W + 2.0 * k * S13 + k * k * H) + 4.0 * nf ** 3 * k * k * (1.0 + D)
        return shift - c - zb * math.sqrt(var)

    d_lf = math.inf
    if f_lf(2.0) >= 0.0:
        lo = 1e-12
        d_lf = 2.0 if f_lf(lo) >= 0 else optimize.brentq(f_lf, lo, 2.0, rtol=1e-10)

    def f_wc(M):
        shift = nf * (nf - 1.0) * M - 2.0 * nf * np.sqrt(M * S43)
        var = (2.0 * nf * nf * (W + 2.0 * np.sqrt(M * H) + M * pmin ** (-2.0 / 3.0))
               + 4.0 * nf ** 3 * (pmax ** (1.0 / 3.0) * M + pmin ** (-1.0 / 3.0) * M ** 1.5))
        return shift - c - zb * np.sqrt(var)

    m_max = 4.0 * pmin ** (-2.0 / 3.0)  # Σ Δ²/p^{2/3} ≤ (Σ|Δ|)²/p_min^{2/3} ≤ 4/p_min^{2/3}
    grid = np.geomspace(1e-18, m_max, 400)
    bad = np.flatnonzero(f_wc(grid) < 0)
    if bad.size == 0:
        d_wc = math.sqrt(grid[0] * W)
    elif bad[-1] == grid.size - 1:
        d_wc = math.inf
    else:
        d_wc = math.sqrt(optimize.brentq(f_wc, grid[bad[-1]], grid[bad[-1] + 1], rtol=1e-10) * W)
    return d_lf, d_wc


def _tail_critical(n: int, mass: float, alpha: float) -> int:
    """Smallest k with P(Binomial(n, mass) ≥ k) ≤ alpha (the tail test rejects at counts ≥ k)."""
    k = int(stats.binom.isf(alpha, n, mass)) + 1
    while k > 0 and stats.binom.sf(k - 2, n, mass) <= alpha:
        k -= 1
    while stats.binom.sf(k - 1, n, mass) > alpha:
        k += 1
    return k


def _tail_detectable_excess(n: int, mass: float, alpha: float, power: float = POWER) -> float:
    """t*: the tail test (exact binomial) rejects with probability ≥ power whenever the tail's
    sampled mass is ≥ p(S) + t* (its power is increasing in that mass)."""
    if mass <= 0.0:
        return 0.0
    k = _tail_critical(n, mass, alpha)
    if k > n:
        return 1.0 - mass
    g = lambda x: stats.binom.sf(k - 1, n, x) - power  # noqa: E731
    if g(1.0) < 0:
        return 1.0 - mass
    return optimize.brentq(g, mass, 1.0, xtol=1e-14) - mass


@dataclass(frozen=True)
class IdentityPower:
    """What :func:`identity_test` states for a law and n before sampling (:func:`identity_power`).

    Attributes:
        n, alpha, power: the sample size, the family's false-alarm rate, the power (0.99).
        support: cells of positive probability.  head_cells: cells in the head statistic.
        tail_mass: p(S), the tail's exact mass (inside δ); tail_budget: the candidate of
            ``TAIL_MASSES`` (or the given tail_mass) that chose it.  tail_excess: t*, the tail mass excess
            its binomial test detects with ``power`` (at α/2; the head at α/2 too, at α without a tail).
        head_l1: D*, the head ℓ1 deviation the head test detects with ``power`` (at α/2) in
            the least favourable direction; head_l1_worst_case: for every direction
            (``_head_detectable_l1``).
        detectable_tv: δ = (D* + 2 p(S) + t*)/2, capped at 1, on the whole un-pooled law: every
            law at TV ≥ δ whose head deviation points in the least favourable direction (the
            one of smallest mean shift for its size), or that moves ≥ t* onto the tail, is
            detected with ``power``.  The convention of the G-test's δ (oracle.gtest_power).
        detectable_tv_worst_case: the same with head_l1_worst_case: every law at TV ≥ it,
            whatever its direction (a loose bound).
    """

    n: int
    alpha: float
    power: float
    support: int
    head_cells: int
    tail_mass: float
    tail_excess: float
    head_l1: float
    detectable_tv: float
    head_l1_worst_case: float = math.inf
    detectable_tv_worst_case: float = 1.0
    tail_budget: float = 0.0


@functools.lru_cache(maxsize=16)  # keys hold the law (up to 6 MB at 5 × 151,936 outcomes)
def _power_cached(key: bytes, n: int, alpha: float, power: float, tail_mass) -> IdentityPower:
    probs = np.frombuffer(key, dtype=np.float64)
    return _power_for(probs, n, alpha, power, tail_mass)


def _power_for(probs_pos: np.ndarray, n: int, alpha: float, power: float, tail_mass) -> IdentityPower:
    """The best (smallest δ) of the candidate tail masses, or the given one."""
    candidates = TAIL_MASSES if tail_mass is None else (float(tail_mass),)
    best = None
    for tm in candidates:
        sp = _split(probs_pos, tm, n)
        has_tail = sp.tail_index.size > 0
        if best is not None and sp.p_head.size == best.head_cells:
            continue  # the same split as a smaller budget
        a_head = alpha / 2.0 if has_tail else alpha
        d_head, d_wc = (_head_detectable_l1(sp.p_head, n, a_head, power) if sp.p_head.size >= 2
                        else (math.inf, math.inf))
        t_star = _tail_detectable_excess(n, sp.tail_mass, alpha / 2.0, power) if has_tail else 0.0
        res = IdentityPower(n=n, alpha=alpha, power=power, support=int(probs_pos.size),
                            head_cells=int(sp.p_head.size), tail_mass=sp.tail_mass,
                            tail_excess=t_star, head_l1=d_head,
                            detectable_tv=min(1.0, (d_head + 2.0 * sp.tail_mass + t_star) / 2.0),
                            head_l1_worst_case=d_wc,
                            detectable_tv_worst_case=min(1.0, (d_wc + 2.0 * sp.tail_mass + t_star) / 2.0),
                            tail_budget=tm)
        if best is None or res.detectable_tv < best.detectable_tv:
            best = res
    return best


@dataclass(frozen=True)
class _Prepared:
    """Everything identity_test needs that depends on the law and n only (cached)."""

    power: IdentityPower
    split: _Split
    weights: np.ndarray  # p_head^{-2/3}
    mean: float
    sd: float
    skew: float


@functools.lru_cache(maxsize=16)
def _prepared(key: bytes, n: int, alpha: float, tail_mass) -> _Prepared:
    probs = np.frombuffer(key, dtype=np.float64)
    pw = _power_cached(key, n, alpha, POWER, tail_mass)
    sp = _split(probs, pw.tail_budget, n)
    mean, var, skew = _null_moments(sp.p_head, n)
    return _Prepared(pw, sp, sp.p_head ** (-2.0 / 3.0), mean, math.sqrt(var), skew)


def _check_n(n) -> int:
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    return int(n)


def _check_tail_mass(tail_mass):
    if tail_mass is None:
        return None
    tm = float(tail_mass)
    if not (0.0 <= tm < 1.0):
        raise ValueError(f"tail_mass must lie in [0, 1) or be None (chosen), got {tail_mass!r}")
    return tm


def identity_power(law, n: int, alpha: float, power: float = POWER, tail_mass=None) -> IdentityPower:
    """The δ that :func:`identity_test` states for ``law`` and ``n`` (module doc), before sampling.

    Args:
        law: mapping ``{outcome: prob}`` or 1-D float array summing to 1.
        n: sample size, integer ≥ 1.  alpha: the test's false-alarm rate, in (0, 1).
        power: in (alpha, 1), default 0.99.
        tail_mass: the tail's largest mass, in [0, 1); None (default): the candidate of
            ``TAIL_MASSES`` giving the smallest δ (chosen from the law and n only).
    Returns:
        :class:`IdentityPower`.
    Raises:
        ValueError: law not a probability law, n < 1, alpha or power out of range, tail_mass
            outside [0, 1).
    Source: module doc (Valiant & Valiant 2014; Balakrishnan & Wasserman 2019).
    """
    alpha = check_alpha(alpha)
    power = float(power)
    if not (alpha < power < 1.0):
        raise ValueError(f"power must lie in (alpha, 1), got {power!r}")
    n = _check_n(n)
    tail_mass = _check_tail_mass(tail_mass)
    _, probs = _law_arrays(law)
    pos = np.ascontiguousarray(probs[probs > 0.0])
    if pos.size < 2:
        return IdentityPower(n=n, alpha=alpha, power=power, support=int(pos.size), head_cells=int(pos.size),
                             tail_mass=0.0, tail_excess=0.0, head_l1=math.inf, detectable_tv=1.0)
    return _power_cached(pos.tobytes(), n, alpha, power, tail_mass)


# ----------------------------------------------------------------------------- the test


@dataclass(frozen=True)
class IdentityTestResult:
    """Result of :func:`identity_test` (in the style of ``oracle.gtest.GTestResult``).

    Attributes:
        statistic: z = (T − E_p[T]) / sd_p[T] of the head statistic (``inf`` on a zero-cell
            violation).
        pvalue: min(1, 2·min(pvalue_head, pvalue_tail)) with a tail, pvalue_head without; 0 on
            a zero-cell violation.
        n: sample size (all counts, those on zero-probability outcomes included).
        alpha: false-alarm rate.  passed: both components passed and no zero-cell violation.
        detectable_tv: δ on the whole law at power 0.99 (:func:`identity_power`, module doc).
        pvalue_head: Edgeworth-corrected upper tail of z (approximate; module doc).
        pvalue_tail: exact binomial upper tail of the tail's count (1 without a tail).
        head_cells: cells in T.  tail_mass: p(S) (inside δ).  tail_observed, tail_expected:
            the tail's count and n·p(S).
        skewness: of T under p (enters the Edgeworth term).
        zero_cell_violations: outcomes of probability 0 (or absent) with a positive count.
        reason: empty when the test ran normally, otherwise why it failed or is uninformative.
    """

    statistic: float
    pvalue: float
    n: int
    alpha: float
    passed: bool
    detectable_tv: float
    pvalue_head: float
    pvalue_tail: float
    head_cells: int
    tail_mass: float
    tail_observed: int
    tail_expected: float
    skewness: float
    zero_cell_violations: tuple
    reason: str = ""

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        s = (f"identity test {verdict}: z={self.statistic:.4g} over {self.head_cells:,} head cells, "
             f"p={self.pvalue:.4g} (head {self.pvalue_head:.3g}, tail {self.pvalue_tail:.3g}: "
             f"{self.tail_observed} of {self.tail_expected:.4g} expected, mass {self.tail_mass:.3g}), "
             f"alpha={self.alpha:g}, n={self.n}, detectable TV={self.detectable_tv:.4g} at power "
             f"0.99 on the whole law")
        if self.reason:
            s += f"; {self.reason}"
        return s


def _counts_array(counts, outcomes, size: int) -> tuple[np.ndarray, tuple]:
    """(float64 counts aligned with the law, outcomes outside the law's support counted)."""
    if outcomes is None:
        if isinstance(counts, Mapping):
            c = as_counts(counts)
            arr = np.zeros(size)
            bad = []
            for o, k in c.items():
                if isinstance(o, (int, np.integer)) and 0 <= o < size:
                    arr[int(o)] += k
                elif k > 0:
                    bad.append(o)
            return arr, tuple(bad)
        arr = np.asarray(counts)
        if arr.ndim != 1 or arr.size != size:
            raise ValueError(f"counts must be a mapping or a 1-D array of the law's length {size}, "
                             f"got shape {arr.shape}")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.floor(arr)):
            raise ValueError("counts must hold non-negative integers")
        return arr.astype(np.float64), ()
    c = as_counts(counts)
    pos = {o: i for i, o in enumerate(outcomes)}
    arr = np.zeros(size)
    bad = []
    for o, k in c.items():
        i = pos.get(o)
        if i is None:
            if k > 0:
                bad.append(o)
        else:
            arr[i] += k
    return arr, tuple(bad)


def identity_test(counts, law, alpha: float, tail_mass=None) -> IdentityTestResult:
    """Test that ``counts`` are a sample of size n = Σ counts from ``law`` (module doc).

    Args:
        counts: mapping ``{outcome: int ≥ 0}`` or, for an array law, a 1-D integer array of its
            length (outcome = index; a mapping's integer keys are indices then).
        law: the exact law, mapping ``{outcome: prob}`` or 1-D float64 array, summing to 1.
        alpha: false-alarm rate, in (0, 1).
        tail_mass: as in :func:`identity_power` (None: chosen from the law and n).
    Returns:
        :class:`IdentityTestResult`.
    Raises:
        ValueError: negative or non-integer counts, n < 1, law not a probability law, alpha
            outside (0, 1), tail_mass outside [0, 1).
    Source: module doc.
    """
    alpha = check_alpha(alpha)
    tail_mass = _check_tail_mass(tail_mass)
    outcomes, probs = _law_arrays(law)
    x, bad = _counts_array(counts, outcomes, probs.size)
    zero = probs == 0.0
    if np.any(zero & (x > 0)):
        idx = np.flatnonzero(zero & (x > 0))
        bad = bad + tuple((int(i) if outcomes is None else outcomes[i]) for i in idx)
    n = (sum(as_counts(counts).values()) if isinstance(counts, Mapping) else int(x.sum()))
    if n < 1:
        raise ValueError(f"counts must total at least 1 (n >= 1), got n = {n}")
    pos_mask = ~zero
    p_pos = np.ascontiguousarray(probs[pos_mask])
    x_pos = x[pos_mask]
    if p_pos.size < 2:
        common = dict(n=n, alpha=alpha, detectable_tv=1.0, head_cells=int(p_pos.size), tail_mass=0.0,
                      zero_cell_violations=bad)
        if bad:
            return _violation(bad, n, 0.0, common)
        return IdentityTestResult(statistic=0.0, pvalue=1.0, passed=True, pvalue_head=1.0, pvalue_tail=1.0,
                                  tail_observed=0, tail_expected=0.0, skewness=math.nan,
                                  reason="one outcome of positive probability: the test has no information",
                                  **common)
    prep = _prepared(p_pos.tobytes(), n, alpha, tail_mass)
    pw, sp = prep.power, prep.split
    common = dict(n=n, alpha=alpha, detectable_tv=pw.detectable_tv, head_cells=pw.head_cells,
                  tail_mass=pw.tail_mass, zero_cell_violations=bad)
    if bad:
        return _violation(bad, n, pw.tail_mass, common)
    has_tail = sp.tail_index.size > 0
    ph, xh = sp.p_head, x_pos[sp.head_index]
    if ph.size >= 2:
        T = float(np.sum(((xh - n * ph) ** 2 - xh) * prep.weights))
        z = (T - prep.mean) / prep.sd
        p_head = _edgeworth_sf(z, prep.skew)
    else:  # no head the expansion describes (``_shape_cut``): the tail test alone, δ stated 1
        z, p_head = 0.0, 1.0
    tail_obs = int(x_pos[sp.tail_index].sum()) if has_tail else 0
    if has_tail:
        p_tail = float(stats.binom.sf(tail_obs - 1, n, sp.tail_mass)) if tail_obs > 0 else 1.0
        pvalue = min(1.0, 2.0 * min(p_head, p_tail))
        passed = p_head >= alpha / 2.0 and p_tail >= alpha / 2.0
    else:
        p_tail, pvalue, passed = 1.0, p_head, p_head >= alpha
    return IdentityTestResult(statistic=z, pvalue=pvalue, passed=passed, pvalue_head=p_head,
                              pvalue_tail=p_tail, tail_observed=tail_obs,
                              tail_expected=n * sp.tail_mass, skewness=prep.skew, **common)


def _violation(bad: tuple, n: int, tail_mass: float, common: dict) -> IdentityTestResult:
    return IdentityTestResult(statistic=math.inf, pvalue=0.0, passed=False, pvalue_head=0.0,
                              pvalue_tail=0.0, tail_observed=0, tail_expected=n * tail_mass,
                              skewness=math.nan,
                              reason=f"counts on {len(bad)} zero-probability outcome(s)", **common)


# ----------------------------------------------------------------------------- reference bound


def instance_optimal_samples(law, eps: float) -> float:
    """Valiant & Valiant's instance-optimal sample count ‖p_{-max}^{-ε}‖_{2/3} / ε² (FOCS 2014,
    Theorem 1: identity testing at TV ε needs Θ(max(1/ε, ‖p_{-max}^{-Θ(ε)}‖_{2/3}/ε²)) samples),
    with the constants taken as 1: p_{-max}^{-ε} removes the largest probability and the
    smallest ones of total mass ≤ ε; ‖v‖_{2/3} = (Σ v_i^{2/3})^{3/2}.

    Args:
        law: mapping or 1-D array.  eps: TV distance in (0, 1).
    Returns:
        float, max(1/ε, ‖p_{-max}^{-ε}‖_{2/3}/ε²).
    Raises:
        ValueError: law not a probability law, eps outside (0, 1).
    """
    eps = float(eps)
    if not (0.0 < eps < 1.0):
        raise ValueError(f"eps must lie in (0, 1), got {eps!r}")
    _, probs = _law_arrays(law)
    p = np.sort(probs[probs > 0.0])[:-1]  # without the max
    k = int(np.searchsorted(np.cumsum(p), eps, side="right"))
    rest = p[k:]
    norm = math.fsum(rest ** (2.0 / 3.0)) ** 1.5 if rest.size else 0.0
    return max(1.0 / eps, norm / eps ** 2)


# ----------------------------------------------------------------------------- simulation


def false_alarm_rate(law, n: int, alpha: float, reps: int, seed: int = 0, tail_mass=None) -> float:
    """Fraction of ``reps`` multinomial samples of size ``n`` from the array law ``law`` that
    :func:`identity_test` rejects at ``alpha`` (the measured false-alarm rate)."""
    return detection_rate(law, law, n, alpha, reps, seed, tail_mass)


def detection_rate(planted, law, n: int, alpha: float, reps: int, seed: int = 0, tail_mass=None) -> float:
    """Fraction of ``reps`` multinomial samples of size ``n`` from the array law ``planted``
    that :func:`identity_test` against the array law ``law`` rejects at ``alpha``.

    Raises:
        ValueError: planted and law of different shapes, reps < 1, and as :func:`identity_test`.
    """
    planted = np.asarray(planted, dtype=np.float64)
    law = np.asarray(law, dtype=np.float64)
    if planted.shape != law.shape or planted.ndim != 1:
        raise ValueError(f"planted and law must be 1-D of one shape, got {planted.shape}, {law.shape}")
    if isinstance(reps, bool) or int(reps) != reps or reps < 1:
        raise ValueError(f"reps must be an integer >= 1, got {reps!r}")
    planted = planted / planted.sum()
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(int(reps)):
        hits += not identity_test(rng.multinomial(int(n), planted), law, alpha, tail_mass).passed
    return hits / int(reps)


def least_favourable(law, tv: float, n: int, alpha: float, seed: int = 0) -> np.ndarray:
    """The head deviation of smallest mean shift for its size (``_head_detectable_l1``): q = p + Δ
    with |Δ_i| ∝ p_i^{2/3} on the head cells of ``identity_test(…, law, alpha)`` at n, signs
    drawn at random (seeded) and the two sides scaled to carry ``tv`` each, so TV(q, p) = ``tv``
    exactly and the tail is untouched.  The planted law at which ``detectable_tv`` is checked.

    Args:
        law: 1-D float64 array.  tv: in (0, 1).  n, alpha: those of the test.  seed: for the signs.
    Returns:
        float64 array q (Σ = 1, ≥ 0).
    Raises:
        ValueError: tv outside (0, 1), or the decreasing side holds less than ``tv``.
    Cells that would go negative are emptied and their share spread over the others (then Δ is
    no longer exactly ∝ p^{2/3} there, and the mean shift is larger).
    """
    tv = float(tv)
    if not (0.0 < tv < 1.0):
        raise ValueError(f"tv must lie in (0, 1), got {tv!r}")
    p = np.asarray(law, dtype=np.float64)
    pos = np.flatnonzero(p > 0.0)
    sp = _prepared(np.ascontiguousarray(p[pos]).tobytes(), _check_n(n), check_alpha(alpha), None).split
    head = pos[sp.head_index]
    w = p[head] ** (2.0 / 3.0)
    sign = np.random.default_rng(seed).random(head.size) < 0.5
    q = p.copy()
    up, down = w * sign, w * ~sign
    ph = p[head]
    # decrease ∝ p^{2/3}, capped at each cell's mass (a cell emptied keeps 0), the rest spread
    # over the uncapped cells until the side gives up tv
    dec = np.zeros(head.size)
    free = ~sign
    for _ in range(64):
        need = tv - dec.sum()
        if need <= 1e-15 * tv or not free.any():
            break
        dec[free] += need * down[free] / down[free].sum()
        over = dec > ph
        dec[over] = ph[over]
        free &= ~over
    if abs(dec.sum() - tv) > 1e-12:
        raise ValueError(f"tv = {tv} exceeds the mass of the decreasing side")
    q[head] += tv * up / up.sum() - dec
    return q
