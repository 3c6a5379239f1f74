"""Directional tests of sampled sequences: each knows the direction of one defect engines ship.

The omnibus PIT test (``oracle.sequence_test``) sees any deviation but pays for that generality
in samples.  These tests each aim at one family of defects and run on the per-token records of
``oracle.sequence_records`` (whole laws or top-k coarsened laws alike):

- **temperature** — a sampler at T' instead of T draws from p^β / Z(β), β = T / T'.  With g = log p
  (clipped at ``LOG_FLOOR``), the law at β = 1 + θ is p·e^{θg − K(θ)}, K the cumulant generating
  function of g under p (record ``tk``), and e^{θ g(x) − K(θ)} its likelihood ratio against p — the
  Neyman–Pearson statistic of that one-parameter exponential family, mean 1 under p.  The test
  mixes θ over ``sequence_records.THETAS`` (both signs: two-sided) — an e-value, exact in size at
  every N (below), where the normal approximation of the score Σ (g − E_p g) it replaced
  (``score_test``, kept for comparison) over-rejected at N = 5 in its lower tail (the heavy tail
  of log p; benchmarks/SEQUENCE_SIZES.md).
- **position shift** — a sampler that reads the law one position early or late (stale logits)
  draws from p_{t−1} instead of p_t for a fraction ε of tokens: the likelihood ratio of that
  alternative, W_λ = Π_t (1 − λ + λ·p_{t−1}(x_t)/p_t(x_t)), mixed over the grid λ ∈
  ``sequence_records.LAMBDAS`` (W = the mean of the W_λ) — a test by e-value (below);
- **draft leak** — a residual or acceptance defect that emits the draft's law q with a weight ε:
  the same with q_t in place of p_{t−1} (only where the draft's law is known).
- **truncation** — top-p / top-k / min-p left on: a truncating sampler never emits a token outside
  its kept set, so at a level ℓ (the top-p nuclei of ``sequence_records.NUCLEI``, the min-p sets of
  ``MIN_PS``, the top-k sets of ``TOP_KS``, a top-k law's own list) whose mass is M_t, the
  likelihood ratio of "truncated at ℓ" against the null is in_t / M_t per token (0 for a token
  outside).  Its mixture with the null, Π_t (1 − λ + λ·in_t/M_t), has mean 1 under the null given
  the past; the test mixes λ ∈ ``TRUNCATION_LAMBDAS`` (weights ``TRUNCATION_WEIGHTS``: λ = 1, the
  full truncation, weighs half) and the levels equally — an e-value, exact in size at every N
  (below), where the normal approximation of the count it replaced over-rejected at small N and
  needed ~2.5× the samples of the likelihood-ratio test against top-p 0.95.

The score statistic of ``score_test`` is a sum of martingale differences with exact conditional
means and variances (each token's law is known given its past): z = Σ (g − m) / √Σ v is
asymptotically N(0, 1) (martingale CLT, self-normalised: Hall & Heyde 1980, Cor. 3.1), not exactly
at small N; the family runs ``temperature_test`` instead.

The shift and leak ratios are heavy-tailed (a token the target almost never emits but the stale
or draft law does has a huge ratio), where a normal approximation over-rejects at small N.  They
are tested by e-value instead: each W_λ is a non-negative martingale of mean 1 under the null (a
likelihood ratio), so is their mean W, and Ville's inequality gives P(sup W ≥ 1/α) ≤ α at every
sample size: the p-value is min(1, 1/W), exact in size with no approximation (Ville 1939; Grünwald,
de Heide & Koolen 2024, J. R. Stat. Soc. B 86:1091–1128, "Safe testing").  The mixture over λ
costs log |LAMBDAS| nats against the test that knows ε.

Float tolerance η.  The engine's law at a token may differ from the reference's by TV ≤ η_t (float
rounding; η_t = η plus the reported cells' precision ``pe``, ``sequence_records``).  An e-value
factor f with mean 1 under the reference has mean at most 1 + η_t·(max f − min f) under such a
law, and each test divides W by that bound: the temperature factor's range comes from the record's
``tx`` (g clipped at ``sequence_records.LOG_FLOOR`` keeps it finite); the truncation factor's
mean is at most 1 + λ·(min(1, M + η_t)/M − 1).  The shift and leak tests read η as a relative
error of each probability (the form rounding takes, |p'(y)/p(y) − 1| ≤ 2η, times the cells' own
1 + ``pr``): E[1 − λ + λ·r] ≤ 1 + λ·((1 + 2η)(1 + pr) − 1) per token.  ``score_test`` (kept for
comparison) subtracts Σ η_t·range from |Σ (g − m)| before standardising.

Detectable deviations (power 0.99, normal approximation, linear in the defect's size):
temperature |Δβ| ≥ min over θ of (log(|THETAS|/α) + z_0.99·|θ|·√V + θ²V/2 + pen_θ) / (|θ|·V) with
V = Σ Var_p(log p), pen_θ the tolerance's penalty (at T = 1, |ΔT| ≈ |Δβ|; the score test's was
((z_α + z_0.99)·√V + B) / V); shift or leak weight ε: the smallest over λ of the ε at which the drift
of log W_λ, Σ [(1 − ε)·E_p g_λ + ε·E_q g_λ − log(1 + 2λη)], reaches log(|LAMBDAS|/α) +
z_0.99·√(Σ Var_p g_λ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.inputs import check_alpha
from spectr_gbv.oracle.sequence_records import LAMBDAS, LEVEL_NAMES, THETAS

# the truncation test's levels (sequence_records' ``nu``): top-p nuclei, min-p sets, top-k sets, the
# top set; its mixture weights over λ (the full truncation λ = 1 weighs half: the defect servers ship)
LEVELS = LEVEL_NAMES
TRUNCATION_LAMBDAS = (1.0, 0.5, 0.1)
TRUNCATION_WEIGHTS = (0.5, 0.25, 0.25)

DEFAULT_POWER = 0.99
# the score tests (record key prefix, sidedness: 0 two-sided) and the e-value tests (key prefix)
SCORES = {"temperature": ("t", 0)}
MIXTURES = {"position shift": "s", "draft leak": "d"}
# every test whose statistic is log W (an e-value), by its name before any " (…)"
EVALUE_TESTS = ("position shift", "draft leak", "truncation", "temperature")


def e_value_p(log_w: float) -> float:
    """The p-value of an e-value, min(1, 1/W), from log W (float, nats): 1 at log W ≤ 0, 0 at
    log W ≥ 700 or +inf, else e^(−log W).  Never overflows (log W far below 0 on long runs gives 1)."""
    if log_w <= 0:
        return 1.0
    return math.exp(-log_w) if log_w < 700 else 0.0


def is_evalue(name: str) -> bool:
    """Whether the directional test ``name`` reports log W (an e-value test) rather than z."""
    return name.split(" (")[0] in EVALUE_TESTS


@dataclass(frozen=True)
class DirectionalResult:
    """Result of ``score_test``, ``mixture_test`` or ``nucleus_test``.

    Attributes:
        name: "temperature", "position shift", "draft leak" or "truncation (top-p ρ)".
        statistic: z, standardised as the module doc says (the score and nucleus tests), or log W
            (``mixture_test``: the e-value tests); NaN when no token carries the score.
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
    """The temperature score test (module doc) over every record that carries its score.

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
    records = list(records)
    n, (g, m, v, r) = _record_sums(records, key, "gmvr", 1)
    unit = "|Δβ| (≈ |ΔT|/T)"
    if n == 0:
        return DirectionalResult(name, math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, sided, math.inf, unit, True)
    g, m, v, r = float(g[0]), float(m[0]), float(v[0]), float(r[0])
    bias = sum((float(tolerance) + rec.get("pe", 0.0)) * rec[f"{key}r"] for rec in records
               if not rec.get("imp") and f"{key}g" in rec)
    z, p = _pvalue(g - m, v, bias, sided)
    need = _z(alpha, sided) * math.sqrt(v) + sps.norm.ppf(power) * math.sqrt(v) + bias
    det = need / v if v > 0 else math.inf
    return DirectionalResult(name, float(z), p, n, float(g), float(m), float(v), bias, alpha, sided,
                             float(det), unit, p >= alpha)


def temperature_detectable(variance: float, penalties, alpha: float, power: float = DEFAULT_POWER) -> float:
    """The |Δβ| the temperature e-value catches with power ``power`` (normal approximation of its
    drift): the smallest over the grid θ of (log(G/α) + z·|θ|·√V + θ²V/2 + pen_θ) / (|θ|·V), V the
    null variance Σ Var(g), pen_θ the tolerance's penalty at θ, G = |THETAS|."""
    if variance <= 0:
        return math.inf
    need = math.log(len(THETAS) / alpha)
    zb = float(sps.norm.ppf(power))
    sd = math.sqrt(variance)
    return min((need + zb * abs(th) * sd + th * th * variance / 2 + pen) / (abs(th) * variance)
               for th, pen in zip(THETAS, penalties))


