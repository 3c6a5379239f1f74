"""``spectr-gbv certify our-engine``: our speculative-decoding engine end to end, white box.

    spectr-gbv certify our-engine [--rules R,…] [--quick] [--samples N] [--alpha A]
                                  [--max-new-tokens M] [--target T] [--draft D]
                                  [--draft-temperature TD] [--backend torch|llama.cpp]
                                  [--seed S] [--device D] [--threads T] [--json FILE]

The library is certify/our_engine/ (``certificate.certify_engine``): N seeded generations per
rule from one fixed prompt; the first emitted token G-tested against the target's exact law,
every iteration's τ against the reference rule's exact law of τ given the rows the verifier got;
planted wrong rules run through the engine must be caught.  Default pair: the embedded "tiny"
SmolLM2 in float32 as target at T = 1, itself at T = 1.5 as draft; ``--target/--draft`` take
another pair (e.g. ``--target target --draft draft``: the Qwen2.5-Coder pair; its draft then at
T = 1 unless ``--draft-temperature``).  Rules: every lossless registered rule but mdbv
(``--quick``: the engine's default rule, sd and gbv, N = 60, and the planted rules of those
bases); α = 1e-3 per row unless ``--alpha``.  Measured times and the choice of N:
benchmarks/CERTIFY.md.  Exit 0 only when every rule passes and every planted rule is caught.
"""

from __future__ import annotations

import argparse
import sys
import time

# certify.our_engine.certificate's defaults, repeated here so that --help imports no torch
# (tests/certify/our_engine/test_engine_certify.py checks they agree)
DEFAULT_ALPHA = 1e-3
DEFAULT_MAX_NEW_TOKENS = 16
DEFAULT_DRAFT_T = 1.5

DESCRIPTION = ("Certifies our speculative-decoding engine on a real model: N seeded generations per rule from one "
               "fixed prompt; the first emitted token G-tested against the target's exact law, every iteration's "
               "tau against the reference rule's exact law of tau given the rows the verifier got; planted wrong "
               "rules run through the engine must be caught.")


def register(sub) -> None:
    from spectr_gbv.cli.args import (add_json_flag, int_at_least, positive_int, positive_temperature_value,
                                    seed_int, unit_interval_open)

    q = sub.add_parser("our-engine", help="our speculative-decoding engine end to end, white box",
                       description=DESCRIPTION)
    q.add_argument("--rules", default=None, help="comma-separated rules (default: every lossless rule but mdbv)")
    q.add_argument("--quick", action="store_true", help="the default rule, sd and gbv, N = 60")
    q.add_argument("--samples", type=int_at_least(2, " (the mean test needs 2 samples)"), default=None,
                   help="runs per rule")
    q.add_argument("--alpha", type=unit_interval_open, default=DEFAULT_ALPHA,
                   help=f"per rule (default {DEFAULT_ALPHA:g})")
    q.add_argument("--max-new-tokens", dest="max_new_tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS,
                   help=f"tokens per generation (default {DEFAULT_MAX_NEW_TOKENS})")
    q.add_argument("--backend", choices=("torch", "llama.cpp"), default="torch",
                   help="run the models on transformers (torch, float32; default) or on llama.cpp's kernels")
    q.add_argument("--target", default="tiny", help="target model (default: the embedded 'tiny' SmolLM2, float32)")
    q.add_argument("--draft", default=None, help="draft model (default: the target itself, tempered)")
    q.add_argument("--draft-temperature", dest="draft_temperature", type=positive_temperature_value, default=None,
                   help=f"the draft's temperature (default {DEFAULT_DRAFT_T:g} for the tempered copy, 1 for a "
                   "separate --draft)")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed")
    q.add_argument("--device", default="cpu", help="torch device (default cpu)")
    q.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)")
    add_json_flag(q, "the rows")
    q.set_defaults(func=run, check=check)


