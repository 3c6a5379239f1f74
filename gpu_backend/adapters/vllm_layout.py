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
                          temperatures, *, generators=None)

    num_draft_tokens  list[int] [B], each ≥ 0
    draft_token_ids   int [num_tokens]
    draft_probs       float [num_tokens, V], or None (one-hot drafts: n-gram, greedy drafts)
    target_logits     float [num_tokens + B, V], request i's n_i draft rows then its bonus row
    temperatures      float [B] ≥ 0 (0 = greedy: the target is the one-hot of the argmax), or
                      None (all 1)
    generators        dict[int, torch.Generator] (batch index → the request's generator)
    output_token_ids  int32 [B, max_spec_len + 1], −1 padded

Top-k/top-p, penalties and logprobs of ``sampling_metadata`` are not part of this layout.

``rules_in_vllm_layout(name)`` runs one of this project's single-draft torch verifiers ("sd" is
vLLM's rule, "bv"/"gbv" block verification) in that layout; ``from_vllm_layout(fn)`` puts a
verifier written for that layout behind the batched contract (reference/contract.py), so that
oracle.harness.certify_verifier certifies it.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from spectr_gbv.reference.contract import BatchVerdict, to_numpy
from spectr_gbv.reference.seeds import generator_seed

PLACEHOLDER_TOKEN_ID = -1
GREEDY_TEMPERATURE = 0.0


# -- the layout ---------------------------------------------------------------------------------

def _as_tensor(x, name: str, device=None) -> torch.Tensor:
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
            logit; temperatures not [B] finite and ≥ 0.
    """
    counts = check_num_draft_tokens(num_draft_tokens)
    B, num_tokens = len(counts), sum(counts)
    logits = _as_tensor(target_logits, "target_logits")
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
    ids = _as_tensor(draft_token_ids, "draft_token_ids", device)
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
        draft_probs = _as_tensor(draft_probs, "draft_probs", device).to(device)
        if tuple(draft_probs.shape) != (num_tokens, V) or not draft_probs.dtype.is_floating_point:
            raise ValueError(f"draft_probs must be None or a float tensor [num_tokens, V] = "
                             f"[{num_tokens}, {V}], got shape {tuple(draft_probs.shape)} dtype {draft_probs.dtype}")
    if temperatures is None:
        temps = torch.ones(B, dtype=torch.float64, device=device)
    else:
        temps = _as_tensor(temperatures, "temperatures", device).to(device=device, dtype=torch.float64)
        if tuple(temps.shape) != (B,):
            raise ValueError(f"temperatures must have shape [B] = [{B}], got {tuple(temps.shape)}")
        if not bool((torch.isfinite(temps) & (temps >= 0)).all()):
            raise ValueError(f"temperatures must be finite and >= 0 (0 = greedy), got {temps.tolist()}")
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


def _request_seeds(B: int, device, generators, seeds) -> torch.Tensor:
    """int64 [B] on ``device``: seeds[b], or one draw from generators[b] (global RNG where a
    request has none, as vLLM does for unseeded requests)."""
    if seeds is not None and generators is not None:
        raise ValueError("pass seeds or generators, not both")
    if seeds is not None:
        s = _as_tensor(seeds, "seeds")
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


# -- our verifiers in vLLM's layout ----------------------------------------------------------------

class VLLMLayoutRules:
    """A single-draft verifier of the batched contract, called in vLLM's layout (module doc).

    Requests are grouped by draft length n ≥ 1; each group is one call of the verifier with
    K = 1, L = n and per-request seeds; a request with 0 drafts emits only its bonus token,
    drawn from its bonus row by an exponential race on its seed.  A request's outcome depends
    on its rows and its seed (or generator) alone, not on the other requests.

    Rules that modify later targets (``gbv`` with Algorithm 2, docs/rules.md §3) return a
    record that this layout cannot carry: it is dropped (the block's law is the rule's; a
    serving loop would also need the modified targets).

    Args:
        verifier: a registered rule name (``gpu_backend.verifiers.get_verifier``) or an object
            with the batched contract taking K = 1.
        validate: passed to this project's torch verifiers (value checks of the rows).
    """

    def __init__(self, verifier, validate: bool = True):
        if isinstance(verifier, str):
            from spectr_gbv.gpu_backend.verifiers import get_verifier
            verifier = get_verifier(verifier)
        if not callable(verifier):
            raise ValueError(f"verifier must be a rule name or a callable verifier, got {type(verifier).__name__}")
        self.verifier = verifier
        self.validate = validate

    def __repr__(self) -> str:
        return f"rules_in_vllm_layout({self.verifier!r})"

    def __call__(self, num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures=None, *,
                 generators=None, seeds=None) -> torch.Tensor:
        """Verify B requests in vLLM's layout.

        Args: as in the module doc; ``seeds`` int64 [B] instead of ``generators`` (not both).
        Returns:
            int32 [B, max(num_draft_tokens) + 1] on ``target_logits``' device: request b's
            accepted drafts, then its correction or bonus token, then −1.
        Raises:
            ValueError: malformed layout (``check_layout``), seeds and generators both given or
                malformed, or the verifier's own ValueError (e.g. a drafted token of draft
                probability 0).
        """
        counts, ids, dp, logits, temps = check_layout(num_draft_tokens, draft_token_ids, draft_probs,
                                                      target_logits, temperatures)
        B, V, device = len(counts), logits.shape[1], logits.device
        request_seeds = _request_seeds(B, device, generators, seeds)
        tp = target_probs_from_logits(logits, temps, counts)
        if dp is None:
            dp = torch.nn.functional.one_hot(ids, V).to(tp.dtype)
        dp = dp.to(tp.dtype)
        out = torch.full((B, max(counts) + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device)
        counts_t = torch.tensor(counts, device=device)
        draft_start = torch.cumsum(counts_t, 0) - counts_t
        row_start = torch.cumsum(counts_t + 1, 0) - (counts_t + 1)
        for n in sorted(set(counts)):
            req = torch.nonzero(counts_t == n).flatten()
            if n == 0:
                out[req, 0] = self._bonus_only(tp[row_start[req]], request_seeds[req]).to(torch.int32)
                continue
            pos = torch.arange(n, device=device)
            d_rows = draft_start[req].unsqueeze(1) + pos  # [G, n]
            t_rows = row_start[req].unsqueeze(1) + torch.arange(n + 1, device=device)  # [G, n+1]
            kwargs = {"validate": self.validate} if _is_project_verifier(self.verifier) else {}
            verdict = self.verifier(ids[d_rows].unsqueeze(1), dp[d_rows].unsqueeze(1), tp[t_rows].unsqueeze(1),
                                    seeds=request_seeds[req], **kwargs)
            tokens = verdict.tokens
            if not isinstance(tokens, torch.Tensor):
                tokens = torch.as_tensor(to_numpy(tokens))
            out[req, : n + 1] = tokens.to(device=device, dtype=torch.int32)
        return out

    @staticmethod
    def _bonus_only(q: torch.Tensor, seeds: torch.Tensor) -> torch.Tensor:
        """int64 [G]: one token ∝ q per row, argmax of log q − log E with E ~ Exp(1) from the
        row's seed (gpu_backend.verifiers.noise.seeded_exponentials)."""
        from spectr_gbv.gpu_backend.verifiers.noise import seeded_exponentials
        e = seeded_exponentials(seeds, q.shape[1]).to(q.device)
        score = torch.where(q > 0, torch.log(q.to(torch.float64)) - torch.log(e), torch.full_like(e, -torch.inf))
        return score.argmax(dim=1)


