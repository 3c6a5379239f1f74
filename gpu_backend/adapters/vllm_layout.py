"""vLLM v1's rejection-sampler tensor layout, spoken both ways.

The layout (vllm-project/vllm, read at commit 7f6fc1c5; older commit 0097a7bb where noted):

``vllm/v1/spec_decode/metadata.py``, ``SpecDecodeMetadata``: per step, a batch of B requests,
    num_draft_tokens     list[int] [B]      drafts of each request (may differ, may be 0)
    draft_token_ids      int32 [num_tokens] the drafts flattened request by request,
                                            num_tokens = Σ num_draft_tokens
    cu_num_draft_tokens  [B]                cumsum(num_draft_tokens)
    cu_num_sampled_tokens [B]               cumsum(num_draft_tokens + 1)
    target_logits_indices [num_tokens], bonus_logits_indices [B] = cu_num_sampled_tokens − 1,
    max_spec_len = max(num_draft_tokens)    (``__post_init__``)
``vllm/v1/worker/gpu_model_runner.py``, ``_calc_spec_decode_metadata``: the target's logits of
    request i are n_i + 1 consecutive rows, its n_i draft positions then its bonus position
    (its worked example, read in a downstream copy of that function and consistent with
    ``cu_num_sampled_tokens`` and ``RejectionSampler._get_logprobs_tensors``: num_draft_tokens
    [3, 0, 2, 0, 1] → target_logits_indices [0, 1, 2, 5, 6, 9], bonus_logits_indices
    [3, 4, 7, 8, 10]).
``vllm/v1/sample/rejection_sampler.py``, ``RejectionSampler.forward(metadata, draft_probs,
    logits, sampling_metadata)``: ``draft_probs`` float [num_tokens, V] or None ("not provided,
    which is the case for ngram spec decode"; the kernels then take the draft probability of
    the drafted token as 1 and the recovered token ∝ q with the drafted token zeroed, i.e. p is
    the indicator of the drafted token; ``GPUModelRunner`` passes ``None,  # draft_probs`` at
    the call sites read), ``logits`` float [num_tokens + B, V] in the order
    above; the bonus token is sampled inside from ``logits[bonus_logits_indices]``, the target
    probabilities are softmax(logits[target_logits_indices] / T) per request
    (``apply_sampling_constraints``; T = GREEDY_TEMPERATURE = 0 marks greedy requests, which
    the ``rejection_greedy_sample_kernel`` verifies against the argmax).  At commit 0097a7bb
    the runner sampled the bonus itself: ``forward(metadata, draft_probs, target_logits
    [num_tokens, V], bonus_token_ids [B, 1], sampling_metadata)`` (GREEDY_TEMPERATURE = −1).
    Both call ``rejection_sample(...)``, whose output ``output_token_ids`` is int32
    [B, max_spec_len + 1], PLACEHOLDER_TOKEN_ID = −1 after each request's accepted drafts and
    its recovered or bonus token.  Randomness: ``sampling_metadata.generators``,
    dict[int, torch.Generator] from a request's batch index to its generator (requests
    without a seed draw from the global generator; ``generate_uniform_probs``,
    ``sample_recovered_tokens``).

This module's layout is the current one (bonus rows inside ``target_logits``), as one call

    output_token_ids = fn(num_draft_tokens, draft_token_ids, draft_probs, target_logits,
                          temperatures, *, generators=None[, noise=None])

    num_draft_tokens  list[int] [B], each ≥ 0
    draft_token_ids   int [num_tokens]
    draft_probs       float [num_tokens, V], or None (one-hot drafts: n-gram, greedy drafts);
                      post-temperature probabilities, as vLLM's draft_probs are
    target_logits     float [num_tokens + B, V], request i's n_i draft rows then its bonus row
    temperatures      float [B], each 0 (greedy: the target is the one-hot of the argmax) or
                      ≥ 1e-4 (the floor of every entry point, gpu_backend/decoding/temperature.py),
                      or None (all 1)
    generators        dict[int, torch.Generator] (batch index → the request's generator)
    noise             optional, for deterministic probes (below): (uniforms float64
                      [num_tokens] in [0, 1), one per draft position in flattened order,
                      exponentials float64 [B, V] > 0, one race per request)
    output_token_ids  int32 [B, max_spec_len + 1], −1 padded

Top-k/top-p, penalties and logprobs of ``sampling_metadata`` are not part of this layout.

Our single-draft verifiers in this layout: ``adapters.vllm_rules``; a function of this layout
behind the batched contract (what it sends, its filler requests and noise):
``adapters.vllm_adapter``.
"""


