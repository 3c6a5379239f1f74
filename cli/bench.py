"""``spectr-gbv bench``: AR, every rule and transformers' assisted generation on real models."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import zlib


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark AR, the rules and transformers' assisted generation on real models",
        description="Medians over prompts of block efficiency, speedup ratio vs AR (tokens/s), "
        "tokens/s, mean τ and acceptance rate (Σ τ / Σ drafted positions); methods interleaved per prompt.",
    )
    add_bench_arguments(p)
    p.set_defaults(func=run, check=check)


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark options (shared with ``spectr-gbv report``)."""
    from spectr_gbv.cli.args import (add_json_flag, dtype_or_auto, nonneg_int, output_dir, output_file,
                                    positive_int, positive_temperature_value, seed_int)

    from spectr_gbv.gpu_backend.bench.config import default_methods
    from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L

    p.add_argument("--methods", nargs="+", default=None,
                   help=" ".join(default_methods()) + " (default: all of these: every registered rule "
                   "with a batched plan; any other verifier name, e.g. mdbv, may be added; ar is required)")
    p.add_argument("--dataset", default="humaneval", help="humaneval, gsm8k or a .jsonl/.tsv file")
    p.add_argument("--prompts", type=positive_int, default=10, help="number of prompts (default 10)")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument("--K", nargs="+", type=positive_int, default=None,
                   help=f"K of the main point (first value, default {DEFAULT_K}); more values "
                   "replace the K sweep's")
    p.add_argument("--L", nargs="+", type=positive_int, default=None,
                   help=f"L of the main point (first value, default {DEFAULT_L}); more values "
                   "replace the L sweep's")
    p.add_argument("--temperature", nargs="+", type=positive_temperature_value, default=None,
                   help="T of the main point (first value, default 0.7; each >= 1e-4); more values "
                   "replace the T sweep's")
    p.add_argument("--top-k", type=nonneg_int, default=None, help="keep the k largest logits (0: off)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus mass in (0, 1]")
    p.add_argument("--sweep", nargs="+", default=["none"], choices=["none", "K", "L", "T", "all"],
                   help="ablations to run (all = none K L T)")
    p.add_argument("--sweep-prompts", type=positive_int, default=None,
                   help="run the settings only a sweep asks for on the first N prompts "
                   "(default: every prompt); the main point runs on all")
    p.add_argument("--target", default="target", help="target model (embedded name, folder, hub id)")
    p.add_argument("--draft", default="draft", help="draft model")
    p.add_argument("--dtype", type=dtype_or_auto, default="auto",
                   help="auto (default): bfloat16 where this machine computes it no slower than float32 (measured once per machine: gpu_backend/tuning/dtype_probe.py), else float32")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--no-chat", action="store_true", help="encode prompts without the chat template")
    p.add_argument("--no-warmup", action="store_true")
    add_json_flag(p, "the summary rows")
    p.add_argument("--runs-json", type=output_file, default=None, help="write every run's record as JSON")
    p.add_argument("--markdown", type=output_file, default=None, help="write the tables as markdown")
    p.add_argument("--plots", type=output_dir, default=None, help="folder for PNG plots")
    p.add_argument("--quick", action="store_true",
                   help="2 prompts, 32 new tokens, no sweep (a smoke run)")


# -- checks (no model is loaded) -----------------------------------------------------------------

def check_top_p(top_p: float | None) -> None:
    from spectr_gbv.cli.args import UsageError

    if top_p is not None and not (0.0 < top_p <= 1.0):  # NaN fails too
        raise UsageError(f"--top-p must be in (0, 1], got {top_p}")


def check_temperatures(temperatures) -> None:
    """Every temperature of the run (``--temperature`` values and the T sweep's) a positive
    temperature (``gpu_backend.decoding.temperature``: >= ``MIN_TEMPERATURE``, no greedy; the flag's
    type checks the given ones, this covers the sweep's too), with the same message."""
    from spectr_gbv.cli.args import UsageError
    from spectr_gbv.gpu_backend.decoding.temperature import temperature_problem

    from spectr_gbv.gpu_backend.bench.config import SWEEP_VALUES

    for T in list(temperatures or []) + list(SWEEP_VALUES["T"]):
        problem = temperature_problem(T, greedy_ok=False)
        if problem is not None:
            raise UsageError(f"--temperature {problem}")


