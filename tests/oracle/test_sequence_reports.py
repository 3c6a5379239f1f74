"""oracle/sequence_reports.py: the tests of what a deployment reports, measured by simulation.

Other-cell test: N = 1,280 flagged tokens (the default plan's 80 × 16), each list's "other" mass
o_t log-uniform in [1e-6, 1e-3].  At the null's boundary (each token outside with probability
exactly o_t) the test at α = 0.01 rejected 1 run in 1,000 when measured (Ville's inequality bounds
it by α at every N); the assertion allows 0.02 (a true 0.01 exceeds it in 1,000 runs with
probability 0.001).  Power: tokens outside 100× as often as the lists allow (about 19 outside
where 0.19 are allowed) are caught in every one of 200 runs; at 30× about half (0.52 measured).

Log-prob shift (sign test, τ = 0.1 nats), 1,000 runs each at α = 0.01: at the null's boundary
(gaps τ + N(0, 0.15²): median exactly τ) it rejected 0.005 of 2,000 runs of n = 1,280 and 0.0045
at n = 80 when measured (its exact bound α/2 on the side that can fire; the assertion allows
0.01, exceeded by a true 0.005 in 1,000 runs with probability 0.014); bfloat16-like
numerics (mean 0, sd 0.15; and Student-t₃ noise of scale 0.15) 0 of 1,000; a systematic +0.3 nats
with that noise: power 1.0 at n = 80 tokens (5 samples of 16) at the endpoint's share 3.1e-5, 0.83
at n = 16 and α = 0.01.
"""

import math

import numpy as np
import pytest

from spectr_gbv.oracle.sequence_reports import (REPORT_SHARE, logprob_shift_test, other_cell_test, planned_share,
                                                report_tests, signed_gaps)


def _flagged(rng, mult, n=1280):
    o = 10 ** rng.uniform(-6, -3, n)
    out = rng.random(n) < np.minimum(1.0, mult * o)
    return [{"o": float(a), "ox": int(b)} for a, b in zip(o, out)]


def test_the_other_cell_test_keeps_its_size_at_the_nulls_boundary():
    rng = np.random.default_rng(0)
    rejected = sum(not other_cell_test(_flagged(rng, 1.0), 0.01).passed for _ in range(1000))
    assert rejected / 1000 <= 0.02


def test_the_other_cell_test_catches_lists_that_claim_too_much():
    rng = np.random.default_rng(1)
    caught = sum(not other_cell_test(_flagged(rng, 100.0), 0.01).passed for _ in range(200))
    assert caught == 200


def test_a_token_outside_a_list_that_provably_covers_the_law_rejects_outright():
    recs = [{"o": 1e-4, "ox": 0}] * 50 + [{"o": 0.0, "ox": 1}]
    r = other_cell_test(recs, 1e-3)
    assert r.statistic == math.inf and r.pvalue == 0.0 and not r.passed and r.observed == 1 and r.n == 51


def test_no_flagged_record_plans_no_test():
    recs = [{"o": 0.2, "c": 0.2}]
    assert other_cell_test(recs, 1e-3) is None and report_tests(recs, 1e-4) == ()
    assert planned_share(recs, 1e-3) == 0.0
    assert planned_share(recs + [{"o": 0.0, "ox": 0}], 1e-3) == pytest.approx(1e-3 * REPORT_SHARE)


@pytest.mark.parametrize("n", [80, 1280])
def test_the_sign_test_keeps_its_size_at_the_nulls_boundary(n):
    rng = np.random.default_rng(n)
    rejected = sum(not logprob_shift_test(0.1 + rng.normal(0, 0.15, n), 0.01).passed for _ in range(1000))
    assert rejected / 1000 <= 0.01


