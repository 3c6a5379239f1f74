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
