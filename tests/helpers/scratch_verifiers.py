"""Verifiers written from scratch from the batched contract (reference/contract.py), as a new user
would write them, for the blind spots of docs/guarantees.md ("What each certification can and
cannot see"): each defective one has a correct twin that differs from it in the defect only.

Numpy, vectorised over the batch; token-level speculative sampling (SD: Leviathan et al. 2023,
Alg. 1; Chen et al. 2023) on draft 0 unless stated, through ``helpers.planted_verifiers.sd``
(accept x_i when u_i < min(1, q(x_i)/p(x_i)); at the first rejection draw from (q − p)_+, after L
acceptances from the bonus row; inverse-CDF draws).  Row b's uniforms come from
``numpy.random.default_rng(seeds[b])`` unless the defect says otherwise.

| verifier | defect | its twin |
|---|---|---|
| ``one_stream_sd`` | every row drawn from ONE generator seeded by seeds[0] (row b's draws depend on its position and its neighbours; each row's law is SD's) | ``sd`` |
| ``neighbour_seed_sd`` | row b draws from seeds[(b + 1) mod B] (a permutation of the seeds: each row's law is SD's) | ``sd`` |
| ``gbv_record_off_by_one`` | greedy block verification (K = 1) whose Algorithm 2 record carries the joints of the accepted prefix only, one position short of the emitted tokens (its outcomes are GBV's) | ``gbv`` |
| ``float16_cdf_sd`` | correction and bonus drawn through a float16 CDF compared with a float64 uniform | ``sd`` |
| ``floored_residual_sd`` | the correction never emits a token below probability 10^-4 (the residual floored, renormalised) | ``sd`` |
| ``shared_noise_drafter`` | a drafter (for ``certify_lossless(..., drafter=)``) drawing its tokens by inverse CDF from ``default_rng(seeds[b])``: the very uniforms ``sd`` then uses for its coins (drafter and verifier share noise) | ``own_stream_drafter`` (``default_rng([seeds[b], 1])``, a stream of its own) |
| ``nan_accepting_sd`` | no input check, and the ratio min(1, q/p) by ``numpy.fmin`` (NaN-ignoring): a draft of draft probability NaN is accepted (min(1, q/NaN) = 1) | ``sd`` (refuses non-finite, negative, unnormalised rows and drafts of draft probability 0 with ValueError) |
| ``chunk_end_reads_next_draft_sd`` / ``chunk_end_reads_next_target_sd`` | computed in chunks of 64 rows, the last row of each full chunk reads row b + 1's draft_probs / target_probs row (the next request's) | ``chunked_sd`` |
| ``wrong_fast_path_sd`` | a separate path for B == 1 that consumes the row's uniforms in another order (each row's law is SD's; a row alone and in a batch differ) | ``fast_path_sd`` |
| ``num_emitted_tau_sd`` | ``num_emitted`` = τ instead of τ + 1 (τ and tokens right) | ``sd`` |
| ``float32_seed_sd`` / ``mod16_seed_sd`` | row seeds narrowed through float32 / folded mod 2^16 before seeding | ``sd`` |
| ``uint16_ids_sd`` | token ids kept in 16 bits: drafted ids read mod 2^16, emitted ids returned mod 2^16 (−1 kept) | ``sd`` |
"""

from __future__ import annotations

import numpy as np

from helpers import planted_verifiers as pv
from spectr_gbv.reference.contract import BatchModification, BatchVerdict

# |Σ − 1| above this is an unnormalised row (the reference's tolerance, reference/validation.py)
ROW_SUM_ATOL = 1e-5


def check_rows(draft_tokens, draft_probs, target_probs) -> None:
    """The contract's refusals (reference/contract.py, "Inputs a verifier must refuse"): ValueError
    naming the argument for NaN or infinite entries, negative entries, rows whose sum is off 1 by
    more than ``ROW_SUM_ATOL``, and a drafted token of draft probability 0."""
    for name, rows in (("draft_probs", draft_probs), ("target_probs", target_probs)):
        rows = np.asarray(rows, dtype=np.float64)
        if not np.isfinite(rows).all():
            raise ValueError(f"{name}: contains NaN or infinite values")
        if (rows < 0).any():
            raise ValueError(f"{name}: contains negative probabilities")
        if (np.abs(rows.sum(-1) - 1.0) > ROW_SUM_ATOL).any():
            raise ValueError(f"{name}: a row does not sum to 1")
    p_x = np.take_along_axis(np.asarray(draft_probs), np.asarray(draft_tokens)[..., None], -1)[..., 0]
    if (p_x <= 0).any():
        raise ValueError("draft_tokens: a drafted token has draft probability 0")


def sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Correct SD (module doc), inputs checked as the contract says."""
    check_rows(draft_tokens, draft_probs, target_probs)
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds)


def float16_cdf_draw(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws [B] from rows [B, V] whose normalised CDF is accumulated in float16 and
    compared with float64 uniforms u [B]: once the running sum passes ½ a step below 2^-12 adds
    nothing, so the CDF stalls short of 1, the tail's tokens are never drawn and u above the
    stalled total falls off the end, onto the last token."""
    if len(rows) > 1 and (rows == rows[:1]).all():  # one distinct row (a fixed case): its CDF once
        cdf = np.cumsum((rows[0] / rows[0].sum()).astype(np.float16), dtype=np.float16)[None]
    else:
        cdf = np.cumsum((rows / rows.sum(-1, keepdims=True)).astype(np.float16), axis=-1, dtype=np.float16)
    return np.minimum((cdf <= u[:, None]).sum(-1), rows.shape[-1] - 1)


def float16_cdf_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose correction and bonus draws use ``float16_cdf_draw``: exact at a toy vocabulary's
    few tokens of probability ≫ 2^-12, wrong at a real one."""
    check_rows(draft_tokens, draft_probs, target_probs)
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds, draw=float16_cdf_draw)


PROBABILITY_FLOOR = 1e-4


def floored_residual_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose correction never emits a token of normalised residual probability below
    ``PROBABILITY_FLOOR`` = 10^-4 (a sampler's minimum-probability cut applied to the residual,
    renormalised): exact where no residual entry is that small (every toy vocabulary here)."""
    check_rows(draft_tokens, draft_probs, target_probs)

    def residual(q, p, depth):
        r = pv.plain_residual(q, p, depth)
        r = r / r.sum(-1, keepdims=True)
        cut = np.where(r >= PROBABILITY_FLOOR, r, 0.0)
        return np.where(cut.sum(-1, keepdims=True) > 0, cut, r)
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds, residual=residual)


def one_stream_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose B rows draw their uniforms, row after row, from one generator seeded by
    seeds[0]: the same batch with the same seeds replays, fresh seeds change it, every row's law
    is SD's — but row b's output depends on its position and on the batch."""
    check_rows(draft_tokens, draft_probs, target_probs)
    B, _, L = np.shape(draft_tokens)
    u = np.random.default_rng(int(seeds[0]) % 2**64).random((B, L + 1))
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds, uniform=u)


def neighbour_seed_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose row b draws from its neighbour's seed seeds[(b + 1) mod B] (an off-by-one
    index into the seeds)."""
    check_rows(draft_tokens, draft_probs, target_probs)
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=np.roll(np.asarray(seeds), -1))