def temperature_penalties(records, tolerance: float) -> np.ndarray:
    """Σ_t log(1 + η_t·a_t(θ)) per θ of ``THETAS`` (float64 [G]) over records carrying ``tk``:
    the tolerance's penalty on log W_θ (``temperature_test``)."""
    recs = [r for r in records if not r.get("imp") and "tk" in r]
    if not recs:
        return np.zeros(len(THETAS))
    th = np.asarray(THETAS)[None, :]
    K = np.array([r["tk"] for r in recs])
    gx = np.array([r["tx"] for r in recs])
    eta = float(tolerance) + np.array([r.get("pe", 0.0) for r in recs])
    hi = np.exp(np.maximum(th * gx[:, :1], th * gx[:, 1:]) - K)
    lo = np.exp(np.minimum(th * gx[:, :1], th * gx[:, 1:]) - K)
    return np.log1p(eta[:, None] * (hi - lo)).sum(axis=0)


def temperature_test(records, alpha: float, tolerance: float = 0.0,
                     power: float = DEFAULT_POWER) -> DirectionalResult:
    """The temperature test by e-value (module doc): W = the mean over θ of ``THETAS`` of
    Π_t e^{θ g(x_t) − K_t(θ)} / (1 + η_t·a_t(θ)); p = min(1, 1/W), exact at every N (Ville).

    Each factor e^{θg − K(θ)} is the likelihood ratio of the law tempered to β = 1 + θ (p^{1+θ},
    normalised; with g clipped at ``LOG_FLOOR``) against p: mean 1 under p given the past, the
    Neyman–Pearson statistic of that one-parameter family.  Under a law within TV η_t of the
    cells its mean is at most 1 + η_t·a_t(θ), a_t the factor's range over the cells (record
    ``tx``); η_t = η + the cells' precision ``pe``.

    Args:
        records: per-token records (flattened; those without ``tk``, written before this test,
            are skipped); alpha: this test's false-alarm rate; tolerance: η; power: the power at
            which ``detectable`` is stated.
    Returns:
        ``DirectionalResult`` named "temperature": statistic log W; observed Σ g, expected Σ m,
        variance Σ v; bias: the tolerance's penalty (nats) at the deciding θ; sided: the sign of
        that θ (+1: the sampler runs colder than T, β > 1; −1: hotter); detectable: |Δβ| caught
        with power ``power`` (``temperature_detectable``).  An empty pass with no record.
    Raises:
        ValueError: alpha, power or tolerance out of range.
    Source: the exponential family p^β (module doc); Ville 1939; Grünwald, de Heide & Koolen 2024.
    """
    alpha = check_alpha(alpha)
    power = check_alpha(power, "power")
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    recs = [r for r in records if not r.get("imp") and "tk" in r]
    unit = "|Δβ| (≈ |ΔT|/T)"
    if not recs:
        return DirectionalResult("temperature", math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, 0, math.inf, unit, True)
    th = np.asarray(THETAS)
    g = np.array([r["tg"] for r in recs])
    K = np.array([r["tk"] for r in recs])  # [n, G]
    pen = temperature_penalties(recs, tolerance)
    log_w_th = th * g.sum() - K.sum(axis=0) - pen
    top = float(log_w_th.max())
    log_w = top + math.log(float(np.exp(log_w_th - top).mean()))
    p = e_value_p(log_w)
    j = int(np.argmax(log_w_th))
    m = float(sum(r["tm"] for r in recs))
    v = float(sum(r["tv"] for r in recs))
    det = temperature_detectable(v, pen, alpha, power)
    return DirectionalResult("temperature", float(log_w), p, len(recs), float(g.sum()), m, v, float(pen[j]), alpha,
                             int(np.sign(THETAS[j])), float(det), unit, p >= alpha)


