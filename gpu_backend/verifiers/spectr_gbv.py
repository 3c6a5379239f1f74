"""SpecTr-GBV Algorithm 1, as released by the authors, batched — NOT lossless for K ≥ 2.

Lin, Sheng, Cai, Zhou, *SpecTr-GBV*, arXiv 2604.25925 (EMNLP 2026), Algorithm 1, as in their
public code (junemily/SpecTr-GBV, src/engine.py); docs/rules.md §2.5.  With
F(z) = q(z)·[1 − (1 − m(z))^K], m(z) = min(1, p(z)/q(z)), μ(z) = 1 − (1 − p(z))^K:

    h(z) = [F(z) − Σ_x F(z,x)] / [μ(z) − Σ_x F(z,x) + 1e-20]     |z| < L
    h(z) = F(z) / (μ(z) + 1e-20)                                  |z| = L
    drafts in index order; for draft k, the sub-blocks longer than the best accepted so far (at
    the start of draft k), in increasing length, each not already rejected (set H): accept with
    probability h(z) (coin (k, i)) and keep going, else add z to H; then the full block
    (coin (k, L)): accept and stop.
    correction at the accepted z: released q(z,x)·(1 − m(z,x)^K) or consistent q(z,x)·(1 − m(z,x))^K.

The 1e-20 of the released code is absolute, so F, μ and the child sums are formed at their true
scale in float64 (joints from the log joints); the vocabulary sum Σ_x F(z,x) = s·Σ_x F'(x) is
computed on rows scaled by s = max(p(z), q(z)) so that it neither underflows nor overflows.
μ = 1 − (1 − p(z))^K is the released (and reference) formula, kept for agreement in law.

Vectorisation of H: z = X^(k)_≤i is in H iff some earlier draft k' < k asked and rejected its
own length-i sub-block and X^(k')_≤i = X^(k)_≤i (sub-blocks of other lengths cannot be equal).
Prefix equality is a [B, K, K, L] cumulative product of token equality, the rejected
sub-blocks a [B, K, L] mask; one step per draft k (static K loop) handles all lengths at once,
because within draft k the sub-blocks asked and their coins do not depend on each other.
Source: reference/rules/spectr_gbv.py.
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import spectr_gbv as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import (batch_index, gather_rows, make_verdict, modification_record, per_case,
                    reduce_rows, scaled_pair)
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.noise import Noise

_RELEASED_EPS = 1e-20  # the released code's guard in every denominator


def mul_pow_(acc: torch.Tensor, base: torch.Tensor, n: int) -> torch.Tensor:
    """acc·base^n for an integer n ≥ 0 by square-and-multiply, in place on ``acc`` and ``base``
    (base is consumed).  torch's pow with an integer exponent ≥ 4 takes a generic path much
    slower than multiplications on CPU (benchmarks/MEASUREMENTS.md)."""
    while n:
        if n & 1:
            acc.mul_(base)
        n >>= 1
        if n:
            base.mul_(base)
    return acc
RESIDUALS = ("released", "consistent")


def _child_sum(K: int):
    """Σ_x a·q(x)·[1 − (1 − m_x)^K], m_x = min(1, c·p(x)/(a·q(x))), per-row coefficients a, c."""

    def fn(p, q, a, c, buffers):
        aq, d, ratio = buffers
        torch.mul(q, a, out=aq)
        torch.mul(p, c, out=d)
        if K == 1:  # a·q·m = min(a·q, c·p)
            return torch.minimum(aq, d, out=d).sum(-1)
        torch.sub(aq, d, out=d).clamp_min_(0)  # d = a·q·(1 − m)
        # a·q·(1 − m)^K = d·(d/(a·q))^(K−1); a·q = 0 ⇒ d = 0
        torch.clamp_min(aq, torch.finfo(aq.dtype).tiny, out=ratio)
        torch.div(d, ratio, out=ratio)
        total = aq.sum(-1)
        mul_pow_(d, ratio, K - 1)
        return total - d.sum(-1)

    return fn


def _F(lq: torch.Tensor, lp: torch.Tensor, K: int) -> torch.Tensor:
    """F = q·(1 − (1 − m)^K) from log joints (float64)."""
    q = torch.exp(lq)
    p = torch.exp(lp)
    m = torch.where(q > 0, torch.clamp_max(p / torch.where(q > 0, q, 1.0), 1.0), torch.ones_like(q))
    return q * (1.0 - (1.0 - m) ** K)


def acceptance(batch: PreparedBatch) -> torch.Tensor:
    """h(X^(k)_≤i) for every draft k and length i = 1..L (float64 [B, K, L+1], h[..., 0] unused)."""
    K, L = batch.K, batch.L
    Fz = _F(batch.lq, batch.lp, K)
    mu = 1.0 - (1.0 - torch.exp(batch.lp)) ** K
    h = torch.zeros_like(Fz)
    if L > 1:
        lq, lp = batch.lq[:, :, 1:L], batch.lp[:, :, 1:L]
        s = torch.maximum(lq, lp)  # lp is finite: validated p > 0
        a, c = torch.exp(lq - s), torch.exp(lp - s)
        child = torch.exp(s) * reduce_rows(_child_sum(K), (batch.dp[:, :, 1:L], batch.tp[:, :, 1:L]), (a, c),
                                           n_buffers=3)
        num = Fz[:, :, 1:L] - child
        den = mu[:, :, 1:L] - child + _RELEASED_EPS
        safe = torch.where(den != 0, den, torch.ones_like(den))
        h[:, :, 1:L] = torch.where(den != 0, num / safe, (num > 0).double())
    den = mu[:, :, L] + _RELEASED_EPS
    h[:, :, L] = Fz[:, :, L] / den
    return h.clamp(0.0, 1.0)


def prefix_equal(tokens: torch.Tensor) -> torch.Tensor:
    """bool [B, K, K, L]: [b, k', k, i-1] ⇔ X^(k')_≤i = X^(k)_≤i."""
    eq = tokens.unsqueeze(2) == tokens.unsqueeze(1)
    return torch.cumprod(eq.to(torch.int8), dim=3).bool()


class SpecTrGBV(Verifier):
    """SpecTr-GBV Algorithm 1 (released).

    Args:
        residual: "released" (1 − m^K) or "consistent" ((1 − m)^K).
        algorithm2: return the Algorithm 2 record w(z) = q(z)(1 − m(z))^K (kind "spectr_gbv").
    """

    reference = ref.SpecTrGBV

    def __init__(self, residual: str = "released", algorithm2: bool = False):
        if residual not in RESIDUALS:
            raise ValueError(f"residual must be one of {RESIDUALS}, got {residual!r}")
        self.residual = residual
        self.algorithm2 = bool(algorithm2)

    def make_reference(self):
        return self.reference(residual=self.residual, algorithm2=self.algorithm2)

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        B, K, L = batch.B, batch.K, batch.L
        device = batch.device
        coin = noise.uniforms <= per_case(batch, acceptance)  # [B, K, L+1]
        same = prefix_equal(batch.tokens)
        lengths = torch.arange(1, L, device=device)  # sub-block lengths 1..L-1
        rejected = torch.zeros(B, K, L - 1, dtype=torch.bool, device=device)
        a = torch.zeros(B, dtype=torch.int64, device=device)
        sel = torch.full((B,), -1, dtype=torch.int64, device=device)
        stopped = torch.zeros(B, dtype=torch.bool, device=device)
        for k in range(K):
            asked = (lengths.unsqueeze(0) > a.unsqueeze(1)) & ~stopped.unsqueeze(1)  # [B, L-1]
            if k > 0:
                in_h = (rejected[:, :k] & same[:, :k, k, : L - 1]).any(dim=1)
                asked = asked & ~in_h
            success = asked & coin[:, k, 1:L]
            rejected[:, k] = asked & ~success
            best = torch.where(success, lengths, torch.zeros_like(lengths)).amax(dim=1) if L > 1 \
                else torch.zeros_like(a)
            a = torch.where(best > 0, best, a)
            sel = torch.where(best > 0, k, sel)
            full = ~stopped & coin[:, k, L]
            a = torch.where(full, L, a)
            sel = torch.where(full, k, sel)
            stopped = stopped | full
        row = sel.clamp_min(0)
        b = batch_index(batch)
        q_row = gather_rows(batch.tp, row, a)
        p_row = gather_rows(batch.dp, row, a)  # position L clamped: unused (bonus)
        cq, cp = scaled_pair(batch.lq[b, row, a], batch.lp[b, row, a])
        cq = cq.to(batch.dtype).unsqueeze(1)
        cp = cp.to(batch.dtype).unsqueeze(1)
        aq = cq * q_row
        bp = cp * p_row
        if self.residual == "released":
            m = torch.where(aq > bp, bp / aq.clamp_min(torch.finfo(aq.dtype).tiny), torch.ones_like(aq))
            weights = aq * (1.0 - mul_pow_(torch.ones_like(m), m, K))
        else:
            d = (aq - bp).clamp_min(0)
            weights = mul_pow_(d, d / aq.clamp_min(torch.finfo(aq.dtype).tiny), K - 1)
        weights = torch.where(stopped.unsqueeze(1), q_row, weights)  # τ = L: bonus
        last = noise.draw(weights, q_row)
        mod = None
        if self.algorithm2:
            rho = torch.ones(B, dtype=torch.float64, device=device)
            mod = modification_record(batch, "spectr_gbv", rho, row, a, last, q_row, p_row)
        return make_verdict(batch, a, sel, row, last, mod)

    def __repr__(self) -> str:
        return f"SpecTrGBV(residual={self.residual!r}, algorithm2={self.algorithm2})"
