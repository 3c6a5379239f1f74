"""The certification suite of the torch verifiers: cases, the verifiers certified (``suite_verifier``) and
the planted wrong rules.  Shared by ``spectr-gbv certify`` (gpu_backend/certify/verifiers.py) and the
tests (tests/gpu_backend/test_verifiers_certify.py, test_verifiers_certify_distinctive.py,
test_certify_cli.py).

Cases (oracle.certify FixedCase: fixed draft blocks, the backend's outcomes against the
reference rule's exact law given them):
  * ``toy_cases``: V = 3 (K = 3, L = 3) in float32 and V = 4 (K = 2, L = 2) in bfloat16
    (K = 1 for single-draft rules), toy models of oracle.certify_cases;
  * ``large_case``: random peaked rows at V = 4,096 (oracle.certify_cases.large_models(4096, 21)),
    K = 2, L = 2 (K = 1 single-draft; SpecTr at L = 1: beyond depth 1 its ρ* is solved per
    row, ~0.3 ms per row at V = 4,096 on this CPU);
  * ``distinctive_case``: the non-modifying rules' cases (toy V = 3 seeds ``TOY_SEED``, rows V = 4,096
    seed 29), checked to be at TV ≥ 0.05 from the other multi-draft rules.
bfloat16 cases use rows exact in bfloat16 that sum to exactly 1 (``bf16_exact``), and every case
is drawn with a seed where no value of τ has probability above 0.99 (``nondegenerate_case``):
tests/gpu_backend/test_verifiers_certify.py (module doc) says why.

Planted wrong rules (``PLANTED``): the real torch verifier with one deliberate change, certified
against the correct rule's exact law; the certification must catch each.
  * ``planted_bv_shared_uniform``: BV with one uniform shared by all positions of the block;
  * ``planted_bv_first_failure`` / ``planted_gbv_first_failure``: BV / GBV stopping at the
    first failed coin instead of taking the last success;
  * ``planted_spectr_rho1`` / ``planted_kseq_gbv_rho1``: K-SEQ (SpecTr) / K-SEQ-GBV with
    ρ = 1 instead of ρ* at K = 2;
and the law-level one (``released_rule_against_target``): the released SpecTr-GBV against the
target's first-token law at K = L = 2 (docs/rules.md §2.5).  The changes are made by swapping one
module-level helper of the rule's module for the duration of ``decide`` (not thread-safe; the
certification runs one verification at a time).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from spectr_gbv.oracle.certify import FixedCase, exact_verdict_law
from spectr_gbv.oracle.certify_cases import fixed_case, large_models, toy_models
from spectr_gbv.reference.rules import get_rule, registry

from spectr_gbv.gpu_backend import verifiers as _verifiers
from spectr_gbv.reference.exact import total_variation
from spectr_gbv.gpu_backend.verifiers import bv as _bv
from spectr_gbv.gpu_backend.verifiers import gbv as _gbv
from spectr_gbv.gpu_backend.verifiers import kseq_gbv as _kseq_gbv
from spectr_gbv.gpu_backend.verifiers import mdbv_kseq as _mdbv_kseq
from spectr_gbv.gpu_backend.verifiers import spectr as _spectr
from spectr_gbv.gpu_backend.verifiers.bv import BlockVerification
from spectr_gbv.gpu_backend.verifiers.gbv import GreedyBlockVerification
from spectr_gbv.gpu_backend.verifiers.kseq_gbv import KSeqGBV
from spectr_gbv.gpu_backend.verifiers.mdbv_kseq import MDBVKSeq
from spectr_gbv.gpu_backend.verifiers.spectr import SpecTr

LARGE_V = 4096


# -- verifiers ---------------------------------------------------------------------------------

def suite_verifier(rule: str, dtype: torch.dtype, device: str | torch.device = "cpu"):
    """The torch verifier certified under ``rule``: a planted wrong rule of ``PLANTED`` or the
    registered one (``gpu_backend.verifiers.get_verifier``, read at call time so a patched
    registry is used), taking certification's numpy rows in ``dtype`` on ``device``.

    Raises:
        ValueError: unknown rule name.
    """
    made = PLANTED[rule].factory() if rule in PLANTED else _verifiers.get_verifier(rule)
    return made.on(device, dtype)


# -- cases -------------------------------------------------------------------------------------

def bf16_exact(rows: np.ndarray) -> np.ndarray:
    """Rows of multiples of 2^-s with at most 8 significant bits (s = 8 for V ≤ 16, else 16),
    summing to exactly 1: exact in bfloat16, float32 and float64, so the backend sees (and,
    renormalising by a float32 sum of exactly 1, keeps) the very rows whose exact law is the
    reference.  Positive entries stay positive."""
    V = rows.shape[-1]
    scale = 2 ** (8 if V <= 16 else 16)
    out = np.empty_like(rows)
    for idx in np.ndindex(rows.shape[:-1]):
        r = rows[idx] * scale
        k = np.where(r > 0, np.maximum(np.round(r), 1.0), 0.0)
        big = k >= 256
        step = 2.0 ** (np.floor(np.log2(np.where(big, k, 1.0))) - 7)  # keep 8 significant bits
        k = np.where(big, np.round(k / step) * step, k)
        deficit = int(scale - k.sum())
        small = np.flatnonzero((k >= 1) & (k < 255))  # ±1 keeps them exact and positive
        while deficit != 0:
            sign = 1 if deficit > 0 else -1
            pool = small if sign > 0 else small[k[small] >= 2]
            take = pool[: abs(deficit)]
            if take.size == 0:
                raise ValueError("bf16_exact: cannot fix the row sum")
            k[take] += sign
            deficit -= sign * take.size
        out[idx] = k / scale
    assert np.all(out.sum(-1) == 1.0) and np.all((out > 0) == (rows > 0))
    return out


def tau_law(law: dict, L: int) -> np.ndarray:
    """The law of τ (float64 [L+1]) from an exact verdict law."""
    out = np.zeros(L + 1)
    for (tau, _, _), pr in law.items():
        out[tau] += pr
    return out


def nondegenerate_case(name, rule, models, K, L, first_seed, backend_dtype="float32",
                       reference_rule=None, expect_pass=True):
    """The first seeded fixed case whose exact law of τ puts at most 0.99 on any one value (with
    τ almost surely L, oracle.certify's mean test breaks down: it compares with the exact
    variance, ~1e-31 there).  bfloat16 cases get bfloat16-exact rows (``bf16_exact``).

    Raises:
        RuntimeError: none of 50 seeds from ``first_seed`` gives such a case.
    """
    draft, target = models
    ref = reference_rule or rule
    for seed in range(first_seed, first_seed + 50):
        case = fixed_case(name, rule, draft, target, K, L, seed, reference_rule=ref,
                          expect_pass=expect_pass, backend_dtype=backend_dtype)
        if backend_dtype == "bfloat16":
            case = FixedCase(name, rule, ref, case.draft_tokens, bf16_exact(case.draft_probs),
                             bf16_exact(case.target_probs), expect_pass=expect_pass,
                             backend_dtype=backend_dtype)
        law = exact_verdict_law(get_rule(ref), case.draft_tokens, case.draft_probs, case.target_probs)
        if tau_law(law, L).max() <= 0.99:
            return case
    raise RuntimeError(f"no non-degenerate case for {name}")


def toy_cases(rule: str, single_draft: bool | None = None) -> list[FixedCase]:
    """V = 3 (K = 3, L = 3) in float32 and V = 4 (K = 2, L = 2) in bfloat16 (K = 1 if
    single-draft)."""
    single = registry.is_single_draft(rule) if single_draft is None else single_draft
    return [nondegenerate_case(f"{rule} toy V={V} K={K} L={L} {dt}", rule, toy_models(V, seed), K, L, seed,
                               backend_dtype=dt)
            for V, K, L, seed, dt in ((3, 1 if single else 3, 3, 12, "float32"),
                                      (4, 1 if single else 2, 2, 13, "bfloat16"))]


def large_case(rule: str, dtype: str, single_draft: bool | None = None) -> FixedCase:
    """Random rows at V = 4,096, K = 2 (1 single-draft), L = 2 (SpecTr: L = 1), ``dtype``."""
    single = registry.is_single_draft(rule) if single_draft is None else single_draft
    K = 1 if single else 2
    L = 1 if rule == "spectr" else 2
    return nondegenerate_case(f"{rule} rows V={LARGE_V} K={K} L={L} {dtype}", rule,
                              large_models(LARGE_V, 21), K, L, 22, backend_dtype=dtype)


# The non-modifying rules' cases (tests/gpu_backend/test_verifiers_certify_distinctive.py): seeds chosen by
# scanning so that the rule's law is at TV ≥ 0.05 from each of DISTINCT_FROM.
DISTINCT_FROM = ("kseq_bv", "traversal", "spectr")
TOY_SEED = {"kseq_bv": 14, "traversal": 14, "mdbv": 15, "mdbv_kseq": 16}  # MDBV accepts the whole block of seed 14
ROWS_SEED = 29
# per-rule exceptions to ROWS_SEED: at seed 29 MDBV-KSEQ's law is within TV 0.05 of SpecTr's
ROWS_SEEDS = {"mdbv_kseq": 38}


def rows_seed(rule: str) -> int:
    """Draft seed of a rule's distinctive V = 4,096 case."""
    return ROWS_SEEDS.get(rule, ROWS_SEED)


