"""K-SEQ-BV: K-SEQ over whole blocks with block verification per draft, no modification, batched.

docs/rules.md §2.8 (this project's construction); port of reference/rules/kseq_bv.py, whose
docstring has the derivation.  SpecTr's K-SEQ (Sun et al., NeurIPS 2023, arXiv 2310.15141,
Algorithm 3) over whole blocks, each draft in turn getting a BV attempt (Sun et al., ICLR 2025,
arXiv 2403.10444, Algorithm 2; docs/rules.md §2.3) whose first ratio is divided by ρ:

    ρ = ρ* of K-SEQ on the window's first position (k = K; K = 1 → ρ = 1)
    per draft k:  p_0 = 1,  p_1 = min(1, q(X_1)/(ρ·p(X_1))),  p_i = min(1, p_{i-1}·q(X_i|·)/p(X_i|·))
                  h_i = Z_i/(Z_i + 1 − p_i),  Z_i = Σ_x (p_i·q(x|X_≤i) − p(x|X_≤i))_+  (i < L; 0/0 → 1)
                  h_L = p_L;  τ_k = the last i with coin (k, i) ≤ h_i
    the first k with τ_k ≥ 1 wins: emit X^(k)_≤τ_k and the correction ∝ (p_τ·q − p)_+ at X^(k)_≤τ
    (τ < L) or the bonus q(·|X^(k)_≤L);  no winner: correction at the root ∝ (q − ρ·p)_+.

Batched: every draft's coins have their own addresses (k, i) and its h does not depend on the
other drafts' outcomes, so all τ_k are computed at once and the winner is a masked argmin over
k (as in kseq_gbv.py); the only Python loops run over L.  ρ* is the shared fixed-pass solver
(kseq.rho_star), which agrees with the reference's bisection to ~1e-10 on well-conditioned rows
(kseq.py docstring).  No host synchronisation after validation.  Later iterations untouched
(modifies_targets = False).
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import kseq_bv as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import batch_index, gather_rows, make_verdict, per_case, reduce_rows
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.gbv import last_success
from spectr_gbv.gpu_backend.verifiers.kseq import rho_star
from spectr_gbv.gpu_backend.verifiers.noise import Noise


def _excess_sum(p, q, w, buffers):
    """Σ_x (w·q(x) − p(x))_+ over the vocabulary (one scratch buffer)."""
    (buf,) = buffers
    torch.mul(q, w, out=buf)
    return buf.sub_(p).clamp_min_(0).sum(-1)


def bv_acceptance(batch: PreparedBatch, rho: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """BV's weights p_i and acceptance probabilities h_i on every draft, first ratio divided by ρ.

    Args:
        batch: prepared inputs.
        rho: float64 [B] (ρ ≥ 1 per row; 1 gives plain BV).
    Returns:
        (weight, h), float64 [B, K, L+1] each: weight[..., i] = p_i (weight[..., 0] = 1),
        h[..., i] ∈ [0, 1] for i = 1..L (h[..., 0] = 1, unused).
    Source: Sun et al., ICLR 2025, Algorithm 2; reference/rules/kseq_bv.py bv_acceptance.
    """
    L = batch.L
    ratio = batch.q_step / batch.p_step  # [B, K, L]; p > 0 for drafted tokens
    # the reference divides the first ratio by ρ after forming it: same rounding
    first = ratio[:, :, 0] / rho.unsqueeze(1)
    weights = [torch.ones_like(first), torch.clamp_max(first, 1.0)]
    for i in range(2, L + 1):
        weights.append(torch.clamp_max(weights[-1] * ratio[:, :, i - 1], 1.0))
    weight = torch.stack(weights, dim=2)  # [B, K, L+1]
    h = torch.ones_like(weight)
    if L > 1:
        w_mid = weight[:, :, 1:L]
        Z = reduce_rows(_excess_sum, (batch.dp[:, :, 1:L], batch.tp[:, :, 1:L]), (w_mid,))
        den = Z + 1.0 - w_mid
        safe = torch.where(den > 0, den, torch.ones_like(den))
        h[:, :, 1:L] = torch.where(den > 0, Z / safe, torch.ones_like(den))
    h[:, :, L] = weight[:, :, L]
    return weight, h.clamp(0.0, 1.0)


class KSeqBV(Verifier):
    """K-SEQ-BV (docs/rules.md §2.8): lossless, leaves later iterations untouched.

    Contract: gpu_backend.verifiers (module doc).  Source: reference/rules/kseq_bv.py.
    """

    reference = ref.KSeqBV

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        B, K, L = batch.B, batch.K, batch.L
        b = batch_index(batch)
        if K == 1:
            rho = torch.ones(B, dtype=torch.float64, device=batch.device)
        else:  # the first-position rows are shared by every draft
            rho = rho_star(batch.dp[:, 0, 0], batch.tp[:, 0, 0], K)
        weight, h = per_case(batch, lambda bt: bv_acceptance(bt, rho[: bt.B]))
        tau_k = last_success(noise.uniforms, h)  # [B, K]
        drafts = torch.arange(K, device=batch.device)
        first = torch.where(tau_k >= 1, drafts, torch.full_like(drafts, K)).amin(dim=1)
        none = first == K
        row = torch.where(none, torch.zeros_like(first), first)
        tau = torch.where(none, torch.zeros_like(first), tau_k[b, row])
        selected = torch.where(none, torch.full_like(first, -1), row)
        q_row = gather_rows(batch.tp, row, tau)
        p_row = gather_rows(batch.dp, row, tau)  # position L clamped: unused (bonus)
        # residual weights  0 < τ < L: p_τ·q − p;  τ = L: q (bonus);  τ = 0: q − ρ·p
        w_tau = weight[b, row, tau]
        mid = (tau > 0) & (tau < L)
        cq = torch.where(mid, w_tau, torch.ones_like(w_tau))
        cp = torch.where(mid, torch.ones_like(rho), torch.where(tau == 0, rho, torch.zeros_like(rho)))
        last = noise.draw(cq.to(batch.dtype).unsqueeze(1) * q_row - cp.to(batch.dtype).unsqueeze(1) * p_row,
                          q_row)
        return make_verdict(batch, tau, selected, row, last)
