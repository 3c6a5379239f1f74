"""SpecTr K-SEQ over a block of K i.i.d. drafts, token by token.

Sun et al., *SpecTr*, NeurIPS 2023, arXiv 2310.15141 (K-SEQ, their Algorithm 3, applied
position by position over the draft tree); docs/rules.md §2.2.  At depth d the k drafts that still
carry the accepted prefix propose their d-th tokens (i.i.d. from p given the prefix); candidate
j is accepted with probability min(1, q(x_j)/(ρ*·p(x_j))) in index order, ρ* the root of
1 − (1 − β(ρ))^k = ρβ(ρ); the drafts carrying the accepted token go one level deeper.  No
candidate accepted: correction ∝ (q − ρ*·p)_+.  After depth L: bonus.  Lossless.
"""

from __future__ import annotations

from spectr_gbv.reference.kseq import rho_star
from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual


class SpecTr(Rule):
    name = "spectr"

    def plan(self, block: Block) -> None:
        block.plan["rho"] = {}  # (lead draft, depth, k) → ρ*, filled on first use

    def _rho(self, block: Block, lead: int, depth: int, k: int) -> float:
        key = (lead, depth, k)
        cache = block.plan["rho"]
        if key not in cache:
            cache[key] = rho_star(block.dp[lead, depth], block.tp[lead, depth], k)
        return cache[key]

    def decide(self, block: Block, source: Source) -> Verdict:
        alive = list(range(block.K))
        for depth in range(block.L):
            lead = alive[0]  # all alive drafts share the prefix, hence these rows
            p, q = block.dp[lead, depth], block.tp[lead, depth]
            rho = self._rho(block, lead, depth, len(alive))
            accepted = None
            for j in alive:
                x = block.tokens[j, depth]
                if source.coin(min(1.0, q[x] / (rho * p[x])), (j, depth + 1)):
                    accepted = x
                    break
            if accepted is None:
                token = draw_residual(source, q - rho * p, q)
                return Verdict(depth, lead if depth else -1, block.prefix(lead, depth) + (token,))
            alive = [j for j in alive if block.tokens[j, depth] == accepted]
        lead = alive[0]
        return Verdict(block.L, lead, block.prefix(lead, block.L) + (source.draw(block.tp[lead, block.L]),))
