"""The fewest sequences any test needs to catch the 1 % draft leak on the tiny model.

The planted leak of DEPLOYMENT.md (``deployment_power.py --planted leak``): the server samples
from m = (1 − λ)·p + λ·q, λ = 0.01, p the tiny model's float32 law at T = 1, q its bfloat16 copy
with the logits divided by 1.5 (the transformers assistant of ``certify engine``).  A test of
level α that rejects with probability 1 − β on N sequences of n tokens needs (data processing
for the Kullback–Leibler divergence, e.g. Polyanskiy & Wu, *Information Theory*, 2024, §14.5)

    N · D ≥ d(1 − β ‖ α) = (1 − β)·log((1 − β)/α) + β·log(β/(1 − α)),

D = Σ_t E_m[KL(m_t ‖ p_t)] the divergence of one sequence's law from the model's (chain rule:
the per-position divergences along sequences drawn from m).  No test, whatever it knows, can
do with fewer sequences.  This script estimates D by drawing sequences from m (the 8 shipped
prompts in turn, 16 tokens) and summing KL(m_t ‖ p_t), exact over the whole vocabulary in
float64 at every position, and prints the bound for α = 10^-3, power 0.99 (the default plans)
and for α = 0.01, power 0.9 (SEQUENCE_POWER.md's points).

Run: ``python benchmarks/leak_limit.py [--sequences 64] [--weight 0.01]``; about a minute on 2
cores.  Results: benchmarks/DEPLOYMENT.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time


def binary_kl(a: float, b: float) -> float:
    """d(a ‖ b) in nats for a, b in (0, 1) (scipy's relative entropy of the two Bernoulli laws)."""
    from scipy.special import rel_entr

    return float(rel_entr(a, b) + rel_entr(1 - a, 1 - b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--weight", type=float, default=0.01, help="λ, the draft's share of the law")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.sequences < 2 or not 0 < args.weight < 1 or args.new_tokens < 1:
        ap.error("--sequences must be >= 2, --weight in (0, 1), --new-tokens >= 1")
    import torch

    from spectr_gbv.certify.endpoint.prompts import DEFAULT_PROMPTS
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    torch.manual_seed(args.seed)
    started = time.time()
    target, tok = load_causal_lm("tiny", dtype="float32")
    draft = load_causal_lm("tiny", dtype="bfloat16")[0]
    lam = args.weight
    per_seq = []  # D of each sequence: Σ_t KL(m_t ‖ p_t)
    prompts = [tok(p).input_ids for p in DEFAULT_PROMPTS]
    for i, prompt in enumerate(prompts):
        count = len(range(i, args.sequences, len(prompts)))
        if count == 0:
            continue
        ids = torch.tensor([prompt] * count)
        kl = torch.zeros(count, dtype=torch.float64)
        with torch.inference_mode():
            for _ in range(args.new_tokens):
                logp = torch.log_softmax(target(ids).logits[:, -1].double(), -1)
                logq = torch.log_softmax(draft(ids).logits[:, -1].double() / 1.5, -1)
                logm = torch.logsumexp(torch.stack([logp + math.log1p(-lam), logq + math.log(lam)]), 0)
                kl += (logm.exp() * (logm - logp)).sum(-1)
                nxt = torch.multinomial(logm.exp(), 1)
                ids = torch.cat([ids, nxt], 1)
        per_seq += kl.tolist()
        print(f"{time.strftime('%H:%M:%S')} prompt {i + 1}/{len(prompts)}: {len(per_seq)} sequences", flush=True)
    n = len(per_seq)
    mean = sum(per_seq) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in per_seq) / (n - 1))
    out = {"weight": lam, "sequences": n, "new_tokens": args.new_tokens,
           "D_per_sequence_nats": mean, "D_sd": sd, "D_se": sd / math.sqrt(n),
           "D_per_token_nats": mean / args.new_tokens, "seconds": time.time() - started}
    for alpha, power in ((1e-3, 0.99), (0.01, 0.9)):
        need = binary_kl(power, alpha)
        out[f"alpha {alpha} power {power}"] = {"d_nats": need, "fewest_sequences": need / mean,
                                               "with D at mean + 2 se": need / (mean + 2 * sd / math.sqrt(n))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
