"""The exact law of τ of the planted defects the engine certificate runs, given an iteration's
rows: each defect's reference-rule analogue (the same deliberate change made to the reference
rule, ``reference.rules``), enumerated like ``engine.tau_law``.  From them the engine
certificate states each planted row's effect size (the mean shift of τ and the TV of the
averaged τ laws on the rows it ran) and the power of its tests at the N it ran
(``gpu_backend.certify.engine_power.planted_power``).

Analogues (each checked against the torch planted verifier by sampling on toy rows in
tests/certify/our_engine/test_planted_power.py):
  * ``planted_sd_shared_uniform``, ``planted_bv_shared_uniform``: one uniform η for every coin
    of the block (``_SharedUniform``: coin(h) = [η ≤ h], enumerated by the interval η is known
    to lie in);
  * ``planted_gbv_first_failure``, ``planted_bv_first_failure``: τ = (the first i whose coin
    fails) − 1, L if none, instead of the last success;
  * ``planted_spectr_rho1``, ``planted_kseq_gbv_rho1``, ``planted_kseq_bv_rho1``: ρ = 1 instead
    of ρ*.
The coin-sharing defects of the multi-draft rules (``planted_spectr_gbv*_shared_coins``,
``planted_mdbv_shared_coins``), ``planted_traversal_stale_alpha`` and
``planted_mdbv_kseq_fallback`` have no analogue here (``planted_tau_law`` returns None): the
verifier certificate samples their τ law (``planted_case_power``), the engine certificate
states no power for ``planted_mdbv_kseq_fallback``.
"""

from __future__ import annotations

import contextlib
from unittest import mock
import functools
from dataclasses import dataclass

import numpy as np


class _SharedUniform:
    """A source whose coins all read ONE uniform η (coin(h) = [η ≤ h]), built on an enumerating
    source: the interval [lo, hi) that η is known to lie in is split at h by one inner coin of
    probability (h − lo) / (hi − lo); draws are forwarded."""

    def __init__(self, inner):
        self.inner, self.lo, self.hi = inner, 0.0, 1.0

    def coin(self, h, key=(0, 0)):
        h = float(h)
        if h >= self.hi:
            return True
        if h <= self.lo:
            return False
        if self.inner.coin((h - self.lo) / (self.hi - self.lo), key):
            self.hi = h
            return True
        self.lo = h
        return False

    def draw(self, weights):
        return self.inner.draw(weights)


def _first_failure(source, h, k: int = 0) -> int:
    """The wrong stopping rule: (the first i in 1..L whose coin h[i] fails) − 1, L if none."""
    L = len(h) - 1
    for i in range(1, L + 1):
        if not source.coin(h[i], (k, i)):
            return i - 1
    return L


def _rho_one(p, q, k):
    return 1.0


def _bv_first_failure_rule():
    """Reference BV whose decide takes the first failure (BV's loop is inline: a subclass)."""
    from spectr_gbv.reference.rules.bv import BlockVerification
    from spectr_gbv.reference.verdict import Verdict
    from spectr_gbv.reference.rules.base import draw_residual

    class FirstFailureBV(BlockVerification):
        def decide(self, block, source):
            L = block.L
            tau = _first_failure(source, block.plan["h"])
            if tau == L:
                return Verdict(L, 0, block.prefix(0, L) + (source.draw(block.tp[0, L]),))
            residual = block.plan["weight"][tau] * block.tp[0, tau] - block.dp[0, tau]
            token = draw_residual(source, residual, block.tp[0, tau])
            return Verdict(tau, 0 if tau else -1, block.prefix(0, tau) + (token,))

    return FirstFailureBV()


# name → (base rule, how: "shared" source, or a context manager factory patching the reference)
def _analogue(name):
    from spectr_gbv.reference.rules import gbv as ref_gbv
    from spectr_gbv.reference.rules import kseq_bv as ref_kseq_bv
    from spectr_gbv.reference.rules import kseq_gbv as ref_kseq_gbv
    from spectr_gbv.reference.rules import spectr as ref_spectr
    from spectr_gbv.reference.rules import get_rule

    table = {
        "planted_sd_shared_uniform": (lambda: get_rule("sd"), True, contextlib.nullcontext),
        "planted_bv_shared_uniform": (lambda: get_rule("bv"), True, contextlib.nullcontext),
        "planted_gbv_first_failure": (lambda: get_rule("gbv"), False,
                                      lambda: mock.patch.object(ref_gbv, "last_success", _first_failure)),
        "planted_bv_first_failure": (_bv_first_failure_rule, False, contextlib.nullcontext),
        "planted_spectr_rho1": (lambda: get_rule("spectr"), False,
                                lambda: mock.patch.object(ref_spectr, "rho_star", _rho_one)),
        "planted_kseq_gbv_rho1": (lambda: get_rule("kseq_gbv"), False,
                                  lambda: mock.patch.object(ref_kseq_gbv, "rho_star", _rho_one)),
        "planted_kseq_bv_rho1": (lambda: get_rule("kseq_bv"), False,
                                 lambda: mock.patch.object(ref_kseq_bv, "rho_star", _rho_one)),
    }
    return table.get(name)


