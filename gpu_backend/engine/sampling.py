"""Logits → the sampling distribution, identical for draft and target (and for transformers).

Speculative decoding is lossless for the distribution the verifier is handed: the target
rows must be the distribution that plain sampling would use, and the draft tokens must be
drawn from exactly the draft rows handed to the verifier.  Both sides therefore go through
one function, ``probabilities``, which applies transformers' own warpers in transformers'
order (temperature, then top-k, then top-p; ``GenerationMixin._get_logits_processor``), so
that the engine, the autoregressive baseline and ``generate(..., do_sample=True)`` sample from
the same law, then a float32 softmax.

Non-finite logits are never sampled: a NaN or +inf logit (or a row of −inf) makes the whole
softmax row non-finite, ``finite_rows`` flags such rows with one reduction per row (on the
device, no host sync), and ``sampleable`` hands the sampler a harmless uniform row in their
place, so that the caller can raise after its next read instead of drawing from NaN (CPU
``torch.multinomial`` would raise its own unnamed error; CUDA's may not check at all).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a sampling distribution.

    Attributes:
        temperature: T > 0; logits are divided by T.
        top_k: keep the k largest logits (ties with the k-th are kept, as in transformers);
            0 or None: off.
        top_p: nucleus sampling, keep the smallest set of largest-probability tokens whose mass
            reaches top_p (transformers' ``TopPLogitsWarper``); 1.0 or None: off.

    Raises:
        ValueError: temperature ≤ 0 or not finite, top_k < 0, top_p outside (0, 1]; the
            message names the argument.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"temperature must be a finite number > 0, got {t!r} "
                             "(greedy decoding is top_k=1)")
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ValueError(f"top_k must be None or an integer >= 0, got {k!r}")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))
                              or not (0.0 < p <= 1.0)):
            raise ValueError(f"top_p must be None or in (0, 1], got {p!r}")

    @property
    def uses_top_k(self) -> bool:
        return bool(self.top_k)

    @property
    def uses_top_p(self) -> bool:
        return self.top_p is not None and self.top_p < 1.0

    def generate_kwargs(self) -> dict:
        """The same law as ``transformers`` ``generate`` keyword arguments (do_sample=True).

        top_k is passed as 0 when off: transformers' global default is top_k = 50.
        """
        return {"do_sample": True, "temperature": float(self.temperature),
                "top_k": int(self.top_k or 0), "top_p": float(self.top_p or 1.0)}


def probabilities(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """The sampling distribution of each row of logits.

    Args:
        logits: [..., V] in any floating dtype (bfloat16 model outputs are upcast first).
        config: temperature, top-k, top-p.
    Returns:
        float32 [..., V], rows summing to 1 (up to float32 rounding); tokens removed by top-k
        or top-p have probability exactly 0.
    Source: transformers ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``
        (applied in that order, min_tokens_to_keep = 1).
    """
    shape = logits.shape
    scores = logits.reshape(-1, shape[-1]).float()
    if config.temperature != 1.0:
        scores = scores / config.temperature
    if config.uses_top_k or config.uses_top_p:
        from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

        if config.uses_top_k:
            scores = TopKLogitsWarper(top_k=config.top_k)(None, scores)
        if config.uses_top_p:
            scores = TopPLogitsWarper(top_p=config.top_p)(None, scores)
    return torch.softmax(scores, dim=-1).reshape(shape)


def finite_rows(probs: torch.Tensor) -> torch.Tensor:
    """Which rows of a probability tensor are usable.

    Args:
        probs: float [..., V], rows from ``probabilities``.
    Returns:
        bool [...]: True where the row is finite.  One sum per row: a softmax row is finite
        everywhere or nowhere (one NaN or +inf logit, or all logits −inf, makes every entry
        NaN), so the row sum is finite iff the row is.
    """
    return torch.isfinite(probs.sum(-1))


def sampleable(probs: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """``probs`` [..., V] with the rows where ``ok`` [...] is False replaced by uniform rows.

    A token drawn from a replaced row is a placeholder: the caller must raise (naming the model
    and position) before emitting anything drawn after it.  Out of place.
    """
    uniform = torch.full_like(probs[..., :1], 1.0 / probs.shape[-1])
    return torch.where(ok.unsqueeze(-1), probs, uniform)
