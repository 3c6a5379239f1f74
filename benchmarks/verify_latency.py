"""Latency of the batched verifiers (gpu_backend.verifiers) at a real vocabulary size.

Median per-iteration verification time of each rule at V = 151,936 (Qwen2 vocabulary),
K ∈ {1, 3, 7}, L ∈ {4, 8, 12}, B ∈ {1, 16}, float32 inputs (bfloat16 with --bf16), on the CPU and
on CUDA when available; validate=False (the engine's hot path), a fresh seed per run.
Inputs are generated once per configuration: rows are softmax(3·N(0, 1) logits), draft tokens
sampled from the draft rows.  Warm-up runs precede ≥ 5 timed runs, the rules interleaved run
by run (median reported; compare ratios measured side by side, not absolute values across
runs).

Rules: every registered rule with a batched plan (registry bench=True; ``--rules`` picks
others, e.g. ``--rules spectr mdbv_kseq``; mdbv's host plan takes seconds per iteration).
``mdbv_kseq_fixed`` times mdbv_kseq with its fixed plan (no host read: what CUDA runs) on a CPU
too, where mdbv_kseq otherwise solves only the nodes it reads.  ``--drafts identical`` repeats
draft 0 K times (every depth has K drafts through one node), the default draws each draft from
its own rows (they diverge at the first position).
Reported ratios: each multi-draft rule's time / SpecTr's, and SpecTr's time / 170 ms (one
forward of the real target model on this CPU).

A second table times the race noise for one verification (V = 151,936): the flat race's V
exponentials from the counter-based hash, the grouped race's G + S (what seeded verification
uses), and a per-row torch.Generator (manual_seed + exponential_).

Memory: the inputs take B·K·(2L+1)·V·4 bytes (16·7·25·151,936·4 B = 1.7 GB); configurations
above --max-gb are skipped with a note.

Usage:
    python benchmarks/verify_latency.py [--quick] [--json FILE] [--bf16] [--runs 7]
                                        [--max-gb 3] [--threads 1] [--device cpu|cuda|all]
                                        [--rules spectr ...] [--K 2 3] [--L 4 8]
                                        [--drafts independent|identical]

Figures (1 thread, float32, B = 1, V = 151,936): benchmarks/VERIFY_MDBV_KSEQ.md (2026-12-01):
SpecTr 2.2-9.3 ms with independent drafts at K = 1-4, L = 4-8 (1.3-5.5 % of 170 ms), 10-22 ms
with identical drafts (K-SEQ roots at every depth); MDBV-KSEQ 1.3-2.4× SpecTr at K = 2-4 with its
host plan, 5-17× with the fixed plan.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from spectr_gbv.gpu_backend.verifiers import VERIFIERS, get_verifier, mdbv_kseq
from spectr_gbv.reference.rules import registry
from spectr_gbv.gpu_backend.verifiers.noise import make_noise, race_groups, seeded_exponentials

V_REAL = 151_936
TARGET_FORWARD_MS = 170.0
SINGLE_DRAFT = registry.names(single_draft=True)
FULL_GRID = dict(K=(1, 3, 7), L=(4, 8, 12), B=(1, 16))
QUICK_GRID = dict(K=(1, 3, 7), L=(4, 12), B=(1,))


def make_inputs(B, K, L, V, dtype, device, seed=0, identical=False):
    """Random rows and drafts; ``identical``: the K drafts are draft 0 repeated (tokens and
    rows), the case where every depth has K drafts through one node."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    dp = torch.softmax(torch.randn(B, K, L, V, generator=g) * 3.0, dim=-1)
    tp = torch.softmax(torch.randn(B, K, L + 1, V, generator=g) * 3.0, dim=-1)
    tok = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K, L)
    if identical:
        tok, dp, tp = (x[:, :1].expand(x.shape).contiguous() for x in (tok, dp, tp))
    return tok.to(device), dp.to(dtype).to(device), tp.to(dtype).to(device)


# mdbv_kseq with its fixed plan (every slot at both budgets, no host read: what CUDA runs)
# also on a CPU, where it otherwise plans on the host (gpu_backend/verifiers/mdbv_kseq.py)
FIXED_PLAN = "mdbv_kseq_fixed"


def get_timed_verifier(name):
    if name != FIXED_PLAN:
        return get_verifier(name)
    verifier = get_verifier("mdbv_kseq")

    def fixed(*args, **kwargs):
        saved = mdbv_kseq.host_plan
        mdbv_kseq.host_plan = lambda batch: False
        try:
            return verifier(*args, **kwargs)
        finally:
            mdbv_kseq.host_plan = saved
    return fixed


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn, runs, warmup, device):
    for _ in range(warmup):
        fn(0)
    sync(device)
    times = []
    for r in range(runs):
        t0 = time.perf_counter()
        fn(r + 1)
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, times


