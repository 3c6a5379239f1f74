"""GBV — greedy block verification, single draft, batched (docs/rules.md §2.4).

    i < L: h_i = 1 − (p(z) − q(z))_+ / (p(z) − Σ_x min(p(z,x), q(z,x))),  z = X_≤i   (0/0 → 1)
    h_L = min(1, q(X_≤L)/p(X_≤L))
    τ = the last i with η_i ≤ h_i;  correction ∝ (q(z,·) − p(z,·))_+ at z = X_≤τ;  τ = L: bonus
    Algorithm 2 record w(z) = (q(z) − p(z))_+ (kind "excess", ρ = 1).

The helpers take a scale ρ (q → q/ρ in every formula) and serve K-SEQ-GBV (docs/rules.md §2.6).
Dividing numerator and denominator by p(z) makes h a function of r = q(z)/(ρ·p(z)) alone,

    h_i = 1 − (1 − r)_+ / (1 − Σ_x min(p(x|z), r·q(x|z)))     (= 1 when r ≥ 1),

computed from the log joints, so long blocks of tiny probabilities neither underflow nor
overflow.  Source: reference/rules/gbv.py (greedy_acceptance, greedy_outcome).
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import gbv as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import (batch_index, gather_rows, make_verdict, modification_record, per_case,
                    reduce_rows, scaled_pair)
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.noise import Noise


def _overlap_sum(p, q, r, buffers):
    """Σ_x min(p(x), r·q(x))."""
    (buf,) = buffers
    torch.mul(q, r, out=buf)
    return torch.minimum(buf, p, out=buf).sum(-1)


def greedy_acceptance(batch: PreparedBatch, rho: torch.Tensor) -> torch.Tensor:
    """h of GBV on every draft against the scaled target q/ρ.

    Args:
        batch: prepared inputs.
        rho: float64 [B] (or [1], broadcast), ρ ≥ 1 per row.
    Returns:
        float64 [B, K, L+1], h[..., i] ∈ [0, 1] for sub-block length i = 1..L (h[..., 0] = 1).
    """
    L = batch.L
    log_r = batch.lq - batch.lp - torch.log(rho).reshape(-1, 1, 1)  # [B, K, L+1]
    r = torch.exp(log_r.clamp_max(0.0))  # r ≥ 1 gives h = 1 whatever the denominator
    h = torch.ones_like(r)
    if L > 1:
        rr = r[:, :, 1:L]
        overlap = reduce_rows(_overlap_sum, (batch.dp[:, :, 1:L], batch.tp[:, :, 1:L]), (rr,))
        den = 1.0 - overlap
        num = (1.0 - rr).clamp_min(0.0)
        safe = torch.where(den > 0, den, torch.ones_like(den))
        h[:, :, 1:L] = torch.where(den > 0, 1.0 - num / safe, torch.ones_like(den))
    h[:, :, L] = r[:, :, L]
    return h.clamp(0.0, 1.0)


def last_success(uniforms: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """τ per draft: the last i ∈ 1..L with uniforms[..., i] <= h[..., i], 0 if none.

    Args:
        uniforms, h: [B, K, L+1] (index 0 unused).
    Returns:
        int64 [B, K].
    """
    L = h.shape[-1] - 1
    success = uniforms[..., 1:] <= h[..., 1:]
    lengths = torch.arange(1, L + 1, device=h.device)
    return torch.where(success, lengths, torch.zeros_like(lengths)).amax(dim=-1)


def greedy_outcome(batch: PreparedBatch, noise: Noise, row: torch.Tensor, tau: torch.Tensor,
                   selected: torch.Tensor, rho: torch.Tensor, algorithm2: bool) -> BatchVerdict:
    """Emit X^(row)_≤τ and the bonus (τ = L) or the correction ∝ (q(z,·) − ρ·p(z,·))_+ at
    z = X^(row)_≤τ, with the "excess" record when ``algorithm2``.

    Args:
        row: int64 [B], the draft emitted (0 where τ = 0).
        tau: int64 [B].
        selected: int64 [B], ``row`` or -1 where τ = 0.
        rho: float64 [B].
    """
    b = batch_index(batch)
    L = batch.L
    q_row = gather_rows(batch.tp, row, tau)
    p_row = gather_rows(batch.dp, row, tau)  # position L clamped: unused (bonus)
    cq, cp = scaled_pair(batch.lq[b, row, tau], batch.lp[b, row, tau] + torch.log(rho))
    bonus = tau == L
    cq = torch.where(bonus, torch.ones_like(cq), cq).to(batch.dtype).unsqueeze(1)
    cp = torch.where(bonus, torch.zeros_like(cp), cp).to(batch.dtype).unsqueeze(1)
    last = noise.draw(cq * q_row - cp * p_row, q_row)
    mod = None
    if algorithm2:
        mod = modification_record(batch, "excess", rho, row, tau, last, q_row, p_row)
    return make_verdict(batch, tau, selected, row, last, mod)


class GreedyBlockVerification(Verifier):
    """GBV; ``algorithm2=False`` is the lossy variant without the distribution modification."""

    reference = ref.GreedyBlockVerification

    def __init__(self, algorithm2: bool = True):
        self.algorithm2 = bool(algorithm2)

    def make_reference(self):
        return self.reference(algorithm2=self.algorithm2)

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        rho = torch.ones(batch.B, dtype=torch.float64, device=batch.device)
        h = per_case(batch, lambda b: greedy_acceptance(b, rho[: b.B]))
        tau = last_success(noise.uniforms, h)[:, 0]
        row = torch.zeros_like(tau)
        selected = torch.where(tau > 0, row, torch.full_like(row, -1))
        return greedy_outcome(batch, noise, row, tau, selected, rho, self.algorithm2)

    def __repr__(self) -> str:
        return f"GreedyBlockVerification(algorithm2={self.algorithm2})"
