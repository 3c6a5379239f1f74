"""The outcome classes a verification rule's code distinguishes, and their exact probabilities
on a fixed case: what a certification case must put mass on for its N to have power against a
defect in that branch.

A class is a set of outcomes of one verification (reference.verdict.Verdict) named by the
branch of the rule's code that produces it:

  * ``correction@d`` (d = 0..L−1): τ = d, the emitted token is drawn from the depth-d
    correction (residual) row;
  * ``bonus``: τ = L, the emitted token is the target's bonus draw;
  * ``weighted correction@d`` (0 < d < L, rules whose correction at depth d is weighted by a
    function of the accepted prefix z = X_≤d, ``WEIGHT_KIND``): τ = d and the weight differs
    from 1 by at least ``WEIGHT_GAP`` — BV's p_d (the capped product of the ratios q/p along z:
    Sun et al., ICLR 2025, Alg. 2) for "capped", the uncapped joint ratio q(z)/p(z) of GBV's
    residual (q(z)·q(·|z) − p(z)·p(·|z))_+ (docs/rules.md §2.4) for "joint".  With the weight
    at 1 the residual is the token rule's (q − p)_+ and a defect dropping the weight is invisible;
  * ``draft k`` (K ≥ 2, k = 0..K−1): τ ≥ 1 and the emitted prefix is draft k's (``selected``
    = k; the lowest such index for rules that keep several drafts alive), so every draft's
    coins and rows are read on some outcome of positive probability;
  * ``algorithm2 record`` (rules that modify later targets): the verdict carries the
    Algorithm 2 record (reference.verdict.Modification) that opens a window in later
    iterations.

The probabilities are exact: the reference rule's law enumerated branch by branch
(reference.randomness.enumerate_law), not sampled.
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.randomness import enumerate_law
from spectr_gbv.reference.rules import get_rule, registry

# How a rule weighs its correction at depth 0 < d < L by the accepted prefix (None: it does
# not; sd and SpecTr correct with (q − ρ·p)_+ whatever the prefix).  A rule registered at run
# time and missing here gets the generic classes only.
WEIGHT_KIND = {"sd": None, "spectr": None, "bv": "capped", "kseq_bv": "capped",
               "traversal": "capped", "mdbv": "capped", "mdbv_kseq": "capped",
               "gbv": "joint", "kseq_gbv": "joint", "spectr_gbv": "joint", "spectr_gbv_fixed": "joint"}
WEIGHT_GAP = 0.1


def prefix_weight(kind: str, draft_tokens: np.ndarray, draft_probs: np.ndarray,
                  target_probs: np.ndarray, k: int, d: int) -> float:
    """The weight of the correction at depth d along draft k's first d tokens z.

    Args:
        kind: "capped" (BV's p_d = min(1, p_{d−1}·q(z_d)/p(z_d)), p_0 = 1) or "joint"
            (q(z)/p(z), the product of the ratios, uncapped).
        draft_tokens: int [K, L]; draft_probs: float [K, L, V]; target_probs: float [K, L+1, V].
        k, d: draft index and depth (0 ≤ d ≤ L).
    Returns:
        float, ≥ 0.
    Raises:
        ValueError: unknown kind.
    """
    if kind not in ("capped", "joint"):
        raise ValueError(f"kind must be 'capped' or 'joint', got {kind!r}")
    w = 1.0
    for i in range(d):
        x = int(draft_tokens[k, i])
        w *= float(target_probs[k, i, x]) / float(draft_probs[k, i, x])
        if kind == "capped":
            w = min(1.0, w)
    return w


def class_names(rule: str, K: int, L: int) -> tuple[str, ...]:
    """The classes of ``rule`` at K drafts of L tokens, in a fixed order (module doc).

    Raises:
        ValueError: unknown rule.
    """
    spec = registry.spec(rule)
    names = [f"correction@{d}" for d in range(L)] + ["bonus"]
    if WEIGHT_KIND.get(rule) is not None:
        names += [f"weighted correction@{d}" for d in range(1, L)]
    if K >= 2:
        names += [f"draft {k}" for k in range(K)]
    if spec.modifies_targets:
        names.append("algorithm2 record")
    return tuple(names)


def class_probabilities(rule: str, draft_tokens, draft_probs, target_probs) -> dict[str, float]:
    """Exact probability of each class of ``class_names(rule, K, L)`` for one fixed case.

    Args:
        rule: registered rule name (its registered parameters: ``get_rule(rule)``).
        draft_tokens: int [K, L]; draft_probs: float [K, L, V]; target_probs: float [K, L+1, V]
            (the rows the certified backend is given).
    Returns:
        dict class name → probability (float64; the correction@d and bonus classes sum to 1).
    Raises:
        ValueError: unknown rule or malformed inputs (reference.validation).
    """
    ref = get_rule(rule)
    block = ref.prepare(draft_tokens, draft_probs, target_probs)
    K, L = block.K, block.L
    names = class_names(rule, K, L)
    out = dict.fromkeys(names, 0.0)
    kind = WEIGHT_KIND.get(rule)
    for verdict, pr in enumerate_law(lambda src: ref.decide(block, src)).items():
        out["bonus" if verdict.tau == L else f"correction@{verdict.tau}"] += pr
        if kind is not None and 0 < verdict.tau < L:
            w = prefix_weight(kind, block.tokens, block.dp, block.tp, verdict.selected, verdict.tau)
            if abs(1.0 - w) >= WEIGHT_GAP:
                out[f"weighted correction@{verdict.tau}"] += pr
        if K >= 2 and verdict.tau >= 1:
            out[f"draft {verdict.selected}"] += pr
        if "algorithm2 record" in out and verdict.modification is not None:
            out["algorithm2 record"] += pr
    return out
