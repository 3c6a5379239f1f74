"""What the auto-configuration (``tuning.autoconfig``) measures, on llama.cpp models: the same
quantities as the torch functions it dispatches from, so that one cost model
(``tuning.speed_model``) chooses K, L or plain sampling on either backend.

After a K > 1 iteration the llama.cpp layout feeds the τ accepted tokens again to both models
(``llamacpp.layout``); ``autoconfig.configure`` then times the forwards over up to L more tokens
and marks the costs ``refeed_accepted``, and ``speed_model.iteration_seconds`` charges E[τ] more
tokens to the first draft call and the target call.
"""

from __future__ import annotations

import time

import torch

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities
from spectr_gbv.gpu_backend.llamacpp.model import Feed


def forward_costs(model, context_ids: list[int], ns, sampling: SamplingConfig, timed_interleaved,
                  repeats: int):
    """As ``tuning.measure.forward_costs``, on a ``LlamaCppModel``: seconds of a decode of n
    new tokens (positions after the context, sequence 0) with every row's probability
    processing, the n cells removed after each call; the context's prefill seconds; and how
    quiet the machine was.

    Args:
        timed_interleaved: ``tuning.timing.timed_interleaved`` (medians of interleaved rounds).
    Returns:
        (seconds per n, prefill seconds, ``tuning.timing.TimingQuality``).
    """
    model.clear()
    start = time.perf_counter()
    model.decode(Feed(tuple(context_ids), tuple(range(len(context_ids))), ((0,),) * len(context_ids), ()))
    prefill = time.perf_counter() - start
    held = len(context_ids)

    def step_for(n):
        tokens = (list(context_ids[-n:]) if n <= held else [context_ids[-1]] * n)
        feed = Feed(tuple(tokens), tuple(range(held, held + n)), ((0,),) * n, tuple(range(n)))

        def step():
            probabilities(model.decode(feed), sampling)
            model.seq_rm(0, held, -1)
        return step

    out, quality = timed_interleaved([step_for(n) for n in ns], repeats, threads=model.threads)
    model.clear()
    return out, prefill, quality


def teacher_forced_rows(model, prompt_ids: list[int], continuation: list[int],
                        sampling: SamplingConfig) -> torch.Tensor:
    """float32 [n, V]: the model's processed row before each token of ``continuation`` (one
    llama.cpp decode of prompt + continuation from an empty cache)."""
    ids = list(prompt_ids) + list(continuation)
    n = len(continuation)
    model.clear()
    logits = model.decode(Feed(tuple(ids), tuple(range(len(ids))), ((0,),) * len(ids),
                               tuple(range(len(prompt_ids) - 1, len(ids) - 1))))
    model.clear()
    return probabilities(logits, sampling)[:n]
