"""Sizes of the exact enumeration, estimated before it runs (``spectr-gbv exact`` refuses
runs above ``--max-outcomes``; ``oracle.sizes`` uses the same row supports)."""

from __future__ import annotations

import math

# The exact engine enumerates at most this many draft configurations (over all decode
# states) unless --max-outcomes says otherwise: ~1.5·10^3 per second on one core, so the
# default allows runs of minutes (benchmarks/EXACT_ENGINE.md).
DEFAULT_MAX_OUTCOMES = 10**6


def format_log10(lg: float) -> str:
    """A count given as its log10, readable: ``123,456`` when small, ``~1.2e+15`` or
    ``~10^3010.3`` when large."""
    if lg < 15:
        return f"{round(10 ** lg):,}"
    if lg < 300:
        return f"~{10 ** lg:.2g}"
    return f"~10^{lg:.1f}"


def _log10_sum(*logs: float) -> float:
    top = max(logs)
    return top + math.log10(sum(10 ** (x - top) for x in logs))


def log10_comb_multisets(log10_n: float, K: int) -> float:
    """log10 C(n + K − 1, K): the K-multisets of n items (n given as its log10)."""
    ln10 = math.log(10)
    if log10_n <= 12:
        n = round(10 ** log10_n)
        return (math.lgamma(n + K) - math.lgamma(K + 1) - math.lgamma(n)) / ln10
    # n astronomically large: C(n + K − 1, K) ≈ n^K / K!
    return K * log10_n - math.lgamma(K + 1) / ln10


def max_row_support(model) -> int:
    """The largest number of tokens with positive probability in any row of a TableModel (V for
    other models): the branching of a draft or target block."""
    table = getattr(model, "table", None)
    if not table:
        return int(model.vocab_size)
    return max(int((row > 0).sum()) for row in table.values())


def exact_outcomes(draft, target, K: int, L: int, n_tokens: int) -> tuple[float, str]:
    """Upper estimate of what ``spectr-gbv exact`` enumerates, as (log10 count, explanation).

    Per decode state the engine enumerates every configuration of K draft blocks: at most
    b^(K·L) with b the largest draft-row support (≤ V); the decode states are at most the
    emitted prefixes of length < N, Σ_{n<N} V^n; the target law has at most V^N sequences.
    Each configuration carries its decode state's prefix (up to N tokens), whose rows the table
    models look up suffix by suffix, so the generation DP's work is counted as configurations ×
    states × N (with V = 1 there is one state per length, but N = 10^4 tokens takes hours).
    Each configuration also enumerates the rule's coins, so the real work is larger still.
    """
    V = int(target.vocab_size)
    b = max_row_support(draft)
    per_state = K * L * math.log10(b) if b > 1 else 0.0
    states = n_tokens * math.log10(V) - math.log10(V - 1) if V > 1 else math.log10(n_tokens)
    target_seqs = n_tokens * math.log10(max_row_support(target)) if max_row_support(target) > 1 else 0.0
    total = _log10_sum(per_state + states + math.log10(n_tokens), target_seqs)
    how = (f"up to {format_log10(per_state)} draft configurations (b^(K·L), b = {b}) in each of up to "
           f"{format_log10(states)} decode states, each carrying a prefix of up to N = {n_tokens:,} tokens, "
           f"and {format_log10(target_seqs)} target sequences")
    return total, how