from __future__ import annotations

import numbers

import numpy as np
import torch

from spectr_gbv.reference.contract import to_numpy
from spectr_gbv.reference.seeds import generator_seed

from spectr_gbv.gpu_backend.decoding.temperature import check_temperature

PLACEHOLDER_TOKEN_ID = -1
GREEDY_TEMPERATURE = 0.0
ULP_HALF = 2.0**-53  # u' = u − 2^-53 maps (0, 1] onto [0, 1) (module doc, noise)


# -- the layout ---------------------------------------------------------------------------------

def as_tensor(x, name: str, device=None) -> torch.Tensor:
    """``x`` as a tensor (a tensor as it is; else a contiguous copy on ``device``), ValueError
    naming ``name`` when it cannot be one."""
    if isinstance(x, torch.Tensor):
        return x
    try:
        arr = np.ascontiguousarray(np.asarray(x))
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise ValueError(f"{name} must be a tensor or an array, got {type(x).__name__}") from exc
    if arr.dtype == object:
        raise ValueError(f"{name} must be a numeric tensor or array, got dtype object")
    return torch.as_tensor(arr, device=device)


def check_num_draft_tokens(num_draft_tokens) -> list[int]:
    """list[int] [B] from a sequence of non-negative integers, B ≥ 1.

    Raises:
        ValueError: not a sequence of integers ≥ 0, or empty, naming ``num_draft_tokens``.
    """
    if isinstance(num_draft_tokens, torch.Tensor):
        num_draft_tokens = num_draft_tokens.tolist()
    try:
        counts = list(num_draft_tokens)
    except TypeError:
        raise ValueError(f"num_draft_tokens must be a list of integers, got {num_draft_tokens!r}") from None
    if not counts:
        raise ValueError("num_draft_tokens must list at least one request (B >= 1), got []")
    for n in counts:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"num_draft_tokens must hold integers >= 0, got {counts!r}")
    return [int(n) for n in counts]


def target_logits_indices(num_draft_tokens) -> torch.Tensor:
    """int64 [num_tokens]: the rows of ``target_logits`` at draft positions (vLLM's
    ``SpecDecodeMetadata.target_logits_indices``); e.g. [3, 0, 2, 0, 1] → [0, 1, 2, 5, 6, 9]."""
    counts = check_num_draft_tokens(num_draft_tokens)
    starts = np.cumsum([0] + [n + 1 for n in counts[:-1]])
    idx = [s + i for s, n in zip(starts, counts) for i in range(n)]
    return torch.tensor(idx, dtype=torch.int64)


def bonus_logits_indices(num_draft_tokens) -> torch.Tensor:
    """int64 [B]: the bonus row of each request (vLLM's ``bonus_logits_indices`` =
    cu_num_sampled_tokens − 1); e.g. [3, 0, 2, 0, 1] → [3, 4, 7, 8, 10]."""
    counts = check_num_draft_tokens(num_draft_tokens)
    return torch.tensor(np.cumsum([n + 1 for n in counts]) - 1, dtype=torch.int64)


