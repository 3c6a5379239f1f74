"""Matched-noise equality of the batched verifiers with the reference rules.

The same uniforms (coin (k, i) succeeds iff u <= h) and exponentials (race argmax log w − log E)
are fed to gpu_backend's verifier (noise=...) and, row by row, to the reference rule through
reference.randomness.MatchedSource, on float64 inputs.  τ, the selected draft, the emitted
tokens (with their -1 padding) and the Algorithm 2 record (kind, K, ρ, joints of the emitted
tokens to 1e-9 relative) must be identical.

Inputs avoid the rounding ties described in test_verifiers_cases (ill-conditioned ρ* rows at
K-SEQ positions; p = q sub-block rows for SpecTr-GBV); everything else — p = q rows (exact
sums), disjoint supports, one-hot rows, tokens of probability 1e-14 — is in.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_backend.verifiers import get_verifier
from test_verifiers_cases import one_torch_thread  # noqa: F401  (autouse fixture)
from test_verifiers_cases import (RULE_VARIANTS, SINGLE_DRAFT, case_options, random_noise,
                                  reference_rule, run_matched, tree_case, variant_id,
                                  verdict_mismatch)

B = 6  # cases per verifier call


def check_matched(name, params, rng, V, K, L, styles=None, n_cases=B):
    verifier = get_verifier(name, **params)
    rule = reference_rule(name, params)
    opts = case_options(name, V)
    if styles is not None:
        opts["styles"] = styles
    cases = [tree_case(rng, V, K, L, **opts) for _ in range(n_cases)]
    U, E = random_noise(rng, n_cases, K, L, V)
    verdict, refs = run_matched(verifier, rule, cases, U, E)
    for b, ref in enumerate(refs):
        why = verdict_mismatch(verdict, b, ref)
        assert why is None, f"{variant_id(name, params)} V={V} K={K} L={L} row {b}: {why}"
    return verdict, refs


@pytest.mark.parametrize("name,params", RULE_VARIANTS, ids=[variant_id(*v) for v in RULE_VARIANTS])
@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), V=st.sampled_from([2, 3, 4, 5, 6, 4096]),
       K=st.integers(1, 3), L=st.integers(1, 4))
def test_matched_noise_fuzz(name, params, seed, V, K, L):
    K = 1 if name in SINGLE_DRAFT else K
    check_matched(name, params, np.random.default_rng(seed), V, K, L)


EDGE_STYLES = {
    "p_equals_q": ("equal",),
    "disjoint": ("disjoint",),
    "one_hot": ("onehot",),
    "tiny": ("tiny",),
    "close": ("close",),
}


@pytest.mark.parametrize("name,params", RULE_VARIANTS, ids=[variant_id(*v) for v in RULE_VARIANTS])
@pytest.mark.parametrize("edge", sorted(EDGE_STYLES))
def test_matched_noise_edge_rows(name, params, edge):
    """Every node of the tree in one degenerate style (V = 3, K ≤ 3, L = 3; L = 1 where the
    SpecTr-GBV tie exclusion forbids p = q sub-block rows)."""
    rng = np.random.default_rng(zlib.crc32(f"{variant_id(name, params)}{edge}".encode()))
    K = 1 if name in SINGLE_DRAFT else 3
    L = 1 if (edge == "p_equals_q" and name.startswith("spectr_gbv")) else 3
    styles = EDGE_STYLES[edge]
    if name in ("spectr", "kseq_gbv") and edge == "tiny":
        styles = ("tiny", "random")  # tiny rows alone are often nearly disjoint for V = 3
    for _ in range(5):
        check_matched(name, params, rng, 3, K, L, styles=styles, n_cases=8)


def test_matched_noise_covers_every_outcome_kind():
    """The fuzz inputs reach τ = 0, 0 < τ < L and τ = L, the fallback of an empty residual, and
    several selected drafts — so the equality above is not vacuous."""
    rng = np.random.default_rng(123)
    seen = set()
    for name, params in (("spectr", {}), ("kseq_gbv", {}), ("spectr_gbv", {}), ("gbv", {})):
        for _ in range(6):
            K = 1 if name in SINGLE_DRAFT else 3
            verdict, refs = check_matched(name, params, rng, 3, K, 3)
            for ref in refs:
                seen.add((name, "tau0" if ref.tau == 0 else "tauL" if ref.tau == 3 else "mid"))
                seen.add((name, f"sel{ref.selected}"))
    for name in ("spectr", "kseq_gbv", "spectr_gbv", "gbv"):
        assert {(name, "tau0"), (name, "mid"), (name, "tauL")} <= seen, (name, sorted(seen))
    for name in ("spectr", "kseq_gbv", "spectr_gbv"):
        assert {(name, "sel0"), (name, "sel1"), (name, "sel2")} <= seen, (name, sorted(seen))


@pytest.mark.parametrize("residual", ["released", "consistent"])
def test_empty_residual_falls_back_to_target_row(residual):
    """SpecTr-GBV with p = q at the root and every coin failing: the residual
    q·(1 − m^K) (or q·(1 − m)^K) is 0 for every token (m = 1), so the correction is drawn from
    the target row itself (reference/rules/base.py draw_residual), by both backends."""
    V, K, L = 4, 2, 2
    root = np.array([0.25, 0.125, 0.5, 0.125])
    child = np.array([0.1, 0.2, 0.3, 0.4])
    child_q = np.array([0.4, 0.3, 0.2, 0.1])
    tokens = np.array([[2, 0], [0, 3]])
    dp = np.stack([np.stack([root, child])] * K)
    tp = np.stack([np.stack([root, child_q, child_q])] * K)
    U = np.ones((1, K, L + 1))  # u = 1 fails every coin with h < 1
    E = np.array([[0.5, 0.01, 2.0, 0.3]])  # argmax q/E = token 1 (12.5)
    name, params = "spectr_gbv", {"residual": residual}
    verdict, refs = run_matched(get_verifier(name, **params), reference_rule(name, params),
                                [(tokens, dp, tp)], U, E)
    assert verdict_mismatch(verdict, 0, refs[0]) is None
    assert refs[0].tau == 0 and refs[0].tokens == (1,)
    assert int(verdict.tau[0]) == 0 and verdict.tokens[0].tolist() == [1, -1, -1]
