"""``certify_lossless``'s pairs (oracle/lossless_pairs.py) and what they see: planted lossy
verifiers (tests/helpers/planted_verifiers.py) that pass the three pairs the harness had before (toy,
prefix, far) fail the defaults, naming the pair and the test; lossless verifiers pass.

Statistics: every run has N = 20,000 generations per pair (the default), α = 1e-6 per pair,
each of its 3 + L_pair tests at α/(3 + L_pair) (Bonferroni: first token, joint, acceptance
ceiling, one conditional test per position d = 1..L_pair), so a lossless verifier fails a pair
with probability ≤ 1e-6 (nominal: χ² and normal approximations).  Smallest deviation detected
with power 0.99 (δ, TV of the tested law; asserted where stated): first token δ ≤ 0.041 on every
pair (V ≤ 64); the per-position tests δ ≤ 0.1 on the V ≤ 5 pairs at positions ≤ 3.  Every
exact law here is computed by enumeration; every run is seeded (seed 0), so the numbers
asserted are reproducible.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from helpers.planted_verifiers import (rrs_without_replacement, sd, sd_accepts_zero_target, sd_deep_bug, sd_one_hot_bug,
                               sd_top_k_20, sd_top_k_40, top_k)
from spectr_gbv.oracle.lossless import (ENGINE_MAX_L, TESTS, VOCAB_TESTS, ToyPair, VocabPair, certify_lossless,
                                        default_pairs, position_test_name)
from spectr_gbv.oracle.lossless_pairs import OneHot, ZeroOnDraftMode
from spectr_gbv.reference.models import RandomModel

N = 20_000
ALPHA = 1e-6
PAIRS = {p.name: p for p in default_pairs()}
OLD = ("toy", "prefix", "far")


def test_engine_max_L_is_the_tuning_constant():
    """``ENGINE_MAX_L`` is the largest L the engine's automatic configuration chooses
    (gpu_backend.engine.defaults.L_CANDIDATES, torch-free), and "deep" and "toy" run there."""
    from spectr_gbv.gpu_backend.engine.defaults import L_CANDIDATES

    assert ENGINE_MAX_L == max(L_CANDIDATES) == 8
    assert PAIRS["deep"].run_L(8) == PAIRS["toy"].run_L(8) == 8


def test_default_pairs_order_and_caps():
    assert list(PAIRS) == ["toy", "prefix", "far", "zeros", "one-hot", "wide", "deep", "multi", "vocab", "vocab-32k"]
    assert {n: (p.max_L, p.min_K) for n, p in PAIRS.items()} == {
        "toy": (8, 1), "prefix": (4, 1), "far": (3, 1), "zeros": (2, 1), "one-hot": (4, 1), "wide": (1, 1),
        "deep": (8, 1), "multi": (3, 2), "vocab": (1, 1), "vocab-32k": (1, 1)}
    assert all(p.sees for p in PAIRS.values())
    assert PAIRS["wide"].V == 64 and PAIRS["wide"].run_L(3) == 1
    assert (PAIRS["vocab"].V, PAIRS["vocab-32k"].V) == (151_936, 32_768)
    assert PAIRS["vocab"].samples_cap == PAIRS["vocab-32k"].samples_cap == 5_000


# -- each pair is what its doc says (exact) ------------------------------------------------------

def _contexts(V: int, depth: int):
    return [c for n in range(depth + 1) for c in itertools.product(range(V), repeat=n)]


def test_zeros_pair_has_target_zeros_under_the_draft():
    """After every prefix of ≤ 3 tokens the target gives probability 0 to the draft's most likely
    token, which the draft proposes with probability ≥ 1/4 (0.48 at the root)."""
    pair = PAIRS["zeros"]
    for c in _contexts(4, 3):
        p, q = pair.draft.conditional(c), pair.target.conditional(c)
        assert q[np.argmax(p)] == 0.0 and p[q == 0].sum() >= 0.25
    assert pair.draft.conditional(())[pair.target.conditional(()) == 0].sum() == pytest.approx(0.4816, abs=1e-4)


def test_one_hot_pair_has_indicator_draft_rows():
    pair = PAIRS["one-hot"]
    for c in _contexts(4, 4):
        p = pair.draft.conditional(c)
        assert np.count_nonzero(p) == 1 and p.max() == 1.0
        assert pair.target.conditional(c).min() > 0  # the drafted token can be accepted or rejected


def _sd_first_token(p, q, k=None):
    """Exact law of SD's first token at the root, the correction truncated to the top k."""
    acc = np.minimum(p, q)
    r = np.maximum(q - p, 0.0)
    if k is not None:
        r = top_k(r[None], k)[0]
    return acc + (1 - acc.sum()) * r / r.sum()


