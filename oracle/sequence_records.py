"""Per-token records: what the sequence tests need from the reference's law of each sampled token.

A black-box certificate samples N continuations from an engine and, for every sampled token x_t,
asks a reference for the target's law p_t given the prompt and the sampled prefix.  A reference
gives either the **whole law** (a local copy of the model: float64 [V]) or only its **k most
probable tokens** with their log-probabilities (a server's prompt log-probs, ``logprobs: k``).
This module reduces each token to one small record, from either kind, so that every test
(``oracle.sequence_test``'s omnibus PIT test, ``oracle.sequence_scores``' directional tests)
runs on records alone and a run can be stored and resumed (one JSON object per token).

The coarsened law
-----------------
With the top k of a law, its **cells** are the k tokens (in the reference's probability order:
probability descending, ties by id) and one cell "other" holding the rest, of mass
o = 1 − Σ top.  A token is mapped to its cell; every test below is a test of the law of the
cells, which the reference gives exactly.  So every test keeps its exact null law for any k, and
a deviation that only moves mass *inside* "other" is not seen (stated in every verdict).  A whole
law is the case k = V (no "other").

Record fields (JSON keys)
-------------------------
- ``x``: the token id; ``imp``: the reference gives its cell probability 0 (an impossible token;
  the record then carries no PIT or score).
- ``lp``: log p_t(x) when the reference knows it (whole law, a top-k token, or a server that
  reports the log-probability of the prompt token itself), else None.
- ``c``: the probability of x's cell; ``lo``: the mass of the cells before it in probability
  order; ``li``: the mass of the cells before it in id order (top cells by id, "other" last).
  The randomized PIT in each order is ``lo + U·c`` / ``li + U·c`` (``oracle.sequence_test``).
- ``k``: cells other than "other" (V for a whole law); ``o``: the mass of "other"; ``oc`` (top-k
  laws): 1 when x lies in "other".
- ``tg, tm, tv``: the temperature score: g(cell) = log p(cell) (clipped below at
  ``LOG_FLOOR``; "other" takes the smallest top cell's value), its value at x, its mean and its
  variance under the cells' law; ``tr``: the range of g over the cells (for the float tolerance);
  ``tk``: for each θ of ``THETAS``, K(θ) = log Σ_cells p·e^{θ·g}, the cumulant generating function
  of g (the temperature e-value's normaliser: p·e^{θg−K(θ)} is the law at β = 1 + θ);
  ``tx``: [min g, max g] over every cell, LOG_FLOOR where the law has a cell of mass 0 (the
  e-value's tolerance).
- ``se, sm, sv, sq``: the position-shift likelihood ratios (positions t ≥ 1): for each λ of
  ``LAMBDAS``, g_λ(y) = log(1 − λ + λ·r(y)), r = p_{t−1}(y) / p_t(y) — the log-likelihood ratio of
  the mixture (1 − λ)·p_t + λ·p_{t−1} against p_t — its value at x (``se``), its mean and variance
  under p_t (``sm``, ``sv``) and its mean under p_{t−1} (``sq``: what a sampler reading the
  previous position's law would average); lists of one value per λ.
- ``de, dm, dv, dq``: the same with r = q_t(y) / p_t(y), q_t the draft model's law (when the
  draft's law is known): the draft-leak likelihood ratios.
- ``nu``: one ``[m, out]`` per truncation level of ``LEVEL_NAMES`` — the top-p nuclei of
  ``NUCLEI`` (the fewest most probable cells reaching mass ρ), the min-p sets of ``MIN_PS`` (the
  cells of probability ≥ μ·max), the top-k sets of ``TOP_KS`` (whole laws, and top-k laws of
  more than k cells), then the top set (a top-k law's own k cells; unresolved for a whole law):
  m = 1 − M, M the level's mass, and out = 1 when x lies outside it (decided by rank, not by
  comparing sums); ``[0, 0]`` when the coarsened law does not resolve the level (a nucleus its top
  cells do not reach, a min-p threshold above its smallest top cell, a top-k set not smaller than
  its list) — a neutral entry for the truncation test.

With top-k laws, p_{t−1}(y) is known for y in p_{t−1}'s top k; elsewhere the smallest of its top
probabilities and its "other" mass stands in (an upper bound).  Any function of the cell chosen
before x_t is drawn keeps the score's exact null mean and variance; the stand-in only costs power.

Reported precision (top-k laws)
-------------------------------
A server reports log-probabilities to some precision: float32 (a few units in the last place of
logits up to ~40: ``FLOAT32_LOGPROB_ERR`` nats), float64, or rounded to d decimals (then
½·10^−d nats more).  ``reported_precision`` reads it off the list itself: the most decimals any
entry's shortest repr carries (≤ ``MAX_ROUNDED_DECIMALS``: rounded), else float32 when every entry
is a float32 value, else float64.  With δ that bound, each true top probability lies in
p·[e^−δ, e^δ], so the true top mass is at least Σ·e^−δ (Σ the reported sum) and

- the "other" cell's mass is the upper bound ``o = max(0, 1 − Σ·e^−δ)`` (never 0 unless even the
  smallest true top mass the report allows reaches 1: the list provably covers the law), and the
  top cells are the reported probabilities scaled to ``1 − o``; a sum above 1 by rounding is not
  an error (only Σ·e^−δ > 1 + ``TOPK_SUM_ATOL`` is: no law rounds to it);
- ``pe``: a bound on the TV between these cells and the true law (Σ_top |cell − true|), which every
  test adds to its tolerance η for that token; ``pr``: a bound on true/cell − 1 over the cells (the
  e-value tests' relative error: the other cell's true mass is at most o);
- ``ox``: when ``o ≤ OTHER_NEAR_ZERO + 2δ`` (the list claims nearly all the mass), 1 if the sampled
  token lies outside the list, else 0.  Such a token is not impossible — the report's own
  precision allows it with probability ≤ o — but many of them say the reported lists are
  inconsistent with the samples (``oracle.sequence_reports.other_cell_test``).  With o = 0 exactly
  the token's record carries no PIT or score (no cell holds it) and ``ox`` = 1.
"""

