"""Memoised exact quantities of an instance: E[τ] of one iteration, the law of the first N
tokens, expected target calls, block laws and oracle optima.  Claims share them, so each is
computed once per instance (keyed by the instance's label, which determines its models)."""

from __future__ import annotations


import numpy as np

from spectr_gbv.reference.decode import Decoder
from spectr_gbv.reference.exact import expected_tau, generation_law, iteration_law, target_law, total_variation
from spectr_gbv.reference.rules import Rule, get_rule

from spectr_gbv.proofs_check.instances import Instance

_CACHE: dict = {}


def _memo(key, fn):
    if key not in _CACHE:
        if len(_CACHE) > 20_000:
            _CACHE.clear()
        _CACHE[key] = fn()
    return _CACHE[key]


def clear() -> None:
    _CACHE.clear()


def _rule(rule: str | Rule) -> Rule:
    return get_rule(rule) if isinstance(rule, str) else rule


def _key(inst: Instance, *parts):
    return (inst.label, inst.K, inst.L, id(inst.draft) if not inst.label else 0, *parts)


def e_tau(inst: Instance, rule: str | Rule) -> float:
    """Exact E[τ] of the first iteration."""
    r = _rule(rule)
    return _memo(_key(inst, "etau", repr(r), r.name),
                 lambda: expected_tau(r, inst.draft, inst.target, inst.K, inst.L))


def tv(inst: Instance, rule: str | Rule, n_tokens: int | None = None) -> float:
    """TV between the law of the first N tokens (default L + 2) and the target's."""
    n = n_tokens or inst.L + 2
    r = _rule(rule)
    return _memo(_key(inst, "tv", repr(r), r.name, n),
                 lambda: total_variation(gen(inst, r, n).token_law, target_law(inst.target, n)))


def gen(inst: Instance, rule: str | Rule, n_tokens: int):
    """reference.exact.GenerationLaw of the first N tokens."""
    r = _rule(rule)
    return _memo(_key(inst, "gen", repr(r), r.name, n_tokens),
                 lambda: generation_law(r, inst.draft, inst.target, inst.K, inst.L, n_tokens))


def iter_law(inst: Instance, rule: str | Rule) -> dict:
    """Law of (τ, emitted tokens) of the first iteration (selected-draft index marginalised)."""
    r = _rule(rule)

    def compute():
        out: dict = {}
        for v, pr in iteration_law(r, Decoder(inst.draft, inst.target, inst.K, inst.L)).items():
            out[(v.tau, v.tokens)] = out.get((v.tau, v.tokens), 0.0) + pr
        return out

    return _memo(_key(inst, "law", repr(r), r.name), compute)


def blocks(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """(p_block, q_block) of the first window, shape (V,)*L each."""
    return _memo(_key(inst, "blocks"), lambda: (inst.draft.block_law(inst.L), inst.target.block_law(inst.L)))


def bound_B(inst: Instance, K: int | None = None) -> float:
    from spectr_gbv.oracle.bounds import bound_B as _B

    p, q = blocks(inst)
    return _B(p, q, inst.K if K is None else K)


def program(inst: Instance, name: str) -> float:
    """Optimum of an oracle program: cic, cic_block, global_ot, no_modification."""
    from spectr_gbv.oracle import programs

    fn = {"cic": programs.cic_program, "cic_block": programs.cic_block_program,
          "global_ot": programs.global_ot, "no_modification": programs.no_modification_lp}[name]

    def compute():
        p, q = blocks(inst)
        res = fn(p, q, inst.K, return_coupling=False)
        if not np.isfinite(res.optimum):
            raise RuntimeError(f"{name} program did not solve ({res.status}) on {inst}")
        return float(res.optimum)

    return _memo(_key(inst, "program", name), compute)


def law_distance(a: dict, b: dict) -> float:
    return total_variation(a, b)


# Below this LP optimum the instance accepts (almost) nothing whatever the rule, and a relative
# gap would be solver noise over solver noise (e.g. LP ≈ 1e-7 from CLARABEL on a nearly
# disjoint pair): the absolute gap is reported instead.
RELATIVE_GAP_FLOOR = 1e-3


def gap_to(ceiling: float, value: float) -> float:
    """Gap of ``value`` (an E[τ]) below ``ceiling`` (an LP optimum): relative,
    (ceiling − value) / ceiling, when ceiling ≥ RELATIVE_GAP_FLOOR, else absolute."""
    gap = ceiling - value
    return gap / ceiling if ceiling >= RELATIVE_GAP_FLOOR else gap
