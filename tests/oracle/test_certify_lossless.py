"""``certify_lossless`` (oracle/lossless.py): losslessness of a verifier that no registered rule
describes, checked on the target's own law and on the lossless acceptance ceiling.

Statistics of every run here: α = 1e-6 per (draft, target) pair, each of its 3 + L tests
(first token, joint, acceptance ceiling, one per position 1..L) at α/(3 + L) (Bonferroni), so a
lossless verifier fails a pair with probability ≤ 1e-6 (nominal: χ² and normal approximations,
oracle/gtest.py, oracle/mean_tests.py).  The runs here use the three pairs they were written for ("toy", "prefix",
"far": ``OLD_PAIRS``) unless they call the defaults; the later default pairs are
tests/oracle/test_lossless_pairs.py's.  Smallest deviation detected with power 0.99, stated by
each result and asserted below: at N = 20,000 the first-token law's δ is ≤ 0.03 and the joint
law of the first L + 1 = 4 tokens' δ ≤ 0.07 on those pairs (pooled mass included); at
N = 10,000 (L = 2) ≤ 0.041 and ≤ 0.065; at N = 5,000 ≤ 0.06 and ≤ 0.16.  Every run is seeded
(seed 0), so the numbers asserted are reproducible, not flaky.
"""

from __future__ import annotations

import json
import re
import math
import runpy
from pathlib import Path

import numpy as np
import pytest

from spectr_gbv.oracle import harness
from spectr_gbv.oracle.harness import CONTRACT_CHECK_NAMES
from spectr_gbv.oracle.lossless import (TESTS, LosslessReport, ToyPair, certify_lossless, default_pairs,
                                        lossless_ceiling, position_test_name)
from spectr_gbv.oracle.prefix_match import prefix_match_bound
from spectr_gbv.oracle.pytest_plugin import DEFAULT_SAMPLES
from spectr_gbv.reference.contract import BatchModification, BatchVerdict
from spectr_gbv.reference.models import ContextFree, Mixture, RandomModel
from spectr_gbv.reference.rules import get_rule, registry

EXAMPLE = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "certify_lossless.py"))
sampler_match = EXAMPLE["sampler_match"]
ALPHA = 1e-6
PAIRS = ("toy", "prefix", "far")
# The three pairs these tests were written for; the later default pairs (zeros, one-hot, wide,
# deep, multi) and what they see are tests/oracle/test_lossless_pairs.py's.
OLD_PAIRS = default_pairs()[:3]
assert tuple(p.name for p in OLD_PAIRS) == PAIRS


# -- verifiers written here ----------------------------------------------------------------------

def _uniforms(seeds, n: int) -> np.ndarray:
    """float64 [B, n]: row b's uniforms from seeds[b] alone."""
    return np.stack([np.random.default_rng(int(s) % 2**64).random(n) for s in seeds])


