"""Certify your own verifier: token-level speculative sampling written from scratch in numpy,
checked against the exact law of the registered rule "sd" (run: python examples/certify_your_verifier.py)."""
import numpy as np

from spectr_gbv.oracle.harness import certify_verifier
from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.validation import check_batch_inputs


def my_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    B, _, L = draft_tokens.shape  # K = 1: one draft block per row
    check_batch_inputs(draft_tokens, draft_probs, target_probs)  # refuses impossible rows (NaN, p(x) = 0, ...)
    tau, tokens = np.zeros(B, dtype=np.int64), np.full((B, L + 1), -1)
    for b in range(B):
        rng = np.random.default_rng(int(seeds[b]) % 2**64)  # row b's randomness from seeds[b] alone
        x, p, q = draft_tokens[b, 0], draft_probs[b, 0], target_probs[b, 0]
        i = 0
        while i < L and rng.random() < min(1.0, q[i, x[i]] / p[i, x[i]]):
            i += 1
        row = q[i] if i == L else np.maximum(q[i] - p[i], 0.0)  # bonus row, or the residual
        tokens[b, :i], tokens[b, i], tau[b] = x[:i], rng.choice(len(row), p=row / row.sum()), i
    return BatchVerdict(tau, np.zeros(B, dtype=np.int64), tokens, tau + 1)


if __name__ == "__main__":
    report = certify_verifier(my_sd, "sd", K=1, L=3, n_samples=20_000)
    print(report.table())
    print("CERTIFIED" if report.ok else "NOT CERTIFIED")
