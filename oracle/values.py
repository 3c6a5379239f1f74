"""Every oracle value of one iteration after the empty context (``spectr-gbv oracle``): the
bound B(K, L), the prefix-match ceiling U(K, L), the CIC programs, global block OT and the
no-modification LP, and which optimum was not reached."""

from __future__ import annotations

import math


def oracle_values(draft, target, K: int, L: int, time_limit: float | None = None) -> dict:
    """Every oracle value for one iteration after the empty context.

    Returns:
        dict with bound_B, prefix_match_ceiling (U(K, L), docs/bounds.md §6), cic_optimum,
        cic_block_optimum, global_ot_optimum, no_modification_optimum (accepted tokens per
        iteration), alpha_star (L = 1 only, else None), and the solver statuses.
    """
    from spectr_gbv.reference.validation import check_positive_int

    from spectr_gbv.oracle.bounds import alpha_star, bound_B
    from spectr_gbv.oracle.prefix_match import prefix_match_bound
    from spectr_gbv.oracle.programs import cic_block_program, cic_program, global_ot, no_modification_lp

    K = check_positive_int(K, "K")
    L = check_positive_int(L, "L")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"vocabulary mismatch: draft has V = {draft.vocab_size}, target has V = {target.vocab_size}")
    p_block, q_block = draft.block_law(L), target.block_law(L)
    opts = dict(time_limit=time_limit, return_coupling=False)
    cic = cic_program(p_block, q_block, K, **opts)
    cic_b = cic_block_program(p_block, q_block, K, **opts)
    got = global_ot(p_block, q_block, K, **opts)
    nomod = no_modification_lp(p_block, q_block, K, **opts)
    return {
        "K": K,
        "L": L,
        "bound_B": bound_B(p_block, q_block, K),
        "prefix_match_ceiling": float(prefix_match_bound(p_block, q_block, K).sum()),
        "cic_optimum": cic.optimum,
        "cic_block_optimum": cic_b.optimum,
        "global_ot_optimum": got.optimum,
        "no_modification_optimum": nomod.optimum,
        "alpha_star": alpha_star(draft.conditional(()), target.conditional(()), K) if L == 1 else None,
        "status": {"cic": cic.status, "cic_block": cic_b.status, "global_ot": got.status,
                   "no_modification": nomod.status},
    }


def not_reached(values: dict) -> list[str]:
    """The programs of ``oracle_values`` whose optimum was not reached (the programs report a
    NaN optimum unless the solver's status is optimal or optimal_inaccurate)."""
    out = []
    for name in values["status"]:
        optimum = values.get(f"{name}_optimum")
        if not (isinstance(optimum, (int, float)) and math.isfinite(optimum)):
            out.append(name)
    return out
