"""The planted defects of the registered rules (negative controls): each the real torch verifier
with one deliberate, law-relevant change, declared in its rule's spec
(``reference.rules.registry.RuleSpec.planted``: name, shape, seeds) and certified against that
rule's exact law (certify/suite.py ``planted_case``); ``spectr-gbv certify`` must
catch each.  A class names its defect (``planted_as``); ``planted_verifier(name)`` builds it.

Most changes swap one module-level helper of the rule's module for the duration of ``decide``
(not thread-safe; the certification runs one verification at a time) or rewrite the noise:
  * one uniform shared by the whole block (SD, BV): coin (0, i) reads η_1 for every i;
  * the first failed coin instead of the last success (BV, GBV);
  * ρ = 1 instead of ρ* at K = 2 (SpecTr, K-SEQ-GBV, K-SEQ-BV);
  * every draft reading draft 0's coins at each depth (SpecTr-GBV released and fixed, MDBV):
    coins that must be independent across the drafts' nodes are reused;
  * Traversal not updating a parent's acceptance probability when it deletes a child;
  * MDBV-KSEQ's inner nodes falling back with probability w (their budget) instead of
    (w − ΣA)/(1 − ΣA).
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import torch

from spectr_gbv.reference.rules import registry

from spectr_gbv.gpu_backend.verifiers.base import PLANTED_CLASSES
from spectr_gbv.gpu_backend.verifiers import bv as _bv
from spectr_gbv.gpu_backend.verifiers import gbv as _gbv
from spectr_gbv.gpu_backend.verifiers import kseq_bv as _kseq_bv
from spectr_gbv.gpu_backend.verifiers import kseq_gbv as _kseq_gbv
from spectr_gbv.gpu_backend.verifiers import mdbv_kseq as _mdbv_kseq
from spectr_gbv.gpu_backend.verifiers import spectr as _spectr
from spectr_gbv.gpu_backend.verifiers import traversal as _traversal
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


def first_failure(uniforms: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The wrong stopping rule: τ = (the first i with uniforms[..., i] > h[..., i]) − 1, L if
    none (``gbv.last_success``'s signature)."""
    L = h.shape[-1] - 1
    fail = uniforms[..., 1:] > h[..., 1:]
    lengths = torch.arange(1, L + 1, device=h.device)
    return torch.where(fail, lengths, torch.full_like(lengths, L + 1)).amin(dim=-1) - 1


def _rho_one(p, q, k, **_):
    return torch.ones(p.shape[0], dtype=torch.float64, device=p.device)


class SharedUniformBV(BlockVerification):
    """BV with ONE uniform shared by the whole block (coin (0, i) reads η_1 for every i)."""

    planted_as = "planted_bv_shared_uniform"

    name = "planted_bv_shared_uniform"

    def decide(self, batch, noise):
        u = noise.uniforms[:, :, 1:2].expand_as(noise.uniforms)
        return super().decide(batch, dataclasses.replace(noise, uniforms=u))


class FirstFailureBV(BlockVerification):
    """BV stopping at the first failed coin instead of taking the last success."""

    planted_as = "planted_bv_first_failure"

    name = "planted_bv_first_failure"

    def decide(self, batch, noise):
        with mock.patch.object(_bv, "last_success", first_failure):
            return super().decide(batch, noise)


class FirstFailureGBV(GreedyBlockVerification):
    """GBV stopping at the first failed coin instead of taking the last success."""

    planted_as = "planted_gbv_first_failure"

    name = "planted_gbv_first_failure"

    def decide(self, batch, noise):
        with mock.patch.object(_gbv, "last_success", first_failure):
            return super().decide(batch, noise)


class UnscaledSpecTr(SpecTr):
    """K-SEQ (SpecTr) with ρ = 1 instead of ρ*: over-accepts, and its residual is wrong."""

    planted_as = "planted_spectr_rho1"

    name = "planted_spectr_rho1"

    def decide(self, batch, noise):
        with mock.patch.object(_spectr, "rho_star", _rho_one):
            return super().decide(batch, noise)


class UnscaledKSeqGBV(KSeqGBV):
    """K-SEQ-GBV with ρ = 1 instead of ρ*."""

    planted_as = "planted_kseq_gbv_rho1"

    name = "planted_kseq_gbv_rho1"

    def decide(self, batch, noise):
        with mock.patch.object(_kseq_gbv, "rho_star", _rho_one):
            return super().decide(batch, noise)


def _fallback_is_budget(plan):
    """MDBV-KSEQ's plan with every inner node's fallback coin at its budget w instead of
    (w − ΣA)/(1 − ΣA): it ignores the mass its children already accepted, so it over-accepts."""
    def wrong(batch):
        w, h, *rest = plan(batch)
        h = h.clone()
        h[:, :, 1:batch.L] = w[:, :, 1:batch.L]
        return (w, h, *rest)
    return wrong


