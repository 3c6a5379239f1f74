"""oracle/sequence_test.py: the randomized PIT, the KS test with a tolerance, its power, and the
sequence test on synthetic chains (V = 40, random Dirichlet laws per prefix).

* exact PIT values in both orders;
* calibration: 400 null runs of the KS test at α = 0.05 reject 5 % ± binomial noise (the
  acceptance band is the exact binomial 1e-4 two-sided interval: false-alarm 1e-4);
* power: at ``detectable_deviation`` (n = 2,000, α = 1e-3) the simulated power of the test is
  ≥ 0.99 (2,000 reps; the bound is a lower bound: measured ≈ 0.999); at half that deviation
  it is below 0.9;
* tolerance: a monotone per-token TV of 0.03 (tempered laws) is caught at η = 0 and passes at
  η = 0.1 with the same draws;
* the sequence test passes exact sampling (every seed of 5) and catches T = 1.3 sampling
  against T = 1 laws (N = 200 sequences of 8 tokens).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from spectr_gbv.oracle import sequence_test as st


def test_pit_values_exact():
    law = np.array([0.2, 0.5, 0.3])
    assert st.randomized_pit(law, 1, 0.5, "id") == pytest.approx(0.45, abs=1e-12)
    assert st.randomized_pit(law, 1, 0.5, "probability") == pytest.approx(0.25, abs=1e-12)
    assert st.randomized_pit(law, 0, 0.5, "probability") == pytest.approx(0.9, abs=1e-12)
    assert st.randomized_pit(law, 2, 0.0, "probability") == pytest.approx(0.5, abs=1e-12)
    tie = np.array([0.25, 0.5, 0.25])
    assert st.lower_mass(tie, 0, "probability") == pytest.approx(0.5, abs=1e-12)
    assert st.lower_mass(tie, 2, "probability") == pytest.approx(0.75, abs=1e-12)
    assert math.isnan(st.randomized_pit(np.array([0.0, 1.0]), 0, 0.3))


def _chain(rng, V, temp=1.0):
    """A law per prefix: Dirichlet(0.3) from a hash of the prefix; sampled at ``temp``."""
    def law(prefix):
        r = np.random.default_rng(hash(tuple(prefix)) % (2**32))
        return r.dirichlet(np.full(V, 0.3))

    def sample(n):
        toks, laws = [], []
        for _ in range(n):
            p = law(toks)
            q = p ** (1 / temp)
            q /= q.sum()
            toks.append(int(rng.choice(V, p=q)))
            laws.append(p)
        return toks, np.array(laws)
    return sample


def test_ks_calibration_under_the_null():
    rng = np.random.default_rng(1)
    rejects = sum(not st.ks_uniform_test(rng.random(300), 0.05).passed for _ in range(400))
    lo, hi = sps.binom.ppf([5e-5, 1 - 5e-5], 400, 0.05)
    assert lo <= rejects <= hi, rejects


def test_detectable_deviation_has_its_power():
    d = st.detectable_deviation(2000, 1e-3)
    assert 0.03 < d < 0.07
    assert st.simulated_power(2000, d, 1e-3, reps=2000, seed=3) >= 0.99
    assert st.simulated_power(2000, d / 2, 1e-3, reps=2000, seed=4) < 0.9
    # the tolerance adds to the threshold and so to d; n = 10 cannot reach the power at α = 1e-6
    assert st.detectable_deviation(2000, 1e-3, 0.01) == pytest.approx(d + 0.01, abs=2e-3)
    assert st.detectable_deviation(10, 1e-6) == math.inf


def test_tolerance_absorbs_a_small_deviation_only():
    rng = np.random.default_rng(7)
    V, n = 40, 4000
    sample = _chain(rng, V, temp=1.15)
    toks, laws = sample(n)  # one long sequence: n tokens, a different law each
    u = st.sequence_pits(toks, laws, rng.random(n), "probability")
    assert not st.ks_uniform_test(u, 1e-3, 0.0).passed
    assert st.ks_uniform_test(u, 1e-3, 0.1).passed


@pytest.mark.parametrize("seed", range(5))
def test_sequence_test_passes_exact_sampling(seed):
    rng = np.random.default_rng(seed)
    sample = _chain(rng, 40)
    seqs = [sample(8) for _ in range(200)]
    # the PIT's uniforms must be independent of the sampler's: another seed than the chain's
    res = st.sequence_test([s[0] for s in seqs], [s[1] for s in seqs], alpha=1e-3, seed=seed + 100,
                           first_law=seqs[0][1][0])
    assert res.passed and res.impossible == 0 and res.n_tokens == 1600
    assert len(res.rows) == 2 + 1 + 8 * 2
    assert res.pooled("id").n == 1600 and res.pooled("id").alpha == pytest.approx(1e-3 / 6)


def test_sequence_test_catches_a_temperature_change():
    rng = np.random.default_rng(11)
    sample = _chain(rng, 40, temp=1.3)
    seqs = [sample(8) for _ in range(200)]
    res = st.sequence_test([s[0] for s in seqs], [s[1] for s in seqs], alpha=1e-3, seed=100)
    assert not res.passed
    assert not res.pooled("probability").passed and res.pooled("probability").pvalue < 1e-8


def test_bad_inputs():
    with pytest.raises(ValueError, match="alpha"):
        st.ks_uniform_test([0.5], 0)
    with pytest.raises(ValueError, match="tolerance"):
        st.ks_uniform_test([0.5], 0.1, -1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        st.ks_uniform_test([1.5], 0.1)
    with pytest.raises(ValueError, match="order"):
        st.lower_mass(np.array([1.0]), 0, "rank")
    with pytest.raises(ValueError, match="sum to 1"):
        st.randomized_pit([0.5, 0.2], 0, 0.1)
    with pytest.raises(ValueError, match="same length|one length"):
        st.sequence_test([[0]], [])
    with pytest.raises(ValueError, match="laws must be"):
        st.sequence_pits([0, 1], np.ones((1, 2)) / 2, [0.1, 0.2], "id")
