"""Loading a draft/target pair: the one place that loads the two models of a run."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelPair:
    """Loaded target, draft, tokenizer, and the EOS ids (``engine.eos_token_ids``)."""

    target: object
    draft: object
    tokenizer: object
    eos: frozenset = field(default_factory=frozenset)
    description: str = ""


def load_pair(target: str = "target", draft: str = "draft", dtype: str = "bfloat16") -> ModelPair:
    """Load draft and target (``weights.load_causal_lm``) and check their vocabularies.

    Raises:
        ValueError: vocabulary mismatch (``weights.check_same_vocabulary``).
    """
    from .engine import eos_token_ids
    from .weights import MODEL_ALIASES, check_same_vocabulary, load_causal_lm

    t_model, tokenizer = load_causal_lm(target, dtype)
    d_model, _ = load_causal_lm(draft, dtype)
    check_same_vocabulary(d_model, t_model)
    return ModelPair(t_model, d_model, tokenizer, eos_token_ids(t_model, tokenizer),
                     f"target {MODEL_ALIASES.get(target, target)}, "
                     f"draft {MODEL_ALIASES.get(draft, draft)}, {dtype}")
