"""Conditional G-tests: the law of a key and the law of the outcome given each key, as one family.

- :func:`conditional_gtests` (:class:`ConditionalGTestResult`) — the G-test (oracle/gtest.py)
  of the marginal law of ``condition(outcome)`` and of the outcome given each eligible key,
  Bonferroni-corrected over a family whose size is fixed by the law and n.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from spectr_gbv.oracle.gtest import GTestResult, counts_from_samples, gtest, law_of, zero_probability_outcomes
from spectr_gbv.oracle.inputs import as_counts, as_law, check_alpha

__all__ = ["ConditionalGTestResult", "conditional_gtests"]


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
        min_expected: pooling threshold passed to :func:`oracle.gtest.gtest`.
        min_key_expected: eligibility threshold on n·P(k); default ``10 * min_expected``.
    Returns:
        :class:`ConditionalGTestResult`.
    Raises:
        ValueError: as :func:`oracle.gtest.gtest`; min_key_expected ≤ 0.
    """
    alpha, law, counts, min_key_expected, n = _conditional_inputs(
        samples, law, alpha, min_expected, min_key_expected)
    split = _split_by_key(law, counts, condition)
    eligible = [k for k, pk in split.key_law.items()
                if n * pk >= min_key_expected
                and sum(1 for p in split.law[k].values() if p > 0.0) >= 2]
    n_tests = 1 + len(eligible)
    alpha_each = alpha / n_tests

    violations = zero_probability_outcomes(counts, law)
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
