"""Loading a draft/target pair: the one place that loads the models of a run and checks that
they share one tokenizer (the benchmark, ``spectr-gbv generate``/``bench``/``report`` through
``cli.models.load_models``, the engine's certificate ``gpu_backend.certify.engine.certification_pair``,
the scripts in benchmarks/)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelPair:
    """Loaded target, draft (None when only the target was asked for), the target's tokenizer,
    the EOS ids (``models.eos.eos_token_ids``), and the ``decoding.backend.Backend`` that runs the
    models: hand it to the engine (``SpeculativeEngine(..., backend=pair.backend)``); None is the
    engine's default, torch (transformers models, ``load_pair``)."""

    target: object
    draft: object
    tokenizer: object
    eos: frozenset = field(default_factory=frozenset)
    description: str = ""
    backend: object = None


class ModelLoadError(Exception):
    """One model of a pair cannot be loaded.

    Attributes:
        role: ``"target"`` or ``"draft"``.
        spec: the model as given (alias, folder, ``.gguf`` file or hub id).
    The loader's error (an OSError or ValueError of ``weights.load_causal_lm``) is the
    ``__cause__``.
    """

    def __init__(self, role: str, spec: str, cause: BaseException):
        super().__init__(f"{role} {spec}: cannot load the model: {cause}")
        self.role, self.spec = role, spec


_SPECIAL_IDS = ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id")


def _tokens_below(tokenizer, V: int) -> dict[int, str]:
    """id → token string of the tokenizer's ``get_vocab()``, ids below ``V`` only."""
    return {int(i): token for token, i in tokenizer.get_vocab().items() if int(i) < V}


def check_same_tokenizer(draft_tokenizer, target_tokenizer, V: int, draft: str = "draft",
                         target: str = "target") -> None:
    """Check that draft and target share one tokenizer, not only the number of logits:
    speculative decoding compares their probabilities id by id, so an id must stand for the
    same string in both.

    Compared: the ``get_vocab()`` mappings (token string → id) restricted to ids below ``V``
    (ids from ``V`` up have no logit; an id below ``V`` that only one tokenizer has is a
    difference), then the ``eos``/``bos``/``pad``/``unk`` token ids and the set of
    ``all_special_ids``.

    Args:
        draft_tokenizer, target_tokenizer: objects with ``get_vocab()`` (transformers
            tokenizers); the special-id attributes are read when present.
        V: the shared number of logits (``weights.check_same_vocabulary``).
        draft, target: the models' names, for the message.
    Raises:
        ValueError: the first token id below ``V`` whose string differs (or that only one of
            them has), or the first special id that differs; the message names draft and
            target.
    """
    what = f"the tokenizers of draft {draft} and target {target} differ"
    d_tokens, t_tokens = _tokens_below(draft_tokenizer, V), _tokens_below(target_tokenizer, V)
    if d_tokens != t_tokens:
        i = min(i for i in d_tokens.keys() | t_tokens.keys() if d_tokens.get(i) != t_tokens.get(i))
        d_tok, t_tok = (repr(m[i]) if i in m else "no token" for m in (d_tokens, t_tokens))
        raise ValueError(f"{what} at token id {i:,}: {d_tok} in the draft's, {t_tok} in the "
                         "target's; speculative decoding needs one tokenizer (the same id for "
                         "the same string)")
    for name in _SPECIAL_IDS:
        d_id, t_id = getattr(draft_tokenizer, name, None), getattr(target_tokenizer, name, None)
        if d_id != t_id:
            raise ValueError(f"{what}: {name} is {d_id} in the draft's, {t_id} in the target's")
    d_ids, t_ids = (sorted(set(getattr(tok, "all_special_ids", None) or ()))
                    for tok in (draft_tokenizer, target_tokenizer))
    if d_ids != t_ids:
        raise ValueError(f"{what}: special token ids {d_ids} in the draft's, {t_ids} in the target's")


def _load_one(role: str, spec: str, dtype: str, device=None):
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    try:
        return load_causal_lm(spec, dtype) if device is None else load_causal_lm(spec, dtype, device)
    except (OSError, ValueError) as err:
        raise ModelLoadError(role, spec, err) from err


def load_pair(target: str = "target", draft: str | None = "draft",
              dtype: str = "bfloat16", draft_quant: str = "none", device=None) -> ModelPair:
    """Load target and draft (``weights.load_causal_lm``) and check that they fit together.

    Args:
        target, draft: model specs (``weights.load_causal_lm``); ``draft`` None loads the
            target only (plain autoregressive sampling) and checks nothing.
        dtype: name of the floating dtype of the weights.
        draft_quant: "none", or "int8": the draft is loaded in float32 and its linear layers
            quantised (``draft_quant.quantize_draft``; lossless: the verifier gets the
            quantised draft's own probabilities); the target keeps ``dtype``.
        device: where to load both (default: ``weights.load_causal_lm``'s, the CPU).
    Returns:
        ModelPair (its tokenizer is the target's).
    Raises:
        ModelLoadError: a model cannot be loaded; it names the role and the spec, the
            loader's error is its ``__cause__``.
        ValueError: draft and target have different numbers of logits
            (``weights.check_same_vocabulary``) or different tokenizers
            (``check_same_tokenizer``: the first differing token id or special id).
    """
    from spectr_gbv.gpu_backend.models.eos import eos_token_ids
    from spectr_gbv.gpu_backend.models.weights import MODEL_ALIASES, check_same_vocabulary

    from spectr_gbv.gpu_backend.models.draft_quant import QUANT_MODES, quantize_draft

    if draft_quant not in QUANT_MODES:
        raise ValueError(f"draft_quant must be one of {QUANT_MODES}, got {draft_quant!r}")
    t_model, tokenizer = _load_one("target", target, dtype, device)
    d_model = None
    if draft is not None:
        d_model, d_tokenizer = _load_one("draft", draft, "float32" if draft_quant == "int8" else dtype, device)
        d_model = quantize_draft(d_model, draft_quant)
        V = check_same_vocabulary(d_model, t_model)
        check_same_tokenizer(d_tokenizer, tokenizer, V, draft, target)
    return ModelPair(t_model, d_model, tokenizer, eos_token_ids(t_model, tokenizer),
                     f"target {MODEL_ALIASES.get(target, target)}, "
                     f"draft {MODEL_ALIASES.get(draft, draft)}"
                     + (" (int8 dynamic)" if draft is not None and draft_quant == "int8" else "")
                     + f", {dtype}")


def set_threads(threads: int | None) -> None:
    """torch's intra-op threads for a run: ``threads``, or every core when None."""
    import os

    import torch

    torch.set_num_threads(threads or os.cpu_count() or 1)