def nan_accepting_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD with no input check whose acceptance ratio is ``numpy.fmin(1, q/p)``: fmin ignores NaN,
    so a draft token whose draft (or target) probability is NaN is accepted with probability 1.
    On valid rows it is ``sd``."""
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds,
                 ratio=lambda q_x, p_x: np.fmin(1.0, q_x / p_x))


def _gbv(draft_tokens, draft_probs, target_probs, seeds, record_len):
    """Greedy block verification with Algorithm 2 (docs/rules.md §2.4, §3), K = 1, one row at a
    time: with r_i = q(X_≤i)/p(X_≤i) the joint ratio, h_i = 1 − (1 − r_i)_+ / (1 − Σ_x min(p_i(x),
    r_i·q_i(x))) for i < L and h_L = min(1, r_L); τ = the last i whose uniform u_i ≤ h_i (0 if
    none); the correction ∝ (r_τ·q_τ − p_τ)_+ (q_τ where that is 0), the bonus from q_L.  The
    record: kind "excess", ρ = 1 and the log joints of the first ``record_len(τ)`` emitted
    tokens."""
    check_rows(draft_tokens, draft_probs, target_probs)
    B, _, L = np.shape(draft_tokens)
    tau = np.zeros(B, dtype=np.int64)
    tokens = np.full((B, L + 1), -1, dtype=np.int64)
    log_q, log_p = np.full(B, -np.inf), np.full(B, -np.inf)
    for b in range(B):
        x, p, q = draft_tokens[b, 0], np.asarray(draft_probs[b, 0], float), np.asarray(target_probs[b, 0], float)
        u = np.random.default_rng(int(seeds[b]) % 2**64).random(L + 2)
        pj, qj = np.ones(L + 1), np.ones(L + 1)
        for i in range(L):
            pj[i + 1], qj[i + 1] = pj[i] * p[i, x[i]], qj[i] * q[i, x[i]]
        r = qj / pj
        h = np.ones(L + 1)
        for i in range(1, L):
            den = 1.0 - np.minimum(p[i], r[i] * q[i]).sum()
            if den > 0:
                h[i] = 1.0 - max(1.0 - r[i], 0.0) / den
        h[L] = min(1.0, r[L])
        t = next((i for i in range(L, 0, -1) if u[i] <= h[i]), 0)
        row = q[L] if t == L else np.maximum(r[t] * q[t] - p[t], 0.0)
        if row.sum() <= 0:
            row = q[t]
        token = int(min(np.searchsorted(np.cumsum(row), u[L + 1] * row.sum(), side="right"), len(row) - 1))
        tau[b], tokens[b, :t], tokens[b, t] = t, x[:t], token
        if t < L:
            emitted = list(x[:t]) + [token]
            n = record_len(t)
            log_q[b] = np.log([q[i, emitted[i]] for i in range(n)]).sum()
            with np.errstate(divide="ignore"):
                log_p[b] = np.log([p[i, emitted[i]] for i in range(n)]).sum()
    mod = BatchModification("excess", 1, np.ones(B), log_q, log_p, tau < L)
    return BatchVerdict(tau, np.where(tau > 0, 0, -1), tokens, tau + 1, mod)


def gbv(draft_tokens, draft_probs, target_probs, *, seeds):
    """Correct GBV with its record (``_gbv``): the joints of the τ + 1 emitted tokens."""
    return _gbv(draft_tokens, draft_probs, target_probs, seeds, lambda t: t + 1)


def gbv_record_off_by_one(draft_tokens, draft_probs, target_probs, *, seeds):
    """GBV whose record holds the joints of the τ accepted tokens only (the correction left out):
    its outcomes are ``gbv``'s, its next iteration's target is not."""
    return _gbv(draft_tokens, draft_probs, target_probs, seeds, lambda t: t)


def _inverse_cdf_drafter(stream):
    def drafter(next_probs, K, L, *, seeds):
        """Drafts K blocks of L tokens per row autoregressively by inverse CDF of the row's
        uniforms (``stream(seed)``: a Generator)."""
        B = len(seeds)
        u = np.stack([stream(int(s)).random((K, L)) for s in seeds])  # [B, K, L]
        tokens = np.zeros((B, K, L), dtype=np.int64)
        for i in range(L):
            cdf = np.cumsum(np.asarray(next_probs(tokens[:, :, :i]), dtype=np.float64), axis=-1)  # [B, K, V]
            pick = (cdf < u[:, :, i:i + 1] * cdf[..., -1:]).sum(-1)
            tokens[:, :, i] = np.minimum(pick, cdf.shape[-1] - 1)
        return tokens
    return drafter


# the verifier ``sd`` draws its coins from default_rng(seed).random(L + 1): this drafter's draws
# are those uniforms (draft 0's token i comes from the uniform of coin i)
shared_noise_drafter = _inverse_cdf_drafter(lambda s: np.random.default_rng(s % 2**64))
own_stream_drafter = _inverse_cdf_drafter(lambda s: np.random.default_rng([s % 2**64, 1]))


# -- production batches (issue 57): defects that cross rows, a single-request path, num_emitted,
# narrowed seeds and token ids wrapped at 65,536; each with its correct twin -----------------------

CHUNK_ROWS = 64  # the rows of one chunk of ``chunked_sd`` (a kernel's fixed tile of requests)


def _chunked(draft_tokens, draft_probs, target_probs, seeds, leak: str | None):
    """SD run chunk by chunk, ``CHUNK_ROWS`` rows at a time, as a kernel with a fixed tile of
    requests runs a batch.  ``leak``: None (correct), or "draft" / "target": the last row of each
    full chunk reads the next request's draft_probs / target_probs row (row b + 1's; its own where
    it is the batch's last row), as an off-by-one in a chunk's row index does."""
    check_rows(draft_tokens, draft_probs, target_probs)
    tokens, dp, tp = (np.asarray(a) for a in (draft_tokens, draft_probs, target_probs))
    seeds = np.asarray(seeds)
    B = len(seeds)
    parts = []
    for start in range(0, B, CHUNK_ROWS):
        own = np.arange(start, min(B, start + CHUNK_ROWS))
        read = own.copy()
        if leak is not None and len(own) == CHUNK_ROWS and own[-1] + 1 < B:
            read[-1] = own[-1] + 1
        d_rows = read if leak == "draft" else own
        t_rows = read if leak == "target" else own
        parts.append(pv.sd(tokens[own], dp[d_rows], tp[t_rows], seeds=seeds[own]))
    return BatchVerdict(*(np.concatenate([getattr(v, f) for v in parts])
                          for f in ("tau", "selected", "tokens", "num_emitted")))


def chunked_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Correct SD computed in chunks of ``CHUNK_ROWS`` rows (the twin of the two below)."""
    return _chunked(draft_tokens, draft_probs, target_probs, seeds, None)


