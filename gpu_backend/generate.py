"""One generation from a prompt, as ``spectr-gbv generate`` runs it: a frozen request in, a
frozen outcome out.

``GenerateRequest`` holds what was asked, already checked (the command line builds it from
its flags, ``cli.generate.build_request``, before any model is loaded); ``generate`` runs it on a
loaded ``models.pair.ModelPair``: encodes the prompt, chooses the shape
(``tuning.shape.choose_shape``: measured when the request's plan asks for it), and runs ONE
``SpeculativeEngine`` (or plain sampling) on the pair's backend (``ModelPair.backend``), whose
verifier is the one the measurement timed;
then compares the decode rate with the measurement's prediction (``tuning.recheck``: one line,
and stale cached costs, when they differ by more than 25 %).
"""

from __future__ import annotations

from dataclasses import dataclass

from spectr_gbv.gpu_backend.tuning.shape import ShapeChoice, ShapePlan


@dataclass(frozen=True)
class GenerateRequest:
    """A generation, checked.

    Attributes:
        prompt: the user message (non-empty UTF-8 text).
        rule: the verification rule, or "ar" (plain sampling); ``rule_given``: whether the
            user named it (a measured choice of plain sampling then does not override it).
        shape: the candidate K and L (``tuning.shape.plan_shape``).
        max_new_tokens, seed: as for ``SpeculativeEngine.generate`` (seed None: a fresh
            64-bit seed, drawn by the engine and reported in the result's ``seed``).
        temperature, top_k, top_p: the sampling (``sampling.SamplingConfig``; temperature 0:
            greedy).
        target, draft: model specs (``weights.load_causal_lm``); the draft is not loaded for "ar".
        dtype: the weights' dtype as asked ("auto": ``tuning.dtype_probe.resolve``).
        draft_quant: "none" or "int8" (``draft_quant.resolve_mode``, already resolved).
        stop_below: draft-side stopping threshold (``reference.draft_stopping.ConfidenceStop``)
            or None.
        chat: apply the chat template; threads: torch threads (None: all cores);
        recalibrate: measure again instead of reading the cache.
        backend: "torch" (transformers) or "llama.cpp" (the GGUF files on llama.cpp's kernels,
            ``llamacpp.pair.resolve_backend``: already resolved).
    """

    prompt: str
    rule: str
    rule_given: bool
    shape: ShapePlan
    max_new_tokens: int
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int | None
    target: str
    draft: str
    dtype: str
    draft_quant: str
    stop_below: float | None
    chat: bool = True
    threads: int | None = None
    recalibrate: bool = False
    backend: str = "torch"

    @property
    def draft_to_load(self) -> str | None:
        """The draft spec, or None for plain sampling."""
        return self.draft if self.rule != "ar" else None


@dataclass(frozen=True)
class GenerateOutcome:
    """What ``generate`` ran: ``choice`` (rule, K, L, prediction and measurement) and the
    engine's ``GenerationResult``."""

    choice: ShapeChoice
    result: object


def generate(request: GenerateRequest, pair, dtype: str, streamer=None, on_choice=None, log=None) -> GenerateOutcome:
    """Run ``request`` on the loaded ``pair`` (``models.pair.ModelPair``) in ``dtype``.

    Args:
        streamer: a transformers streamer receiving the tokens as they are accepted, or None.
        on_choice: called with the ``ShapeChoice`` before the generation starts (e.g. to print
            the measurement's summary).
        log: receives the one line of ``tuning.recheck`` when the decode rate misses the
            prediction by more than 25 % (default: stderr).
    Raises:
        ValueError: from the engine (a prompt that does not fit, a model it cannot run).
    """
    from spectr_gbv.gpu_backend.engine.sampling import SamplingConfig
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine, load_verifier
    from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt
    from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec
    from spectr_gbv.gpu_backend.tuning.shape import choose_shape

    sampling = SamplingConfig(request.temperature, request.top_k, request.top_p)
    ids = encode_prompt(pair.tokenizer, request.prompt, chat=request.chat)
    verifier = load_verifier(request.rule) if request.rule != "ar" else None
    choice = choose_shape(request.shape, request.rule, request.rule_given, pair.target, pair.draft,
                          pair.tokenizer, PairSpec(request.target, request.draft, dtype, request.draft_quant),
                          sampling, prompt_ids=ids, refresh=request.recalibrate, eos_token_ids=pair.eos,
                          verifier=verifier, new_tokens=request.max_new_tokens, backend=pair.backend)
    if on_choice is not None:
        on_choice(choice)
    if choice.rule == "ar":
        result = autoregressive_generate(pair.target, ids, request.max_new_tokens, sampling,
                                         request.seed, pair.eos, streamer=streamer, backend=pair.backend)
    else:
        from spectr_gbv.reference.draft_stopping import ConfidenceStop

        stop = ConfidenceStop(request.stop_below) if request.stop_below is not None else None
        engine = SpeculativeEngine(pair.target, pair.draft, rule=choice.rule, K=choice.K, L=choice.L,
                                   sampling=sampling, eos_token_ids=pair.eos, draft_stop=stop,
                                   rule_verifier=verifier, backend=pair.backend)
        result = engine.generate(ids, request.max_new_tokens, seed=request.seed, streamer=streamer)
    from spectr_gbv.gpu_backend.tuning.recheck import recheck

    recheck(choice, result, log)  # one line, and stale cached costs, on a missed prediction
    return GenerateOutcome(choice, result)
