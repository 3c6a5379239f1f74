"""The engine against transformers on the real models, side by side in one process.

Per prompt, in an order shuffled per prompt, the same seed for every method:
- ``hf_generate``: transformers' plain sampling (``generate(do_sample=True)``);
- ``ar``: this project's autoregressive sampling (the speedup ratios' denominator);
- ``spectr``: the engine's default rule, K = 2, L = 4, with the bfloat16 draft;
- ``spectr int8``: the same with the int8 dynamically quantised draft (gpu_backend/models/draft_quant.py;
  lossless for spectr: registry ``varying_draft_rows``);
- ``spectr int8 stop<0.3``: plus draft-side stopping (proofs_check/DRAFT_STOPPING.md);
- ``hf_assisted``: transformers' assisted generation, 4 draft tokens, constant schedule (its own
  default is 20), its default ``assistant_confidence_threshold`` 0.4, the bfloat16 draft;
- ``hf_assisted L=20``: transformers' assisted generation at its own defaults (20 draft tokens,
  constant schedule, confidence threshold 0.4), the bfloat16 draft;
- ``hf_assisted int8``: the same as ``hf_assisted`` with our int8 draft as its assistant (what transformers would
  give with the same cheaper draft);
- with ``--rules``: each rule named (``lossless``: every lossless rule of the registry that the
  engine's benchmark runs) at K = 2 (1 for a single-draft rule), L = 4, with the bfloat16 draft,
  named by the rule (``spectr`` is the row above); a lossy rule is marked "(lossy)";
- ``auto``: what ``spectr-gbv generate`` runs by default: the int8 draft, K and L chosen from
  measured costs (gpu_backend/tuning/autoconfig.py; measured once before the timed runs, or read from
  the cache), or plain sampling where speculation is predicted not to pay, decided per prompt end
  to end for its length and the tokens asked for (``bench.generate_default``).

Prints per method, pooled over the prompt sets: tokens per target call (all tokens / all
calls), drafted positions per iteration, speedup ratio over ``ar`` (median; mean and 95 %
t-interval over prompts), the paired ratio of tokens/s to ``hf_assisted`` (mean and 95 %
t-interval over prompts), time to first token (median) and decode tokens/s after it (median), peak
RSS; then the mean speedup per prompt set.  Also the CPU's AVX-512 / bf16 / AMX flags.  ``--methods``
runs a subset (``ar`` and ``hf_assisted`` are always run: they are the denominators).  Run on an idle machine; only ratios measured in this run are
meant to be compared.

    python benchmarks/engine_vs_assisted.py [--prompts 5] [--max-new-tokens 64]
        [--datasets humaneval gsm8k ../shared/data/mgsm/mgsm_en.tsv ...] [--methods ...]
        [--rules lossless | NAME ...] [--json FILE] [--md FILE] [--plot PNG]
    python benchmarks/engine_vs_assisted.py --from-json FILE [--md FILE] [--plot PNG]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DEFAULT_SETS = ["humaneval", "gsm8k", str(SHARED / "mgsm" / "mgsm_en.tsv"),
                str(SHARED / "alpaca_eval" / "instructions.jsonl")]


def _ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95 % t-interval (scipy.stats.t); NaN half-width for n < 2."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))


def hf_generate(target, ids, n, sampling, seed, eos):
    """transformers' plain sampling, counted like the engine's AR (one target call per token)."""
    import torch

    from spectr_gbv.gpu_backend.bench.assisted import IterationLog
    from spectr_gbv.gpu_backend.engine.result import GenerationResult
    from spectr_gbv.reference.seeds import generator_seed
    from spectr_gbv.gpu_backend.engine.memory import peak_rss_bytes

    x = torch.tensor([ids])
    eos = sorted(eos)
    torch.manual_seed(generator_seed(seed))
    first = IterationLog()
    start = time.perf_counter()
    with torch.inference_mode():
        out = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                              eos_token_id=eos or None, pad_token_id=eos[0] if eos else None,
                              streamer=first, **sampling.generate_kwargs())
    wall = time.perf_counter() - start
    tokens = out[0, x.shape[1]:].tolist()
    return GenerationResult("hf_generate", tokens, len(ids), len(tokens), [], 1, 0, wall, peak_rss_bytes(),
                            "eos" if tokens and tokens[-1] in eos else "max_new_tokens",
                            time_to_first_token_s=(first.first_token_at - start if first.first_token_at is not None
                                                   else math.nan))


def rule_methods(requested: list[str]) -> list[str]:
    """The rules that ``--rules`` names, in registry order (``lossless``: every lossless bench rule).

    Raises:
        ValueError: an unknown rule name (the message lists the known ones).
    """
    from spectr_gbv.reference.rules import registry

    known = registry.names(bench=True)
    wanted = set(requested)
    if "lossless" in wanted:
        wanted = (wanted - {"lossless"}) | set(registry.names(lossless=True, bench=True))
    unknown = wanted - set(known)
    if unknown:
        raise ValueError(f"--rules: unknown {sorted(unknown)}; known: lossless, {', '.join(known)}")
    return [n for n in known if n in wanted]


def rule_label(name: str) -> str:
    from spectr_gbv.reference.rules import registry

    return name if registry.spec(name).lossless else f"{name} (lossy)"


def select_methods(methods: dict, requested, rules=()) -> dict:
    """``--methods``: the requested entries of ``methods`` (what ``build_methods`` made), with
    ``ar`` and ``hf_assisted`` (the ratios' denominators) and the ``--rules`` rules, each once, in
    ``methods``' order.  ``requested`` None: all of them.

    Raises:
        ValueError: a requested name that ``methods`` lacks (the message lists the known ones).
    """
    if requested is None:
        return dict(methods)
    unknown = set(requested) - set(methods)
    if unknown:
        raise ValueError(f"--methods: unknown {sorted(unknown)}; known: {list(methods)}")
    keep = set(requested) | {"ar", "hf_assisted"} | {rule_label(r) for r in rules}
    return {k: v for k, v in methods.items() if k in keep}


def build_methods(pair, int8_draft, sampling, thresholds, auto=None, rules=()):
    from spectr_gbv.gpu_backend.bench.assisted import assisted_generate
    from spectr_gbv.gpu_backend.bench.generate_default import DefaultMethod
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate
    from spectr_gbv.reference.draft_stopping import ConfidenceStop

    from spectr_gbv.reference.rules import registry

    def engine(draft, stop=None, rule="spectr"):
        e = SpeculativeEngine(pair.target, draft, rule=rule, K=registry.default_K(rule, 2), L=4, sampling=sampling,
                              eos_token_ids=pair.eos, draft_stop=stop)
        return lambda ids, n, s: e.generate(ids, n, seed=s)

    methods = {
        "hf_generate": lambda ids, n, s: hf_generate(pair.target, ids, n, sampling, s, pair.eos),
        "ar": lambda ids, n, s: autoregressive_generate(pair.target, ids, n, sampling, s, pair.eos),
        "spectr": engine(pair.draft),
        "spectr int8": engine(int8_draft),
    }
    for t in thresholds:
        methods[f"spectr int8 stop<{t}"] = engine(int8_draft, ConfidenceStop(t))
    for rule in rules:
        if rule != "spectr":
            methods[rule_label(rule)] = engine(pair.draft, rule=rule)
    methods["hf_assisted"] = lambda ids, n, s: assisted_generate(pair.target, pair.draft, ids, n, sampling, 4, s,
                                                                 pair.eos)
    methods["hf_assisted L=20"] = lambda ids, n, s: assisted_generate(pair.target, pair.draft, ids, n, sampling, 20,
                                                                      s, pair.eos)
    methods["hf_assisted int8"] = lambda ids, n, s: assisted_generate(pair.target, int8_draft, ids, n, sampling,
                                                                      4, s, pair.eos)
    if auto is not None:  # decided per prompt, as generate does
        methods["auto"] = DefaultMethod(auto, pair.target, int8_draft, sampling, pair.eos)
    return methods


def plot(runs, methods, sets, path, title) -> None:
    """Two panels per method: speedup ratio over ``ar`` (mean and 95 % t-interval over the
    prompts, as error bars) and tokens per target call (pooled); lossy rules hatched.  The title
    states the real prompt counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ar = {(r["set"], r["prompt"]): r for r in runs if r["method"] == "ar"}
    names = list(methods)
    means, halves, tpc = [], [], []
    for name in names:
        rows = [r for r in runs if r["method"] == name]
        m, h = _ci([(r["tokens"] / r["wall"]) / (ar[(r["set"], r["prompt"])]["tokens"]
                                                 / ar[(r["set"], r["prompt"])]["wall"]) for r in rows])
        means.append(m)
        halves.append(0.0 if h != h else h)
        tpc.append(sum(r["tokens"] for r in rows) / sum(r["calls"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(names) + 1.8), sharey=True)
    y = range(len(names))
    for ax, values, err, label in ((axes[0], means, halves, "speedup ratio over our AR (mean, 95 % CI)"),
                                   (axes[1], tpc, None, "tokens per target call (pooled)")):
        bars = ax.barh(y, values, xerr=err, capsize=3, color=[f"C{i % 10}" for i in y])
        for bar, name in zip(bars, names):
            if name.endswith("(lossy)"):
                bar.set_hatch("//")
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(list(y), names, fontsize=8)
    axes[0].invert_yaxis()
    n_prompts = len({(r["set"], r["prompt"]) for r in runs})
    fig.suptitle(textwrap.fill(f"{title}: {n_prompts} prompts (" + ", ".join(
        f"{Path(s).name} {len({r['prompt'] for r in runs if r['set'] == s})}" for s in sets)
        + "); hatched: lossy rules", 110), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(runs, methods, sets, header) -> str:
    def by(name):
        return {(r["set"], r["prompt"]): r for r in runs if r["method"] == name}

    ar, hf = by("ar"), by("hf_assisted")
    lines = header + ["| method | tokens per target call | drafted positions per iteration | speedup ratio "
                      "(median) | speedup ratio (mean ± 95 % CI) | tokens/s ratio to hf_assisted (mean ± 95 % CI) "
                      "| time to first token s (median) | decode tokens/s (median) | peak RSS GB |",
                      "|---|---|---|---|---|---|---|---|---|"]
    per_set = {}
    for name in methods:
        rows = by(name)
        tps = {k: r["tokens"] / r["wall"] for k, r in rows.items()}
        speed = [tps[k] / (ar[k]["tokens"] / ar[k]["wall"]) for k in rows]
        vs_hf = [tps[k] / (hf[k]["tokens"] / hf[k]["wall"]) for k in rows]
        tpc = sum(r["tokens"] for r in rows.values()) / sum(r["calls"] for r in rows.values())
        pos = [r["positions"] for r in rows.values() if r["positions"] == r["positions"]]
        m, h = _ci(speed)
        m2, h2 = _ci(vs_hf)
        rss = max(r["rss"] for r in rows.values()) / 1e9
        ttft = [r.get("ttft", math.nan) for r in rows.values()]
        dec = [r.get("decode_tps", math.nan) for r in rows.values()]
        ttft_m = statistics.median(ttft) if all(v == v for v in ttft) else math.nan
        dec_m = statistics.median(dec) if all(v == v for v in dec) else math.nan
        lines.append(f"| {name} | {tpc:.3f} | {statistics.fmean(pos) if pos else float('nan'):.2f} | "
                     f"{statistics.median(speed):.2f} | {m:.2f} ± {h:.2f} | {m2:.2f} ± {h2:.2f} | "
                     f"{ttft_m:.2f} | {dec_m:.2f} | {rss:.1f} |")
        per_set[name] = {s: statistics.fmean(tps[k] / (ar[k]["tokens"] / ar[k]["wall"]) for k in rows if k[0] == s)
                         for s in sets}
    lines += ["", "Mean speedup ratio over `ar` per prompt set:", "",
              "| method | " + " | ".join(Path(s).name for s in sets) + " |", "|---" * (len(sets) + 1) + "|"]
    for name in methods:
        lines.append(f"| {name} | " + " | ".join(f"{per_set[name][s]:.2f}" for s in sets) + " |")
    return "\n".join(lines)


def rerender(args) -> int:
    """Tables (stdout, ``--md``) and ``--plot`` from the ``--json`` file of an earlier run."""
    data = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
    runs = data["runs"]
    methods = data.get("methods") or sorted({r["method"] for r in runs})  # older files: no saved order
    sets = list(dict.fromkeys(r["set"] for r in runs))
    header = data.get("header") or [f"# The engine against transformers (re-rendered from {args.from_json})", ""]
    text = render(runs, methods, sets, header)
    print(text, flush=True)
    if args.md:
        Path(args.md).write_text(text + "\n", encoding="utf-8")
    if args.plot:
        plot(runs, methods, sets, args.plot, header[0].lstrip("# "))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=5, help="prompts per set")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--thresholds", type=float, nargs="*", default=[0.3])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--target", default="target")
    parser.add_argument("--draft", default="draft")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="methods to run (default all); ar and hf_assisted are always run")
    parser.add_argument("--rules", nargs="+", default=[],
                        help="rules run beside the default at K = 2, L = 4 with the bfloat16 draft "
                             "('lossless': every lossless rule the engine's benchmark runs)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--md", default=None)
    parser.add_argument("--plot", default=None, help="PNG: speedup ratios with 95 %% CIs and tokens per call")
    parser.add_argument("--from-json", default=None,
                        help="re-render the tables and the plot from a --json file of an earlier run (no models)")
    args = parser.parse_args(argv)
    try:
        rules = rule_methods(args.rules)
    except ValueError as e:
        parser.error(str(e))
    if args.from_json:
        try:
            return rerender(args)
        except (OSError, ValueError, KeyError) as e:  # json's decode error is a ValueError
            parser.error(f"--from-json: cannot read runs from {args.from_json}: {e!r}")

    from spectr_gbv.gpu_backend.bench.run import machine_description
    from spectr_gbv.gpu_backend.models.draft_quant import quantize_draft
    from spectr_gbv.gpu_backend.engine.memory import reset_peak_rss
    from spectr_gbv.gpu_backend.models.pair import load_pair
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    sets = args.datasets or [s for s in DEFAULT_SETS if "/" not in s or Path(s).is_file()]
    pair = load_pair(args.target, args.draft, args.dtype)
    int8_draft = quantize_draft(load_causal_lm(args.draft, "float32")[0], "int8")
    sampling = SamplingConfig(args.temperature)
    auto = None
    if args.methods is None or "auto" in args.methods:
        from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec, configure

        auto = configure(pair.target, int8_draft, pair.tokenizer,
                         PairSpec(args.target, args.draft, args.dtype, "int8"), "spectr", sampling)
        print(auto.summary(), file=sys.stderr, flush=True)
    methods = build_methods(pair, int8_draft, sampling, args.thresholds, auto, rules)
    try:
        methods = select_methods(methods, args.methods, rules)
    except ValueError as e:
        parser.error(str(e))
    prompts = [(s, p, encode_prompt(pair.tokenizer, text))
               for s in sets for p, text in enumerate(load_prompts(s, args.prompts))]
    for fn in methods.values():  # warm-up, untimed
        fn(prompts[0][2], 8, 0)
    if "auto" in methods:
        methods["auto"].decisions.clear()  # count the timed runs' decisions only
    rng = random.Random(0)
    runs = []
    for n_prompt, (s, p, ids) in enumerate(prompts):
        order = list(methods)
        rng.shuffle(order)
        for name in order:
            reset_peak_rss()
            r = methods[name](ids, args.max_new_tokens, 1000 + n_prompt)
            runs.append(dict(set=s, prompt=p, method=name, tokens=r.new_tokens, calls=r.target_calls,
                             wall=r.wall_time_s, rss=r.peak_rss_bytes, ttft=r.time_to_first_token_s,
                             decode_tps=r.decode_tokens_per_second,
                             positions=getattr(r, "draft_positions_per_iteration", math.nan)))
            print(f"{Path(s).name} {p} {name:22s} {r.new_tokens} tokens {r.target_calls} calls "
                  f"{r.wall_time_s:.1f} s", file=sys.stderr, flush=True)
    header = [f"# The engine against transformers: {pair.description}, int8 draft "
              f"`quantize_draft`, T = {args.temperature}, {args.max_new_tokens} new tokens", "",
              "Made by `python benchmarks/engine_vs_assisted.py " + " ".join(argv if argv is not None else sys.argv[1:])
              + f"` on "
              f"{time.strftime('%Y-%m-%d')}; {len(prompts)} prompts: " + ", ".join(
                  f"{Path(s).name} {sum(1 for x in prompts if x[0] == s)}" for s in sets) + ".", "",
              machine_description() + ".", ""]
    if auto is not None:
        header += ["`auto`: " + auto.summary().replace("\n", "; ") + ".", "",
                   "`auto` decided per prompt (the draft's prefill counted): "
                   + methods["auto"].line() + ".", ""]
    text = render(runs, methods, sets, header)
    print(text, flush=True)
    if args.md:
        Path(args.md).write_text(text + "\n", encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), runs=runs, methods=list(methods), header=header),
                                              indent=1), encoding="utf-8")
    if args.plot:
        plot(runs, methods, sets, args.plot, header[0].lstrip("# "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
