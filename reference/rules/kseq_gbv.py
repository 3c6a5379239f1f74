"""K-SEQ-GBV: a lossless multi-draft block verifier (this project's reconstruction).

docs/rules.md §2.6 — K-SEQ (SpecTr) applied to whole blocks, each draft in turn getting a GBV
attempt against the scaled target q/ρ; the first draft that accepts at least one token wins:

    ρ = ρ* of K-SEQ on the window's first position (k = K; K = 1 → ρ = 1)
    for k = 1..K: GBV on X^(k) with q(z) → q(z)/ρ;  if τ_k ≥ 1: acc = X^(k)_≤τ_k; stop
    correction ∝ (q(acc,·) − ρ·p(acc,·))_+ ;  Algorithm 2 weight w(z) = (q(z) − ρ·p(z))_+

Reduces to GBV at K = 1 and to K-SEQ at L = 1; E[τ] = Σ_{i≤L} Σ_{|z|=i} min(ρ·p(z), q(z)).
"""

from __future__ import annotations

from spectr_gbv.reference.kseq import rho_star
from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import Block, Rule
from spectr_gbv.reference.rules.gbv import greedy_acceptance, greedy_outcome, last_success


class KSeqGBV(Rule):
    name = "kseq_gbv"

    def __init__(self, algorithm2: bool = True):
        self.algorithm2 = bool(algorithm2)
        self.modifies_targets = self.algorithm2

    def plan(self, block: Block) -> None:
        rho = rho_star(block.dp[0, 0], block.tp[0, 0], block.K)
        block.plan["rho"] = rho
        block.plan["h"] = [greedy_acceptance(block, k, rho) for k in range(block.K)]

    def decide(self, block: Block, source: Source) -> Verdict:
        rho = block.plan["rho"]
        for k in range(block.K):
            tau = last_success(source, block.plan["h"][k], k)
            if tau >= 1:
                return greedy_outcome(block, source, k, tau, rho, block.K, self.algorithm2)
        return greedy_outcome(block, source, 0, 0, rho, block.K, self.algorithm2)

    def __repr__(self) -> str:
        return f"KSeqGBV(algorithm2={self.algorithm2})"