def _is_project_verifier(v) -> bool:
    try:
        from spectr_gbv.gpu_backend.verifiers import Verifier
    except ImportError:  # pragma: no cover
        return False
    return isinstance(v, Verifier)


def rules_in_vllm_layout(name_or_verifier, validate: bool = True) -> VLLMLayoutRules:
    """One of this project's single-draft verifiers ("sd", "bv", "gbv", or a Verifier / any
    object with the batched contract taking K = 1) as a function of vLLM's layout (module doc;
    ``VLLMLayoutRules``)."""
    return VLLMLayoutRules(name_or_verifier, validate)


# -- a verifier of vLLM's layout behind the batched contract ----------------------------------------

def parse_output(output_token_ids, drafts: np.ndarray, V: int):
    """(τ int64 [B], tokens int64 [B, L+1]) from ``output_token_ids`` of B requests that all
    drafted the L tokens ``drafts`` int [B, L].

    Request b emitted n_b = its number of non-placeholder entries, which must come first;
    τ_b = n_b − 1 (the tokens before the first rejection), and those τ_b tokens must be the
    drafts (a rejected draft is replaced by a recovered token and ends the row).

    Raises:
        ValueError: naming the problem: not an integer array of shape [B, L+1]; a row without
            tokens; −1 before a token; a token id outside [0, V) (other than −1); an accepted
            token that is not the drafted one.
    """
    out = to_numpy(output_token_ids)
    B, L = drafts.shape
    if out.ndim != 2 or out.shape != (B, L + 1):
        raise ValueError(f"output_token_ids must have shape [B, max_spec_len + 1] = [{B}, {L + 1}], "
                         f"got {list(out.shape)}")
    if not np.issubdtype(out.dtype, np.integer):
        raise ValueError(f"output_token_ids must hold integer token ids, got dtype {out.dtype}")
    out = out.astype(np.int64)
    valid = out != PLACEHOLDER_TOKEN_ID
    n = valid.sum(axis=1)
    if (n == 0).any():
        b = int(np.flatnonzero(n == 0)[0])
        raise ValueError(f"output_token_ids: request {b} emitted no token (every request emits at least "
                         f"its correction or bonus token)")
    gap = valid[:, 1:] & ~valid[:, :-1]
    if gap.any():
        b = int(np.flatnonzero(gap.any(axis=1))[0])
        raise ValueError(f"output_token_ids: request {b} has the placeholder -1 before a token: {out[b].tolist()}")
    bad = valid & ((out < 0) | (out >= V))
    if bad.any():
        b = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(f"output_token_ids: request {b} has a token id outside [0, V) = [0, {V}): {out[b].tolist()}")
    tau = n - 1
    accepted = np.arange(L)[None, :] < tau[:, None]
    wrong = accepted & (out[:, :L] != drafts)
    if wrong.any():
        b = int(np.flatnonzero(wrong.any(axis=1))[0])
        raise ValueError(f"output_token_ids: request {b} emitted {out[b].tolist()}, whose first {int(tau[b])} "
                         f"token(s) should be the accepted drafts {drafts[b].tolist()}")
    return tau, out