def has_law(name: str) -> bool:
    """Whether ``planted_tau_law`` knows the planted defect ``name``."""
    return _analogue(name) is not None


def planted_tau_law(name: str, draft_tokens, draft_probs, target_probs) -> np.ndarray | None:
    """Exact law of τ of the planted defect ``name`` given fixed draft blocks (the engine's
    ``rows_float64``: int [K, L], float64 [K, L, V], [K, L+1, V]), or None when it has no
    reference analogue.

    Returns:
        float64 [L+1]: P(τ = t), t = 0..L.
    Raises:
        ValueError: malformed rows (the rule's ``prepare``).
    """
    from spectr_gbv.reference.randomness import CoinsOnly
    from spectr_gbv.reference.randomness import enumerate_law

    entry = _analogue(name)
    if entry is None:
        return None
    make, shared, patch = entry
    rule = make()
    L = np.asarray(draft_tokens).shape[-1]
    with patch():
        block = rule.prepare(draft_tokens, draft_probs, target_probs)
        law = enumerate_law(lambda src: rule.decide(block, CoinsOnly(_SharedUniform(src) if shared else src)).tau)
    out = np.zeros(L + 1)
    for tau, pr in law.items():
        out[tau] += pr
    return out / out.sum()


# -- the verifier certificate's planted rows: effect size and power ------------------------------

