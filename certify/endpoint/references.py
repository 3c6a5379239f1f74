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
- ``reported`` — the top-k lists the sampling answer itself reports at each sampled position
  (``ReportedReference``: no second request); an audit re-scores a subsample by prefill
  (``run``: ``Plan.audit``).

The declared law (``Declared``: T, top-p, top-k, min-p; ``--as-client``, ``--temperature``) is
computed from a top-k view by ``certify.log.laws.declared_records`` (exact where the truncation
keeps a set inside the list, bounded or skipped otherwise: its module doc), and from whole laws
exactly (``truncate``: min-p, top-k, top-p on the tempered law, vLLM v1's order).

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


@dataclass(frozen=True)
class Declared:
    """The sampling law a client declares: temperature T > 0, top-p in (0, 1] (1: none), top-k
    ≥ 0 (0: none), min-p in [0, 1) (0: none); ``vocab``: V when known (T > 1 from a top-k view
    needs it where the list leaves mass)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    vocab: int = 0

    @property
    def plain(self) -> bool:
        """T = 1 and no truncation: the raw law itself."""
        return self.temperature == 1.0 and self.top_p >= 1.0 and self.top_k <= 0 and self.min_p <= 0.0

    @property
    def truncated(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0 or self.min_p > 0.0


@dataclass
class ReferenceRows:
    """One continuation's reference: ``top`` (``servers.TopLaws``, raw: T = 1) or ``laws``
    (float64 [n, V], already at the declared law); ``raw``: log p(x_t) at temperature 1 per token
    (None where unknown); ``short``: positions with fewer than k alternatives; ``declared``: the
    law the top-k view is transformed to (``Declared``; None or plain: the raw law)."""

    top: object = None
    laws: np.ndarray | None = None
    raw: list | None = None
    short: int = 0
    declared: Declared | None = None

    def records(self, tokens, draft_laws=None) -> list[dict]:
        """Per-token records (``oracle.sequence_records``; a declared law from a top-k view:
        ``certify.log.laws.declared_records``, whose skipped positions carry no cell)."""
        if self.laws is not None:
            return records_from_laws(tokens, self.laws, draft_laws)
        d = self.declared
        if d is None or d.plain:
            return records_from_top(tokens, self.top.top_ids, self.top.top_logprobs, self.top.token_logprobs)
        from spectr_gbv.certify.declared_laws import declared_records

        recs, _ = declared_records(tokens, self.top.top_ids, self.top.top_logprobs, self.top.token_logprobs,
                                   temperature=d.temperature, top_p=d.top_p, top_k=d.top_k, min_p=d.min_p,
                                   vocab=d.vocab)
        return recs


def truncate(laws: np.ndarray, declared: Declared | None) -> np.ndarray:
    """Whole laws [n, V] (already at the declared temperature) cut by the declared min-p, top-k
    and top-p, in that order, each renormalised (``oracle.sequence_simulation``'s cuts)."""
    if declared is None or not declared.truncated:
        return laws
    from spectr_gbv.oracle.sequence_simulation import min_p, top_k, top_p

    out = []
    for row in laws:
        if declared.min_p > 0:
            row = min_p(row, declared.min_p)
        if declared.top_k > 0:
            row = top_k(row, declared.top_k)
        if declared.top_p < 1:
            row = top_p(row, declared.top_p)
        out.append(row)
    return np.stack(out) if out else laws


def parse_reference(value: str) -> tuple[str, str]:
    """``(kind, argument)`` of a ``--reference`` value: ("self", ""), ("reported", ""), ("endpoint", URL),
    ("hf", NAME_OR_PATH) or ("gguf", PATH).

    Raises:
        ValueError: anything else (the message lists the forms).
    """
    value = (value or "").strip()
    if value in ("self", "reported"):
        return value, ""
    kind, sep, arg = value.partition(":")
    if sep and kind in ("endpoint", "hf", "gguf") and arg:
        return kind, arg
    raise ValueError(f"--reference must be self, reported, endpoint:URL, hf:NAME_OR_PATH or gguf:PATH, got {value!r}")


class ServerReference:
    """Top-k reference laws from a server's prompt log-probabilities (``self`` and ``endpoint:``).

    Args:
        endpoint: ``client.Endpoint``; dialect: ``servers.Dialect``; model: the request's model
            name; k: the alternatives asked per position.
    """

    remote = True
    whole = False

    def __init__(self, endpoint, dialect, model: str, k: int, declared: Declared | None = None):
        self.endpoint, self.dialect, self.model, self.k = endpoint, dialect, model, int(k)
        self.declared = declared

    def rows(self, prompt_ids, tokens, texts=None) -> ReferenceRows:
        """The top-k view of ``tokens`` after ``prompt_ids`` (``texts``: the tokens' texts, for
        dialects whose inputs are text; ``EndpointError``, ``ProtocolError`` as the client and the
        dialect raise them)."""
        answers = [self.endpoint.post(path, body)
                   for path, body in self.dialect.reference_requests(self.model, prompt_ids, tokens, self.k, texts)]
        top = self.dialect.parse_reference(answers, prompt_ids, tokens, self.k)
        return ReferenceRows(top=top, raw=list(top.token_logprobs), short=top.short, declared=self.declared)


class ReportedReference:
    """``--reference reported``: the top-k lists the sampling answer reported (``servers.Sample.top``,
    raw log-probabilities as vLLM reports them by default), transformed to the declared law; no
    request of its own.  ``raw`` is None: the sampled tokens' reported log-probabilities are
    compared with a prefill's by the audit only (comparing them with the same answer's lists
    would test nothing)."""

    remote = True
    whole = False
    reported = True

    def __init__(self, k: int, declared: Declared | None = None):
        self.k, self.declared = int(k), declared

    def rows_of(self, sample) -> ReferenceRows:
        """The reference of one ``servers.Sample``.

        Raises:
            ValueError: the answer reported no top-k lists (the server ignores ``logprobs: k``).
        """
        top = getattr(sample, "top", None)
        if top is None:
            raise ValueError("the sampling answer reports no top-k log-probabilities (choices[0].logprobs."
                             "top_logprobs): --reference reported needs a server that returns them")
        return ReferenceRows(top=top, raw=None, short=sum(len(t) < self.k for t in top.top_ids),
                             declared=self.declared)


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
        return [_whole_rows(z, tokens, self.T, getattr(self, "declared", None))
                for z, (_, tokens) in zip(self.inner.logits_many(items, self.batch), items)]


def _whole_rows(z: np.ndarray, tokens, temperature: float, declared: Declared | None = None) -> ReferenceRows:
    """``ReferenceRows`` of whole laws from float64 logits [n, V]: the law at T (cut by the
    declared truncations, ``truncate``), and each sampled token's raw (T = 1) log-probability."""
    from spectr_gbv.certify.engine.generate import softmax64

    raw = z - z.max(axis=-1, keepdims=True)
    raw = raw - np.log(np.exp(raw).sum(axis=-1, keepdims=True))
    V = z.shape[1]
    return ReferenceRows(laws=truncate(softmax64(z, temperature), declared),
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
        return _whole_rows(self.inner.logits(prompt_ids, tokens).astype(np.float64), tokens, self.inner.temperature,
                           getattr(self, "declared", None))

    def rows_many(self, items) -> list[ReferenceRows]:
        return [self.rows(p, t) for p, t in items]


def raw_logprob_gap(reported, raw) -> list[float]:
    """|reported − reference| per token where both are known and finite (nats)."""
    if reported is None or raw is None:
        return []
    return [abs(a - b) for a, b in zip(reported, raw)
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
