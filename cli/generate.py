"""``spectr-gbv generate``: speculative decoding of one prompt, printing the text and metrics."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    from spectr_gbv.cli.args import (dtype_or_auto, nonneg_int, positive_int, probability_value, run_seed_int,
                                    temperature_value, top_p_value)

    from spectr_gbv.reference.rules import registry

    from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L, DEFAULT_RULE, K_CANDIDATES, L_CANDIDATES

    p = subparsers.add_parser(
        "generate",
        help="generate text for one prompt with speculative decoding and print metrics",
        description="Draft with the draft model, verify with RULE against the target; prints the "
        "text, then block efficiency, mean τ, acceptance rate (Σ τ / Σ drafted positions: the last blocks are capped at the tokens still needed, and --stop-below ends blocks early), tokens/s and peak RSS.  "
        "Without --K and --L the shape is chosen by measured costs (timed once per machine and model pair, "
        "cached): the K and L with the most predicted decode tokens/s, or plain sampling when speculation "
        "is predicted not to pay and --rule is not given.  "
        "Every argument is checked before a model is loaded.",
    )
    p.add_argument("--prompt", required=True, help="the user message (chat template applied)")
    p.add_argument("--rule", default=None,
                   help=f"verification rule (default {DEFAULT_RULE}, or plain sampling where the measured "
                   f"costs say speculation does not pay); 'ar' for plain sampling; {registry.help_text()}")
    p.add_argument("--K", type=positive_int, default=None,
                   help=f"drafts per iteration (default: chosen from measured costs among "
                   f"{K_CANDIDATES[0]}..{K_CANDIDATES[-1]}; 1 for "
                   f"{', '.join(registry.names(single_draft=True))}; {DEFAULT_K} with --no-auto)")
    p.add_argument("--L", type=positive_int, default=None,
                   help=f"block length (default: chosen from measured costs among "
                   f"{L_CANDIDATES[0]}..{L_CANDIDATES[-1]}; {DEFAULT_L} with --no-auto)")
    p.add_argument("--no-auto", action="store_true",
                   help=f"no cost measurement: --K/--L default to {DEFAULT_K}/{DEFAULT_L}, always speculate")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure the costs and acceptance (and, with --dtype auto, the dtype probe) again "
                   "instead of reading them from the cache")
    p.add_argument("--temperature", type=temperature_value, default=0.7,
                   help="T >= 1e-4 (default 0.7; smaller T overflows float32 logits / T), or 0: greedy "
                   "decoding (the argmax, exact ties to the lowest token id; every rule then accepts a "
                   "draft token iff it is the target's argmax, and --top-k/--top-p change nothing)")
    p.add_argument("--top-k", type=nonneg_int, default=None,
                   help="keep the k largest logits (0: off; --top-k 1 keeps exact ties of the largest, "
                   "greedy is --temperature 0)")
    p.add_argument("--top-p", type=top_p_value, default=None, help="nucleus mass in (0, 1]")
    p.add_argument("--max-new-tokens", type=positive_int, default=128)
    p.add_argument("--seed", type=run_seed_int, default=None,
                   help="the run's seed, an integer in [0, 2^64) (default: a fresh 64-bit seed from the "
                   "operating system, printed with the metrics; pass it back to replay the run)")
    p.add_argument("--target", default="target", help="target model (embedded name, folder, hub id)")
    p.add_argument("--draft", default="draft", help="draft model")
    p.add_argument("--dtype", type=dtype_or_auto, default="auto",
                   help="weights' dtype; auto (default): bfloat16 where this machine computes it no "
                   "slower than float32, measured once per machine (gpu_backend/tuning/dtype_probe.py), else float32")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--no-chat", action="store_true", help="encode the prompt as plain text")
    p.add_argument("--backend", choices=["auto", "torch", "llama.cpp"], default="auto",
                   help="where the models run: llama.cpp's kernels on the GGUF files as they are, or "
                   "torch (transformers, the GGUF dequantised); auto (default): llama.cpp for GGUF "
                   "models (the embedded ones) when llama-cpp-python is installed, unless --dtype or "
                   "--draft-quant int8 is given (torch features); else torch")
    p.add_argument("--draft-quant", choices=["auto", "none", "int8"], default="auto",
                   help="int8: dynamic int8 quantisation of the draft's linear layers (CPU; lossless for "
                   f"{', '.join(registry.names(varying_draft_rows=True))}); auto (default): int8 for the "
                   "embedded Qwen draft with those rules on the CPU, where it was measured to pay, else none")
    p.add_argument("--no-stream", action="store_true",
                   help="print the text once at the end (default: stream it as tokens are accepted)")
    p.add_argument("--stop-below", type=probability_value, default=None, metavar="P",
                   help="draft-side stopping: end a block after a depth where every draft's token has "
                   "draft probability < P (transformers' assistant_confidence_threshold at K = 1); "
                   f"only for rules proved lossless under stopping: "
                   f"{', '.join(registry.names(draft_stopping=True))} (proofs_check/DRAFT_STOPPING.md)")
    p.set_defaults(func=run, check=check)


# how ``gpu_backend.generate.make_request``'s refusals name its arguments here
FLAGS = {"prompt": "--prompt", "rule": "--rule", "K": "--K", "L": "--L", "auto": "--no-auto",
         "max_new_tokens": "--max-new-tokens", "stop_below": "--stop-below", "recalibrate": "--recalibrate",
         "dtype": "--dtype", "draft_quant": "--draft-quant", "backend": "--backend"}


def build_request(args: argparse.Namespace):
    """The frozen ``GenerateRequest`` of the parsed flags (``gpu_backend.generate.make_request``:
    everything checked once before any model is loaded).

    Raises:
        UsageError: one line naming the flag.
    """
    from spectr_gbv.cli.args import usage_errors
    from spectr_gbv.gpu_backend.generate import make_request

    with usage_errors():
        return make_request(
            args.prompt, rule=args.rule, K=args.K, L=args.L, auto=not args.no_auto,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
            top_p=args.top_p, seed=args.seed, target=args.target, draft=args.draft, dtype=args.dtype,
            draft_quant=args.draft_quant, stop_below=args.stop_below, chat=not args.no_chat,
            threads=args.threads, recalibrate=args.recalibrate, backend=args.backend, names=FLAGS)


def check(args: argparse.Namespace) -> None:
    """``build_request``, kept as ``args.request`` for ``run`` (checked once)."""
    args.request = build_request(args)


def run(args: argparse.Namespace) -> int:
    import sys

    from spectr_gbv.cli.args import UsageError, first_line, one_line
    from spectr_gbv.gpu_backend.generate import generate, load_models, weights_dtype
    from spectr_gbv.gpu_backend.models.pair import ModelLoadError

    request = getattr(args, "request", None) or build_request(args)  # None: check() not run
    dtype, probe = weights_dtype(request)
    try:
        pair = load_models(request, dtype)
    except ModelLoadError as err:
        raise UsageError(f"--{err.role} {err.spec}: cannot load the model: {first_line(err.__cause__)}") from None
    except ValueError as err:
        raise UsageError(f"--draft {request.draft} and --target {request.target}: {first_line(err)}") from None
    if probe is not None:  # after loading: a load failure stays one line
        print(probe.summary(), file=sys.stderr)
    streamer = None
    if not args.no_stream:
        from transformers import TextStreamer

        streamer = TextStreamer(pair.tokenizer, skip_special_tokens=True)

    def announce(choice) -> None:
        if choice.config is not None:
            print(choice.config.summary(), file=sys.stderr)
        if choice.speculating_anyway:
            print(f"(--rule {choice.rule} given: speculating anyway with K={choice.K}, L={choice.L})",
                  file=sys.stderr)
        if choice.fell_back:
            ignored = [f for f, v in (("--K", args.K), ("--L", args.L), ("--stop-below", args.stop_below))
                       if v is not None]
            if ignored:
                print(f"(plain sampling: {', '.join(ignored)} do not apply; give --rule to speculate anyway)",
                      file=sys.stderr)

    try:
        outcome = generate(request, pair, dtype, streamer=streamer, on_choice=announce)
    except ValueError as err:
        raise UsageError(one_line(err)) from None
    if streamer is None:
        print(pair.tokenizer.decode(outcome.result.tokens, skip_special_tokens=True))
    _print_metrics(outcome.result, args, dtype, request.draft_quant, outcome.choice.predicted)
    return 0


def _num(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def _print_metrics(result, args, dtype: str, quant: str, predicted: float | None) -> None:
    m = result.metrics()
    print("---")
    shape = (f"K={m['K']}  L={m['L']}  draft {args.draft}{' (int8)' if quant == 'int8' else ''}  "
             if m["method"] != "ar" else "")
    greedy = " (greedy)" if args.temperature == 0 else ""
    print(f"rule {m['method']}  {shape}T={args.temperature}{greedy}  {dtype}  stop: {m['stop_reason']}  "
          f"seed {m['seed']} (replay: --seed {m['seed']})")
    print(f"new tokens {m['new_tokens']}  target calls {m['target_calls']}  "
          f"block efficiency {m['block_efficiency']:.2f}"
          + (f"  drafted positions per iteration {m['draft_positions_per_iteration']:.2f}"
             if result.block_lengths else ""))
    if result.taus:
        acc = " ".join(f"{a:.2f}" for a in m["per_position_acceptance"])
        print(f"mean τ {m['mean_accepted']:.2f}  acceptance rate (τ / drafted positions) "
              f"{m['acceptance_rate']:.2f}  P(τ ≥ i), i = 1..L: {acc}")
    print(f"wall {m['wall_time_s']:.2f} s  {m['tokens_per_second']:.2f} tokens/s  "
          f"time to first token {_num(m['time_to_first_token_s'])} s  "
          f"decode {_num(m['decode_tokens_per_second'])} tokens/s"
          + (f" (predicted {predicted:.2f})" if predicted is not None else "")
          + f"  peak RSS {m['peak_rss_bytes'] / 1e9:.2f} GB")