def test_wide_pair_sees_top_k_truncation():
    """Exact first-token TV of SD with its correction truncated to the top k at the root of
    "wide": 0.3038 (k = 20), 0.0625 (k = 40), 0 at k = V = 64; 0 on every old pair (V ≤ 5 ≤ k)."""
    pair = PAIRS["wide"]
    p, q = pair.draft.conditional(()), pair.target.conditional(())
    tv = {k: 0.5 * np.abs(_sd_first_token(p, q, k) - q).sum() for k in (20, 40, 64)}
    assert tv[20] == pytest.approx(0.3038, abs=1e-4) and tv[40] == pytest.approx(0.0625, abs=1e-4)
    assert tv[64] < 1e-12
    for name in OLD:
        p, q = PAIRS[name].draft.conditional(()), PAIRS[name].target.conditional(())
        assert np.abs(_sd_first_token(p, q, 20) - q).sum() < 1e-12


def test_deep_pair_reaches_depth_3():
    """Under SD (K = 1) the root call accepts ≥ 3 draft tokens with probability 0.784 and ≥ 4
    with 0.745 (Σ over blocks of Π min(p, q)), so corrections at depth ≥ 3 are frequent."""
    pair = PAIRS["deep"]

    def reach(c, depth):
        if depth == 0:
            return 1.0
        p, q = pair.draft.conditional(c), pair.target.conditional(c)
        return sum(min(p[x], q[x]) * reach(c + (x,), depth - 1) for x in range(2))

    assert reach((), 3) == pytest.approx(0.7836, abs=1e-4) and reach((), 4) == pytest.approx(0.7450, abs=1e-4)
    assert reach((), 8) < 0.999  # rejections still happen


def _rrs_first_token(p, q, iid: bool):
    """Exact law of the first token emitted by ``rrs_without_replacement`` at K = 2 (enumeration
    over the two candidates), and the probability that the second candidate is decided."""
    V = len(p)
    law, second = np.zeros(V), 0.0
    for x1 in np.flatnonzero(p > 0):
        a1 = min(1.0, q[x1] / p[x1])
        law[x1] += p[x1] * a1
        if a1 == 1.0:
            continue
        r1 = np.maximum(q - p, 0.0)
        r1 /= r1.sum()
        p1 = p.copy()
        p1[x1] = 0.0
        p1 /= p1.sum()
        for x2 in np.flatnonzero((p if iid else p1) > 0):
            w = p[x1] * (1 - a1) * (p if iid else p1)[x2]
            second += w
            a2 = min(1.0, r1[x2] / p1[x2]) if p1[x2] > 0 else 0.0
            r2 = np.maximum(r1 - p1, 0.0)
            r2 = r2 / r2.sum() if r2.sum() > 0 else r1
            law[x2] += w * a2
            law += w * (1 - a2) * r2
    return law, second


def test_multi_pair_gives_the_second_draft_mass():
    """Pinned by exact computation: recursive rejection sampling without replacement is
    lossless for its own drafting (first-token law = q to 1e-12 on every pair) and, on i.i.d.
    drafts, off by TV 0.6605 on "multi" (second candidate decided with probability 0.93),
    against 0, 0 and 0.0008 on toy, prefix and far."""
    tvs = {}
    for name in OLD + ("multi",):
        p, q = PAIRS[name].draft.conditional(()), PAIRS[name].target.conditional(())
        assert np.abs(_rrs_first_token(p, q, iid=False)[0] - q).max() < 1e-12
        law, second = _rrs_first_token(p, q, iid=True)
        tvs[name] = 0.5 * np.abs(law - q).sum()
        if name == "multi":
            assert second == pytest.approx(0.9270, abs=1e-4)
    assert tvs["toy"] < 1e-12 and tvs["prefix"] < 1e-12 and tvs["far"] == pytest.approx(0.0008, abs=1e-4)
    assert tvs["multi"] == pytest.approx(0.6605, abs=1e-4) and tvs["multi"] >= 0.05


def test_planted_rrs_batched_matches_its_exact_law():
    """The batched planted verifier is the rule analysed above: its first token on 20,000 rows
    of "multi"'s root (i.i.d. drafts) is within TV 0.04 of the exact law (4,000 rows: noise
    ≈ 0.01)."""
    pair = PAIRS["multi"]
    from spectr_gbv.reference.decode import Decoder, DecodeState
    from spectr_gbv.reference.randomness import SamplingSource

    dec = Decoder(pair.draft, pair.target, 2, 3)
    src = SamplingSource(1)
    n = 4_000
    rows = [dec.block_inputs(DecodeState(), dec.draft_blocks(DecodeState(), src)) for _ in range(n)]
    args = [np.stack(a) for a in zip(*rows)]
    out = rrs_without_replacement(*args, seeds=np.arange(n, dtype=np.int64) + 10**9)
    observed = np.bincount(out.tokens[:, 0], minlength=4) / n
    exact, _ = _rrs_first_token(pair.draft.conditional(()), pair.target.conditional(()), iid=True)
    assert 0.5 * np.abs(observed - exact).sum() < 0.04


