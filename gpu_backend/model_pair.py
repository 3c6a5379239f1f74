"""Loading a draft/target pair: the one place that loads the models of a run (the benchmark,
``spectr-gbv generate``/``bench``/``report`` through ``bench_cli.load_models``, the scripts in
benchmarks/)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelPair:
    """Loaded target, draft (None when only the target was asked for), the target's tokenizer,
    and the EOS ids (``engine.eos_token_ids``)."""

    target: object
    draft: object
    tokenizer: object
    eos: frozenset = field(default_factory=frozenset)
    description: str = ""


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


def _load_one(role: str, spec: str, dtype: str):
    from .weights import load_causal_lm

    try:
        return load_causal_lm(spec, dtype)
    except (OSError, ValueError) as err:
        raise ModelLoadError(role, spec, err) from err


def load_pair(target: str = "target", draft: str | None = "draft",
              dtype: str = "bfloat16") -> ModelPair:
    """Load target and draft (``weights.load_causal_lm``) and check that they fit together.

    Args:
        target, draft: model specs (``weights.load_causal_lm``); ``draft`` None loads the
            target only (plain autoregressive sampling) and checks nothing.
        dtype: name of the floating dtype of the weights.
    Returns:
        ModelPair (its tokenizer is the target's).
    Raises:
        ModelLoadError: a model cannot be loaded; it names the role and the spec, the
            loader's error is its ``__cause__``.
        ValueError: draft and target have different numbers of logits
            (``weights.check_same_vocabulary``).
    """
    from .engine import eos_token_ids
    from .weights import MODEL_ALIASES, check_same_vocabulary

    t_model, tokenizer = _load_one("target", target, dtype)
    d_model = None
    if draft is not None:
        d_model, _ = _load_one("draft", draft, dtype)
        check_same_vocabulary(d_model, t_model)
    return ModelPair(t_model, d_model, tokenizer, eos_token_ids(t_model, tokenizer),
                     f"target {MODEL_ALIASES.get(target, target)}, "
                     f"draft {MODEL_ALIASES.get(draft, draft)}, {dtype}")