def gtest_power(p0, p1, n: int, alpha: float) -> float:
    """Power of a G-test of n counts against the law ``p0`` when they are drawn from ``p1``
    (float [C] each), at level ``alpha`` (its critical value s·χ².isf(α) with ``oracle.gtest.gtest``'s
    calibration scale s, no pooling: the τ laws' cells have large counts): a noncentral χ² with
    C0 − 1 degrees of freedom (C0 the cells of p0 > 0) and noncentrality the smaller of Pearson's n·Σ(p1 − p0)²/p0 and the G
    statistic's 2n·KL(p1‖p0) (the two large-sample approximations; the smaller is kept).  Mass
    of p1 on cells where p0 = 0 is a zero-cell violation, which the certification rejects when
    seen: the power is then at least 1 − (1 − that mass)^n.

    Returns:
        float in [0, 1].
    Raises:
        ValueError: p0, p1 of different shapes, n < 1, alpha outside (0, 1).
    """
    from scipy import stats

    from spectr_gbv.oracle.gtest_cells import gtest_null_mean_scale

    p0, p1 = np.asarray(p0, dtype=np.float64), np.asarray(p1, dtype=np.float64)
    if p0.shape != p1.shape or n < 1 or not 0 < alpha < 1:
        raise ValueError(f"need laws of one shape, n >= 1 and alpha in (0, 1); got {p0.shape}, {p1.shape}, {n}, {alpha}")
    on = p0 > 0
    outside = float(p1[~on].sum())
    miss_zero = (1.0 - outside) ** n
    df = int(on.sum()) - 1
    if df < 1:
        return 1.0 - miss_zero
    q = p1[on] / p1[on].sum() if p1[on].sum() > 0 else p0[on]
    pearson = n * float(((q - p0[on]) ** 2 / p0[on]).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = float(np.where(q > 0, q * np.log(q / p0[on]), 0.0).sum())
    lam = min(pearson, 2 * n * kl)
    # the test rejects when G exceeds s·χ².isf(α), s its calibration scale (oracle.gtest.gtest)
    crit = gtest_null_mean_scale(n * p0[on], n) * stats.chi2.isf(alpha, df)
    power_g = float(stats.ncx2.sf(crit, df, lam)) if lam > 0 else alpha
    return 1.0 - miss_zero * (1.0 - power_g)


@dataclass(frozen=True)
class CasePower:
    """A planted row's effect size and the power of one test of its family at the N it runs.

    Attributes:
        name: the planted row; test: which test the power is of ("law of τ": the τ-law G-test
            of a fixed case at α / n_tests; "first-token law": the G-test of a law-level case at α).
        effect_tv: total variation between the law the planted rule has and the law it is
            tested against (of τ, or of the first token).
        exact: True when the planted rule's law is exact (a reference analogue), False when
            it was sampled (``SAMPLED_DRAWS`` draws of the torch verifier; the power is then
            computed at the sampled law moved towards the null by 4 standard errors of its TV).
        n, alpha: N and the test's level; power: the test's power (the row is caught when any
            test of its family rejects: a lower bound on the row's).
    """

    name: str
    test: str
    effect_tv: float
    exact: bool
    n: int
    alpha: float
    power: float


SAMPLED_DRAWS = 1 << 16


def _sampled_tau_law(name: str, case, draws: int = SAMPLED_DRAWS, seed: int = 7):
    """The τ law of the torch planted verifier on ``case`` from ``draws`` draws, and an upper
    bound on the standard error of its TV: 0.5·Σ_t √(p_t(1 − p_t)/draws)."""
    import torch

    from spectr_gbv.certify.suite import suite_verifier
    from spectr_gbv.oracle.certify import call_verifier, chunk_seeds

    v = suite_verifier(name, torch.float32)
    counts = np.zeros(case.L + 1)
    B = 16384
    for c in range(-(-draws // B)):
        seeds = chunk_seeds(seed, c, B)
        args = [np.broadcast_to(a, (B,) + a.shape) for a in (case.draft_tokens, case.draft_probs, case.target_probs)]
        tau, _ = call_verifier(v, *args, seeds)
        counts += np.bincount(tau, minlength=case.L + 1)
    p = counts / counts.sum()
    return p, 0.5 * float(np.sqrt(p * (1 - p) / counts.sum()).sum())


@functools.lru_cache(maxsize=None)
def _sampled_default(name: str):
    """``_sampled_tau_law`` of a registered planted defect on its case (cached per process:
    the quick and the full plan, and every N, share one sample)."""
    from spectr_gbv.certify import suite
    from spectr_gbv.reference.rules import registry

    return _sampled_tau_law(name, suite.planted_case(registry.planted()[name]))


def planted_case_power(planted, n: int, alpha: float) -> CasePower:
    """Effect and power of a planted defect's row of the verifier certificate
    (``suite.planted_case``): its τ law (exact through its reference analogue, else sampled)
    against its base rule's exact τ law on that case, the τ-law G-test at α / n_tests
    (``oracle.certify.family_size``) with N = n.

    Args:
        planted: a ``registry.Planted``; n: the row's N; alpha: the row's (case-level) α.
    """
    from spectr_gbv.certify import suite
    from spectr_gbv.oracle.certify import exact_verdict_law, family_size
    from spectr_gbv.reference.rules import get_rule

    case = suite.planted_case(planted)
    law = exact_verdict_law(get_rule(planted.base), case.draft_tokens, case.draft_probs, case.target_probs)
    p0 = suite.tau_law(law, case.L)
    a = alpha / family_size(law)
    entry = _analogue(planted.name)
    if entry is not None:
        make, shared, patch = entry
        rule = make()
        from spectr_gbv.reference.randomness import CoinsOnly
        from spectr_gbv.reference.randomness import enumerate_law

        with patch():
            block = rule.prepare(case.draft_tokens, case.draft_probs, case.target_probs)
            taus = enumerate_law(lambda src: rule.decide(block, CoinsOnly(_SharedUniform(src) if shared else src)).tau)
        p1 = np.zeros(case.L + 1)
        for t, pr in taus.items():
            p1[t] += pr
        p1 /= p1.sum()
        tv = 0.5 * float(np.abs(p1 - p0).sum())
        return CasePower(planted.name, "law of τ", tv, True, n, a, gtest_power(p0, p1, n, a))
    p1, se = _sampled_default(planted.name)
    tv = 0.5 * float(np.abs(p1 - p0).sum())
    shrink = max(0.0, 1.0 - 4 * se / tv) if tv > 0 else 0.0
    return CasePower(planted.name, "law of τ", tv, False, n, a, gtest_power(p0, p0 + shrink * (p1 - p0), n, a))


def lossy_first_token_power(rule: str, n: int, alpha: float, K: int = 2, L: int = 2) -> CasePower:
    """Effect and power of a lossy rule's law-level row (``released_rule_against_target``: the
    toy of docs/toy.md, the first emitted token against the target's law): the rule's exact
    first-token law (``reference.exact.generation_law``) against the target's, the G-test at α."""
    from spectr_gbv.oracle.certify_cases import released_rule_against_target
    from spectr_gbv.reference.exact import generation_law
    from spectr_gbv.reference.rules import get_rule

    case = released_rule_against_target(K, L)
    law = generation_law(get_rule(rule), case.draft, case.target, K, L, 1).token_law
    p1 = np.array([law.get((t,), 0.0) for t in range(case.V)])
    p0 = np.asarray(case.target.conditional(()), dtype=np.float64)
    tv = 0.5 * float(np.abs(p1 - p0).sum())
    return CasePower(rule, "first-token law", tv, True, n, alpha, gtest_power(p0, p1, n, alpha))
