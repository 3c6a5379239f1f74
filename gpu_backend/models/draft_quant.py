"""A cheaper draft: int8 dynamic quantisation of the draft model's linear layers (CPU).

A lossless rule keeps the target's law for any draft model, as long as the verifier gets the
probabilities the drafts were sampled from: the engine computes ``draft_probs`` from the
quantised model's own logits, so quantising the draft changes acceptance and speed, not the
output law — with one caveat on which rules, below.  The target is not touched.

The method: ``torch.ao.quantization.quantize_dynamic`` with per-output-channel int8 weights
(``per_channel_dynamic_qconfig``) on every ``nn.Linear`` of a float32 model, the LM head
included; activations are quantised per call (fbgemm / oneDNN x86 kernels).  torchao's CPU
paths were not faster, so the quantiser is torch's own (timings of one draft step:
benchmarks/MEASUREMENTS.md, "gpu_backend/models/draft_quant.py").  torch
marks ``torch.ao.quantization`` and its quantised-tensor functions deprecated (the notice names
release 2.10 for the removal, pytorch/ao issue 2259; pytorch issue 184982); the pinned torch
2.13 still has them and they are what runs here, and ``quantize_draft`` raises a clear
error where they are gone.  Acceptance: see benchmarks/ENGINE_VS_ASSISTED.md (tokens per target
call with the int8 draft against the bfloat16 one, same runs).

Which rules: the activation scale is computed per forward call, so a quantised draft row
depends on what else was in the call — the batching of earlier tokens and, with K ≥ 2 drafts
fed as a tree, the other drafts' tokens at the same depth (the size of the effect:
benchmarks/MEASUREMENTS.md).  Rules that decide position by position
(token verification, K-SEQ) and BV at K = 1 stay lossless under such rows (registry flag
``varying_draft_rows``); the engine refuses a quantised draft for the others, whose proofs need
i.i.d. draft blocks or the same draft row at a prefix in every iteration (Algorithm 2).
"""

from __future__ import annotations

import warnings

import torch

QUANT_MODES = ("none", "int8")
# Drafts whose int8 copy was measured to keep acceptance and pay (benchmarks/ENGINE_VS_ASSISTED.md);
# "auto" quantises only these: the gain is a property of the model, not a given (SmolLM2-135M:
# benchmarks/MEASUREMENTS.md).
MEASURED_INT8_DRAFTS = ("draft", "qwen2.5-coder-0.5b-instruct")


def resolve_mode(mode: str, draft: str, rule: str, device: str = "cpu", name: str = "draft_quant") -> str:
    """The quantisation for ``--draft-quant``: "none" or "int8" as given; "auto" → "int8" for a
    measured draft (``MEASURED_INT8_DRAFTS``) on the CPU with a rule that allows varying draft
    rows (registry ``varying_draft_rows``), else "none".

    Args:
        name: the argument's name in a refusal (``"--draft-quant int8"`` on the command line).
    Raises:
        ValueError: unknown mode; "int8" with a rule that does not allow it
            (``reference.rules.policy.check_varying_draft_rows``, naming the rule).
    """
    from spectr_gbv.reference.rules.policy import check_varying_draft_rows
    from spectr_gbv.reference.rules import registry

    if mode not in QUANT_MODES + ("auto",):
        raise ValueError(f"draft quantisation must be one of {QUANT_MODES + ('auto',)}, got {mode!r}")
    if mode == "int8":
        check_varying_draft_rows(rule, name)
    allowed = rule != "ar" and registry.spec(rule).varying_draft_rows
    on_cpu = str(device).split(":")[0].lower() == "cpu"  # "cpu", torch.device("cpu"), "CPU"
    if mode == "auto":
        return "int8" if allowed and on_cpu and draft in MEASURED_INT8_DRAFTS else "none"
    return mode


def is_dynamically_quantised(model) -> bool:
    """Whether ``model`` holds a ``torch.ao`` dynamically quantised linear layer (rows that
    depend on the batching of each forward call).  Other quantisation schemes (torchao's
    configs, GPTQ, ...) are not detected: whoever quantises a draft another way answers for
    its rows."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return any(isinstance(m, DynamicLinear) for m in model.modules())


def quantize_draft(model, mode: str = "int8"):
    """The draft model with int8 dynamically quantised linear layers (in place; returned).

    Args:
        model: a transformers causal LM on the CPU with float32 weights (load it with
            ``dtype=torch.float32``: the dynamic int8 kernels take float32 activations).
        mode: "int8" (or "none": the model unchanged).
    Returns:
        the same model object, its ``nn.Linear`` modules replaced by dynamic quantised ones.
    Raises:
        ValueError: unknown ``mode``; weights not float32; a model not on the CPU (the kernels
            are CPU kernels), naming the argument.
        RuntimeError: this torch has no dynamic quantisation (removed in a later release).
    """
    if mode not in QUANT_MODES:
        raise ValueError(f"mode must be one of {QUANT_MODES}, got {mode!r}")
    if mode == "none":
        return model
    params = list(model.parameters())
    if any(p.device.type != "cpu" for p in params):
        raise ValueError("model: int8 draft quantisation runs on the CPU only; the model has "
                         "parameters on another device")
    if any(p.is_floating_point() and p.dtype != torch.float32 for p in params):
        raise ValueError("model: int8 draft quantisation needs float32 weights (load the draft "
                         "with dtype float32)")
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as err:  # pragma: no cover - depends on a future torch
        raise RuntimeError("this torch has no torch.ao.quantization.quantize_dynamic; use "
                           "--draft-quant none") from err
    with warnings.catch_warnings():
        # torch's notice that quantised tensors are deprecated: stated once in the docstring
        warnings.filterwarnings("ignore", message=".*quantize_per_.*deprecated.*")
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated.*")
        quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    return model
