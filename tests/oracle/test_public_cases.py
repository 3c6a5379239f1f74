"""The public certifier's default families (oracle.certify_cases.FAMILIES, run by
oracle.harness.certify_verifier, the pytest plugin's assert_lossless and the spectr_certify
fixture) cover every case kind of the project's own plan (certify/verifiers/run.py
``plan``), and the families added for issue 36 reach what they claim — all computed exactly
(the reference rules' laws enumerated, no sampling)."""

from __future__ import annotations

import numpy as np
import pytest

from spectr_gbv.oracle.branches import class_probabilities
from spectr_gbv.oracle.certify import FirstTokenCase, case_power, exact_verdict_law
from spectr_gbv.oracle.certify_cases import (BRANCHES_CASES, COVERAGE_FLOOR, DEEP_L, FAMILIES, FamilyNotApplicable,
                                             branches_case, case_family, coverage_case, deep_case)
from spectr_gbv.oracle.harness import accepts_zero_target, certify_verifier
from spectr_gbv.reference.rules import RULES, get_rule, registry

MULTI = tuple(r for r in registry.names() if not registry.is_single_draft(r))

# How each case kind of the plan is seen by the public defaults: plan kind → family.
KIND_FAMILY = {"toy": "toy", "coverage": "coverage", "distinctive": "distinctive", "rows": "large",
               "rows_bf16": "large"}
# Plan kinds the public certifier deliberately does not run, with the reason.
NOT_PUBLIC = {"law": "the law-level case tests the first token against the TARGET's law (losslessness), "
                     "not the claimed rule's law: oracle.lossless.certify_lossless does that"}


def plan_kinds(rule: str) -> set[str]:
    """The kinds of the plan's entries for ``rule`` (lossless / conformance rows, not the
    planted ones): toy-size entries by their cases' names, the others by their size."""
    from spectr_gbv.certify.verifiers.run import plan

    kinds = set()
    for entry in plan([rule], quick=False):
        if entry.kind == "planted" or entry.rule != rule:
            continue
        if entry.size != "toy":
            kinds.add(entry.size)
            continue
        for case in entry.build():
            assert not isinstance(case, FirstTokenCase)
            kinds.add("coverage" if " coverage " in case.name
                      else "distinctive" if "(distinctive)" in case.name else "toy")
    return kinds


@pytest.mark.parametrize("rule", registry.names())
def test_public_defaults_cover_every_kind_of_the_plan(rule):
    """For every registered rule, each kind of its plan entries is one the public defaults run
    (KIND_FAMILY; a kind the plan gains and this table lacks fails here), and the family builds
    a case for the rule at its default K."""
    kinds = plan_kinds(rule)
    assert {"toy", "coverage"} <= kinds
    unknown = kinds - set(KIND_FAMILY) - set(NOT_PUBLIC)
    assert not unknown, f"plan kinds {unknown} of {rule!r} have no public family"
    K = registry.default_K(rule, 2)
    for kind in kinds - set(NOT_PUBLIC):
        family = KIND_FAMILY[kind]
        assert family in FAMILIES
        if family == "large":  # V = 4,096: name only (building it is the large case's own test)
            continue
        case = case_family(family, rule, K, 3, "float32")
        assert case.name.startswith(f"{rule} {family} ")


@pytest.mark.parametrize("rule", registry.names())
def test_coverage_family_is_the_plans_case(rule):
    """The "coverage" family hands the verifier the plan's coverage case itself (float32 rows)."""
    public, plan = case_family("coverage", rule, registry.default_K(rule, 2), 3, "float32"), coverage_case(rule)
    for a, b in ((public.draft_tokens, plan.draft_tokens), (public.draft_probs, plan.draft_probs),
                 (public.target_probs, plan.target_probs)):
        assert np.array_equal(a, b)


def test_runtime_rule_without_seeds_is_skipped_with_a_note():
    """A rule registered at run time has no coverage, distinctive or branches case: the run
    skips them with a note (by default or by name); a run left with no case raises."""
    spec = registry.spec("sd")
    import dataclasses

    registry.register(dataclasses.replace(spec, name="sd_runtime_copy", coverage_seeds=None, planted=()))
    try:
        report = certify_verifier(RULES["sd"], "sd_runtime_copy", K=1, L=2, n_samples=200,
                                  families=None, cases=())
        notes = " ".join(report.skipped)
        assert "'coverage'" in notes and "'branches'" in notes and "'distinctive'" in notes
        assert "skipped: family 'coverage'" in report.table()
        names = [r.name.split()[1] for r in report.results]
        assert names == [f for f in FAMILIES if f not in ("coverage", "distinctive", "branches")]
        named = certify_verifier(RULES["sd"], "sd_runtime_copy", K=1, L=2, n_samples=200, families=("coverage", "toy"))
        assert [r.name.split()[1] for r in named.results] == ["toy"] and "no coverage_seeds" in named.skipped[0]
        with pytest.raises(FamilyNotApplicable, match="no case to run: family 'coverage'"):
            certify_verifier(RULES["sd"], "sd_runtime_copy", K=1, L=2, n_samples=200, families=("coverage",))
    finally:
        registry.unregister("sd_runtime_copy")


def test_every_multi_draft_rule_has_a_branches_case():
    assert set(MULTI) == set(BRANCHES_CASES)
    with pytest.raises(FamilyNotApplicable, match="single-draft"):
        branches_case("sd")


