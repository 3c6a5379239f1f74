"""``spectr-gbv oracle``: the bound B(K, L) and the optimal-transport programs on toy models."""

from __future__ import annotations

import argparse
import math
import sys


def register(subparsers) -> None:
    from spectr_gbv.cli.args import add_json_flag, existing_file, positive_float, positive_int
    from spectr_gbv.oracle.sizes import DEFAULT_MAX_VARIABLES

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
    from spectr_gbv.cli.args import UsageError
    from spectr_gbv.gpu_backend.engine import memory
    from spectr_gbv.oracle.sizes import oracle_sizes
    from spectr_gbv.reference.sizes import format_log10

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
    avail = memory.available_memory_bytes()
    if avail is not None and size["tuples_bytes"] > math.log10(avail):
        raise UsageError(f"{where}: the draft multisets alone need {memory.human_bytes(10 ** min(size['tuples_bytes'], 30))}"
                         f", more than the {memory.human_bytes(avail)} of memory available")


def run(args: argparse.Namespace) -> int:
    from spectr_gbv.cli.args import UsageError, json_safe, text_stream, write_json
    from spectr_gbv.oracle.values import not_reached, oracle_values

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
