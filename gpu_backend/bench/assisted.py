"""transformers' own assisted generation: the baseline a user would pick instead of this engine.

``target.generate(..., assistant_model=draft, do_sample=True)`` drafts with the assistant
and verifies with token verification (``transformers.generation.utils._speculative_sampling``,
Leviathan et al. 2023).  The draft length comes from the assistant's generation config, so it
is set there (``num_assistant_tokens = L``, schedule ``"constant"``) for the call and restored
afterwards.  transformers' default ``assistant_confidence_threshold`` (0.4: the assistant stops
drafting early when its top token is less likely than that) is left as users get it.

Counted by the engine's definitions (``engine.GenerationResult``): one target call per
iteration (the prompt is processed inside the first one), τ = draft tokens the iteration kept
in the output.  Each iteration's emitted tokens come from a streamer (transformers puts the
prompt, then each iteration's accepted tokens), its τ before truncation from a wrapper around
``_speculative_sampling`` for the duration of the call.  Neither is a forward hook: with the
same model object as target and assistant, a hook on the target would also count the
assistant's calls.
"""

from __future__ import annotations

import time

import torch

from spectr_gbv.reference.seeds import generator_seed
from spectr_gbv.gpu_backend.engine.result import GenerationResult, kept_tau
from spectr_gbv.gpu_backend.engine.inputs import check_positive
from spectr_gbv.reference.seeds import resolve_seed
from spectr_gbv.gpu_backend.engine.memory import peak_rss_bytes
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig


class IterationLog:
    """A transformers streamer that records how many tokens each iteration emitted (the
    first ``put`` is the prompt) and when the first of them arrived (``first_token_at``), plus
    the raw τ reported by ``_speculative_sampling`` (``wrap``).  Usable with plain ``generate``
    too (one ``put`` per token)."""

    def __init__(self):
        self.prompt_seen = False
        self.emitted: list[int] = []
        self.taus_raw: list[int] = []
        self.first_token_at: float | None = None  # perf_counter() of the first emitted tokens

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
        else:
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            self.emitted.append(int(value.numel()))  # batch of one

    def end(self) -> None:
        pass

    def wrap(self, speculative_sampling):
        """``speculative_sampling`` recording its n_matches (τ before transformers cuts the
        block at max_new_tokens or EOS).  transformers reads n_matches on the host anyway."""
        def wrapped(*args, **kwargs):
            valid_tokens, n_matches = speculative_sampling(*args, **kwargs)
            self.taus_raw.append(int(n_matches))
            return valid_tokens, n_matches
        return wrapped


@torch.inference_mode()
def assisted_generate(target, draft, prompt_ids, max_new_tokens: int = 64,
                      sampling: SamplingConfig | None = None, L: int = 4, seed: int | None = None,
                      eos_token_ids=()) -> GenerationResult:
    """One generation with transformers' assisted generation.

    Args:
        target, draft: transformers causal LMs (the draft is the ``assistant_model``; the same
            object may be both).
        prompt_ids: token ids (at least one).
        max_new_tokens: ≥ 1.
        sampling: temperature / top-k / top-p, passed as ``generate`` keyword arguments
            (``SamplingConfig.generate_kwargs``; top_k = 0 overrides transformers' default 50).
        L: ``num_assistant_tokens`` ≥ 1 (constant schedule).
        seed: any Python int; ``torch.manual_seed(engine.generator_seed(seed))`` before the
            call (transformers samples from the global RNG); None (default): a fresh 64-bit
            seed (``reference.seeds.resolve_seed``), reported as ``result.seed``.
        eos_token_ids: ids that stop the generation.
    Returns:
        GenerationResult with method "hf_assisted", target_calls = iterations (target forward
        calls), taus = kept τ per iteration, taus_raw = τ before truncation, seed the seed used.
    Raises:
        ValueError: empty prompt, max_new_tokens < 1, L < 1, seed neither None nor an integer.
    Not thread-safe: ``_speculative_sampling`` is wrapped in transformers' module during the call.
    """
    from transformers.generation import utils as generation_utils

    max_new_tokens = check_positive(max_new_tokens, "max_new_tokens")
    L = check_positive(L, "L")
    seed = resolve_seed(seed)
    gen_seed = generator_seed(seed)
    sampling = sampling or SamplingConfig()
    device = next(target.parameters()).device
    ids = torch.as_tensor(prompt_ids, dtype=torch.int64).reshape(1, -1).to(device)
    if ids.numel() == 0:
        raise ValueError("prompt_ids must hold at least one token")
    eos = sorted(int(e) for e in eos_token_ids)
    config = draft.generation_config
    saved = (config.num_assistant_tokens, config.num_assistant_tokens_schedule)
    log = IterationLog()
    original = generation_utils._speculative_sampling
    try:
        config.num_assistant_tokens, config.num_assistant_tokens_schedule = L, "constant"
        generation_utils._speculative_sampling = log.wrap(original)
        torch.manual_seed(gen_seed)
        start, cpu_start = time.perf_counter(), time.process_time()
        out = target.generate(
            ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
            max_new_tokens=max_new_tokens, eos_token_id=eos or None,
            pad_token_id=eos[0] if eos else None, streamer=log, **sampling.generate_kwargs())
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        generation_utils._speculative_sampling = original
        config.num_assistant_tokens, config.num_assistant_tokens_schedule = saved
    tokens = out[0, ids.shape[1]:].tolist()
    stop_reason = "max_new_tokens"
    for i, token in enumerate(tokens):
        if token in eos_token_ids:
            tokens, stop_reason = tokens[: i + 1], "eos"
            break
    taus_raw = log.taus_raw
    if len(taus_raw) != len(log.emitted):  # not the sampling path: τ = emitted − 1
        taus_raw = [max(e - 1, 0) for e in log.emitted]
    taus, left = [], len(tokens)
    for tau, emitted in zip(taus_raw, log.emitted):
        kept = min(emitted, left)  # 0 only after the cut (transformers stops at EOS too)
        taus.append(kept_tau(tau, kept))
        left -= kept
    ttft = log.first_token_at - start if log.first_token_at is not None else float("nan")
    return GenerationResult("hf_assisted", tokens, int(ids.shape[1]), len(log.emitted), taus,
                            1, L, wall, peak_rss_bytes(), stop_reason, cpu, taus_raw,
                            time_to_first_token_s=ttft, seed=seed)
