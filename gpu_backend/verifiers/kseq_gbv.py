"""K-SEQ-GBV: a lossless multi-draft block verifier (this project's reconstruction), batched.

docs/rules.md §2.6: ρ = ρ* of K-SEQ on the window's first position (k = K); each draft in turn gets
a GBV attempt against q/ρ; the first draft that accepts at least one token wins:

    for k = 1..K: GBV on X^(k) with q(z) → q(z)/ρ;  if τ_k ≥ 1: acc = X^(k)_≤τ_k; stop
    correction ∝ (q(acc,·) − ρ·p(acc,·))_+ ;  Algorithm 2 weight w(z) = (q(z) − ρ·p(z))_+

Every draft's coins are independent of the others' outcomes (addresses (k, i)), so all τ_k are
computed at once and the winner is a masked argmin over k.  Source: reference/rules/kseq_gbv.py.
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.rules import kseq_gbv as ref

from spectr_gbv.gpu_backend.verifiers.base import Verifier
from spectr_gbv.gpu_backend.verifiers.batch import batch_index, per_case
from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch
from spectr_gbv.gpu_backend.verifiers.gbv import greedy_acceptance, greedy_outcome, last_success
from spectr_gbv.gpu_backend.verifiers.kseq import rho_star
from spectr_gbv.gpu_backend.verifiers.noise import Noise


class KSeqGBV(Verifier):
    reference = ref.KSeqGBV

    def __init__(self, algorithm2: bool = True):
        self.algorithm2 = bool(algorithm2)

    def make_reference(self):
        return self.reference(algorithm2=self.algorithm2)

    def decide(self, batch: PreparedBatch, noise: Noise) -> BatchVerdict:
        B, K = batch.B, batch.K
        if K == 1:
            rho = torch.ones(B, dtype=torch.float64, device=batch.device)
        else:
            rho = rho_star(batch.dp[:, 0, 0], batch.tp[:, 0, 0], K)
        h = per_case(batch, lambda b: greedy_acceptance(b, rho[: b.B]))
        tau_k = last_success(noise.uniforms, h)  # [B, K]
        drafts = torch.arange(K, device=batch.device)
        first = torch.where(tau_k >= 1, drafts, torch.full_like(drafts, K)).amin(dim=1)
        none = first == K
        row = torch.where(none, torch.zeros_like(first), first)
        tau = torch.where(none, torch.zeros_like(first), tau_k[batch_index(batch), row])
        selected = torch.where(none, torch.full_like(first, -1), row)
        return greedy_outcome(batch, noise, row, tau, selected, rho, self.algorithm2)

    def __repr__(self) -> str:
        return f"KSeqGBV(algorithm2={self.algorithm2})"
