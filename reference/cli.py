"""``spectr-gbv exact``: exact E[τ], block efficiency and TV to the target for one rule."""

from __future__ import annotations

import argparse
import json
import sys
import time


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "exact",
        help="exact E[tau], block efficiency and TV of the first N emitted tokens to the target",
        description="Exact law of a verification rule on toy models given as model files "
        '{"vocab_size": V, "conditionals": {"": [...], "0,1": [...]}} (prefix of token ids -> '
        "next-token probabilities; a missing prefix falls back to its longest listed suffix).",
    )
    p.add_argument("--rule", required=True, help="sd, spectr, bv, gbv, spectr_gbv, spectr_gbv_fixed, kseq_gbv, ...")
    p.add_argument("--K", type=int, required=True, help="number of drafts (>= 1)")
    p.add_argument("--L", type=int, required=True, help="block length (>= 1)")
    p.add_argument("--draft", required=True, help="draft model file (JSON)")
    p.add_argument("--target", required=True, help="target model file (JSON)")
    p.add_argument("--tokens", type=int, default=None, help="N emitted tokens for the TV (default L + 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .exact import expected_tau, generation_law, target_law, total_variation
    from .models import load_model_file
    from .rules import get_rule

    try:
        rule = get_rule(args.rule)
        draft = load_model_file(args.draft)
        target = load_model_file(args.target)
        n_tokens = args.tokens if args.tokens is not None else args.L + 2
        start = time.perf_counter()
        e_tau = expected_tau(rule, draft, target, args.K, args.L)
        gen = generation_law(rule, draft, target, args.K, args.L, n_tokens)
        tv = total_variation(gen.token_law, target_law(target, n_tokens))
        seconds = time.perf_counter() - start
    except (ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"spectr-gbv exact: error: {exc}", file=sys.stderr)
        return 2
    result = {
        "rule": args.rule,
        "K": args.K,
        "L": args.L,
        "tokens": n_tokens,
        "expected_accepted": e_tau,
        "block_efficiency": e_tau + 1.0,
        "tv_to_target": tv,
        "lossless": tv <= 1e-12,
        "expected_target_calls": gen.expected_target_calls,
        "tokens_per_target_call": gen.tokens_per_call,
        "seconds": seconds,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"rule {args.rule}  K={args.K}  L={args.L}")
        print(f"E[tau] (one iteration)          {e_tau:.12f}")
        print(f"block efficiency E[tau] + 1     {e_tau + 1:.12f}")
        print(f"TV(first {n_tokens} tokens, target)   {tv:.3e}   ({'lossless' if tv <= 1e-12 else 'NOT lossless'} at 1e-12)")
        print(f"expected target calls for {n_tokens} tokens  {gen.expected_target_calls:.12f}"
              f"  ({gen.tokens_per_call:.6f} tokens per call)")
    return 0
