"""SpecTr K-SEQ over a block of K i.i.d. drafts, token by token, batched.

Sun et al., *SpecTr*, NeurIPS 2023, arXiv 2310.15141 (K-SEQ, their Algorithm 3, applied
position by position over the draft tree); docs/rules.md §2.2.  At depth d the k drafts still
carrying the accepted prefix ("alive") propose their d-th tokens; candidate j (index order) is
accepted with probability min(1, q(x_j)/(ρ*·p(x_j))) (coin (j, d+1)), ρ* the K-SEQ root for k
candidates on the rows of the lowest alive draft (the lead); the drafts carrying the accepted
token stay alive.  No candidate accepted: correction ∝ (q − ρ*·p)_+.  After depth L: bonus from
the lead's bonus row.  Source: reference/rules/spectr.py.

Batched: the alive sets are a [B, K] mask, the lead is its first set index, the accepted
candidate a masked argmin; depth is the only Python loop (static L), and each depth solves ρ*
for all rows at once (kseq.rho_star, fixed passes).
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import spectr as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import batch_index, gather_rows, make_verdict
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.kseq import rho_star
from spectr_gbv.gpu_backend.verifiers.noise import Noise


def first_true(mask: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last axis (0 where none)."""
    return mask.to(torch.int8).argmax(dim=-1)


class SpecTr(Verifier):
    reference = ref.SpecTr

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        B, K, L = batch.B, batch.K, batch.L
        device = batch.device
        b = batch_index(batch)
        alive = torch.ones(B, K, dtype=torch.bool, device=device)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        tau = torch.full((B,), L, dtype=torch.int64, device=device)
        stop_lead = torch.zeros(B, dtype=torch.int64, device=device)
        stop_rho = torch.ones(B, dtype=torch.float64, device=device)
        ones = torch.ones(B, dtype=torch.float64, device=device)
        for d in range(L):
            if d == 0:  # all drafts alive: lead 0, k = K, rows are views of the input
                lead = torch.zeros(B, dtype=torch.int64, device=device)
                p_row, q_row = batch.dp[:, 0, 0], batch.tp[:, 0, 0]
                k_alive = K
            else:
                lead = first_true(alive)
                depth = torch.full_like(lead, d)
                p_row = gather_rows(batch.dp, lead, depth)
                q_row = gather_rows(batch.tp, lead, depth)
                k_alive = alive.sum(dim=1)
            rho = ones if K == 1 else rho_star(p_row, q_row, k_alive)
            x = batch.tokens[:, :, d]  # [B, K] candidates
            # all alive drafts share the prefix: the reference scores them on the lead's rows
            px = torch.gather(p_row, 1, x).double()
            qx = torch.gather(q_row, 1, x).double()
            den = rho.unsqueeze(1) * px
            accept = torch.where(den > 0, torch.clamp_max(qx / torch.where(den > 0, den, 1.0), 1.0),
                                 (qx > 0).double())
            success = alive & (noise.uniforms[:, :, d + 1] <= accept)
            accepted_any = success.any(dim=1)
            x_acc = x[b, first_true(success)]
            stop = ~done & ~accepted_any
            tau = torch.where(stop, d, tau)
            stop_lead = torch.where(stop, lead, stop_lead)
            stop_rho = torch.where(stop, rho, stop_rho)
            done = done | stop
            alive = alive & (x == x_acc.unsqueeze(1))
        lead_end = first_true(alive)
        row = torch.where(done, stop_lead, lead_end)
        q_row = gather_rows(batch.tp, row, tau)
        p_row = gather_rows(batch.dp, row, tau)
        # τ = L: bonus (scale 0 on p); else the K-SEQ residual (q − ρ·p)_+
        scale = torch.where(done, stop_rho, torch.zeros_like(stop_rho)).to(batch.dtype).unsqueeze(1)
        last = noise.draw(q_row - scale * p_row, q_row)
        selected = torch.where(tau > 0, row, torch.full_like(row, -1))
        return make_verdict(batch, tau, selected, row, last)