# -- the harness: caps, drafting ----------------------------------------------------------------

def test_drafting_other_than_iid_is_refused():
    with pytest.raises(ValueError, match="drafting must be 'iid'.*drafts the K blocks of every call i.i.d."):
        certify_lossless(sd, K=2, L=2, drafting="without_replacement", n_samples=100)


def test_min_K_pair_alone_at_K_1_is_refused():
    with pytest.raises(ValueError, match="no pair runs at K = 1"):
        certify_lossless(sd, K=1, L=2, models=[PAIRS["multi"]], n_samples=100)


def test_bad_pair_fields():
    m = RandomModel(2, 1)
    with pytest.raises(ValueError, match="max_L must be an integer >= 1 or None"):
        ToyPair("x", m, m, max_L=0)
    with pytest.raises(ValueError, match="min_K must be an integer >= 1, got None"):
        ToyPair("x", m, m, min_K=None)
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        ZeroOnDraftMode(RandomModel(2, 1), RandomModel(3, 1))
    assert OneHot(m).conditional(()).tolist() in ([1.0, 0.0], [0.0, 1.0])


def _check_stated(report, L_asked: int, K: int):
    """N, α, the per-test α/(3 + L_pair), δ of the first-token test; the pair's L and its note."""
    for r in report.results:
        pair = PAIRS[r.name]
        if isinstance(pair, VocabPair):  # first call only, four tests at α/4 (oracle.lossless)
            assert r.L == 1 and r.n == min(N, pair.samples_cap) and r.alpha == ALPHA
            assert tuple(t.name for t in r.tests) == VOCAB_TESTS
            assert all(t.alpha == pytest.approx(ALPHA / 4) for t in r.tests)
            assert r.test("first token, coarsened").detectable < 0.08
            continue
        assert r.L == pair.run_L(L_asked) and r.n == N and r.alpha == ALPHA and K >= pair.min_K
        names = TESTS + tuple(position_test_name(d) for d in range(1, r.L + 1))
        assert tuple(t.name for t in r.tests) == names
        assert all(t.alpha == pytest.approx(ALPHA / len(names)) for t in r.tests)
        assert r.test("first token").detectable < 0.041
        assert ("run at L =" in r.notes) == (r.L < L_asked)


@pytest.mark.slow
def test_sd_passes_every_pair_at_L_3():
    """Batched SD (tests/helpers/planted_verifiers.py ``sd``, no defect), K = 1, L = 3, defaults: every
    pair but "multi" (K ≥ 2 only) passes every test; "wide" runs at L = 1 (about 35 s on 2 loaded
    cores)."""
    report = certify_lossless(sd, K=1, L=3, input_checks=False)  # this sd checks no input
    assert report.ok, report.table()
    assert [r.name for r in report.results] == [n for n in PAIRS if n != "multi"]
    _check_stated(report, 3, 1)
    for r in report.results:
        if r.V <= 5:
            assert all(r.test(position_test_name(d)).detectable < 0.1 for d in range(1, r.L + 1)), r.name


# -- planted defects fail the defaults, naming the pair and the test --------------------------
#
# Fast checks on the pair that sees each defect (N = 20,000, α = 1e-6), then the full defaults
# (slow: every pair).  On the old pairs each planted verifier's verdicts are SD's, row for row
# (test_planted_are_sd_on_the_old_pairs), so no N can catch it there.

PLANTED = [  # (verifier, K, L, the pair that sees it, tests that must fail there)
    (sd_top_k_20, 1, 3, "wide", ("first token",)),
    (sd_top_k_40, 1, 3, "wide", ("first token",)),
    (sd_accepts_zero_target, 1, 3, "zeros", ("first token", "joint", position_test_name(1))),
    (sd_one_hot_bug, 1, 3, "one-hot", ("first token", "joint", position_test_name(1))),
    (sd_deep_bug, 1, ENGINE_MAX_L, "deep", ("joint",)),
    (rrs_without_replacement, 2, 3, "multi", ("first token", "joint", position_test_name(1))),
]


# the contract checks that also catch a planted verifier (its "seed contract" entry of report.failed)
CONTRACT_CATCHES = {"sd_accepts_zero_target": {"emitted ids in the target's support", "greedy rows"}}