class FallbackAtBudgetMDBVKSeq(MDBVKSeq):
    """MDBV-KSEQ whose inner nodes fall back with probability w (module function above)."""

    planted_as = "planted_mdbv_kseq_fallback"

    name = "planted_mdbv_kseq_fallback"

    def decide(self, batch, noise):
        with mock.patch.object(_mdbv_kseq, "plan", _fallback_is_budget(_mdbv_kseq.plan)):
            return super().decide(batch, noise)


class SharedUniformSD(TokenVerification):
    """Token verification with ONE uniform shared by the whole block: τ = the leading run of
    i with η_1 ≤ min(1, q/p)(X_i) instead of independent coins (over-accepts long blocks)."""

    planted_as = "planted_sd_shared_uniform"

    name = "planted_sd_shared_uniform"

    def decide(self, batch, noise):
        u = noise.uniforms[:, :, 1:2].expand_as(noise.uniforms)
        return super().decide(batch, dataclasses.replace(noise, uniforms=u))


class UnscaledKSeqBV(KSeqBV):
    """K-SEQ-BV with ρ = 1 instead of ρ*: every draft gets plain BV (over-accepts at K ≥ 2)."""

    planted_as = "planted_kseq_bv_rho1"

    name = "planted_kseq_bv_rho1"

    def decide(self, batch, noise):
        with mock.patch.object(_kseq_bv, "rho_star", _rho_one):
            return super().decide(batch, noise)


class _SharedDraftCoins:
    """Mixin: every draft's coin at depth i reads draft 0's (coin (k, i) ← coin (0, i)), so the
    coins of different nodes at one depth, which the rule needs independent, coincide."""

    def decide(self, batch, noise):
        u = noise.uniforms[:, :1, :].expand_as(noise.uniforms)
        return super().decide(batch, dataclasses.replace(noise, uniforms=u))


class SharedCoinsSpecTrGBV(_SharedDraftCoins, SpecTrGBV):
    """The released SpecTr-GBV with every draft reading draft 0's coins (against its own law)."""

    planted_as = "planted_spectr_gbv_shared_coins"

    name = "planted_spectr_gbv_shared_coins"


class SharedCoinsSpecTrGBVFixed(_SharedDraftCoins, SpecTrGBV):
    """SpecTr-GBV with the consistent residual and Algorithm 2 (the registry's spectr_gbv_fixed),
    every draft reading draft 0's coins (against its own law)."""

    planted_as = "planted_spectr_gbv_fixed_shared_coins"

    name = "planted_spectr_gbv_fixed_shared_coins"

    def __init__(self):
        super().__init__(residual="consistent", algorithm2=True)


class _StaleAlphaPath(_traversal.TraversalPath):
    """Traversal's path whose deletion of a node leaves the parent's acceptance probability p_α
    as it was (M_b and M_s are still updated) instead of p_α ← S/(S + 1 − p_α)."""

    def delete(self, b, i, act, x):
        alpha = self.alpha[i - 1]
        super().delete(b, i, act, x)
        self.alpha[i - 1] = alpha


class StaleAlphaTraversal(TraversalVerification):
    """Traversal Verification that does not update p_α of a node's parent when it deletes the
    node (the parent is then tested with its first acceptance probability)."""

    planted_as = "planted_traversal_stale_alpha"

    name = "planted_traversal_stale_alpha"

    def decide(self, batch, noise):
        with mock.patch.object(_traversal, "TraversalPath", _StaleAlphaPath):
            return super().decide(batch, noise)


class SharedCoinsMDBV(_SharedDraftCoins, MultiDraftBlockVerification):
    """MDBV with every node reading draft 0's coin at its depth."""

    planted_as = "planted_mdbv_shared_coins"

    name = "planted_mdbv_shared_coins"


def planted_verifier(name: str):
    """A fresh instance of the torch class of planted defect ``name`` (``Verifier.planted_as``;
    the built-in ones are above, a test or a user's package defines its own).

    Raises:
        ValueError: no class declares ``planted_as = name``.
    """
    try:
        return PLANTED_CLASSES[name]()
    except KeyError:
        raise ValueError(f"planted defect {name!r} has no torch class: define a subclass of its rule's "
                         f"torch verifier with planted_as = {name!r}") from None


def _check_builtin() -> None:
    """Every planted defect of the registry has its class (import-time check)."""
    missing = [name for name in registry.planted() if name not in PLANTED_CLASSES]
    if missing:
        raise ImportError(f"planted defects without a torch class: {missing}")


_check_builtin()
