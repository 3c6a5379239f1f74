"""``spectr-gbv certify engine NAME``: what another engine's own ``generate`` emits with
speculation on, from outside.

    spectr-gbv certify engine transformers|llama-cpp-python|vllm|ours|ours-llama.cpp [--modes M,…]
                              [--quick] [--samples N] [--alpha A] [--max-new-tokens M]
                              [--temperature T] [--seed S] [--threads T] [--json FILE]

The library is certify/engine/ (``generate.certify_generate``, the adapters, ``modes``): N samples
from one prompt on the embedded tiny SmolLM2, each token's randomized PIT under the target's law
given its sampled prefix (computed by a reference copy: transformers on the same weights, or the
engine without speculation), tested for uniformity per position and pooled, in token-id and
probability order; the engine's lossless control (speculation off) must pass and its negative
controls (wrapped engines with one defect each) must fail.  Table and measurements:
docs/engines.md.  vLLM's engine runs in the vLLM environment (``scripts/install.sh --vllm``).
Exit 0 only when every mode is as expected; 1 otherwise; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time

# certify.engine.modes' engines and defaults, repeated so that --help imports nothing heavy
# (tests/certify/engine/test_certify_generate_models.py checks they agree)
ENGINES = ("transformers", "llama-cpp-python", "vllm", "ours", "ours-llama.cpp")
DEFAULT_SAMPLES = {"llama-cpp-python": 200, "transformers": 60, "vllm": 200, "ours": 100, "ours-llama.cpp": 100}
QUICK_SAMPLES = 20
DEFAULT_ALPHA = 1e-3
DEFAULT_NEW_TOKENS = 16


def register(sub) -> None:
    from spectr_gbv.cli.args import (add_json_flag, positive_int, positive_temperature_value, seed_int,
                                    unit_interval_open)

    q = sub.add_parser("engine", help="another engine's generate with speculation on, black box (on the embedded "
                       "tiny model)",
                       description="Samples N continuations of the engine's own generate on the embedded tiny "
                       "SmolLM2 with speculation on and tests them against a reference copy of the target "
                       "(omnibus randomized-PIT tests and directional tests); its lossless control must pass and "
                       f"its negative controls fail.  Engines: {', '.join(ENGINES)} (vllm runs in the vLLM "
                       "environment of scripts/install.sh --vllm).")
    q.add_argument("engine", metavar="NAME", choices=ENGINES, help=", ".join(ENGINES))
    q.add_argument("--modes", default=None, help="comma-separated substrings of the mode names (default all)")
    q.add_argument("--quick", action="store_true", help=f"N = {QUICK_SAMPLES} per mode")
    q.add_argument("--samples", type=positive_int, default=None,
                   help="N per mode (default: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_SAMPLES.items()) + ")")
    q.add_argument("--alpha", type=unit_interval_open, default=DEFAULT_ALPHA,
                   help=f"per mode (default {DEFAULT_ALPHA:g})")
    q.add_argument("--max-new-tokens", dest="max_new_tokens", type=positive_int, default=DEFAULT_NEW_TOKENS,
                   help=f"tokens per sample (default {DEFAULT_NEW_TOKENS})")
    q.add_argument("--temperature", type=positive_temperature_value, default=1.0,
                   help="the sampling temperature T of every mode, on the engine and the reference alike (default 1)")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed")
    q.add_argument("--threads", type=positive_int, default=1, help="CPU threads of every model (default 1)")
    add_json_flag(q, "the rows")
    q.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Every mode of the engine (certify.engine.modes): the verdict table with stated power."""
    from spectr_gbv.certify.engine import generate as gc
    from spectr_gbv.certify.engine import modes as gm
    from spectr_gbv.cli.args import text_stream, write_json

    n = args.samples or (QUICK_SAMPLES if args.quick else DEFAULT_SAMPLES[args.engine])
    names = [m.strip() for m in args.modes.split(",") if m.strip()] if args.modes else None
    T, tokens = args.temperature, args.max_new_tokens
    print(f"certify engine {args.engine}: the embedded tiny SmolLM2-135M-Instruct, T = {T:g}, prompt "
          f"{gm.DEFAULT_PROMPT!r}, N = {n} samples of {tokens} tokens per mode, alpha = {args.alpha:g} per mode",
          file=sys.stderr, flush=True)

    def progress(res):
        print(f"{time.strftime('%H:%M:%S')} certify engine: {res.verdict:5s} (expected {res.mode.expect}) "
              f"{res.mode.name}{'  ' + res.error if res.error else ''}", file=sys.stderr, flush=True)

    def log(message):
        print(f"{time.strftime('%H:%M:%S')} certify engine: {message}", file=sys.stderr, flush=True)

    results = gm.run_modes(args.engine, n, tokens, args.alpha, args.seed, names, progress, log, temperature=T,
                           threads=args.threads)
    out = text_stream(args)
    certs = [r.cert for r in results if r.cert is not None]
    print(gc.text_table(certs), file=out)
    for r in results:
        if r.error:
            print(f"{r.mode.name}: {r.error}", file=out)
    print(file=out)
    print(gc.POWER_NOTE, file=out)
    bad = [r for r in results if not r.as_expected]
    print(f"{len(results) - len(bad)}/{len(results)} modes as expected (lossless PASS, negative controls FAIL)"
          + (f"; not as expected: {', '.join(r.mode.name for r in bad)}" if bad else ""), file=out)
    write_json(args.json_file, {"engine": args.engine, "temperature": T, "n_new": tokens,
                                "rows": [gc.to_json(r.cert) | {"expect": r.mode.expect}
                                         for r in results if r.cert is not None]})
    return 0 if not bad and results else 1
