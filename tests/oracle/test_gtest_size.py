"""The G-test's false-alarm rate on a V = 4,096 rows law, simulated from the exact law
(issue 36, item 4; benchmarks/GTEST_SIZE.md has the plan's cases).

The law: the reference SD's exact law of (τ, prefix, token) on V = 4,096 rows
(``oracle.certify_cases.large_models(4096, 21)``, K = 1, L = 2, draft seed 22: the rows of
``gpu_backend.certify.suite.large_case("sd", ...)`` before their dtype rounding).  At N = 10^6
its G-test compares 1,217 cells, 199 of expected count below 10; the χ² p-value of G (the code
before the null-mean correction) gives false alarms at 1.6× α = 10^-2 and 2.1× α = 10^-3 on
these 20,000 replicates (this test fails on it), its null mean dof + 9.5.

How the size is measured without 20,000 calls of ``gtest`` (~70 ms each): the pooling depends
on the law and N only, so the pooled counts are drawn directly (multinomial on the pooled
cells) and G is computed in vectorised form (checked equal to ``gtest``'s statistic); for a
fixed law and N ``gtest``'s p-value is a decreasing function of G, so the replicates it rejects
at α are the top ones in G, and their number is found by bisection over the sorted replicates,
calling ``gtest`` itself on ~15 of them.  The decision counted is ``gtest``'s own.

Assertion: size ≤ α + 3 s.e. (s.e. = √(α(1−α)/R), R = 20,000 replicates; a correct test fails
it with probability ≈ 0.0013 by the normal approximation, deterministic at the fixed seed).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spectr_gbv.oracle.certify import exact_verdict_law
from spectr_gbv.oracle.certify_cases import fixed_case, large_models
from spectr_gbv.oracle.gtest import gtest
from spectr_gbv.oracle.gtest_cells import pool_cells
from spectr_gbv.reference.rules import get_rule

N = 1_000_000
REPS = 20_000


@pytest.fixture(scope="module")
def pooled_law():
    draft, target = large_models(4096, 21)
    case = fixed_case("sd rows", "sd", draft, target, 1, 2, 22, backend_dtype="float64")
    law = exact_verdict_law(get_rule("sd"), case.draft_tokens, case.draft_probs, case.target_probs)
    probs = np.array([p for p in law.values() if p > 0.0])
    groups, rare = pool_cells(probs, N, 5.0)
    assert not rare
    P = np.array([probs[g].sum() for g in groups])
    P = P / P.sum()
    rng = np.random.default_rng(20261203)
    counts = rng.multinomial(N, P, size=REPS)
    E = N * P
    with np.errstate(divide="ignore", invalid="ignore"):
        G = 2.0 * np.where(counts > 0, counts * np.log(counts / E), 0.0).sum(axis=1)
    return P, counts, G, np.argsort(G)[::-1]  # largest G first


def _rejected(counts, P, alpha) -> bool:
    return not gtest(counts, P, alpha).passed


@pytest.mark.parametrize("alpha", [1e-2, 1e-3])
def test_gtest_size_on_v4096_rows_at_most_alpha(pooled_law, alpha):
    P, counts, G, order = pooled_law
    # the law as gtest sees it: 1,217 cells of N·p ≥ 5, a fifth of them below 10
    assert P.size == 1217 and int((N * P < 10).sum()) == 199
    for i in range(3):  # the vectorised G is gtest's statistic
        assert gtest(counts[i], P, alpha).statistic == pytest.approx(G[i], rel=1e-9)
    # gtest rejects a prefix of `order` (its p-value decreases in G): bisection for its length
    lo, hi = 0, REPS  # rejects order[:lo] (known), accepts order[hi:] (known)
    if not _rejected(counts[order[0]], P, alpha):
        hi = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if _rejected(counts[order[mid]], P, alpha):
            lo = mid + 1
        else:
            hi = mid
    size = lo / REPS
    se = math.sqrt(alpha * (1 - alpha) / REPS)
    assert size <= alpha + 3 * se, (size, alpha, se)
    # and not vacuous: the corrected test still rejects the top of the null (0.2-0.5 α measured)
    assert size >= alpha / 10, (size, alpha)
