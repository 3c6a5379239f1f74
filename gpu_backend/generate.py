"""One generation from a prompt, as ``spectr-gbv generate`` runs it: a frozen request in, a
frozen outcome out.

``make_request`` checks what was asked and resolves it (the rule, the shape's candidates, the
backend, the draft's quantisation, the memory of one iteration) before any model is loaded and
returns a ``GenerateRequest`` (the command line only parses its flags into it,
``cli.generate``); ``weights_dtype`` and ``load_models`` load the request's pair on its backend;
``generate`` runs it on a
loaded ``models.pair.ModelPair``: encodes the prompt, chooses the shape
(``tuning.shape.choose_shape``: measured when the request's plan asks for it), and runs ONE
``SpeculativeEngine`` (or plain sampling) on the pair's backend (``ModelPair.backend``), whose
verifier is the one the measurement timed;
then compares the decode rate with the measurement's prediction (``tuning.recheck``: one line,
and stale cached costs, when they differ by more than 25 %).
"""

from __future__ import annotations

from dataclasses import dataclass

from spectr_gbv.reference.rules import policy

from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_RULE
from spectr_gbv.gpu_backend.tuning.shape import ShapeChoice, ShapePlan, plan_shape


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


def make_request(prompt: str, *, rule: str | None = None, K: int | None = None, L: int | None = None,
                 auto: bool = True, max_new_tokens: int = 128, temperature: float = 0.7,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                 target: str = "target", draft: str = "draft", dtype: str = "auto",
                 draft_quant: str = "auto", stop_below: float | None = None, chat: bool = True,
                 threads: int | None = None, recalibrate: bool = False, backend: str = "auto",
                 names: dict | None = None) -> GenerateRequest:
    """The request for these arguments, checked and resolved before any model is loaded: the
    prompt, the rule and its policies (``reference.rules.policy``: K for single-draft rules,
    ``stop_below``, an int8 draft), the candidate shapes (``tuning.shape.plan_shape``), the
    auto-configuration's cache file, the backend ("auto": llama.cpp for GGUF models when
    llama-cpp-python is installed, unless ``dtype`` or an int8 draft asks for torch;
    ``llamacpp.pair.resolve_backend``), the draft's quantisation (``draft_quant.resolve_mode``),
    the models' specs (``models.catalog.check_models``) and the memory of one iteration's
    probability rows at the largest shape that may be chosen (``engine.memory``).

    Args:
        rule: a registered rule or "ar" (plain sampling); None: ``DEFAULT_RULE``, and a measured
            choice of plain sampling may then override it.
        K, L: fixed drafts and block length, or None to choose; ``auto``: measure costs to choose.
        names: how refusals name the arguments (keys as the parameters, "auto" for turning the
            measurement off); the command line passes its flags (``--K``, ``--no-auto``, …).
    Raises:
        ValueError: one line naming the argument.
    """
    from spectr_gbv.gpu_backend.engine.memory import check_engine_memory
    from spectr_gbv.gpu_backend.llamacpp.pair import resolve_backend
    from spectr_gbv.gpu_backend.models.catalog import check_models
    from spectr_gbv.gpu_backend.models.draft_quant import resolve_mode

    def n(key: str) -> str:
        return (names or {}).get(key, "auto=False" if key == "auto" else key)

    if not prompt.strip():
        raise ValueError(f"{n('prompt')} must not be empty")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{n('prompt')} must be valid UTF-8 text (character {err.start} is "
                         f"{prompt[err.start]!r}, not encodable)") from None
    rule_given = rule is not None
    rule = rule if rule_given else DEFAULT_RULE
    rules = ("ar",) + policy.known_rules()
    if rule not in rules:
        raise ValueError(f"{n('rule')}: unknown rule {rule!r}; known: {', '.join(rules)}")
    if K is not None:
        policy.check_draft_count(rule, K, n("K"))
    if stop_below is not None:
        policy.check_draft_stopping(rule, n("stop_below"))
    if L is not None and rule != "ar" and L > max_new_tokens:
        raise ValueError(f"{n('L')} {L}: more than {n('max_new_tokens')} {max_new_tokens} drafted tokens "
                         f"per iteration can never be kept; use {n('L')} <= {max_new_tokens}")
    shape = plan_shape(rule, K, L, auto=auto, names=(n("K"), n("L"), n("auto")))
    if shape.auto or dtype == "auto":  # the dtype probe is cached in the same file
        from spectr_gbv.gpu_backend.tuning.cache import check_cache_path

        check_cache_path()
    if recalibrate and not shape.auto:
        raise ValueError(f"{n('recalibrate')}: nothing is measured with {n('auto')}, with both {n('K')} and "
                         f"{n('L')} given, or with {n('rule')} ar")
    draft_spec = draft if rule != "ar" else None
    # arguments only the torch backend has: with backend "auto" they choose it
    torch_args = [a for a, given in ((n("dtype"), dtype != "auto"), (n("draft_quant"), draft_quant == "int8"))
                  if given]
    backend = ("torch" if backend == "auto" and torch_args else
               resolve_backend(backend, target, draft_spec, name=n("backend")))
    if backend == "llama.cpp":
        if draft_quant == "int8":
            raise ValueError(f"{n('draft_quant')} int8 quantises a torch draft; on {n('backend')} llama.cpp the "
                             f"GGUF draft runs as it is quantised (use {n('backend')} torch)")
        if dtype != "auto":
            raise ValueError(f"{n('dtype')} {dtype}: the llama.cpp backend runs the GGUF files as they "
                             f"are (use {n('backend')} torch to choose a dtype)")
        quant = "none"
    else:
        quant = resolve_mode(draft_quant, draft, rule, name=f"{n('draft_quant')} {draft_quant}")
    V, known = check_models(target, draft_spec)
    if rule != "ar":
        flags = (f"{n('K')}/{n('L')}" if not shape.auto else
                 f"{n('K')}/{n('L')} (the automatic candidates go up to K = {max(shape.K_candidates)}, "
                 f"L = {max(shape.L_candidates)}; give {n('K')} and {n('L')} to fix the shape)")
        check_engine_memory(max(shape.K_candidates), max(shape.L_candidates), V, known, flags)
    return GenerateRequest(
        prompt=prompt, rule=rule, rule_given=rule_given, shape=shape, max_new_tokens=max_new_tokens,
        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, target=target, draft=draft,
        dtype=dtype, draft_quant=quant, stop_below=stop_below, chat=chat, threads=threads,
        recalibrate=recalibrate, backend=backend)


