"""Token verification (speculative sampling), single draft, batched.

Leviathan et al. 2023, Algorithm 1; Chen et al. 2023; docs/rules.md §2.1: accept X_i with
probability min(1, q(X_i)/p(X_i)) (coin (0, i+1)); at the first rejection emit a correction
∝ (q − p)_+ from that position; if all L are accepted, a bonus from q(· | X_≤L).
Source: reference/rules/sd.py.
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import sd as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import gather_rows, make_verdict
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.noise import Noise


class TokenVerification(Verifier):
    reference = ref.TokenVerification

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        accept = torch.clamp_max(batch.q_step[:, 0] / batch.p_step[:, 0], 1.0)  # p > 0: validated
        success = noise.uniforms[:, 0, 1:] <= accept  # [B, L], coin (0, i+1) for token i
        tau = torch.cumprod(success.long(), dim=1).sum(dim=1)  # leading successes
        row = torch.zeros_like(tau)
        q_row = gather_rows(batch.tp, row, tau)
        p_row = gather_rows(batch.dp, row, tau)
        residual = (tau < batch.L).to(batch.dtype).unsqueeze(1)  # τ = L: bonus, no p
        last = noise.draw(q_row - residual * p_row, q_row)
        selected = torch.where(tau > 0, row, torch.full_like(row, -1))
        return make_verdict(batch, tau, selected, row, last)
