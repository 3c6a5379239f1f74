"""The engine on llama.cpp against llama.cpp itself (and the torch engine, transformers), side by
side in one process, on the embedded Qwen2.5-Coder GGUF pair.

Per prompt, in an order shuffled per prompt, the same seed for every method:
- ``llama.cpp plain``: llama-cpp-python's own sampler (``Llama.generate``: temperature T, top-k,
  top-p, min-p and repeat penalty off, i.e. plain sampling from softmax(logits / T)), the
  target GGUF; the ratios' denominator;
- ``ours llama.cpp plain``: this project's plain sampling on the llama.cpp backend
  (``autoregressive_generate`` on a ``LlamaCppModel``);
- ``ours llama.cpp default``: what ``spectr-gbv generate`` runs by default on a CPU: the
  llama.cpp backend, K and L chosen from measured costs (``tuning.autoconfig`` on the llama.cpp
  models, measured once before the timed runs or read from the cache), or plain sampling where
  speculation is predicted not to pay, decided per prompt for its length and the
  tokens asked for, the draft's prefill included (``bench.generate_default``);
- ``ours llama.cpp K=2 L=4``: spectr, K = 2, L = 4 on llama.cpp;
- with ``--torch``: ``ours torch default`` (the torch engine's default: int8 draft, measured
  K, L, the target in ``--dtype``), ``hf plain`` and ``hf assisted`` (transformers, 4 draft
  tokens) — they load the dequantised models (about 6 GB in float32) and run at about 1–2
  tokens/s here, so they take most of the time.

Prints per method: tokens per target call, median end-to-end and decode tokens/s, the paired
ratio of end-to-end tokens/s to ``llama.cpp plain`` (mean and 95 % t-interval over prompts,
and the worst prompt), median time to first token, peak RSS; then the mean ratio per set; and
the CPU's flags.  Run on an idle machine; only ratios measured in this run are meant to be
compared.

    python benchmarks/llamacpp_side_by_side.py [--prompts 8] [--max-new-tokens 64] [--torch]
        [--datasets humaneval gsm8k ../shared/data/mgsm/mgsm_en.tsv ...] [--md FILE] [--json FILE]
    python benchmarks/llamacpp_side_by_side.py --from-json FILE [--md FILE]

Tokens/s counts the prompt's prefill; the two samplers draw from different generators, so a
prompt's two outputs differ in length (an early EOS makes the prefill weigh more), which the
decode rate (tokens after the first over the time after it) does not suffer from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DEFAULT_SETS = ["humaneval", "gsm8k", str(SHARED / "mgsm" / "mgsm_en.tsv"),
                str(SHARED / "alpaca_eval" / "instructions.jsonl")]
DENOMINATOR = "llama.cpp plain"

sys.path.insert(0, str(ROOT / "benchmarks"))
from engine_vs_assisted import _ci, hf_generate  # noqa: E402  (the same interval, the same transformers baseline)


def llama_cpp_plain(path: Path, threads: int, n_ctx: int = 4096):
    """llama-cpp-python's own generation loop, plain sampling: returns fn(ids, n, seed, T, eos)
    → (tokens, wall s, time to first token s)."""
    import llama_cpp.llama as llama_module
    from llama_cpp import Llama

    from spectr_gbv.gpu_backend.llamacpp.model import default_extra_buffers

    # the same weight buffers as our backend (off where llama.cpp's AMX path crashes:
    # docs/upstream/llamacpp_amx_segfault.md); Llama has no argument for it
    defaults = llama_module.llama_cpp.llama_model_default_params

    def params():
        p = defaults()
        p.use_extra_bufts = default_extra_buffers()
        return p

    llama_module.llama_cpp.llama_model_default_params = params
    try:
        llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                    verbose=False)
    finally:
        llama_module.llama_cpp.llama_model_default_params = defaults

    def run(ids, n, seed, temperature, eos):
        llm.set_seed(seed)
        llm.reset()  # n_tokens = 0: no prefix of an earlier prompt is reused (ours prefill every prompt too)
        out, start, first = [], time.perf_counter(), math.nan
        for token in llm.generate(ids, temp=temperature, top_k=0, top_p=1.0, min_p=0.0,
                                  typical_p=1.0, repeat_penalty=1.0, reset=True):
            if not out:
                first = time.perf_counter() - start
            out.append(int(token))
            if token in eos or len(out) >= n:
                break
        return out, time.perf_counter() - start, first

    return run


def render(runs, methods, sets, header) -> str:
    lines = list(header)
    by = {(r["set"], r["prompt"], r["method"]): r for r in runs}
    keys = sorted({(r["set"], r["prompt"]) for r in runs})
    lines += ["| method | tokens per target call | tokens/s (median) | decode tokens/s (median) | "
              f"tokens/s × {DENOMINATOR} (mean ± 95 % CI; worst prompt) | decode × {DENOMINATOR} "
              "(mean ± 95 % CI; worst prompt) | time to first token (median) | peak RSS |",
              "|---|---|---|---|---|---|---|---|"]

    def paired(m, field):
        ratios = [by[k + (m,)][field] / by[k + (DENOMINATOR,)][field] for k in keys
                  if k + (m,) in by and k + (DENOMINATOR,) in by
                  and by[k + (m,)][field] == by[k + (m,)][field]
                  and by[k + (DENOMINATOR,)][field] == by[k + (DENOMINATOR,)][field]]
        if not ratios:
            return "-"
        mean, half = _ci(ratios)
        return f"{mean:.3f} ± {half:.3f}; {min(ratios):.3f}"

    for m in methods:
        rs = [by[k + (m,)] for k in keys if k + (m,) in by]
        if not rs:
            continue
        calls = sum(r["calls"] for r in rs)
        # a decode rate is NaN when every token came in the first emission (a short generation)
        decode = [r["decode_tps"] for r in rs if r["decode_tps"] == r["decode_tps"]]
        lines.append(f"| {m} | {sum(r['tokens'] for r in rs) / calls:.2f} | "
                     f"{statistics.median(r['tps'] for r in rs):.2f} | "
                     f"{f'{statistics.median(decode):.2f}' if decode else '-'} | "
                     f"{paired(m, 'tps')} | {paired(m, 'decode_tps')} | "
                     f"{statistics.median(r['ttft'] for r in rs):.2f} s | {max(r['rss'] for r in rs) / 1e9:.2f} GB |")
    lines += ["", "Mean ratio to " + DENOMINATOR + " per set:", "",
              "| method | " + " | ".join(Path(s).name for s in sets) + " |",
              "|---|" + "---|" * len(sets)]
    for m in methods:
        cells = []
        for s in sets:
            ks = [k for k in keys if k[0] == s and k + (m,) in by and k + (DENOMINATOR,) in by]
            cells.append(f"{statistics.fmean(by[k + (m,)]['tps'] / by[k + (DENOMINATOR,)]['tps'] for k in ks):.3f}"
                         if ks else "-")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="prompts per set")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--target", default="target")
    parser.add_argument("--draft", default="draft")
    parser.add_argument("--torch", action="store_true", help="also the torch engine and transformers")
    parser.add_argument("--dtype", default="float32", help="--torch: the torch models' dtype")
    parser.add_argument("--json", default=None)
    parser.add_argument("--md", default=None)
    parser.add_argument("--from-json", default=None, help="render the runs of an earlier --json FILE")
    args = parser.parse_args(argv)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        sets = list(dict.fromkeys(r["set"] for r in data["runs"]))
        text = render(data["runs"], data["methods"], sets, data["header"])
        print(text)
        if args.md:
            Path(args.md).write_text(text + "\n", encoding="utf-8")
        return 0

    from spectr_gbv.gpu_backend.bench.generate_default import DefaultMethod
    from spectr_gbv.gpu_backend.bench.run import machine_description
    from spectr_gbv.gpu_backend.engine.memory import peak_rss_bytes, reset_peak_rss
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
    from spectr_gbv.gpu_backend.engine.result import GenerationResult
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate
    from spectr_gbv.gpu_backend.llamacpp.model import build_description
    from spectr_gbv.gpu_backend.llamacpp.pair import gguf_path, load_llamacpp_pair
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts
    from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec, configure

    threads = os.cpu_count() or 1
    sets = args.datasets or [s for s in DEFAULT_SETS if "/" not in s or Path(s).is_file()]
    sampling = SamplingConfig(args.temperature)
    pair = load_llamacpp_pair(args.target, args.draft, threads=threads)
    plain = llama_cpp_plain(gguf_path(args.target), threads)
    auto = configure(pair.target, pair.draft, pair.tokenizer,
                     PairSpec(args.target, args.draft, "gguf (llama.cpp)", "none"), "spectr", sampling,
                     eos_token_ids=pair.eos, backend=pair.backend)
    print(auto.summary(), file=sys.stderr, flush=True)

    def engine(target, draft, eos, K, L):
        e = SpeculativeEngine(target, draft, rule="spectr", K=K, L=L, sampling=sampling, eos_token_ids=eos,
                              backend=pair.backend)
        return lambda ids, n, s: e.generate(ids, n, seed=s)

    def wrap_plain(ids, n, s):
        tokens, wall, first = plain(ids, n, s, args.temperature, pair.eos)
        return GenerationResult("llama.cpp", tokens, len(ids), len(tokens), [], 1, 0, wall, peak_rss_bytes(),
                                "eos" if tokens and tokens[-1] in pair.eos else "max_new_tokens",
                                time_to_first_token_s=first)

    methods = {
        DENOMINATOR: wrap_plain,
        "ours llama.cpp plain": lambda ids, n, s: autoregressive_generate(pair.target, ids, n, sampling, s, pair.eos,
                                                                                 backend=pair.backend),
        # generate's default: speculating or plain sampling decided per prompt
        "ours llama.cpp default": DefaultMethod(auto, pair.target, pair.draft, sampling, pair.eos,
                                                 backend=pair.backend),
        "ours llama.cpp K=2 L=4": engine(pair.target, pair.draft, pair.eos, 2, 4),
    }
    header_extra = ["llama.cpp: " + build_description() + ".", "",
                    "`ours llama.cpp default`: " + auto.summary().replace("\n", "; ") + "."]
    if args.torch:
        from spectr_gbv.gpu_backend.bench.assisted import assisted_generate
        from spectr_gbv.gpu_backend.models.draft_quant import quantize_draft
        from spectr_gbv.gpu_backend.models.pair import load_pair
        from spectr_gbv.gpu_backend.models.weights import load_causal_lm

        tpair = load_pair(args.target, args.draft, args.dtype)
        int8 = quantize_draft(load_causal_lm(args.draft, "float32")[0], "int8")
        tauto = configure(tpair.target, int8, tpair.tokenizer, PairSpec(args.target, args.draft, args.dtype, "int8"),
                          "spectr", sampling)
        methods["ours torch default"] = DefaultMethod(tauto, tpair.target, int8, sampling, tpair.eos)
        methods["hf plain"] = lambda ids, n, s: hf_generate(tpair.target, ids, n, sampling, s, tpair.eos)
        methods["hf assisted"] = lambda ids, n, s: assisted_generate(tpair.target, tpair.draft, ids, n, sampling, 4,
                                                                     s, tpair.eos)
        header_extra.append("`ours torch default`: " + tauto.summary().replace("\n", "; ") + ".")

    prompts = [(s, p, encode_prompt(pair.tokenizer, text))
               for s in sets for p, text in enumerate(load_prompts(s, args.prompts))]
    for fn in methods.values():  # warm-up, untimed
        fn(prompts[0][2], 8, 0)
    defaults = {name: fn for name, fn in methods.items() if isinstance(fn, DefaultMethod)}
    for fn in defaults.values():
        fn.decisions.clear()  # count the timed runs' decisions only
    rng = random.Random(0)
    runs = []
    for n_prompt, (s, p, ids) in enumerate(prompts):
        order = list(methods)
        rng.shuffle(order)
        for name in order:
            reset_peak_rss()
            r = methods[name](ids, args.max_new_tokens, 1000 + n_prompt)
            runs.append(dict(set=s, prompt=p, method=name, tokens=r.new_tokens, calls=r.target_calls,
                             wall=r.wall_time_s, tps=r.new_tokens / r.wall_time_s, rss=r.peak_rss_bytes,
                             ttft=r.time_to_first_token_s, decode_tps=r.decode_tokens_per_second))
            print(f"{Path(s).name} {p} {name:24s} {r.new_tokens} tokens {r.target_calls} calls "
                  f"{r.wall_time_s:.2f} s", file=sys.stderr, flush=True)
    header = [f"# The engine on llama.cpp against llama.cpp: {pair.description}, T = {args.temperature}, "
              f"{args.max_new_tokens} new tokens, {threads} threads", "",
              "Made by `python benchmarks/llamacpp_side_by_side.py "
              + " ".join(argv if argv is not None else sys.argv[1:]) + f"` on {time.strftime('%Y-%m-%d')}; "
              f"{len(prompts)} prompts: " + ", ".join(
                  f"{Path(s).name} {sum(1 for x in prompts if x[0] == s)}" for s in sets) + ".", "",
              machine_description() + ".", ""] + header_extra + [""]
    header += [f"`{name}` decided per prompt (the draft's prefill counted): {fn.line()}."
               for name, fn in defaults.items()] + [""]
    text = render(runs, list(methods), sets, header)
    print(text, flush=True)
    if args.md:
        Path(args.md).write_text(text + "\n", encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), runs=runs, methods=list(methods),
                                                   header=header), indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
