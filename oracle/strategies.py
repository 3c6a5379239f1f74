"""Hypothesis strategies for verifier inputs (property-based tests of a verifier).

    from hypothesis import given
    from spectr_gbv.oracle.strategies import verifier_inputs, batched_inputs

    @given(verifier_inputs(V=4, K=2, L=3))
    def test_my_rule_accepts(inputs):
        draft_tokens, draft_probs, target_probs = inputs      # [K, L], [K, L, V], [K, L+1, V]

    @given(batched_inputs(B=8, K=1, kind="zero_mass"))
    def test_batched(batch):
        draft_tokens, draft_probs, target_probs = batch       # [B, K, L], [B, K, L, V], [B, K, L+1, V]

Every draw is one verification's inputs under the contract of reference/contract.py, built from
a pair of prefix-dependent toy models (reference.models: each conditional depends on the whole
prefix, so rows of drafts that share a prefix are equal, and rows of different prefixes differ):
the K blocks are drawn from the draft model (inverse CDF of a drawn uniform, so every drafted
token has draft probability > 0 and shrinking moves towards the most likely first tokens) and
the rows are the models' conditionals, float64, each summing to 1.  Row kinds (``KINDS``):

    "peaked"     Dirichlet(0.1) target rows, draft a mixture of the target and another model
    "flat"       Dirichlet(20) rows (nearly uniform), draft a mixture as above
    "disjoint"   at every prefix the draft's and the target's supports are disjoint
                 (every drafted token has target probability 0: nothing can be accepted)
    "zero_mass"  as "peaked" at Dirichlet(1), then the target gives probability 0 to the drafted
                 token at a drawn non-empty set of (draft, depth) positions (the row renormalised)
    "equal"      p = q: draft rows equal to the target rows at every prefix

This module imports numpy, hypothesis and reference.models only (no pytest, no torch).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.models import Mixture, RandomModel, ToyModel

KINDS = ("peaked", "flat", "disjoint", "zero_mass", "equal")

_SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


class _Split(ToyModel):
    """``base`` restricted, at every prefix, to one side of a seeded random split of the
    vocabulary into two non-empty halves (side 0 or 1): two _Split models with the same
    ``split_seed`` and different sides have disjoint supports at every prefix."""

    def __init__(self, base: ToyModel, split_seed: int, side: int):
        self.base, self.split_seed, self.side = base, int(split_seed), int(side)
        self.vocab_size = base.vocab_size

    def _conditional(self, prefix):
        V = self.vocab_size
        rng = np.random.default_rng([self.split_seed, V, len(prefix), *prefix])
        perm = rng.permutation(V)
        cut = int(rng.integers(1, V))  # both sides non-empty (V >= 2)
        mask = np.zeros(V, dtype=bool)
        mask[perm[:cut] if self.side == 0 else perm[cut:]] = True
        row = np.where(mask, self.base.conditional(prefix), 0.0)
        if row.sum() <= 0:  # the base row underflowed on this side: uniform on it
            row = mask.astype(np.float64)
        return row / row.sum()


class _Zeroed(ToyModel):
    """``base`` with probability 0 on the tokens ``zeros[prefix]`` after each prefix (the row
    renormalised).  If that would remove all mass, the rest of the vocabulary gets a uniform row;
    if every token is to be zeroed, the first one keeps probability 1."""

    def __init__(self, base: ToyModel, zeros: dict):
        self.base, self.zeros = base, {k: frozenset(v) for k, v in zeros.items()}
        self.vocab_size = base.vocab_size

    def _conditional(self, prefix):
        row = np.array(self.base.conditional(prefix), dtype=np.float64)
        drop = sorted(self.zeros.get(tuple(prefix), ()))
        if not drop:
            return row
        keep = np.ones(self.vocab_size, dtype=bool)
        keep[drop] = False
        if not keep.any():
            keep[drop[0]] = True
        row = np.where(keep, row, 0.0)
        if row.sum() <= 0:
            row = keep.astype(np.float64)
        return row / row.sum()


def _value(draw, x, name):
    """An int drawn from ``x`` (a strategy) or ``x`` itself (an int)."""
    v = draw(x) if isinstance(x, st.SearchStrategy) else x
    if isinstance(v, bool) or int(v) != v:
        raise ValueError(f"{name} must be an integer or a strategy of integers, got {v!r}")
    return int(v)


def _models(draw, kind: str, V: int):
    s, t = draw(_SEEDS), draw(_SEEDS)
    if kind in ("peaked", "flat", "zero_mass"):
        c = {"peaked": 0.1, "flat": 20.0, "zero_mass": 1.0}[kind]
        target = RandomModel(V, s, c)
        w = draw(st.floats(min_value=0.05, max_value=1.0))
        return Mixture(target, RandomModel(V, t, c), w), target
    if kind == "disjoint":
        split = draw(_SEEDS)
        return _Split(RandomModel(V, t, 1.0), split, 0), _Split(RandomModel(V, s, 1.0), split, 1)
    target = RandomModel(V, s, draw(st.sampled_from([0.3, 1.0, 5.0])))  # equal
    return target, target


def _draw_token(draw, row: np.ndarray) -> int:
    """A token of positive probability in ``row`` by inverse CDF of a drawn u in [0, 1)."""
    u = draw(st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
    j = int(np.searchsorted(np.cumsum(row), u, side="right"))
    support = np.flatnonzero(row > 0)
    if j >= len(row) or row[j] <= 0:  # rounding at the top of the CDF
        j = int(support[-1])
    return j


@st.composite
def verifier_inputs(draw, V=st.integers(min_value=2, max_value=6), K=st.integers(min_value=1, max_value=3),
                    L=st.integers(min_value=1, max_value=3), kind=st.sampled_from(KINDS)):
    """One verification's inputs (module doc).

    Args:
        V: vocabulary size ≥ 2 (an int or a strategy of ints).  K: drafts ≥ 1.  L: block
            length ≥ 1.  kind: one of ``KINDS`` or a strategy of them.
    Returns (the strategy draws):
        (draft_tokens int64 [K, L], draft_probs float64 [K, L, V], target_probs float64
        [K, L+1, V]), valid for ``reference.validation.check_iteration_inputs``: rows
        non-negative and summing to 1, draft_probs[k, i, draft_tokens[k, i]] > 0.
    Raises:
        ValueError (when drawing): V < 2, K < 1, L < 1 or an unknown kind.
    """
    V, K, L = _value(draw, V, "V"), _value(draw, K, "K"), _value(draw, L, "L")
    kind = draw(kind) if isinstance(kind, st.SearchStrategy) else kind
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if V < 2 or K < 1 or L < 1:
        raise ValueError(f"need V >= 2, K >= 1, L >= 1; got V={V}, K={K}, L={L}")
    draft, target = _models(draw, kind, V)
    blocks = []
    for _ in range(K):
        block: tuple[int, ...] = ()
        for _ in range(L):
            block += (_draw_token(draw, draft.conditional(block)),)
        blocks.append(block)
    if kind == "zero_mass":
        positions = draw(st.sets(st.tuples(st.integers(0, K - 1), st.integers(0, L - 1)), min_size=1,
                                 max_size=K * L))
        zeros: dict = {}
        for k, i in sorted(positions):
            zeros.setdefault(blocks[k][:i], set()).add(blocks[k][i])
        target = _Zeroed(target, zeros)
    tokens, dp, tp = Decoder(draft, target, K, L).block_inputs(DecodeState(), blocks)
    return tokens.astype(np.int64), dp.astype(np.float64), tp.astype(np.float64)


@st.composite
def batched_inputs(draw, B=st.integers(min_value=1, max_value=4), V=st.integers(min_value=2, max_value=6),
                   K=st.integers(min_value=1, max_value=3), L=st.integers(min_value=1, max_value=3),
                   kind=st.sampled_from(KINDS)):
    """B independent draws of ``verifier_inputs`` with one V, K, L, stacked along a batch axis.

    Args:
        B: batch size ≥ 1 (an int or a strategy of ints); V, K, L, kind as in
            ``verifier_inputs`` (V, K, L drawn once for the batch; a kind strategy is drawn per
            row, so a batch may mix kinds).
    Returns (the strategy draws):
        (draft_tokens int64 [B, K, L], draft_probs float64 [B, K, L, V], target_probs float64
        [B, K, L+1, V]), the batched contract's inputs (reference/contract.py).
    Raises:
        ValueError (when drawing): B < 1 and the cases of ``verifier_inputs``.
    """
    B = _value(draw, B, "B")
    if B < 1:
        raise ValueError(f"B must be >= 1, got {B}")
    V, K, L = _value(draw, V, "V"), _value(draw, K, "K"), _value(draw, L, "L")
    rows = [draw(verifier_inputs(V=V, K=K, L=L, kind=kind)) for _ in range(B)]
    return tuple(np.stack([r[j] for r in rows]) for j in range(3))
