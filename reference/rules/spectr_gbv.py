"""SpecTr-GBV Algorithm 1, as released by the authors — NOT lossless for K ≥ 2.

Lin, Sheng, Cai, Zhou, *SpecTr-GBV*, arXiv 2604.25925 (EMNLP 2026), Algorithm 1, as in their
public code (junemily/SpecTr-GBV, src/engine.py); docs/rules.md §2.5.  With
F(z) = q(z)·[1 − (1 − m(z))^K], m(z) = min(1, p(z)/q(z)), μ(z) = 1 − (1 − p(z))^K:

    h(z) = [F(z) − Σ_x F(z,x)] / [μ(z) − Σ_x F(z,x)]     |z| < L
    h(z) = F(z) / μ(z)                                    |z| = L
    drafts in index order; for draft k, sub-blocks longer than the best accepted so far, in
    increasing length, each not already rejected: accept with probability h(z) (and keep
    going), else remember z as rejected; then the full block with probability h(X^(k)): stop.

The released code divides by (denominator + 1e-20); kept here, with the result clipped to [0, 1].
Residual: the released ``q(acc,x)·(1 − m(acc,x)^K)`` or the F-consistent
``q(acc,x)·(1 − m(acc,x))^K`` (``residual="consistent"``).  Algorithm 2 is not in the
released code; ``algorithm2=True`` adds the consistent reconstruction w(z) = q(z)(1 − m(z))^K.
Exact enumeration shows the rule is lossy for K ≥ 2 under every combination (docs/rules.md §2.5).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.verdict import Modification, Verdict, min_ratio
from spectr_gbv.reference.rules.base import Block, Rule, draw_residual

_RELEASED_EPS = 1e-20  # the released code's guard in every denominator
RESIDUALS = ("released", "consistent")


def _F(q: np.ndarray, p: np.ndarray, K: int) -> np.ndarray:
    return q * (1.0 - (1.0 - min_ratio(p, q)) ** K)


class SpecTrGBV(Rule):
    """SpecTr-GBV Algorithm 1 (released).

    Args:
        residual: "released" (1 − m^K) or "consistent" ((1 − m)^K).
        algorithm2: carry the modified target into later iterations.
    """

    name = "spectr_gbv"

    def __init__(self, residual: str = "released", algorithm2: bool = False):
        if residual not in RESIDUALS:
            raise ValueError(f"residual must be one of {RESIDUALS}, got {residual!r}")
        self.residual = residual
        self.algorithm2 = bool(algorithm2)
        self.modifies_targets = self.algorithm2

    def plan(self, block: Block) -> None:
        K, L = block.K, block.L
        h = np.zeros((K, L + 1))
        for k in range(K):
            for i in range(1, L + 1):
                pz, qz = block.pj[k, i], block.qj[k, i]
                Fz = float(_F(qz, pz, K))
                mu = 1.0 - (1.0 - pz) ** K
                if i < L:
                    child = float(_F(qz * block.tp[k, i], pz * block.dp[k, i], K).sum())
                    num, den = Fz - child, mu - child
                else:
                    num, den = Fz, mu
                den += _RELEASED_EPS
                h[k, i] = num / den if den != 0 else float(num > 0)
        block.plan["h"] = np.clip(h, 0.0, 1.0)

    def decide(self, block: Block, source: Source) -> Verdict:
        K, L = block.K, block.L
        h = block.plan["h"]
        a, sel = 0, -1
        rejected: set[tuple[int, ...]] = set()
        for k in range(K):
            for i in range(a + 1, L):
                z = block.prefix(k, i)
                if z in rejected:
                    continue
                if source.coin(h[k, i], (k, i)):
                    a, sel = i, k
                else:
                    rejected.add(z)
            if source.coin(h[k, L], (k, L)):
                return Verdict(L, k, block.prefix(k, L) + (source.draw(block.tp[k, L]),))
        row = max(sel, 0)
        qz, pz = block.qj[row, a], block.pj[row, a]
        q_next, p_next = qz * block.tp[row, a], pz * block.dp[row, a]
        m = min_ratio(p_next, q_next)
        if self.residual == "released":
            weights = q_next * (1.0 - m**K)
        else:
            weights = q_next * (1.0 - m) ** K
        token = draw_residual(source, weights, block.tp[row, a])
        mod = None
        if self.algorithm2:
            mod = Modification("spectr_gbv", K, 1.0, q_next[token], p_next[token])
        return Verdict(a, sel, block.prefix(row, a) + (token,), mod)

    def __repr__(self) -> str:
        return f"SpecTrGBV(residual={self.residual!r}, algorithm2={self.algorithm2})"