def _record_sums(records, key: str, fields: str, width: int) -> tuple[int, list[np.ndarray]]:
    """(n, [Σ ``{key}{f}`` for f in ``fields``]) over the possible records carrying ``{key}{fields[0]}``;
    each field a number (width 1) or a list of ``width`` numbers."""
    n, sums = 0, [np.zeros(width) for _ in fields]
    for rec in records:
        if rec.get("imp") or f"{key}{fields[0]}" not in rec:
            continue
        n += 1
        for total, f in zip(sums, fields):
            total += rec[f"{key}{f}"]
    return n, sums


def mixture_sums(records, key: str) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(n, Σ e, Σ m, Σ v, Σ q) per λ of ``LAMBDAS`` over the records carrying ``{key}e``."""
    n, (e, m, v, q) = _record_sums(records, key, "emvq", len(LAMBDAS))
    return n, e, m, v, q


def mixture_detectable(n: int, m, v, q, alpha: float, tolerance: float, power: float = DEFAULT_POWER) -> float:
    """The weight ε a mixture e-value test catches with power ``power`` (module doc), from the
    sums over n tokens of each λ's null mean ``m``, null variance ``v`` and alternative mean ``q``."""
    need = math.log(len(LAMBDAS) / alpha)
    zb = float(sps.norm.ppf(power))
    best = math.inf
    for lam, mm, vv, qq in zip(LAMBDAS, m, v, q):
        gap = qq - mm
        if gap <= 0:
            continue
        eps = (need + zb * math.sqrt(max(vv, 0.0)) + n * math.log1p(2 * lam * tolerance) - mm) / gap
        if 0 < eps <= 1:
            best = min(best, eps)
    return best


