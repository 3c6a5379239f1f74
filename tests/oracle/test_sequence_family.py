"""oracle/sequence_family.py and oracle/sequence_scores.py, measured by simulation from exact laws
(oracle/sequence_simulation.py: order-1 Markov chains).

- Size: the family at α = 0.05 on exact samples (200 runs of 20 sequences × 8 tokens, V = 128,
  whole and top-20 laws) rejects at most 0.10 of the runs (a true rate of 0.05 exceeds 0.10 in 200
  runs with probability 0.002); each directional score on its own, at its nominal 0.05 and its
  own sidedness, also at most 0.10 (the normal approximation of a self-normalised sum of 140
  martingale differences).
- Power: on V = 512 (row entropies 2–4 nats), N = 60 sequences × 16 tokens, α = 1e-3, the planted
  samplers T = 0.9, top-p 0.95 and 10 % stale logits are caught in every one of 10 runs, each by
  the test that knows its direction (their sample counts against the oracle likelihood-ratio test
  and MMD: benchmarks/SEQUENCE_POWER.md).
"""

import math

import numpy as np
import pytest

from spectr_gbv.oracle.sequence_family import DIRECTIONAL, family_test, planned_directional, record_pits
from spectr_gbv.oracle.sequence_records import records_from_laws, records_from_top
from spectr_gbv.oracle.sequence_scores import mixture_test, score_test, temperature_test, truncation_test
from spectr_gbv.oracle.sequence_simulation import MarkovChain


def _samples(chain, N, n, rng, defect=None, draft=None, top=None):
    out = []
    for _ in range(N):
        prompt = [int(rng.integers(chain.V))]
        toks = chain.sample(prompt, n, rng, defect, draft)
        laws = chain.laws(prompt, toks)
        if top:
            ids = np.argsort(-laws, axis=1, kind="stable")[:, :top]
            out.append(records_from_top(toks, ids, np.log(np.take_along_axis(laws, ids, 1))))
        else:
            out.append(records_from_laws(toks, laws, draft.laws(prompt, toks) if draft is not None else None))
    return out


@pytest.fixture(scope="module")
def small():
    return MarkovChain(128, seed=3)


@pytest.mark.parametrize("top", [None, 20])
def test_the_family_keeps_its_false_alarm_rate(small, top):
    rng = np.random.default_rng(11)
    runs, rejected = 200, 0
    alone = {"temperature": 0, "position shift": 0, "truncation": 0}
    for run in range(runs):
        samples = _samples(small, 20, 8, rng, top=top)
        rejected += not family_test(samples, alpha=0.05, seed=run).passed
        flat = [r for s in samples for r in s]
        alone["temperature"] += not temperature_test(flat, 0.05).passed
        alone["position shift"] += not mixture_test(flat, "position shift", 0.05).passed
        alone["truncation"] += not truncation_test(flat, 0.05).passed
    assert rejected / runs <= 0.10
    assert all(v / runs <= 0.10 for v in alone.values()), alone


@pytest.fixture(scope="module")
def chain():
    return MarkovChain(512, seed=0)


@pytest.mark.parametrize("defect,test", [
    (("temperature", 0.9), "temperature"),
    (("top_p", 0.95), "truncation"),
    (("stale", 0.1), "position shift"),
])
def test_planted_samplers_are_caught_by_their_directional_test(chain, defect, test):
    rng = np.random.default_rng(5)
    caught = 0
    for run in range(10):
        res = family_test(_samples(chain, 60, 16, rng, defect), alpha=1e-3, seed=run)
        caught += (not res.passed) and not res.test(test).passed
    assert caught == 10


def test_a_draft_leak_needs_the_drafts_law_and_is_then_tested(chain):
    draft = chain.draft(noise=1.0)
    rng = np.random.default_rng(9)
    samples = _samples(chain, 20, 8, rng, ("leak", 0.5), draft)
    assert planned_directional(True) == DIRECTIONAL and "draft leak" not in planned_directional(False)
    res = family_test(samples, alpha=1e-3)
    leak = res.test("draft leak")
    assert leak is not None and not leak.passed and leak.statistic > 20  # log W: an e-value above e^20
    # the weight caught with power 0.99 shrinks with the sample: 4x the tokens, below 0.5
    more = family_test(samples * 4, alpha=1e-3).test("draft leak")
    assert 0 < more.detectable < 0.5 and more.detectable < leak.detectable < 1


def test_pits_depend_on_the_sample_index_only():
    law = np.full((3, 4), 0.25)
    recs = records_from_laws([0, 1, 2], law)
    a = record_pits(recs, 7, 1, "id")
    assert np.array_equal(a, record_pits(recs, 7, 1, "id"))
    assert not np.array_equal(a, record_pits(recs, 8, 1, "id"))
    u = np.random.default_rng([1, 7]).random(3)
    assert a == pytest.approx([0.0 + 0.25 * u[0], 0.25 + 0.25 * u[1], 0.5 + 0.25 * u[2]], abs=1e-15)