def weights_dtype(request: GenerateRequest) -> tuple[str, object]:
    """The dtype the request's models load in, and the probe that chose it (None when none
    ran): "gguf (llama.cpp)" on llama.cpp; else ``dtype_probe.resolve`` (measured once per
    machine for "auto", with the request's torch threads)."""
    from spectr_gbv.gpu_backend.models.pair import set_threads

    set_threads(request.threads)
    if request.backend == "llama.cpp":
        return "gguf (llama.cpp)", None
    from spectr_gbv.gpu_backend.tuning.dtype_probe import resolve

    return resolve(request.dtype, refresh=request.recalibrate)


def load_models(request: GenerateRequest, dtype: str):
    """The request's pair on its backend (``models.pair.load_pair`` in ``dtype`` with the
    draft's quantisation, or ``llamacpp.pair.load_llamacpp_pair``); no draft for "ar".

    Raises:
        models.pair.ModelLoadError: a model cannot be loaded (its role and spec named).
        ValueError: draft and target do not fit together.
    """
    from spectr_gbv.gpu_backend.models.pair import set_threads

    set_threads(request.threads)
    if request.backend == "llama.cpp":
        from spectr_gbv.gpu_backend.llamacpp.pair import load_llamacpp_pair

        return load_llamacpp_pair(request.target, request.draft_to_load, threads=request.threads)
    from spectr_gbv.gpu_backend.models.pair import load_pair

    return load_pair(request.target, request.draft_to_load, dtype, request.draft_quant)


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
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
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