def _draw(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws from rows [..., V] with uniforms u [...]."""
    cdf = np.cumsum(rows, axis=-1)
    return np.minimum((cdf < u[..., None] * cdf[..., -1:]).sum(-1), rows.shape[-1] - 1)


def medusa_typical(draft_tokens, draft_probs, target_probs, *, seeds, eps=0.09, delta=0.3):
    """Medusa's typical acceptance (Cai et al. 2024, "Medusa", §2.3.1), K = 1: accept the draft
    token x at depth i iff q_i(x) > min(ε, δ·exp(−H(q_i))), H the entropy of the target row,
    stop at the first rejection.  ε = 0.09, δ = 0.3: Medusa's defaults (``posterior_threshold``,
    ``posterior_alpha`` of ``medusa_generate``).  The token after the accepted prefix is a plain
    draw from the target row there (Medusa draws it from that row after typical truncation; a
    plain draw leaves the acceptance as the only source of loss).  Lossy: what it accepts does
    not depend on the draft's probabilities."""
    B, _, L = draft_tokens.shape
    q = target_probs[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(q > 0, q * np.log(q), 0.0).sum(-1)
    threshold = np.minimum(eps, delta * np.exp(-entropy))  # [B, L+1]
    x = draft_tokens[:, 0]
    ok = np.take_along_axis(q[:, :L], x[..., None], -1)[..., 0] > threshold[:, :L]
    tau = np.where(ok.all(1), L, np.argmin(ok, axis=1))
    last = _draw(q[np.arange(B), tau], _uniforms(seeds, 1)[:, 0])
    tokens = np.where(np.arange(L)[None] < tau[:, None], x, -1)
    tokens = np.concatenate([tokens, np.full((B, 1), -1)], axis=1)
    tokens[np.arange(B), tau] = last
    return BatchVerdict(tau, np.where(tau > 0, 0, -1), tokens, tau + 1)


def always_accept(draft_tokens, draft_probs, target_probs, *, seeds):
    """Too good: τ = L always, the draft block then a bonus draw from the target's row L."""
    B, _, L = draft_tokens.shape
    bonus = _draw(target_probs[:, 0, L], _uniforms(seeds, 1)[:, 0])
    tau = np.full(B, L)
    return BatchVerdict(tau, np.zeros(B, dtype=np.int64),
                        np.concatenate([draft_tokens[:, 0], bonus[:, None]], axis=1), tau + 1)


def _tests(L: int) -> tuple:
    return TESTS + tuple(position_test_name(d) for d in range(1, L + 1))


def _old_tests(failed: tuple) -> tuple:
    """The failed tests among the first three (first token, joint, acceptance ceiling); the
    per-position tests are asserted by tests/oracle/test_lossless_pairs.py."""
    return tuple(t for t in failed if t in TESTS)


def _assert_stated(report: LosslessReport, n: int, first_delta: float, joint_delta: float):
    """Every pair states N, α, α/(3 + L) per test (first token, joint, ceiling, positions
    1..L), δ of both G-tests and the excess; in PAIRS order."""
    assert [r.name for r in report.results][:3] == list(PAIRS)
    for r in report.results[:3]:
        assert r.n == n and r.alpha == ALPHA
        assert tuple(t.name for t in r.tests) == _tests(r.L)
        assert all(t.alpha == pytest.approx(ALPHA / (3 + r.L)) for t in r.tests)
        assert r.test("first token").detectable < first_delta, r.name
        assert r.test("joint").detectable < joint_delta, r.name
        assert 0 < r.test("acceptance ceiling").detectable < 0.15
        assert r.mean_tau_low <= r.mean_tau
        if r.modification_rows:  # Algorithm 2 records returned: carried into the later calls
            assert r.carried_rows > 0 and "Algorithm 2 records carried" in r.notes
        else:
            assert r.carried_rows == 0 and "memoryless" in r.notes


# -- lossless verifiers pass ---------------------------------------------------------------------

def test_default_n_is_the_plugins():
    assert DEFAULT_SAMPLES == 20_000
    assert harness.certify_lossless is certify_lossless


def test_sampler_match_passes():
    """The rule of examples/certify_lossless.py, at the default N = 20,000, K = 1, L = 3.  Its
    E[τ] on the toy is Σ_{i≤3} (4/9)^i = 532/729 (a draw of q matches a draw of p with
    probability Σ p·q = 4/9), well under the ceiling B(1, 3) = 50/27."""
    report = certify_lossless(sampler_match, K=1, L=3)
    assert report.ok, report.table()
    _assert_stated(report, DEFAULT_SAMPLES, 0.03, 0.07)
    toy = report.results[0]
    ceiling = toy.test("acceptance ceiling")
    assert toy.ceiling == pytest.approx(50 / 27, abs=1e-12) and toy.ceiling_name.startswith("global OT")
    se = (toy.mean_tau - toy.mean_tau_low) / 5.0  # the one-sided 1 − α/3 interval is ≈ 5 s.e.
    assert abs(toy.mean_tau - 532 / 729) < 5 * se and ceiling.pvalue == 1.0
    assert report.failed == {}
    assert json.loads(json.dumps(report.to_json()))[0]["verdict"] == "PASS"
    # + the 11 contract checks (oracle.harness.CONTRACT_CHECK_NAMES) and the 7 input probes (the example
    # refuses impossible rows)
    assert report.table().count("| PASS |") == sum(len(r.tests) for r in report.results) + len(CONTRACT_CHECK_NAMES) + 7
    assert [c.name for c in report.seed_checks if c.passed] == list(CONTRACT_CHECK_NAMES)


@pytest.mark.parametrize("rule", registry.names(lossless=True))
def test_registered_lossless_rules_pass(rule):
    """Every lossless rule of the registry (sd, spectr, bv, gbv, kseq_gbv, kseq_bv, traversal,
    mdbv, mdbv_kseq), numpy reference, default K, L = 2, N = 10,000.  Its root E[τ] stays under
    the ceiling (global OT at every (pair, K) here).  GBV and K-SEQ-GBV return Algorithm 2
    records, which the harness carries into the later calls (their modified targets): measured
    joint p 0.94 / 0.47 / 0.17 (GBV) and 0.30 / 0.12 / 0.43 (K-SEQ-GBV) on toy / prefix / far;
    the rules that modify nothing run memoryless."""
    K = registry.default_K(rule, 2)
    report = certify_lossless(get_rule(rule), K=K, L=2, n_samples=10_000, models=OLD_PAIRS)
    assert report.ok, report.table()
    _assert_stated(report, 10_000, 0.041, 0.065)
    for r in report.results:
        assert (r.modification_rows > 0) == registry.spec(rule).modifies_targets and r.K == K
        assert r.ceiling_name.startswith("global OT")
        assert r.mean_tau_low <= r.ceiling


def _drop_record(verifier):
    """``verifier`` with its Algorithm 2 record dropped (modification = None): a memoryless rule."""
    def dropped(draft_tokens, draft_probs, target_probs, *, seeds):
        out = verifier(draft_tokens, draft_probs, target_probs, seeds=seeds)
        out.modification = None
        return out
    return dropped


TOY_JOINT_P = {"gbv": 1e-60, "kseq_gbv": 1e-36}  # see the test's doc


@pytest.mark.parametrize("rule", registry.names(lossless=True, modifies_targets=True))
def test_planted_dropped_modification_record_fails_the_joint_law(rule):
    """Planted: GBV and K-SEQ-GBV are lossless only with Algorithm 2's modified targets in their
    later calls; the same verifier with its record dropped runs memoryless, and the joint law of
    its first 3 tokens fails on the toy (measured p ≈ 1e-226 for GBV, 9e-59 for K-SEQ-GBV at
    N = 10,000) and on "far" (2e-13 for GBV), while its first token and first-call acceptance pass
    (the first call is the carried run's, draw for draw).  The toy's bound on p (``TOY_JOINT_P``)
    is the p-value that the memoryless rule's G exceeds with probability 0.999: from its exact
    joint law (the toy pair is context-free, so calls are i.i.d.) the noncentrality 2N·KL is 962
    (GBV) and 273 (K-SEQ-GBV), median p 8e-205 and 2e-56, 0.1 % quantile 2e-165 and 1e-36
    (noncentral χ², 7 dof).  K-SEQ-GBV's bound was 1e-60, which it meets with probability 0.28
    only: it held with the old seeds, not with the hashed ones (oracle/seeding.py)."""
    K = registry.default_K(rule, 2)
    report = certify_lossless(_drop_record(get_rule(rule)), K=K, L=2, n_samples=10_000, models=OLD_PAIRS)
    for r in report.results:
        assert r.test("first token").passed and r.test("acceptance ceiling").passed
        assert r.modification_rows == 0 and r.carried_rows == 0 and "memoryless" in r.notes
    assert _old_tests(report.failed["toy"]) == ("joint",) and _old_tests(report.failed["far"]) == ("joint",)
    assert report.results[0].test("joint").pvalue < TOY_JOINT_P[rule]
    carried = certify_lossless(get_rule(rule), K=K, L=2, n_samples=10_000, models=[default_pairs()[0]])
    assert carried.ok, carried.table()
    assert carried.results[0].mean_tau == report.results[0].mean_tau


def test_carrying_the_record_does_not_hide_a_lossy_rule():
    """SpecTr-GBV with the consistent residual and Algorithm 2 (registered "spectr_gbv_fixed",
    lossy, modifies later targets) at K = 2, L = 2, N = 10,000, its records carried: the joint
    law still fails on every pair (measured p 1e-12 toy, 2e-63 prefix, 6e-15 far)."""
    assert not registry.spec("spectr_gbv_fixed").lossless
    report = certify_lossless(get_rule("spectr_gbv_fixed"), K=2, L=2, n_samples=10_000, models=OLD_PAIRS)
    for r in report.results:
        assert "joint" in r.failed and r.test("joint").pvalue < 1e-9
        assert r.modification_rows > 0 and r.carried_rows > 0
        assert r.test("acceptance ceiling").passed


@pytest.fixture
def one_torch_thread():
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: a second OpenMP thread slows small ops
    yield
    torch.set_num_threads(n)


@pytest.mark.slow
def test_transformers_verifier_passes(one_torch_thread):
    """transformers' ``_speculative_sampling`` at its defaults (token-level SD), K = 1, L = 3,
    N = 20,000 (the adapter calls transformers once per row; ~20 s)."""
    pytest.importorskip("transformers")
    from spectr_gbv.gpu_backend.adapters.transformers_sd import TransformersSpeculativeSampling

    # input_checks=False: transformers takes logits from a model (gpu_backend.adapters.third_party)
    report = certify_lossless(TransformersSpeculativeSampling(), K=1, L=3, models=OLD_PAIRS, input_checks=False)
    assert report.ok, report.table()
    _assert_stated(report, DEFAULT_SAMPLES, 0.03, 0.07)


@pytest.mark.parametrize("rule", registry.names(lossless=True, modifies_targets=True))
def test_torch_verifiers_that_modify_later_targets_pass(rule, one_torch_thread):
    """The batched torch GBV and K-SEQ-GBV (``gpu_backend.verifiers``), their BatchModification
    (log joints, tensors) carried, default K, L = 3, N = 20,000 (about 2 s and 4 s here;
    measured joint p 0.49 / 0.64 / 0.54 for GBV, 0.001 / 0.32 / 0.02 for K-SEQ-GBV on
    toy / prefix / far, and 0.23 / 0.21 / 0.88 for K-SEQ-GBV on the toy at N = 100,000, seeds 0, 3, 4)."""
    from spectr_gbv.gpu_backend.verifiers import get_verifier

    K = registry.default_K(rule, 2)
    report = certify_lossless(get_verifier(rule), K=K, L=3, models=OLD_PAIRS)
    assert report.ok, report.table()
    _assert_stated(report, DEFAULT_SAMPLES, 0.03, 0.07)
    assert all(r.modification_rows > 0 for r in report.results)


# -- lossy verifiers fail, and the test that catches them is named -----------------------------

def test_transformers_ensemble_mode_fails(one_torch_thread):
    """``assistant_ensemble_weight`` = 0.5 accepts with v = (q + p)/2: every test fails on every
    pair at N = 5,000 (measured first-token TV 0.17 on the toy against δ 0.053; it accepts 2.11
    tokens where no lossless rule passes 1.85), and on the greedy rows of the contract checks it
    accepts drafted tokens of target probability 0 (v = p/2 > 0 there): "emitted ids in the
    target's support" and "greedy rows" fail, deterministic checks."""
    pytest.importorskip("transformers")
    from spectr_gbv.gpu_backend.adapters.transformers_sd import TransformersSpeculativeSampling

    report = certify_lossless(TransformersSpeculativeSampling(0.5), K=1, L=3, n_samples=5_000, models=OLD_PAIRS,
                              input_checks=False)
    failed = dict(report.failed)
    assert failed.pop("seed contract") == ("emitted ids in the target's support", "greedy rows")
    assert {p: _old_tests(f) for p, f in failed.items()} == {p: TESTS for p in PAIRS}
    for r in report.results:
        assert all(r.test(name).pvalue < r.test(name).alpha for name in TESTS)
        assert r.mean_tau_low > r.ceiling
    toy = report.results[0]
    assert toy.test("first token").empirical_tv > 3 * toy.test("first token").detectable
    assert toy.test("first token").empirical_tv > 0.15 and toy.mean_tau > 2.0


def test_medusa_typical_acceptance_fails():
    """Medusa's typical acceptance, K = 1, L = 3, N = 20,000.  The toy's rows have entropy
    0.64, so the threshold is 0.09 < both target probabilities: it accepts every draft (τ = 3,
    above the ceiling 50/27) and emits the draft's law (first-token TV 1/3).  On "prefix" its
    acceptance (mean τ 1.93) stays under the ceiling 2.05 and only the laws catch it; on "far"
    all three tests do."""
    report = certify_lossless(medusa_typical, K=1, L=3, models=OLD_PAIRS, input_checks=False)
    assert {p: _old_tests(f) for p, f in report.failed.items()} == {
        "toy": TESTS, "prefix": ("first token", "joint"), "far": TESTS}
    for r in report.results:
        for t in r.tests:
            assert (t.pvalue < t.alpha) == (not t.passed)
        assert r.test("first token").empirical_tv > 3 * r.test("first token").detectable
    toy = report.results[0]
    assert toy.mean_tau == 3.0 and toy.test("first token").empirical_tv == pytest.approx(1 / 3, abs=0.01)


def test_released_spectr_gbv_fails_on_the_laws():
    """The released SpecTr-GBV (registered "spectr_gbv", lossy for K ≥ 2) at K = 2, L = 3,
    N = 10,000: the joint law fails on every pair, the first-token law on toy and prefix (toy:
    measured first-token TV 0.044, δ 0.037, p 3e-21); its acceptance stays under the ceiling, so
    that test passes.  The first-token test's power at α/3, from the rule's exact first-token law
    (noncentral χ²): 0.999998 on toy (TV 0.045), 1 on prefix (TV 0.092), 0.45 on far (TV 0.025,
    noncentrality 31), so on far it is not required (it failed with the old seeds, not with the
    hashed ones of oracle/seeding.py)."""
    assert not registry.spec("spectr_gbv").lossless
    report = certify_lossless(get_rule("spectr_gbv"), K=2, L=3, n_samples=10_000, models=OLD_PAIRS)
    assert set(report.failed) == set(PAIRS)
    for r in report.results:
        assert r.test("joint").pvalue < ALPHA / 6
        if r.name != "far":
            assert r.test("first token").pvalue < ALPHA / 6 and _old_tests(r.failed) == ("first token", "joint")
        assert r.test("acceptance ceiling").passed
    toy = report.results[0]
    assert toy.test("first token").empirical_tv > toy.test("first token").detectable
    assert toy.test("first token").pvalue < 1e-15


def test_acceptance_ceiling_alone_catches_a_verifier_that_is_too_good():
    """Always accepting the whole block (τ = L = 3) on a pair whose draft is a 1 % mixture away
    from the target: its laws are within the G-tests' δ (first-token TV ≈ 0.002, δ 0.027), so
    both G-tests pass, but no lossless rule accepts 3 tokens on average here — the ceiling is
    B(1, 3) = 2.989 — so the acceptance check fails on its own.  τ has no variance, so p is the
    exact Markov bound (ceiling / 3)^N (oracle/lossless.py ``_ceiling_test``)."""
    target = RandomModel(3, 11, 1.0)
    pair = ToyPair("near", Mixture(target, RandomModel(3, 12, 1.0), 0.01), target)
    report = certify_lossless(always_accept, K=1, L=3, models=[pair])
    (r,) = report.results
    assert r.failed == ("acceptance ceiling",)
    assert r.test("first token").passed and r.test("joint").passed
    ceiling = float(prefix_match_bound(pair.draft.block_law(3), target.block_law(3), 1).sum())
    assert r.ceiling == pytest.approx(ceiling, abs=1e-12) and 2.98 < r.ceiling < 2.99
    assert r.mean_tau == r.mean_tau_low == 3.0
    t = r.test("acceptance ceiling")
    assert t.pvalue == pytest.approx(((ceiling + 1e-7) / 3) ** DEFAULT_SAMPLES, rel=1e-6)
    assert t.pvalue < 1e-30


# -- the ceiling ---------------------------------------------------------------------------------

def test_ceilings_are_the_toy_values():
    """docs/toy.md §1: global OT 50/27 (K = 1, L = 3), 134/81 (2, 2), 1708/729 (2, 3); on "far"
    at K = 2, L = 3 the OT's LP (984,375 variables) is too large and U is named."""
    toy, _, far = OLD_PAIRS
    assert lossless_ceiling(toy.draft, toy.target, 1, 3)[0] == pytest.approx(50 / 27, abs=1e-12)
    assert lossless_ceiling(toy.draft, toy.target, 2, 2)[0] == pytest.approx(134 / 81, abs=1e-9)
    value, name = lossless_ceiling(toy.draft, toy.target, 2, 3)
    assert value == pytest.approx(1708 / 729, abs=1e-9) and name.startswith("global OT")
    value, name = lossless_ceiling(far.draft, far.target, 2, 3)
    assert name.startswith("prefix-match U") and "984,375" in name
    assert value == pytest.approx(prefix_match_bound(far.draft.block_law(3), far.target.block_law(3), 2).sum())


@pytest.mark.parametrize("rule", ["sd", "gbv"])
def test_narrow_rows(rule):
    """float32 and bfloat16 rows (the laws are those of the rounded rows; GBV's modified target
    rows are computed from the rounded rows, renormalised, and rounded again): sd and gbv pass
    on the toy and "prefix" pairs at N = 5,000."""
    toy, prefix, _ = OLD_PAIRS
    for dtype in ("float32", "bfloat16"):
        report = certify_lossless(get_rule(rule), K=1, L=2, models=[toy, prefix], n_samples=5_000, dtype=dtype)
        assert report.ok, report.table()
        assert all(r.dtype == dtype for r in report.results)
        assert all((r.carried_rows > 0) == (rule == "gbv") for r in report.results)


# -- bad input -----------------------------------------------------------------------------------

def _pair():
    return [ToyPair("toy", ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]))]


