"""Planted lossy verifiers for the public certifier's families (issue 36), kept in tests only.

Each is a reference rule (reference.rules: ``Rule.__call__`` is the batched contract of
reference/contract.py, numpy, per-row seeds) with one deliberate defect, certified against the
law of the rule it claims.  Each defect is invisible to the six families the public certifier
ran before issue 36 (toy, prefix, large, zeros, disjoint, equal as they were) or to all but one
of them, and is exposed by one family (tests/oracle/test_public_planted.py).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.rules.base import Block, draw_residual
from spectr_gbv.reference.rules.bv import BlockVerification
from spectr_gbv.reference.rules.sd import TokenVerification
from spectr_gbv.reference.rules.traversal import TraversalVerification
from spectr_gbv.reference.verdict import Verdict

TOP_K = 20


class UnweightedResidualBV(BlockVerification):
    """BV whose correction residual drops the weight p_τ: (q − p)_+ instead of (p_τ·q − p)_+
    (issue 36's first finding; the same defect as test_case_coverage.unweighted_decide)."""

    name = "planted_bv_unweighted_residual"

    def decide(self, block: Block, source: Source) -> Verdict:
        L, h = block.L, block.plan["h"]
        tau = next((i for i in range(L, 0, -1) if source.coin(h[i], (0, i))), 0)
        if tau == L:
            return Verdict(L, 0, block.prefix(0, L) + (source.draw(block.tp[0, L]),))
        token = draw_residual(source, block.tp[0, tau] - block.dp[0, tau], block.tp[0, tau])
        return Verdict(tau, 0 if tau else -1, block.prefix(0, tau) + (token,))


def top_k(weights: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """``weights`` (clipped at 0) with all but its k largest entries set to 0."""
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    if (w > 0).sum() <= k:
        return w
    out = np.zeros_like(w)
    keep = np.argsort(w, kind="stable")[-k:]
    out[keep] = w[keep]
    return out


class TopKSD(TokenVerification):
    """Token verification whose correction and bonus draws keep only the TOP_K = 20 most likely
    tokens of their row (a top-k sampler applied after verification): the same as "sd"
    whenever a row has at most 20 tokens of positive mass (every family but "large")."""

    name = "planted_sd_top_k"

    def decide(self, block: Block, source: Source) -> Verdict:
        accept = block.plan["accept"]
        for i in range(block.L):
            if not source.coin(accept[i], (0, i + 1)):
                token = draw_residual(source, top_k(block.tp[0, i] - block.dp[0, i]), block.tp[0, i])
                return Verdict(i, 0 if i else -1, block.prefix(0, i) + (token,))
        return Verdict(block.L, 0, block.prefix(0, block.L) + (source.draw(top_k(block.tp[0, block.L])),))


class ZeroAcceptSD(TokenVerification):
    """Token verification that replaces a target probability of exactly 0 by FLOOR = 0.05 in its
    acceptance ratio (a log-space implementation clamping log q = −inf): a drafted token of
    target probability 0 is accepted with probability min(1, 0.05/p(x)); exact elsewhere."""

    name = "planted_sd_zero_accept"
    FLOOR = 0.05

    def plan(self, block: Block) -> None:
        L = block.L
        x = block.tokens[0]
        p = block.dp[0, np.arange(L), x]
        q = block.tp[0, np.arange(L), x]
        block.plan["accept"] = np.minimum(1.0, np.where(q > 0, q, self.FLOOR) / p)


class OneHotBugSD(TokenVerification):
    """Token verification that, when the draft row is one-hot (n-gram / prompt-lookup / greedy
    drafts), corrects from the target row q instead of (q − 1_x)_+ (the drafted token x is not
    removed); exact on every other row."""

    name = "planted_sd_one_hot_bug"

    def decide(self, block: Block, source: Source) -> Verdict:
        accept = block.plan["accept"]
        for i in range(block.L):
            if not source.coin(accept[i], (0, i + 1)):
                p, q = block.dp[0, i], block.tp[0, i]
                residual = q if p.max() == 1.0 else q - p
                token = draw_residual(source, residual, q)
                return Verdict(i, 0 if i else -1, block.prefix(0, i) + (token,))
        return Verdict(block.L, 0, block.prefix(0, block.L) + (source.draw(block.tp[0, block.L]),))


class DeepTargetRowSD(TokenVerification):
    """Token verification whose correction at depth ≥ DEPTH = 3 draws from the target row q
    instead of the residual (q − p)_+ (a defect active only past depth 3, which certification
    at L = 3 cannot reach)."""

    name = "planted_sd_deep_target_row"
    DEPTH = 3

    def decide(self, block: Block, source: Source) -> Verdict:
        accept = block.plan["accept"]
        for i in range(block.L):
            if not source.coin(accept[i], (0, i + 1)):
                q = block.tp[0, i]
                residual = q if i >= self.DEPTH else q - block.dp[0, i]
                token = draw_residual(source, residual, q)
                return Verdict(i, 0 if i else -1, block.prefix(0, i) + (token,))
        return Verdict(block.L, 0, block.prefix(0, block.L) + (source.draw(block.tp[0, block.L]),))


class UnmergedTraversal(TraversalVerification):
    """Traversal Verification written for candidates drawn WITHOUT replacement (the paper's
    trees, distinct siblings): the K drafts are K separate chains from the root, never merged,
    so two drafts with the same first token are two siblings with one token.  Identical to
    "traversal" when the drafts' first tokens differ; lossy under i.i.d. drafting."""

    name = "planted_traversal_unmerged"

    def plan(self, block: Block) -> None:
        K, L = block.tokens.shape
        names, parent, children = [(-1, 0)], [-1], [[]]
        for k in range(K):
            up = 0
            for i in range(1, L + 1):
                names.append((k, i))
                parent.append(up)
                children.append([])
                children[up].append(len(names) - 1)
                up = len(names) - 1
        block.plan["tree"] = (names, parent, children)