def bench_config(B, K, L, V, dtype, device, runs, warmup, rules, identical=False):
    """Median ms per rule; the rules' timed calls are interleaved (run r of every rule, then run
    r + 1), so that a slow spell of a shared machine falls on all of them alike."""
    tok, dp, tp = make_inputs(B, K, L, V, dtype, device, identical=identical)
    calls = {}
    for name in rules:
        if name in SINGLE_DRAFT and K != 1:
            continue
        verifier = get_timed_verifier(name)

        def call(r, verifier=verifier):
            seeds = torch.arange(B, dtype=torch.int64, device=device) + r * B
            return verifier(tok, dp, tp, seeds=seeds, validate=False)

        calls[name] = call
    for _ in range(warmup):
        for call in calls.values():
            call(0)
    sync(device)
    times = {name: [] for name in calls}
    for r in range(runs):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call(r + 1)
            sync(device)
            times[name].append(time.perf_counter() - t0)
    del tok, dp, tp
    return {name: {"median_ms": statistics.median(t) * 1e3, "runs_ms": [x * 1e3 for x in t]}
            for name, t in times.items()}


def bench_noise(B, V, device, runs):
    """ms per verification's race noise: flat hash, grouped hash, per-row torch.Generator."""
    seeds = torch.arange(B, dtype=torch.int64, device=device)
    G, S = race_groups(V)

    def flat(r):
        return -torch.log(seeded_exponentials(seeds + r, V)).float()

    def grouped(r):
        return make_noise(B, 1, 1, V, device, torch.float32, seeds=seeds + r).gumbel

    def generator(r):
        out = torch.empty(B, V, device=device)
        gen = torch.Generator(device=device)
        for b in range(B):
            gen.manual_seed(int(b + r * B))
            out[b].exponential_(generator=gen)
        return -torch.log(out)

    return {name: time_call(fn, runs, 1, device)[0]
            for name, fn in (("hash, flat race (V exponentials)", flat),
                             (f"hash, grouped race (G + S = {G + S})", grouped),
                             ("per-row torch.Generator (V exponentials)", generator))}


