"""Standard certification cases: toy draft blocks (V ≤ 4), random rows at V = 4,096, and the
law-level planted case (the released SpecTr-GBV against the target's first-token law)."""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.models import ContextFree, Mixture, RandomModel, ToyModel
from spectr_gbv.reference.randomness import SamplingSource
from spectr_gbv.reference.rules import registry

from spectr_gbv.oracle.certify import FirstTokenCase, FixedCase



def fixed_case(name: str, rule: str, draft: ToyModel, target: ToyModel, K: int, L: int, seed: int,
               reference_rule: str | None = None, expect_pass: bool = True,
               backend_dtype: str = "float32") -> FixedCase:
    """K draft blocks of L tokens sampled (seeded) from ``draft``, with the verifier's rows."""
    dec = Decoder(draft, target, K, L)
    state = DecodeState()
    drafts = dec.draft_blocks(state, SamplingSource(seed))
    tokens, dp, tp = dec.block_inputs(state, drafts)
    return FixedCase(name, rule, reference_rule or rule, tokens, dp, tp, expect_pass, backend_dtype)


def toy_models(V: int, seed: int, concentration: float = 1.0) -> tuple[ToyModel, ToyModel]:
    """A prefix-dependent (draft, target) pair with a draft close enough for long acceptances."""
    target = RandomModel(V, seed, concentration)
    draft = Mixture(target, RandomModel(V, seed + 7919, concentration), 0.5)
    return draft, target


def coverage_models(V: int, seed: int) -> tuple[ToyModel, ToyModel]:
    """A prefix-dependent (draft, target) pair drawn independently (Dirichlet(1) rows, seeds
    ``seed`` and ``seed + 1000``): a draft far enough from the target that every depth's
    correction, the bonus and τ = 0 all have mass (gpu_backend.certify.suite.coverage_case)."""
    return RandomModel(V, seed, 1.0), RandomModel(V, seed + 1000, 1.0)


def large_models(V: int = 4096, seed: int = 0) -> tuple[ToyModel, ToyModel]:
    """Random rows at a realistic vocabulary: peaked Dirichlet target, draft a 40 % mixture."""
    target = RandomModel(V, seed, 0.05)
    draft = Mixture(target, RandomModel(V, seed + 104729, 0.05), 0.4)
    return draft, target


def released_rule_against_target(K: int = 2, L: int = 2) -> FirstTokenCase:
    """The released SpecTr-GBV checked against the target's law (the toy of docs/toy.md): must fail,
    P(first = a) = 4125/13328 instead of 1/3 at K = L = 2."""
    return FirstTokenCase(f"spectr_gbv vs target law, toy K={K} L={L}", "spectr_gbv",
                          ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]), K, L, expect_pass=False)


def lossless_against_target(rule: str, K: int = 2, L: int = 2) -> FirstTokenCase:
    """A lossless rule on the same law-level check: must pass."""
    K = registry.default_K(rule, K)
    return FirstTokenCase(f"{rule} vs target law, toy K={K} L={L}", rule,
                          ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]), K, L)


# -- the built-in case families of the public API (oracle.certify.certify_verifier) -------------

FAMILIES = ("toy", "prefix", "large", "zeros", "disjoint", "equal")


def _zero_target_mass(case: FixedCase) -> FixedCase:
    """The case with target probability 0 on every token drafted at depth 0, in every depth-0
    row (one context, so one row; renormalised): a verifier must never accept such a token.

    Raises:
        ValueError: the drafts cover every token of the target's support at depth 0.
    """
    tp = case.target_probs.copy()
    drafted = sorted(set(int(t) for t in case.draft_tokens[:, 0]))
    tp[:, 0, drafted] = 0.0
    if not (tp[:, 0].sum(-1) > 0).all():
        raise ValueError(f"family 'zeros': the {case.K} drafts cover the whole depth-0 support; "
                         "use fewer drafts or another seed")
    tp[:, 0] /= tp[:, 0].sum(-1, keepdims=True)
    return FixedCase(case.name, case.rule, case.reference_rule, case.draft_tokens, case.draft_probs,
                     tp, case.expect_pass, case.backend_dtype)


def _near_disjoint(case: FixedCase, leak: float = 1e-3) -> FixedCase:
    """Target rows put 1 − ``leak`` on the tokens the draft row makes least likely and ``leak``
    spread like the draft: acceptance is rare and the residual carries almost everything."""
    dp = case.draft_probs
    low = (dp <= np.quantile(dp, 0.5, axis=-1, keepdims=True)).astype(np.float64)
    far = low / low.sum(-1, keepdims=True)
    tp = case.target_probs.copy()
    tp[:, :-1] = (1 - leak) * far + leak * dp
    return FixedCase(case.name, case.rule, case.reference_rule, case.draft_tokens, dp, tp,
                     case.expect_pass, case.backend_dtype)


def case_family(family: str, rule: str, K: int, L: int, dtype: str = "float64", seed: int = 0) -> FixedCase:
    """One built-in fixed case of ``family`` for a verifier expected to follow ``rule``'s law.

    Families: "toy" (V = 3 prefix-dependent toy models, draft close to target), "prefix"
    (V = 5, rows depending on the whole prefix, draft far from target), "large" (V = 4,096
    peaked rows), "zeros" (toy rows, V = max(3, K + 1), with target probability 0 on the tokens
    drafted at depth 0),
    "disjoint" (V = 8, target rows nearly disjoint from the draft's), "equal" (p = q: every
    draft token must be accepted by a lossless single-path rule).

    Args:
        family: one of ``FAMILIES``.  rule: registered rule name whose exact law is expected.
        K, L: drafts and block length (K = 1 for a single-draft rule).  dtype: "float64",
        "float32" or "bfloat16" (the rows are rounded to it, the law is that of the rounded rows).
        seed: seeds the models and the drafts.
    Returns:
        FixedCase named "<rule> <family> V=… K=… L=…".
    Raises:
        ValueError: unknown family or rule, K or L < 1, K ≠ 1 for a single-draft rule.
    """
    registry.spec(rule)
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    for name, v in (("K", K), ("L", L)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if registry.is_single_draft(rule) and K != 1:
        raise ValueError(f"rule {rule!r} is single-draft: K must be 1, got {K}")
    if family == "toy":
        draft, target = toy_models(3, 100 + seed)
    elif family == "zeros":  # a vocabulary the K drafts cannot cover at depth 0
        draft, target = toy_models(max(3, K + 1), 100 + seed)
    elif family == "prefix":
        draft, target = RandomModel(5, 200 + seed, 0.5), RandomModel(5, 300 + seed, 0.5)
    elif family == "large":
        draft, target = large_models(4096, 21 + seed)
    elif family == "disjoint":
        draft, target = toy_models(8, 400 + seed)
    else:  # equal
        target = RandomModel(4, 500 + seed, 1.0)
        draft = target
    V = target.vocab_size
    case = fixed_case(f"{rule} {family} V={V} K={K} L={L}", rule, draft, target, K, L, seed,
                      backend_dtype=dtype)
    if family == "zeros":
        case = _zero_target_mass(case)
    elif family == "disjoint":
        case = _near_disjoint(case)
    return case
