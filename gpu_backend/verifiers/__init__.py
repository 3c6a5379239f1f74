"""Batched torch verifiers with the reference's contract (DESIGN.md; SPEC.md §2-§3).

    verify(rule, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None,
           validate=True) -> BatchVerdict

    draft_tokens  int64 [B, K, L]
    draft_probs   float64 | float32 | bfloat16 [B, K, L, V]    p(· | c, X^(k)_<i)
    target_probs  same dtype [B, K, L+1, V]                      q(· | c, X^(k)_<i); row L = bonus
    seeds         int64 [B]: row b's randomness is a function of seeds[b] alone
    noise         (uniforms float64 [B, K, L+1] in (0, 1], exponentials float64 [B, V] > 0),
                  the conventions of reference.randomness.MatchedSource

Registry names and parameters (as reference/rules/__init__.py):
    sd, spectr, bv, gbv (algorithm2=True), spectr_gbv (residual="released", algorithm2=False),
    spectr_gbv_fixed (residual="consistent", algorithm2=True), kseq_gbv (algorithm2=True),
    kseq_bv, traversal, mdbv (issue 7: multi-draft rules that never modify later targets;
    mdbv plans each row on the host and costs seconds per iteration at V = 151,936).
``get_verifier(name, **params)`` overrides the parameters, e.g.
``get_verifier("spectr_gbv", residual="consistent")`` or ``get_verifier("gbv", algorithm2=False)``.

Device-agnostic (the inputs' device decides), no host synchronisation after validation
(``validate=False`` skips the value checks for the engine's hot path).  Precision and
tolerances: gpu_backend/verifiers/batch.py; noise: noise.py; ρ*: kseq.py.
"""

from __future__ import annotations

from .base import Verifier
from .batch import BatchModification, BatchVerdict
from .bv import BlockVerification
from .gbv import GreedyBlockVerification
from .kseq_bv import KSeqBV
from .kseq_gbv import KSeqGBV
from .mdbv import MultiDraftBlockVerification
from .sd import TokenVerification
from .spectr import SpecTr
from .spectr_gbv import SpecTrGBV
from .traversal import TraversalVerification

_FACTORIES = {
    "sd": (TokenVerification, {}),
    "spectr": (SpecTr, {}),
    "bv": (BlockVerification, {}),
    "gbv": (GreedyBlockVerification, {"algorithm2": True}),
    "spectr_gbv": (SpecTrGBV, {"residual": "released", "algorithm2": False}),
    "spectr_gbv_fixed": (SpecTrGBV, {"residual": "consistent", "algorithm2": True}),
    "kseq_gbv": (KSeqGBV, {"algorithm2": True}),
    "kseq_bv": (KSeqBV, {}),
    "traversal": (TraversalVerification, {}),
    "mdbv": (MultiDraftBlockVerification, {}),
}

VERIFIERS: tuple[str, ...] = tuple(_FACTORIES)


def get_verifier(name: str, **params) -> Verifier:
    """The batched verifier registered under ``name``, with its default parameters overridden
    by ``params``.

    Raises:
        ValueError: unknown name (the message lists the known ones) or unknown parameter.
    """
    try:
        cls, defaults = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown rule {name!r}; known rules: {', '.join(VERIFIERS)}") from None
    unknown = set(params) - set(defaults)
    if unknown:
        raise ValueError(f"rule {name!r} takes parameters {sorted(defaults) or 'none'}, "
                         f"got {sorted(unknown)}")
    return cls(**{**defaults, **params})


def verify(rule, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None,
           validate: bool = True) -> BatchVerdict:
    """Run ``rule`` (a registry name or a Verifier) on a batch; see the module doc."""
    verifier = get_verifier(rule) if isinstance(rule, str) else rule
    return verifier(draft_tokens, draft_probs, target_probs, seeds=seeds, noise=noise,
                    validate=validate)


__all__ = ["VERIFIERS", "get_verifier", "verify", "Verifier", "BatchVerdict", "BatchModification",
           "TokenVerification", "SpecTr", "BlockVerification", "GreedyBlockVerification",
           "SpecTrGBV", "KSeqGBV", "KSeqBV", "TraversalVerification",
           "MultiDraftBlockVerification"]
