"""Drafter and verifier certified as one system: ``certify_lossless(..., drafter=)``
(oracle/lossless.py, "Drafter and verifier as one system").

From scratch (tests/helpers/scratch_verifiers.py): SD with its coins from default_rng(seed), and
a drafter drawing its tokens by inverse CDF from default_rng(seed) too — the uniform that draws
draft token i is the coin that then decides it, so small uniforms draw early tokens and accept
them: the emitted law is not the target's.  Each alone is correct (SD certifies with the
harness's drafts; the drafter's draws follow the draft model), and with a drafter on a stream of
its own (default_rng([seed, 1])) the pair certifies.  N = 20,000 per pair (5,000 on the V ≥ 32,768
pairs), α = 1e-6 per pair: a lossless system fails a pair with probability ≤ 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.scratch_verifiers import own_stream_drafter, sd, shared_noise_drafter
from spectr_gbv.oracle.lossless import certify_lossless, default_pairs

SMALL = [p for p in default_pairs() if p.V <= 64]


def test_overlapping_noise_fails_and_independent_streams_pass():
    bad = certify_lossless(sd, K=1, L=3, models=SMALL, drafter=shared_noise_drafter)
    assert not bad.ok
    failed = {pair for pair in bad.failed if pair not in ("seed contract", "input probes")}
    assert {"toy", "prefix", "far"} <= failed, bad.table()
    assert "first token" in bad.failed["toy"]
    good = certify_lossless(sd, K=1, L=3, drafter=own_stream_drafter)  # the default pairs, the vocab ones too
    assert good.ok, good.table()
    assert not any("the drafter" in line for line in good.not_seen)
    assert any("the drafter" in line for line in certify_lossless(sd, K=1, L=1, models=SMALL[:1],
                                                                    n_samples=200).not_seen)


def test_the_drafter_alone_follows_the_draft_model():
    """The shared-noise drafter is not wrong by itself: its first tokens follow p(·) of the toy
    pair (2/3, 1/3) — 20,000 draws, within 5 σ (σ = 0.0033)."""
    toy = SMALL[0]
    p = np.array(toy.draft.conditional(()))
    tokens = shared_noise_drafter(lambda t: np.broadcast_to(p, t.shape[:2] + (2,)), 1, 1,
                                  seeds=np.arange(20_000) * 7919)
    share = float(np.mean(tokens[:, 0, 0] == 0))
    assert abs(share - 2 / 3) < 5 * np.sqrt(2 / 9 / 20_000)


def test_a_drafter_defect_is_a_verdict():
    def out_of_range(next_probs, K, L, *, seeds):
        return np.full((len(seeds), K, L), 99, dtype=np.int64)

    one_hot = next(p for p in SMALL if p.name == "one-hot")
    other = (int(np.argmax(one_hot.draft.conditional(()))) + 1) % one_hot.V  # draft probability 0 at the root

    def zero_probability(next_probs, K, L, *, seeds):
        return np.full((len(seeds), K, L), other, dtype=np.int64)

    report = certify_lossless(sd, K=1, L=2, models=SMALL[:1], n_samples=500, drafter=out_of_range)
    assert report.failed["toy"] == ("verifier output",)
    assert "the drafter proposed a token id outside [0, 2)" in report.results[0].tests[0].summary
    report = certify_lossless(sd, K=1, L=2, models=[one_hot], n_samples=500, drafter=zero_probability)
    assert report.failed["one-hot"] == ("verifier output",)
    assert "of draft probability 0 under the draft model it was handed" in report.results[0].tests[0].summary
