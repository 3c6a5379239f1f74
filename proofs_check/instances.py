"""Instances on which claims are checked: the toy of docs/toy.md, fixed seeds, and
hypothesis strategies over prefix-dependent toy models (peaked to flat rows, p = q, disjoint
supports, zero-probability tokens).  Hypothesis shrinks a failing instance towards small V, K,
L and simple models, so that a failing claim reports a small counterexample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from spectr_gbv.reference.models import ContextFree, Prefix, RandomModel, ToyModel

# the largest V^(K·L) (draft configurations per decode state) the fuzzers generate: beyond
# this the exact engine takes minutes per instance
DEFAULT_CONFIG_BUDGET = 729
CONCENTRATIONS = (0.1, 0.3, 1.0, 3.0, 30.0)


class ComplementModel(ToyModel):
    """Puts its mass where ``base`` has none: uniform on {x : base(x | prefix) = 0}, or uniform
    on Ω where base has full support.  With a sparse base this gives disjoint supports."""

    def __init__(self, base: ToyModel):
        self.base = base
        self.vocab_size = base.vocab_size

    def _conditional(self, prefix: Prefix) -> np.ndarray:
        zero = self.base.conditional(prefix) == 0
        row = zero.astype(np.float64) if zero.any() else np.ones(self.vocab_size)
        return row / row.sum()

    def __repr__(self) -> str:
        return f"ComplementModel({self.base!r})"


@dataclass(frozen=True)
class Instance:
    """Draft and target toy models with K drafts of L tokens."""

    draft: ToyModel
    target: ToyModel
    K: int
    L: int
    label: str = ""

    @property
    def V(self) -> int:
        return self.target.vocab_size

    def with_K(self, K: int) -> "Instance":
        return Instance(self.draft, self.target, K, self.L, self.label)

    def to_json(self, depth: int) -> dict:
        """The instance in the model-file format of ``spectr-gbv exact`` (prefixes of length
        < depth tabulated), plus K and L."""
        return {
            "K": self.K,
            "L": self.L,
            "draft": self.draft.to_table(depth).to_json(),
            "target": self.target.to_table(depth).to_json(),
            "label": self.label,
        }

    def __str__(self) -> str:
        return self.label or f"V={self.V} K={self.K} L={self.L}"


def toy(K: int, L: int) -> Instance:
    """docs/toy.md: Ω = {a, b}, p = (2/3, 1/3), q = (1/3, 2/3), context-free."""
    return Instance(ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]), K, L, f"toy K={K} L={L}")


def random_instance(V: int, K: int, L: int, seed: int, concentration: float = 1.0,
                    zero_prob: float = 0.0, kind: str = "random") -> Instance:
    """Seeded prefix-dependent instance.

    kind: "random" (independent draft and target), "equal" (p = q), "disjoint" (draft mass
    only where the target has none, where possible).
    """
    target = RandomModel(V, seed, concentration, zero_prob)
    if kind == "equal":
        draft = target
    elif kind == "disjoint":
        target = RandomModel(V, seed, concentration, max(zero_prob, 0.5))
        draft = ComplementModel(target)
    elif kind == "random":
        draft = RandomModel(V, seed + 1_000_003, concentration, zero_prob)
    else:
        raise ValueError(f"kind must be random, equal or disjoint, got {kind!r}")
    label = f"{kind} V={V} K={K} L={L} seed={seed} conc={concentration} zero={zero_prob}"
    return Instance(draft, target, K, L, label)


def fixed_instances(Ks=(1, 2, 3), Ls=(1, 2, 3), Vs=(2, 3), seeds=(0, 1),
                    budget: int = DEFAULT_CONFIG_BUDGET) -> list[Instance]:
    """A deterministic grid of instances within the configuration budget."""
    out = []
    for V in Vs:
        for K in Ks:
            for L in Ls:
                if V ** (K * L) > budget:
                    continue
                for seed in seeds:
                    conc = CONCENTRATIONS[(seed + V + K + L) % len(CONCENTRATIONS)]
                    out.append(random_instance(V, K, L, seed, conc))
    return out


@st.composite
def instances(draw, Vs=(2, 3), Ks=(1, 2, 3), Ls=(1, 2, 3), budget: int = DEFAULT_CONFIG_BUDGET,
              kinds=("random", "random", "random", "equal", "disjoint")) -> Instance:
    """Hypothesis strategy of prefix-dependent instances with V^(K·L) ≤ budget.

    Shrinks towards small V, K, L, seed 0, concentration 0.1 and independent models.
    """
    V = draw(st.sampled_from(sorted(Vs)))
    K = draw(st.sampled_from(sorted(Ks)))
    feasible = [L for L in sorted(Ls) if V ** (K * L) <= budget]
    if not feasible:
        K = min(Ks)
        feasible = [L for L in sorted(Ls) if V ** (K * L) <= budget] or [min(Ls)]
    L = draw(st.sampled_from(feasible))
    seed = draw(st.integers(0, 10_000))
    conc = draw(st.sampled_from(CONCENTRATIONS))
    zero_prob = draw(st.sampled_from((0.0, 0.0, 0.3)))
    kind = draw(st.sampled_from(kinds))
    return random_instance(V, K, L, seed, conc, zero_prob, kind)