def check_layout(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures):
    """Shape, dtype and value checks of one call in the layout (module doc).

    Returns:
        (counts list[int], draft_token_ids int64 tensor, draft_probs tensor or None,
        target_logits tensor, temperatures float tensor [B]), on ``target_logits``' device.
    Raises:
        ValueError: naming the argument: counts not integers ≥ 0; draft_token_ids not 1-D
            integers of length Σ num_draft_tokens or outside [0, V); draft_probs not
            [num_tokens, V] floats; target_logits not [num_tokens + B, V] floats (the older
            layout without bonus rows is named in the message) or with a row of no finite
            logit; temperatures not [B], or an entry neither 0 (greedy) nor a finite number
            ≥ 1e-4 (``gpu_backend.decoding.temperature.check_temperature``'s message, naming
            ``temperatures[b]``: at T = 1e-40 softmax(logits / T) was NaN).
    """
    counts = check_num_draft_tokens(num_draft_tokens)
    B, num_tokens = len(counts), sum(counts)
    logits = as_tensor(target_logits, "target_logits")
    device = logits.device
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"target_logits must be a float tensor [num_tokens + B, V], got shape "
                         f"{tuple(logits.shape)} dtype {logits.dtype}")
    V = logits.shape[1]
    if V < 1:
        raise ValueError("target_logits: empty vocabulary (V = 0)")
    if logits.shape[0] != num_tokens + B:
        older = " (vLLM's older layout without bonus rows)" if logits.shape[0] == num_tokens else ""
        raise ValueError(f"target_logits must have num_tokens + B = {num_tokens} + {B} rows (each request's "
                         f"draft rows, then its bonus row), got {logits.shape[0]}{older}")
    if not bool(torch.isfinite(logits).any(dim=1).all()):
        raise ValueError("target_logits: a row has no finite logit (no token is possible)")
    ids = as_tensor(draft_token_ids, "draft_token_ids", device)
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"draft_token_ids must be integers of shape [num_tokens], got shape "
                         f"{tuple(ids.shape)} dtype {ids.dtype}")
    if ids.shape[0] != num_tokens:
        raise ValueError(f"draft_token_ids must have num_tokens = sum(num_draft_tokens) = {num_tokens} "
                         f"entries, got {ids.shape[0]}")
    ids = ids.to(device=device, dtype=torch.int64)
    if num_tokens and not bool(((ids >= 0) & (ids < V)).all()):
        raise ValueError(f"draft_token_ids must lie in [0, V) = [0, {V})")
    if draft_probs is not None:
        draft_probs = as_tensor(draft_probs, "draft_probs", device).to(device)
        if tuple(draft_probs.shape) != (num_tokens, V) or not draft_probs.dtype.is_floating_point:
            raise ValueError(f"draft_probs must be None or a float tensor [num_tokens, V] = "
                             f"[{num_tokens}, {V}], got shape {tuple(draft_probs.shape)} dtype {draft_probs.dtype}")
    if temperatures is None:
        temps = torch.ones(B, dtype=torch.float64, device=device)
    else:
        temps = as_tensor(temperatures, "temperatures", device).to(device=device, dtype=torch.float64)
        if tuple(temps.shape) != (B,):
            raise ValueError(f"temperatures must have shape [B] = [{B}], got {tuple(temps.shape)}")
        for b, t in enumerate(temps.tolist()):  # the floor of every entry point (one host read)
            check_temperature(t, f"temperatures[{b}]")
    return counts, ids, draft_probs, logits, temps


def target_probs_from_logits(target_logits: torch.Tensor, temperatures: torch.Tensor, counts) -> torch.Tensor:
    """float [num_tokens + B, V]: softmax(logits / T) on each request's rows, the one-hot of
    the argmax (first maximum) where T = 0 (greedy).  float64 logits stay float64, others are
    computed in float32 (vLLM's ``apply_sampling_constraints`` + softmax in float32)."""
    dtype = torch.float64 if target_logits.dtype == torch.float64 else torch.float32
    logits = target_logits.to(dtype)
    per_row = torch.repeat_interleave(temperatures, torch.tensor([n + 1 for n in counts], device=logits.device))
    greedy = per_row == GREEDY_TEMPERATURE
    scale = torch.where(greedy, torch.ones_like(per_row), per_row).to(dtype)
    probs = torch.softmax(logits / scale.unsqueeze(1), dim=-1)
    one_hot = torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[1]).to(dtype)
    return torch.where(greedy.unsqueeze(1), one_hot, probs)


