"""Token verification (speculative sampling), single draft.

Leviathan et al. 2023, Algorithm 1; Chen et al. 2023.  docs/rules.md §2.1:
accept X_i with probability min(1, q(X_i)/p(X_i)); at the first rejection emit a correction
∝ (q − p)_+ from that position; if all L are accepted, a bonus token from q(· | X_≤L).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual


class TokenVerification(Rule):
    name = "sd"
    single_draft = True

    def plan(self, block: Block) -> None:
        L = block.L
        x = block.tokens[0]
        p = block.dp[0, np.arange(L), x]
        q = block.tp[0, np.arange(L), x]
        block.plan["accept"] = np.minimum(1.0, q / p)  # p > 0: the draft proposed x

    def decide(self, block: Block, source: Source) -> Verdict:
        accept = block.plan["accept"]
        for i in range(block.L):
            if not source.coin(accept[i], (0, i + 1)):
                residual = block.tp[0, i] - block.dp[0, i]
                token = draw_residual(source, residual, block.tp[0, i])
                return Verdict(i, 0 if i else -1, block.prefix(0, i) + (token,))
        return Verdict(block.L, 0, block.prefix(0, block.L) + (source.draw(block.tp[0, block.L]),))
