"""The llama.cpp backend: two ``LlamaCppModel``s (the GGUF files as they are, on llama.cpp's
kernels) behind ``decoding.backend.Backend``, and the check that two of them fit together
(``check_llamacpp_pair``): the draft tree fed as llama.cpp sequences
(``llamacpp.layout``), plain sampling by inverse CDF, and the auto-configuration's
measurements (``llamacpp.costs``).  Handed to the engine by the pair that loaded the models
(``llamacpp.pair.load_llamacpp_pair``: ``ModelPair.backend``).
"""

from __future__ import annotations

import torch

from spectr_gbv.gpu_backend.decoding.backend import Backend, Layout
from spectr_gbv.gpu_backend.llamacpp import costs
from spectr_gbv.gpu_backend.llamacpp.layout import LlamaCppLayout, draw_inverse_cdf
from spectr_gbv.gpu_backend.llamacpp.model import LlamaCppModel


def check_llamacpp_pair(draft, target) -> int:
    """Check that two ``LlamaCppModel``s can draft for each other: the same logits axis V, the
    same token text at every id and the same EOS / BOS / EOT ids.

    Returns:
        V (int).
    Raises:
        ValueError: draft is not a llama.cpp model, the axes differ, or the first id whose
            text (or a special id) differs, naming both models.
    """
    if not isinstance(draft, LlamaCppModel):
        raise ValueError("target is a llama.cpp model but draft is not: both must run on one backend")
    if draft.V != target.V:
        raise ValueError(f"draft {draft.name} has {draft.V:,} logits but target {target.name} has "
                         f"{target.V:,}: speculative decoding needs one vocabulary")
    if draft.path != target.path:  # one file is one vocabulary
        d_vocab, t_vocab = draft.vocabulary(), target.vocabulary()
        if d_vocab != t_vocab:
            i = next(i for i, (a, b) in enumerate(zip(d_vocab, t_vocab)) if a != b)
            raise ValueError(f"the tokenizers of draft {draft.name} and target {target.name} differ "
                             f"at token id {i:,}: {d_vocab[i]!r} in the draft's, {t_vocab[i]!r} in "
                             "the target's; speculative decoding needs one tokenizer")
        d_special, t_special = draft.special_ids(), target.special_ids()
        if d_special != t_special:
            raise ValueError(f"the tokenizers of draft {draft.name} and target {target.name} differ: "
                             f"special ids {d_special} in the draft's, {t_special} in the target's")
    return target.V


def _check_llamacpp(model, role: str) -> None:
    if not isinstance(model, LlamaCppModel):
        raise ValueError(f"{role} model ({type(model).__name__}) is not a llama.cpp model: the "
                         "llama.cpp backend runs LlamaCppModels (hand a transformers model the "
                         "torch backend, the engine's default)")


class LlamaCppBackend(Backend):
    """``LlamaCppModel``s on the CPU (one llama.cpp context each, ``n_ctx`` cells, K ≤
    ``n_seq_max`` sequences)."""

    name = "llama.cpp"
    refeeds_accepted = True  # K > 1: the accepted tokens are fed again (llamacpp.layout)

    def check_pair(self, target, draft, rule: str, custom_verifier: bool) -> int:
        _check_llamacpp(target, "target")
        return check_llamacpp_pair(draft, target)

    def device(self, model) -> torch.device:
        return torch.device("cpu")

    def check_length(self, target, draft, positions: int) -> None:
        for role, m in (("target", target), ("draft", draft)):
            if positions > m.n_ctx:
                raise ValueError(f"{role} model's llama.cpp cache ({m.n_ctx} cells) is too short "
                                 f"for this generation (up to {positions} positions: prompt, new "
                                 "tokens and one iteration's draft tree)")

    def layout(self, target, draft, sampling, draft_sampling, K, L, device, stop, layout,
               share_prefixes) -> Layout:
        # one layout: the tree as llama.cpp sequences, always sharing prefixes
        return LlamaCppLayout(target, draft, sampling, draft_sampling, K, L, device, stop)

    def vocab_size(self, model) -> int:
        _check_llamacpp(model, "target")
        return model.V

    def plain_logits(self, model, prompt_tokens: int, max_new_tokens: int):
        if prompt_tokens + max_new_tokens > model.n_ctx:
            raise ValueError(f"target model's llama.cpp cache ({model.n_ctx} cells) is too short for "
                             f"{prompt_tokens} prompt and {max_new_tokens} new tokens")
        model.clear()  # sequence 0, fed one token per call after the prompt
        fed = 0

        def next_logits(pending: torch.Tensor) -> torch.Tensor:
            nonlocal fed
            tokens = pending[0].tolist()
            logits = model.forward_last(tokens, fed)
            fed += len(tokens)
            return logits[None]
        return next_logits

    def draw(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return draw_inverse_cdf(rows, gen)

    def forward_costs(self, model, context_ids, ns, sampling, timer, repeats: int):
        return costs.forward_costs(model, context_ids, ns, sampling, timer, repeats)

    def teacher_forced_rows(self, model, prompt_ids, continuation, sampling) -> torch.Tensor:
        return costs.teacher_forced_rows(model, prompt_ids, continuation, sampling)

    def device_label(self, model) -> str:
        # the build (version, CPU features, weight buffers) is part of the device
        return f"cpu:llama.cpp ({model.build})"


LLAMACPP = LlamaCppBackend()
