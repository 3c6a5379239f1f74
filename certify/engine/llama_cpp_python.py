"""llama-cpp-python's own speculative ``Llama.generate`` as a black box.

``Llama(draft_model=LlamaPromptLookupDecoding(...))``: its ``generate`` evaluates the sampled
token and the draft tokens in one batch, samples each position from its own sampler chain and
keeps the drafts equal to its samples, cutting the cache back with ``kv_cache_seq_rm`` on the
first mismatch.  Its sampler's defaults (top_k = 40, top_p = 0.95, min_p = 0.05, temp = 0.8)
are overridden here: top_k = 0 (llama.cpp's top-k is off for k ≤ 0), top_p = 1, min_p = 0,
typical_p = 1, repeat/frequency/presence penalties off, so the law is softmax(logits / T); the
reference (``references.LlamaCppReference``: the same GGUF without speculation) applies the same.

The adapter calls ``Llama.generate`` itself (not ``create_completion``): no EOS stop (a fixed
number of tokens), one ``set_seed`` per sample; the prompt's cache prefix is reused between
samples as the library does.
"""

from __future__ import annotations


# llama-cpp-python's own sampler defaults a user gets without overriding them
LIBRARY_DEFAULTS = dict(top_k=40, top_p=0.95, min_p=0.05, temp=0.8)


def load_llama(path, draft=None, logits_all: bool = False, n_ctx: int = 512, threads: int | None = None,
               cls=None):
    """A ``llama_cpp.Llama`` on the GGUF ``path`` (quiet, CPU).

    Args:
        path: GGUF file.
        draft: a ``LlamaDraftModel`` (e.g. ``LlamaPromptLookupDecoding``) or None.
        logits_all: keep every position's logits (reference use).
        threads: CPU threads (default 1: llama.cpp's threads spin while they wait, which on a
            shared machine costs more than a second thread gains).
        cls: a subclass of ``Llama`` (negative controls), default ``Llama``.
    Where llama.cpp was built with AMX kernels the weights load without extra buffer types
    (``llamacpp.model.default_extra_buffers``).
    """
    from unittest import mock

    import llama_cpp.llama_cpp as lib
    from llama_cpp import Llama

    from spectr_gbv.gpu_backend.llamacpp.model import default_extra_buffers

    cls = cls or Llama
    make = lambda: cls(model_path=str(path), n_ctx=n_ctx, n_threads=threads or 1,  # noqa: E731
                       n_threads_batch=threads or 1, logits_all=logits_all, draft_model=draft, verbose=False,
                       seed=0)
    if default_extra_buffers():
        return make()
    # Llama takes no use_extra_bufts: its model parameters come from llama_model_default_params,
    # patched for the call so that the weights stay out of the AMX buffer that crashes multi-token
    # batches (docs/upstream/llamacpp_amx_segfault.md; the project's own backend does the same)
    original = lib.llama_model_default_params

    def without_extra_buffers():
        params = original()
        params.use_extra_bufts = False
        return params

    with mock.patch.object(lib, "llama_model_default_params", without_extra_buffers):
        return make()


def prompt_lookup(max_ngram_size: int = 2, num_pred_tokens: int = 10):
    """``llama_cpp.llama_speculative.LlamaPromptLookupDecoding`` (n-gram drafts from the context)."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return LlamaPromptLookupDecoding(max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens)


class LlamaCppPythonEngine:
    """``sample(prompt_ids, n_new, seed)``: ``n_new`` tokens of ``llama.generate`` at temperature T.

    Args:
        llama: a ``llama_cpp.Llama`` (with or without ``draft_model``).
        temperature: T > 0; top_k, top_p, min_p, repeat_penalty: the sampler's settings
            (defaults: off).
    Attributes:
        drafted: draft tokens proposed since the last ``stats()``, counted from the draft
            model's proposals (the draft model is wrapped; the library is not touched).
        log: the last sample's drafts, ``(start, ids)``: the draft proposed after emitted token
            start − 1 (``drafts()``; ``oracle.acceptance_test`` tests them).
    """

    def __init__(self, llama, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, repeat_penalty: float = 1.0):
        self.llama = llama
        self.kw = dict(temp=float(temperature), top_k=top_k, top_p=top_p, min_p=min_p, typical_p=1.0,
                       repeat_penalty=repeat_penalty, frequency_penalty=0.0, presence_penalty=0.0)
        self.drafted = 0
        self.samples = 0
        self.log: list = []
        self._context: list = []
        self.gives_drafts = llama.draft_model is not None  # certify_generate(drafts=...) applies
        if llama.draft_model is not None:
            inner = llama.draft_model
            engine = self

            class Counting(type(inner)):  # records the drafts the library asked for
                def __call__(self, input_ids, *a, **k):
                    out = inner(input_ids, *a, **k)
                    engine.drafted += len(out)
                    engine._context.append((len(input_ids), [int(t) for t in out]))
                    return out
            counting = Counting.__new__(Counting)
            counting.__dict__.update(inner.__dict__)
            llama.draft_model = counting

    def __call__(self, prompt_ids, n_new: int, seed: int) -> list[int]:
        self.llama.set_seed(int(seed) % (2**32))
        self._context = []
        out = []
        for tok in self.llama.generate(list(prompt_ids), **self.kw):
            out.append(int(tok))
            if len(out) == n_new:
                break
        self.samples += 1
        # a draft made from the prompt and c − len(prompt) emitted tokens starts at that index
        self.log = [(c - len(prompt_ids), ids) for c, ids in self._context]
        return out

    def drafts(self) -> list:
        """The last sample's drafts, ``(start, ids)`` (None-free; empty without a draft model)."""
        return list(self.log)

    def stats(self) -> dict:
        """Draft tokens proposed per sample since the last call (llama-cpp-python reports no
        acceptance count; drafts proposed is what its draft model was asked for)."""
        out = {"drafted/sample": self.drafted / max(1, self.samples)} if self.llama.draft_model else {}
        self.drafted, self.samples = 0, 0
        return out
