"""The deployment certifier's references: where each sampled token's target law comes from.

``parse_reference`` reads the ``--reference`` value:

- ``self`` — the deployment's own prompt log-probabilities (``ServerReference`` on the same
  server): prompt + continuation sent back as a prompt, its top-k log-probabilities at each
  position of the continuation (``servers``).  Needs no local weights; the laws are top-k
  coarsened (``oracle.sequence_records``).
- ``endpoint:URL`` — the same, from a second deployment (speculation off, or another copy).
- ``hf:NAME_OR_PATH`` — a local transformers model (``models.weights.load_causal_lm``: an embedded
  model, a folder, a ``.gguf`` file): the whole law at the sampling temperature, many
  continuations per forward (``HFReference.rows_many``).
- ``gguf:PATH`` — a local GGUF file on llama.cpp (llama-cpp-python, ``logits_all``): the whole law.

Every reference returns, per continuation, ``ReferenceRows``: either the top-k view
(``servers.TopLaws``) or whole laws (float64 [n, V]), plus the reference's raw log-probability
(temperature 1) of each sampled token where it knows it, for the check of the engine's reported
log-probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spectr_gbv.oracle.sequence_records import records_from_laws, records_from_top


@dataclass
class ReferenceRows:
    """One continuation's reference: ``top`` (``servers.TopLaws``) or ``laws`` (float64 [n, V]);
    ``raw``: log p(x_t) at temperature 1 per token (None where unknown); ``short``: positions
    with fewer than k alternatives."""

    top: object = None
    laws: np.ndarray | None = None
    raw: list | None = None
    short: int = 0

    def records(self, tokens, draft_laws=None) -> list[dict]:
        """Per-token records (``oracle.sequence_records``)."""
        if self.laws is not None:
            return records_from_laws(tokens, self.laws, draft_laws)
        return records_from_top(tokens, self.top.top_ids, self.top.top_logprobs, self.top.token_logprobs)


def parse_reference(value: str) -> tuple[str, str]:
    """``(kind, argument)`` of a ``--reference`` value: ("self", ""), ("endpoint", URL),
    ("hf", NAME_OR_PATH) or ("gguf", PATH).

    Raises:
        ValueError: anything else (the message lists the forms).
    """
    value = (value or "").strip()
    if value == "self":
        return "self", ""
    kind, sep, arg = value.partition(":")
    if sep and kind in ("endpoint", "hf", "gguf") and arg:
        return kind, arg
    raise ValueError(f"--reference must be self, endpoint:URL, hf:NAME_OR_PATH or gguf:PATH, got {value!r}")


class ServerReference:
    """Top-k reference laws from a server's prompt log-probabilities (``self`` and ``endpoint:``).

    Args:
        endpoint: ``client.Endpoint``; dialect: ``servers.Dialect``; model: the request's model
            name; k: the alternatives asked per position.
    """

    remote = True
    whole = False

    def __init__(self, endpoint, dialect, model: str, k: int):
        self.endpoint, self.dialect, self.model, self.k = endpoint, dialect, model, int(k)

    def rows(self, prompt_ids, tokens, texts=None) -> ReferenceRows:
        """The top-k view of ``tokens`` after ``prompt_ids`` (``texts``: the tokens' texts, for
        dialects whose inputs are text; ``EndpointError``, ``ProtocolError`` as the client and the
        dialect raise them)."""
        answers = [self.endpoint.post(path, body)
                   for path, body in self.dialect.reference_requests(self.model, prompt_ids, tokens, self.k, texts)]
        top = self.dialect.parse_reference(answers, prompt_ids, tokens, self.k)
        return ReferenceRows(top=top, raw=list(top.token_logprobs), short=top.short)


class HFReference:
    """Whole laws from a local transformers model at temperature T (``hf:``), many continuations
    per forward (``engines.references.TransformersReference.logits_many``).

    Args:
        spec: an embedded model name or alias, a folder, a ``.gguf`` file or a hub id.
        temperature: T > 0.
        dtype: the weights' dtype (default float32: the reference should not round more than the
            engine).
        batch: continuations per forward.
    Attributes:
        vocab: V, the logits axis.
    """

    remote = False
    whole = True

    def __init__(self, spec: str, temperature: float, dtype: str = "float32", batch: int = 8):
        from spectr_gbv.certify.engine.references import TransformersReference
        from spectr_gbv.gpu_backend.models.weights import load_causal_lm, vocab_size

        model, self.tokenizer = load_causal_lm(spec, dtype=dtype)
        self.inner = TransformersReference(model, temperature)
        self.T, self.batch = float(temperature), int(batch)
        self.vocab = vocab_size(model)

    def tokenize(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer(text).input_ids]

    def rows(self, prompt_ids, tokens, texts=None) -> ReferenceRows:
        return self.rows_many([(prompt_ids, tokens)])[0]

    def rows_many(self, items) -> list[ReferenceRows]:
        return [_whole_rows(z, tokens, self.T) for z, (_, tokens) in zip(self.inner.logits_many(items, self.batch), items)]


def _whole_rows(z: np.ndarray, tokens, temperature: float) -> ReferenceRows:
    """``ReferenceRows`` of whole laws from float64 logits [n, V]: the law at T, and each sampled
    token's raw (T = 1) log-probability."""
    from spectr_gbv.certify.engine.generate import softmax64

    raw = z - z.max(axis=-1, keepdims=True)
    raw = raw - np.log(np.exp(raw).sum(axis=-1, keepdims=True))
    V = z.shape[1]
    return ReferenceRows(laws=softmax64(z, temperature),
                         raw=[float(raw[t, int(x)]) if 0 <= int(x) < V else None for t, x in enumerate(tokens)])


class GGUFReference:
    """Whole laws from a local GGUF on llama.cpp (``gguf:``), at temperature T."""

    remote = False
    whole = True

    def __init__(self, path: str, temperature: float):
        from spectr_gbv.certify.engine.llama_cpp_python import load_llama
        from spectr_gbv.certify.engine.references import LlamaCppReference

        self.inner = LlamaCppReference(load_llama(path, logits_all=True, n_ctx=2048), temperature)
        self.vocab = int(self.inner.llama.n_vocab())

    def tokenize(self, text: str) -> list[int]:
        return [int(t) for t in self.inner.llama.tokenize(text.encode(), add_bos=True)]

    def rows(self, prompt_ids, tokens, texts=None) -> ReferenceRows:
        return _whole_rows(self.inner.logits(prompt_ids, tokens).astype(np.float64), tokens, self.inner.temperature)

    def rows_many(self, items) -> list[ReferenceRows]:
        return [self.rows(p, t) for p, t in items]


def raw_logprob_gap(reported, raw) -> list[float]:
    """|reported − reference| per token where both are known and finite (nats)."""
    if reported is None or raw is None:
        return []
    return [abs(a - b) for a, b in zip(reported, raw)
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
