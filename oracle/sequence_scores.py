"""Directional tests of sampled sequences: each knows the direction of one defect engines ship.

The omnibus PIT test (``oracle.sequence_test``) sees any deviation but pays for that generality
in samples.  These tests each aim at one family of defects and run on the per-token records of
``oracle.sequence_records`` (whole laws or top-k coarsened laws alike):

- **temperature** — a sampler at T' instead of T draws from p^β / Z(β), β = T / T'.  The score of
  β at β = 1 is s(x) = log p(x) − E_p[log p], whose sum over tokens is also the Neyman–Pearson
  statistic of that one-parameter exponential family (uniformly most powerful one-sided; the test
  is two-sided).  Exact null mean 0 and variance Var_p(log p) per token (from the record).
- **position shift** — a sampler that reads the law one position early or late (stale logits)
  draws from p_{t−1} instead of p_t for some tokens.  Score g(x) = log(1 − λ + λ·p_{t−1}(x)/p_t(x)),
  the log-likelihood ratio of the mixture with weight λ = ``sequence_records.MIX``; one-sided
  (such a sampler raises its mean).
- **draft leak** — a residual or acceptance defect that emits the draft's law q with some weight:
  the same score with q_t in place of p_{t−1} (only where the draft's law is known).
- **truncation** — top-p / top-k / min-p left on: the number of emitted tokens outside the top-p
  nucleus (ρ in ``sequence_records.NUCLEI``), and outside the top set (a top-k law's k cells, a
  whole law's ``TOP_SET`` most probable tokens), each against its exact expectation
  Σ_t (1 − M_t) and variance Σ_t M_t (1 − M_t); one-sided (a silent truncation drives it to 0).

The statistic of every test is a sum of martingale differences with exact conditional means and
variances (each token's law is known given its past): z = Σ (g − m) / √Σ v is asymptotically
N(0, 1) (martingale CLT, self-normalised: Hall & Heyde 1980, Cor. 3.1).  The normal
approximation's real false-alarm rate and the power against planted defects are measured by
simulation from exact laws (tests/oracle/test_sequence_scores.py, benchmarks/SEQUENCE_POWER.md).

Float tolerance η.  The engine's law at a token may differ from the reference's by TV ≤ η (float
rounding): E[g] then moves by at most η·range(g) per token (the record's ``*r`` field), so the
test subtracts Σ η·range from |Σ (g − m)| before standardising (the nucleus count: η per token).
Scores clip log-probabilities at ``sequence_records.LOG_FLOOR`` so that the range stays finite.

Detectable deviations (power 0.99, normal approximation, linear in the defect's size):
temperature |Δβ| ≥ ((z_α + z_0.99)·√V + B) / V with V = Σ Var_p(log p), B the tolerance's bias
(at T = 1, |ΔT| ≈ |Δβ|); shift or leak weight ε ≥ ((z_α + z_0.99)·√V + B) / Σ (E_q[g] − E_p[g]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.inputs import check_alpha
from spectr_gbv.oracle.sequence_records import NUCLEI

# the truncation test's levels: the top-p nuclei, then the top set (sequence_records' ``nu``)
LEVELS = tuple(f"top-p {rho:g}" for rho in NUCLEI) + ("top set",)

DEFAULT_POWER = 0.99
# test name → (record key prefix, sidedness: +1 upper, -1 lower, 0 two-sided)
SCORES = {"temperature": ("t", 0), "position shift": ("s", 1), "draft leak": ("d", 1)}


@dataclass(frozen=True)
class DirectionalResult:
    """Result of ``score_test`` or ``nucleus_test``.

    Attributes:
        name: "temperature", "position shift", "draft leak" or "truncation (top-p ρ)".
        statistic: z, standardised as the module doc says (NaN when no token carries the score).
        pvalue: its p-value after the tolerance (1 when nothing was tested).
        n: tokens that carried the score.
        observed, expected: Σ g and Σ m (the nucleus test: tokens outside, and their expectation).
        variance: Σ v under the null.
        bias: the tolerance's bound on |E[observed] − expected|.
        alpha: this test's false-alarm rate; sided: +1, −1 or 0 (two-sided).
        detectable: the deviation caught with power 0.99 (module doc; its unit in ``unit``), inf
            when the data cannot give it.
        unit: what ``detectable`` measures ("|Δβ| (≈ |ΔT|/T)", "weight ε", "caught: 1/0").
        passed: pvalue ≥ alpha.
    """

    name: str
    statistic: float
    pvalue: float
    n: int
    observed: float
    expected: float
    variance: float
    bias: float
    alpha: float
    sided: int
    detectable: float
    unit: str
    passed: bool


def _pvalue(diff: float, variance: float, bias: float, sided: int) -> tuple[float, float]:
    """(z, p) of the excess ``diff`` = observed − expected after the bias, on the side asked."""
    if variance <= 0:
        return (0.0, 1.0) if abs(diff) <= bias + 1e-12 else (math.copysign(math.inf, diff), 0.0)
    sd = math.sqrt(variance)
    z = diff / sd
    if sided > 0:
        return z, float(sps.norm.sf(max(0.0, diff - bias) / sd))
    if sided < 0:
        return z, float(sps.norm.sf(max(0.0, -diff - bias) / sd))
    return z, float(min(1.0, 2 * sps.norm.sf(max(0.0, abs(diff) - bias) / sd)))


def _z(alpha: float, sided: int) -> float:
    return float(sps.norm.isf(alpha / 2 if sided == 0 else alpha))


def score_test(records, name: str, alpha: float, tolerance: float = 0.0,
               power: float = DEFAULT_POWER) -> DirectionalResult:
    """A directional score test (module doc) over every record that carries its score.

    Args:
        records: an iterable of per-token records (``oracle.sequence_records``), any number of
            sequences flattened; impossible tokens are skipped (the omnibus test fails them).
        name: a key of ``SCORES``.
        alpha: this test's false-alarm rate, in (0, 1).
        tolerance: η in [0, 1): per-token TV put down to float rounding.
        power: the power at which ``detectable`` is stated.
    Returns:
        ``DirectionalResult``; with no record carrying the score, an empty pass (n = 0).
    Raises:
        ValueError: unknown name, alpha, power or tolerance out of range.
    """
    if name not in SCORES:
        raise ValueError(f"name must be one of {sorted(SCORES)}, got {name!r}")
    alpha = check_alpha(alpha)
    power = check_alpha(power, "power")
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    key, sided = SCORES[name]
    g = m = v = r = q = 0.0
    n = 0
    for rec in records:
        if rec.get("imp") or f"{key}g" not in rec:
            continue
        n += 1
        g += rec[f"{key}g"]
        m += rec[f"{key}m"]
        v += rec[f"{key}v"]
        r += rec[f"{key}r"]
        q += rec.get(f"{key}q", math.nan) if key != "t" else 0.0
    unit = "|Δβ| (≈ |ΔT|/T)" if key == "t" else "weight ε"
    if n == 0:
        return DirectionalResult(name, math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, sided, math.inf, unit, True)
    bias = float(tolerance) * r
    z, p = _pvalue(g - m, v, bias, sided)
    need = _z(alpha, sided) * math.sqrt(v) + sps.norm.ppf(power) * math.sqrt(v) + bias
    if key == "t":
        det = need / v if v > 0 else math.inf
    else:
        drift = q - m
        det = need / drift if drift > 0 and math.isfinite(drift) else math.inf
    return DirectionalResult(name, float(z), p, n, float(g), float(m), float(v), bias, alpha, sided,
                             float(det), unit, p >= alpha)


def nucleus_test(records, alpha: float, tolerance: float = 0.0) -> DirectionalResult:
    """The truncation test (module doc): tokens outside each level of ``LEVELS`` (the top-p nuclei
    of ``NUCLEI``, then the top set), each level at α / len(LEVELS) (Bonferroni); the result is the
    level with the smallest p-value, its p-value multiplied by the number of levels.

    Args:
        records: per-token records (flattened), as ``score_test``.
        alpha: the test's false-alarm rate; tolerance: η.
    Returns:
        ``DirectionalResult`` named "truncation (LEVEL)"; ``detectable`` is 1 when a sampler
        truncating at the deciding level (no token outside) would be caught at this α, else 0.
    """
    alpha = check_alpha(alpha)
    eta = float(tolerance)
    records = list(records)
    best = None
    for i, level in enumerate(LEVELS):
        out = mean = var = 0.0
        n = 0
        for rec in records:
            if rec.get("imp") or "nu" not in rec:
                continue
            m_t, o_t = rec["nu"][i]
            n += 1
            out += o_t
            mean += m_t
            var += m_t * (1.0 - m_t)
        if n == 0:
            continue
        bias = eta * n
        z, p = _pvalue(out - mean, var, bias, -1)
        p = min(1.0, p * len(LEVELS))
        _, p_zero = _pvalue(-mean, var, bias, -1)
        caught = float(min(1.0, p_zero * len(LEVELS)) < alpha)
        res = DirectionalResult(f"truncation ({level})", float(z), p, n, out, mean, var, bias, alpha,
                                -1, caught, "level caught (1) or not (0)", p >= alpha)
        if best is None or res.pvalue < best.pvalue:
            best = res
    if best is None:
        return DirectionalResult("truncation", math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, -1, 0.0,
                                 "level caught (1) or not (0)", True)
    return best


def score_drifts(records, name: str) -> np.ndarray:
    """Per-token (g − m) of one score, for records that carry it (diagnostics and simulations)."""
    key, _ = SCORES[name]
    return np.array([r[f"{key}g"] - r[f"{key}m"] for r in records if not r.get("imp") and f"{key}g" in r])