@pytest.mark.parametrize("kwargs, match", [
    (dict(K=0, L=2), "K must be"), (dict(K=1, L=0), "L must be"), (dict(K=1.5, L=2), "K must be"),
    (dict(K=1, L=2, n_samples=1), "n_samples"), (dict(K=1, L=2, n_samples=True), "n_samples"),
    (dict(K=1, L=2, alpha=0.0), "alpha"), (dict(K=1, L=2, alpha=1.0), "alpha"), (dict(K=1, L=2, alpha=2), "alpha"),
    (dict(K=1, L=2, chunk=0), "chunk"), (dict(K=1, L=2, dtype="float16"), "dtype"),
    (dict(K=1, L=2, models=[]), "models is empty"), (dict(K=1, L=2, models=["toy"]), "models must hold"),
    (dict(K=1, L=2, models=[(ContextFree([0.5, 0.5]), ContextFree([1 / 3] * 3))]), "vocabulary mismatch"),
    (dict(K=1, L=7, models=[(RandomModel(5, 1), RandomModel(5, 2))]), "L = 7 is too long"),
    (dict(K=1, L=3, models=[(RandomModel(16, 1), RandomModel(16, 2))]), "31,402 MiB"),
])
def test_bad_arguments(kwargs, match):
    kwargs.setdefault("models", _pair())
    with pytest.raises(ValueError, match=match):
        certify_lossless(sampler_match, n_samples=kwargs.pop("n_samples", 100), **kwargs)


