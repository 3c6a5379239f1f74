"""The law a request asked for, from a reported top-k list, and every token's record fields as arrays
(shared by ``certify log`` and ``certify endpoint``'s
``--reference reported`` / ``--as-client`` through ``certify/declared_laws.py``).

A logged response reports, at each sampled position t, the k most probable tokens of the raw
(temperature 1) law p_t with their log-probabilities — vLLM's default, as ``certify endpoint``'s
``self`` reference reads it.  The request's own sampling fields define the law the client asked
for: temperature T (β = 1/T: the law ∝ p^β), then min-p μ (keep the tokens of probability
≥ μ·max), top-k K and top-p ρ (the fewest most probable tokens reaching mass ρ), each on the law
left by the previous step (vLLM v1's order).  From the top-k list that law is

- **exact** when T = 1 and nothing truncates: the cells of ``oracle.sequence_records.records_from_top``
  (k top cells and an "other" cell holding the most mass the list's precision allows);
- **exact up to the reported precision** when a truncation keeps a set inside the list (top-k
  K ≤ k, a min-p threshold above the list's smallest, a nucleus the list reaches at every allowed
  normaliser): the kept cells renormalised, no "other" cell (a token outside the kept set has
  probability 0), each cell within a factor e^{±2βδ} (δ the list's precision);
- **bounded** otherwise: the tokens outside the list hold raw mass o ∈ [o_lo, o_hi] (the precision's
  interval), each at most the smallest listed probability m, so their tempered mass R lies in
  [o_lo·m^{β−1}, V_rest^{1−β}·o_hi^β] for β < 1 (T > 1: needs the vocabulary size V, ``vocab``)
  and in [0, o_hi·m^{β−1}] for β ≥ 1; a top-k K > k keeps at most (K − k)·m^β of it, and a nucleus
  the list does not reach keeps between ρ·Z − S and ρ·Z − S + m^β (Z = S + R the normaliser, S
  the listed tokens' tempered mass).  The top cells are a_i·(1 − O)/S with O the "other" cell's
  largest mass R_hi/(S·e^{−βδ} + R_hi), and every cell's ratio to the true one lies in
  [(S e^{−βδ} + R_hi)/(S e^{βδ} + R_hi), e^{2βδ}(S e^{−βδ} + R_hi)/(S e^{−βδ} + R_lo)]: the record's
  ``pe`` (Σ_top |cell − true| ≤ (1 − O)·the ratio's largest distance from 1, the TV bound every
  test adds to its tolerance) and ``pr`` (largest ratio − 1).  A position whose ``pe`` exceeds the
  list's own precision bound (the T = 1 case's) by more than ``max_bound`` is skipped.
- **skipped** (counted, with the reason, ``SKIP_REASONS``) where a truncation's boundary falls
  within the reported precision or outside what the list resolves, T > 1 without ``vocab``, or the
  bound ``pe`` exceeds ``max_bound``.  Whether a position is skipped depends on the reported list
  (a function of the past), never on the sampled token: the tokens kept keep their exact null laws.

The record fields (``records_from_top``'s: ``c, lo, li, tg, tm, tv, tk, tx, nu, se, sm, sv, sq, pe,
pr, o, ox, oc, k``) are computed for a whole chunk of positions at once (numpy over [N, k] arrays):
tests/certify/log/test_log_cells.py checks them against ``records_from_top`` to 1e-12 at T = 1.
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.oracle.sequence_records import (FLOAT32_LOGPROB_ERR, FLOAT64_LOGPROB_ERR, LAMBDAS, LOG_FLOOR,
                                                MAX_ROUNDED_DECIMALS, MIN_PS, NUCLEI, OTHER_NEAR_ZERO, THETAS,
                                                TOP_KS, TOPK_SUM_ATOL)

# the largest bound pe (TV between the computed cells and the true law) a position may carry;
# positions above it are skipped and counted ("bound above --max-bound")
DEFAULT_MAX_BOUND = 1e-3

# why a position is skipped (index = the skip code; 0: kept)
SKIP_REASONS = ("", "min-p boundary within the reported precision", "top-k boundary within the reported precision",
                "top-p boundary within the reported precision or beyond the reported list",
                "temperature > 1 and the list leaves mass: needs --vocab",
                "the law's bound from the list exceeds --max-bound (beyond the list's own precision)",
                "the reported top-k list sums above 1")


def reported_precisions(L: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """δ per row of reported log-probabilities ``L`` [N, k] (entries where ``valid``), as
    ``oracle.sequence_records.reported_precision`` reads one list: ½·10^−d + the float32 error
    when no entry carries more than d ≤ 6 decimals, else the float32 error when every entry is a
    float32 value, else the float64 error.  Decimals read by exact integer tests of v·10^d (within
    8 ulp), not by repr (tests/certify/log/test_log_cells.py: equal on rounded, float32 and float64
    lists)."""
    v = np.where(valid, L, 0.0)
    tol = 8 * np.finfo(np.float64).eps

    def whole(x):  # x is an integer within 8 ulp
        return np.abs(x - np.rint(x)) <= tol * np.maximum(1.0, np.abs(x))

    # most rows (float32 or float64 log-softmax values) carry more than 6 decimals: one pass decides
    # them; the rows that are rounded get their decimals counted
    ok6 = whole(v * 10.0 ** MAX_ROUNDED_DECIMALS) | ~valid
    rounded_rows = np.flatnonzero(ok6.all(axis=1))
    row_dec = np.full(v.shape[0], MAX_ROUNDED_DECIMALS + 1, dtype=np.int64)
    if rounded_rows.size:
        vr, val = v[rounded_rows], valid[rounded_rows]
        dec = np.full(vr.shape, MAX_ROUNDED_DECIMALS, dtype=np.int64)
        for d in range(MAX_ROUNDED_DECIMALS - 1, -1, -1):
            dec = np.where(whole(vr * 10.0 ** d), d, dec)
        dec = np.where(val, np.maximum(dec, 1), 0)  # repr writes an integral value as "3.0": one decimal
        row_dec[rounded_rows] = dec.max(axis=1)
    f32 = np.all((v.astype(np.float32).astype(np.float64) == v) | ~valid, axis=1)
    table = np.array([0.5 * 10.0 ** -d + FLOAT32_LOGPROB_ERR for d in range(MAX_ROUNDED_DECIMALS + 1)])
    rounded = table[np.minimum(row_dec, MAX_ROUNDED_DECIMALS)]
    return np.where(row_dec <= MAX_ROUNDED_DECIMALS, rounded, np.where(f32, FLOAT32_LOGPROB_ERR, FLOAT64_LOGPROB_ERR))


def request_law(L, count, delta, beta, top_k, top_p, min_p, vocab: int = 0, max_bound: float = DEFAULT_MAX_BOUND):
    """The cells of the law each position's request asked for (module doc).

    Args:
        L: float64 [N, k]: each row's reported log-probabilities, descending (ties by id), −inf
            past the row's ``count`` entries.
        count: int [N] entries per row (≥ 1); delta: float [N] their precision (nats).
        beta: float [N] 1/T (> 0); top_k: int [N] (0: none); top_p: float [N] (1: none); min_p:
            float [N] (0: none).
        vocab: V when known (0: unknown; T > 1 then needs a list that covers the law).
        max_bound: the largest ``pe`` kept.
    Returns:
        dict of arrays: ``P`` [N, k] top cells (0 past the kept ones), ``O`` [N] "other" cell,
        ``m`` [N] kept top cells, ``pe``, ``pr`` [N] (module doc), ``skip`` [N] (index into
        ``SKIP_REASONS``; 0 kept), ``dmax`` [N] the precision the "other"-cell flag uses (βδ).
    """
    plain = (beta == 1.0) & (top_k <= 0) & (top_p >= 1.0) & (min_p <= 0.0)
    if plain.all() or not plain.any():
        return _law_rows(L, count, delta, beta, top_k, top_p, min_p, vocab, max_bound)
    out = {}
    for rows in (np.flatnonzero(plain), np.flatnonzero(~plain)):  # the T = 1 rows skip the general case
        part = _law_rows(L[rows], count[rows], delta[rows], beta[rows], top_k[rows], top_p[rows], min_p[rows],
                         vocab, max_bound)
        for key, v in part.items():
            if key not in out:
                out[key] = np.zeros((L.shape[0],) + v.shape[1:], dtype=v.dtype)
            out[key][rows] = v
    return out


def _law_rows(L, count, delta, beta, top_k, top_p, min_p, vocab, max_bound):
    """``request_law`` on rows that are all plain (T = 1, no truncation) or any mix."""
    N, k = L.shape
    cols = np.arange(k)[None, :]
    listed = cols < count[:, None]
    raw = np.where(listed, np.exp(np.minimum(L, 0.0)), 0.0)
    total = raw.sum(axis=1)
    skip = np.zeros(N, dtype=np.int64)
    skip[total * np.exp(-delta) > 1.0 + TOPK_SUM_ATOL] = 6
    # T = 1, no truncation: records_from_top's cells exactly
    plain = (beta == 1.0) & (top_k <= 0) & (top_p >= 1.0) & (min_p <= 0.0)
    o_hi = np.maximum(0.0, 1.0 - total * np.exp(-delta))
    o_lo = np.maximum(0.0, 1.0 - total * np.exp(delta))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (1.0 - o_hi) / total
        pe_plain = np.minimum(1.0, total * np.maximum(np.abs(scale - np.exp(-delta)), np.abs(np.exp(delta) - scale)))
        pr_plain = np.maximum(0.0, np.exp(delta) / scale - 1.0)
    if plain.all():
        return {"P": np.where(np.isfinite(raw * scale[:, None]), raw * scale[:, None], 0.0), "O": o_hi,
                "m": count.copy(), "pe": np.where(np.isfinite(pe_plain), pe_plain, 1.0),
                "pr": np.where(np.isfinite(pr_plain), pr_plain, np.inf), "skip": skip, "dmax": delta.astype(float)}
    # the general case
    db = beta * delta
    last = L[np.arange(N), count - 1]
    # the raw bound of any unlisted token
    m_rest = np.minimum(np.exp(np.minimum(last, 0.0) + delta), np.maximum(o_hi, 1e-300))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = np.where(listed, np.exp(beta[:, None] * np.minimum(L, 0.0)), 0.0)
        S = a.sum(axis=1)
        colder = beta >= 1.0
        R_hi = np.where(colder, o_hi * m_rest ** (beta - 1.0),
                        np.where(vocab > 0, np.maximum(vocab - count, 0) ** (1.0 - beta) * o_hi ** beta, np.inf))
        R_hi = np.where(o_hi <= 0, 0.0, R_hi)
        R_lo = np.where(beta == 1.0, o_lo, np.where(colder, 0.0, o_lo * m_rest ** (beta - 1.0)))
    R_lo = np.minimum(R_lo, R_hi)
    inside = np.zeros(N, dtype=bool)  # the kept set lies inside the list (no "other" cell)
    m = count.copy()
    amb = lambda x: np.abs(x) <= 2 * (delta if x.ndim == 1 else delta[:, None])  # noqa: E731  (within the precision)
    # min-p: keep a_i ≥ μ·a_1  ⇔  L_i ≥ L_1 + log μ / β
    mp = min_p > 0
    if mp.any():
        with np.errstate(divide="ignore"):
            thr = L[:, 0] + np.where(mp, np.log(np.where(mp, min_p, 1.0)), -np.inf) / beta
        with np.errstate(invalid="ignore"):
            gap = L - thr[:, None]
        skip[mp & np.any(listed & amb(gap), axis=1) & (skip == 0)] = 1
        kept_mp = np.count_nonzero(listed & (gap > 0), axis=1)
        below = mp & (kept_mp < count)
        # no unlisted token reaches the threshold, whatever the precision moves
        none_rest = mp & ~below & (np.log(np.maximum(m_rest, 1e-300)) < thr - delta)
        inside |= below | none_rest
        m = np.where(below, kept_mp, m)
        R_lo = np.where(mp & ~inside, 0.0, R_lo)
    # top-k
    tk = top_k > 0
    if tk.any():
        cut = tk & (top_k < m)
        j = np.clip(top_k, 1, k) - 1
        nxt = np.clip(top_k, 0, k - 1)
        with np.errstate(invalid="ignore"):
            gapk = L[np.arange(N), j] - L[np.arange(N), nxt]
        skip[cut & amb(gapk) & (skip == 0)] = 2
        inside |= tk & (top_k <= count)
        m = np.where(cut, top_k, m)
        beyond = tk & ~inside
        with np.errstate(over="ignore"):
            R_hi = np.where(beyond, np.minimum(R_hi, np.maximum(top_k - count, 0) * m_rest ** beta), R_hi)
        R_lo = np.where(beyond & ~((vocab > 0) & (top_k >= vocab)), 0.0, R_lo)
    kept_cols = cols < m[:, None]
    a_kept = np.where(kept_cols, a, 0.0)
    S_kept = a_kept.sum(axis=1)
    # top-p on the law left so far
    tp = top_p < 1.0
    if tp.any():
        cum = np.cumsum(a_kept, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            Z_lo = np.where(inside, S_kept, S_kept + R_lo)
            Z_hi = np.where(inside, S_kept, S_kept + R_hi)
            size_lo = np.count_nonzero(kept_cols & (cum / Z_lo[:, None] < top_p[:, None]), axis=1) + 1
            size_hi = np.count_nonzero(kept_cols & (cum / Z_hi[:, None] < top_p[:, None]), axis=1) + 1
            # the nucleus is decided when no cumulative mass lies within the precision of ρ at either end
            rel = np.log(cum / top_p[:, None])
            near = kept_cols & ((np.abs(rel - np.log(Z_lo)[:, None]) <= 2 * db[:, None])
                                | (np.abs(rel - np.log(Z_hi)[:, None]) <= 2 * db[:, None]))
        decided = (size_lo == size_hi) & (size_hi <= m) & ~near.any(axis=1) & np.isfinite(Z_hi)
        # the nucleus is beyond the list at every normaliser: the list is kept with part of the rest
        reach = S_kept * np.exp(2 * db) / Z_lo
        beyond = tp & ~inside & (reach < top_p) & np.isfinite(Z_hi)
        skip[tp & ~decided & ~beyond & (skip == 0)] = 3
        cutp = tp & decided
        m = np.where(cutp, np.minimum(m, size_lo), m)
        with np.errstate(invalid="ignore"):
            RN_lo = np.maximum(0.0, top_p * Z_lo - S_kept * np.exp(db))
            RN_hi = np.minimum(R_hi, top_p * Z_hi - S_kept * np.exp(-db) + m_rest ** beta)
        R_lo = np.where(beyond, np.minimum(RN_lo, RN_hi), R_lo)
        R_hi = np.where(beyond, RN_hi, R_hi)
        inside |= cutp
        kept_cols = cols < m[:, None]
        a_kept = np.where(kept_cols, a, 0.0)
        S_kept = a_kept.sum(axis=1)
    skip[~plain & ~inside & ~np.isfinite(R_hi) & (skip == 0)] = 4
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # kept inside the list: renormalised, each cell within e^{±2βδ}
        e2 = np.expm1(2 * db)
        P_in = a_kept / S_kept[:, None]
        # bounded: the other cell at its largest mass
        Sl = S_kept * np.exp(-db)
        R_hi_f = np.where(np.isfinite(R_hi), R_hi, 0.0)
        O_b = R_hi_f / (Sl + R_hi_f)
        P_b = a_kept * ((1.0 - O_b) / S_kept)[:, None]
        maxr = np.exp(2 * db) * (Sl + R_hi_f) / (Sl + R_lo)
        minr = (Sl + R_hi_f) / (S_kept * np.exp(db) + R_hi_f)
        pe_b = np.minimum(1.0, (1.0 - O_b) * np.maximum(maxr - 1.0, 1.0 - minr))
    P = np.where(plain[:, None], raw * scale[:, None], np.where(inside[:, None], P_in, P_b))
    O = np.where(plain, o_hi, np.where(inside, 0.0, O_b))
    pe = np.where(plain, pe_plain, np.where(inside, np.minimum(1.0, e2), pe_b))
    pr = np.where(plain, pr_plain, np.where(inside, e2, np.maximum(0.0, maxr - 1.0)))
    m = np.where(plain, count, m)
    # the transform's own looseness beyond the list's precision (a plain law never skips here)
    skip[(skip == 0) & ~(pe <= max_bound + np.where(np.isfinite(pe_plain), pe_plain, 0.0))] = 5
    return {"P": np.where(np.isfinite(P), P, 0.0), "O": np.where(np.isfinite(O), O, 0.0), "m": m,
            "pe": np.where(np.isfinite(pe), pe, 1.0), "pr": np.where(np.isfinite(pr), pr, np.inf), "skip": skip,
            "dmax": np.where(plain, delta, db)}


def record_arrays(law: dict, ids: np.ndarray, x: np.ndarray, lpx: np.ndarray, first: np.ndarray) -> dict:
    """Every record field of ``oracle.sequence_records.records_from_top`` for N positions at once.

    Args:
        law: ``request_law``'s output (positions with ``skip`` ≠ 0 carry no record: their fields
            are computed but ``rec`` is False).
        ids: int [N, k] the rows' token ids in ``L``'s order (−1 past each row's entries).
        x: int [N] the sampled tokens; lpx: float [N] their own reported log-probability (NaN
            when not reported; −inf: the server gives the token probability 0: ``imp``).
        first: bool [N] the position starts a sample (no previous position: no shift ratios);
            a position after a skipped one has none either.
    Returns:
        dict of arrays: ``rec`` (a record), ``imp``, ``has_c`` (a record with a cell of positive
        mass: PIT, scores and levels), ``c, lo, li`` [N]; ``tg, tm, tv`` [N], ``tk`` [N, G],
        ``tx`` [N, 2]; ``nu`` [N, levels, 2]; ``has_s`` and ``se, sm, sv, sq`` [N, |LAMBDAS|];
        ``pe, pr, o`` [N]; ``ox`` [N] (−1: not flagged); ``k`` [N]; ``oc`` [N].
    """
    P, O, m, skip = law["P"], law["O"], law["m"], law["skip"]
    N, k = P.shape
    rows = np.arange(N)
    cols = np.arange(k)[None, :]
    kept = cols < m[:, None]
    rec = skip == 0
    imp = rec & (lpx == -np.inf)
    hitm = kept & (ids == x[:, None])
    hit = hitm.any(axis=1)
    j = np.where(hit, np.argmax(hitm, axis=1), m)  # the token's cell (m: "other")
    top_mass = 1.0 - O
    cells = np.concatenate([P, O[:, None]], axis=1)  # [N, k+1]; column k is "other"
    cj = np.where(hit, P[rows, np.minimum(j, k - 1)], O)
    has_c = rec & ~imp & (cj > 0)
    with np.errstate(divide="ignore"):
        g_top = np.maximum(np.log(np.where(kept, P, 1.0)), LOG_FLOOR)
    g_last = g_top[rows, np.maximum(m - 1, 0)]
    g_top = np.where(kept, g_top, g_last[:, None])
    g = np.concatenate([g_top, g_last[:, None]], axis=1)
    live = np.concatenate([kept & (P > 0), (O > 0)[:, None]], axis=1)
    cl = np.where(live, cells, 0.0)
    tm = _row_dot(cl, g)
    dev = g - tm[:, None]
    tv = np.maximum(_row_dot(cl * dev, dev), 0.0)
    tk = np.log(_cgf_sums(cl, g))
    tx = np.stack([g_last, g_top[:, 0]], axis=1)
    tg = np.where(hit, g_top[rows, np.minimum(j, k - 1)], g_last)
    cumP = np.cumsum(np.where(kept, P, 0.0), axis=1)
    lo = np.where(hit, np.where(j > 0, cumP[rows, np.maximum(j - 1, 0)], 0.0), top_mass)
    li = np.where(hit, np.where(kept & (ids < x[:, None]), P, 0.0).sum(axis=1), top_mass)
    nu = _levels(P, kept, m, cumP, top_mass, O, np.where(hit, j, m))
    dmax = law["dmax"]
    ox = np.where(O <= OTHER_NEAR_ZERO + 2 * dmax, (~hit).astype(np.int64), -1)
    out = {"rec": rec, "imp": imp, "has_c": has_c, "c": cj, "lo": lo, "li": li, "tg": tg, "tm": tm, "tv": tv,
           "tk": tk, "tx": tx, "nu": nu, "pe": law["pe"], "pr": law["pr"], "o": O, "ox": ox, "k": m,
           "oc": (~hit).astype(np.int64)}
    out.update(_shift(P, O, kept, ids, np.where(hit, j, k), rec, first, has_c))
    return out


def _row_sum(a: np.ndarray) -> np.ndarray:
    """Σ_j a_ij per row of a 2-D array: einsum, ~4× ``a.sum(axis=1)`` on rows of ~20 entries (numpy's
    reductions along a short last axis pay per row); another summation order (~1e-16 relative).
    Used for the record fields' continuous sums only, never where a sum decides a count (a skip,
    a cut, a PIT's bin)."""
    return np.einsum("ij->i", a)


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_j a_ij·b_ij per row (``_row_sum``'s way: ~2.5× ``(a * b).sum(axis=1)``)."""
    return np.einsum("ij,ij->i", a, b)


def _cgf_sums(cl: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Σ_cells cl·e^{θ g} for θ of ``THETAS`` ([N, G]): two exponentials (θ = 0.02, 0.05) and their
    powers and reciprocals instead of one per θ (equal to 1e-14 relative)."""
    th = tuple(THETAS)
    e = {0.02: np.exp(0.02 * g), 0.05: np.exp(0.05 * g)}
    e[0.1] = e[0.05] * e[0.05]
    e[0.2] = e[0.1] * e[0.1]
    e[0.4] = e[0.2] * e[0.2]
    out = np.empty((g.shape[0], len(th)))
    for i, t in enumerate(th):
        if abs(t) in e:
            f = e[abs(t)] if t > 0 else 1.0 / e[abs(t)]
        else:
            f = np.exp(t * g)
        out[:, i] = _row_dot(cl, f)
    return out


def _levels(P, kept, m, cumP, top_mass, O, rank) -> np.ndarray:
    """``sequence_records._levels`` for every row: [N, levels, 2] of [1 − M, outside]."""
    N, k = P.shape
    rows = np.arange(N)
    out = []

    def entry(size, ok):
        mass = cumP[rows, np.clip(size - 1, 0, k - 1)]
        return np.where(ok, np.maximum(0.0, 1.0 - mass), 0.0), np.where(ok, (rank >= size).astype(float), 0.0)

    total = cumP[rows, np.maximum(m - 1, 0)]
    for rho in NUCLEI:
        size = np.count_nonzero(kept & (cumP < rho - 1e-12), axis=1) + 1
        ok = ~((top_mass + 1e-12 < rho) | (total < rho))
        out.append(entry(size, ok))
    for mu in MIN_PS:
        size = np.count_nonzero(kept & (P >= mu * P[:, :1]), axis=1)
        out.append(entry(size, size < m))
    for kk in TOP_KS:
        out.append(entry(np.full(N, kk), kk < m))
    out.append((O.astype(float), (rank >= m).astype(float)))
    return np.stack([np.stack(e, axis=1) for e in out], axis=1)


def _shift(P, O, kept, ids, j, rec, first, has_c) -> dict:
    """``sequence_records._add_top_shift`` for every row whose previous row (same sample) is a
    record (``j``: each row's cell column, k for "other"): the mixture ratios of the cells against
    the previous position's cells known on its own list (an unlisted token takes the stand-in
    min(smallest top, other))."""
    N, k = P.shape
    prev_ok = np.zeros(N, dtype=bool)
    prev_ok[1:] = ~first[1:] & rec[:-1]
    has_s = has_c & prev_ok
    L = len(LAMBDAS)
    zeros = np.zeros((N, L))
    out = {"has_s": has_s, "se": zeros, "sm": zeros, "sv": zeros, "sq": zeros}
    idx = np.flatnonzero(has_s)
    if not idx.size:
        return out
    pi = idx - 1
    Pp, Op, keptp = P[pi], O[pi], kept[pi]
    stand = np.where(Op > 0, np.minimum(np.where(keptp, Pp, np.inf).min(axis=1), Op), 0.0)
    # each current token's cell in the previous list: one global sorted search (row offsets keep
    # the rows apart; ids are < 2^32, text hashes included)
    cur = np.where(kept[idx], ids[idx], -1) + 3
    prv = np.where(keptp, ids[pi], -2) + 3
    order = np.argsort(prv, axis=1, kind="stable")
    off = (np.arange(idx.size, dtype=np.int64) << 34)[:, None]
    flat = (np.take_along_axis(prv, order, axis=1) + off).ravel()
    q = (cur + off).ravel()
    at = np.minimum(np.searchsorted(flat, q), flat.size - 1)
    found = (flat[at] == q).reshape(cur.shape)
    col = order.ravel()[at].reshape(cur.shape)
    prev_top = np.where(found, np.take_along_axis(Pp, col, axis=1), stand[:, None])
    prev_top = np.where(kept[idx], prev_top, 0.0)
    prev_other = np.maximum(0.0, 1.0 - _row_sum(prev_top))
    prev = np.concatenate([prev_top, prev_other[:, None]], axis=1)
    tot = _row_sum(prev)
    prev = np.where(tot[:, None] > 0, prev / np.where(tot > 0, tot, 1.0)[:, None], prev)
    cells = np.concatenate([np.where(kept[idx], P[idx], 0.0), O[idx][:, None]], axis=1)
    live = cells > 0
    r = np.where(live, prev / np.where(live, cells, 1.0), 0.0)
    jj = j[idx]
    n = idx.size
    se, sm, sv, sq = (np.zeros((N, L)) for _ in range(4))
    cl = np.where(live, cells, 0.0)
    rows = np.arange(n)
    for a, lam in enumerate(LAMBDAS):
        gl = np.log((1.0 - lam) + lam * r)
        mean = _row_dot(cl, gl)  # cl is 0 off the live cells
        dev = gl - mean[:, None]
        var = np.maximum(_row_dot(cl * dev, dev), 0.0)
        se[idx, a] = gl[rows, jj]
        sm[idx, a] = mean
        sv[idx, a] = var
        sq[idx, a] = _row_dot(prev, gl)
    out.update(se=se, sm=sm, sv=sv, sq=sq)
    return out

