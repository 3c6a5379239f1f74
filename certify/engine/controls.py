"""Negative controls: engines wrapped (subclassed or hooked at run time, never edited) so that
they carry one known defect a certificate must catch; and the lossless controls that must pass.

llama-cpp-python (``llama_class(defect)``: a subclass of ``llama_cpp.Llama``):
- "draft-kept": the draft's token is emitted whenever a draft exists at that position, even
  where the sampler drew another token (acceptance without the equality check);
- "cache-off-by-one" (not in ``modes``: it aborts the process, see below): after a rejection ``kv_cache_seq_rm`` cuts one position too late and the
  position counter follows (the rejected draft's cell stays in the context, the next token is
  written after it; a cut whose positions then collide is refused by llama.cpp itself);
- "logits-position": the token after position i is sampled from the logits row of position i − 1
  when the last batch has it (an off-by-one read of the ``logits_all`` rows; reading row i + 1
  instead, and row i − 1 as here, made llama.cpp abort the process, ``GGML_ASSERT(logits !=
  nullptr)`` in llama-sampler.cpp; not in ``modes``).  Both this and "cache-off-by-one" abort:
  ``Llama.generate`` keeps its sample index in a local variable, so a wrapper that moves the
  position counter or the row read makes it ask for a row outside the last batch.  They are kept
  as the starting point of a working control, not run;
and by configuration (no wrapper needed): "temperature-1.1" (the engine samples at 1.1·T, the
reference at T), "penalty" (repeat_penalty = 1.3 applied on the engine side only).

transformers (``transformers_hook(defect, model)``, a context manager):
- "logits-position": a forward hook shifts the target's logits by one row in every call of
  more than one token (the verification of the candidates; the prefill's last row is kept);
- "draft-kept": ``transformers.generation.utils._speculative_sampling`` replaced for the call
  by one that accepts every candidate (assistant-model speculation).

ours (``planted_verifier``): a planted wrong rule (the real verifier with one deliberate change).
"""

from __future__ import annotations

import contextlib

LLAMA_DEFECTS = ("draft-kept", "cache-off-by-one", "logits-position")


def llama_class(defect: str):
    """A subclass of ``llama_cpp.Llama`` with ``defect`` (one of ``LLAMA_DEFECTS``).

    Raises:
        ValueError: unknown defect.
    """
    from llama_cpp import Llama

    if defect not in LLAMA_DEFECTS:
        raise ValueError(f"defect must be one of {LLAMA_DEFECTS}, got {defect!r}")

    if defect == "draft-kept":
        class DraftKept(Llama):
            def sample(self, *args, idx=None, **kw):
                token = super().sample(*args, idx=idx, **kw)
                if idx is not None and idx + 1 < self.n_tokens:  # a draft sits at idx + 1
                    return int(self._input_ids[idx + 1])
                return token
        return DraftKept

    if defect == "logits-position":
        class LogitsPosition(Llama):
            """The token after position idx is sampled from row idx − 1 whenever that row is in
            the last evaluated batch (a verification batch of token + drafts)."""

            def eval(self, tokens):
                self._batch_start = self.n_tokens
                super().eval(tokens)

            def sample(self, *args, idx=None, **kw):
                if idx is not None and idx - 1 >= getattr(self, "_batch_start", self.n_tokens):
                    idx = idx - 1
                return super().sample(*args, idx=idx, **kw)
        return LogitsPosition

    class CacheOffByOne(Llama):
        """After a rejection the cache is cut one position late: the rejected draft's cell
        stays and the next token is written after it (the context keeps a token the output
        does not have).  Calls at or below the prompt (prefix reuse) are left alone."""

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._floor, self._end = 0, 0
            inner = self._ctx.kv_cache_seq_rm

            def off_by_one(seq_id, p0, p1):
                if self._floor < p0 < self._end:
                    ok = inner(seq_id, p0 + 1, p1)
                    self.n_tokens = self._end = p0 + 1
                    return ok
                return inner(seq_id, p0, p1)
            self._ctx.kv_cache_seq_rm = off_by_one

        def generate(self, tokens, *a, **k):
            self._floor = len(tokens)
            yield from super().generate(tokens, *a, **k)

        def eval(self, tokens):
            super().eval(tokens)
            self._end = self.n_tokens
    return CacheOffByOne


TRANSFORMERS_DEFECTS = ("logits-position", "draft-kept")


@contextlib.contextmanager
def transformers_hook(defect: str, model):
    """Within the ``with`` block, ``model`` (the target) or transformers' speculative sampling
    carries ``defect`` (one of ``TRANSFORMERS_DEFECTS``); restored on exit.

    Raises:
        ValueError: unknown defect.
    """
    if defect == "logits-position":
        def shift(module, args, output):
            logits = output.logits
            if logits.shape[1] > 1:
                shifted = logits.clone()
                shifted[:, :-1] = logits[:, 1:]
                output.logits = shifted
            return output
        handle = model.register_forward_hook(shift)
        try:
            yield
        finally:
            handle.remove()
        return
    if defect == "draft-kept":
        import torch
        from transformers.generation import utils as gen_utils

        original = gen_utils._speculative_sampling

        def accept_all(candidate_input_ids, candidate_logits, candidate_length, new_logits, *a, **k):
            """Every candidate kept; the bonus token from the target's row after them."""
            kept = candidate_input_ids[:, -candidate_length:]
            probs = new_logits[0, candidate_length].softmax(dim=-1)
            bonus = torch.multinomial(probs, num_samples=1)[None, :]
            return torch.cat((kept, bonus), dim=-1), torch.tensor(candidate_length)
        gen_utils._speculative_sampling = accept_all
        try:
            yield
        finally:
            gen_utils._speculative_sampling = original
        return
    raise ValueError(f"defect must be one of {TRANSFORMERS_DEFECTS}, got {defect!r}")


def planted_verifier(name: str):
    """(base rule, verifier) of a planted wrong rule (``registry.planted()``, e.g. the SD whose
    coins share one uniform): our engine's negative control, run with ``verifier=``."""
    from spectr_gbv.reference.rules import registry

    planted = registry.planted()
    if name not in planted:
        raise ValueError(f"name must be a planted rule ({sorted(planted)}), got {name!r}")
    from spectr_gbv.certify.planted import planted_verifier

    return planted[name].base, planted_verifier(name)