def test_the_bonferroni_shares():
    law = np.full((4, 8), 1 / 8)
    samples = [records_from_laws([1, 2, 3, 4], law)] * 3
    res = family_test(samples, alpha=0.01)
    pooled = [r for r in res.rows if r.scope == "all"]
    positions = [r for r in res.rows if r.scope != "all"]
    assert {r.alpha for r in pooled} == {0.01 / 4 / 2 / 2} and len(positions) == 8
    assert {r.alpha for r in positions} == {0.01 / 4 / 2 / 8}
    assert {d.alpha for d in res.directional} == {0.01 * 3 / 4 / 3}
    assert res.n_tokens == 12 and res.coarsened == 8
    # a share reserved for the report tests comes out of the per-position rows only
    held = family_test(samples, alpha=0.01, reserved=0.01 / 16)
    assert {r.alpha for r in held.rows if r.scope == "all"} == {0.01 / 4 / 2 / 2}
    assert [r.alpha for r in held.rows if r.scope != "all"] == pytest.approx([(0.01 / 8 - 0.01 / 16) / 8] * 8)
    assert {d.alpha for d in held.directional} == {0.01 * 3 / 4 / 3}
    with pytest.raises(ValueError, match="reserved"):
        family_test(samples, alpha=0.01, reserved=0.01 / 8)


def test_an_impossible_token_fails_the_family():
    law = np.array([[0.5, 0.5, 0.0]] * 2)
    res = family_test([records_from_laws([0, 2], law)], alpha=0.01)
    assert res.impossible == 1 and not res.passed


def test_tolerance_absorbs_a_bias_no_larger_than_it():
    # every token one step hotter than its law: the temperature test fails at η = 0 and passes when
    # η covers the shift (bias η·range per token)
    rng = np.random.default_rng(2)
    chain = MarkovChain(64, seed=1)
    samples = _samples(chain, 100, 8, rng, ("temperature", 0.97))
    flat = [r for s in samples for r in s]
    exact = score_test(flat, "temperature", 1e-3, tolerance=0.0)
    loose = score_test(flat, "temperature", 1e-3, tolerance=0.05)
    assert loose.pvalue >= exact.pvalue and loose.bias == pytest.approx(0.05 * sum(r["tr"] for r in flat))
    nt = truncation_test(flat, 1e-3, tolerance=0.5)
    assert nt.passed and nt.pvalue == 1.0


def test_bad_arguments():
    law = np.full((1, 2), 0.5)
    recs = [records_from_laws([0], law)]
    with pytest.raises(ValueError, match="alpha"):
        family_test(recs, alpha=0)
    with pytest.raises(ValueError, match="unknown test"):
        family_test(recs, directional=("nonsense",))
    with pytest.raises(ValueError, match="indices"):
        family_test(recs, indices=[1, 2])
    with pytest.raises(ValueError, match="at least one"):
        family_test([])
    with pytest.raises(ValueError, match="name must be"):
        score_test(recs[0], "colour", 1e-3)
    with pytest.raises(ValueError, match="name must be"):
        mixture_test(recs[0], "temperature", 1e-3)


def test_the_e_value_tests_keep_their_size_at_every_sample_size():
    """Ville's inequality: the shift and leak tests reject an exact sampler with probability at most
    α whatever N — measured at N = 5 sequences of 16 tokens (80 tokens, where the heavy-tailed ratios
    made a normal approximation reject 8 and 5 times in 300 at a share of 1.9e-3), 300 runs at
    α = 0.05 each: at most 0.09 (a true 0.05 exceeds it with probability 0.004)."""
    chain = MarkovChain(512, seed=0)
    draft = chain.draft(noise=3.0)
    rng = np.random.default_rng(77)
    rejected = {"position shift": 0, "draft leak": 0}
    for _ in range(300):
        flat = [r for s in _samples(chain, 5, 16, rng, draft=draft) for r in s]
        for name in rejected:
            rejected[name] += not mixture_test(flat, name, 0.05).passed
    assert all(v / 300 <= 0.09 for v in rejected.values()), rejected


