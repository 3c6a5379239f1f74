"""Matched-noise equality of the batched verifiers with the reference rules.

The same uniforms (coin (k, i) succeeds iff u <= h) and exponentials (race argmax log w − log E)
are fed to gpu_backend's verifier (noise=...) and, row by row, to the reference rule through
reference.randomness.MatchedSource, on float64 inputs.  τ, the selected draft, the emitted
tokens (with their -1 padding) and the Algorithm 2 record (kind, K, ρ, joints of the emitted
tokens to 1e-9 relative) must be identical.

Inputs avoid the rounding ties described in test_verifiers_cases (ill-conditioned ρ* rows at
K-SEQ positions; p = q sub-block rows for SpecTr-GBV); everything else — p = q rows (exact
sums), disjoint supports, one-hot rows, tokens of probability 1e-14 — is in.

The multi-draft rules that leave later targets untouched and are not among RULE_VARIANTS
(TREE_RULES: K-SEQ-BV, Traversal, MDBV) are fuzzed on draft trees of their own (V ≤ 6 and a
large V, K ≤ 3, L ≤ 4); K-SEQ-BV's root is a K-SEQ position, so its cases avoid the
ill-conditioned ρ* rows (kseq_safe); Traversal and MDBV take every style.  MDBV's host plan is
compared with the reference's node by node, and at K = 1 each equals the torch BV verifier.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectr_gbv.gpu_backend.verifiers import get_verifier
from spectr_gbv.gpu_backend.verifiers.bv import OneDraftIsBV
from spectr_gbv.gpu_backend.verifiers.mdbv import plan_row
from spectr_gbv.reference.rules import RULES, registry
from helpers.verifier_cases import one_torch_thread  # noqa: F401  (autouse fixture)
from helpers.verifier_cases import (RULE_VARIANTS, SINGLE_DRAFT, case_options, random_noise,
                                  reference_rule, run_matched, stack_cases, tree_case, variant_id,
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
    K, L = 2, 2  # V = 4
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


# -- the multi-draft rules that leave later targets untouched -------------------------------------

TREE_RULES = tuple(n for n in registry.names(lossless=True, single_draft=False, modifies_targets=False)
                   if n not in {name for name, _ in RULE_VARIANTS})
# A rule too slow at a real vocabulary (registry bench=False: MDBV's reference computes each
# node's selection law in ~10 s at V = 4,096, every cut bisected in Python) is fuzzed at V = 40.
LARGE_V = {n: 4096 if registry.spec(n).bench else 40 for n in TREE_RULES}


def make_tree_cases(rng, name, V, K, L, n, styles=None):
    opts = {"kseq_safe": name == "kseq_bv"}
    if styles is not None:
        opts["styles"] = styles
    return [tree_case(rng, V, K, L, **opts) for _ in range(n)]


def check_tree_rule(name, rng, V, K, L, n_cases=4, styles=None):
    cases = make_tree_cases(rng, name, V, K, L, n_cases, styles)
    U, E = random_noise(rng, n_cases, K, L, V)
    verdict, refs = run_matched(get_verifier(name), RULES[name], cases, U, E)
    for b, ref in enumerate(refs):
        why = verdict_mismatch(verdict, b, ref)
        assert why is None, f"{name} V={V} K={K} L={L} row {b}: {why}"
    assert verdict.modification is None
    return refs


@pytest.mark.parametrize("name", TREE_RULES)
@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), V=st.sampled_from([2, 3, 4, 5, 6, 0]),
       K=st.integers(1, 3), L=st.integers(1, 4))
def test_tree_rules_matched_noise_fuzz(name, seed, V, K, L):
    check_tree_rule(name, np.random.default_rng(seed), V or LARGE_V[name], K, L)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), V=st.sampled_from([2, 3, 4, 6, 40]),
       K=st.integers(1, 4), L=st.integers(1, 4),
       style=st.sampled_from(["mixed", "random", "equal", "disjoint", "onehot", "tiny", "close"]))
def test_mdbv_plan_equals_the_reference_plan(seed, V, K, L, style):
    """MDBV's plan (host side) node by node against the reference's: the same tree, the same
    child orders, budgets and fallback probabilities (clipped to [0, 1], as the coins use them)
    to 1e-12, residual rows to 1e-12.

    One exclusion, a 0/0 of the reference: h = (w − ΣA)/(1 − ΣA) at a node where the budget w
    and ΣA are both within 1e-9 of 1 (e.g. p = q rows: ΣA = w exactly in exact arithmetic, and
    w = s/left rounds to 1 − 1e-16) is rounding noise over rounding noise (seen: −2.0 here,
    0.0 in the reference; both mean "never"); those nodes' fallbacks are not compared."""
    rng = np.random.default_rng(seed)
    styles = None if style == "mixed" else (style,)
    tokens, dp, tp = tree_case(rng, V, K, L, **({} if styles is None else {"styles": styles}))
    ref = RULES["mdbv"].prepare(tokens, dp, tp).plan["nodes"]
    mine = plan_row(tokens, dp, tp)
    assert [n.name for n in mine] == [n.name for n in ref]
    for a, r in zip(mine, ref):
        assert a.order == r.order, (a.name, a.order, r.order)
        assert abs(a.budget - r.budget) <= 1e-12, (a.name, a.budget, r.budget)
        assert (a.residual is None) == (r.residual is None)
        # 1 − ΣA = 1 − w + Σ residual (the residual is w·q − A)
        well_posed = r.residual is None or 1.0 - r.budget + r.residual.sum() > 1e-9
        if well_posed:
            fa, fr = min(max(a.fallback, 0.0), 1.0), min(max(r.fallback, 0.0), 1.0)
            assert abs(fa - fr) <= 1e-12, (a.name, a.fallback, r.fallback)
        if r.residual is not None:
            assert np.max(np.abs(a.residual - r.residual)) <= 1e-12, a.name


