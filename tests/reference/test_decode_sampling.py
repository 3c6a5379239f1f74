"""The sampling paths have the exact laws the enumerator computes (same rule code) — statistical
tests with stated power.

Two levels:
  * one iteration, every rule: ``rule.decide`` with the seeded sampler against
    ``enumerate_law`` over the same code, on fixed toy blocks;
  * whole generations through the decode loop (drafting, cut-back, Algorithm 2's stack of
    modified targets) against ``generation_law``'s dynamic programme, for the rules whose
    decode path differs: gbv (K = 1) and kseq_gbv (K = 2) carry modified targets into the next
    iteration; spectr (K = 2) does not.  The loop is otherwise rule-independent.
Each test draws N = sample_size_for_tv(0.02, α = 1e-6, power 0.99, cells) samples, so every
deviation of TV ≥ 0.02 on the compared cells is detected with probability ≥ 0.99 (the
released rule's whole defect on the toy is TV 0.061); the cells are chosen so that none is
pooled (asserted), so that bound covers the whole law.  Seeded: the outcome is reproducible.
The generation tests cost ~1-2 minutes each on the 2-core CI machine (marked slow, kept in CI).
"""

import numpy as np
import pytest

from spectr_gbv.oracle.certify import exact_verdict_law
from spectr_gbv.oracle.certify_cases import fixed_case, toy_models
from spectr_gbv.oracle.gtest import counts_from_samples, gtest
from spectr_gbv.oracle.gtest_power import gtest_power, sample_size_for_tv
from spectr_gbv.oracle.mean_tests import mean_within_ci
from spectr_gbv.proofs_check.instances import random_instance
from spectr_gbv.reference.decode import generate
from spectr_gbv.reference.exact import generation_law
from spectr_gbv.reference.randomness import SamplingSource
from spectr_gbv.reference.rules import RULES, registry

DELTA = 0.02
ALPHA = 1e-6
POWER = 0.99
SINGLE = registry.names(single_draft=True)


def _n_for(law: dict) -> int:
    """The χ² sample size for δ = 0.02, raised (1 % steps) until the calibrated G-test
    (``oracle.gtest.gtest``: G/s with s from the exact null mean, s ≥ 1) states δ ≤ 0.02 on
    this law (``gtest_power``)."""
    n = sample_size_for_tv(DELTA, ALPHA, POWER, n_cells=sum(1 for p in law.values() if p > 0))
    while gtest_power(law, n, ALPHA).detectable_tv > DELTA:
        n = int(n * 1.01) + 1
    return n


def _check(result, law_name: str):
    print(result.summary())
    assert result.merged_mass == 0.0, f"{law_name}: cells pooled, the stated power would not hold"
    assert result.detectable_tv <= DELTA, result.summary()
    assert result.passed, result.summary()


@pytest.mark.parametrize("name", list(RULES))
def test_sampled_iterations_match_enumerated_law(name):
    """One iteration on fixed toy blocks (V = 3, L = 2, K = 2; K = 1 single-draft): the
    sampler's outcomes (τ, accepted prefix, emitted token) against the enumerated law."""
    K = 1 if name in SINGLE else 2
    rule = RULES[name]
    case = fixed_case("sampler", name, *toy_models(3, 12), K, 2, 14)
    law = exact_verdict_law(rule, case.draft_tokens, case.draft_probs, case.target_probs)
    n = _n_for(law)
    block = rule.prepare(case.draft_tokens, case.draft_probs, case.target_probs)
    source = SamplingSource(np.random.default_rng(2024))
    outcomes = []
    for _ in range(n):
        v = rule.decide(block, source)
        outcomes.append((v.tau, v.accepted, v.last_token))
    _check(gtest(counts_from_samples(outcomes), law, ALPHA), name)


@pytest.mark.slow
@pytest.mark.parametrize("name,K", [("gbv", 1), ("kseq_gbv", 2), ("spectr", 2)])
def test_sampled_generations_match_exact_law(name, K):
    """Generations of L + 1 = 3 tokens (V = 2: one or two iterations, the second under the
    modified target for gbv / kseq_gbv), G-test against the exact law of the first 3 tokens
    (the rule's own law, not the target's), and the mean number of target calls against its
    exact expectation."""
    inst = random_instance(2, K, 2, seed=5, concentration=0.5)
    n_tokens = inst.L + 1
    exact = generation_law(RULES[name], inst.draft, inst.target, K, inst.L, n_tokens)
    n = _n_for(exact.token_law)
    rng = np.random.default_rng(2024)
    runs = [generate(RULES[name], inst.draft, inst.target, K, inst.L, n_tokens, rng) for _ in range(n)]
    _check(gtest(counts_from_samples(r.tokens for r in runs), exact.token_law, ALPHA), name)
    calls = mean_within_ci([r.target_calls for r in runs], exact.expected_target_calls, ALPHA)
    assert calls.passed, calls.summary()


def test_generate_counts_iterations():
    inst = random_instance(2, 1, 3, seed=1)
    run = generate(RULES["bv"], inst.draft, inst.target, 1, 3, 10, seed=3)
    assert len(run.tokens) == 10
    assert run.target_calls == len(run.taus)
    assert sum(t + 1 for t in run.taus) >= 10 > sum(t + 1 for t in run.taus[:-1])
