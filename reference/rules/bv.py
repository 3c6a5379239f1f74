"""Block verification (BV), single draft.

Sun et al., *Block Verification Accelerates Speculative Decoding*, ICLR 2025,
arXiv 2403.10444, Algorithm 2; docs/rules.md §2.3:

    p_0 = 1,  p_i = min(1, p_{i-1}·q(X_i|·)/p(X_i|·))
    i < L: Z_i = Σ_x (p_i·q(x|X_≤i) − p(x|X_≤i))_+,  h_i = Z_i/(Z_i + 1 − p_i)   (0/0 → 1)
    h_L = p_L
    τ = the last i with η_i ≤ h_i (independent uniforms), 0 if none
    τ < L: correction ∝ (p_τ·q(·|X_≤τ) − p(·|X_≤τ))_+ ;  τ = L: bonus.

Lossless without touching later iterations, and optimal among such verifiers (their Theorem 2).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual


class BlockVerification(Rule):
    name = "bv"
    single_draft = True

    def plan(self, block: Block) -> None:
        L = block.L
        x = block.tokens[0]
        ratio = block.tp[0, np.arange(L), x] / block.dp[0, np.arange(L), x]
        weight = np.ones(L + 1)  # p_i of the paper
        for i in range(1, L + 1):
            weight[i] = min(1.0, weight[i - 1] * ratio[i - 1])
        h = np.empty(L + 1)
        for i in range(1, L):
            Z = np.maximum(weight[i] * block.tp[0, i] - block.dp[0, i], 0.0).sum()
            den = Z + 1.0 - weight[i]
            h[i] = Z / den if den > 0 else 1.0
        h[L] = weight[L]
        block.plan["weight"] = weight
        block.plan["h"] = h

    def decide(self, block: Block, source: Source) -> Verdict:
        L = block.L
        h = block.plan["h"]
        for i in range(L, 0, -1):  # τ is the LAST i whose coin succeeds
            if source.coin(h[i], (0, i)):
                tau = i
                break
        else:
            tau = 0
        if tau == L:
            return Verdict(L, 0, block.prefix(0, L) + (source.draw(block.tp[0, L]),))
        residual = block.plan["weight"][tau] * block.tp[0, tau] - block.dp[0, tau]
        token = draw_residual(source, residual, block.tp[0, tau])
        return Verdict(tau, 0 if tau else -1, block.prefix(0, tau) + (token,))