from __future__ import annotations

import math

import numpy as np

# log-probabilities below this are clipped in the scores (keeps their range, hence the float
# tolerance's bias bound, finite: oracle.sequence_scores)
LOG_FLOOR = math.log(1e-8)
# the mixture weights λ of the shift and draft-leak likelihood ratios (oracle.sequence_scores
# mixes their e-values over this grid: a stale or leaked weight of about λ is caught near the
# sample count of the likelihood-ratio test that knows it)
LAMBDAS = (0.5, 0.1, 0.02, 0.004)
# a top-k list whose smallest true mass (reported sum · e^−δ, δ its precision) exceeds 1 by more than
# this is not a law (a float32 softmax over a whole vocabulary normalises to about 1e-4)
TOPK_SUM_ATOL = 1e-3
# the error bounds (nats) of one reported log-probability: float32 (logits up to ~40 in magnitude
# have ulp 2^-19 ≈ 2e-6; the log-softmax's subtraction and logsumexp add a few), float64
FLOAT32_LOGPROB_ERR = 1e-5
FLOAT64_LOGPROB_ERR = 1e-12
# a list whose entries carry at most this many decimals is read as rounded to them
MAX_ROUNDED_DECIMALS = 6
# a top-k list whose "other" mass (upper bound) is at most this (plus twice its precision δ) claims
# nearly all the law: a token sampled outside it is flagged (``ox``)
OTHER_NEAR_ZERO = 1e-3
# the temperature e-value's grid: θ = β − 1, the tempered law ∝ p^{1+θ} (T' = T / (1 + θ): θ 0.11 is
# T' = 0.9, −0.09 is T' = 1.1)
THETAS = (-0.4, -0.2, -0.1, -0.05, -0.02, 0.02, 0.05, 0.1, 0.2, 0.4)
# the truncation test's levels (oracle.sequence_scores.truncation_test): the top-p nuclei, the
# min-p sets, the top-k sets, then a top-k law's own list ("top set")
NUCLEI = (0.9, 0.95, 0.99)
MIN_PS = (0.02, 0.05, 0.1)
TOP_KS = (20, 50, 100)
LEVEL_NAMES = (tuple(f"top-p {rho:g}" for rho in NUCLEI) + tuple(f"min-p {mu:g}" for mu in MIN_PS)
               + tuple(f"top-k {k}" for k in TOP_KS) + ("top set",))


