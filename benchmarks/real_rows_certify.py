"""The torch verifiers certified on a real model's rows at V = 151,936 (issue 37, item 5).

For each rule: K drafts of L tokens sampled (seeded) from the Qwen2.5-Coder-0.5B draft's rows after
one fixed prompt (the first HumanEval stub, chat template), the draft's and the 1.5B target's rows
along them (bfloat16 weights, temperature 1 by default: the models' own laws; float32 rows as the
engine computes them), and ``oracle.certify.certify_case`` at N outcomes and α = 10^-6 over its six
tests (certify/verifiers/real_rows.py).  K = 2 (1 for single-draft rules), L = the rule's
``rows_L`` (2; SpecTr 1), as on the V = 4,096 rows of the plan.

Prints one markdown row per rule: verdict, δ of each test with power 0.99 and the law it is on
(``CaseResult.resolved``), the empirical TV, the case's p-value and seconds; writes the rows to
``--json`` (default benchmarks/raw/real_rows_certify.json).

Run: ``python benchmarks/real_rows_certify.py [--rules sd bv ...] [--n 100000]``
(one torch thread by default; about 2.5 s per 1,000 outcomes at K = 1 on a 2-core Xeon, twice
that at K = 2: benchmarks/REAL_ROWS.md).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from spectr_gbv.certify.verifiers.real_rows import ModelRows, real_rows_case
from spectr_gbv.certify.suite import suite_verifier
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
from spectr_gbv.gpu_backend.models.pair import load_pair
from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts
from spectr_gbv.oracle.certify import certify_case
from spectr_gbv.reference.rules import registry

HERE = Path(__file__).resolve().parent
ALPHA = 1e-6
SEED = 3


def main() -> None:
    lossless = [s.name for s in registry.specs() if s.lossless]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", nargs="+", default=lossless, choices=registry.names(), metavar="RULE")
    ap.add_argument("--n", type=int, default=100_000, help="outcomes per rule (default 10^5)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=256, help="rows per verifier call")
    ap.add_argument("--json", type=Path, default=HERE / "raw" / "real_rows_certify.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair("target", "draft", dtype="bfloat16")
    prompt = encode_prompt(pair.tokenizer, load_prompts("humaneval", 1)[0])
    sampling = SamplingConfig(temperature=args.temperature)
    draft, target = ModelRows(pair.draft, prompt, sampling), ModelRows(pair.target, prompt, sampling)
    rows = []
    print("| rule | K | L | N | verdict | δ joint G-test (whole law) | δ coarsened (coarsened law) "
          "| δ identity (whole law) | empirical TV | case p-value | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rule in args.rules:
        K = 1 if registry.is_single_draft(rule) else 2
        L = registry.spec(rule).rows_L
        start = time.perf_counter()
        case = real_rows_case(rule, draft, target, K, L, SEED, label="Qwen2.5-Coder HumanEval/0")
        built = time.perf_counter() - start
        res = certify_case(suite_verifier(rule, torch.float32), case, args.n, ALPHA, chunk=args.chunk)
        row = {"rule": rule, "K": K, "L": L, "N": args.n, "verdict": res.verdict, "case": res.name,
               "draft_tokens": case.draft_tokens.tolist(),
               "delta_joint_whole_law": res.detectable_tv, "delta_coarse": res.detectable_tv_coarse,
               "coarse_bins": res.coarse_bins, "delta_identity_whole_law": res.detectable_tv_identity,
               "identity_tail_mass": res.identity_tail_mass, "pooled_mass": res.pooled_mass,
               "empirical_tv": res.empirical_tv, "case_pvalue": res.case_pvalue,
               "failed_tests": res.failed_tests, "exact_mean_tau": res.exact_mean_tau,
               "mean_tau": res.mean_tau, "seconds_case": built, "seconds_certify": res.seconds}
        rows.append(row)
        f = lambda x: "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"  # noqa: E731
        print(f"| {rule} | {K} | {L} | {args.n:,} | {res.verdict} | {f(res.detectable_tv)} | "
              f"{f(res.detectable_tv_coarse)} ({res.coarse_bins} bins) | {f(res.detectable_tv_identity)} | "
              f"{f(res.empirical_tv)} | {res.case_pvalue:.3g} | {built + res.seconds:.0f} |", flush=True)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "made": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": platform.processor() or platform.machine(), "torch_threads": args.threads,
            "temperature": args.temperature, "alpha": ALPHA, "prompt": "humaneval[0], chat template",
            "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
