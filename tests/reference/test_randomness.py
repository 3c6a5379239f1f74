"""Sources of randomness (exact enumeration, sampling, matched noise) and how the rules use them."""

import numpy as np
import pytest
from scipy import stats

from spectr_gbv.proofs_check.instances import random_instance
from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.randomness import (DrawNotLastError, MatchedSource, SamplingSource, enumerate_law,
                                             enumerate_law_draw_last)
from spectr_gbv.reference.rules import RULES, registry


def small_program(src):
    if src.coin(0.3):
        return ("a", src.draw(np.array([1.0, 0.0, 3.0])))
    return ("b", int(src.coin(0.5)))


def test_enumerate_law_exact():
    law = enumerate_law(small_program)
    assert law == pytest.approx({("a", 0): 0.075, ("a", 2): 0.225, ("b", 1): 0.35, ("b", 0): 0.35}, abs=1e-15)
    assert ("a", 1) not in law  # zero-weight branches are never taken


def test_sampling_matches_enumeration():
    """G-test of 20,000 samples against the exact law; α = 1e-6 (false-alarm rate)."""
    law = enumerate_law(small_program)
    src = SamplingSource(1)
    keys = list(law)
    counts = np.zeros(len(keys))
    for _ in range(20_000):
        counts[keys.index(small_program(src))] += 1
    expected = 20_000 * np.array([law[k] for k in keys])
    assert stats.power_divergence(counts, expected, lambda_="log-likelihood").pvalue > 1e-6


def test_sampling_draw_never_returns_zero_weight():
    src = SamplingSource(0)
    w = np.array([0.0, 1e-300, 0.0, 5.0, 0.0])
    assert {src.draw(w) for _ in range(2000)} <= {1, 3}


@pytest.mark.parametrize("bad,match", [(np.array([0.0, 0.0]), "sum to 0"), (np.array([1.0, -1.0, 2.0]), "negative"),
                                        (np.array([np.nan, 1.0]), "NaN"), (np.array([]), "non-empty")])
def test_draw_rejects_bad_weights(bad, match):
    with pytest.raises(ValueError, match=match):
        SamplingSource(0).draw(bad)


def test_coin_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        SamplingSource(0).coin(float("nan"))


def test_matched_source_conventions():
    src = MatchedSource(np.array([[0.5, 1.0, 1e-300]]), np.array([1.0, 0.1, 2.0]))
    assert src.coin(0.5, (0, 0)) and not src.coin(0.49, (0, 0))
    assert src.coin(1.0, (0, 1)) and not src.coin(0.0, (0, 2))
    # race: argmax w/E over positive weights: 1/1, 0/0.1 (excluded), 3/2
    assert src.draw(np.array([1.0, 0.0, 3.0])) == 2
    assert src.draw(np.array([1.0, 0.0, 1.0])) == 0


# -- the rules' use of randomness -----------------------------------------------------------------


class RecordingSource(SamplingSource):
    """SamplingSource that records the addresses of the coins and counts the draws."""

    def __init__(self, seed):
        super().__init__(seed)
        self.keys, self.draws = [], 0

    def coin(self, h, key=(0, 0)):
        self.keys.append(tuple(key))
        return super().coin(h, key)

    def draw(self, weights):
        self.draws += 1
        return super().draw(weights)


@pytest.mark.parametrize("name", registry.names(single_draft=False, modifies_targets=False))
def test_one_coin_per_address_and_one_draw(name):
    """Multi-draft rules that leave later targets untouched: coins address (draft k, sub-block
    length i) with 0 ≤ k < K, 1 ≤ i ≤ L, each at most once per iteration; exactly one draw (the
    correction or the bonus); Verdict shapes, and no modification record."""
    rule = RULES[name]
    rng = np.random.default_rng(0)
    for seed in range(40):
        inst = random_instance(3, 3, 3, seed=seed, concentration=float(rng.choice([0.3, 1.0, 30.0])),
                               zero_prob=float(rng.choice([0.0, 0.3])))
        dec = Decoder(inst.draft, inst.target, inst.K, inst.L)
        src = RecordingSource(seed)
        drafts = dec.draft_blocks(DecodeState(), src)
        src.keys, src.draws = [], 0
        v = rule.verify(*dec.block_inputs(DecodeState(), drafts), src)
        assert len(src.keys) == len(set(src.keys))
        assert all(0 <= k < inst.K and 1 <= i <= inst.L for k, i in src.keys)
        assert src.draws == 1
        assert len(v.tokens) == v.tau + 1 and 0 <= v.tau <= inst.L
        assert v.tokens[: v.tau] == tuple(drafts[v.selected][: v.tau]) if v.tau else v.selected == -1
        assert rule.modifies_targets is False and v.modification is None


# -- enumerate_law_draw_last: the linear-in-V shortcut of exact_verdict_law ----------------------

def _verdict_key(verdict):
    return (verdict.tau, verdict.accepted, verdict.last_token)


@pytest.mark.parametrize("name", registry.names())
def test_draw_last_law_equals_the_full_enumeration(name):
    """For every registered rule on 12 random instances (V = 5, K = 1 single-draft else 3, L = 3,
    zeros included), the law of (τ, accepted, emitted token) from enumerate_law_draw_last equals
    enumerate_law's (every token of the draw replayed), to 1e-15 per outcome, same support."""
    rule = RULES[name]
    K = 1 if registry.is_single_draft(name) else 3
    for seed in range(12):
        inst = random_instance(5, K, 3, seed=seed, concentration=(0.3, 1.0, 30.0)[seed % 3],
                               zero_prob=(0.0, 0.3)[seed % 2])
        dec = Decoder(inst.draft, inst.target, inst.K, inst.L)
        drafts = dec.draft_blocks(DecodeState(), SamplingSource(seed))
        block = rule.prepare(*dec.block_inputs(DecodeState(), drafts))
        full: dict = {}
        for verdict, pr in enumerate_law(lambda src: rule.decide(block, src)).items():
            full[_verdict_key(verdict)] = full.get(_verdict_key(verdict), 0.0) + pr
        fast = enumerate_law_draw_last(lambda src: _verdict_key(rule.decide(block, src)),
                                       lambda o, token: (o[0], o[1], token))
        assert fast.keys() == full.keys()
        assert max(abs(fast[k] - full[k]) for k in full) <= 1e-15


def test_draw_last_refuses_a_coin_after_the_draw():
    def coin_after(src):
        x = src.draw(np.array([1.0, 2.0]))
        return (x, src.coin(0.5))

    with pytest.raises(DrawNotLastError, match="coin was tossed after the draw"):
        enumerate_law_draw_last(coin_after, lambda o, token: (token, o[1]))


def test_draw_last_refuses_an_outcome_without_the_drawn_token():
    with pytest.raises(DrawNotLastError, match="does not carry the drawn token"):
        enumerate_law_draw_last(lambda src: ("x", src.draw(np.array([0.0, 1.0, 2.0])) * 0),
                                lambda o, token: (o[0], token))
    # carries the first token but not the others (the outcome is the drawn token capped at 1)
    with pytest.raises(DrawNotLastError, match="drawing token 2 instead of 0"):
        enumerate_law_draw_last(lambda src: ("x", min(src.draw(np.array([1.0, 2.0, 3.0])), 1)),
                                lambda o, token: (o[0], token))


def test_draw_last_small_program():
    law = enumerate_law_draw_last(small_program, lambda o, token: (o[0], token) if o[0] == "a" else o)
    assert law == pytest.approx({("a", 0): 0.075, ("a", 2): 0.225, ("b", 1): 0.35, ("b", 0): 0.35}, abs=1e-15)
