"""Greedy block verification (GBV), single draft — the paper's "GBV" baseline.

docs/rules.md §2.4 (the K = 1 case of SpecTr-GBV's released code), with the sub-block joints
p(z), q(z) counted from the window's start:

    i < L: h_i = 1 − (p(z) − q(z))_+ / (p(z) − Σ_x min(p(z,x), q(z,x))),  z = X_≤i   (0/0 → 1)
    h_L = min(1, q(X_≤L)/p(X_≤L))
    τ = the last i with η_i ≤ h_i;  correction ∝ (q(z,·) − p(z,·))_+ at z = X_≤τ

Per iteration P(τ ≥ i, X_≤i = z) = min(p(z), q(z)), the single-draft optimum, but the
positions after the emitted tokens must then be generated from the modified target
w(z) = (q(z) − p(z))_+ (Algorithm 2, docs/rules.md §3); without it the rule is not lossless.

``greedy_acceptance`` takes a scale ρ (q replaced by q/ρ in every formula) and is shared with
K-SEQ-GBV (docs/rules.md §2.6).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Modification, Verdict
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual


def greedy_acceptance(block: Block, k: int, rho: float = 1.0) -> np.ndarray:
    """Acceptance probabilities h_1..h_L of GBV on draft k against the scaled target q/ρ.

    Args:
        block: prepared inputs.
        k: draft index.
        rho: scale ρ ≥ 1 (1 for GBV; ρ* of K-SEQ for K-SEQ-GBV).
    Returns:
        float64 [L+1] with h[i] in [0, 1] for i = 1..L (h[0] unused, set to 1).
    Source: docs/rules.md §2.4 (GBV), §2.6 (scaled target).
    """
    L = block.L
    # h is a function of the ratio r = q(z)/(ρ·p(z)) alone (divide the formula by p(z)), which
    # stays finite where the joints themselves underflow (long blocks of unlikely tokens)
    r = np.exp(block.log_qj[k] - block.log_pj[k]) / rho  # p(z) > 0: the draft proposed z
    h = np.ones(L + 1)
    for i in range(1, L):
        den = 1.0 - np.minimum(block.dp[k, i], r[i] * block.tp[k, i]).sum()
        if den > 0:
            h[i] = 1.0 - max(1.0 - r[i], 0.0) / den
    h[L] = min(1.0, r[L])
    return np.clip(h, 0.0, 1.0)


def last_success(source: Source, h: np.ndarray, k: int = 0) -> int:
    """τ = the last i in 1..L whose coin h[i] (address (k, i)) succeeds, asked from L down;
    0 if none."""
    for i in range(len(h) - 1, 0, -1):
        if source.coin(h[i], (k, i)):
            return i
    return 0


def greedy_outcome(block: Block, source: Source, k: int, tau: int, rho: float, K: int,
                   algorithm2: bool) -> Verdict:
    """Emit X^(k)_≤τ and the bonus (τ = L) or the correction ∝ (q(z,·) − ρ·p(z,·))_+ at
    z = X^(k)_≤τ, with the Algorithm 2 record w(z) = (q(z) − ρ p(z))_+ when ``algorithm2``."""
    L = block.L
    selected = k if tau else -1
    if tau == L:
        return Verdict(L, selected, block.prefix(k, L) + (source.draw(block.tp[k, L]),))
    qz, pz = block.qj[k, tau], block.pj[k, tau]
    r = np.exp(block.log_qj[k, tau] - block.log_pj[k, tau]) / rho  # q(z)/(ρ p(z)), scale-free
    token = draw_residual(source, r * block.tp[k, tau] - block.dp[k, tau], block.tp[k, tau])
    mod = None
    if algorithm2:
        mod = Modification("excess", K, rho, qz * block.tp[k, tau, token], pz * block.dp[k, tau, token])
    return Verdict(tau, selected, block.prefix(k, tau) + (token,), mod)


class GreedyBlockVerification(Rule):
    """GBV; ``algorithm2=False`` is the lossy variant without the distribution modification."""

    name = "gbv"
    single_draft = True

    def __init__(self, algorithm2: bool = True):
        self.algorithm2 = bool(algorithm2)
        self.modifies_targets = self.algorithm2

    def plan(self, block: Block) -> None:
        block.plan["h"] = greedy_acceptance(block, 0)

    def decide(self, block: Block, source: Source) -> Verdict:
        tau = last_success(source, block.plan["h"])
        return greedy_outcome(block, source, 0, tau, 1.0, 1, self.algorithm2)

    def __repr__(self) -> str:
        return f"GreedyBlockVerification(algorithm2={self.algorithm2})"