def test_plan_power_scales_a_pilot_and_matches_the_detectable_of_a_run(chain):
    from spectr_gbv.oracle.sequence_family import plan_power

    rng = np.random.default_rng(4)
    pilot = [r for s in _samples(chain, 16, 16, rng) for r in s]
    run = family_test(_samples(chain, 60, 16, rng), alpha=1e-3)
    pp = plan_power(pilot, 960, 1e-3)
    # the omnibus figure is exact (it depends on N, alpha, eta only); the temperature figure is the
    # run's own detectable up to the pilot's sampling error
    assert pp.omnibus == pytest.approx(run.detectable, rel=1e-12)
    assert pp.temperature == pytest.approx(run.test("temperature").detectable, rel=0.25)
    # more tokens detect smaller deviations; the TV target's token count is consistent
    bigger = plan_power(pilot, 9600, 1e-3)
    assert bigger.omnibus < pp.omnibus and bigger.temperature < pp.temperature
    assert bigger.tokens_for_tv == pp.tokens_for_tv and 20_000 < pp.tokens_for_tv < 40_000
    # whole laws of V = 512: every level but a top-k reference's own list; 960 tokens catch a
    # sampler with no token outside the 0.9 nucleus for sure
    assert set(pp.truncation) == {"top-p 0.9", "top-p 0.95", "top-p 0.99", "min-p 0.02", "min-p 0.05", "min-p 0.1",
                                  "top-k 20", "top-k 50", "top-k 100"}
    assert pp.truncation["top-p 0.9"] and pp.truncation["top-k 20"]
    with pytest.raises(ValueError, match="pilot"):
        plan_power([], 960, 1e-3)


def test_the_truncation_e_value_keeps_its_size_at_every_sample_size():
    """Ville's inequality: the truncation test rejects an exact sampler with probability at most α
    whatever N — measured at N = 5 sequences of 16 tokens (where the normal approximation it
    replaced over-rejected), 300 runs at α = 0.05, whole laws and top-20 laws: at most 0.09 (a true
    0.05 exceeds it with probability 0.004)."""
    chain = MarkovChain(512, seed=0)
    rng = np.random.default_rng(78)
    rejected = {None: 0, 20: 0}
    for _ in range(300):
        for top in rejected:
            flat = [r for s in _samples(chain, 5, 16, rng, top=top) for r in s]
            rejected[top] += not truncation_test(flat, 0.05).passed
    assert all(v / 300 <= 0.09 for v in rejected.values()), rejected


@pytest.mark.parametrize("defect", [("top_p", 0.95), ("top_k", 50), ("min_p", 0.05)])
def test_silent_truncations_are_caught_at_16_sequences(chain, defect):
    """V = 512 (row entropies 2–4 nats), whole laws, N = 16 sequences × 16 tokens, the family's
    directional share at α = 1e-3 (2.5e-4): each truncation caught in 10 of 10 runs (measured: 20 of
    20 at N = 16, 0 of 20 at N = 8 for top-p 0.95 and top-k 50; min-p 0.05 20 of 20 at N = 4)."""
    rng = np.random.default_rng(17)
    caught = 0
    for _ in range(10):
        flat = [r for s in _samples(chain, 16, 16, rng, defect) for r in s]
        res = truncation_test(flat, 2.5e-4)
        caught += not res.passed and res.name.startswith("truncation (")
    assert caught == 10


def test_the_temperature_e_value_keeps_its_size_where_the_score_did_not():
    """At N = 5 sequences of 16 tokens the normal approximation of the temperature score rejects
    beyond its level in the lower tail (the heavy tail of log p); the e-value cannot (Ville).  300
    runs at α = 0.05 on V = 512 whole laws and top-20 laws: at most 0.09 rejected (a true 0.05
    exceeds it with probability 0.004); the table at α = 1e-3 and 1e-2, N = 5, 20, 80 and both
    tails: benchmarks/SEQUENCE_SIZES.md."""
    chain = MarkovChain(512, seed=0)
    rng = np.random.default_rng(79)
    rejected = {None: 0, 20: 0}
    for _ in range(300):
        for top in rejected:
            flat = [r for s in _samples(chain, 5, 16, rng, top=top) for r in s]
            rejected[top] += not temperature_test(flat, 0.05).passed
    assert all(v / 300 <= 0.09 for v in rejected.values()), rejected


@pytest.mark.parametrize("T,sign", [(0.9, 1), (1.15, -1)])
def test_the_temperature_e_value_catches_both_directions(chain, T, sign):
    """V = 512, whole laws, N = 60 × 16 tokens, its family share 2.5e-4: T' = 0.9 (β = 1.11) and
    T' = 1.15 (β = 0.87) caught in 10 of 10 runs, the deciding θ on the defect's side."""
    rng = np.random.default_rng(23)
    caught = 0
    for _ in range(10):
        res = temperature_test([r for s in _samples(chain, 60, 16, rng, ("temperature", T)) for r in s], 2.5e-4)
        caught += (not res.passed) and res.sided == sign and res.statistic > math.log(1 / 2.5e-4)
    assert caught == 10


def test_e_value_p_never_overflows():
    from spectr_gbv.oracle.sequence_scores import e_value_p, mixture_test

    assert e_value_p(-1e6) == 1.0 and e_value_p(0.0) == 1.0 and e_value_p(float("inf")) == 0.0
    assert e_value_p(700.0) == 0.0 and abs(e_value_p(2.0) - math.exp(-2.0)) < 1e-15
    import inspect
    assert "e_value_p" in inspect.getsource(mixture_test)  # the mixture's p comes from it (log W << -709 on long runs)
