"""Every registered rule's branch-coverage certification case (oracle.certify_cases.
coverage_case, seeds RuleSpec.coverage_seeds) puts mass on every outcome class its code
distinguishes (oracle.branches: the correction at each depth 0..L−1, the bonus, the weighted
correction at each inner depth with its weight ≥ 0.1 away from 1, each draft, the Algorithm 2
record), computed EXACTLY by enumerating the reference rule's law (no sampling): each class
≥ COVERAGE_FLOOR = 0.02.

Why: before these cases, every built-in BV case had p_τ = 1 or P(0 < τ < L) = 0, and the torch
BV verifier with its correction residual (p_τ·q − p)_+ changed to (q − p)_+ passed the whole
certification (issue 27).  On the coverage case that defect moves the law by TV 0.0822
(test_the_bv_residual_defect_moves_the_coverage_law), above the detectable δ (< 0.015 at
N = 2·10^5, α = 1e-6) of tests/certify/verifiers/test_verifiers_certify.py
test_certify_coverage_case, which catches it.
"""

from __future__ import annotations

import numpy as np
import pytest

from spectr_gbv.certify import suite
from spectr_gbv.oracle.branches import WEIGHT_KIND, class_names, class_probabilities, prefix_weight
from spectr_gbv.oracle.certify import exact_verdict_law
from spectr_gbv.oracle.certify_cases import COVERAGE_FLOOR, COVERAGE_L, coverage_case
from spectr_gbv.reference.exact import total_variation
from spectr_gbv.reference.rules import get_rule, registry
from spectr_gbv.reference.rules.base import draw_residual
from spectr_gbv.reference.rules.bv import BlockVerification
from spectr_gbv.reference.verdict import Verdict

BUILTIN = ("sd", "spectr", "bv", "gbv", "spectr_gbv", "spectr_gbv_fixed", "kseq_gbv", "kseq_bv",
           "traversal", "mdbv", "mdbv_kseq")


def test_every_builtin_rule_has_a_coverage_case_and_a_weight_kind():
    assert set(BUILTIN) <= set(registry.names())
    for rule in BUILTIN:
        V, K, _, _ = registry.spec(rule).coverage_seeds
        assert rule in WEIGHT_KIND
        assert K == 1 if registry.is_single_draft(rule) else K >= 2


@pytest.mark.parametrize("rule", BUILTIN)
def test_coverage_case_reaches_every_class(rule):
    case = coverage_case(rule)
    probs = class_probabilities(rule, case.draft_tokens, case.draft_probs, case.target_probs)
    L, K = case.L, case.K
    assert L == COVERAGE_L == 3 and tuple(probs) == class_names(rule, K, L)
    depth = [probs[f"correction@{d}"] for d in range(L)] + [probs["bonus"]]
    assert abs(sum(depth) - 1.0) < 1e-12
    if K >= 2:
        assert abs(sum(probs[f"draft {k}"] for k in range(K)) - (1.0 - probs["correction@0"])) < 1e-12
    if WEIGHT_KIND[rule] is not None:
        assert {f"weighted correction@{d}" for d in range(1, L)} <= set(probs)
    low = {name: p for name, p in probs.items() if not p >= COVERAGE_FLOOR}
    assert not low, (rule, low)


def test_the_old_toy_cases_miss_classes():
    """What the coverage cases add: on the float32 toy case (V = 3, L = 3) of BV, τ ∈ {2, 3} up to
    rounding (P(τ ≤ 1) ≈ 1e-16) and the weight p_2 = 1: no weighted correction at all."""
    f32 = suite.toy_cases("bv")[0]
    probs = class_probabilities("bv", f32.draft_tokens, f32.draft_probs, f32.target_probs)
    assert probs["correction@0"] + probs["correction@1"] < 1e-12
    assert probs["weighted correction@1"] + probs["weighted correction@2"] < 1e-12


def test_prefix_weight_by_hand():
    """Draft rows p = (.5, .5), target q = (.25, .75) at every depth, draft tokens (0, 0, 1):
    ratios .5, .5, 1.5.  Capped: 1, .5, .25, .375; joint: the same (never above 1 here) but
    after a ratio-3 token the capped chain stops at 1 and the joint one does not."""
    tokens = np.array([[0, 0, 1]])
    dp = np.full((1, 3, 2), 0.5)
    tp = np.tile(np.array([0.25, 0.75]), (1, 4, 1))
    assert [prefix_weight("capped", tokens, dp, tp, 0, d) for d in range(4)] == [1.0, 0.5, 0.25, 0.375]
    assert [prefix_weight("joint", tokens, dp, tp, 0, d) for d in range(4)] == [1.0, 0.5, 0.25, 0.375]
    tokens = np.array([[1, 1, 0]])
    assert [prefix_weight("capped", tokens, dp, tp, 0, d) for d in range(4)] == [1.0, 1.0, 1.0, 0.5]
    assert [prefix_weight("joint", tokens, dp, tp, 0, d) for d in range(4)] == [1.0, 1.5, 2.25, 1.125]
    with pytest.raises(ValueError, match="kind"):
        prefix_weight("linear", tokens, dp, tp, 0, 1)


def unweighted_decide(block, source) -> Verdict:
    """BV's decide with the correction residual (q − p)_+ instead of (p_τ·q − p)_+ (issue 27's
    defect, written out)."""
    L = block.L
    h = block.plan["h"]
    for i in range(L, 0, -1):
        if source.coin(h[i], (0, i)):
            tau = i
            break
    else:
        tau = 0
    if tau == L:
        return Verdict(L, 0, block.prefix(0, L) + (source.draw(block.tp[0, L]),))
    token = draw_residual(source, block.tp[0, tau] - block.dp[0, tau], block.tp[0, tau])
    return Verdict(tau, 0 if tau else -1, block.prefix(0, tau) + (token,))


def test_the_bv_residual_defect_moves_the_coverage_law():
    """Exact TV between BV and BV with the unweighted residual on BV's coverage case: 0.08219
    (on the old toy cases: 0, the defect was invisible)."""
    from spectr_gbv.reference.randomness import enumerate_law

    def law_of(decide, case):
        block = BlockVerification().prepare(case.draft_tokens, case.draft_probs, case.target_probs)
        out = {}
        for v, pr in enumerate_law(lambda src: decide(block, src)).items():
            key = (v.tau, v.accepted, v.last_token)
            out[key] = out.get(key, 0.0) + pr
        return out

    bv = get_rule("bv")
    cover = coverage_case("bv")
    tv = total_variation(exact_verdict_law(bv, cover.draft_tokens, cover.draft_probs, cover.target_probs),
                         law_of(unweighted_decide, cover))
    print(f"TV {tv:.6f}")
    assert tv == pytest.approx(0.0821900276155, abs=1e-9)
    for old in suite.toy_cases("bv"):
        assert total_variation(exact_verdict_law(bv, old.draft_tokens, old.draft_probs, old.target_probs),
                               law_of(unweighted_decide, old)) < 1e-12