def nucleus_levels(sorted_probs: np.ndarray, rank: int, resolved_mass: float, other: float | None = None) -> list:
    """``[[1 − M, out], …]`` for ``LEVEL_NAMES`` (module doc) from the cells' probabilities sorted
    descending (a whole law's V, or a top-k law's k top cells), the rank of the token's cell (k for
    "other"), the mass the sorted cells resolve (1 for a whole law, Σ top for top-k) and, for a
    top-k law, its "other" mass (None for a whole law)."""
    cum = np.cumsum(sorted_probs)
    k = sorted_probs.size

    def entry(size):  # the level holds the ``size`` most probable cells
        return [max(0.0, 1.0 - float(cum[size - 1])), int(rank >= size)]

    out = []
    for rho in NUCLEI:
        if resolved_mass + 1e-12 < rho or cum[-1] < rho:
            out.append([0.0, 0])
        else:
            out.append(entry(int(np.searchsorted(cum, rho - 1e-12)) + 1))
    for mu in MIN_PS:
        thr = mu * float(sorted_probs[0])
        size = int(np.count_nonzero(sorted_probs >= thr))
        # resolved when a cell below the threshold is known (whole law: always, unless none is below)
        out.append(entry(size) if size < k else [0.0, 0])
    for j in TOP_KS:
        out.append(entry(j) if j < k else [0.0, 0])
    out.append([0.0, 0] if other is None else [float(other), int(rank >= k)])
    return out


def _cgf(p: np.ndarray, g: np.ndarray) -> list:
    """K(θ) = log Σ p·e^{θ g} over the cells of positive mass, for θ in ``THETAS`` (g ≤ 0, clipped at
    ``LOG_FLOOR``: the exponents stay within ±0.4·18.5)."""
    live = p > 0
    pl, gl = p[live], g[live]
    return [float(np.log(_dot(pl, np.exp(th * gl)))) for th in THETAS]


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b, by elementwise product: ``np.dot`` goes through BLAS, which costs milliseconds per
    call on some machines' OpenBLAS settings (measured 16 ms for V = 49,152 here, 26 µs this way)."""
    return float((a * b).sum())


def _moments(p: np.ndarray, g: np.ndarray) -> tuple[float, float, float]:
    """Mean, variance and range of g under the law p (over cells of positive mass)."""
    live = p > 0
    m = _dot(p[live], g[live])
    v = _dot(p[live], (g[live] - m) ** 2)
    return m, max(v, 0.0), float(g[live].max() - g[live].min()) if live.any() else 0.0


def _mixture_ratios(p: np.ndarray, other: np.ndarray, x: int) -> dict:
    """Per λ of ``LAMBDAS``: log(1 − λ + λ·other/p) at x, its mean and variance under p, its mean
    under ``other`` (laws over the same cells)."""
    live = p > 0
    r = np.where(live, other / np.where(live, p, 1.0), 0.0)
    out = {"e": [], "m": [], "v": [], "q": []}
    for lam in LAMBDAS:
        g = np.log((1.0 - lam) + lam * r)
        m, v, _ = _moments(p, g)
        out["e"].append(float(g[x]))
        out["m"].append(m)
        out["v"].append(v)
        out["q"].append(_dot(other, g))
    return out