@pytest.mark.parametrize("rule", MULTI)
def test_branches_case_reaches_every_multi_draft_class(rule):
    """Drafts 0 and 1 share their first token and differ at the second; every class of
    oracle.branches but the weighted corrections (the coverage family's job) — τ = 0..L, both
    drafts, the Algorithm 2 record — has exact probability ≥ COVERAGE_FLOOR = 0.02."""
    case = branches_case(rule)
    t = case.draft_tokens
    assert case.K == 2 and t[0, 0] == t[1, 0] and t[0, 1] != t[1, 1]
    probs = class_probabilities(rule, t, case.draft_probs, case.target_probs)
    assert {"draft 0", "draft 1", "bonus"} <= set(probs)
    low = {k: p for k, p in probs.items() if not k.startswith("weighted") and not p >= COVERAGE_FLOOR}
    assert not low, (rule, low)


@pytest.mark.parametrize("rule", registry.names())
def test_deep_case_has_mass_past_depth_3(rule):
    """The "deep" case is at the largest L the engine chooses (gpu_backend.engine.defaults
    .L_CANDIDATES) and every rule puts ≥ 0.44 on a correction at depth 3..L−1."""
    from spectr_gbv.gpu_backend.engine.defaults import L_CANDIDATES

    assert DEEP_L == max(L_CANDIDATES)
    case = deep_case(rule)
    assert case.L == DEEP_L
    probs = class_probabilities(rule, case.draft_tokens, case.draft_probs, case.target_probs)
    assert sum(probs[f"correction@{d}"] for d in range(3, DEEP_L)) >= 0.44


def test_deep_case_power_against_a_depth_3_defect():
    """N = 20,000 (the default), α = 1e-6: the deep case states δ = 0.0313 for "sd", and the
    planted defect of test_public_planted (correction from q instead of (q − p)_+ at depth ≥ 3)
    moves its law by TV 0.2125, 6.8 δ: caught with power ≥ 0.99 by the joint test alone."""
    from public_planted import DeepTargetRowSD

    case = deep_case("sd")
    delta = case_power(case, 20_000, 1e-6).detectable_tv
    law = exact_verdict_law(get_rule("sd"), case.draft_tokens, case.draft_probs, case.target_probs)
    bad = exact_verdict_law(DeepTargetRowSD(), case.draft_tokens, case.draft_probs, case.target_probs)
    from spectr_gbv.reference.exact import total_variation

    tv = total_variation(law, bad)
    assert delta == pytest.approx(0.0313, abs=5e-4) and tv == pytest.approx(0.2125, abs=5e-4)
    assert tv > 5 * delta


@pytest.mark.parametrize("rule,K", [("sd", 1), ("bv", 1), ("spectr", 2), ("traversal", 2), ("kseq_gbv", 3)])
def test_zeros_family_puts_zeros_where_drafts_land(rule, K):
    """Target probability 0 on every token drafted at the last depth (and at depth 0 on other
    drafts' first tokens), while depth L − 1 is still reached: the exact law gives τ ≥ L − 1
    positive probability and no outcome accepting a zero-probability token."""
    case = case_family("zeros", rule, K, 3)
    L = case.L
    for k in range(K):
        assert case.target_probs[k, L - 1, case.draft_tokens[k, L - 1]] == 0.0
    law = exact_verdict_law(get_rule(rule), case.draft_tokens, case.draft_probs, case.target_probs)
    assert sum(p for (tau, _, _), p in law.items() if tau >= 1) > 0.05
    assert sum(p for (tau, _, _), p in law.items() if tau == L) == 0.0
    for (tau, prefix, last), p in law.items():
        tokens = np.array(list(prefix) + [last] + [-1] * (L - tau))
        assert p == 0.0 or not accepts_zero_target(case, tokens, tau)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_family_drafts_only_tokens_of_positive_draft_probability(rule):
    """A drafted token has draft probability > 0 in its own row and drafts that share a prefix
    share their rows (what i.i.d. drafting produces).  The one-hot family at K ≥ 2 once gave
    each draft the indicator of its own first token, so draft 1's token had p = 0 in draft 0's
    row and the reference rules divided by it."""
    K = 1 if registry.is_single_draft(rule) else 2
    for family in FAMILIES:
        try:
            case = case_family(family, rule, K, 3)
        except FamilyNotApplicable:
            continue
        tokens, dp = case.draft_tokens, case.draft_probs
        Kc, L = tokens.shape
        for j in range(Kc):
            for d in range(L):
                assert dp[j, d, tokens[j, d]] > 0, (case.name, j, d)
                for i in range(j):
                    if tuple(tokens[i, :d]) == tuple(tokens[j, :d]):
                        np.testing.assert_array_equal(dp[i, d], dp[j, d], err_msg=f"{case.name} {i} {j} {d}")


def test_one_hot_family_at_K2_sends_K_copies_of_one_draft():
    case = case_family("onehot", "spectr", 2, 3)
    assert (case.draft_tokens == case.draft_tokens[:1]).all()
    assert (case.draft_probs.max(axis=-1) == 1.0).all()
    with np.errstate(divide="raise", invalid="raise"):
        law = exact_verdict_law(get_rule("spectr"), case.draft_tokens, case.draft_probs, case.target_probs)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
