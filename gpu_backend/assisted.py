"""transformers' own assisted generation: the baseline a user would pick instead of this engine.

``target.generate(..., assistant_model=draft, do_sample=True)`` drafts with the assistant
and verifies with token verification (``transformers.generation.utils._speculative_sampling``,
Leviathan et al. 2023).  The draft length comes from the assistant's generation config, so it
is set there (``num_assistant_tokens = L``, schedule ``"constant"``) for the call and restored
afterwards.  transformers' default ``assistant_confidence_threshold`` (0.4: the assistant stops
drafting early when its top token is less likely than that) is left as users get it.
Its block efficiency is counted with a forward hook on the target: one call per iteration
(the prompt is processed inside the first one).
"""

from __future__ import annotations

import time

import torch

from .engine import GenerationResult, check_positive
from .memory import peak_rss_bytes
from .sampling import SamplingConfig


@torch.inference_mode()
def assisted_generate(target, draft, prompt_ids, max_new_tokens: int = 64,
                      sampling: SamplingConfig | None = None, L: int = 4, seed: int = 0,
                      eos_token_ids=()) -> GenerationResult:
    """One generation with transformers' assisted generation.

    Args:
        target, draft: transformers causal LMs (the draft is the ``assistant_model``).
        prompt_ids: token ids (at least one).
        max_new_tokens: ≥ 1.
        sampling: temperature / top-k / top-p, passed as ``generate`` keyword arguments
            (``SamplingConfig.generate_kwargs``; top_k = 0 overrides transformers' default 50).
        L: ``num_assistant_tokens`` ≥ 1 (constant schedule).
        seed: ``torch.manual_seed`` before the call (transformers samples from the global RNG).
        eos_token_ids: ids that stop the generation.
    Returns:
        GenerationResult with method "hf_assisted", target_calls = target forward calls,
        taus empty (transformers does not report them).
    Raises:
        ValueError: empty prompt, max_new_tokens < 1, L < 1.
    """
    max_new_tokens = check_positive(max_new_tokens, "max_new_tokens")
    L = check_positive(L, "L")
    sampling = sampling or SamplingConfig()
    device = next(target.parameters()).device
    ids = torch.as_tensor(prompt_ids, dtype=torch.int64).reshape(1, -1).to(device)
    if ids.numel() == 0:
        raise ValueError("prompt_ids must hold at least one token")
    eos = sorted(int(e) for e in eos_token_ids)
    config = draft.generation_config
    saved = (config.num_assistant_tokens, config.num_assistant_tokens_schedule)
    calls = [0]
    hook = target.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        config.num_assistant_tokens, config.num_assistant_tokens_schedule = L, "constant"
        torch.manual_seed(int(seed))
        start, cpu_start = time.perf_counter(), time.process_time()
        out = target.generate(
            ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
            max_new_tokens=max_new_tokens, eos_token_id=eos or None,
            pad_token_id=eos[0] if eos else None, **sampling.generate_kwargs())
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        hook.remove()
        config.num_assistant_tokens, config.num_assistant_tokens_schedule = saved
    tokens = out[0, ids.shape[1]:].tolist()
    stop_reason = "max_new_tokens"
    for i, token in enumerate(tokens):
        if token in eos_token_ids:
            tokens, stop_reason = tokens[: i + 1], "eos"
            break
    return GenerationResult("hf_assisted", tokens, int(ids.shape[1]), calls[0], [], 1, L, wall,
                            peak_rss_bytes(), stop_reason, cpu)