def check(args: argparse.Namespace) -> None:
    """Before any model is loaded: methods, dataset, sampling, models, memory of the rows."""
    from spectr_gbv.cli.args import UsageError, first_line
    from spectr_gbv.cli.models import check_engine_memory, check_models
    from spectr_gbv.gpu_backend.bench.config import SWEEP_VALUES, default_methods
    from spectr_gbv.reference.rules.policy import known_rules
    from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L
    from spectr_gbv.gpu_backend.models.prompts import BUILTIN_SOURCES, load_prompts

    if args.methods is not None:
        known = list(dict.fromkeys(default_methods() + known_rules()))
        unknown = [m for m in args.methods if m not in known]
        if unknown:
            raise UsageError(f"--methods: unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}")
        if "ar" not in args.methods:
            raise UsageError("--methods must include ar (the speedup ratio's reference)")
    check_top_p(args.top_p)
    n_prompts = 2 if args.quick else args.prompts
    if args.dataset not in BUILTIN_SOURCES:
        path = os.path.expanduser(args.dataset)
        sets = ", ".join(sorted(BUILTIN_SOURCES))
        if not os.path.isfile(path):
            raise UsageError(f"--dataset {args.dataset}: no such file (built-in sets: {sets})")
        name = path.lower()
        if not name.endswith((".jsonl", ".jsonl.gz", ".tsv")):
            raise UsageError(f"--dataset {args.dataset}: expected a .jsonl, .jsonl.gz or .tsv file "
                             f"(or a built-in set: {sets})")
    try:
        prompts = load_prompts(args.dataset, n_prompts)
    except RecursionError:
        raise UsageError(f"--dataset {args.dataset}: nested too deeply to parse") from None
    except (OSError, ValueError, UnicodeDecodeError, EOFError, zlib.error) as err:
        # gzip.BadGzipFile is an OSError; a gzip file cut short raises EOFError
        what = "the compressed file is cut short or corrupt: " if isinstance(err, (EOFError, zlib.error)) else ""
        raise UsageError(f"--dataset {args.dataset}: {what}{first_line(err) or type(err).__name__}") from None
    if not prompts:
        raise UsageError(f"--dataset {args.dataset}: no prompts in it")
    for i, prompt in enumerate(prompts, start=1):
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as err:
            raise UsageError(f"--dataset {args.dataset}: prompt {i} is not valid UTF-8 text (character "
                             f"{err.start} is {prompt[err.start]!r}, a lone surrogate)") from None
    check_temperatures(args.temperature)
    V, known_vocab = check_models(args.target, args.draft)
    sweeps = ("none", "K", "L", "T") if "all" in args.sweep else tuple(args.sweep)
    Ks = list(args.K or [DEFAULT_K]) + (list(SWEEP_VALUES["K"]) if "K" in sweeps and not args.quick else [])
    Ls = list(args.L or [DEFAULT_L]) + (list(SWEEP_VALUES["L"]) if "L" in sweeps and not args.quick else [])
    check_engine_memory(max(Ks), max(Ls), V, known_vocab, "--K/--L")


def config_from_args(args: argparse.Namespace):
    """BenchConfig from parsed arguments (``--quick`` overrides prompts and tokens)."""
    from spectr_gbv.gpu_backend.bench.config import SWEEP_VALUES, BenchConfig, default_methods
    from spectr_gbv.gpu_backend.tuning.dtype_probe import resolve as resolve_dtype
    from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L

    sweeps = ("none", "K", "L", "T") if "all" in args.sweep else tuple(args.sweep)
    K = args.K or [DEFAULT_K]
    L = args.L or [DEFAULT_L]
    T = args.temperature or [0.7]
    config = BenchConfig(
        methods=tuple(args.methods or default_methods()), dataset=args.dataset, prompts=args.prompts,
        max_new_tokens=args.max_new_tokens, K=K[0], L=L[0], temperature=T[0],
        top_k=args.top_k, top_p=args.top_p, sweeps=sweeps,
        K_values=tuple(K) if len(K) > 1 else SWEEP_VALUES["K"],
        L_values=tuple(L) if len(L) > 1 else SWEEP_VALUES["L"],
        T_values=tuple(T) if len(T) > 1 else SWEEP_VALUES["T"],
        target=args.target, draft=args.draft, dtype=resolve_dtype(args.dtype)[0], seed=args.seed,
        chat=not args.no_chat, warmup=not args.no_warmup, sweep_prompts=args.sweep_prompts)
    if args.quick:
        config.prompts, config.max_new_tokens, config.sweeps = 2, 32, ("none",)
    config.check()
    return config


def write_outputs(result, args, command: str) -> None:
    from spectr_gbv.cli.args import write_json

    from spectr_gbv.gpu_backend.bench.render import to_markdown, write_plots

    write_json(args.json_file, result.rows)
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
    from spectr_gbv.cli.args import UsageError

    from spectr_gbv.gpu_backend.bench.render import to_markdown
    from spectr_gbv.gpu_backend.bench.run import run_bench

    try:
        config = config_from_args(args)
    except ValueError as err:
        raise UsageError(str(err)) from None
    from spectr_gbv.cli.models import load_models
    from spectr_gbv.gpu_backend.models.pair import set_threads

    set_threads(args.threads)
    pair = load_models(config.target, config.draft, config.dtype)
    command = "spectr-gbv " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    result = run_bench(config, pair=pair)
    from spectr_gbv.cli.args import text_stream

    print(to_markdown(result, command), file=text_stream(args))
    write_outputs(result, args, command)
    return 0