@pytest.mark.parametrize("verifier, K, L, pair, tests", PLANTED, ids=lambda x: getattr(x, "__name__", None))
def test_planted_fails_on_its_pair(verifier, K, L, pair, tests):
    """Each planted defect fails on the pair that sees it, those tests with p < α/m, and the
    report's ``failed`` and table name the pair and the tests.  Measured at seed 0 (first-token
    TV observed, δ, p): top-k 20 / 40 0.31 / 0.069, δ 0.040, p = 0 in float64; zero acceptance
    0.49, δ 0.028, p = 0 (counts on zero-probability cells); one-hot 0.25, δ 0.028; RRSw 0.66,
    δ 0.028; depth ≥ 3 (first token untouched): joint p 4e-18, positions 4 and 6 p ≤ 2e-9
    against α/11 = 9e-8."""
    report = certify_lossless(verifier, K=K, L=L, models=[PAIRS[pair]], input_checks=False)
    (r,) = report.results
    assert set(tests) <= set(r.failed), report.table()
    for name in tests:
        assert r.test(name).pvalue < r.test(name).alpha
        assert f"| {pair} |" in report.table() and f"| {name} |" in report.table()
    # beside its pair's law, the one door's contract checks (oracle/seed_contract.py) name what
    # they see of the same defect: an accepted token of target probability 0 is outside the
    # target's support, and a greedy row (one-hot rows) accepts its drafted non-argmax token
    failed = report.failed
    contract = failed.pop("seed contract", ())
    assert failed == {pair: r.failed}
    assert set(contract) == CONTRACT_CATCHES.get(verifier.__name__, set()), contract


@pytest.mark.parametrize("verifier", [sd_top_k_20, sd_accepts_zero_target, sd_one_hot_bug, sd_deep_bug],
                         ids=lambda v: v.__name__)
def test_planted_are_sd_on_the_old_pairs(verifier):
    """On the rows of toy, prefix and far at L = 3 (every draft block of positive probability
    after the root, 200 seeds each) the planted verifier returns SD's verdicts exactly: V ≤ 5 <
    k, no target zeros, no one-hot rows, no depth ≥ 3 in a block of 3."""
    from spectr_gbv.reference.decode import Decoder, DecodeState

    for name in OLD:
        pair = PAIRS[name]
        dec = Decoder(pair.draft, pair.target, 1, 3)
        blocks = [z for z in itertools.product(range(pair.V), repeat=3)]
        args = [np.repeat(a, 200, axis=0) for a in
                (np.stack(x) for x in zip(*[dec.block_inputs(DecodeState(), [z]) for z in blocks]))]
        seeds = np.arange(len(args[0]), dtype=np.int64)
        a, b = verifier(*args, seeds=seeds), sd(*args, seeds=seeds)
        assert np.array_equal(a.tau, b.tau) and np.array_equal(a.tokens, b.tokens), name


@pytest.mark.slow
@pytest.mark.parametrize("verifier, K, L, pair, tests", PLANTED, ids=lambda x: getattr(x, "__name__", None))
def test_planted_fails_the_defaults(verifier, K, L, pair, tests):
    """The same defects through ``certify_lossless(verifier, K=K, L=L)`` with every default: the
    report fails, and the pair that sees the defect is among the failed pairs with those tests
    (30–80 s each on 2 cores)."""
    report = certify_lossless(verifier, K=K, L=L)
    assert not report.ok
    assert pair in report.failed and set(tests) <= set(report.failed[pair]), report.table()


# -- lossless verifiers pass the new pairs -------------------------------------------------------

@pytest.fixture
def one_torch_thread():
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


NEW = ("zeros", "one-hot", "wide", "deep", "multi")


@pytest.mark.parametrize("rule, K, L", [
    ("sd", 1, 3), ("bv", 1, 3), ("sd", 1, ENGINE_MAX_L),
    # K = 2: the global OT's LPs of "zeros", "wide" and "multi" (about 30 s once per process)
    pytest.param("spectr", 2, 3, marks=pytest.mark.slow), pytest.param("kseq_gbv", 2, 3, marks=pytest.mark.slow)])
def test_torch_lossless_verifiers_pass_the_new_pairs(rule, K, L, one_torch_thread):
    """The batched torch verifiers (gpu_backend.verifiers) pass every new pair that runs at K
    (N = 20,000, α = 1e-6; K-SEQ-GBV's Algorithm 2 records carried); SD also at L = 8, where
    "deep" runs at L = 8 with 11 tests."""
    from spectr_gbv.gpu_backend.verifiers import get_verifier

    report = certify_lossless(get_verifier(rule), K=K, L=L, models=[PAIRS[n] for n in NEW])
    assert report.ok, report.table()
    _check_stated(report, L, K)
    assert [r.name for r in report.results] == [n for n in NEW if K >= PAIRS[n].min_K]
