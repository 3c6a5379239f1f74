"""What lossless rules cannot exceed on the real model pair (in which iterations: item 3): the
prefix-match ceiling of tokens per target call, estimated on the target's own texts, beside
what the engine's rules measure.

Per prompt (the benchmark's four sets by default, the same seeds as
``benchmarks/engine_vs_assisted.py``) and per ``--rules`` rule (lossless rules only):

1. the rule generates ``--max-new-tokens`` tokens with uncapped blocks; its measured tokens per
   iteration is the mean of τ + 1 over iterations (the verifier's τ before truncation: the
   quantity the ceiling bounds);
2. the rule is lossless, so its output is a text sampled from the target: both models are
   teacher-forced over it, each token's probability under the target q and the draft p
   (processed rows: temperature, as the engine samples);
3. on that text, the unbiased estimate of the prefix-match ceiling at every start and depth
   (``oracle.prefix_match.prefix_match_bound_estimate``, docs/bounds.md §6): per (K, L),
   ``1 + Σ_i u_i`` bounds the tokens per target call of one iteration of a lossless rule
   with K i.i.d. drafts of L tokens: its first, or any if it leaves later targets untouched
   (not a bound at later iterations of a rule that modifies them: docs/bounds.md §6).

Estimating the ceiling on the rule's own text pairs the two numbers on the same contexts, so
their difference is resolved with far fewer prompts than two independent samples would need.
Prints the ceiling for every (K, L) (per prompt the mean over the rules' texts; mean over
prompts with the 95 % t-interval over prompts), per prompt set at the ``--main`` shape, and per
rule the measured tokens per iteration, the ceiling at its shape on its texts and the paired
difference per prompt.  Not a timing benchmark: a busy machine changes only the wall time.

    python benchmarks/lossless_ceiling.py [--prompts 8] [--max-new-tokens 64]
        [--K 1 2 3 4] [--L 1 2 3 4 6 8 12 16 20] [--rules spectr traversal bv sd] [--main 2x4]
        [--datasets humaneval gsm8k ...] [--dtype bfloat16] [--json FILE] [--md FILE]
    python benchmarks/lossless_ceiling.py --from-json FILE [--md FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the side-by-side benchmark's prompt sets and 95 % t-intervals over prompts, shared
from engine_vs_assisted import DEFAULT_SETS, _ci  # noqa: E402


def _fmt(mean: float, half: float) -> str:
    return f"{mean:.2f} ± {half:.2f}" if math.isfinite(half) else f"{mean:.2f}"


def _shape(text: str) -> tuple[int, int]:
    try:
        K, L = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KxL, e.g. 2x4, got {text!r}") from None
    if K < 1 or L < 1:
        raise argparse.ArgumentTypeError(f"K and L must be >= 1, got {text!r}")
    return K, L


def ceilings(q_tok, p_tok, Ks, Ls) -> dict:
    """{(K, L): (mean of 1 + Σ_i estimate over windows, per-depth means [L])} for one text;
    shapes whose L exceeds the text are left out."""
    import numpy as np

    from spectr_gbv.oracle.prefix_match import prefix_match_bound_estimate

    out = {}
    for K in Ks:
        for L in Ls:
            if L > len(q_tok):
                continue
            est = prefix_match_bound_estimate(q_tok, p_tok, [len(q_tok)], K, L)
            out[(K, L)] = (float(1.0 + est.sum(axis=1).mean()), np.mean(est, axis=0).tolist())
    return out


def iteration_pairs(q_tok, p_tok, taus, K: int, L: int) -> tuple[list[float], list[int]]:
    """(ceiling estimates, τ + 1) at the iterations of one generation whose window of L tokens
    lies inside the output: iteration j starts at s_j = Σ_{i<j} (τ_i + 1) (uncapped blocks, τ
    before truncation).  Empty lists when no iteration qualifies."""
    import numpy as np

    from spectr_gbv.oracle.prefix_match import prefix_match_bound_estimate

    n = len(q_tok)
    if n < L:
        return [], []
    est = prefix_match_bound_estimate(np.asarray(q_tok), np.asarray(p_tok), [n], K, L)
    starts = np.concatenate([[0], np.cumsum(np.asarray(taus, dtype=np.int64) + 1)[:-1]]).astype(int)
    keep = [j for j, s in enumerate(starts) if s + L <= n]
    return [float(1.0 + est[starts[j]].sum()) for j in keep], [int(taus[j]) + 1 for j in keep]


def _prompt_ceiling(prompt: dict, key: str):
    """(mean over the prompt's texts of the ceiling at ``key``, per-depth means), or None."""
    vals = [c[key] for c in prompt["ceiling"].values() if key in c]
    if not vals:
        return None
    return statistics.fmean(v[0] for v in vals), [statistics.fmean(d) for d in zip(*(v[1] for v in vals))]


def render(prompts: list[dict], Ks, Ls, rules, main, header) -> str:
    lines = list(header)
    lines += ["## The ceiling of tokens per target call, one iteration (mean over prompts ± 95 % CI)", "",
              "| K \\ L | " + " | ".join(str(L) for L in Ls) + " |",
              "|---|" + "---|" * len(Ls)]
    for K in Ks:
        cells = []
        for L in Ls:
            vals = [c[0] for p in prompts if (c := _prompt_ceiling(p, f"{K}x{L}")) is not None]
            cells.append(_fmt(*_ci(vals)) if vals else "n/a")
        lines.append(f"| {K} | " + " | ".join(cells) + " |")
    key = f"{main[0]}x{main[1]}"
    lines += ["", f"## Per prompt set, K = {main[0]}, L = {main[1]}", "",
              "| set | prompts | ceiling, tokens per iteration | P(τ ≥ i) ceiling, i = 1.." + str(main[1]) + " |",
              "|---|---|---|---|"]
    sets = list(dict.fromkeys(p["set"] for p in prompts))
    for s in sets + ["all"]:
        group = [c for p in prompts if s in ("all", p["set"]) and (c := _prompt_ceiling(p, key)) is not None]
        if not group:
            continue
        depth = [statistics.fmean(c[1][i] for c in group) for i in range(main[1])]
        lines.append(f"| {Path(s).name} | {len(group)} | {_fmt(*_ci([c[0] for c in group]))} | "
                     + ", ".join(f"{d:.3f}" for d in depth) + " |")
    if rules:
        lines += ["", "## Measured against the ceiling at the rule's own iteration starts", "",
                  "Per iteration j of the rule's generation, starting at position s_j of its output, the "
                  "ceiling's estimate on the window of L tokens from s_j against τ_j + 1; for a rule that "
                  "does not modify later targets, the output after s_j has the target's law given "
                  "everything before it, so E[ceiling_j − (τ_j + 1)] ≥ 0 iteration by iteration.  "
                  "Iterations whose window runs past the output's end are left out.", "",
                  "| rule | K | L | iterations | measured tokens per iteration (mean τ + 1) | ceiling at the same "
                  "starts | ceiling − measured, per prompt (mean ± 95 % CI) | measured ÷ ceiling "
                  "| ceiling over all positions of its outputs |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rules:
            K, L, name = r["K"], r["L"], r["name"]
            ceil_all = [p["ceiling"][name][f"{K}x{L}"][0] for p in prompts if f"{K}x{L}" in p["ceiling"][name]]
            ceil_all_text = f"{statistics.fmean(ceil_all):.2f}" if ceil_all else "n/a"
            pairs = [iteration_pairs(p["q_token"][name], p["p_token"][name], p["measured"][name], K, L)
                     for p in prompts]
            pairs = [(c, m) for c, m in pairs if len(c)]
            if not pairs:
                lines.append(f"| `{name}` | {K} | {L} | 0 | n/a | n/a | n/a | n/a | n/a |")
                continue
            ceil = [x for c, _ in pairs for x in c]
            meas = [x for _, m in pairs for x in m]
            diff = [statistics.fmean(c) - statistics.fmean(m) for c, m in pairs]
            modifies = " (modifies later targets: no per-iteration guarantee)" if r.get("modifies_targets") else ""
            lines.append(f"| `{name}`{modifies} | {K} | {L} | {len(meas)} | {statistics.fmean(meas):.2f} | "
                         f"{statistics.fmean(ceil):.2f} | {_fmt(*_ci(diff))} | "
                         f"{statistics.fmean(meas) / statistics.fmean(ceil):.3f} | "
                         f"{ceil_all_text} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from spectr_gbv.cli.args import dtype_name, output_file, positive_int, positive_temperature_value

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=positive_int, default=8, help="prompts per set")
    parser.add_argument("--max-new-tokens", type=positive_int, default=64, help="length of each rule's output")
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--K", type=positive_int, nargs="+", default=[1, 2, 3, 4],
                        help="drafts of the ceiling table (each rule's own K is added)")
    parser.add_argument("--L", type=positive_int, nargs="+", default=[1, 2, 3, 4, 6, 8, 12, 16, 20],
                        help="block lengths of the ceiling table (--main's L is added)")
    parser.add_argument("--rules", nargs="+", default=["spectr", "traversal", "bv", "sd"],
                        help="lossless rules run by the engine, whose outputs are the texts (K from --main "
                             "for a multi-draft rule, 1 for a single-draft one; L from --main)")
    parser.add_argument("--main", type=_shape, default=(2, 4), help="KxL of the per-set table and the rules")
    parser.add_argument("--temperature", type=positive_temperature_value, default=0.7)
    parser.add_argument("--target", default="target")
    parser.add_argument("--draft", default="draft")
    parser.add_argument("--dtype", type=dtype_name, default="bfloat16")
    parser.add_argument("--json", type=output_file, default=None)
    parser.add_argument("--md", type=output_file, default=None)
    parser.add_argument("--from-json", default=None,
                        help="re-render the tables from a --json file of an earlier run (no models)")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        return rerender(parser, args)
    from spectr_gbv.reference.rules import registry

    for name in args.rules:
        try:
            lossless = registry.spec(name).lossless
        except ValueError as e:
            parser.error(f"--rules: {e}")
        if not lossless:
            parser.error(f"--rules: {name!r} is not lossless: its output is not a sample of the target")
    rules = [dict(name=n, K=1 if registry.is_single_draft(n) else args.main[0], L=args.main[1],
                  modifies_targets=registry.spec(n).modifies_targets) for n in args.rules]
    # every shape the tables show must be in the grid
    Ks = sorted(set(args.K) | {r["K"] for r in rules} | {args.main[0]})
    Ls = sorted(set(args.L) | {args.main[1]})

    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts

    sets = args.datasets or [s for s in DEFAULT_SETS if "/" not in s or Path(s).is_file()]
    try:  # before any model is loaded
        texts = [(s, p, text) for s in sets for p, text in enumerate(load_prompts(s, args.prompts))]
    except (OSError, ValueError) as e:
        parser.error(f"--datasets: {e}")

    import torch

    from spectr_gbv.gpu_backend.tuning.measure import teacher_forced_rows
    from spectr_gbv.gpu_backend.bench.run import machine_description
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.models.pair import ModelLoadError, load_pair
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

    try:
        pair = load_pair(args.target, args.draft, args.dtype)
    except ModelLoadError as e:
        parser.error(f"--{e.role}: {e}")
    sampling = SamplingConfig(args.temperature)
    engines = {r["name"]: SpeculativeEngine(pair.target, pair.draft, rule=r["name"], K=r["K"], L=r["L"],
                                            sampling=sampling, eos_token_ids=pair.eos, cap_blocks=False)
               for r in rules}
    prompts = [(s, p, encode_prompt(pair.tokenizer, text)) for s, p, text in texts]
    out = []
    for n_prompt, (s, p, ids) in enumerate(prompts):
        seed = 1000 + n_prompt
        record = dict(set=Path(s).name, prompt=p, texts={}, q_token={}, p_token={}, ceiling={}, measured={})
        for name, engine in engines.items():
            result = engine.generate(ids, args.max_new_tokens, seed=seed)
            text = [int(t) for t in result.tokens]
            tok = torch.tensor(text, dtype=torch.int64)
            q_tok = teacher_forced_rows(pair.target, ids, text, sampling).gather(1, tok[:, None])[:, 0]
            p_tok = teacher_forced_rows(pair.draft, ids, text, sampling).gather(1, tok[:, None])[:, 0]
            q_tok, p_tok = q_tok.double().numpy(), p_tok.double().numpy()
            record["texts"][name], record["q_token"][name], record["p_token"][name] = text, q_tok.tolist(), p_tok.tolist()
            record["ceiling"][name] = {f"{K}x{L}": v for (K, L), v in ceilings(q_tok, p_tok, Ks, Ls).items()}
            record["measured"][name] = [int(t) for t in result.taus_raw]
        out.append(record)
        parts = []
        for r in rules:
            own = record["ceiling"][r["name"]].get(f"{r['K']}x{r['L']}", (math.nan,))[0]
            parts.append(f"{r['name']} {1 + statistics.fmean(record['measured'][r['name']]):.2f} "
                         f"(ceiling at K = {r['K']}: {own:.2f})")
        print(f"{Path(s).name} {p}: " + ", ".join(parts), file=sys.stderr, flush=True)
    header = [f"# The lossless ceiling on the real models: {pair.description}, T = {args.temperature}, "
              f"texts of {args.max_new_tokens} tokens", "",
              "Made by `python benchmarks/lossless_ceiling.py " + " ".join(argv if argv is not None else sys.argv[1:])
              + f"` on {time.strftime('%Y-%m-%d')}; {len(prompts)} prompts: "
              + ", ".join(f"{Path(s).name} {sum(1 for x in prompts if x[0] == s)}" for s in sets) + ".", "",
              machine_description() + ".", "",
              "The ceiling: 1 + Σ_i u_i, u_i = Σ_{|z|=i} min(q(z), 1 − (1 − p(z))^K) (docs/bounds.md §6), "
              "estimated at every start of each rule's output (a sample of the target); no lossless rule "
              "with K i.i.d. drafts of L tokens emits more tokens per target call in its first iteration, "
              "nor in any iteration if it leaves later targets untouched, in expectation over the "
              "contexts it starts from (for later iterations of a rule that modifies later targets it "
              "is not a bound: docs/bounds.md §6).", ""]
    if args.json:  # first: the raw data is the costly part
        Path(args.json).write_text(json.dumps(dict(args=vars(args), grid=dict(K=Ks, L=Ls), header=header,
                                                   rules=rules, prompts=out)), encoding="utf-8")
    text = render(out, Ks, Ls, rules, args.main, header)
    print(text, flush=True)
    if args.md:
        Path(args.md).write_text(text + "\n", encoding="utf-8")
    return 0


def rerender(parser, args) -> int:
    """``--from-json``: the tables of a saved run, no models."""
    try:
        data = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        grid = data.get("grid") or data["args"]  # runs saved before the grid was stored: the flags
        header = data["header"]
        if not isinstance(header, list) or not all(isinstance(line, str) for line in header):
            raise ValueError("header must be a list of lines")
        text = render(data["prompts"], sorted(set(grid["K"])), sorted(set(grid["L"])), data["rules"],
                      tuple(data["args"]["main"]), header)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            statistics.StatisticsError) as e:  # json's decode error is a ValueError
        parser.error(f"--from-json: cannot read a run from {args.from_json}: {e!r}")
    print(text, flush=True)
    if args.md:
        Path(args.md).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
