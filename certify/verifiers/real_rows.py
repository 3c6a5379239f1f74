"""Certification of the torch verifiers on a real model's rows: the rows the engine hands the
verifier for one fixed prompt, at the model's own vocabulary (V = 151,936 for the Qwen2.5-Coder
pair), against the reference rule's exact law given them.

The toy and V = 4,096 cases of certify/suite.py use synthetic rows; a real model's
rows are peaked (a top token of 0.99 is common) with a tail of 10^5 tokens of probability
10^-6–10^-12, the shape where rounding, truncation and tail handling go wrong.  A case here is
an ``oracle.certify.FixedCase`` like the others: K draft blocks of L tokens sampled (seeded)
from the draft's rows after the prompt, with the draft's and the target's rows along them
(``ModelRows``: ``decoding.sampling.probabilities`` on the model's last logits, float32 as the
engine computes them, renormalised in float64 for the exact law), and
``oracle.certify.certify_case`` runs the usual family (joint G-test, τ, token given (τ, prefix),
mean τ, the coarsened law and the identity test, each at α/6); ``CaseResult.resolved`` says
which test resolved what.  Run by benchmarks/real_rows_certify.py (benchmarks/REAL_ROWS.md).
"""

from __future__ import annotations

import numpy as np
import torch

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities
from spectr_gbv.oracle.certify import FixedCase
from spectr_gbv.reference.models import ToyModel

__all__ = ["ModelRows", "real_rows_case"]


class ModelRows(ToyModel):
    """The next-token law of a causal LM after ``prompt`` + a prefix, as the engine samples it.

    Args:
        model: a transformers causal LM (``model(ids).logits`` [1, T, V]).
        prompt: token ids (ints in [0, V)), at least one.
        sampling: temperature / top-k / top-p (``decoding.sampling.SamplingConfig``); not greedy.
    ``conditional(prefix)`` (cached per prefix by ToyModel) is float64 [V]:
    ``probabilities(logits[-1], sampling)`` in float32, divided by its float64 sum.

    Raises:
        ValueError: an empty prompt, a prompt token outside [0, V), or greedy sampling (a
            one-hot row has nothing to certify beyond the greedy verifier's tests).
    """

    def __init__(self, model, prompt, sampling: SamplingConfig = SamplingConfig()):
        self.model = model
        self.vocab_size = int(model.config.vocab_size)
        self.prompt = [int(t) for t in prompt]
        if not self.prompt:
            raise ValueError("prompt must hold at least one token id")
        bad = [t for t in self.prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt: token id {bad[0]} outside [0, {self.vocab_size})")
        if sampling.greedy:
            raise ValueError("sampling must not be greedy (temperature 0): its rows are one-hot")
        self.sampling = sampling

    def _conditional(self, prefix: tuple[int, ...]) -> np.ndarray:
        ids = torch.tensor([self.prompt + list(prefix)], dtype=torch.long)
        with torch.inference_mode():
            logits = self.model(ids).logits[0, -1]
        row = probabilities(logits, self.sampling).double().numpy()
        return row / row.sum()


def real_rows_case(rule: str, draft: ModelRows, target: ModelRows, K: int, L: int, first_seed: int,
                   label: str = "real", reference_rule: str | None = None) -> FixedCase:
    """The first seeded fixed case from ``first_seed`` whose exact law of τ puts at most 0.99 on
    any value (``suite.nondegenerate_case``: with τ almost sure the mean test breaks down), float32.

    Args:
        rule: a registered rule name.  draft, target: ``ModelRows`` of one pair and one prompt.
        K: drafts (1 for single-draft rules).  L: block length.  first_seed: the drafts' seed.
        label: the case's name prefix.  reference_rule: the rule whose exact law is expected
            (default ``rule``); a planted defect (``registry.planted()``) names its base rule,
            and the case then expects a failure.
    Returns:
        FixedCase named ``"{rule} {label} V={V} K={K} L={L} float32"``.
    Raises:
        RuntimeError: none of 50 seeds gives a non-degenerate case (each seed costs K·L draft
            and K·(L+1) target forwards).
    """
    from spectr_gbv.certify.suite import nondegenerate_case

    ref = reference_rule or rule
    return nondegenerate_case(f"{rule} {label} V={target.vocab_size:,} K={K} L={L} float32", rule,
                              (draft, target), K, L, first_seed, reference_rule=ref, expect_pass=ref == rule)
