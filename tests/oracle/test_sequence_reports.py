"""oracle/sequence_reports.py: the tests of what a deployment reports, measured by simulation.

Other-cell test: N = 1,280 flagged tokens (the default plan's 80 × 16), each list's "other" mass
o_t log-uniform in [1e-6, 1e-3].  At the null's boundary (each token outside with probability
exactly o_t) the test at α = 0.01 rejected 1 run in 1,000 when measured (Ville's inequality bounds
it by α at every N); the assertion allows 0.02 (a true 0.01 exceeds it in 1,000 runs with
probability 0.001).  Power: tokens outside 100× as often as the lists allow (about 19 outside
where 0.19 are allowed) are caught in every one of 200 runs; at 30× about half (0.52 measured).
"""

import math

import numpy as np
import pytest

from spectr_gbv.oracle.sequence_reports import REPORT_SHARE, other_cell_test, planned_share, report_tests


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