def _check_full(laws, n: int, name: str) -> np.ndarray:
    p = np.asarray(laws, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != n:
        raise ValueError(f"{name} must be [n, V] with n = {n} tokens, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError(f"{name} has negative or non-finite entries")
    sums = p.sum(axis=1)
    if np.any(np.abs(sums - 1.0) > 1e-6):
        bad = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(f"{name} row {bad} sums to {sums[bad]:.9g}, not 1 (within 1e-6)")
    return p / sums[:, None]


def records_from_laws(tokens, laws, draft_laws=None) -> list[dict]:
    """Records of one sampled sequence from the reference's whole laws (module doc; k = V).

    Args:
        tokens: n sampled token ids.
        laws: float64 [n, V], row t the reference law of token t given the prompt and tokens[:t]
            (rows summing to 1 within 1e-6).
        draft_laws: optional float64 [n, V]: the draft model's law at the same prefixes (adds
            the draft-leak score).
    Returns:
        n records (dicts, JSON-ready).
    Raises:
        ValueError: shapes disagree, rows not laws, a token outside [0, V).
    Source: the randomized PIT (Brockwell 2007); the scores are the log-likelihood ratios of
        the alternatives (oracle.sequence_scores' module doc).
    """
    toks = [int(t) for t in tokens]
    p = _check_full(laws, len(toks), "laws")
    q = _check_full(draft_laws, len(toks), "draft_laws") if draft_laws is not None else None
    if q is not None and q.shape != p.shape:
        raise ValueError(f"draft_laws has shape {q.shape}, laws {p.shape}")
    V = p.shape[1] if p.ndim == 2 else 0
    out = []
    for t, x in enumerate(toks):
        if not 0 <= x < V:
            raise ValueError(f"token {x} at position {t} is outside the vocabulary [0, {V})")
        row = p[t]
        px = float(row[x])
        rec = {"x": x, "k": V, "o": 0.0, "lp": math.log(px) if px > 0 else None}
        if px <= 0:
            rec["imp"] = True
            out.append(rec)
            continue
        lo_id = float(row[:x].sum())
        higher = row > px
        lo_prob = float(row[higher].sum() + row[:x][row[:x] == px].sum())
        g = np.maximum(np.log(np.where(row > 0, row, 1.0)), LOG_FLOOR)
        m, v, rng = _moments(row, g)
        rec.update(c=px, lo=lo_prob, li=lo_id, tg=float(g[x]), tm=m, tv=v, tr=rng, tk=_cgf(row, g))
        live_g = g[row > 0]
        rec["tx"] = [LOG_FLOOR if live_g.size < row.size else float(live_g.min()), float(live_g.max())]
        desc = -np.sort(-row)
        rank = int(np.count_nonzero(higher)) + int(np.count_nonzero(row[:x] == px))
        rec["nu"] = nucleus_levels(desc, rank, 1.0)
        if t >= 1:
            _add_mixture(rec, "s", row, p[t - 1], x)
        if q is not None:
            _add_mixture(rec, "d", row, q[t], x)
        out.append(rec)
    return out


def _add_mixture(rec: dict, key: str, p: np.ndarray, other: np.ndarray, x: int) -> None:
    """Fields ``{key}e, {key}m, {key}v, {key}q`` of the mixture likelihood ratios against ``other``."""
    for name, values in _mixture_ratios(p, other, x).items():
        rec[f"{key}{name}"] = values


def reported_precision(logprobs) -> float:
    """The error bound δ (nats) of each log-probability of one reported list (module doc:
    reported precision).

    Args:
        logprobs: the list's log-probabilities as the server sent them (floats parsed from JSON:
            their shortest repr is what was sent).
    Returns:
        ½·10^−d + ``FLOAT32_LOGPROB_ERR`` when no entry carries more than d ≤
        ``MAX_ROUNDED_DECIMALS`` decimals; else ``FLOAT32_LOGPROB_ERR`` when every entry is a
        float32 value; else ``FLOAT64_LOGPROB_ERR``.
    """
    from decimal import Decimal

    vals = [float(v) for v in logprobs]
    decimals = max((max(0, -int(Decimal(repr(v)).as_tuple().exponent)) for v in vals), default=0)
    if decimals <= MAX_ROUNDED_DECIMALS:
        return 0.5 * 10.0 ** -decimals + FLOAT32_LOGPROB_ERR
    if all(float(np.float32(v)) == v for v in vals):
        return FLOAT32_LOGPROB_ERR
    return FLOAT64_LOGPROB_ERR


def _top_cells(probs: np.ndarray, delta: float) -> tuple[np.ndarray, float, float, float]:
    """(top cells, other mass o, TV bound pe, relative bound pr) of reported top probabilities
    ``probs`` with precision δ (module doc)."""
    total = float(probs.sum())
    lower = total * math.exp(-delta)
    other = max(0.0, 1.0 - lower)
    scale = (1.0 - other) / total
    cells = probs * scale
    lo, hi = math.exp(-delta), math.exp(delta)
    pe = float(probs.sum() * max(abs(scale - lo), abs(hi - scale)))
    pr = hi / scale - 1.0  # true/cell − 1 on the top cells; the other cell's true mass is ≤ o
    return cells, other, min(1.0, pe), max(0.0, pr)


def records_from_top(tokens, top_ids, top_logprobs, token_logprobs=None) -> list[dict]:
    """Records of one sampled sequence from top-k log-probabilities (module doc: the coarsened law,
    reported precision).

    Args:
        tokens: n sampled token ids.
        top_ids: n lists of token ids (distinct within a list; at most k each, any order).
        top_logprobs: n lists of their log-probabilities (natural log, finite; as sent: their
            decimals give the precision, ``reported_precision``).
        token_logprobs: optional n values: log p_t(tokens[t]) as the reference reports it
            (None where not given); kept in ``lp`` (the cells do not use it).
    Returns:
        n records (dicts).
    Raises:
        ValueError: lengths disagree, duplicated ids in one list, a non-finite log-probability,
            or top probabilities whose smallest true sum (Σ·e^−δ) exceeds 1 + ``TOPK_SUM_ATOL``.
    """
    toks = [int(t) for t in tokens]
    if len(top_ids) != len(toks) or len(top_logprobs) != len(toks):
        raise ValueError(f"top_ids and top_logprobs need one entry per token ({len(toks)}), got "
                         f"{len(top_ids)} and {len(top_logprobs)}")
    if token_logprobs is not None and len(token_logprobs) != len(toks):
        raise ValueError(f"token_logprobs needs one entry per token ({len(toks)}), got {len(token_logprobs)}")
    out, prev = [], None
    for t, x in enumerate(toks):
        ids = np.asarray([int(i) for i in top_ids[t]], dtype=np.int64)
        lps = np.asarray([float(v) for v in top_logprobs[t]], dtype=np.float64)
        if ids.shape != lps.shape or ids.size == 0:
            raise ValueError(f"position {t}: {ids.size} top ids for {lps.size} log-probabilities (need ≥ 1 each)")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"position {t}: a token id appears twice in the top list")
        if not np.all(np.isfinite(lps)) or np.any(lps > 1e-6):
            raise ValueError(f"position {t}: top log-probabilities must be finite and ≤ 0")
        delta = reported_precision(top_logprobs[t])
        order = np.lexsort((ids, -lps))  # probability descending, ties by id
        ids, reported = ids[order], np.exp(np.minimum(lps[order], 0.0))
        total = float(reported.sum())
        if total * math.exp(-delta) > 1.0 + TOPK_SUM_ATOL:
            raise ValueError(f"position {t}: the top probabilities sum to {total:.6f} > 1 (precision {delta:.2g} nats)")
        probs, other, pe, pr = _top_cells(reported, delta)
        top_mass = 1.0 - other
        cells = np.append(probs, other)  # the cells' law: top tokens, then "other"
        g_top = np.maximum(np.log(probs), LOG_FLOOR)
        g = np.append(g_top, g_top[-1])
        m, v, rng = _moments(cells, g)
        hit = np.flatnonzero(ids == x)
        lp_given = None if token_logprobs is None or token_logprobs[t] is None else float(token_logprobs[t])
        rec = {"x": x, "k": int(ids.size), "o": other, "pe": pe, "pr": pr, "oc": int(not hit.size)}
        if other <= OTHER_NEAR_ZERO + 2 * delta:
            rec["ox"] = int(not hit.size)
        if hit.size:
            j = int(hit[0])
            rec["lp"] = float(np.log(reported[j]))
            c, lo, li = float(probs[j]), float(probs[:j].sum()), float(probs[ids < x].sum())
            gx = float(g[j])
        else:
            rec["lp"] = lp_given if lp_given is not None and math.isfinite(lp_given) else None
            c, lo, li, gx = other, top_mass, top_mass, float(g[-1])
        if lp_given is not None and lp_given == -math.inf:
            rec["imp"] = True  # the reference itself gives the token probability 0
        if rec.get("imp") or c <= 0:  # c = 0: outside a list that provably covers the law (``ox``)
            out.append(rec)
            prev = (ids, probs, other)
            continue
        rec.update(c=c, lo=lo, li=li, tg=gx, tm=m, tv=v, tr=rng, tk=_cgf(cells, g), tx=[float(g.min()), float(g.max())])
        rank = int(hit[0]) if hit.size else ids.size
        rec["nu"] = nucleus_levels(probs, rank, top_mass, other)
        if prev is not None:
            _add_top_shift(rec, ids, probs, other, prev, hit)
        out.append(rec)
        prev = (ids, probs, other)
    return out


def _add_top_shift(rec, ids, probs, other, prev, hit) -> None:
    """The shift likelihood ratios on the cells of p_t against p_{t−1} known on its own top list
    only (module doc: the stand-in)."""
    p_ids, p_probs, p_other = prev
    stand_in = min(float(p_probs.min()), p_other) if p_other > 0 else 0.0
    known = dict(zip(p_ids.tolist(), p_probs.tolist()))
    prev_top = np.array([known.get(int(i), stand_in) for i in ids])
    prev_other = max(0.0, 1.0 - float(prev_top.sum()))
    cells = np.append(probs, other)
    prev_cells = np.append(prev_top, prev_other)
    prev_cells = prev_cells / prev_cells.sum() if prev_cells.sum() > 0 else prev_cells
    j = int(hit[0]) if hit.size else len(ids)
    _add_mixture(rec, "s", cells, prev_cells, j)
