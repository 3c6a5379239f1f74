"""The law a request declared, from top-k log-probability lists, as per-token records: the
piece ``certify endpoint`` (``--reference reported``, ``--as-client``) shares with ``certify log``
(both on ``topk_laws``: the same cells, precision and bounds).

``declared_records`` takes one sampled sequence, the top-k lists of its positions (reported by
the sampling answer, or by a prefill) and the sampling fields the client declared (temperature T,
top-p, top-k, min-p), and returns the records ``oracle.sequence_family.family_test`` reads: the
law ∝ p^{1/T} then min-p, top-k, top-p (vLLM v1's order), computed by ``cells.request_law`` —
exact at T = 1 without truncation, exact up to the reported precision where the truncation keeps a
set inside the list, bounded (``pe``, ``pr``: the stated TV and ratio bounds, added to every
test's tolerance) otherwise, and *skipped* where the truncation's boundary lies within the
precision or beyond what the list resolves (``cells.SKIP_REASONS``).  A skipped position keeps a
record without a cell (its PIT is NaN: no test uses it; whether a position is skipped depends on
the list, a function of the past, never on the sampled token).  The arrays are built for one
sequence here (``certify log`` builds them for a chunk of many, ``log/run.chunk_records``).

Imports no torch.
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.certify.topk_laws import (DEFAULT_MAX_BOUND, SKIP_REASONS, record_arrays, reported_precisions,
                                          request_law)

_SCALARS = ("c", "lo", "li", "tg", "tm", "tv", "pe", "pr", "o")


def declared_records(tokens, top_ids, top_logprobs, token_logprobs=None, *, temperature: float = 1.0,
                     top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0, vocab: int = 0,
                     max_bound: float = DEFAULT_MAX_BOUND) -> tuple[list, dict]:
    """Records of one sampled sequence against the declared law (module doc).

    Args:
        tokens: n sampled token ids.
        top_ids, top_logprobs: n lists each (the k most probable tokens of the raw, T = 1, law at
            each position and their log-probabilities, as sent).
        token_logprobs: optional n reported log-probabilities of the sampled tokens (None where
            not given; −inf marks the token impossible).
        temperature: T > 0; top_p in (0, 1]; top_k ≥ 0 (0: none); min_p in [0, 1).
        vocab: V when known (0: unknown; T > 1 with a list that leaves mass needs it).
        max_bound: the largest bound ``pe`` a position may carry (``cells.DEFAULT_MAX_BOUND``).
    Returns:
        (n records, {skip reason: positions}).
    Raises:
        ValueError: lengths disagree, or a sampling field out of range (named).
    """
    n = len(tokens)
    if len(top_ids) != n or len(top_logprobs) != n:
        raise ValueError(f"top_ids and top_logprobs need one entry per token ({n}), got {len(top_ids)} and "
                         f"{len(top_logprobs)}")
    if token_logprobs is not None and len(token_logprobs) != n:
        raise ValueError(f"token_logprobs needs one entry per token ({n}), got {len(token_logprobs)}")
    for name, ok in (("temperature", temperature > 0), ("top_p", 0 < top_p <= 1), ("top_k", top_k >= 0),
                     ("min_p", 0 <= min_p < 1)):
        if not ok:
            raise ValueError(f"{name} = {locals()[name]!r} is out of range")
    if n == 0:
        return [], {}
    lens = [len(lst) for lst in top_ids]
    if any(len(a) != b for a, b in zip(top_logprobs, lens)) or min(lens) < 1:
        raise ValueError("top_ids and top_logprobs: each position needs as many ids as log-probabilities (>= 1)")
    lpx = np.array([np.nan if v is None else float(v) for v in (token_logprobs or [None] * n)], dtype=np.float64)
    k = max(lens)
    L = np.full((n, k), -np.inf)
    ids = np.full((n, k), -1, dtype=np.int64)
    for t in range(n):
        row_ids = np.asarray([int(i) for i in top_ids[t]], dtype=np.int64)
        row_lps = np.asarray([float(v) for v in top_logprobs[t]], dtype=np.float64)
        if np.unique(row_ids).size != row_ids.size:
            raise ValueError(f"position {t}: a token id appears twice in the top list")
        if not np.all(np.isfinite(row_lps)) or np.any(row_lps > 1e-6):
            raise ValueError(f"position {t}: top log-probabilities must be finite and <= 0")
        order = np.lexsort((row_ids, -row_lps))  # probability descending, ties by id
        L[t, :row_ids.size] = row_lps[order]
        ids[t, :row_ids.size] = row_ids[order]
    valid = np.isfinite(L)
    count = valid.sum(axis=1)
    delta = reported_precisions(L, valid)
    full = lambda v, dt: np.full(n, v, dtype=dt)  # noqa: E731
    law = request_law(L, count, delta, full(1.0 / float(temperature), float), full(int(top_k), np.int64),
                      full(float(top_p), float), full(float(min_p), float), int(vocab), float(max_bound))
    over = np.flatnonzero(law["skip"] == 6)
    if over.size:
        raise ValueError(f"position {int(over[0])}: the top probabilities sum above 1 (beyond their precision)")
    first = np.zeros(n, dtype=bool)
    first[0] = True
    x = np.asarray([int(t) for t in tokens], dtype=np.int64)
    ra = record_arrays(law, ids, x, lpx, first)
    codes = np.bincount(law["skip"], minlength=len(SKIP_REASONS))
    skipped = {SKIP_REASONS[c]: int(codes[c]) for c in range(1, len(SKIP_REASONS)) if codes[c]}
    out = []
    for t in range(n):
        x = int(tokens[t])
        rec = {"x": x, "k": int(ra["k"][t]), "oc": int(ra["oc"][t])}
        if not ra["rec"][t]:  # skipped: no cell, no test uses it
            rec.update(pe=0.0, pr=0.0, o=0.0, skip=SKIP_REASONS[int(law["skip"][t])] or "skipped")
            out.append(rec)
            continue
        rec.update(pe=float(ra["pe"][t]), pr=float(ra["pr"][t]), o=float(ra["o"][t]))
        if ra["ox"][t] >= 0:
            rec["ox"] = int(ra["ox"][t])
        if np.isfinite(lpx[t]):
            rec["lp"] = lpx[t]
        if ra["imp"][t]:
            rec["imp"] = True
        if not ra["has_c"][t]:
            out.append(rec)
            continue
        for key in _SCALARS:
            rec[key] = float(ra[key][t])
        rec["tk"] = ra["tk"][t].tolist()
        rec["tx"] = ra["tx"][t].tolist()
        rec["tr"] = rec["tx"][1] - rec["tx"][0]  # the range of g over the live cells (g sorted, floored)
        rec["nu"] = ra["nu"][t].tolist()
        if ra["has_s"][t]:
            for key in ("se", "sm", "sv", "sq"):
                rec[key] = ra[key][t].tolist()
        out.append(rec)
    return out, skipped


__all__ = ["declared_records", "SKIP_REASONS"]