def distinctive_case(name, rule, models, K, L, seed, others=(), check: bool = True) -> FixedCase:
    """The seeded float32 fixed case, checked (``check``) to be worth certifying: no value of τ
    has probability above 0.99, and the rule's exact law is at TV ≥ 0.05 from each rule in
    ``others`` (a port of the wrong rule would be caught; on many seeds these rules coincide,
    e.g. when one draft is accepted whole almost surely).

    Raises:
        AssertionError: ``check`` and the case fails either condition.
    """
    draft, target = models
    case = fixed_case(name, rule, draft, target, K, L, seed, backend_dtype="float32")
    if check:
        laws = {r: exact_verdict_law(get_rule(r), case.draft_tokens, case.draft_probs, case.target_probs)
                for r in (rule,) + tuple(others)}
        tl = tau_law(laws[rule], L)
        assert tl.max() <= 0.99, tl
        for other in others:
            assert total_variation(laws[rule], laws[other]) >= 0.05, (rule, other)
    return case


def distinctive_cases(rule: str, check: bool = False) -> list[FixedCase]:
    """The toy (V = 3, K = L = 3) and rows (V = 4,096, K = L = 2) cases of a non-modifying rule
    (empty for the other rules)."""
    if rule not in TOY_SEED:
        return []
    others = tuple(r for r in DISTINCT_FROM if r != rule)
    return [distinctive_case(f"{rule} toy V=3 K=3 L=3 float32 (distinctive)", rule, toy_models(3, 12),
                             3, 3, TOY_SEED[rule], others, check),
            distinctive_case(f"{rule} rows V={LARGE_V} K=2 L=2 float32 (distinctive)", rule,
                             large_models(LARGE_V, 21), 2, 2, rows_seed(rule), others, check)]