def mixture_test(records, name: str, alpha: float, tolerance: float = 0.0,
                 power: float = DEFAULT_POWER) -> DirectionalResult:
    """The position-shift or draft-leak test by e-value (module doc): W = mean over λ of
    Π_t (1 − λ + λ·r_t) / (1 + 2λη); p-value min(1, 1/W), exact in size by Ville's inequality.

    Args:
        records: per-token records (flattened); name: a key of ``MIXTURES``; alpha: this test's
            false-alarm rate; tolerance: η (module doc); power: ``detectable``'s.
    Returns:
        ``DirectionalResult``: ``statistic`` log W, ``observed`` the largest Σ_t log(1 − λ + λ r_t)
        over λ, ``expected`` its null mean, ``variance`` its null variance, ``detectable`` the
        weight ε caught with power 0.99 (normal approximation of the drift); n = 0 (an empty pass)
        when no record carries the ratios.
    Raises:
        ValueError: unknown name, alpha or tolerance out of range.
    """
    if name not in MIXTURES:
        raise ValueError(f"name must be one of {sorted(MIXTURES)}, got {name!r}")
    alpha = check_alpha(alpha)
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    records = list(records)
    key = MIXTURES[name]
    n, e, m, v, q = mixture_sums(records, key)
    if n == 0:
        return DirectionalResult(name, math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, 1, math.inf, "weight ε", True)
    # E[1 − λ + λ r] ≤ 1 + λ·((1 + 2η)(1 + pr) − 1): η the engine's, pr the reported cells' precision
    rel = np.array([(1 + 2 * float(tolerance)) * (1 + rec.get("pr", 0.0)) - 1 for rec in records
                    if not rec.get("imp") and f"{key}e" in rec])
    penalty = np.array([float(np.log1p(lam * rel).sum()) for lam in LAMBDAS])
    log_w = e - penalty
    top = float(log_w.max())
    log_mean = top + math.log(float(np.exp(log_w - top).mean()))
    p = e_value_p(log_mean)
    j = int(np.argmax(log_w))
    det = mixture_detectable(n, m, v, q, alpha, float(tolerance), power)
    return DirectionalResult(name, log_mean, p, n, float(e[j]), float(m[j]), float(v[j]), float(penalty[j]), alpha,
                             1, det, "weight ε", p >= alpha)