def generators_from_seeds(seeds, device="cpu") -> dict[int, torch.Generator]:
    """{b: torch.Generator(device) seeded with ``reference.seeds.generator_seed(seeds[b])``}:
    how per-row seeds of the batched contract reach a function of vLLM's layout.

    Raises:
        ValueError: seeds not integers (``generator_seed``).
    """
    out = {}
    for b, s in enumerate(to_numpy(seeds).reshape(-1).tolist()):
        g = torch.Generator(device=device)
        g.manual_seed(generator_seed(int(s)))
        out[b] = g
    return out


def check_layout_noise(noise, num_tokens: int, B: int, V: int, device):
    """(uniforms float64 [num_tokens] in [0, 1), exponentials float64 [B, V] > 0) on
    ``device``, from the layout's ``noise`` pair (module doc).

    Raises:
        ValueError: not a pair, wrong shapes, uniforms outside [0, 1) or exponentials not finite
            and > 0, naming ``noise``.
    """
    if not isinstance(noise, (tuple, list)) or len(noise) != 2:
        raise ValueError("noise must be a pair (uniforms [num_tokens] in [0, 1), exponentials [B, V])")
    u = as_tensor(noise[0], "noise uniforms").to(device=device, dtype=torch.float64)
    e = as_tensor(noise[1], "noise exponentials").to(device=device, dtype=torch.float64)
    if tuple(u.shape) != (num_tokens,):
        raise ValueError(f"noise: uniforms must have shape [num_tokens] = [{num_tokens}], got {tuple(u.shape)}")
    if tuple(e.shape) != (B, V):
        raise ValueError(f"noise: exponentials must have shape [B, V] = [{B}, {V}], got {tuple(e.shape)}")
    if num_tokens and not bool(((u >= 0) & (u < 1)).all()):
        raise ValueError("noise: uniforms must lie in [0, 1) (vLLM's convention)")
    if not bool((torch.isfinite(e) & (e > 0)).all()):
        raise ValueError("noise: exponentials must be finite and > 0")
    return u, e


def per_request_seeds(B: int, device, generators, seeds) -> torch.Tensor:
    """int64 [B] on ``device``: seeds[b], or one draw from generators[b] (global RNG where a
    request has none, as vLLM does for unseeded requests)."""
    if seeds is not None and generators is not None:
        raise ValueError("pass seeds or generators, not both")
    if seeds is not None:
        s = as_tensor(seeds, "seeds")
        if s.dtype.is_floating_point or s.dtype == torch.bool or tuple(s.shape) != (B,):
            raise ValueError(f"seeds must be integers of shape [B] = [{B}], got shape {tuple(s.shape)} "
                             f"dtype {s.dtype}")
        return s.to(device=device, dtype=torch.int64)
    generators = {} if generators is None else generators
    if not isinstance(generators, dict):
        raise ValueError(f"generators must be a dict {{batch index: torch.Generator}}, got {type(generators).__name__}")
    for b, g in generators.items():
        if isinstance(b, bool) or not isinstance(b, numbers.Integral) or not 0 <= b < B:
            raise ValueError(f"generators: key {b!r} is not a batch index in [0, {B})")
        if not isinstance(g, torch.Generator):
            raise ValueError(f"generators[{b}] must be a torch.Generator, got {type(g).__name__}")
    out = torch.randint(0, 2**62, (B,), dtype=torch.int64)
    for b, g in generators.items():
        out[b] = torch.randint(0, 2**62, (1,), dtype=torch.int64, generator=g, device=g.device).cpu()[0]
    return out.to(device)