# -- planted wrong rules -----------------------------------------------------------------------

@contextlib.contextmanager
def _replaced(module, name: str, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


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

    name = "planted_bv_shared_uniform"

    def decide(self, batch, noise):
        u = noise.uniforms[:, :, 1:2].expand_as(noise.uniforms)
        return super().decide(batch, dataclasses.replace(noise, uniforms=u))


class FirstFailureBV(BlockVerification):
    """BV stopping at the first failed coin instead of taking the last success."""

    name = "planted_bv_first_failure"

    def decide(self, batch, noise):
        with _replaced(_bv, "last_success", first_failure):
            return super().decide(batch, noise)


class FirstFailureGBV(GreedyBlockVerification):
    """GBV stopping at the first failed coin instead of taking the last success."""

    name = "planted_gbv_first_failure"

    def decide(self, batch, noise):
        with _replaced(_gbv, "last_success", first_failure):
            return super().decide(batch, noise)


class UnscaledSpecTr(SpecTr):
    """K-SEQ (SpecTr) with ρ = 1 instead of ρ*: over-accepts, and its residual is wrong."""

    name = "planted_spectr_rho1"

    def decide(self, batch, noise):
        with _replaced(_spectr, "rho_star", _rho_one):
            return super().decide(batch, noise)


class UnscaledKSeqGBV(KSeqGBV):
    """K-SEQ-GBV with ρ = 1 instead of ρ*."""

    name = "planted_kseq_gbv_rho1"

    def decide(self, batch, noise):
        with _replaced(_kseq_gbv, "rho_star", _rho_one):
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

    name = "planted_mdbv_kseq_fallback"

    def decide(self, batch, noise):
        with _replaced(_mdbv_kseq, "plan", _fallback_is_budget(_mdbv_kseq.plan)):
            return super().decide(batch, noise)


@dataclass(frozen=True)
class Planted:
    """A planted wrong rule: ``factory()`` builds it; it is certified against ``base``'s exact
    law on ``case(name, dtype)`` and must be caught."""

    name: str
    base: str
    description: str
    factory: Callable[[], object]
    K: int
    L: int
    V: int
    models_seed: int
    draft_seed: int

    def case(self, backend_dtype: str = "float32") -> FixedCase:
        return nondegenerate_case(f"{self.name} vs {self.base} toy V={self.V} K={self.K} L={self.L} {backend_dtype}",
                                  self.name, toy_models(self.V, self.models_seed), self.K, self.L,
                                  self.draft_seed, backend_dtype=backend_dtype, reference_rule=self.base,
                                  expect_pass=False)


PLANTED: dict[str, Planted] = {p.name: p for p in (
    Planted("planted_bv_shared_uniform", "bv", "BV with one uniform shared by the block",
            SharedUniformBV, 1, 3, 3, 9, 2),
    Planted("planted_bv_first_failure", "bv", "BV stopping at the first failed coin",
            FirstFailureBV, 1, 3, 3, 9, 2),
    Planted("planted_gbv_first_failure", "gbv", "GBV stopping at the first failed coin",
            FirstFailureGBV, 1, 3, 3, 9, 2),
    Planted("planted_spectr_rho1", "spectr", "K-SEQ (SpecTr) with rho = 1 at K = 2",
            UnscaledSpecTr, 2, 2, 3, 5, 3),
    Planted("planted_kseq_gbv_rho1", "kseq_gbv", "K-SEQ-GBV with rho = 1 at K = 2",
            UnscaledKSeqGBV, 2, 2, 3, 5, 3),
    Planted("planted_mdbv_kseq_fallback", "mdbv_kseq", "MDBV-KSEQ falling back with probability w at inner nodes",
            FallbackAtBudgetMDBVKSeq, 3, 3, 3, 12, 16),
)}
