"""Does ``torch.compile`` make a model's decode step cheaper on this machine?  Eager against
compiled, in one process, interleaved repetitions, medians.

The decode step is what the draft spends most of an iteration on (benchmarks/PROFILE.md): one
forward over one new token after a cached context (transformers ``DynamicCache``, the engine's
cache), logits of the last position only.  ``torch.compile(model.forward, dynamic=True)`` (the
default inductor backend), so that a growing cache length does not recompile per step.  Prints
the compile-and-warm-up time and the median step of each, with their ratio.  Run on an idle
machine.

    python benchmarks/compile_probe.py [--model draft] [--dtype bfloat16] [--quant none|int8]
        [--context 160] [--steps 12] [--reps 3] [--md FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def decode_steps(model, forward, context, steps: int) -> list[float]:
    """Seconds of ``steps`` one-token forwards after prefilling ``context`` [1, T] (int64)."""
    import torch

    from spectr_gbv.gpu_backend.torch_backend.kv import new_cache

    cache = new_cache(model)
    with torch.inference_mode():
        forward(input_ids=context, past_key_values=cache, use_cache=True)
        x = context[:, -1:]
        out = []
        for _ in range(steps):
            start = time.perf_counter()
            logits = forward(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
            out.append(time.perf_counter() - start)
            x = logits[:, -1:].argmax(-1)
    return out


def main(argv=None) -> int:
    from spectr_gbv.cli.args import dtype_name, output_file, positive_int

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="draft")
    parser.add_argument("--dtype", type=dtype_name, default="bfloat16")
    parser.add_argument("--quant", choices=["none", "int8"], default="none",
                        help="int8: torch's dynamic int8 linear layers (gpu_backend/models/draft_quant.py), float32 weights")
    parser.add_argument("--context", type=positive_int, default=160, help="cached context tokens before the steps")
    parser.add_argument("--steps", type=positive_int, default=12,
                        help="decode steps per repetition (>= 3; the first 2 are dropped)")
    parser.add_argument("--reps", type=positive_int, default=3, help="interleaved repetitions of eager and compiled")
    parser.add_argument("--md", type=output_file, default=None)
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error(f"--steps must be >= 3 (the first 2 steps of each repetition are dropped), got {args.steps}")
    if args.quant == "int8" and args.dtype not in ("float32", "float"):
        parser.error("--quant int8 needs --dtype float32 (the dynamic int8 kernels quantise float32 weights)")

    import torch

    from spectr_gbv.gpu_backend.bench.run import machine_description
    from spectr_gbv.gpu_backend.models.draft_quant import quantize_draft
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    try:
        model, _ = load_causal_lm(args.model, args.dtype)
    except (OSError, ValueError) as e:
        parser.error(f"--model: cannot load {args.model!r}: {e}")
    if args.quant == "int8":
        model = quantize_draft(model, "int8")
    context = torch.randint(0, min(1000, model.config.vocab_size), (1, args.context),
                            generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(model.forward, dynamic=True)
    start = time.perf_counter()
    decode_steps(model, compiled, context, 4)
    compile_s = time.perf_counter() - start
    times = {"eager": [], "compiled": []}
    for _ in range(args.reps):
        for name, forward in (("eager", model.forward), ("compiled", compiled)):
            times[name] += decode_steps(model, forward, context, args.steps)[2:]
    eager, comp = statistics.median(times["eager"]), statistics.median(times["compiled"])
    lines = [f"# torch.compile probe: {args.model}, {args.dtype}, quant {args.quant}", "",
             "Made by `python benchmarks/compile_probe.py " + " ".join(argv if argv is not None else sys.argv[1:])
             + f"` on {time.strftime('%Y-%m-%d')}; torch {torch.__version__}.", "",
             machine_description() + ".", "",
             "| model | dtype | quant | compile + warm-up (s) | eager step (ms, median) | compiled step (ms, median) "
             "| compiled ÷ eager | steps each |",
             "|---|---|---|---|---|---|---|---|",
             f"| {args.model} | {args.dtype} | {args.quant} | {compile_s:.1f} | {eager * 1e3:.1f} | {comp * 1e3:.1f} "
             f"| {comp / eager:.3f} | {len(times['eager'])} |"]
    text = "\n".join(lines)
    print(text, flush=True)
    if args.md:
        Path(args.md).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