def chunk_end_reads_next_draft_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """``chunked_sd`` whose last row of each 64-row chunk reads the next request's draft_probs
    row: in a batch of one row repeated, the next row is the same row, and nothing changes."""
    return _chunked(draft_tokens, draft_probs, target_probs, seeds, "draft")


def chunk_end_reads_next_target_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """``chunked_sd`` whose last row of each 64-row chunk reads the next request's
    target_probs rows."""
    return _chunked(draft_tokens, draft_probs, target_probs, seeds, "target")


def _single_request_path(draft_tokens, draft_probs, target_probs, seeds, rotate: bool):
    """SD with a separate path for a batch of one request (a serving loop's fast path).  Its
    uniforms are row b's ``default_rng(seeds[b]).random(L + 1)`` as in the batched path; with
    ``rotate`` the fast path takes the correction's uniform first and the coins' after it (its
    law is SD's, its draws for a seed are not the batched path's)."""
    check_rows(draft_tokens, draft_probs, target_probs)
    B, _, L = np.shape(draft_tokens)
    if B != 1:
        return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds)
    u = pv.uniforms(seeds, L + 1)
    if rotate:
        u = np.roll(u, 1, axis=1)
    return pv.sd(draft_tokens, draft_probs, target_probs, seeds=seeds, uniform=u)


def fast_path_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """Correct SD with a single-request path that draws as the batched one does (the twin)."""
    return _single_request_path(draft_tokens, draft_probs, target_probs, seeds, False)


def wrong_fast_path_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose single-request path (B == 1) consumes its uniforms in another order than the
    batched path: each row's law is SD's, a row alone and the same row in a batch differ."""
    return _single_request_path(draft_tokens, draft_probs, target_probs, seeds, True)


def num_emitted_tau_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose ``num_emitted`` is τ instead of τ + 1 (the correction or bonus token not
    counted); τ, selected and the tokens are ``sd``'s."""
    v = sd(draft_tokens, draft_probs, target_probs, seeds=seeds)
    return BatchVerdict(v.tau, v.selected, v.tokens, v.tau.copy())


def float32_seed_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose row seeds pass through float32 (24 bits of mantissa) before seeding its
    generators: seeds that round to the same float32 share a stream (reference/contract.py's own
    example of a forbidden narrowing)."""
    narrowed = [int(s) for s in np.asarray(seeds).astype(np.float32)]
    return sd(draft_tokens, draft_probs, target_probs, seeds=narrowed)


def mod16_seed_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD whose row seeds are folded mod 2^16 (a 16-bit seed field): seeds equal in their low 16
    bits share a stream."""
    return sd(draft_tokens, draft_probs, target_probs, seeds=np.asarray(seeds) % 2**16)


TOKEN_ID_WRAP = 2**16


def uint16_ids_sd(draft_tokens, draft_probs, target_probs, *, seeds):
    """SD that keeps token ids in 16 bits: it reads the drafted ids mod 2^16 (looking up the
    draft and target probabilities of the wrapped id) and returns every emitted id mod 2^16
    (the −1 padding kept).  Exact below V = 65,536."""
    check_rows(draft_tokens, draft_probs, target_probs)
    wrapped = np.asarray(draft_tokens) % TOKEN_ID_WRAP
    v = pv.sd(wrapped, draft_probs, target_probs, seeds=seeds)
    return BatchVerdict(v.tau, v.selected, np.where(v.tokens >= 0, v.tokens % TOKEN_ID_WRAP, -1), v.num_emitted)
