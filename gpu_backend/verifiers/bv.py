"""Block verification (BV), single draft, batched.

Sun et al., *Block Verification Accelerates Speculative Decoding*, ICLR 2025, arXiv 2403.10444,
Algorithm 2; docs/rules.md §2.3:

    p_0 = 1,  p_i = min(1, p_{i-1}·q(X_i|·)/p(X_i|·))
    i < L: Z_i = Σ_x (p_i·q(x|X_≤i) − p(x|X_≤i))_+,  h_i = Z_i/(Z_i + 1 − p_i)   (0/0 → 1)
    h_L = p_L;  τ = the last i with η_i ≤ h_i;  correction ∝ (p_τ·q(·|X_≤τ) − p(·|X_≤τ))_+

The weights p_i are capped ratios of single-token probabilities (≤ 1, no joint underflow
issue beyond 0).  Source: reference/rules/bv.py.
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import bv as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import gather_rows, make_verdict, per_case, reduce_rows
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.gbv import last_success
from spectr_gbv.gpu_backend.verifiers.noise import Noise


def _excess_sum(p, q, w, buffers):
    """Σ_x (w·q(x) − p(x))_+."""
    (buf,) = buffers
    torch.mul(q, w, out=buf)
    return buf.sub_(p).clamp_min_(0).sum(-1)


class BlockVerification(Verifier):
    reference = ref.BlockVerification

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        L = batch.L
        weight, h = per_case(batch, acceptance)
        tau = last_success(noise.uniforms[:, :1], h.unsqueeze(1))[:, 0]
        row = torch.zeros_like(tau)
        q_row = gather_rows(batch.tp, row, tau)
        p_row = gather_rows(batch.dp, row, tau)
        w_tau = torch.gather(weight, 1, tau.unsqueeze(1)).to(batch.dtype)
        residual = (tau < L).to(batch.dtype).unsqueeze(1)
        last = noise.draw(w_tau * q_row - residual * p_row, q_row)
        selected = torch.where(tau > 0, row, torch.full_like(row, -1))
        return make_verdict(batch, tau, selected, row, last)


def acceptance(batch: PreparedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(p_i, h_i) of BV for i = 0..L, float64 [B, L+1] each (h[:, 0] unused)."""
    L = batch.L
    ratio = batch.q_step[:, 0] / batch.p_step[:, 0]  # [B, L]
    weights = [torch.ones_like(ratio[:, 0])]
    for i in range(1, L + 1):  # the same recursion (and rounding) as the reference
        weights.append(torch.clamp_max(weights[-1] * ratio[:, i - 1], 1.0))
    weight = torch.stack(weights, dim=1)  # [B, L+1]
    h = torch.ones_like(weight)
    if L > 1:
        w_mid = weight[:, 1:L].unsqueeze(1)  # [B, 1, L-1]
        Z = reduce_rows(_excess_sum, (batch.dp[:, :, 1:L], batch.tp[:, :, 1:L]), (w_mid,))[:, 0]
        den = Z + 1.0 - weight[:, 1:L]
        safe = torch.where(den > 0, den, torch.ones_like(den))
        h[:, 1:L] = torch.where(den > 0, Z / safe, torch.ones_like(den))
    h[:, L] = weight[:, L]
    return weight, h.clamp(0.0, 1.0)


class OneDraftIsBV:
    """Mixin for tree rules that are BV coin for coin with one draft (MDBV, MDBV-KSEQ,
    Traversal: every node of the merged tree then carries one draft): ``decide`` hands K = 1 to
    BV's verifier, which skips the tree's bookkeeping (3x faster at V = 151,936), and the rule's
    own walk is ``decide_tree`` (tests/gpu_backend/verifiers/test_verifiers_matched.py
    test_tree_rules_at_k1_equal_the_torch_bv_verifier runs it against BV at K = 1)."""

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        if batch.K == 1:
            return _BV.decide(batch, noise)
        return self.decide_tree(batch, noise)


_BV = BlockVerification()
