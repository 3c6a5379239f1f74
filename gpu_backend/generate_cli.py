"""``spectr-gbv generate``: speculative decoding of one prompt, printing the text and metrics."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    from .engine import DEFAULT_K, DEFAULT_L, DEFAULT_RULE

    p = subparsers.add_parser(
        "generate",
        help="generate text for one prompt with speculative decoding and print metrics",
        description="Draft with the draft model, verify with RULE against the target; prints the "
        "text, then block efficiency, mean τ, acceptance rate (mean τ / L), tokens/s and peak RSS.",
    )
    p.add_argument("--prompt", required=True, help="the user message (chat template applied)")
    p.add_argument("--rule", default=DEFAULT_RULE,
                   help=f"verification rule (default {DEFAULT_RULE}); 'ar' for plain sampling")
    p.add_argument("--K", type=int, default=None,
                   help=f"drafts per iteration (default {DEFAULT_K}; 1 for sd, bv, gbv)")
    p.add_argument("--L", type=int, default=DEFAULT_L, help=f"block length (default {DEFAULT_L})")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="target", help="target model (embedded name, folder, hub id)")
    p.add_argument("--draft", default="draft", help="draft model")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--no-chat", action="store_true", help="encode the prompt as plain text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .bench import load_pair
    from .bench_cli import set_threads
    from .engine import (DEFAULT_K, SINGLE_DRAFT_RULES, SpeculativeEngine,
                         autoregressive_generate)
    from .prompts import encode_prompt
    from .sampling import SamplingConfig

    try:
        sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
        K = args.K if args.K is not None else (1 if args.rule in SINGLE_DRAFT_RULES else DEFAULT_K)
        set_threads(args.threads)
        pair = load_pair(args.target, args.draft, args.dtype) if args.rule != "ar" else None
        if pair is None:
            from .engine import eos_token_ids
            from .weights import load_causal_lm

            target, tokenizer = load_causal_lm(args.target, args.dtype)
            eos = eos_token_ids(target, tokenizer)
        else:
            target, tokenizer, eos = pair.target, pair.tokenizer, pair.eos
        ids = encode_prompt(tokenizer, args.prompt, chat=not args.no_chat)
        if args.rule == "ar":
            result = autoregressive_generate(target, ids, args.max_new_tokens, sampling,
                                             args.seed, eos)
        else:
            engine = SpeculativeEngine(target, pair.draft, rule=args.rule, K=K, L=args.L,
                                       sampling=sampling, eos_token_ids=eos)
            result = engine.generate(ids, args.max_new_tokens, seed=args.seed)
    except ValueError as err:
        print(f"spectr-gbv generate: {err}", file=sys.stderr)
        return 2
    print(tokenizer.decode(result.tokens, skip_special_tokens=True))
    print("---")
    m = result.metrics()
    print(f"rule {m['method']}  K={m['K']}  L={m['L']}  T={args.temperature}  "
          f"stop: {m['stop_reason']}")
    print(f"new tokens {m['new_tokens']}  target calls {m['target_calls']}  "
          f"block efficiency {m['block_efficiency']:.2f}")
    if result.taus:
        acc = " ".join(f"{a:.2f}" for a in m["per_position_acceptance"])
        print(f"mean τ {m['mean_accepted']:.2f}  acceptance rate (mean τ / L) "
              f"{m['acceptance_rate']:.2f}  P(τ ≥ i), i = 1..L: {acc}")
    print(f"wall {m['wall_time_s']:.2f} s  {m['tokens_per_second']:.2f} tokens/s  "
          f"peak RSS {m['peak_rss_bytes'] / 1e9:.2f} GB")
    return 0