TREE_EDGE_STYLES = {"p_equals_q": ("equal",), "disjoint": ("disjoint",), "one_hot": ("onehot",)}


@pytest.mark.parametrize("name", TREE_RULES)
@pytest.mark.parametrize("edge", sorted(TREE_EDGE_STYLES))
def test_tree_rules_matched_noise_edge_rows(name, edge):
    """Every node of the tree in one degenerate style (V = 3, K = 3, L = 3)."""
    rng = np.random.default_rng(zlib.crc32(f"{name}{edge}".encode()))
    for _ in range(6):
        check_tree_rule(name, rng, 3, 3, 3, n_cases=8, styles=TREE_EDGE_STYLES[edge])


@pytest.mark.parametrize("name", TREE_RULES)
def test_tree_rules_matched_noise_covers_every_outcome_kind(name):
    """The matched inputs reach τ = 0, 0 < τ < L and τ = L and every selected draft, so the
    equality above is not vacuous."""
    rng = np.random.default_rng(7)
    seen = set()
    for _ in range(25):
        for ref in check_tree_rule(name, rng, 3, 3, 3, n_cases=8):
            seen.add("tau0" if ref.tau == 0 else "tauL" if ref.tau == 3 else "mid")
            seen.add(f"sel{ref.selected}")
    assert {"tau0", "mid", "tauL", "sel0", "sel1", "sel2"} <= seen, sorted(seen)


@pytest.mark.parametrize("name", TREE_RULES)
@pytest.mark.parametrize("V", [3, 4096])
def test_tree_rules_at_k1_equal_the_torch_bv_verifier(name, V):
    """K = 1: the rule's own decision — the tree walk (``decide_tree``) where ``decide`` hands
    K = 1 to BV's verifier, else ``decide`` — gives the same outputs as gpu_backend's BV under
    the same seeds (reference: K = 1 is BV exactly, with the same coins (0, i) and the same
    residual up to a positive factor); the hand-off rests on this.  (The hand-off itself is BV's
    ``decide``: comparing its outputs with BV's would compare BV with itself.)"""
    rng = np.random.default_rng(V)
    B = 400 if V == 3 else (40 if registry.spec(name).bench else 12)
    cases = make_tree_cases(rng, name, V, 1, 3, B)
    tok, dp, tp = stack_cases(cases, torch.float32)
    seeds = torch.arange(B, dtype=torch.int64) * 7919 + 3
    tree = get_verifier(name)
    if hasattr(tree, "decide_tree"):
        assert isinstance(tree, OneDraftIsBV)  # decide: K = 1 to BV, else the walk
        tree.decide = tree.decide_tree  # the walk itself, not the hand-off
    mine = tree(tok, dp, tp, seeds=seeds)
    bv = get_verifier("bv")(tok, dp, tp, seeds=seeds)
    assert torch.equal(mine.tau, bv.tau)
    assert torch.equal(mine.tokens, bv.tokens)
    assert torch.equal(mine.selected, bv.selected)
    assert len(set(mine.tau.tolist())) >= (4 if V == 3 else 2)  # the comparison has teeth
