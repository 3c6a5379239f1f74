"""Paired real-model check of block efficiency SD ≤ BV (a violation is a bug).

The benchmark's block efficiencies of SD and BV come from different samples and differ by
noise of the same size as the expected gap.  Here both rules are scored on the SAME drafted
blocks: the engine runs BV (K = 1) on real prompts, and for every iteration the exact
conditional expectations E[τ | drafted block, rows] of SD (Σ_i Π_{j≤i} min(1, q/p)) and of BV
(τ = last i with η_i ≤ h_i: P(τ = i) = h_i Π_{j>i} (1 − h_j), with h from the reference rule's
own plan, reference/rules/bv.py) are computed in float64 from the rows handed to the verifier.
Their mean difference over iterations estimates E[τ_BV] − E[τ_SD] per iteration with a paired
standard error.  (Per block the difference can be negative; Sun et al.'s theorem is about the
expectation over drafts.)

    python benchmarks/sd_vs_bv_paired.py [--prompts 6] [--tokens 64] [--dataset humaneval]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np


def expected_taus(draft_tokens, draft_probs, target_probs) -> tuple[float, float]:
    """(E[τ_SD | block], E[τ_BV | block]) for one drafted block.

    Args: draft_tokens int [L]; draft_probs float [L, V]; target_probs float [L+1, V] (rows of
    the engine's IterationRecord for K = 1), any float dtype (cast to float64, renormalised).
    """
    from spectr_gbv.reference.rules import get_rule

    dp = np.asarray(draft_probs, dtype=np.float64)[None]
    tp = np.asarray(target_probs, dtype=np.float64)[None]
    dp /= dp.sum(-1, keepdims=True)
    tp /= tp.sum(-1, keepdims=True)
    tokens = np.asarray(draft_tokens, dtype=np.int64)[None]
    L = tokens.shape[1]
    ratio = tp[0, np.arange(L), tokens[0]] / dp[0, np.arange(L), tokens[0]]
    e_sd = float(np.cumprod(np.minimum(1.0, ratio)).sum())
    rule = get_rule("bv")
    block = rule.prepare(tokens, dp, tp)
    h = block.plan["h"]
    e_bv, survive = 0.0, 1.0  # survive = P(no success above i)
    for i in range(L, 0, -1):
        e_bv += i * h[i] * survive
        survive *= 1.0 - h[i]
    return e_sd, e_bv


def main() -> None:

    from spectr_gbv.gpu_backend.models.pair import load_pair
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--L", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    args = ap.parse_args()
    pair = load_pair()
    engine = SpeculativeEngine(pair.target, pair.draft, rule="bv", K=1, L=args.L,
                               sampling=SamplingConfig(args.temperature), eos_token_ids=pair.eos)
    diffs, sds, bvs = [], [], []
    for p_idx, text in enumerate(load_prompts(args.dataset, args.prompts)):
        records = []
        engine.generate(encode_prompt(pair.tokenizer, text), args.tokens, seed=p_idx,
                        on_iteration=records.append)
        for rec in records:
            e_sd, e_bv = expected_taus(rec.draft_tokens.reshape(-1).cpu().numpy(),
                                       rec.draft_probs[0].float().cpu().numpy(),
                                       rec.target_probs[0].float().cpu().numpy())
            sds.append(e_sd)
            bvs.append(e_bv)
            diffs.append(e_bv - e_sd)
    n = len(diffs)
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(n)
    print(f"{args.dataset}, {args.prompts} prompts x {args.tokens} tokens, K = 1, L = {args.L}, "
          f"T = {args.temperature}: {n} iterations")
    print(f"mean E[tau | block]: SD {statistics.fmean(sds):.4f}, BV {statistics.fmean(bvs):.4f}")
    print(f"BV - SD: {mean:+.4f} +- {se:.4f} (paired s.e.); blocks where BV < SD: "
          f"{sum(d < -1e-12 for d in diffs)} of {n}; z = {mean / se if se > 0 else float('inf'):.1f}")


if __name__ == "__main__":
    main()
