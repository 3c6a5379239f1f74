"""``spectr-gbv generate``: speculative decoding of one prompt, printing the text and metrics."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    from spectr_gbv.cli.args import (dtype_or_auto, nonneg_int, positive_int, probability_value, seed_int,
                                    temperature_value, top_p_value)

    from spectr_gbv.reference.rules import registry

    from spectr_gbv.gpu_backend.tuning.defaults import DEFAULT_K, DEFAULT_L, DEFAULT_RULE, K_CANDIDATES, L_CANDIDATES

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
                   help="T >= 1e-4 (default 0.7; smaller T overflows float32 logits / T)")
    p.add_argument("--top-k", type=nonneg_int, default=None, help="keep the k largest logits (0: off)")
    p.add_argument("--top-p", type=top_p_value, default=None, help="nucleus mass in (0, 1]")
    p.add_argument("--max-new-tokens", type=positive_int, default=128)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--target", default="target", help="target model (embedded name, folder, hub id)")
    p.add_argument("--draft", default="draft", help="draft model")
    p.add_argument("--dtype", type=dtype_or_auto, default="auto",
                   help="weights' dtype; auto (default): bfloat16 where this machine computes it no "
                   "slower than float32, measured once per machine (gpu_backend/tuning/dtype_probe.py), else float32")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--no-chat", action="store_true", help="encode the prompt as plain text")
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


def check(args: argparse.Namespace) -> None:
    """Before any model is loaded: prompt, rule, K against single-draft rules, the models, and
    the memory of one iteration's probability rows (the largest shape that may be chosen)."""
    from spectr_gbv.cli.args import UsageError, check_engine_memory, check_utf8_text

    from spectr_gbv.cli.bench import check_models, known_rules
    from spectr_gbv.reference.rules import registry

    from spectr_gbv.gpu_backend.tuning.defaults import DEFAULT_K, DEFAULT_L, DEFAULT_RULE, K_CANDIDATES, L_CANDIDATES

    if not args.prompt.strip():
        raise UsageError("--prompt must not be empty")
    check_utf8_text("--prompt", args.prompt)
    rule = args.rule if args.rule is not None else DEFAULT_RULE
    rules = ("ar",) + known_rules()
    if rule not in rules:
        raise UsageError(f"--rule: unknown rule {rule!r}; known: {', '.join(rules)}")
    single = rule != "ar" and registry.is_single_draft(rule)
    if single and args.K not in (None, 1):
        raise UsageError(f"--K must be 1 for the single-draft rule {rule!r}, got {args.K}")
    if args.stop_below is not None and rule == "ar":
        raise UsageError("--stop-below: rule 'ar' drafts nothing; drop --stop-below or pick a speculative rule")
    if args.stop_below is not None and not registry.spec(rule).draft_stopping:
        raise UsageError(f"--stop-below: rule {rule!r} is not certified lossless when drafting stops early; "
                         f"rules that are: {', '.join(registry.names(draft_stopping=True))}")
    args.rule_resolved = rule
    args.auto = rule != "ar" and not args.no_auto and (args.K is None or args.L is None)
    if args.L is not None and rule != "ar" and args.L > args.max_new_tokens:
        raise UsageError(f"--L {args.L}: more than --max-new-tokens {args.max_new_tokens} drafted tokens "
                         f"per iteration can never be kept; use --L <= {args.max_new_tokens}")
    if args.auto:
        # the measurement solves K-SEQ for every k <= K and times target forwards over up to
        # 1 + K*L tokens: a fixed K or L beyond the automatic range needs the other fixed too
        for flag, value, most in (("--K", args.K, 2 * K_CANDIDATES[-1]), ("--L", args.L, 4 * L_CANDIDATES[-1])):
            if value is not None and value > most:
                raise UsageError(f"{flag} {value}: above {most} the automatic configuration is not measured; "
                                 f"give both --K and --L, or --no-auto")
        from spectr_gbv.gpu_backend.tuning.autoconfig import check_cache_path

        try:
            check_cache_path()
        except ValueError as err:
            raise UsageError(str(err)) from None
    if args.dtype == "auto" and not args.auto:  # the dtype probe is cached in the same file
        from spectr_gbv.gpu_backend.tuning.autoconfig import check_cache_path

        try:
            check_cache_path()
        except ValueError as err:
            raise UsageError(str(err)) from None
    if args.recalibrate and not args.auto:
        raise UsageError("--recalibrate: nothing is measured with --no-auto, with both --K and --L given, "
                         "or with --rule ar")
    if args.K is not None or single:
        args.K_candidates = (args.K or 1,)
    else:
        args.K_candidates = K_CANDIDATES if args.auto else (DEFAULT_K,)
    args.L_candidates = (args.L,) if args.L is not None else (L_CANDIDATES if args.auto else (DEFAULT_L,))
    # without the automatic configuration each candidate set holds exactly the shape to run
    args.K_resolved, args.L_resolved = args.K_candidates[0], args.L_candidates[0]
    from spectr_gbv.gpu_backend.models.draft_quant import resolve_mode

    try:
        args.draft_quant_resolved = resolve_mode(args.draft_quant, args.draft, rule)
    except ValueError as err:
        raise UsageError(f"--draft-quant int8: {err}") from None
    V, known = check_models(args.target, args.draft if rule != "ar" else None)
    if rule != "ar":
        flags = ("--K/--L" if not args.auto else
                 f"--K/--L (the automatic candidates go up to K = {max(args.K_candidates)}, "
                 f"L = {max(args.L_candidates)}; give --K and --L to fix the shape)")
        check_engine_memory(max(args.K_candidates), max(args.L_candidates), V, known, flags)


