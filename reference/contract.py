"""The one batched verifier contract, shared by every backend (docs/design.md §2).

Any verifier, numpy or torch, this project's or a user's, is an object ``verifier`` with

    verdict = verifier(draft_tokens, draft_probs, target_probs, *, seeds=None)

    draft_tokens  int   [B, K, L]        X^(k)_i, the K draft blocks of each batch row
    draft_probs   float [B, K, L, V]     p(· | c, X^(k)_<i)
    target_probs  float [B, K, L+1, V]   q(· | c, X^(k)_<i); row L is the bonus row
    seeds         int64 [B]              row b's randomness is a function of seeds[b] alone (below)

and ``verdict`` has the fields of ``BatchVerdict``: ``tau`` int [B] (τ ∈ [0, L], accepted
draft tokens), ``selected`` int [B] (the draft whose first τ tokens were emitted, -1 where
τ = 0), ``tokens`` int [B, L+1] (the τ accepted tokens, then the correction or bonus token,
padded with -1), ``num_emitted`` int [B] (τ + 1) and ``modification`` (Algorithm 2's record
for greedy rules, else None).  Arrays may be numpy arrays or torch tensors; ``to_numpy``
reads either.  Verifiers of this project also take ``noise=`` (explicit uniforms and
exponentials, reference.randomness.MatchedSource conventions) and ``validate=``.

Seeds.  Row b's randomness comes from seeds[b] alone (not from the other rows, the batch size,
a global or shared RNG, the clock or the device's scheduling), so:

* replay: the same rows with the same seeds give the same verdicts (τ and tokens), row by row;
* independence: rows with distinct seeds get independent draws, so a verifier must use all the
  bits of its seed (a narrowing cast, e.g. to float32, merges distinct seeds into one stream);
* batch independence: row b's verdict is a function of its own rows and seeds[b]: the same row
  with the same seed gives the same verdict alone, at another position, or in a batch of another
  size (one generator seeded by seeds[0] for the whole batch breaks it, each row's law intact).

The certification harness (oracle/certify.py, oracle/lossless.py) sends int64 seeds in
[0, 2^63): 63-bit hashes of (base seed, case, call, row) by ``numpy.random.SeedSequence``
(oracle/seeding.py), unrelated across rows, calls, cases and nearby base seeds, as a serving
engine's per-request 64-bit seeds are; and it checks replay, seed dependence and batch
independence on every run (oracle/seed_contract.py).

Inputs a verifier refuses.  Rows no drafter or model produces have no law to follow; a verifier
raises ValueError, naming the argument, on each of these — it never returns a verdict for them
(expected behaviour: refusal; no exact law is defined):

* a NaN, +inf or −inf entry in ``draft_probs`` or ``target_probs`` (min(1, q/NaN) is 1 in
  Python and in ``numpy.fmin``: a draft of draft probability NaN would be accepted outright);
* a negative entry in either;
* a row of either whose sum is off 1 by more than its rounding allows (the reference: 10^-5,
  ``reference.validation.NORMALISATION_ATOL``; a row summing to 2 is refused by every verifier
  of this project);
* a drafted token of draft probability 0 (draft_probs[b, k, i, draft_tokens[b, k, i]] = 0: it
  cannot have been drawn, and q/p is undefined there).

``reference.validation.check_iteration_inputs`` refuses all of them for one row,
``check_batch_inputs`` for a batch (numpy); the torch verifiers' ``validate=True`` (the default)
does in their own calls.  Certification probes each
(oracle/input_probes.py) and fails a verifier that returns a verdict, or raises anything but
ValueError, on one.

Implementations: ``reference.rules.Rule.__call__`` (numpy, exact, one row at a time) and
``gpu_backend.verifiers.Verifier.__call__`` (torch, batched, any device).  The certification
harness (``oracle.certify``) takes any object that satisfies ``BatchedVerifier``.

This module imports numpy only: it is the contract, not a backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

# kind "excess":      w(z) = (q(z) − ρ·p(z))_+        GBV (ρ = 1), K-SEQ-GBV (docs/rules.md §2.4, §2.6)
# kind "spectr_gbv":  w(z) = q(z)·(1 − m(z))^K        SpecTr-GBV, m = min(1, p/q)  (docs/rules.md §2.5)
MODIFICATION_KINDS = ("excess", "spectr_gbv")


class ContractViolation(ValueError):
    """A verifier's output breaks this contract, or a consistency check of its outputs saw a
    defect (a token id outside [0, V), τ outside [0, L], accepted tokens that are not the drafts,
    an adapter's filler request answered wrongly).  The certification harness (oracle/) turns it
    — and any other exception a verifier raises on the valid rows it is handed — into a failed
    row whose reason is this message: a detected defect is a verdict.  A ValueError, so callers
    outside certification see the usual error."""


@runtime_checkable
class VerdictBatch(Protocol):
    """What a batched verifier returns (see the module doc for shapes)."""

    tau: Any
    selected: Any
    tokens: Any
    num_emitted: Any
    modification: Any


@runtime_checkable
class BatchedVerifier(Protocol):
    """A verifier with the batched contract (module doc).

    ``oracle.certify`` calls it as ``verifier(draft_tokens, draft_probs, target_probs,
    seeds=seeds)`` with numpy arrays (the rows of a fixed case are a zero-stride broadcast view
    along B) and reads ``tau`` and ``tokens`` of the result with ``to_numpy``.
    """

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None) -> VerdictBatch:
        ...


def to_numpy(x) -> np.ndarray:
    """A numpy array from a numpy array, a sequence or a tensor of any device and dtype
    (torch tensors are detached and copied to the host; bfloat16 is widened to float32).
    Duck-typed, so this module never imports torch."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def modification_weights(kind: str, K: int, rho, q_joint, p_joint, xp=np):
    """Algorithm 2's weight w(z) from the joints of z, for numpy or torch arrays.

    The one implementation of the modification weight (SpecTr-GBV Algorithm 2; docs/rules.md
    §3): "excess" w = (q − ρ·p)_+ (GBV with ρ = 1, K-SEQ-GBV; §2.4, §2.6) and "spectr_gbv"
    w = q·(1 − m)^K with m = min(1, p/q), m = 1 where q = 0 (SpecTr-GBV; §2.5).  It works on
    probabilities, where q − ρ·p cancels exactly; w is homogeneous of degree 1 in (q, p), so a
    caller holding log joints shifts both by one constant before exponentiating
    (gpu_backend/engine/stack.py).

    Args:
        kind: "excess" or "spectr_gbv".  K: number of drafts (used by "spectr_gbv").
        rho: the scale ρ ≥ 0 (a float, or an array of the joints' namespace broadcasting
            against them).
        q_joint, p_joint: float64 arrays of one shape, ≥ 0: the joints of z under the window's
            target and under the draft.
        xp: the arrays' namespace: ``numpy`` or ``torch``.
    Returns:
        float64 array of the joints' shape, ≥ 0, never NaN.
    Raises:
        ValueError: unknown ``kind``.
    """
    if kind == "excess":
        excess = q_joint - rho * p_joint
        return xp.where(excess > 0, excess, 0.0)
    if kind == "spectr_gbv":
        positive = q_joint > 0
        ratio = p_joint / xp.where(positive, q_joint, 1.0)
        m = xp.where(positive, xp.where(ratio < 1.0, ratio, 1.0), 1.0)
        return q_joint * (1.0 - m) ** K
    raise ValueError(f"unknown modification kind {kind!r}; known: {', '.join(MODIFICATION_KINDS)}")


def namespace(x):
    """The array namespace of ``x``: ``numpy`` for numpy arrays and scalars, else the top-level
    module of its type (``torch`` for tensors), found without importing torch here."""
    if isinstance(x, (np.ndarray, np.generic, float, int)):
        return np
    return importlib.import_module(type(x).__module__.split(".")[0])


@dataclass
class BatchModification:
    """Algorithm 2's record of each batch row (docs/rules.md §3), numpy arrays or tensors.

    Attributes:
        kind: "excess" or "spectr_gbv" (one rule per batch, so one kind).
        K: number of drafts.
        rho: float64 [B], the scale ρ of "excess" (1 where unused).
        log_q_joint: float64 [B], log target joint of the emitted tokens (accepted prefix +
            correction) counted from the window start, under the target handed in; -inf where
            not ``active``.
        log_p_joint: float64 [B], the same under the draft; -inf where not ``active``.
        active: bool [B], τ < L: the rows whose later window positions use the modified target
            (τ = L rows emitted a bonus and carry no modification, like a reference Verdict
            with modification None).
    """

    kind: str
    K: int
    rho: Any
    log_q_joint: Any
    log_p_joint: Any
    active: Any

    def weights(self, log_q_joint, log_p_joint):
        """w(z) (``modification_weights``) with row b's ρ[b], in the record's namespace.

        Args:
            log_q_joint, log_p_joint: float64 [B, ..., V], log joints of z under the window's
                target and the draft (-inf for 0).  w is homogeneous of degree 1, so shift both
                by one constant per row first when the joints are far below 1 (exp underflows
                below e^-745).
        Returns:
            float64 [B, ..., V], ≥ 0, never NaN.
        """
        xp = namespace(self.rho)
        rho = self.rho.reshape(tuple(self.rho.shape) + (1,) * (log_q_joint.ndim - 1))
        return modification_weights(self.kind, self.K, rho, xp.exp(log_q_joint), xp.exp(log_p_joint), xp)


@dataclass
class BatchVerdict:
    """The outcomes of B verifications (field meanings in the module doc), numpy arrays or
    tensors on the inputs' device.

    Attributes:
        tau: int64 [B].  selected: int64 [B].  tokens: int64 [B, L+1] padded with -1.
        num_emitted: int64 [B], τ + 1.  modification: BatchModification, or None (the rule does
        not modify targets, or no row opened a window).
    """

    tau: Any
    selected: Any
    tokens: Any
    num_emitted: Any
    modification: BatchModification | None = None
