"""``spectr-gbv bench``: AR, every rule and transformers' assisted generation on real models."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys


def _temperature(text: str) -> float:
    return float(text)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark AR, the rules and transformers' assisted generation on real models",
        description="Medians over prompts of block efficiency, speedup ratio vs AR (tokens/s), "
        "tokens/s, mean τ and acceptance rate (mean τ / L); methods interleaved per prompt.",
    )
    add_bench_arguments(p)
    p.set_defaults(func=run)


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark options (shared with ``spectr-gbv report``)."""
    from .engine import DEFAULT_K, DEFAULT_L

    p.add_argument("--methods", nargs="+", default=None,
                   help="ar sd spectr bv gbv spectr_gbv kseq_gbv kseq_bv traversal hf_assisted (default: "
                   "all of these; any other verifier name, e.g. mdbv, may be added)")
    p.add_argument("--dataset", default="humaneval", help="humaneval, gsm8k or a .jsonl/.tsv file")
    p.add_argument("--prompts", type=int, default=10, help="number of prompts (default 10)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--K", nargs="+", type=int, default=None,
                   help=f"K of the main point (first value, default {DEFAULT_K}); more values "
                   "replace the K sweep's")
    p.add_argument("--L", nargs="+", type=int, default=None,
                   help=f"L of the main point (first value, default {DEFAULT_L}); more values "
                   "replace the L sweep's")
    p.add_argument("--temperature", nargs="+", type=_temperature, default=None,
                   help="T of the main point (first value, default 0.7); more values replace "
                   "the T sweep's")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--sweep", nargs="+", default=["none"], choices=["none", "K", "L", "T", "all"],
                   help="ablations to run (all = none K L T)")
    p.add_argument("--sweep-prompts", type=int, default=None,
                   help="run the settings only a sweep asks for on the first N prompts "
                   "(default: every prompt); the main point runs on all")
    p.add_argument("--target", default="target", help="target model (embedded name, folder, hub id)")
    p.add_argument("--draft", default="draft", help="draft model")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--no-chat", action="store_true", help="encode prompts without the chat template")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--json", dest="json_file", default=None, help="write summary rows as JSON")
    p.add_argument("--runs-json", default=None, help="write every run's record as JSON")
    p.add_argument("--markdown", default=None, help="write the tables as markdown")
    p.add_argument("--plots", default=None, help="folder for PNG plots")
    p.add_argument("--quick", action="store_true",
                   help="2 prompts, 32 new tokens, no sweep (a smoke run)")


def config_from_args(args: argparse.Namespace):
    """BenchConfig from parsed arguments (``--quick`` overrides prompts and tokens)."""
    from .bench import METHODS, SWEEP_VALUES, BenchConfig
    from .engine import DEFAULT_K, DEFAULT_L

    sweeps = ("none", "K", "L", "T") if "all" in args.sweep else tuple(args.sweep)
    K = args.K or [DEFAULT_K]
    L = args.L or [DEFAULT_L]
    T = args.temperature or [0.7]
    config = BenchConfig(
        methods=tuple(args.methods or METHODS), dataset=args.dataset, prompts=args.prompts,
        max_new_tokens=args.max_new_tokens, K=K[0], L=L[0], temperature=T[0],
        top_k=args.top_k, top_p=args.top_p, sweeps=sweeps,
        K_values=tuple(K) if len(K) > 1 else SWEEP_VALUES["K"],
        L_values=tuple(L) if len(L) > 1 else SWEEP_VALUES["L"],
        T_values=tuple(T) if len(T) > 1 else SWEEP_VALUES["T"],
        target=args.target, draft=args.draft, dtype=args.dtype, seed=args.seed,
        chat=not args.no_chat, warmup=not args.no_warmup, sweep_prompts=args.sweep_prompts)
    if args.quick:
        config.prompts, config.max_new_tokens, config.sweeps = 2, 32, ("none",)
    config.check()
    return config


def set_threads(threads: int | None) -> None:
    import torch

    torch.set_num_threads(threads or os.cpu_count() or 1)


def write_outputs(result, args, command: str) -> None:
    from .bench import to_markdown, write_plots

    if args.json_file:
        with open(args.json_file, "w") as fh:
            json.dump(result.rows, fh, indent=1)
    if args.runs_json:
        with open(args.runs_json, "w") as fh:
            json.dump({"meta": result.meta, "runs": result.runs}, fh, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(to_markdown(result, command))
    if args.plots:
        for path in write_plots(result.rows, args.plots):
            print(f"wrote {path}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from .bench import run_bench, to_markdown

    try:
        config = config_from_args(args)
    except ValueError as err:
        print(f"spectr-gbv bench: {err}", file=sys.stderr)
        return 2
    set_threads(args.threads)
    command = "spectr-gbv " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    result = run_bench(config)
    print(to_markdown(result, command))
    write_outputs(result, args, command)
    return 0
