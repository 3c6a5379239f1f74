"""K-SEQ-BV: K-SEQ over whole blocks with block verification per draft, no modification.

A construction of this project (docs/rules.md §2.8; verified here with the exact engine, not taken on
trust).  SpecTr's K-SEQ (Sun et al., NeurIPS 2023, arXiv 2310.15141, Algorithm 3) applied to
whole blocks, each draft in turn getting a BV attempt (Sun et al., ICLR 2025, arXiv 2403.10444,
Algorithm 2; docs/rules.md §2.3) whose first ratio is divided by ρ; the first draft that accepts at
least one token wins:

    ρ = ρ* of K-SEQ on the window's first position (k = K; K = 1 → ρ = 1)
    for k = 1..K:
        p_0 = 1,  p_1 = min(1, q(X_1)/(ρ·p(X_1))),  p_i = min(1, p_{i-1}·q(X_i|·)/p(X_i|·))
        h_i = Z_i/(Z_i + 1 − p_i),  Z_i = Σ_x (p_i·q(x|X_≤i) − p(x|X_≤i))_+   (i < L; 0/0 → 1)
        h_L = p_L
        τ_k = the last i with η_{k,i} ≤ h_i  (coins (k, i), independent)
        if τ_k ≥ 1: emit X^(k)_≤τ_k, then the correction ∝ (p_τ·q(·|X_≤τ) − p(·|X_≤τ))_+
                    (τ_k < L) or the bonus q(·|X^(k)_≤L) (τ_k = L); stop
    no draft accepted: correction at the root ∝ (q − ρ·p)_+

Why it is lossless (sketch, checked exactly in tests/reference/test_lossless.py): for one
draft, BV against the scaled first-position target accepts X_1 = x with probability
min(p(x), q(x)/ρ) summed over its futures, and, given X_1 = x is accepted, its continuation is
BV's (lossless) continuation against q(·|x).  So each draft in turn is one K-SEQ candidate at
the first position, the K-SEQ equation for ρ* makes the first emitted token q-distributed, and
the tokens after it follow BV's law.  Later iterations are untouched (modifies_targets = False).

It reduces to BV at K = 1 (ρ = 1) and to K-SEQ (spectr) at L = 1 (h_1 = min(1, q/(ρp))).
Known weakness: once a draft accepts, the other drafts are not used at depths ≥ 2, so SpecTr,
which keeps every draft carrying the accepted prefix alive, beats it on some instances.
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.kseq import rho_star
from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual
from spectr_gbv.reference.rules.gbv import last_success


def bv_acceptance(block: Block, k: int, rho: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """BV's weights p_i and acceptance probabilities h_i on draft k, first ratio divided by ρ.

    Args:
        block: prepared inputs (draft k's rows dp[k], tp[k], tokens[k]).
        k: draft index.
        rho: scale ρ ≥ 1 of the first position (1: plain BV, docs/rules.md §2.3).
    Returns:
        (weight, h), float64 [L+1] each: weight[i] = p_i (weight[0] = 1); h[i] for i = 1..L
        (h[0] unused, 1).
    Source: Sun et al., ICLR 2025, Algorithm 2; docs/rules.md §2.3; §2.8 (the ρ scale).
    """
    L = block.L
    x = block.tokens[k]
    ratio = block.tp[k, np.arange(L), x] / block.dp[k, np.arange(L), x]  # p > 0: x was drafted
    ratio[0] /= rho
    weight = np.ones(L + 1)
    for i in range(1, L + 1):
        weight[i] = min(1.0, weight[i - 1] * ratio[i - 1])
    h = np.ones(L + 1)
    for i in range(1, L):
        Z = np.maximum(weight[i] * block.tp[k, i] - block.dp[k, i], 0.0).sum()
        den = Z + 1.0 - weight[i]
        h[i] = Z / den if den > 0 else 1.0
    h[L] = weight[L]
    return weight, h


class KSeqBV(Rule):
    """K-SEQ-BV (docs/rules.md §2.8); lossless, leaves later iterations untouched."""

    name = "kseq_bv"
    modifies_targets = False

    def plan(self, block: Block) -> None:
        rho = rho_star(block.dp[0, 0], block.tp[0, 0], block.K)  # first-position rows are shared
        block.plan["rho"] = rho
        block.plan["bv"] = [bv_acceptance(block, k, rho) for k in range(block.K)]

    def decide(self, block: Block, source: Source) -> Verdict:
        L = block.L
        for k in range(block.K):
            weight, h = block.plan["bv"][k]
            tau = last_success(source, h, k)
            if tau == L:
                return Verdict(L, k, block.prefix(k, L) + (source.draw(block.tp[k, L]),))
            if tau >= 1:
                residual = weight[tau] * block.tp[k, tau] - block.dp[k, tau]
                token = draw_residual(source, residual, block.tp[k, tau])
                return Verdict(tau, k, block.prefix(k, tau) + (token,))
        q, p = block.tp[0, 0], block.dp[0, 0]
        token = draw_residual(source, q - block.plan["rho"] * p, q)
        return Verdict(0, -1, (token,))
