"""transformers' own ``generate`` with speculation, as a black box: assisted generation with an
``assistant_model`` (speculative sampling of the assistant's candidates) or with
``prompt_lookup_num_tokens`` (n-gram candidates from the context, kept while equal to the
target's samples).

The generation config is built whole, so that no default applies silently: do_sample, the
temperature T, top_k = 0 (transformers' ``GenerationConfig`` and many models' generation
configs set top_k = 50), top_p = 1, min_p / typical_p / repetition penalty off, no EOS stop (a
fixed number of tokens; the reference law keeps EOS as an ordinary token).  Seeds:
``torch.manual_seed(seed)`` before each call (transformers draws from torch's global
generator).
"""

from __future__ import annotations

import contextlib


def generation_config(model, n_new: int, temperature: float, top_k: int = 0, top_p: float = 1.0, **extra):
    """A ``GenerationConfig`` with every sampling knob set (module doc)."""
    from transformers import GenerationConfig

    pad = model.config.pad_token_id
    if pad is None:
        pad = 0
    return GenerationConfig(do_sample=True, temperature=float(temperature), top_k=top_k, top_p=top_p,
                            min_p=None, typical_p=1.0, repetition_penalty=1.0, max_new_tokens=n_new,
                            min_new_tokens=0, eos_token_id=None, pad_token_id=pad, bos_token_id=None,
                            num_beams=1, **extra)


class TransformersGenerateEngine:
    """``sample(prompt_ids, n_new, seed)`` = ``model.generate(...)``'s new tokens.

    Args:
        model: the target (transformers causal LM).
        temperature: T; top_k, top_p: the truncation (default off).
        assistant_model: a draft model (assisted generation), or None.
        prompt_lookup_num_tokens: n-gram candidate length (prompt lookup), or None.
        hook: optional context-manager factory entered around each call (negative controls).
    Attributes:
        gives_drafts: True with prompt lookup: ``drafts()`` then gives the last sample's
            candidates ``(start, ids)``, recorded by wrapping
            ``PromptLookupCandidateGenerator.get_candidates`` for the call (a reporting wrapper:
            same arguments, same result), for ``oracle.acceptance_test`` (transformers keeps a
            prompt-lookup candidate exactly when it equals its sample).
    """

    def __init__(self, model, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 assistant_model=None, prompt_lookup_num_tokens: int | None = None, hook=None):
        self.model, self.T, self.top_k, self.top_p = model, float(temperature), top_k, top_p
        self.assistant_model = assistant_model
        self.prompt_lookup_num_tokens = prompt_lookup_num_tokens
        self.hook = hook
        self.calls = 0
        self.new = 0
        self._active = False
        self.gives_drafts = prompt_lookup_num_tokens is not None
        self._drafts: list = []
        self._count_calls()

    def _count_calls(self):
        """Target forward calls per sample (a forward pre-hook: 1 per call of the target)."""
        def count(module, args, kwargs):
            self.calls += self._active
        self.model.register_forward_pre_hook(count, with_kwargs=True)

    def __call__(self, prompt_ids, n_new: int, seed: int) -> list[int]:
        import torch

        cfg = generation_config(self.model, n_new, self.T, self.top_k, self.top_p)
        extra = {}
        if self.assistant_model is not None:
            extra["assistant_model"] = self.assistant_model
        if self.prompt_lookup_num_tokens is not None:
            extra["prompt_lookup_num_tokens"] = self.prompt_lookup_num_tokens
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        torch.manual_seed(int(seed))
        self._active = True
        self._drafts = []
        try:
            with (self.hook() if self.hook else contextlib.nullcontext()), self._recording(len(prompt_ids)), \
                    torch.inference_mode():
                out = self.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg,
                                          **extra)
        finally:
            self._active = False
        new = out[0, ids.shape[1]:].tolist()
        self.new += len(new)
        return new

    @contextlib.contextmanager
    def _recording(self, prompt_len: int):
        """Record the prompt-lookup candidates proposed during one call (class doc)."""
        if not self.gives_drafts:
            yield
            return
        from transformers.generation.candidate_generator import PromptLookupCandidateGenerator as G

        original = G.get_candidates
        drafts = self._drafts

        def get_candidates(gen, input_ids, *a, **k):
            out = original(gen, input_ids, *a, **k)
            cur = input_ids.shape[-1]
            cand = out[0][0, cur:].tolist()
            if cand:
                drafts.append((cur - prompt_len, [int(t) for t in cand]))
            return out
        G.get_candidates = get_candidates
        try:
            yield
        finally:
            G.get_candidates = original

    def drafts(self) -> list:
        """The last sample's prompt-lookup candidates ``(start, ids)`` (class doc)."""
        return list(self._drafts)

    def stats(self) -> dict:
        """Target forward calls per sample and tokens per target call (after the prefill call:
        1 without speculation) since the last call."""
        out = {"target calls": float(self.calls)}
        if self.calls > 1:
            out["tokens/call"] = self.new / (self.calls - 1) if self.calls > 1 else float("nan")
        self.calls, self.new = 0, 0
        return out
