"""A coarsened G-test: the outcomes grouped into bins of nearly equal exact mass.

At a realistic vocabulary the joint G-test (oracle.gtest.gtest) has little to say about the
whole outcome law: most outcomes have an expected count below 5 and are pooled, and its
guarantee δ on the whole law is its bound on the pooled cells plus the pooled mass
(``GTestResult.detectable_tv_law``), 0.2-0.65 for rows of V = 151,936 at N = 2·10^5
(``vocabulary_resolution``; README, docs/guarantees.md).  The coarsened test trades
resolution for power: it sorts the outcomes of positive probability by a fixed key — a group
(for a verdict outcome (τ, prefix, token): τ), then the outcome's exact probability,
descending — cuts that order into ``m`` bins of nearly equal exact mass, and G-tests the bin
counts against the bins' exact masses.

What it guarantees.  Its δ (``CoarseGTestResult.detectable_tv``) is a bound on the
*coarsened* law: every sampling law P' whose bin masses are at TV ≥ δ from the exact bin
masses is detected with power 0.99 (oracle.gtest_power module doc, the non-central χ² bound; with
equal bins the law-free constant 4 is attained, so δ is tight).  Since
TV(P', P) ≥ TV(P'(bins), P(bins)), a deviation of coarsened TV ≥ δ has TV ≥ δ on the whole
law too; δ ≈ sqrt(λ*(α, 0.99, m − 1) / (4N)) does not depend on V: 0.0127 at N = 2·10^5,
m = 64, α = 2·10^-7.

What it cannot see.  Mass moved between outcomes of the same bin: a bin holds outcomes of one
group (or two, at a group boundary) whose exact probabilities are adjacent in rank, so a
deviation that exchanges or reshapes probability among tokens of similar rank — in the tail
of a 151,936-token row a bin holds tens of thousands of tokens — is invisible, however large
its TV on the full law.  Outcomes of probability 0 that are observed fail the test outright
(as in ``gtest``).  The bins depend on the law only, never on the counts.

Contents: :func:`equal_mass_bins`, :func:`coarse_gtest` (:class:`CoarseGTestResult`),
:func:`coarse_power`; the V = 151,936 study: :func:`llm_row`, :func:`branch_law`,
:func:`vocabulary_resolution` (:class:`VocabularyResolution`), :func:`move_mass`,
:func:`detection_rate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from spectr_gbv.oracle.inputs import LAW_SUM_ATOL, as_counts, as_law, check_alpha
from spectr_gbv.oracle.gtest import GTestResult, gtest
from spectr_gbv.oracle.gtest_power import GTestPower, gtest_power

__all__ = [
    "COARSE_BINS",
    "QWEN_V",
    "CoarseGTestResult",
    "EqualMassBins",
    "VocabularyResolution",
    "branch_law",
    "coarse_gtest",
    "coarse_power",
    "detection_rate",
    "equal_mass_bins",
    "llm_row",
    "move_mass",
    "vocabulary_resolution",
]

# Default number of bins: δ at N = 2·10^5, α = 2·10^-7 is 0.0104 (16 bins), 0.0127 (64),
# 0.0163 (256); 64 keeps most of the power while a bin holds 1/64 of the mass.
COARSE_BINS = 64

# The rows of the Qwen2.5-Coder pair (gpu_backend/models): 151,936 logits (the padded vocabulary).
QWEN_V = 151_936


# ----------------------------------------------------------------------------- bins


@dataclass(frozen=True)
class EqualMassBins:
    """Outcomes grouped into bins of nearly equal exact mass (:func:`equal_mass_bins`).

    Attributes:
        outcomes: the law's outcomes, in law order (all of them, zero-probability ones too).
        bin_index: int64 [len(outcomes)], each outcome's bin, −1 for probability 0.
        masses: float64 [n_bins], the exact mass of each bin (Σ = 1).
        m: the number of bins asked for; ``n_bins`` ≤ m (an outcome heavier than 1/m fills a
            bin alone and leaves neighbours empty; empty bins are dropped).
    """

    outcomes: tuple
    bin_index: np.ndarray = field(repr=False)
    masses: np.ndarray
    m: int

    @property
    def n_bins(self) -> int:
        return int(self.masses.size)

    def law(self) -> dict:
        """``{bin: exact mass}``, the coarsened law."""
        return {b: float(p) for b, p in enumerate(self.masses)}

    def bin_counts(self, counts) -> tuple[np.ndarray, tuple]:
        """(float64 [n_bins] counts per bin, outcomes of probability 0 or outside the law that
        were counted).  ``counts``: mapping ``{outcome: int}`` or a 1-D array aligned with an
        array law."""
        if isinstance(counts, Mapping):
            pos = {o: i for i, o in enumerate(self.outcomes)}
            c = as_counts(counts)
            out = np.zeros(self.n_bins)
            bad = []
            for o, k in c.items():
                i = pos.get(o)
                b = -1 if i is None else self.bin_index[i]
                if b < 0:
                    if k > 0:
                        bad.append(o)
                else:
                    out[b] += k
            return out, tuple(bad)
        arr = np.asarray(counts)
        if arr.ndim != 1 or arr.size != len(self.outcomes):
            raise ValueError(f"counts must be a mapping or a 1-D array of the law's length "
                             f"{len(self.outcomes)}, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.floor(arr)):
            raise ValueError("counts must hold non-negative integers")
        arr = arr.astype(np.float64)
        inside = self.bin_index >= 0
        out = np.bincount(self.bin_index[inside], weights=arr[inside], minlength=self.n_bins)
        bad = tuple(int(i) for i in np.flatnonzero(~inside & (arr > 0)))
        return out, bad


def _law_arrays(law) -> tuple[tuple, np.ndarray]:
    """(outcomes, float64 probabilities) of a validated law; an array law's outcomes are its
    indices (validated without a dict when it is a valid array)."""
    if not isinstance(law, Mapping):
        arr = np.asarray(law, dtype=np.float64)
        if (arr.ndim == 1 and arr.size and np.all(np.isfinite(arr)) and np.all(arr >= 0.0)
                and abs(math.fsum(arr) - 1.0) <= LAW_SUM_ATOL):
            return tuple(range(arr.size)), arr
    checked = as_law(law)
    return tuple(checked), np.fromiter(checked.values(), dtype=np.float64, count=len(checked))


def equal_mass_bins(law, m: int = COARSE_BINS, group=None) -> EqualMassBins:
    """Bins of nearly equal exact mass, from a fixed order of the outcomes.

    The outcomes of positive probability are sorted by (group, exact probability descending,
    law order); an outcome whose mass interval [c − p, c) in that order has its midpoint in
    [j/m, (j+1)/m) goes to bin j; empty bins are dropped.  Each bin's mass is 1/m up to the
    largest probability in it (an outcome heavier than 1/m is a bin of its own).  The bins
    depend on the law (and ``group``) only.

    Args:
        law: mapping ``{outcome: prob}`` or 1-D array (outcome = index).
        m: bins asked for, integer ≥ 2.
        group: None (one group), a callable outcome → sortable key (e.g. ``lambda o: o[0]``,
            τ of a verdict outcome), or for an array law an integer array of its length.
    Returns:
        :class:`EqualMassBins`.
    Raises:
        ValueError: law not a probability law; m < 2; a group array of the wrong shape.
    """
    if isinstance(m, bool) or int(m) != m or m < 2:
        raise ValueError(f"m must be an integer >= 2, got {m!r}")
    m = int(m)
    outcomes, probs = _law_arrays(law)
    n_out = probs.size
    if group is None:
        g = np.zeros(n_out, dtype=np.int64)
    elif callable(group):
        keys = [group(o) for o in outcomes]
        rank = {k: r for r, k in enumerate(sorted(set(keys)))}
        g = np.fromiter((rank[k] for k in keys), dtype=np.int64, count=n_out)
    else:
        g = np.asarray(group)
        if g.shape != (n_out,) or not np.issubdtype(g.dtype, np.integer):
            raise ValueError(f"group must be a callable or an integer array of shape ({n_out},), "
                             f"got {g.dtype} {g.shape}")
    pos = np.flatnonzero(probs > 0.0)
    order = pos[np.lexsort((pos, -probs[pos], g[pos]))]
    p = probs[order]
    cum = np.cumsum(p)
    total = cum[-1]
    raw = np.minimum(np.floor((cum - p / 2.0) * m / total).astype(np.int64), m - 1)
    used, dense = np.unique(raw, return_inverse=True)
    bin_index = np.full(n_out, -1, dtype=np.int64)
    bin_index[order] = dense
    masses = np.array([math.fsum(p[dense == b]) for b in range(used.size)])
    return EqualMassBins(outcomes=outcomes, bin_index=bin_index, masses=masses, m=m)


# ----------------------------------------------------------------------------- the test


@dataclass(frozen=True)
class CoarseGTestResult:
    """Result of :func:`coarse_gtest`.

    Attributes:
        test: ``oracle.gtest.GTestResult`` of the bin counts against the bin masses (a zero
            cell "outside" holds counts on outcomes of probability 0 or absent from the law).
        bins: the :class:`EqualMassBins` used.
        zero_cell_violations: the outcomes of probability 0 (or absent) that were observed.
        pvalue, passed, n, alpha: those of ``test``.
        detectable_tv: δ on the coarsened law, ``test.detectable_tv_law`` (module doc): every
            law whose bin masses are at TV ≥ δ from the exact ones is detected with power 0.99;
            mass moved inside a bin is not seen.
    """

    test: GTestResult
    bins: EqualMassBins
    zero_cell_violations: tuple

    @property
    def pvalue(self) -> float:
        return self.test.pvalue

    @property
    def passed(self) -> bool:
        return self.test.passed

    @property
    def n(self) -> int:
        return self.test.n

    @property
    def alpha(self) -> float:
        return self.test.alpha

    @property
    def detectable_tv(self) -> float:
        return self.test.detectable_tv_law

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        s = (f"coarsened G-test {verdict}: {self.bins.n_bins} bins of nearly equal mass, "
             f"G={self.test.statistic:.6g}, p={self.pvalue:.4g}, alpha={self.alpha:g}, "
             f"n={self.n}, detectable TV={self.detectable_tv:.4g} at power 0.99 on the "
             f"coarsened law (mass moved inside a bin is not seen)")
        if self.zero_cell_violations:
            s += f"; {len(self.zero_cell_violations)} zero-probability outcome(s) observed"
        return s


_OUTSIDE = "outside the law"


def coarse_gtest(counts, law, alpha: float, m: int = COARSE_BINS, group=None,
                 bins: EqualMassBins | None = None, min_expected: float = 5.0) -> CoarseGTestResult:
    """G-test of the counts of ``equal_mass_bins(law, m, group)`` against the bins' masses.

    Args:
        counts: mapping ``{outcome: int}`` or, for an array law, a 1-D integer array.
        law: the exact law, mapping or 1-D array.
        alpha: false-alarm rate, in (0, 1).
        m, group: as in :func:`equal_mass_bins` (ignored when ``bins`` is given).
        bins: precomputed ``equal_mass_bins(law, …)`` (e.g. for many samples of one law).
        min_expected: gtest's pooling threshold (no bin is pooled when N/m ≥ min_expected
            and the bins are equal).
    Returns:
        :class:`CoarseGTestResult`.  A count on an outcome of probability 0 fails it (p = 0).
    Raises:
        ValueError: as :func:`equal_mass_bins` and ``oracle.gtest.gtest``.
    """
    alpha = check_alpha(alpha)
    if bins is None:
        bins = equal_mass_bins(law, m, group)
    binned, bad = bins.bin_counts(counts)
    bin_counts = {b: int(round(c)) for b, c in enumerate(binned)}
    bin_law = bins.law()
    if bad:
        bad_total = (sum(int(counts[o]) for o in bad) if isinstance(counts, Mapping)
                     else int(np.asarray(counts)[list(bad)].sum()))
        bin_counts[_OUTSIDE] = bad_total
        bin_law[_OUTSIDE] = 0.0
    return CoarseGTestResult(gtest(bin_counts, bin_law, alpha, min_expected), bins, bad)


def coarse_power(law, n: int, alpha: float, m: int = COARSE_BINS, group=None,
                 bins: EqualMassBins | None = None, min_expected: float = 5.0) -> GTestPower:
    """What :func:`coarse_gtest` states for ``law`` and ``n`` before sampling:
    ``oracle.gtest_power.gtest_power`` of the coarsened law (its ``detectable_tv_law`` is
    ``CoarseGTestResult.detectable_tv``; ``support`` is the number of bins)."""
    if bins is None:
        bins = equal_mass_bins(law, m, group)
    return gtest_power(bins.masses / math.fsum(bins.masses), n, alpha, min_expected)


# ----------------------------------------------------------------------------- V = 151,936


def llm_row(V: int = QWEN_V, shape: str = "zipf", *, exponent: float = 1.1,
            concentration: float = 0.05, seed: int = 21) -> np.ndarray:
    """A probability row over V tokens (float64 [V], Σ = 1).

    Shapes: "zipf" — p_k ∝ k^(−exponent) by rank (1.1: the top token has 13 % at V = 151,936,
    the top 100 have 57 %), an LLM-like row; "dirichlet" — the empty-prefix row of
    ``oracle.certify_cases.large_models(V, seed)``'s target (Dirichlet(concentration·1_V), the
    certification's V = 4,096 rows; at V = 151,936 it is much flatter: top token 0.1 %).

    Raises:
        ValueError: V < 2, unknown shape, exponent or concentration ≤ 0.
    """
    if isinstance(V, bool) or int(V) != V or V < 2:
        raise ValueError(f"V must be an integer >= 2, got {V!r}")
    if shape == "zipf":
        if not exponent > 0:
            raise ValueError(f"exponent must be > 0, got {exponent!r}")
        row = np.arange(1, int(V) + 1, dtype=np.float64) ** -float(exponent)
        return row / row.sum()
    if shape == "dirichlet":
        if not concentration > 0:
            raise ValueError(f"concentration must be > 0, got {concentration!r}")
        from spectr_gbv.reference.models import RandomModel

        return np.asarray(RandomModel(int(V), seed, concentration).conditional(()), dtype=np.float64)
    raise ValueError(f"shape must be 'zipf' or 'dirichlet', got {shape!r}")


def branch_law(row, branches: int = 1, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """(law, group): the outcome law of ``branches`` disjoint copies of ``row`` with the given
    weights (default equal) — the token emitted on each of several (τ, prefix) branches of a
    verdict, each carrying a V-token row — and each outcome's branch (the coarsening group).

    Raises:
        ValueError: branches < 1, weights not positive, of the wrong length or not summing to 1.
    """
    row = np.asarray(row, dtype=np.float64)
    if isinstance(branches, bool) or int(branches) != branches or branches < 1:
        raise ValueError(f"branches must be an integer >= 1, got {branches!r}")
    w = np.full(int(branches), 1.0 / branches) if weights is None else np.asarray(weights, float)
    if w.shape != (int(branches),) or np.any(w <= 0) or abs(w.sum() - 1.0) > 1e-12:
        raise ValueError(f"weights must be {branches} positive numbers summing to 1, got {weights!r}")
    law = np.concatenate([wi * row for wi in w])
    return law / law.sum(), np.repeat(np.arange(int(branches)), row.size)


@dataclass(frozen=True)
class VocabularyResolution:
    """What a certification case resolves at vocabulary V (:func:`vocabulary_resolution`).

    Attributes:
        V, shape, branches, n: the case.  alpha_per_test: each test's false-alarm rate.
        joint: ``oracle.gtest_power.GTestPower`` of the joint G-test on the whole outcome law
            (``support``, ``n_large`` cells of expected count ≥ 5, ``n_cells`` after pooling,
            ``merged_mass``, ``detectable_tv`` on the pooled cells, ``detectable_tv_law``).
        coarse: the same for the coarsened test (its ``detectable_tv_law`` is its δ on the
            coarsened law).
        bins: the coarsened test's bins; ``max_bin_outcomes``: most outcomes in one bin (mass
            moved among them is invisible to it).
    """

    V: int
    shape: str
    branches: int
    n: int
    alpha_per_test: float
    joint: GTestPower
    coarse: GTestPower
    bins: int
    max_bin_outcomes: int

    def summary(self) -> str:
        j = self.joint
        return (f"V = {self.V:,} {self.shape} row × {self.branches} branch(es), N = {self.n:,}, "
                f"α per test {self.alpha_per_test:.2g}: joint G-test {j.n_large:,} of {j.support:,} "
                f"outcomes with expected count ≥ 5, {j.n_cells:,} cells after pooling, pooled mass "
                f"{j.merged_mass:.3f}, δ = {j.detectable_tv:.4f} + {j.merged_mass:.3f} = "
                f"{j.detectable_tv_law:.3f}; coarsened test ({self.bins} bins, up to "
                f"{self.max_bin_outcomes:,} outcomes in a bin) δ = {self.coarse.detectable_tv_law:.4f} "
                f"on the coarsened law")


def vocabulary_resolution(V: int = QWEN_V, n: int = 200_000, alpha: float = 1e-6,
                          shape: str = "zipf", branches: int = 1, n_tests: int = 5,
                          m: int = COARSE_BINS) -> VocabularyResolution:
    """The joint and coarsened tests' power on a case whose outcome law is ``branches`` copies
    of an ``llm_row(V, shape)`` row (``branch_law``), at N = ``n`` and case-level α shared by
    ``n_tests`` tests (Bonferroni: each at α/n_tests; oracle.certify's large cases run 5).

    Raises:
        ValueError: as ``llm_row``, ``branch_law``, ``gtest_power``; n_tests < 1.
    """
    if isinstance(n_tests, bool) or int(n_tests) != n_tests or n_tests < 1:
        raise ValueError(f"n_tests must be an integer >= 1, got {n_tests!r}")
    a = check_alpha(alpha) / n_tests
    law, group = branch_law(llm_row(V, shape), branches)
    bins = equal_mass_bins(law, m, group)
    sizes = np.bincount(bins.bin_index[bins.bin_index >= 0])
    return VocabularyResolution(V=int(V), shape=shape, branches=int(branches), n=int(n),
                                alpha_per_test=a, joint=gtest_power(law, n, a),
                                coarse=coarse_power(law, n, a, bins=bins), bins=bins.n_bins,
                                max_bin_outcomes=int(sizes.max()))


def move_mass(law, src, dst, eps: float) -> np.ndarray:
    """``law`` (1-D array) with mass ``eps`` moved from the outcomes ``src`` to the disjoint
    outcomes ``dst``, proportionally to their probabilities: a planted defect of TV exactly
    ``eps``.

    Raises:
        ValueError: src and dst overlap, eps outside (0, p(src)], or a side of mass 0.
    """
    p = np.asarray(law, dtype=np.float64).copy()
    src, dst = np.asarray(src), np.asarray(dst)
    if np.intersect1d(src, dst).size:
        raise ValueError("src and dst must be disjoint")
    ps, pd = p[src].sum(), p[dst].sum()
    if not (0 < eps <= ps) or pd <= 0:
        raise ValueError(f"eps must lie in (0, p(src) = {ps:.3g}] with p(dst) > 0, got {eps!r}")
    p[src] *= 1.0 - eps / ps
    p[dst] *= 1.0 + eps / pd
    return p


def move_within_bins(law, bins: EqualMassBins, frac: float = 0.5) -> np.ndarray:
    """``law`` (1-D array [V]) with ``frac`` of the mass of each bin's more probable half moved to
    its less probable half, proportionally to the receiving outcomes' probabilities: every bin's
    mass — the coarsened law — is unchanged, so ``coarse_gtest`` is blind to it by construction
    (the planted defect of the coarsened test's blind spot; TV = frac · Σ_bins p(top half)).

    Args:
        law: float array [V], a probability vector.  bins: ``equal_mass_bins`` of ``law``.
        frac: the fraction in [0, 1] of each top half's mass that moves.
    Raises:
        ValueError: frac outside [0, 1], or ``bins`` not of ``law``'s length.
    """
    p = np.asarray(law, dtype=np.float64)
    if not 0.0 <= frac <= 1.0:
        raise ValueError(f"frac must lie in [0, 1], got {frac!r}")
    if bins.bin_index.shape != p.shape:
        raise ValueError(f"bins has {bins.bin_index.size} outcomes, law has {p.size}")
    out = p.copy()
    for b in range(bins.n_bins):
        idx = np.flatnonzero(bins.bin_index == b)
        if idx.size < 2:
            continue
        idx = idx[np.argsort(-p[idx], kind="stable")]
        top, bottom = idx[: idx.size // 2], idx[idx.size // 2:]  # binned outcomes have p > 0
        moved = frac * p[top].sum()
        out[top] -= frac * p[top]
        out[bottom] += moved * p[bottom] / p[bottom].sum()
    return out


def detection_rate(planted, law, n: int, alpha: float, reps: int, seed: int = 0,
                   bins: EqualMassBins | None = None, m: int = COARSE_BINS, group=None) -> float:
    """Fraction of ``reps`` samples of size ``n`` from the array law ``planted`` that the
    coarsened test against ``law`` rejects at ``alpha`` (the counts are multinomial: the same
    law as counting n i.i.d. outcomes)."""
    if bins is None:
        bins = equal_mass_bins(law, m, group)
    rng = np.random.default_rng(seed)
    planted = np.asarray(planted, dtype=np.float64)
    planted = planted / planted.sum()
    hits = 0
    for _ in range(int(reps)):
        counts = rng.multinomial(int(n), planted)
        hits += not coarse_gtest(counts, law, alpha, bins=bins).passed
    return hits / int(reps)
