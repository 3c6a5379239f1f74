"""Logits → the sampling distribution, identical for draft and target (and for transformers).

Speculative decoding is lossless for the distribution the verifier is handed: the target
rows must be the distribution that plain sampling would use, and the draft tokens must be
drawn from exactly the draft rows handed to the verifier.  Both sides therefore go through
one function, ``probabilities``, which applies transformers' own warpers in transformers'
order (temperature, then top-k, then top-p; ``GenerationMixin._get_logits_processor``), so
that the engine, the autoregressive baseline and ``generate(..., do_sample=True)`` sample from
the same law, then a float32 softmax.

Temperature 0 is greedy decoding: every row is the one-hot of the argmax of the logits, exact
ties going to the LOWEST token id (as serving engines and transformers' ``do_sample=False``
do), so draft and target are deterministic and every verification rule reduces to "accept iff
the draft token is the target's argmax" (certified exactly over the registry by
``gpu_backend.certify.greedy``, run in tests/gpu_backend/engine/test_greedy_mode.py).  top_k = 1 is not greedy: it keeps every token
tied with the largest logit ([1, 1, 0] → [.5, .5, 0]), as transformers' ``TopKLogitsWarper``
does.  Positive temperatures below ``temperature.MIN_TEMPERATURE`` = 1e-4 are refused where the
configuration is built (the floor and its derivation: ``gpu_backend.decoding.temperature``).

Non-finite logits are never sampled: a NaN or +inf logit (or a row of −inf) makes the whole
softmax row non-finite, ``finite_rows`` flags such rows with one reduction per row (on the
device, no host sync), and ``sampleable`` hands the sampler a harmless uniform row in their
place, so that the caller can raise after its next read instead of drawing from NaN (CPU
``torch.multinomial`` would raise its own unnamed error; CUDA's may not check at all).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from spectr_gbv.gpu_backend.decoding.temperature import GREEDY_TEMPERATURE, check_temperature


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become a sampling distribution.

    Attributes:
        temperature: T >= 1e-4: logits are divided by T; or T = 0: greedy decoding (the
            one-hot of the argmax, ties to the lowest token id; top_k and top_p then change
            nothing: both always keep the largest logit).  Checked by
            ``temperature.check_temperature`` (stored as a float).
        top_k: keep the k largest logits (ties with the k-th are kept, as in transformers, so
            top_k = 1 keeps exact ties of the largest: it is not greedy, temperature 0 is);
            0 or None: off.
        top_p: nucleus sampling, keep the smallest set of largest-probability tokens whose mass
            reaches top_p (transformers' ``TopPLogitsWarper``); 1.0 or None: off.

    Raises:
        ValueError: temperature neither 0 nor a finite number >= 1e-4 (the message of
            ``temperature.check_temperature``, naming ``temperature``), top_k < 0, top_p outside
            (0, 1]; the message names the argument.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature, "temperature"))
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ValueError(f"top_k must be None or an integer >= 0, got {k!r}")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))
                              or not (0.0 < p <= 1.0)):
            raise ValueError(f"top_p must be None or in (0, 1], got {p!r}")

    @property
    def greedy(self) -> bool:
        """Temperature 0: the rows are the one-hot of the argmax (ties to the lowest id)."""
        return self.temperature == GREEDY_TEMPERATURE

    @property
    def uses_top_k(self) -> bool:
        return bool(self.top_k)

    @property
    def uses_top_p(self) -> bool:
        return self.top_p is not None and self.top_p < 1.0

    def generate_kwargs(self) -> dict:
        """The same law as ``transformers`` ``generate`` keyword arguments (do_sample=True).

        top_k is passed as 0 when off: transformers' global default is top_k = 50.  Greedy
        (temperature 0): ``do_sample=False`` (transformers' argmax, ties to the first maximum).
        """
        if self.greedy:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": float(self.temperature),
                "top_k": int(self.top_k or 0), "top_p": float(self.top_p or 1.0)}


def probabilities(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """The sampling distribution of each row of logits.

    Args:
        logits: [..., V] in any floating dtype (bfloat16 model outputs are upcast first).
        config: temperature, top-k, top-p.
    Returns:
        float32 [..., V], rows summing to 1 (up to float32 rounding); tokens removed by top-k
        or top-p have probability exactly 0.  Greedy (temperature 0): ``greedy_rows``.
    Source: transformers ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``
        (applied in that order, min_tokens_to_keep = 1).
    """
    shape = logits.shape
    scores = logits.reshape(-1, shape[-1]).float()
    if config.greedy:
        return greedy_rows(scores).reshape(shape)
    if config.temperature != 1.0:
        scores = scores / config.temperature
    if config.uses_top_k or config.uses_top_p:
        from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

        if config.uses_top_k:
            scores = TopKLogitsWarper(top_k=config.top_k)(None, scores)
        if config.uses_top_p:
            scores = TopPLogitsWarper(top_p=config.top_p)(None, scores)
    return torch.softmax(scores, dim=-1).reshape(shape)


def greedy_rows(scores: torch.Tensor) -> torch.Tensor:
    """The greedy rows of float32 logits [N, V]: float32 [N, V], the one-hot of the argmax,
    exact ties going to the lowest token id (made explicit: the smallest index holding the
    row's maximum, not left to ``torch.argmax``'s tie order on each device).

    A row with a NaN or +inf logit, or with every logit −inf, is all NaN (as its softmax would
    be), so that ``finite_rows`` flags it and nothing is drawn from it.
    """
    V = scores.shape[-1]
    top = scores.amax(dim=-1, keepdim=True)
    index = torch.arange(V, device=scores.device).expand_as(scores)
    first = torch.where(scores == top, index, V).amin(dim=-1)  # V only where no entry equals top (NaN)
    ok = torch.isfinite(torch.logsumexp(scores, dim=-1)) & (first < V)
    one_hot = torch.nn.functional.one_hot(first.clamp(max=V - 1), V).to(torch.float32)
    return torch.where(ok.unsqueeze(-1), one_hot, torch.full_like(one_hot, float("nan")))


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


def inverse_cdf_rows(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row by inversion of the cumulative distribution: token k when
    c[k−1] ≤ u·c[V−1] < c[k], c the float64 cumulative sum of the row (the row need not be
    normalised).  With u uniform on [0, 1) this draws exactly from the row up to float64
    rounding of c (about V·2^-53 in total variation), and a token of probability 0 is never
    drawn (its interval is empty).  One cumulative sum and one binary search per row: much
    cheaper than ``torch.multinomial`` at a real vocabulary, which matters where a token costs
    little model time (the llama.cpp backend; timings in benchmarks/LLAMACPP.md).

    Args:
        probs: float [R, V], finite, ≥ 0, each row with a positive entry (``sampleable`` rows).
        u: float64 [R] in [0, 1).
    Returns:
        int64 [R], each in [0, V) with probs[r, token] > 0.
    """
    c = torch.cumsum(probs, dim=-1, dtype=torch.float64)
    tokens = torch.searchsorted(c, (u.to(torch.float64) * c[:, -1])[:, None], right=True)[:, 0]
    # u·c[V−1] rounds below c[V−1] for u < 1, so tokens < V; kept as a guard for the last
    # positive entry all the same
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).to(torch.int8).argmax(-1)
    return torch.minimum(tokens, last)
