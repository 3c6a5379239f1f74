"""Deliberately wrong verification rules, kept in tests only: every check that claims to
detect a lossy rule must catch these."""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.rules.base import Block
from spectr_gbv.reference.rules.bv import BlockVerification
from spectr_gbv.reference.verdict import Verdict
from spectr_gbv.reference.rules.base import draw_residual


class SharedUniformBV(BlockVerification):
    """BV with ONE uniform shared by the whole block (η_1 = … = η_L) instead of independent
    ones: τ = the last i with η ≤ h_i.  Lossy on prefix-dependent models."""

    name = "planted_bv_shared_uniform"

    def decide(self, block: Block, source: Source) -> Verdict:
        L = block.L
        h = block.plan["h"]
        # one uniform η: τ = max{i : η ≤ h_i}; P(τ ≥ j) = max_{i ≥ j} h_i.  Drawn as the
        # interval of η between the sorted thresholds.
        tail_max = np.maximum.accumulate(h[1:][::-1])[::-1]  # max_{i ≥ j} h_i, j = 1..L
        bounds = np.concatenate([tail_max, [0.0]])
        widths = np.concatenate([[1.0 - bounds[0]], bounds[:-1] - bounds[1:]])  # τ = 0..L
        tau = source.draw(np.maximum(widths, 0.0))
        if tau == L:
            return Verdict(L, 0, block.prefix(0, L) + (source.draw(block.tp[0, L]),))
        residual = block.plan["weight"][tau] * block.tp[0, tau] - block.dp[0, tau]
        token = draw_residual(source, residual, block.tp[0, tau])
        return Verdict(tau, 0 if tau else -1, block.prefix(0, tau) + (token,))


class FirstFailureBV(BlockVerification):
    """BV that stops at the FIRST failed coin going forward (i = 1, 2, …) instead of taking
    the last success: τ = (first i with η_i > h_i) − 1.  Lossy."""

    name = "planted_bv_first_failure"

    def decide(self, block: Block, source: Source) -> Verdict:
        L = block.L
        h = block.plan["h"]
        tau = L
        for i in range(1, L + 1):
            if not source.coin(h[i], (0, i)):
                tau = i - 1
                break
        if tau == L:
            return Verdict(L, 0, block.prefix(0, L) + (source.draw(block.tp[0, L]),))
        residual = block.plan["weight"][tau] * block.tp[0, tau] - block.dp[0, tau]
        token = draw_residual(source, residual, block.tp[0, tau])
        return Verdict(tau, 0 if tau else -1, block.prefix(0, tau) + (token,))