def input_gb(B, K, L, V, dtype):
    return B * K * (2 * L + 1) * V * torch.finfo(dtype).bits / 8 / 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from spectr_gbv.cli.args import nonneg_int, output_file, positive_float, positive_int

    ap.add_argument("--quick", action="store_true", help="B = 1, K ∈ {1, 3, 7}, L ∈ {4, 12}")
    ap.add_argument("--json", type=output_file, help="write all measurements to this file")
    ap.add_argument("--bf16", action="store_true", help="also time bfloat16 inputs")
    ap.add_argument("--runs", type=positive_int, default=7)
    ap.add_argument("--warmup", type=nonneg_int, default=2)
    ap.add_argument("--max-gb", type=positive_float, default=3.0, help="skip configurations whose inputs exceed this")
    ap.add_argument("--threads", type=nonneg_int, default=1,
                    help="torch.set_num_threads (default 1: on this shared 2-core machine OpenMP's "
                         "second thread made the same runs 10-100x slower, e.g. SpecTr K=3 L=12 "
                         "44 ms -> 2.4 s; 0 keeps torch's default)")
    ap.add_argument("--device", choices=("cpu", "cuda", "all"), default="all")
    ap.add_argument("--V", type=positive_int, default=V_REAL)
    ap.add_argument("--rules", nargs="+", default=None,
                    help="rules to time (default: every registered rule with a batched plan, i.e. "
                         "registry bench=True; mdbv's host plan takes seconds per iteration)")
    ap.add_argument("--K", type=positive_int, nargs="+", default=None, help="replace the grid's K values")
    ap.add_argument("--L", type=positive_int, nargs="+", default=None, help="replace the grid's L values")
    ap.add_argument("--drafts", choices=("independent", "identical"), default="independent",
                    help="independent: each draft from its own random rows (they diverge at the "
                         "first position); identical: draft 0 repeated K times (every depth has K "
                         "drafts through one node: the most solves for SpecTr and MDBV-KSEQ)")
    args = ap.parse_args(argv)
    rules = tuple(args.rules or registry.names(bench=True))
    unknown = [r for r in rules if r not in VERIFIERS and r != FIXED_PLAN]
    if unknown:
        ap.error(f"--rules: unknown rule(s) {', '.join(unknown)}; known: {', '.join(VERIFIERS)}, {FIXED_PLAN}")
    if "spectr" not in rules:
        ap.error("--rules must include spectr (the ratios' denominator)")
    if len(set(rules)) != len(rules):
        ap.error(f"--rules: a rule is named twice ({' '.join(rules)})")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available in this torch build or machine")
    if args.V < 2:
        ap.error("--V must be >= 2 (one token leaves nothing to verify)")
    if args.runs < 5:
        ap.error("--runs must be >= 5 (medians of at least 5 runs)")
    if args.threads:
        torch.set_num_threads(args.threads)
    grid = dict(QUICK_GRID if args.quick else FULL_GRID)
    for key in ("K", "L"):
        if getattr(args, key):
            grid[key] = tuple(getattr(args, key))
    devices = []
    if args.device in ("cpu", "all"):
        devices.append(torch.device("cpu"))
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    dtypes = [torch.float32] + ([torch.bfloat16] if args.bf16 else [])
    V = args.V
    results, skipped = [], []
    print(f"# verify_latency: V = {V}, torch {torch.__version__}, CPU threads {torch.get_num_threads()}, "
          f"devices {[str(d) for d in devices]}, median of {args.runs} runs after {args.warmup} warm-up, "
          f"{args.drafts} drafts",
          flush=True)
    for device in devices:
        for dtype in dtypes:
            for B in grid["B"]:
                for K in grid["K"]:
                    for L in grid["L"]:
                        gb = input_gb(B, K, L, V, dtype)
                        cfg = dict(device=str(device), dtype=str(dtype).replace("torch.", ""), B=B, K=K, L=L)
                        if gb > args.max_gb:
                            skipped.append({**cfg, "input_gb": gb})
                            print(f"skip {cfg}: inputs {gb:.2f} GB > --max-gb {args.max_gb}", flush=True)
                            continue
                        t0 = time.perf_counter()
                        times = bench_config(B, K, L, V, dtype, device, args.runs, args.warmup, rules,
                                             identical=args.drafts == "identical")
                        results.append({**cfg, "input_gb": gb, "rules": times})
                        line = "  ".join(f"{n} {v['median_ms']:.1f}" for n, v in times.items())
                        print(f"{cfg['device']} {cfg['dtype']} B={B} K={K} L={L}: {line} ms "
                              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    noise = {str(d): {B: bench_noise(B, V, d, args.runs) for B in grid["B"] + ((16,) if 16 not in grid["B"] else ())}
             for d in devices}
    print()
    print(table(results, rules))
    print()
    print(ratio_table(results))
    print()
    print("race noise per verification (ms, median):")
    for d, per_b in noise.items():
        for B, row in per_b.items():
            print(f"  {d} B={B}: " + "; ".join(f"{k} {v:.2f}" for k, v in row.items()))
    if skipped:
        print("\nskipped (memory): " + ", ".join(f"{s['device']} {s['dtype']} B={s['B']} K={s['K']} L={s['L']} "
                                                 f"({s['input_gb']:.1f} GB)" for s in skipped))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"V": V, "torch": torch.__version__, "threads": torch.get_num_threads(), "drafts": args.drafts,
                       "target_forward_ms": TARGET_FORWARD_MS, "runs": args.runs,
                       "results": results, "skipped": skipped,
                       "noise_ms": {d: {str(B): r for B, r in per_b.items()} for d, per_b in noise.items()}},
                      f, indent=2)
    return 0


def table(results, rules):
    head = "| device | dtype | B | K | L | " + " | ".join(rules) + " |"
    lines = [head, "|" + "---|" * (5 + len(rules))]
    for r in results:
        cells = [f"{r['rules'][n]['median_ms']:.1f}" if n in r["rules"] else "–" for n in rules]
        lines.append(f"| {r['device']} | {r['dtype']} | {r['B']} | {r['K']} | {r['L']} | " + " | ".join(cells) + " |")
    return "median verification time (ms)\n" + "\n".join(lines)


def ratio_table(results):
    """Each multi-draft rule's time over SpecTr's, and SpecTr's time over one target forward."""
    others = [n for n in ("spectr_gbv", "kseq_gbv", "kseq_bv", "traversal", "mdbv_kseq", FIXED_PLAN)
              if any(n in r["rules"] for r in results)]
    lines = ["| device | dtype | B | K | L | SpecTr ms | SpecTr / 170 ms | " + " | ".join(f"{n} / SpecTr" for n in others) + " |",
             "|" + "---|" * (7 + len(others))]
    for r in results:
        t = {n: v["median_ms"] for n, v in r["rules"].items()}
        s = t["spectr"]
        cells = [f"{t[n] / s:.2f}" if n in t else "–" for n in others]
        lines.append(f"| {r['device']} | {r['dtype']} | {r['B']} | {r['K']} | {r['L']} | {s:.1f} | "
                     f"{s / TARGET_FORWARD_MS:.1%} | " + " | ".join(cells) + " |")
    return ("ratios to SpecTr's verifier and to one 170 ms target forward\n" + "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
