"""Losslessness of the reference rules, exactly: the law of the first N ≥ L + 2 emitted tokens
(several iterations, Algorithm 2 carried across them) equals the target's law to 1e-12 on
prefix-dependent models; known lossy rules are detected."""

import pytest
from hypothesis import HealthCheck, given, settings

from planted_rules import FirstFailureBV, SharedUniformBV
from proofs_check.instances import fixed_instances, instances, random_instance
from reference.exact import generation_law, target_law, total_variation
from reference.rules import RULES, GreedyBlockVerification, registry

SINGLE = registry.names(single_draft=True)
MULTI = ("spectr", "kseq_gbv")
TOL = 1e-12


def tv_first_tokens(rule, inst, extra=2):
    n = inst.L + extra
    law = generation_law(rule, inst.draft, inst.target, inst.K, inst.L, n)
    return total_variation(law.token_law, target_law(inst.target, n))


@pytest.mark.parametrize("name", SINGLE)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=instances(Ks=(1,)))
def test_single_draft_rules_lossless_fuzzed(name, inst):
    assert tv_first_tokens(RULES[name], inst) <= TOL


@pytest.mark.parametrize("name", MULTI)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=instances(budget=81))
def test_multi_draft_rules_lossless_fuzzed(name, inst):
    assert tv_first_tokens(RULES[name], inst) <= TOL


@pytest.mark.parametrize("name", MULTI)
@pytest.mark.parametrize("inst", [i for i in fixed_instances(Ks=(2, 3), seeds=(3,)) if i.V ** (i.K * i.L) > 81],
                         ids=str)
def test_multi_draft_rules_lossless_larger(name, inst):
    """The configurations beyond the fuzzers' budget (V^(K·L) up to 729)."""
    assert tv_first_tokens(RULES[name], inst) <= TOL


def test_lossless_over_more_tokens():
    """Four windows deep (N = 3L + 1) with Algorithm 2 stacking."""
    inst = random_instance(2, 2, 2, seed=11, concentration=0.3)
    assert tv_first_tokens(RULES["kseq_gbv"], inst, extra=5) <= TOL
    assert tv_first_tokens(RULES["gbv"], inst.with_K(1), extra=5) <= TOL


PREFIX_DEPENDENT = random_instance(2, 1, 2, seed=0, concentration=1.0)


@pytest.mark.parametrize("rule,min_tv", [
    (SharedUniformBV(), 1e-3),
    (FirstFailureBV(), 1e-2),
    (GreedyBlockVerification(algorithm2=False), 1e-3),
])
def test_wrong_variants_detected(rule, min_tv):
    """Planted wrong rules give a clearly positive TV (here 0.046, 0.209 and 0.042)."""
    inst = PREFIX_DEPENDENT if rule.name != "gbv" else random_instance(2, 1, 2, seed=1, concentration=0.7)
    assert tv_first_tokens(rule, inst) > min_tv


@pytest.mark.parametrize("name", ("spectr_gbv", "spectr_gbv_fixed"))
def test_released_rule_lossy_on_prefix_dependent(name):
    inst = random_instance(2, 2, 2, seed=2, concentration=1.0)
    assert tv_first_tokens(RULES[name], inst) > 1e-2
