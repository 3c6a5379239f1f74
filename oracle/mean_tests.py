"""Tests of sample means against exact means, normal approximation.

- :func:`mean_ci` (:class:`MeanCI`) — normal-approximation interval for a mean, from values or
  their sufficient statistics (:class:`MeanStats`).
- :func:`mean_within_ci` (:class:`MeanTestResult`) — z-test of a sample mean (e.g. mean τ)
  against an exact mean, with the exact variance when known.
- :func:`paired_mean_test` (:class:`PairedMeanTestResult`) — z-test of observations against
  their own exact means and variances (one exact law per observation, e.g. τ of each engine
  iteration given its rows), and :func:`paired_mean_power`, its power against a known
  alternative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from spectr_gbv.oracle.inputs import check_alpha

__all__ = ["MeanCI", "MeanStats", "MeanTestResult", "PairedMeanTestResult", "mean_ci", "mean_within_ci",
           "paired_mean_power", "paired_mean_test"]


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