def check(args: argparse.Namespace) -> None:
    """Threads, the rules (registered and certifiable on the engine), the models, the device."""
    from spectr_gbv.certify.our_engine.certificate import SKIPPED, engine_rules
    from spectr_gbv.certify.verifiers.run import parse_rules
    from spectr_gbv.cli.args import UsageError
    from spectr_gbv.cli.models import check_models
    from spectr_gbv.cli.torch_device import set_threads, torch_device

    set_threads(args.threads)
    skipped = [r.strip() for r in (args.rules or "").split(",") if r.strip() in SKIPPED]
    if skipped:
        raise UsageError(f"--rules: rule {skipped[0]!r} is not certified on the engine: {SKIPPED[skipped[0]]}")
    try:
        args.rule_list = parse_rules(args.rules, engine_rules())
    except ValueError as err:
        raise UsageError(str(err)) from None
    check_models(args.target, args.draft)
    args.torch_device = torch_device(args.device)
    if args.backend == "llama.cpp" and args.torch_device.type != "cpu":
        raise UsageError("--backend llama.cpp runs on the CPU (leave --device at cpu)")


def run(args: argparse.Namespace) -> int:
    """certify.our_engine on the chosen pair: the table and the summary; exit 0 only when every
    rule passes and every planted rule is caught."""
    from spectr_gbv.certify.our_engine import certificate as ec
    from spectr_gbv.cli.args import UsageError, first_line, text_stream, write_json
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
    from spectr_gbv.gpu_backend.models.pair import ModelLoadError
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt

    device = args.torch_device
    rules = list(ec.CI_RULES) if args.rules is None and args.quick else args.rule_list
    n = args.samples or (ec.QUICK_ENGINE_SEEDS if args.quick else ec.DEFAULT_ENGINE_SEEDS)
    tokens = args.max_new_tokens
    try:
        pair = ec.certification_pair(args.target, args.draft, "float32", device, args.backend)
    except ModelLoadError as err:  # the loader's OSError or ValueError is the cause
        raise UsageError(f"cannot load the models: {first_line(err.__cause__)}") from None
    except (OSError, ValueError) as err:  # draft and target that do not fit together
        raise UsageError(f"cannot load the models: {first_line(err)}") from None
    draft_t = args.draft_temperature or (ec.DEFAULT_DRAFT_TEMPERATURE if args.draft is None else 1.0)
    ids = encode_prompt(pair.tokenizer, ec.DEFAULT_PROMPT, chat=False)
    weights = "float32" if args.backend == "torch" else "GGUF on llama.cpp"
    setup = (f"target {args.target} ({weights}, T = 1), draft {args.draft or args.target} (T = {draft_t:g}), "
             f"prompt {ec.DEFAULT_PROMPT!r} ({len(ids)} tokens), {tokens} new tokens per run, device {device}")
    print(f"certify our-engine: {setup}", file=sys.stderr, flush=True)

    def progress(row):
        extra = f"  {row.error}" if row.error else ""
        power = (f"  effect: mean τ shift {row.effect_shift:+.3f}, TV {row.effect_tv:.3f}; power {row.power:.6f}"
                 if row.power == row.power else "")
        print(f"certify our-engine: {row.verdict:6s} {row.rule}  N={row.n}  iterations="
              f"{row.iterations}  {row.seconds:.0f}s{power}{extra}", file=sys.stderr, flush=True)

    def log(message):  # within a row: every 10 runs or 30 s (a row takes minutes)
        print(f"{time.strftime('%H:%M:%S')} certify our-engine: {message}", file=sys.stderr, flush=True)

    cert = ec.certify_engine(pair.target, pair.draft, ids, rules, n_seeds=n, max_new_tokens=tokens,
                             alpha=args.alpha, sampling=SamplingConfig(1.0),
                             draft_sampling=SamplingConfig(draft_t), first_seed=args.seed,
                             eos_token_ids=pair.eos, setup=setup, progress=progress, log=log,
                             backend=pair.backend)
    out = text_stream(args)
    print(ec.text_table(cert.rows), file=out)
    print(file=out)
    print(ec.summary(cert), file=out)
    write_json(args.json_file, {"setup": setup, "rows": [r.to_json() for r in cert.rows]})
    return 0 if cert.ok else 1