class VLLMLayoutAdapter:
    """A function of vLLM's layout (module doc) behind the batched contract (K = 1).

    Each call maps ``draft_tokens`` [B, 1, L], ``draft_probs`` [B, 1, L, V] and
    ``target_probs`` [B, 1, L+1, V] to ``num_draft_tokens`` = [L]·B, ``draft_token_ids``
    [B·L], ``draft_probs`` [B·L, V] (None with ``one_hot_drafts``), ``target_logits`` =
    log target_probs [B·(L+1), V] (each request's L draft rows then its bonus row; −inf where
    q = 0, so softmax gives the rows back), ``temperatures`` = 1, and per-row seeds as vLLM's
    ``generators``: {b: torch.Generator seeded with generator_seed(seeds[b])} on the inputs'
    device (``generators_from_seeds``); without seeds, fresh ones.  The output is read back
    by ``parse_output`` into τ and tokens [B, L+1].

    Args:
        fn: ``fn(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures,
            *, generators)`` → output_token_ids int [B, L+1] (tensor or array).
        one_hot_drafts: hand fn ``draft_probs=None`` (vLLM's n-gram / greedy-draft mode); the
            draft rows handed in must then be the indicators of the drafted tokens.
    Raises:
        ValueError (at call time): K ≠ 1 or malformed shapes, naming the argument; draft rows
            not one-hot at the drafted tokens with ``one_hot_drafts``; malformed output
            (``parse_output``).
    """

    def __init__(self, fn, one_hot_drafts: bool = False):
        if not callable(fn):
            raise ValueError(f"fn must be callable in vLLM's layout, got {type(fn).__name__}")
        self.fn = fn
        self.one_hot_drafts = bool(one_hot_drafts)

    def __repr__(self) -> str:
        return f"from_vllm_layout({self.fn!r}, one_hot_drafts={self.one_hot_drafts})"

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None) -> BatchVerdict:
        tokens = _as_tensor(draft_tokens, "draft_tokens")
        if tokens.dim() != 3 or tokens.shape[1] != 1 or tokens.dtype.is_floating_point:
            raise ValueError(f"draft_tokens must be integers of shape [B, 1, L] (vLLM's layout has one draft "
                             f"per request), got shape {list(tokens.shape)} dtype {tokens.dtype}")
        B, _, L = tokens.shape
        device = tokens.device
        dp = _as_tensor(draft_probs, "draft_probs", device).to(device)
        tp = _as_tensor(target_probs, "target_probs", device).to(device)
        if dp.dim() != 4 or tuple(dp.shape[:3]) != (B, 1, L):
            raise ValueError(f"draft_probs must have shape [B, 1, L, V] = [{B}, 1, {L}, V], got {list(dp.shape)}")
        V = dp.shape[3]
        if tuple(tp.shape) != (B, 1, L + 1, V):
            raise ValueError(f"target_probs must have shape [B, 1, L+1, V] = [{B}, 1, {L + 1}, {V}], "
                             f"got {list(tp.shape)}")
        ids = tokens[:, 0].reshape(B * L).to(torch.int64)
        flat_dp = dp[:, 0].reshape(B * L, V)
        if self.one_hot_drafts:
            one_hot = torch.nn.functional.one_hot(ids.clamp(0, V - 1), V).to(flat_dp.dtype)
            if not bool((flat_dp == one_hot).all()):
                raise ValueError("draft_probs must be the one-hot rows of the drafted tokens with one_hot_drafts=True")
            flat_dp = None
        logits = torch.log(tp[:, 0].reshape(B * (L + 1), V))
        if seeds is None:
            seeds = np.random.default_rng().integers(0, 2**62, size=B)
        generators = generators_from_seeds(seeds, device)
        out = self.fn([L] * B, ids, flat_dp, logits, torch.ones(B, dtype=logits.dtype, device=device),
                      generators=generators)
        tau, toks = parse_output(out, to_numpy(tokens[:, 0]).astype(np.int64), V)
        return BatchVerdict(tau, np.where(tau > 0, 0, -1), toks, tau + 1)


def from_vllm_layout(fn, one_hot_drafts: bool = False) -> VLLMLayoutAdapter:
    """``fn`` written for vLLM's layout as a verifier of the batched contract
    (``VLLMLayoutAdapter``): ``certify_verifier(from_vllm_layout(fn), "sd", K=1)``."""
    return VLLMLayoutAdapter(fn, one_hot_drafts)
