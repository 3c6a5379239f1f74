"""What the auto-configuration measures on the loaded models: the forwards' costs, the verifier's
and the draws' overhead, a calibration text sampled by the target, the teacher-forced rows over
it and the acceptance they give (``tuning.autoconfig.configure`` caches and combines them).
Every model call goes through the models' ``decoding.backend.Backend``.
"""

from __future__ import annotations

import torch

from spectr_gbv.gpu_backend.decoding.backend import Backend
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, finite_rows, sampleable
from spectr_gbv.gpu_backend.torch_backend.backend import TORCH
from spectr_gbv.gpu_backend.tuning.timing import TIMING_REPEATS, TimingQuality, timed_interleaved

CALIBRATION_SOURCES = (("humaneval", 0), ("gsm8k", 0))
CALIBRATION_TOKENS = 64


@torch.inference_mode()
def forward_costs(model, context_ids: list[int], ns, sampling: SamplingConfig,
                  repeats: int = TIMING_REPEATS, backend: Backend = TORCH) -> tuple[list[float], float, TimingQuality]:
    """Seconds of a forward over n new tokens after a cached context, with the probability
    processing of every row, for each n in ``ns``; and the context's prefill seconds.

    Args:
        model: a model of ``backend`` (default torch: a transformers causal LM).
        context_ids: the context (≥ 2 tokens); the new tokens are its last n tokens again.
        ns: token counts ≥ 1.
    Returns:
        (seconds per n: medians of ``repeats`` rounds, the n interleaved (``timed_interleaved``);
        the prefill's seconds: one call; how quiet the machine was).
    """
    return backend.forward_costs(model, context_ids, ns, sampling, timed_interleaved, repeats)


@torch.inference_mode()
def overhead_costs(verifier, p_rows: torch.Tensor, q_rows: torch.Tensor, Ks, Ls,
                   repeats: int = TIMING_REPEATS, backend: Backend = TORCH) -> tuple[dict, float, TimingQuality]:
    """Per-iteration seconds besides the forwards: the verifier on [1, K, L, V] rows built from
    measured rows, and L draws of K draft tokens (finite check + sampling); and plain
    sampling's per-token draw.  Every timed call is interleaved with the others
    (``timed_interleaved``).

    Args:
        verifier: a batched verifier (``engine.load_verifier``).
        p_rows, q_rows: float32 [≥ max(Ls) + 1, V] draft and target rows of consecutive
            positions (from the calibration text).
        backend: whose draws are timed (``Backend.draw``: the llama.cpp backend's inverse CDF,
            the torch backend's ``torch.multinomial``).
    Returns:
        ({(K, L): seconds}, seconds of one plain-sampling draw, how quiet the machine was).
    """
    gen = torch.Generator(device=p_rows.device).manual_seed(0)

    def draw(rows):
        backend.draw(sampleable(rows, finite_rows(rows)), gen)

    dev = p_rows.device
    seeds = torch.zeros(1, dtype=torch.int64, device=p_rows.device)
    fns = [lambda: draw(p_rows[:1])] + [lambda K=K: draw(p_rows[:1].expand(K, -1).contiguous()) for K in Ks]
    shapes = [(K, L) for K in Ks for L in Ls]
    for K, L in shapes:
        dp = p_rows[:L].unsqueeze(0).expand(K, -1, -1).contiguous()[None]
        tp = q_rows[: L + 1].unsqueeze(0).expand(K, -1, -1).contiguous()[None]
        tokens = dp[0].argmax(dim=-1)[None]
        fns.append(lambda tokens=tokens, dp=dp, tp=tp: verifier(tokens, dp, tp, seeds=seeds, validate=False))
    secs, quality = timed_interleaved(fns, repeats, dev)
    draw_s = dict(zip(Ks, secs[1:1 + len(Ks)]))
    out = {(K, L): v + L * draw_s[K] for (K, L), v in zip(shapes, secs[1 + len(Ks):])}
    return out, secs[0], quality


@torch.inference_mode()
def calibration_text(target, draft, prompt_ids: list[int], n_tokens: int = CALIBRATION_TOKENS,
                     seed: int = 0, eos_token_ids=(), backend: Backend = TORCH) -> list[int]:
    """The target's own continuation of ``prompt_ids``, up to ``n_tokens`` or its first EOS
    (kept), sampled at T = 0.7 whatever the user's setting (the text is cached per model pair;
    acceptance is then measured on it at the user's setting), with token verification K = 1,
    L = 4: lossless, so the text has the target's law at T = 0.7.  Returns the new tokens."""
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine

    engine = SpeculativeEngine(target, draft, rule="sd", K=1, L=4, sampling=SamplingConfig(0.7),
                               eos_token_ids=eos_token_ids, backend=backend)
    return engine.generate(prompt_ids, n_tokens, seed=seed).tokens


@torch.inference_mode()
def teacher_forced_rows(model, prompt_ids: list[int], continuation: list[int],
                        sampling: SamplingConfig, backend: Backend = TORCH) -> torch.Tensor:
    """float32 [n, V]: the model's processed row before each token of ``continuation``
    (``Backend.teacher_forced_rows``; default torch: a transformers causal LM)."""
    return backend.teacher_forced_rows(model, prompt_ids, continuation, sampling)


def acceptance_from_rows(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, K_max: int) -> tuple:
    """Per position: K-SEQ acceptance for k = 1..K_max drafts and p(x_t).

    Args:
        p, q: float [n, V] draft and target rows; tokens: int64 [n], the text's tokens.
    Returns:
        (beta float64 [n, K_max], match float64 [n]); beta[:, 0] = Σ min(p, q),
        beta[:, k − 1] = 1 − (1 − β(ρ*))^k with β(ρ) = Σ min(p, q/ρ) and ρ* K-SEQ's root for k
        candidates (docs/rules.md §2.2; = ρ*·β(ρ*) at the root).
    """
    from spectr_gbv.gpu_backend.verifiers.kseq import rho_star

    p64, q64 = p.double(), q.double()
    cols = [torch.minimum(p64, q64).sum(dim=1)]
    for k in range(2, K_max + 1):
        rho = rho_star(p, q, torch.full((p.shape[0],), k, dtype=torch.int64, device=p.device))
        # what K-SEQ accepts: some of k candidates, each accepted w.p. min(1, q/(ρ p))
        cols.append(1.0 - (1.0 - torch.minimum(p64, q64 / rho[:, None]).sum(dim=1)) ** k)
    beta = torch.stack(cols, dim=1).clamp(0.0, 1.0)
    match = p64.gather(1, tokens[:, None])[:, 0]
    return beta.cpu().numpy(), match.cpu().numpy()


def default_calibration_prompts(tokenizer, fallback: list[int]) -> list[list[int]]:
    """The built-in calibration prompts, chat-encoded; ``[fallback]`` when the prompt data
    package is not installed or there is no tokenizer."""
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts

    if tokenizer is None:
        return [list(fallback)]
    out = []
    for source, index in CALIBRATION_SOURCES:
        try:
            text = load_prompts(source, index + 1)[index]
        except (FileNotFoundError, IndexError, ValueError):
            continue
        out.append(encode_prompt(tokenizer, text))
    return out or [list(fallback)]
