"""Plain sampling from the target, one token per forward call (the autoregressive baseline of
the engine, on any backend: ``decoding.backend.Backend``)."""

from __future__ import annotations

import time

import torch

from spectr_gbv.reference.seeds import resolve_seed

from spectr_gbv.gpu_backend.decoding.backend import Backend
from spectr_gbv.gpu_backend.engine.inputs import NonFiniteError, check_positive, prompt_tensor, seeded_generator
from spectr_gbv.gpu_backend.engine.memory import peak_rss_bytes
from spectr_gbv.gpu_backend.engine.result import GenerationResult
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, finite_rows, probabilities, sampleable
from spectr_gbv.gpu_backend.torch_backend.backend import TORCH


@torch.inference_mode()
def autoregressive_generate(target, prompt_ids, max_new_tokens: int = 64,
                            sampling: SamplingConfig | None = None, seed: int | None = None,
                            eos_token_ids=(), streamer=None, backend: Backend | None = None) -> GenerationResult:
    """Plain sampling from the target, one token per forward call, with a KV cache.

    Args:
        target: a model of ``backend`` (default torch: a transformers causal LM; its cache
            starts empty).
        prompt_ids: token ids (at least one).
        max_new_tokens: ≥ 1.
        sampling: temperature / top-k / top-p (``sampling.probabilities``).
        seed: any Python int; the run's ``torch.Generator`` is seeded with
            ``generator_seed(seed)`` (as ``SpeculativeEngine.generate``); None (default): a
            fresh 64-bit seed from the operating system, reported as ``result.seed``.
        eos_token_ids: ids that stop the generation (kept in the output).
        streamer: optional transformers-style streamer, ``put`` once per new token, ``end``.
        backend: the ``decoding.backend.Backend`` running ``target`` (default: torch); its
            ``draw`` samples each token.
    Returns:
        GenerationResult with method "ar", K = 1, L = 0, block efficiency 1, ``seed`` the seed
        used.
    Raises:
        ValueError: empty prompt, a prompt id that is not an integer in [0, V), max_new_tokens
            < 1, seed neither None nor an integer.
        NonFiniteError (a ValueError): the target's probability row is not finite (NaN / inf
            logits), naming the target model and the new token's index; nothing is sampled
            from that row.
    """
    max_new_tokens = check_positive(max_new_tokens, "max_new_tokens")
    sampling = sampling or SamplingConfig()
    eos = frozenset(int(e) for e in eos_token_ids)
    backend = backend if backend is not None else TORCH
    dev = backend.device(target)
    ids = prompt_tensor(prompt_ids, backend.vocab_size(target)).to(dev)
    seed = resolve_seed(seed)
    gen = seeded_generator(seed, dev)
    start, cpu_start = time.perf_counter(), time.process_time()
    next_logits = backend.plain_logits(target, ids.numel(), max_new_tokens)
    pending = ids[None]
    out: list[int] = []
    stop_reason = "max_new_tokens"
    while len(out) < max_new_tokens:
        p = probabilities(next_logits(pending), sampling)
        ok = finite_rows(p)
        pending = backend.draw(sampleable(p, ok), gen)[:, None]
        token, finite = torch.cat([pending[0], ok.to(torch.int64)]).tolist()  # one sync
        if not finite:
            raise NonFiniteError(f"target model gave a non-finite probability row (NaN or inf "
                                 f"logits) for new token {len(out)} (after {len(out)} emitted "
                                 f"tokens); nothing was sampled from it")
        if not out:
            first_token = time.perf_counter() - start
        out.append(token)
        if streamer is not None:
            streamer.put(torch.tensor([token], dtype=torch.int64))
        if token in eos:
            stop_reason = "eos"
            break
    if streamer is not None:
        streamer.end()
    return GenerationResult("ar", out, int(ids.numel()), len(out), [], 1, 0,
                            time.perf_counter() - start, peak_rss_bytes(), stop_reason,
                            time.process_time() - cpu_start, time_to_first_token_s=first_token,
                            seed=seed)
