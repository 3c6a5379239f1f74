"""Which token ids end a generation, for a transformers model (and its tokenizer)."""

from __future__ import annotations


# End-of-text tokens stopped on besides the model's configured EOS: Qwen's GGUF generation
# config lists only <|im_end|>, but the model also ends documents with <|endoftext|>.
EXTRA_EOS_TOKENS = ("<|endoftext|>", "<|im_end|>")


def eos_token_ids(model, tokenizer=None) -> frozenset[int]:
    """Token ids that end a generation: the model's generation-config EOS id(s), the
    tokenizer's EOS, and ``EXTRA_EOS_TOKENS`` when the tokenizer has them.

    Returns:
        frozenset of ints (may be empty for a model without any).
    """
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif eos is not None:
        ids.update(int(e) for e in eos)
    if tokenizer is not None:
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        vocab = tokenizer.get_vocab()
        ids.update(int(vocab[t]) for t in EXTRA_EOS_TOKENS if t in vocab)
    return frozenset(ids)
