"""Planted lossy verifiers for ``certify_lossless``'s pairs (tests/oracle/test_lossless_pairs.py, beside tests/helpers/planted_rules.py),
written from the batched contract (reference/contract.py): numpy, vectorised over the batch,
row b's randomness from seeds[b] alone.  Each one is token-level speculative sampling (SD,
Leviathan et al. 2023; Chen et al. 2023) or recursive rejection sampling without replacement
(Jeon et al. 2024, "Recursive Speculative Decoding") with one serving defect, and each defect
is invisible on the three pairs the harness had before (toy V = 2, prefix V = 3, far V = 5 at
L ≤ 3): there its verdicts are SD's, or differ from a lossless rule's law by TV ≤ 0.0008.
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.contract import BatchVerdict


def uniforms(seeds, n: int) -> np.ndarray:
    """float64 [B, n]: row b's uniforms from seeds[b] alone."""
    return np.stack([np.random.default_rng(int(s) % 2**64).random(n) for s in seeds])


def draw(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws from the (unnormalised, ≥ 0) rows [B, V] with uniforms u [B]."""
    cdf = np.cumsum(rows, axis=-1)
    return np.minimum((cdf <= u[:, None] * cdf[:, -1:]).sum(-1), rows.shape[-1] - 1)


def plain_residual(q: np.ndarray, p: np.ndarray, depth: int) -> np.ndarray:
    """SD's correction row (q − p)+ [B, V] (q where it is all 0: a rejection has probability 0 there)."""
    r = np.maximum(q - p, 0.0)
    return np.where(r.sum(-1, keepdims=True) > 0, r, q)


def plain_bonus(q: np.ndarray) -> np.ndarray:
    return q


def plain_ratio(q_x: np.ndarray, p_x: np.ndarray) -> np.ndarray:
    """min(1, q(x)/p(x)) [B] (p(x) > 0 for a drafted token)."""
    return np.minimum(1.0, q_x / p_x)


def sd(draft_tokens, draft_probs, target_probs, *, seeds, ratio=plain_ratio, residual=plain_residual,
       bonus=plain_bonus, first_depth: int = 0, uniform=None, selected_draft=None, draw=draw):
    """Token-level SD along one draft block per row (draft 0, or ``selected_draft`` [B]) from
    ``first_depth`` on: accept x_i when u_i < ratio(q_i(x_i), p_i(x_i)); at the first rejection
    draw from ``residual``, after L acceptances from ``bonus`` (by ``draw(rows [n, V], u [n])``,
    the inverse CDF).  Uniforms: ``uniform`` [B, L+1], or L + 1 from the row's seed.  Returns a
    BatchVerdict."""
    B, K, L = draft_tokens.shape
    k = np.zeros(B, dtype=np.int64) if selected_draft is None else selected_draft
    rows = np.arange(B)
    x, p, q = draft_tokens[rows, k], draft_probs[rows, k], target_probs[rows, k]
    u = uniforms(seeds, L + 1) if uniform is None else uniform
    p_x = np.take_along_axis(p, x[..., None], -1)[..., 0]
    q_x = np.take_along_axis(q[:, :L], x[..., None], -1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = u[:, :L] < ratio(q_x, p_x)
    ok[:, :first_depth] = True
    tau = np.where(ok.all(1), L, np.argmin(ok, axis=1))
    last = np.empty(B, dtype=np.int64)
    for depth in np.unique(tau).tolist():
        sel = tau == depth
        row = bonus(q[sel, L]) if depth == L else residual(q[sel, depth], p[sel, depth], depth)
        last[sel] = draw(row, u[sel, L])
    tokens = np.where(np.arange(L)[None] < tau[:, None], x, -1)
    tokens = np.concatenate([tokens, np.full((B, 1), -1)], axis=1)
    tokens[rows, tau] = last
    return BatchVerdict(tau, np.where(tau > 0, k, -1), tokens, tau + 1)


def top_k(row: np.ndarray, k: int) -> np.ndarray:
    """``row`` [B, V] with every entry below its k-th largest set to 0 (ties at the k-th kept)."""
    if row.shape[-1] <= k:
        return row
    kth = np.sort(row, axis=-1)[:, -k][:, None]
    return np.where(row >= kth, row, 0.0)


def sd_top_k_20(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose correction and bonus draws keep only the top k = 20 entries of their row (a
    sampler's top-k applied to the residual and the bonus row): lossy whenever those rows have
    mass outside their top 20; identical to SD when V ≤ 20."""
    return sd(draft_tokens, draft_probs, target_probs, seeds=seeds,
              residual=lambda q, p, d: top_k(plain_residual(q, p, d), 20), bonus=lambda q: top_k(q, 20))


def sd_top_k_40(draft_tokens, draft_probs, target_probs, *, seeds):
    """As ``sd_top_k_20`` with k = 40."""
    return sd(draft_tokens, draft_probs, target_probs, seeds=seeds,
              residual=lambda q, p, d: top_k(plain_residual(q, p, d), 40), bonus=lambda q: top_k(q, 40))


def sd_accepts_zero_target(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose acceptance ratio is computed in log space with an infinity guard:
    exp(nan_to_num(log q(x) − log p(x), neginf=0)), so a draft token of target probability 0
    (log q = −inf) gets ratio 1 and is always accepted.  Identical to SD where q > 0."""
    def ratio(q_x, p_x):
        with np.errstate(divide="ignore"):
            return np.minimum(1.0, np.exp(np.nan_to_num(np.log(q_x) - np.log(p_x), neginf=0.0)))
    return sd(draft_tokens, draft_probs, target_probs, seeds=seeds, ratio=ratio)


def sd_one_hot_bug(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose fast path for one-hot draft rows (the draft "has no probabilities": n-gram,
    prompt lookup, greedy) draws the correction from q instead of (q − p)+ = q without the
    rejected token; general rows get SD's residual."""
    def residual(q, p, depth):
        return np.where((p.max(-1) >= 1.0)[:, None], q, plain_residual(q, p, depth))
    return sd(draft_tokens, draft_probs, target_probs, seeds=seeds, residual=residual)


def sd_deep_bug(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose correction at draft depth ≥ 3 (0-based: the 4th draft token on, which only
    blocks of L ≥ 4 have) is drawn from q instead of (q − p)+: a blocks-longer-than-3 path."""
    def residual(q, p, depth):
        return q if depth >= 3 else plain_residual(q, p, depth)
    return sd(draft_tokens, draft_probs, target_probs, seeds=seeds, residual=residual)


def rrs_without_replacement(draft_tokens, draft_probs, target_probs, *, seeds):
    """Recursive rejection sampling for K candidates drawn WITHOUT replacement (Jeon et al.
    2024, RRSw), at the first token of the K blocks, then SD down the accepted block.

    Candidate k (its first token x_k) is accepted with min(1, r(x_k)/p̃(x_k)), r the residual so
    far (q at first) and p̃ the draft row with the earlier candidates removed, renormalised; on
    rejection r ← (r − p̃)+ normalised (kept when that is 0) and x_k leaves p̃.  A repeated
    candidate (p̃(x_k) = 0) is rejected.  If none is accepted the first token is drawn from r
    (τ = 0); else SD continues along that block from depth 1.  Lossless when the K first tokens
    are drawn without replacement (tests/oracle/test_lossless_pairs.py checks the first-token
    law exactly); lossy under i.i.d. drafts, whose repeated candidates it treats as distinct.
    Uniforms per row: K coins, then L + 1 for SD.
    """
    B, K, L = draft_tokens.shape
    u = uniforms(seeds, K + L + 1)
    rows = np.arange(B)
    r = target_probs[:, 0, 0].copy()
    pt = draft_probs[:, 0, 0].copy()
    chosen = np.full(B, -1, dtype=np.int64)
    for k in range(K):
        x = draft_tokens[:, k, 0]
        open_ = chosen < 0
        px, rx = pt[rows, x], r[rows, x]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(px > 0, np.minimum(1.0, rx / np.where(px > 0, px, 1.0)), 0.0)
        accept = open_ & (u[:, k] < ratio)
        chosen[accept] = k
        rejected = open_ & ~accept
        new_r = np.maximum(r - pt, 0.0)
        keep = new_r.sum(-1) > 0
        new_r = np.where(keep[:, None], new_r / np.where(keep, new_r.sum(-1), 1.0)[:, None], r)
        r = np.where(rejected[:, None], new_r, r)
        new_p = pt.copy()
        new_p[rows, x] = 0.0
        mass = new_p.sum(-1)
        new_p = np.where((mass > 0)[:, None], new_p / np.where(mass > 0, mass, 1.0)[:, None], pt)
        pt = np.where(rejected[:, None], new_p, pt)
    out = sd(draft_tokens, draft_probs, target_probs, seeds=seeds, first_depth=1, uniform=u[:, K:],
             selected_draft=np.maximum(chosen, 0))
    tau, tokens, selected = out.tau.copy(), out.tokens.copy(), out.selected.copy()
    none = chosen < 0
    if none.any():
        tau[none], selected[none] = 0, -1
        tokens[none] = -1
        tokens[none, 0] = draw(r[none], u[none, K + L])
    return BatchVerdict(tau, selected, tokens, tau + 1)