def test_one_pair_given_alone():
    """``models`` may be one ToyPair or one (draft, target) tuple; a tuple gets a default name."""
    toy = _pair()[0]
    for models, name in ((toy, "toy"), ((toy.draft, toy.target), "pair 0")):
        (r,) = certify_lossless(sampler_match, K=1, L=2, models=models, n_samples=200).results
        assert r.name == name and r.n == 200


def test_not_callable():
    with pytest.raises(TypeError, match="callable"):
        certify_lossless("sd", K=1, L=2, models=_pair(), n_samples=100)


def _bad(kind: str):
    def verifier(draft_tokens, draft_probs, target_probs, *, seeds):
        out = sampler_match(draft_tokens, draft_probs, target_probs, seeds=seeds)
        tau, tokens, selected = out.tau.copy(), out.tokens.copy(), out.selected.copy()
        if kind == "tau":
            tau[0] = draft_tokens.shape[2] + 1
        elif kind == "token":
            tokens[:, 0] = 7  # V = 2
        elif kind == "accepted":  # τ = 1 with a token the draft did not propose
            tau[:], selected[:] = 1, 0
            tokens[:, 0], tokens[:, 1] = 1 - draft_tokens[:, 0, 0], 0
        elif kind == "selected":
            tau[:], selected[:] = 1, 3
            tokens[:, 0], tokens[:, 1] = draft_tokens[:, 0, 0], 0
        elif kind == "shape":
            tokens = tokens[:, :-1]
        B, L = tau.shape[0], draft_tokens.shape[2]
        mod = None
        if kind == "mod_kind":
            mod = BatchModification("bogus", 1, np.ones(B), np.zeros(B), np.zeros(B), tau < L)
        elif kind == "mod_shape":
            mod = BatchModification("excess", 1, np.ones(B + 1), np.zeros(B + 1), np.zeros(B + 1), np.ones(B + 1, bool))
        elif kind == "mod_nan":
            mod = BatchModification("excess", 1, np.ones(B), np.full(B, np.nan), np.zeros(B), tau < L)
        return BatchVerdict(tau, selected, tokens, tau + 1, mod)
    return verifier


