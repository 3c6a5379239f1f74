"""Black-box test of sampled token sequences against the target's conditional laws.

An engine with speculation promises that its output has the law of plain sampling from the
target.  Given N sampled continuations and, for every token, the target's law given the
sampled prefix (computed by a reference copy of the target), this module tests that promise
with no access to the engine's internals.

The test: the randomized probability-integral transform (PIT)
-------------------------------------------------------------
For a token x drawn from a law p over {0, …, V−1} put in a fixed order π (a bijection onto
ranks), and U ~ Uniform(0, 1) independent,

    u = F(x⁻) + U · p(x),     F(x⁻) = Σ_{y: π(y) < π(x)} p(y),

is exactly Uniform(0, 1) (the randomized PIT of a discrete law: Brockwell 2007, Statist.
Probab. Lett. 77:1032–1036; Czado, Gneiting & Held 2009, Biometrics 65:1254–1261).  Applied to
each token with p = the target's law given the sampled prefix, the PITs u_1, u_2, … of one
sequence are i.i.d. Uniform(0, 1) (Rosenblatt 1952, Ann. Math. Statist. 23:470–472: u_j is
uniform given the whole past, so independent of it), whatever V.  N independent sequences of
n tokens give N·n i.i.d. uniforms under the null; at position j the N PITs are i.i.d. uniform
even when some sequences stopped early (whether a sequence reaches j depends on its past
only).  Pooled over positions, an early stop (EOS) makes the count depend on the values; the
adapters disable EOS where the engine allows it, and the result says how many sequences
stopped early.

Two orders are used, each a test of its own: by token id (π = identity), and by the
reference probability (ties by id; rank 0 = the most probable token).  A defect that flattens
or sharpens the law (a temperature on one side, draft tokens kept, a penalty) moves PIT mass
monotonically in the probability order; a defect tied to particular ids shows in the id order.

Uniformity: the Kolmogorov–Smirnov statistic D = sup_t |F_n(t) − t| with the exact
finite-n law of D under i.i.d. uniforms (``scipy.stats.kstwo``: Simard & L'Ecuyer 2011).

Tolerance for float rounding.  The engine's kernels and the reference's differ by rounding:
the engine samples from a law q with TV(q, p) ≤ η per token instead of p.  Whatever the
order, the PIT's CDF under q deviates from t by at most TV(q, p) (it is Σ_x (q(x) − p(x))·g_x(t)
with 0 ≤ g_x ≤ 1), and a mixture over prefixes by at most the largest per-token TV.  So the
test rejects when D > c_α + η, with c_α the exact level-α critical value of D: at η = 0 it is
exact; a deviation of the PIT's CDF no larger than η (float rounding) moves D by at most η.

Power.  A defect whose PIT CDF (in one order) deviates from t by d at t = ½ — e.g. mass d
moved monotonically across the median, whose per-token TV is then d — makes D ≥ |F_n(½) − ½|
with n·F_n(½) ~ Binomial(n, ½ ± d); ``detectable_deviation`` is the smallest d at which this
binomial bound alone gives power ≥ 0.99 (exact binomial, no approximation; a lower bound on
the KS test's power, checked by simulation in tests/oracle/test_sequence_test.py).  Any
per-token TV below d may go undetected; a deviation spread thin across the order (e.g. mass
moved between alternate ids) has a smaller CDF deviation than its TV and needs more samples.

Complement: when every sequence shares one prompt, the first tokens are N draws from one law,
G-tested against it (``oracle.gtest.gtest``; at a real vocabulary and N in the hundreds most
cells are pooled and its δ is large: it is reported as it is).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.inputs import check_alpha
from spectr_gbv.oracle.gtest import GTestResult, gtest

ORDERS = ("id", "probability")
DEFAULT_POWER = 0.99


def _check_tolerance(tolerance) -> float:
    if not (isinstance(tolerance, (int, float)) and 0 <= float(tolerance) < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    return float(tolerance)


def _check_law_row(law, name: str = "law") -> np.ndarray:
    p = np.asarray(law, dtype=np.float64)
    if p.ndim != 1 or p.size < 1:
        raise ValueError(f"{name} must be a 1-D array of probabilities, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError(f"{name} has negative or non-finite entries")
    if abs(p.sum() - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1 (within 1e-6), sums to {p.sum():.9g}")
    return p


def lower_mass(law: np.ndarray, token: int, order: str = "id") -> float:
    """F(x⁻): the law's mass strictly before ``token`` in ``order``.

    Args:
        law: float64 [V], summing to 1.
        token: int in [0, V).
        order: "id" (token ids ascending) or "probability" (probability descending, ties by
            id ascending).
    Returns:
        float in [0, 1].
    Raises:
        ValueError: unknown order, token outside [0, V).
    """
    p = np.asarray(law, dtype=np.float64)
    if not 0 <= int(token) < p.size:
        raise ValueError(f"token must be in [0, {p.size}), got {token!r}")
    x = int(token)
    if order == "id":
        return float(p[:x].sum())
    if order == "probability":
        px = p[x]
        before = (p > px)
        before[:x] |= p[:x] == px
        return float(p[before].sum())
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")


def randomized_pit(law, token: int, u: float, order: str = "id") -> float:
    """The randomized PIT u = F(x⁻) + U·p(x) of ``token`` under ``law`` (module doc).

    Args:
        law: float64 [V] probabilities summing to 1 (within 1e-6).
        token: the sampled token id.
        u: the auxiliary Uniform(0, 1) draw U.
        order: "id" or "probability" (``lower_mass``).
    Returns:
        float in [0, 1]; NaN when ``law[token]`` is 0 (a token the law cannot emit: the
        caller counts it as a violation).
    Raises:
        ValueError: bad law, token or order; u outside [0, 1].
    Source: Brockwell 2007; Czado, Gneiting & Held 2009 (module doc).
    """
    p = _check_law_row(law)
    if not 0.0 <= float(u) <= 1.0:
        raise ValueError(f"u must be in [0, 1], got {u!r}")
    base = lower_mass(p, token, order)
    if p[int(token)] <= 0:
        return math.nan
    return min(1.0, base + float(u) * float(p[int(token)]))


def ks_critical(n: int, alpha: float) -> float:
    """c with P(D_n > c) = α for n i.i.d. uniforms (exact: ``scipy.stats.kstwo``)."""
    return float(sps.kstwo.isf(alpha, n))


def detectable_deviation(n: int, alpha: float, tolerance: float = 0.0,
                         power: float = DEFAULT_POWER) -> float:
    """Smallest d such that a PIT CDF deviating by d at t = ½ is rejected by ``ks_uniform_test``
    with probability ≥ ``power``, by the exact binomial bound of the module doc.

    Args:
        n: PITs tested (≥ 1).
        alpha: the test's level, in (0, 1).
        tolerance: η, as in ``ks_uniform_test``.
        power: in (0, 1).
    Returns:
        d in (0, ½], or ``inf`` when even d = ½ (all mass on one side of the median) does not
        reach the power at this n.
    Raises:
        ValueError: n < 1, alpha, power or tolerance out of range.
    """
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer ≥ 1, got {n!r}")
    alpha = check_alpha(alpha)
    power = check_alpha(power, "power")
    return _detectable(int(n), alpha, _check_tolerance(tolerance), power)


@functools.lru_cache(maxsize=1024)
def _detectable(n: int, alpha: float, tolerance: float, power: float) -> float:
    thr = ks_critical(n, alpha) + tolerance
    # reject for sure when |B/n − ½| > thr, B ~ Binomial(n, ½ + d): the upper side alone
    upper = math.floor(n * (0.5 + thr))  # B > upper ⇒ B/n − ½ > thr

    def pw(d: float) -> float:
        return float(sps.binom.sf(upper, n, min(1.0, 0.5 + d)))

    if pw(0.5) < power:
        return math.inf
    lo, hi = 0.0, 0.5
    for _ in range(40):  # d to 1e-12
        mid = 0.5 * (lo + hi)
        if pw(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class UniformityTest:
    """Result of ``ks_uniform_test``.

    Attributes:
        statistic: D = sup_t |F_n(t) − t| (NaN with n = 0).
        pvalue: P(D_n ≥ D − η) under the null (exact ``kstwo``); 1 when D ≤ η or n = 0.
        n: PITs tested.
        alpha: level used.
        tolerance: η.
        critical: c_α + η: the test rejects when D exceeds it.
        detectable: ``detectable_deviation(n, alpha, tolerance)`` (power 0.99).
        passed: pvalue ≥ alpha.
    """

    statistic: float
    pvalue: float
    n: int
    alpha: float
    tolerance: float
    critical: float
    detectable: float
    passed: bool


def ks_uniform_test(u, alpha: float, tolerance: float = 0.0) -> UniformityTest:
    """Kolmogorov–Smirnov test of PITs against Uniform(0, 1), with a tolerance η (module doc).

    Args:
        u: 1-D float array of PITs in [0, 1] (no NaN).
        alpha: level in (0, 1).
        tolerance: η ∈ [0, 1): the largest per-token TV between the engine's and the
            reference's laws put down to float rounding.
    Returns:
        ``UniformityTest``; with no PIT, an empty pass (n = 0, p-value 1, detectable inf).
    Raises:
        ValueError: u not 1-D, NaN or outside [0, 1]; alpha or tolerance out of range.
    Source: Kolmogorov 1933; exact law of D_n: Simard & L'Ecuyer 2011 (scipy.stats.kstwo).
    """
    alpha = check_alpha(alpha)
    eta = _check_tolerance(tolerance)
    x = np.asarray(u, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"u must be 1-D, got shape {x.shape}")
    if x.size == 0:
        return UniformityTest(math.nan, 1.0, 0, alpha, eta, math.inf, math.inf, True)
    if np.any(~np.isfinite(x)) or np.any(x < 0) or np.any(x > 1):
        raise ValueError("u must hold finite values in [0, 1]")
    n = int(x.size)
    D = float(sps.kstest(x, "uniform").statistic)
    excess = D - eta
    p = 1.0 if excess <= 0 else float(sps.kstwo.sf(excess, n))
    crit = ks_critical(n, alpha) + eta
    return UniformityTest(D, p, n, alpha, eta, crit, detectable_deviation(n, alpha, eta), p >= alpha)


def simulated_power(n: int, d: float, alpha: float, tolerance: float = 0.0, reps: int = 2000,
                    seed: int = 0) -> float:
    """Monte-Carlo power of ``ks_uniform_test`` against the alternative of the module doc: PIT
    density 1 + 2d on [0, ½) and 1 − 2d on [½, 1) (CDF deviation d at ½).

    Returns:
        the fraction of ``reps`` simulated samples of n PITs rejected at level α.
    """
    rng = np.random.default_rng(seed)
    thr = ks_critical(n, alpha) + tolerance
    low = rng.random((reps, n)) < 0.5 + d
    u = np.where(low, 0.5 * rng.random((reps, n)), 0.5 + 0.5 * rng.random((reps, n)))
    u.sort(axis=1)
    i = np.arange(1, n + 1)
    D = np.maximum((i / n - u).max(axis=1), (u - (i - 1) / n).max(axis=1))
    return float(np.mean(D > thr))


# -- sequences ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SequenceRow:
    """One test of ``sequence_test``: scope "all" (every PIT pooled), "position j" (the PITs of
    token j of every sequence that reached it), or "first token" (the G-test).

    Attributes:
        scope, order ("id", "probability", or "-" for the G-test), test ("KS" or "G"),
        statistic, pvalue, n, alpha (this test's share of α), detectable (power 0.99:
        the PIT CDF deviation d, or the G-test's δ), passed.
    """

    scope: str
    order: str
    test: str
    statistic: float
    pvalue: float
    n: int
    alpha: float
    detectable: float
    passed: bool


@dataclass(frozen=True)
class SequenceTestResult:
    """Result of ``sequence_test``.

    Attributes:
        rows: every test run (``SequenceRow``), pooled rows first.
        alpha: the family's false-alarm rate (Bonferroni over the rows: α/2 shared by the pooled
            rows and the first-token G-test, α/2 by the per-position rows).
        tolerance: η.
        n_sequences, n_tokens: sequences and tokens tested.
        early_stops: sequences shorter than the longest (EOS).
        impossible: tokens the reference gives probability 0 (each fails the test outright).
        passed: every row passed and no impossible token.
        detectable: the pooled rows' power-0.99 PIT deviation d (probability order).
    """

    rows: tuple
    alpha: float
    tolerance: float
    n_sequences: int
    n_tokens: int
    early_stops: int
    impossible: int
    passed: bool
    detectable: float

    def pooled(self, order: str) -> SequenceRow:
        return next(r for r in self.rows if r.scope == "all" and r.order == order)


def sequence_pits(tokens, laws, uniforms, order: str) -> np.ndarray:
    """PITs of one sequence.

    Args:
        tokens: n sampled token ids.
        laws: float64 [n, V]: row j = the reference law of token j given the prompt and
            tokens[:j].
        uniforms: n auxiliary Uniform(0, 1) draws.
        order: "id" or "probability".
    Returns:
        float64 [n] (NaN where the law gives the token probability 0).
    Raises:
        ValueError: shapes disagree, bad rows or tokens.
    """
    laws = np.asarray(laws, dtype=np.float64)
    if laws.ndim != 2 or laws.shape[0] != len(tokens) or len(uniforms) != len(tokens):
        raise ValueError(f"laws must be [n, V] with n = len(tokens) = len(uniforms) = {len(tokens)}, "
                         f"got laws {laws.shape}, {len(uniforms)} uniforms")
    return np.array([randomized_pit(laws[j], int(t), float(uniforms[j]), order)
                     for j, t in enumerate(tokens)], dtype=np.float64)


def sequence_test(tokens, laws, alpha: float = 1e-3, tolerance: float = 0.0, seed: int = 0,
                  first_law=None, orders=ORDERS, positions: bool = True) -> SequenceTestResult:
    """Test N sampled sequences against the reference's conditional laws (module doc).

    Args:
        tokens: N lists of sampled token ids (lengths may differ: early stops).
        laws: N float64 arrays [n_i, V]: the reference law before each token of sequence i.
        alpha: the family's false-alarm rate, in (0, 1).
        tolerance: η (module doc): per-token TV put down to float rounding.
        seed: seed of the auxiliary uniforms U (``numpy.random.default_rng``); they must be
            independent of the sampler's randomness (a sampler drawing from the same stream
            makes U and the token dependent and the PITs non-uniform).
        first_law: float64 [V]: when every sequence shares one prompt, its first-token law;
            the first tokens are then G-tested against it.  None: no G-test.
        orders: the PIT orders tested (subset of ``ORDERS``).
        positions: also test each position on its own.
    Returns:
        ``SequenceTestResult``.
    Raises:
        ValueError: no sequence, mismatched lengths, bad laws, alpha or tolerance.
    """
    alpha = check_alpha(alpha)
    eta = _check_tolerance(tolerance)
    if len(tokens) == 0 or len(tokens) != len(laws):
        raise ValueError(f"tokens and laws must be two non-empty lists of one length, got "
                         f"{len(tokens)} and {len(laws)}")
    bad = [o for o in orders if o not in ORDERS]
    if bad or not orders:
        raise ValueError(f"orders must be a non-empty subset of {ORDERS}, got {orders!r}")
    rng = np.random.default_rng(seed)
    lengths = [len(t) for t in tokens]
    n_max = max(lengths)
    pits = {o: [] for o in orders}
    impossible = 0
    for toks, law in zip(tokens, laws):
        uni = rng.random(len(toks))
        for o in orders:
            pits[o].append(sequence_pits(toks, law, uni, o))
    impossible = sum(int(np.isnan(p).sum()) for p in pits[orders[0]])
    n_pos = n_max if positions else 0
    n_pooled = len(orders) + (first_law is not None)
    a_pooled = alpha / 2 / n_pooled if n_pos else alpha / n_pooled
    a_pos = alpha / 2 / (n_pos * len(orders)) if n_pos else 0.0
    rows = []
    for o in orders:
        allu = np.concatenate(pits[o]) if pits[o] else np.zeros(0)
        r = ks_uniform_test(allu[~np.isnan(allu)], a_pooled, eta)
        rows.append(SequenceRow("all", o, "KS", r.statistic, r.pvalue, r.n, a_pooled, r.detectable, r.passed))
    if first_law is not None:
        law = _check_law_row(first_law, "first_law")
        law = law / law.sum()
        firsts = [int(t[0]) for t in tokens if len(t)]
        counts = np.bincount(firsts, minlength=law.size)
        if counts.size > law.size:
            raise ValueError("a first token is outside first_law's vocabulary")
        g: GTestResult = gtest(counts, law, a_pooled)
        rows.append(SequenceRow("first token", "-", "G", g.statistic, g.pvalue, g.n, a_pooled,
                                g.detectable_tv_law, g.passed))
    for j in range(n_pos):
        for o in orders:
            u = np.array([p[j] for p in pits[o] if len(p) > j])
            r = ks_uniform_test(u[~np.isnan(u)], a_pos, eta)
            rows.append(SequenceRow(f"position {j}", o, "KS", r.statistic, r.pvalue, r.n, a_pos,
                                    r.detectable, r.passed))
    det = next(r.detectable for r in rows if r.scope == "all" and r.order == orders[-1])
    return SequenceTestResult(tuple(rows), alpha, eta, len(tokens), int(sum(lengths)),
                              sum(n < n_max for n in lengths), impossible,
                              impossible == 0 and all(r.passed for r in rows), det)
