"""Reference laws for ``certify_generate``: the target's processed law before each token of a
sampled continuation, from ONE teacher-forced forward of prompt + continuation.

``TransformersReference``: a transformers causal LM (the same weights the engine runs, or the
same model object); logits → float64 softmax at temperature T, then top-k / top-p as
transformers' warpers apply them (``gpu_backend.decoding.sampling.probabilities``' rules).
``LlamaCppReference``: a ``llama_cpp.Llama`` with ``logits_all=True`` (the engine itself,
speculation off: one ``eval`` of the whole sequence from an empty cache).
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.certify.engine.generate import softmax64


def _truncate(p: np.ndarray, top_k: int | None, top_p: float | None) -> np.ndarray:
    """Rows of ``p`` [n, V] after top-k (ties with the k-th kept) and top-p (the smallest
    set of most probable tokens reaching mass top_p, as transformers' TopPLogitsWarper keeps
    it), renormalised."""
    out = p.copy()
    if top_k:
        kth = -np.sort(-out, axis=-1)[:, top_k - 1:top_k]
        out[out < kth] = 0.0
    if top_p is not None and top_p < 1.0:
        order = np.argsort(out, axis=-1, kind="stable")  # ascending
        sorted_p = np.take_along_axis(out, order, -1)
        cum = np.cumsum(sorted_p, axis=-1)
        drop = cum <= 1 - top_p
        drop[:, -1] = False
        np.put_along_axis(out, order, np.where(drop, 0.0, sorted_p), -1)
    return out / out.sum(axis=-1, keepdims=True)


class TransformersReference:
    """``laws(prompt_ids, tokens)`` from a transformers causal LM.

    Args:
        model: transformers causal LM (eval mode; any device).
        temperature: T > 0 the engine samples at.
        top_k, top_p: the engine's truncation (None / 0 / 1.0: off).
    """

    def __init__(self, model, temperature: float, top_k: int | None = None, top_p: float | None = None):
        self.model, self.temperature, self.top_k, self.top_p = model, float(temperature), top_k, top_p

    def logits(self, prompt_ids, tokens) -> np.ndarray:
        """float32 logits [n, V] before each token of ``tokens`` (one uncached forward)."""
        import torch

        ids = list(prompt_ids) + list(tokens)
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            out = self.model(torch.tensor([ids], device=device)).logits[0]
        start = len(prompt_ids) - 1
        return out[start:start + len(tokens)].float().cpu().numpy()

    def __call__(self, prompt_ids, tokens) -> np.ndarray:
        p = softmax64(self.logits(prompt_ids, tokens), self.temperature)
        if self.top_k or (self.top_p is not None and self.top_p < 1.0):
            p = _truncate(p, self.top_k, self.top_p)
        return p

    def logits_many(self, items, batch: int = 8) -> list[np.ndarray]:
        """float64 logits [n, V] before each token of each ``(prompt_ids, tokens)`` of ``items``;
        continuations of one prompt length share a forward (right padding, which a causal model's
        earlier rows do not see).  An empty continuation gives a [0, 1] array."""
        import torch

        out: list = [np.zeros((0, 1))] * len(items)
        groups: dict = {}
        for i, (prompt, toks) in enumerate(items):
            if len(toks):
                groups.setdefault(len(prompt), []).append(i)
        device = next(self.model.parameters()).device
        for P, idx in groups.items():
            for start in range(0, len(idx), batch):
                chunk = idx[start:start + batch]
                width = max(P + len(items[i][1]) for i in chunk)
                ids = torch.zeros((len(chunk), width), dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for r, i in enumerate(chunk):
                    seq = [int(t) for t in items[i][0]] + [int(t) for t in items[i][1]]
                    ids[r, :len(seq)] = torch.tensor(seq)
                    mask[r, :len(seq)] = 1
                with torch.inference_mode():
                    logits = self.model(ids.to(device), attention_mask=mask.to(device)).logits
                for r, i in enumerate(chunk):
                    n = len(items[i][1])
                    out[i] = logits[r, P - 1:P - 1 + n].double().cpu().numpy()
        return out

    def many(self, items, batch: int = 8) -> list[np.ndarray]:
        """``[self(prompt, tokens) for prompt, tokens in items]``, batched (``logits_many``)."""
        out = []
        for z in self.logits_many(items, batch):
            if z.shape[0] == 0:
                out.append(z)
                continue
            p = softmax64(z, self.temperature)
            if self.top_k or (self.top_p is not None and self.top_p < 1.0):
                p = _truncate(p, self.top_k, self.top_p)
            out.append(p)
        return out


class LlamaCppReference:
    """``laws(prompt_ids, tokens)`` from a ``llama_cpp.Llama`` built with ``logits_all=True``
    (speculation off): its cache is reset and the whole sequence evaluated in one call.

    Raises:
        ValueError: a ``Llama`` without ``logits_all``.

    Args:
        llama: ``llama_cpp.Llama`` (logits_all=True).
        temperature: T > 0; top_k, top_p as in ``TransformersReference`` (llama.cpp keeps ties
            with the k-th the same way on these models' float32 logits).
    """

    def __init__(self, llama, temperature: float, top_k: int | None = None, top_p: float | None = None):
        if not getattr(llama, "_logits_all", False):
            raise ValueError("llama: the reference needs a Llama built with logits_all=True")
        self.llama, self.temperature, self.top_k, self.top_p = llama, float(temperature), top_k, top_p

    def logits(self, prompt_ids, tokens) -> np.ndarray:
        ids = list(prompt_ids) + list(tokens)
        self.llama.reset()
        self.llama._ctx.kv_cache_clear()
        self.llama.eval(ids)
        start = len(prompt_ids) - 1
        rows = np.array(self.llama.scores[start:start + len(tokens)], dtype=np.float32)
        self.llama.reset()
        return rows

    def __call__(self, prompt_ids, tokens) -> np.ndarray:
        p = softmax64(self.logits(prompt_ids, tokens), self.temperature)
        if self.top_k or (self.top_p is not None and self.top_p < 1.0):
            p = _truncate(p, self.top_k, self.top_p)
        return p
