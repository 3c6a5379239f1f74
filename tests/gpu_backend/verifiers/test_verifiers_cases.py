"""Tests of the batched-verifier tests' shared case generators and comparators
(tests/helpers/verifier_cases.py, imported by the tests/gpu_backend/*/test_verifiers_*.py modules).

A *case* is one iteration's inputs in the reference's layout (numpy float64):
tokens [K, L], draft rows [K, L, V], target rows [K, L+1, V].  Rows are a function of the prefix
(a draft tree), so drafts that share a prefix share their rows, as they do with real models, and
draft tokens are drawn from the draft rows (favouring the least likely token 30% of the time).

Row styles per tree node: random softmax rows, p = q (dyadic entries: sums exactly 1),
disjoint supports, one-hot rows, rows with entries ~1e-14..1e-9, and close rows (q = p·e^N(0, 0.1²)).

Ties.  Exact matched-noise equality with the reference needs every decision to be away from
rounding.  Two families of inputs make the reference's own decision a matter of rounding, and
are kept out of the exact-equality tests (their law is covered by the certification tests):
  * K-SEQ positions (every node for spectr, the root for kseq_gbv) with 0 < Σ min(p, q) < 1e-3
    (nearly disjoint supports) or 0 < TV(p, q) < 1e-2 (nearly equal rows), where the root ρ* of
    1 − (1 − β)^k = ρβ is ill-conditioned: the reference's ρ* moves by up to ~1% under 1e-16
    perturbations of the rows (see gpu_backend/verifiers/kseq.py);
  * for SpecTr-GBV, p = q rows below the root: then F(z) − Σ_x F(z,x) = 0 exactly, and the released
    h = (F − ΣF)/(μ − ΣF + 1e-20) is rounding noise over rounding noise whenever μ − ΣF is ~0
    (target joint 1, or K = 1 with p(z) = q(z), or p(z) below ~1e-8);
  * for SpecTr-GBV, draft joints p(z) < 1e-6: the released 1 − (1 − m)^K and 1 − (1 − p(z))^K lose
    ~log10(1/p(z)) of float64's 16 digits (in the reference as in this backend), against the
    absolute 1e-20 guard; exact arithmetic (mpmath) disagrees with both, e.g. p(z) = 4e-14:
    exact h = 0.98, reference 0, this backend 1.  Such sub-blocks are drafted with probability
    p(z), so the law is unaffected.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.verifier_cases import kseq_well_conditioned, one_torch_thread, tree_case  # noqa: F401  (a fixture)


# -- tests of the generators ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_tree_case_is_prefix_consistent_and_drawable(seed):
    rng = np.random.default_rng(seed)
    V, K, L = 3, 3, 4
    tokens, dp, tp = tree_case(rng, V, K, L)
    assert np.allclose(dp.sum(-1), 1.0) and np.allclose(tp.sum(-1), 1.0)
    for k in range(K):
        for i in range(L):
            assert dp[k, i, tokens[k, i]] > 0
        for j in range(K):
            shared = 0
            while shared < L and tokens[k, shared] == tokens[j, shared]:
                shared += 1
            # rows of drafts that share a prefix of length s coincide up to position s
            n = min(shared + 1, L)
            assert np.array_equal(dp[k, :n], dp[j, :n])
            assert np.array_equal(tp[k, : shared + 1], tp[j, : shared + 1])


def test_tie_filters_exclude_what_they_claim():
    rng = np.random.default_rng(0)
    for _ in range(200):
        tokens, dp, tp = tree_case(rng, 2, 2, 3, kseq_safe=True, distinct_below_root=True)
        for k in range(2):
            for i in range(3):
                assert kseq_well_conditioned(dp[k, i], tp[k, i])
                if 1 <= i < 3:
                    assert not np.array_equal(dp[k, i], tp[k, i])
    assert not kseq_well_conditioned(np.array([0.5, 0.5]), np.array([0.5 + 1e-5, 0.5 - 1e-5]))
    assert not kseq_well_conditioned(np.array([1 - 1e-9, 1e-9]), np.array([1e-9, 1 - 1e-9]))
    assert kseq_well_conditioned(np.array([0.5, 0.5]), np.array([0.5, 0.5]))
    assert kseq_well_conditioned(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
