"""The numpy reference rules behind the batched verifier contract (a slow, exact stand-in).

The engine calls verifiers through one contract (``gpu_backend.verifiers``):

    verdict = verifier(draft_tokens [B,K,L] int64, draft_probs [B,K,L,V],
                       target_probs [B,K,L+1,V], seeds=int64 [B], validate=False)

This adapter runs ``reference.rules.get_rule(name).verify`` on float64 copies, one batch
element at a time, with ``SamplingSource(seed)``.  It serves the engine's tests (feeding the
reference's own verdicts through the engine's modification stack) and is the fallback when
the torch verifiers are not installed.  It is exact but slow: the rule code loops in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class ReferenceModification:
    """Algorithm 2's records of a batch (docs/rules.md §3), as in the torch verifiers' contract.

    Attributes:
        kind: "excess" or "spectr_gbv" (the same for every batch element: one rule).
        K: number of drafts.
        rho: float64 [B], the scale ρ of "excess" (1 where inactive).
        log_q_joint, log_p_joint: float64 [B], log joints of the emitted tokens under the
            target the verifier was given and under the draft (-inf where inactive).
        active: bool [B], whether element b opened a window.
    """

    kind: str
    K: int
    rho: torch.Tensor
    log_q_joint: torch.Tensor
    log_p_joint: torch.Tensor
    active: torch.Tensor

    def weights(self, log_q_joint: torch.Tensor, log_p_joint: torch.Tensor) -> torch.Tensor:
        """w(z) from log joints (docs/rules.md §3; reference/verdict.py ``Modification.weights``).

        Args:
            log_q_joint, log_p_joint: float64 [..., V], log joints of z·x under the window's
                target and the draft; the weights are homogeneous of degree 1, so any common
                shift of both only rescales them.  ρ broadcasts from [B] (B = 1 in the engine).
        Returns:
            float64 [..., V], non-negative.
        """
        q = torch.exp(log_q_joint.double())
        p = torch.exp(log_p_joint.double())
        if self.kind == "excess":
            return torch.clamp(q - self.rho * p, min=0.0)
        if self.kind == "spectr_gbv":
            m = torch.where(q > 0, torch.clamp(p / torch.where(q > 0, q, 1.0), max=1.0), 1.0)
            return q * (1.0 - m) ** self.K
        raise ValueError(f"unknown modification kind {self.kind!r}")


@dataclass
class ReferenceVerdict:
    """One verification of a batch, in the torch verifiers' layout.

    Attributes:
        tau: int64 [B].  selected: int64 [B] (-1 where τ = 0).
        tokens: int64 [B, L+1], emitted tokens padded with -1.  num_emitted: int64 [B] (τ + 1).
        modification: ReferenceModification or None (no element opened a window).
    """

    tau: torch.Tensor
    selected: torch.Tensor
    tokens: torch.Tensor
    num_emitted: torch.Tensor
    modification: ReferenceModification | None


class ReferenceVerifier:
    """Callable with the batched verifier contract, backed by ``reference.rules``.

    Args:
        name: a rule name of ``reference.rules.RULES``.
    Raises:
        ValueError: unknown rule name (the message lists the known ones).
    """

    def __init__(self, name: str):
        from reference.rules import get_rule

        self.name = name
        self.rule = get_rule(name)
        self.single_draft = self.rule.single_draft

    def __call__(self, draft_tokens, draft_probs, target_probs, seeds, validate: bool = False):
        from reference.randomness import SamplingSource

        tokens = draft_tokens.detach().cpu().numpy()
        dp = draft_probs.detach().cpu().double().numpy()
        tp = target_probs.detach().cpu().double().numpy()
        seeds = [int(s) for s in torch.as_tensor(seeds).reshape(-1).tolist()]
        B, K, L = tokens.shape
        if len(seeds) != B:
            raise ValueError(f"seeds must have B = {B} entries, got {len(seeds)}")
        out_tokens = torch.full((B, L + 1), -1, dtype=torch.int64)
        tau = torch.zeros(B, dtype=torch.int64)
        selected = torch.full((B,), -1, dtype=torch.int64)
        rho = torch.ones(B, dtype=torch.float64)
        lq = torch.full((B,), -np.inf, dtype=torch.float64)
        lp = torch.full((B,), -np.inf, dtype=torch.float64)
        active = torch.zeros(B, dtype=torch.bool)
        kind, mod_K = None, K
        for b in range(B):
            # the reference checks normalisation to 1e-5; float32 rows over ~1e5 entries can
            # drift by more, so hand it rows renormalised in float64
            dpb = dp[b] / dp[b].sum(-1, keepdims=True)
            tpb = tp[b] / tp[b].sum(-1, keepdims=True)
            v = self.rule.verify(tokens[b], dpb, tpb, SamplingSource(seeds[b]))
            tau[b] = v.tau
            selected[b] = v.selected
            out_tokens[b, : len(v.tokens)] = torch.tensor(v.tokens, dtype=torch.int64)
            m = modification_from_reference(v.modification)
            if m is not None:
                kind, mod_K = m.kind, m.K
                rho[b], lq[b], lp[b], active[b] = m.rho[0], m.log_q_joint[0], m.log_p_joint[0], True
        modification = None
        if kind is not None:
            modification = ReferenceModification(kind, mod_K, rho, lq, lp, active)
        return ReferenceVerdict(tau, selected, out_tokens, tau + 1, modification)


def modification_from_reference(mod) -> ReferenceModification | None:
    """A reference ``Modification`` (joints as probabilities) as a batch-of-one record
    of the torch contract (log joints); None stays None."""
    if mod is None:
        return None
    with np.errstate(divide="ignore"):
        lq, lp = float(np.log(mod.q_joint)), float(np.log(mod.p_joint))
    return ReferenceModification(mod.kind, mod.K, torch.tensor([float(mod.rho)], dtype=torch.float64),
                                 torch.tensor([lq], dtype=torch.float64),
                                 torch.tensor([lp], dtype=torch.float64), torch.tensor([True]))
