"""Certify a rule that no registry knows: "sampler match" (accept the draft token iff it equals a
fresh draw from the target row, else emit that draw) is lossless by construction — every emitted
token is a draw from the target given the tokens before it — and ``certify_lossless`` checks that
without a reference law (run: python examples/certify_lossless.py)."""
import numpy as np

from spectr_gbv.oracle.harness import certify_lossless
from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.validation import check_batch_inputs


def sampler_match(draft_tokens, draft_probs, target_probs, *, seeds):
    B, _, L = draft_tokens.shape  # K = 1: one draft block per row
    check_batch_inputs(draft_tokens, draft_probs, target_probs)  # refuses impossible rows (NaN, p(x) = 0, ...)
    # row b's randomness from seeds[b] alone: L + 1 uniforms, one target draw per position
    u = np.stack([np.random.default_rng(int(s) % 2**64).random(L + 1) for s in seeds])
    cdf = np.cumsum(target_probs[:, 0], axis=-1)  # [B, L+1, V]
    draws = np.minimum((cdf < u[..., None] * cdf[..., -1:]).sum(-1), cdf.shape[-1] - 1)
    match = draws[:, :L] == draft_tokens[:, 0]
    tau = np.where(match.all(1), L, np.argmin(match, axis=1))  # the first mismatch, or L
    # the accepted draft tokens (= the draws that matched them), then the draw at position τ
    tokens = np.where(np.arange(L + 1) <= tau[:, None], draws, -1)
    return BatchVerdict(tau, np.where(tau > 0, 0, -1), tokens, tau + 1)


if __name__ == "__main__":
    report = certify_lossless(sampler_match, K=1, L=3)
    print(report.table())
    print("LOSSLESS (no test found a loss)" if report.ok else f"NOT LOSSLESS: {report.failed}")