def run(args: argparse.Namespace) -> int:
    import sys

    from spectr_gbv.cli.args import UsageError, one_line

    from spectr_gbv.cli.bench import load_models, set_threads
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine, autoregressive_generate
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt
    from spectr_gbv.gpu_backend.engine.sampling import SamplingConfig

    if getattr(args, "K_resolved", None) is None:  # check() not run (a direct call)
        check(args)
    rule, K, L = args.rule_resolved, args.K_resolved, args.L_resolved
    quant = getattr(args, "draft_quant_resolved", "none")
    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    set_threads(args.threads)
    from spectr_gbv.gpu_backend.tuning.dtype_probe import resolve

    dtype, probe = resolve(args.dtype, refresh=args.recalibrate)
    pair = load_models(args.target, args.draft if rule != "ar" else None, dtype, quant)
    target, tokenizer, eos = pair.target, pair.tokenizer, pair.eos
    if probe is not None:  # after loading: a load failure stays one line
        print(probe.summary(), file=sys.stderr)
    streamer = None
    if not args.no_stream:
        from transformers import TextStreamer

        streamer = TextStreamer(tokenizer, skip_special_tokens=True)
    predicted = None
    try:
        ids = encode_prompt(tokenizer, args.prompt, chat=not args.no_chat)
        if args.auto:
            from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec, configure

            auto = configure(target, pair.draft, tokenizer, PairSpec(args.target, args.draft, dtype, quant),
                             rule, sampling, args.K_candidates, args.L_candidates, fallback_prompt=ids,
                             refresh=args.recalibrate, eos_token_ids=eos)
            print(auto.summary(), file=sys.stderr)
            choice = auto.choice
            if choice.speculate or args.rule is not None:
                K, L = choice.best.K, choice.best.L
                predicted = choice.best.tokens_per_second
                if not choice.speculate:
                    print(f"(--rule {rule} given: speculating anyway with K={K}, L={L})", file=sys.stderr)
            else:
                rule, predicted = "ar", choice.ar_tokens_per_second
                ignored = [f for f, v in (("--K", args.K), ("--L", args.L), ("--stop-below", args.stop_below))
                           if v is not None]
                if ignored:
                    print(f"(plain sampling: {', '.join(ignored)} do not apply; give --rule to speculate anyway)",
                          file=sys.stderr)
        if rule == "ar":
            result = autoregressive_generate(target, ids, args.max_new_tokens, sampling,
                                             args.seed, eos, streamer=streamer)
        else:
            from spectr_gbv.reference.draft_stopping import ConfidenceStop

            stop = ConfidenceStop(args.stop_below) if args.stop_below is not None else None
            engine = SpeculativeEngine(target, pair.draft, rule=rule, K=K, L=L,
                                       sampling=sampling, eos_token_ids=eos, draft_stop=stop)
            result = engine.generate(ids, args.max_new_tokens, seed=args.seed, streamer=streamer)
    except ValueError as err:
        raise UsageError(one_line(err)) from None
    if streamer is None:
        print(tokenizer.decode(result.tokens, skip_special_tokens=True))
    _print_metrics(result, args, dtype, quant, predicted)
    return 0


def _num(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def _print_metrics(result, args, dtype: str, quant: str, predicted: float | None) -> None:
    m = result.metrics()
    print("---")
    shape = (f"K={m['K']}  L={m['L']}  draft {args.draft}{' (int8)' if quant == 'int8' else ''}  "
             if m["method"] != "ar" else "")
    print(f"rule {m['method']}  {shape}T={args.temperature}  {dtype}  stop: {m['stop_reason']}")
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