def truncation_levels(records) -> tuple[int, ...]:
    """The indices into ``LEVELS`` the truncation test mixes over: every top-p and min-p level, the
    top-k levels smaller than the smallest list (all for whole laws), and the top set for top-k
    laws only.  A function of the reference's kind and list size, not of the sampled tokens."""
    recs = [r for r in records if "nu" in r]
    whole = all("pe" not in r for r in recs)
    k_min = min((int(r["k"]) for r in recs), default=0)
    out = []
    for i, name in enumerate(LEVELS):
        if name.startswith("top-k "):
            if int(name.split()[1]) < k_min:
                out.append(i)
        elif name == "top set":
            if not whole:
                out.append(i)
        else:
            out.append(i)
    return tuple(out)


def truncation_test(records, alpha: float, tolerance: float = 0.0) -> DirectionalResult:
    """The truncation test by e-value (module doc): W = the mean over the levels of
    ``truncation_levels`` of Σ_λ w_λ Π_t (1 − λ + λ·in_t/M_t) / (1 + λ·(min(1, M_t + η_t)/M_t − 1)),
    λ, w_λ from ``TRUNCATION_LAMBDAS``; p = min(1, 1/W), exact in size at every N (Ville).

    Args:
        records: per-token records (flattened), as ``score_test``; alpha: the test's false-alarm
            rate; tolerance: η (each token's η_t = η + its cells' precision ``pe``).
    Returns:
        ``DirectionalResult`` named "truncation (LEVEL)", LEVEL the level of the largest e-value:
        statistic log W; observed: tokens outside that level; expected: Σ m_t; variance:
        Σ m_t(1 − m_t); bias: the tolerance's penalty (nats, at λ = 1); detectable: 1 when a
        sampler truncating at that level (no token outside) is caught at this α and N, else 0.
        An empty pass (n = 0) when no record carries the levels.
    Raises:
        ValueError: alpha or tolerance out of range.
    Source: the likelihood ratio of the truncated law against the full one is in_t/M_t per token;
        its mixture with the null is an e-value (Ville 1939; Grünwald, de Heide & Koolen 2024).
    """
    alpha = check_alpha(alpha)
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    recs = [r for r in records if not r.get("imp") and "nu" in r]
    unit = "level caught (1) or not (0)"
    levels = truncation_levels(recs)
    if not recs or not levels:
        return DirectionalResult("truncation", math.nan, 1.0, 0, 0.0, 0.0, 0.0, 0.0, alpha, -1, 0.0, unit, True)
    nu = np.asarray([r["nu"] for r in recs], dtype=np.float64)[:, levels, :]  # [n, L, 2]
    m = np.clip(nu[:, :, 0], 0.0, 1.0)
    inside = nu[:, :, 1] < 0.5
    M = np.maximum(1.0 - m, 1e-300)
    eta = float(tolerance) + np.asarray([r.get("pe", 0.0) for r in recs])[:, None]
    slack = np.minimum(1.0, M + eta) / M - 1.0  # E[in/M] ≤ 1 + slack under a law within η_t
    per_level = []  # per level: log Σ_λ w_λ W_λ
    penalties = []
    for j in range(len(levels)):
        terms = []
        for lam, w in zip(TRUNCATION_LAMBDAS, TRUNCATION_WEIGHTS):
            with np.errstate(divide="ignore"):
                f = np.log(np.where(inside[:, j], (1 - lam) + lam / M[:, j], 1 - lam))
            pen = float(np.log1p(lam * slack[:, j]).sum())
            terms.append(math.log(w) + float(f.sum()) - pen)
            if lam == 1.0:
                penalties.append(pen)
        top = max(terms)
        per_level.append(-math.inf if top == -math.inf else top + math.log(sum(math.exp(t - top) for t in terms)))
    top = max(per_level)
    log_w = (-math.inf if top == -math.inf else
             top + math.log(sum(math.exp(t - top) for t in per_level)) - math.log(len(levels)))
    p = e_value_p(log_w)
    j = int(np.argmax(per_level))
    name = LEVELS[levels[j]]
    full = float(-np.log(M[:, j]).sum()) - penalties[j] + math.log(TRUNCATION_WEIGHTS[0] / len(levels))
    mj = m[:, j]
    return DirectionalResult(f"truncation ({name})", float(log_w), p, len(recs), float((~inside[:, j]).sum()),
                             float(mj.sum()), float((mj * (1 - mj)).sum()), penalties[j], alpha, -1,
                             float(full >= math.log(1 / alpha)), unit, p >= alpha)