def test_numerics_noise_passes_and_a_systematic_misreport_fails():
    rng = np.random.default_rng(7)
    for noise in (lambda n: rng.normal(0, 0.15, n), lambda n: 0.15 * rng.standard_t(3, n)):
        assert all(logprob_shift_test(noise(1280), 0.01).passed for _ in range(1000))
    share = 1e-3 * REPORT_SHARE / 2  # the endpoint's: the report share split with the other-cell test
    caught = sum(not logprob_shift_test(0.3 + rng.normal(0, 0.15, 80), share).passed for _ in range(1000))
    assert caught == 1000
    low = logprob_shift_test(-0.3 + rng.normal(0, 0.15, 80), share)
    assert not low.passed and low.statistic < 0  # two-sided: too low fails as well
    r = logprob_shift_test(0.3 + rng.normal(0, 0.15, 1280), share)
    assert 0.1 < r.detectable < 0.2  # a shift of 0.3 is beyond what 1,280 tokens resolve


def test_signed_gaps_and_the_plan_of_report_tests():
    assert signed_gaps([-1.0, None, -2.0, -0.5], [-1.5, -1.0, None, -math.inf]) == [0.5]
    assert signed_gaps(None, [-1.0]) == []
    assert logprob_shift_test([], 0.01) is None
    tests = report_tests([{"o": 0.0, "ox": 0}], 1e-4, gaps=[0.0] * 20)
    assert [t.name for t in tests] == ["reported top-k: other cell", "reported log-probs: shift"]
    assert {t.alpha for t in tests} == {5e-5}
    assert planned_share([], 1e-3, gaps=[0.1]) == pytest.approx(1e-3 * REPORT_SHARE)
    with pytest.raises(ValueError, match="shift"):
        logprob_shift_test([0.0], 0.01, shift=-1)


def _chain_samples(chain, rng, n_samples=80, n_prompts=8, copy=False):
    """Records (top 20) of ``n_samples`` samples of 16 tokens over ``n_prompts`` one-token prompts;
    with ``copy``, every odd sample copies the first 8 tokens of its prompt's first sample."""
    from spectr_gbv.oracle.sequence_records import records_from_top

    prompts = rng.integers(chain.V, size=n_prompts)
    firsts, samples, groups = {}, [], []
    for i in range(n_samples):
        g = i % n_prompts
        prompt = [int(prompts[g])]
        if copy and i % 2 == 1 and g in firsts:
            head = firsts[g][:8]
            toks = head + chain.sample(prompt + head, 8, rng)
        else:
            toks = chain.sample(prompt, 16, rng)
        firsts.setdefault(g, toks)
        laws = chain.laws(prompt, toks)
        ids = np.argsort(-laws, axis=1, kind="stable")[:, :20]
        samples.append(records_from_top(toks, ids, np.log(np.take_along_axis(laws, ids, 1))))
        groups.append(g)
    return samples, groups


def test_the_shared_prefix_test_keeps_its_size_and_names_copied_prefixes():
    """The fake server's chain (V = 64, row entropies 1–2.5), 80 samples × 16 tokens over 8
    prompts, top-20 records: exact independent samples rejected in 0 of 150 runs at α = 0.05 when
    measured (smallest p 0.074); asserted: at most 15 of 150 at
    α = 0.05 (Ville bounds the rate by α; a true 0.05 exceeds 15 in 150 runs with probability 0.004);
    half the samples copying 8 tokens of another: caught in 20 of 20 at the endpoint's share
    α/48 ≈ 2.1e-5."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers.fake_deployment import default_chain
    from spectr_gbv.oracle.sequence_reports import INDEPENDENCE, independence_test

    chain = default_chain()
    rng = np.random.default_rng(5)
    rejected = sum(not independence_test(*_chain_samples(chain, rng), 0.05).passed for _ in range(150))
    assert rejected <= 15
    caught = 0
    for _ in range(20):
        r = independence_test(*_chain_samples(chain, rng, copy=True), 1e-3 / 48)
        caught += (not r.passed) and r.name == INDEPENDENCE
    assert caught == 20
    assert independence_test([[{"x": 1, "c": 0.5}]], [0], 0.01) is None  # one sample per prompt: not planned
