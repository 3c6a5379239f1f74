"""Batched torch verifiers with the reference's contract (docs/design.md §2.2; docs/rules.md §2–§3).

    verify(rule, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None,
           validate=True) -> BatchVerdict

    draft_tokens  int64 [B, K, L]
    draft_probs   float64 | float32 | bfloat16 [B, K, L, V]    p(· | c, X^(k)_<i)
    target_probs  same dtype [B, K, L+1, V]                      q(· | c, X^(k)_<i); row L = bonus
    seeds         int64 [B]: row b's randomness is a function of seeds[b] alone
    noise         (uniforms float64 [B, K, L+1] in (0, 1], exponentials float64 [B, V] > 0),
                  the conventions of reference.randomness.MatchedSource

Names and parameters come from the one registry, reference.rules.registry (e.g. gbv with
algorithm2=True, spectr_gbv with residual="released", algorithm2=False); a rule's torch class is
the ``Verifier`` that ports its numpy rule (``verifier_class``: ``base.VERIFIER_CLASSES``).
``get_verifier(name, **params)`` overrides the parameters, e.g.
``get_verifier("spectr_gbv", residual="consistent")`` or ``get_verifier("gbv", algorithm2=False)``.

Device-agnostic (the inputs' device decides), no host synchronisation after validation
(``validate=False`` skips the value checks for the engine's hot path).  Precision and
tolerances: gpu_backend/verifiers/inputs.py; noise: noise.py; ρ*: kseq.py.
"""

from __future__ import annotations

from spectr_gbv.reference.rules import registry

from spectr_gbv.gpu_backend.verifiers.base import VERIFIER_CLASSES, Verifier
from spectr_gbv.reference.contract import BatchModification, BatchVerdict
from spectr_gbv.gpu_backend.verifiers.bv import BlockVerification
from spectr_gbv.gpu_backend.verifiers.gbv import GreedyBlockVerification
from spectr_gbv.gpu_backend.verifiers.kseq_bv import KSeqBV
from spectr_gbv.gpu_backend.verifiers.kseq_gbv import KSeqGBV
from spectr_gbv.gpu_backend.verifiers.mdbv import MultiDraftBlockVerification
from spectr_gbv.gpu_backend.verifiers.mdbv_kseq import MDBVKSeq
from spectr_gbv.gpu_backend.verifiers.sd import TokenVerification
from spectr_gbv.gpu_backend.verifiers.spectr import SpecTr
from spectr_gbv.gpu_backend.verifiers.spectr_gbv import SpecTrGBV
from spectr_gbv.gpu_backend.verifiers.traversal import TraversalVerification

def verifier_class(spec) -> type:
    """The torch ``Verifier`` class of registry spec ``spec``: the one porting the class of
    ``spec.reference()`` (``base.VERIFIER_CLASSES``, filled as verifier classes are defined).

    Raises:
        ValueError: no torch verifier ports that rule (define a ``Verifier`` subclass with
            ``reference = <the rule's numpy class>``).
    """
    ref = type(spec.reference())
    try:
        return VERIFIER_CLASSES[ref]
    except KeyError:
        raise ValueError(f"rule {spec.name!r} has no torch verifier: define a gpu_backend.verifiers.base."
                         f"Verifier subclass with reference = {ref.__qualname__}") from None


def _check_registry() -> None:
    """Every registered rule has a torch verifier (import-time check; its flags are read from
    the rule it ports, so they cannot drift apart)."""
    for spec in registry.specs():
        verifier_class(spec)


_check_registry()


def __getattr__(name: str):
    if name == "VERIFIERS":  # live: a rule registered later is listed too
        return registry.names()
    raise AttributeError(name)


def get_verifier(name: str, **params) -> Verifier:
    """The batched verifier registered under ``name`` (reference.rules.registry), with its
    default parameters overridden by ``params``.

    Raises:
        ValueError: unknown name (the message lists the known ones) or unknown parameter.
    """
    spec = registry.spec(name)
    unknown = set(params) - set(spec.params)
    if unknown:
        raise ValueError(f"rule {name!r} takes parameters {sorted(spec.params) or 'none'}, "
                         f"got {sorted(unknown)}")
    return verifier_class(spec)(**{**spec.params, **params})


def verify(rule, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None,
           validate: bool = True) -> BatchVerdict:
    """Run ``rule`` (a registry name or a Verifier) on a batch; see the module doc."""
    verifier = get_verifier(rule) if isinstance(rule, str) else rule
    return verifier(draft_tokens, draft_probs, target_probs, seeds=seeds, noise=noise,
                    validate=validate)


__all__ = ["VERIFIERS", "get_verifier", "verify", "Verifier", "BatchVerdict", "BatchModification",
           "TokenVerification", "SpecTr", "BlockVerification", "GreedyBlockVerification",
           "SpecTrGBV", "KSeqGBV", "KSeqBV", "TraversalVerification",
           "MultiDraftBlockVerification", "MDBVKSeq"]
