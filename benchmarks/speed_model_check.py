"""How well the speed model predicts: predicted against measured decode speed, shape by shape.

Loads the pair as ``spectr-gbv generate`` does (int8 draft for the embedded Qwen draft), runs the
auto-configuration (``gpu_backend.tuning.autoconfig.configure``: measured once, then cached), then for
each shape generates on the same prompts (the same seed per prompt) and prints, per shape, the
predicted tokens per target call and decode tokens/s (``gpu_backend.tuning.speed_model``) beside the
measured ones (tokens after the first iteration over the time after it, median over prompts;
tokens per call pooled over prompts), plus plain sampling.  Run on an idle machine.

    python benchmarks/speed_model_check.py [--shapes 1x2 1x4 1x8 2x4 4x4] [--prompts 2]
        [--max-new-tokens 64] [--target T --draft D --dtype auto] [--md FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["1x2", "1x4", "1x8", "2x4", "4x4"],
                        help="KxL shapes to run")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per set")
    parser.add_argument("--datasets", nargs="+", default=["humaneval", "gsm8k"])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--target", default="target")
    parser.add_argument("--draft", default="draft")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 where native, else float32")
    parser.add_argument("--md", default=None)
    args = parser.parse_args(argv)
    shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes]

    from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec, configure
    from spectr_gbv.gpu_backend.bench.run import machine_description
    from spectr_gbv.gpu_backend.models.draft_quant import resolve_mode
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate
    from spectr_gbv.gpu_backend.tuning.dtype_probe import resolve as resolve_dtype
    from spectr_gbv.gpu_backend.models.pair import load_pair
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
    from spectr_gbv.gpu_backend.tuning.speed_model import expected_tokens, iteration_seconds

    dtype = resolve_dtype(args.dtype)[0]
    quant = resolve_mode("auto", args.draft, "spectr")
    pair = load_pair(args.target, args.draft, dtype, quant)
    sampling = SamplingConfig(0.7)
    Ks = sorted({K for K, _ in shapes})
    Ls = sorted({L for _, L in shapes})
    auto = configure(pair.target, pair.draft, pair.tokenizer, PairSpec(args.target, args.draft, dtype, quant),
                     "spectr", sampling, Ks, Ls, eos_token_ids=pair.eos)
    prompts = [encode_prompt(pair.tokenizer, text) for s in args.datasets
               for text in load_prompts(s, args.prompts)]
    rows = []
    ar = [autoregressive_generate(pair.target, ids, args.max_new_tokens, sampling, 1000 + i, pair.eos)
          for i, ids in enumerate(prompts)]
    rows.append(("plain sampling", 1.0, 1.0, auto.choice.ar_tokens_per_second,
                 statistics.median(r.decode_tokens_per_second for r in ar)))
    for K, L in shapes:
        engine = SpeculativeEngine(pair.target, pair.draft, rule="spectr", K=K, L=L, sampling=sampling,
                                   eos_token_ids=pair.eos)
        engine.generate(prompts[0], 8, seed=0)  # warm-up of this shape, untimed
        res = [engine.generate(ids, args.max_new_tokens, seed=1000 + i) for i, ids in enumerate(prompts)]
        tpc = sum(r.new_tokens for r in res) / sum(r.target_calls for r in res)
        e = expected_tokens(auto.acceptance, K, L)
        rows.append((f"spectr K={K} L={L}", e, tpc, e / iteration_seconds(auto.costs, K, L),
                     statistics.median(r.decode_tokens_per_second for r in res)))
        print(f"K={K} L={L} done", file=sys.stderr, flush=True)
    lines = [f"# Speed model: predicted against measured ({pair.description}, T = 0.7, "
             f"{args.max_new_tokens} new tokens)", "",
             f"Made by `python benchmarks/speed_model_check.py --shapes {' '.join(args.shapes)} "
             f"--prompts {args.prompts}` on {time.strftime('%Y-%m-%d')}; {len(prompts)} prompts "
             f"({', '.join(args.datasets)}).", "", machine_description() + ".", "",
             "| method | tokens per target call, predicted | measured (pooled) | decode tokens/s, predicted "
             "| measured (median) | measured ÷ predicted |", "|---|---|---|---|---|---|"]
    for name, e, tpc, pred, meas in rows:
        lines.append(f"| {name} | {e:.2f} | {tpc:.2f} | {pred:.2f} | {meas:.2f} | {meas / pred:.2f} |")
    text = "\n".join(lines)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
