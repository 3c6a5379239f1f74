"""The torch backend: transformers causal LMs with transformers' KV caches (``torch_backend.kv``) and
the two cache layouts ``torch_backend.layouts`` (packed token tree, or K batched rows).  The engine's
default backend (``decoding.backend.Backend``).
"""

from __future__ import annotations

import time

import torch

from spectr_gbv.reference.rules import policy

from spectr_gbv.gpu_backend.decoding.backend import Backend, Layout
from spectr_gbv.gpu_backend.torch_backend.kv import (cache_length, new_cache, rollback_problem,
                                              sliding_window_limit)
from spectr_gbv.gpu_backend.torch_backend.layouts import BatchedLayout, PackedLayout, sample_rows
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities
from spectr_gbv.gpu_backend.models.draft_quant import is_dynamically_quantised
from spectr_gbv.gpu_backend.models.weights import check_same_vocabulary, vocab_size


def check_model(model, role: str) -> None:
    """Refuse a model whose KV cache the engine cannot cut back exactly (``kv.rollback_problem``).

    Args:
        model: a transformers causal LM.
        role: "draft" or "target" (named in the message).
    Raises:
        ValueError: one line, "<role> model (<class>) cannot be used by the speculative
            engine: <reason>" (sliding window attention, recurrent / convolution / hybrid
            state, or another cache layer type than full attention); or a model that is not a
            torch module (another backend's: hand the engine that backend).
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"{role} model ({type(model).__name__}) is not a transformers model: hand "
                         "the engine its backend (backend=pair.backend, e.g. "
                         "llamacpp.backend.LLAMACPP for a LlamaCppModel)")
    problem = rollback_problem(model.config, bool(getattr(model, "_is_stateful", False)))
    if problem is not None:
        raise ValueError(f"{role} model ({type(model).__name__}) cannot be used by the "
                         f"speculative engine: {problem}")


class TorchBackend(Backend):
    """transformers models on torch (any device).  Refuses a model whose cache cannot be cut
    back (``check_model``); a generation beyond an accepted sliding window is refused per
    generation (``check_length``)."""

    name = "torch"

    def check_pair(self, target, draft, rule: str, custom_verifier: bool) -> int:
        check_model(target, "target")
        check_model(draft, "draft")
        if not custom_verifier and is_dynamically_quantised(draft):
            policy.check_varying_draft_rows(rule, "draft")
        return check_same_vocabulary(draft, target)

    def device(self, model) -> torch.device:
        if not isinstance(model, torch.nn.Module):
            check_model(model, "target")  # raises: another backend's model
        return next(model.parameters()).device

    def check_length(self, target, draft, positions: int) -> None:
        # accepted sliding windows never bind below max_position_embeddings; a generation
        # beyond that must still fit
        for role, m in (("target", target), ("draft", draft)):
            window = sliding_window_limit(m.config)
            if window is not None and positions > window:
                raise ValueError(f"{role} model's sliding window ({window}) is too short for "
                                 f"this generation (up to {positions} positions)")

    def layout(self, target, draft, sampling, draft_sampling, K, L, device, stop, layout,
               share_prefixes) -> Layout:
        models = (target, draft, sampling, draft_sampling, K, L, device, stop)
        if layout == "packed":
            return PackedLayout(*models, share_prefixes=share_prefixes)
        return BatchedLayout(*models)

    def vocab_size(self, model) -> int:
        return vocab_size(model)

    def plain_logits(self, model, prompt_tokens: int, max_new_tokens: int):
        cache = new_cache(model)

        def next_logits(pending: torch.Tensor) -> torch.Tensor:
            return model(pending, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        return next_logits

    def draw(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return sample_rows(rows, gen)

    def forward_costs(self, model, context_ids, ns, sampling: SamplingConfig, timer, repeats: int):
        dev = self.device(model)
        ctx = torch.tensor([context_ids], dtype=torch.int64, device=dev)
        cache = new_cache(model)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        model(ctx, cache=cache, use_cache=True, logits_to_keep=1)
        if dev.type == "cuda":  # the kernels run asynchronously: wait for them before reading the clock
            torch.cuda.synchronize(dev)
        prefill = time.perf_counter() - start
        held = cache_length(cache)

        def step_for(n):
            ids = ctx[:, -n:] if n <= ctx.shape[1] else ctx[:, -1:].repeat(1, n)

            def step():
                logits = model(ids, cache=cache, use_cache=True).logits
                probabilities(logits[0], sampling)
                cache.crop(held - cache_length(cache))
            return step

        out, quality = timer([step_for(n) for n in ns], repeats, dev)
        return out, prefill, quality

    def teacher_forced_rows(self, model, prompt_ids, continuation, sampling) -> torch.Tensor:
        ids = torch.tensor([prompt_ids + continuation], dtype=torch.int64, device=self.device(model))
        n = len(continuation)
        logits = model(ids, logits_to_keep=n + 1).logits[0, :n]
        return probabilities(logits, sampling)

    def device_label(self, model) -> str:
        return str(self.device(model))


TORCH = TorchBackend()
