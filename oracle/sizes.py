"""Sizes of the oracle programs, estimated before they are built (``spectr-gbv oracle``
refuses programs above ``--max-variables``)."""

from __future__ import annotations

import math

from spectr_gbv.reference.sizes import log10_comb_multisets, max_row_support

# The oracle programs: at most this many LP variables (and block-law entries V^L).
DEFAULT_MAX_VARIABLES = 2 * 10**6


def oracle_sizes(draft, target, K: int, L: int) -> dict[str, float]:
    """log10 of the oracle programs' sizes (upper estimates from the row supports):
    ``block`` (V^L entries of each block law), ``cic`` (n·m variables), ``global_ot``
    (C(n+K−1, K)·m), ``no_modification`` (≤ C(n+K−1, K)·m·(L+1)), ``tuples_bytes`` (the
    K-multisets as int64), with n ≤ b_p^L draft and m ≤ b_q^L target blocks of positive mass."""
    V = int(target.vocab_size)
    lb = L * math.log10(V)
    ln = L * math.log10(max_row_support(draft))
    lm = L * math.log10(max_row_support(target))
    lM = log10_comb_multisets(ln, K)
    return {
        "block": lb,
        "draft_blocks": ln,
        "target_blocks": lm,
        "multisets": lM,
        "cic": ln + lm,
        "global_ot": lM + lm,
        "no_modification": lM + lm + math.log10(L + 1),
        "tuples_bytes": lM + math.log10(8 * K),
    }