@pytest.mark.parametrize("kind, match", [
    ("tau", r"tau = 3 outside \[0, 2\]"), ("token", r"token id outside \[0, 2\)"),
    ("accepted", "not the first tau = 1 tokens of the selected draft block"),
    ("selected", r"selected = 3 outside \[0, 1\)"), ("shape", "tokens of shape"),
    ("mod_kind", "modification of kind 'bogus'"), ("mod_shape", r"modification.rho of shape \(101,\)"),
    ("mod_nan", "active modification record"),
])
def test_malformed_verifier_output(kind, match):
    """A defect the harness detects is the pair's verdict (its "verifier output" test fails with
    the reason), never an exception."""
    report = certify_lossless(_bad(kind), K=1, L=2, models=_pair(), n_samples=100)
    assert not report.ok and report.failed["toy"] == ("verifier output",)
    (test,) = report.results[0].tests
    assert re.search(match, test.summary) and "broke the contract" in test.summary
    assert "Stopped pairs:" in report.table()


def test_api_doc_snippet_is_the_example():
    """docs/api.md's "Certify a rule no registry knows" block defines the example's rule: same
    verdicts on the same rows and seeds (the block's certify_lossless call is run by
    test_sampler_match_passes through the example)."""
    doc = (Path(__file__).parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    block = doc.split("## Certify a rule no registry knows")[1].split("```python")[1].split("```")[0]
    definition, call = block.split("report = ")
    assert call.startswith("certify_lossless(sampler_match, K=1, L=3)")
    scope: dict = {}
    exec(definition, scope)
    far = default_pairs()[2]
    from spectr_gbv.reference.decode import Decoder, DecodeState
    dec = Decoder(far.draft, far.target, 1, 3)
    rows = [dec.block_inputs(DecodeState((1,)), [z]) for z in [(0, 1, 2), (1, 1, 1), (2, 0, 4)] * 20]
    args = [np.stack(a) for a in zip(*rows)]
    seeds = np.arange(len(rows), dtype=np.int64) + 12345
    doc_out, ex_out = scope["sampler_match"](*args, seeds=seeds), sampler_match(*args, seeds=seeds)
    assert np.array_equal(doc_out.tau, ex_out.tau) and np.array_equal(doc_out.tokens, ex_out.tokens)
    assert 0 < doc_out.tau.sum() < 3 * len(rows)
