"""``spectr-gbv oracle``: the bound B(K, L) and the optimal-transport programs on toy models."""

from __future__ import annotations

import argparse
import math
import sys


def register(subparsers) -> None:
    from spectr_gbv.cli.args import (DEFAULT_MAX_VARIABLES, add_json_flag, existing_file, positive_float,
                                    positive_int)

    p = subparsers.add_parser(
        "oracle",
        help="B(K,L), CIC programs, global block OT and the no-modification LP for one iteration",
        description="Bounds on what one iteration can accept, for draft/target model files in the "
        "format of 'spectr-gbv exact' (the first window after the empty context).  Programs whose "
        "estimated size exceeds --max-variables are refused up front with the estimate.",
    )
    p.add_argument("--K", type=positive_int, required=True, help="number of drafts (>= 1)")
    p.add_argument("--L", type=positive_int, required=True, help="block length (>= 1)")
    p.add_argument("--draft", type=existing_file, required=True, help="draft model file (JSON)")
    p.add_argument("--target", type=existing_file, required=True, help="target model file (JSON)")
    p.add_argument("--time-limit", type=positive_float, default=None,
                   help="per-program solver limit in seconds (> 0)")
    p.add_argument("--max-variables", type=positive_int, default=DEFAULT_MAX_VARIABLES,
                   help="refuse when a program's estimated number of variables (or a block law's V^L "
                   f"entries) exceeds this (default {DEFAULT_MAX_VARIABLES:,})")
    add_json_flag(p, "one JSON object with the oracle values")
    p.set_defaults(func=run, check=check)


def check(args: argparse.Namespace) -> None:
    """Before any program is built: the model files and the programs' sizes."""
    from spectr_gbv.cli.exact import load_model_pair
    from spectr_gbv.cli.args import UsageError, available_memory_bytes, format_log10, human_bytes, oracle_sizes

    args.draft_model, args.target_model = load_model_pair(args)
    size = oracle_sizes(args.draft_model, args.target_model, args.K, args.L)
    V = args.target_model.vocab_size
    limit = math.log10(args.max_variables)
    largest = max(size["cic"], size["global_ot"], size["no_modification"])
    where = (f"--K {args.K} --L {args.L} (V = {V})")
    if size["block"] > limit:
        raise UsageError(f"{where}: each block law has V^L = {format_log10(size['block'])} entries, above "
                         f"--max-variables {args.max_variables:,}")
    if largest > limit:
        raise UsageError(
            f"{where}: the programs would have up to {format_log10(largest)} variables (CIC "
            f"{format_log10(size['cic'])}, global OT {format_log10(size['global_ot'])}, no-modification LP "
            f"{format_log10(size['no_modification'])}; n = {format_log10(size['draft_blocks'])} draft and "
            f"m = {format_log10(size['target_blocks'])} target blocks, C(n+K-1, K) = "
            f"{format_log10(size['multisets'])} draft multisets), above --max-variables {args.max_variables:,}; "
            "raise --max-variables to run it anyway")
    avail = available_memory_bytes()
    if avail is not None and size["tuples_bytes"] > math.log10(avail):
        raise UsageError(f"{where}: the draft multisets alone need {human_bytes(10 ** min(size['tuples_bytes'], 30))}"
                         f", more than the {human_bytes(avail)} of memory available")


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


def run(args: argparse.Namespace) -> int:
    from spectr_gbv.cli.args import UsageError, json_safe, text_stream, write_json

    if getattr(args, "draft_model", None) is None:  # check() not run (a direct call)
        check(args)
    try:
        values = oracle_values(args.draft_model, args.target_model, args.K, args.L, args.time_limit)
    except ValueError as exc:
        raise UsageError(f"--draft {args.draft} / --target {args.target}: {exc}") from None
    # strict JSON: an optimum not reached (NaN) is null, never a bare NaN
    write_json(args.json_file, json_safe(values), indent=None, allow_nan=False)
    out = text_stream(args)
    print(f"K={args.K}  L={args.L}   (accepted tokens per iteration)", file=out)
    for key in ("bound_B", "prefix_match_ceiling", "cic_optimum", "cic_block_optimum", "global_ot_optimum", "no_modification_optimum",
                "alpha_star"):
        if values[key] is not None:
            shown = f"{values[key]:.10f}" if math.isfinite(values[key]) else "not reached"
            print(f"{key:26s} {shown}", file=out)
    print(f"solver status: {values['status']}", file=out)
    unsolved = not_reached(values)
    if unsolved:
        hint = (f"; --time-limit {args.time_limit:g} may be too small" if args.time_limit is not None
                else "")
        which = ", ".join(f"{k} (status {values['status'][k]})" for k in unsolved)
        print(f"spectr-gbv oracle: not solved to optimality, optimum reported as null: {which}{hint}",
              file=sys.stderr)
        return 1
    return 0


def not_reached(values: dict) -> list[str]:
    """The programs of ``oracle_values`` whose optimum was not reached (the programs report a
    NaN optimum unless the solver's status is optimal or optimal_inaccurate)."""
    out = []
    for name in values["status"]:
        optimum = values.get(f"{name}_optimum")
        if not (isinstance(optimum, (int, float)) and math.isfinite(optimum)):
            out.append(name)
    return out
