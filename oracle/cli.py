"""``spectr-gbv oracle``: the bound B(K, L) and the optimal-transport programs on toy models."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "oracle",
        help="B(K,L), CIC programs, global block OT and the no-modification LP for one iteration",
        description="Bounds on what one iteration can accept, for draft/target model files in the "
        "format of 'spectr-gbv exact' (the first window after the empty context).",
    )
    p.add_argument("--K", type=int, required=True, help="number of drafts (>= 1)")
    p.add_argument("--L", type=int, required=True, help="block length (>= 1)")
    p.add_argument("--draft", required=True, help="draft model file (JSON)")
    p.add_argument("--target", required=True, help="target model file (JSON)")
    p.add_argument("--time-limit", type=float, default=None, help="per-program solver limit in seconds")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def oracle_values(draft, target, K: int, L: int, time_limit: float | None = None) -> dict:
    """Every oracle value for one iteration after the empty context.

    Returns:
        dict with bound_B, cic_optimum, cic_block_optimum, global_ot_optimum,
        no_modification_optimum (accepted tokens per iteration), alpha_star (L = 1 only, else
        None), and the solver statuses.
    """
    from reference.validation import check_positive_int

    from .bounds import alpha_star, bound_B
    from .programs import cic_block_program, cic_program, global_ot, no_modification_lp

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
        "cic_optimum": cic.optimum,
        "cic_block_optimum": cic_b.optimum,
        "global_ot_optimum": got.optimum,
        "no_modification_optimum": nomod.optimum,
        "alpha_star": alpha_star(draft.conditional(()), target.conditional(()), K) if L == 1 else None,
        "status": {"cic": cic.status, "cic_block": cic_b.status, "global_ot": got.status,
                   "no_modification": nomod.status},
    }


def run(args: argparse.Namespace) -> int:
    from reference.models import load_model_file

    try:
        draft = load_model_file(args.draft)
        target = load_model_file(args.target)
        values = oracle_values(draft, target, args.K, args.L, args.time_limit)
    except (ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"spectr-gbv oracle: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(values))
        return 0
    print(f"K={args.K}  L={args.L}   (accepted tokens per iteration)")
    for key in ("bound_B", "cic_optimum", "cic_block_optimum", "global_ot_optimum", "no_modification_optimum",
                "alpha_star"):
        if values[key] is not None:
            print(f"{key:26s} {values[key]:.10f}")
    print(f"solver status: {values['status']}")
    return 0
