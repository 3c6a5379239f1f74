"""The reference rules behind the batched contract (reference/contract.py): B rows, one at a
time, through the readable [K, L] core (``Rule.prepare`` + ``Rule.decide``).

Exact but slow (Python per row).  It lets the numpy reference stand wherever a batched
verifier is expected: in ``oracle.certify`` (the harness certifying itself), in replay tests
against the torch verifiers with the same explicit noise, and as a user's executable spec.
"""

from __future__ import annotations

import numpy as np

from spectr_gbv.reference.contract import BatchModification, BatchVerdict, to_numpy
from spectr_gbv.reference.randomness import MatchedSource, SamplingSource

# float32 rows of a large vocabulary sum to 1 within ~1e-6·√V; bfloat16 values handed as
# float32 within ~2e-3 (the torch contract's tolerances, gpu_backend/verifiers/inputs.py)
NARROW_ROW_SUM_ATOL = 1e-2


def _rows(x, name: str, ndim: int) -> np.ndarray:
    """float64 rows of one probability argument; narrower floats renormalised after a check."""
    a = to_numpy(x)
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"{name} must hold floating-point probabilities, got dtype {a.dtype}")
    if a.dtype == np.float64:
        return a
    wide = a.astype(np.float64)
    with np.errstate(invalid="ignore"):
        sums = wide.sum(-1, keepdims=True)
        bad = ~(np.abs(sums - 1.0) <= NARROW_ROW_SUM_ATOL)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0][:-1])
        raise ValueError(f"{name}: row {where} sums to {float(sums[where][0]):.6g}, not 1 "
                         f"(tolerance {NARROW_ROW_SUM_ATOL:g} for {a.dtype})")
    return wide / sums


def _sources(B: int, K: int, L: int, V: int, seeds, noise) -> list:
    if noise is not None:
        if seeds is not None:
            raise ValueError("give seeds or noise, not both")
        uniforms, exponentials = (np.asarray(to_numpy(n), dtype=np.float64) for n in noise)
        if uniforms.shape != (B, K, L + 1):
            raise ValueError(f"noise uniforms must have shape [B, K, L+1] = {[B, K, L + 1]}, got {list(uniforms.shape)}")
        if exponentials.shape != (B, V):
            raise ValueError(f"noise exponentials must have shape [B, V] = {[B, V]}, got {list(exponentials.shape)}")
        return [MatchedSource(uniforms[b], exponentials[b]) for b in range(B)]
    if seeds is None:
        seeds = np.random.default_rng().integers(0, 2**63, size=B)
    seeds = to_numpy(seeds)
    if seeds.shape != (B,) or not np.issubdtype(seeds.dtype, np.integer):
        raise ValueError(f"seeds must be integers of shape [B] = [{B}], got {seeds.dtype} {list(seeds.shape)}")
    # SeedSequence takes non-negative ints: int64 seeds are read as their 64-bit pattern
    return [SamplingSource(int(s) % 2**64) for s in seeds]


def verify_batch(rule, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None,
                 validate: bool = True) -> BatchVerdict:
    """``rule`` on B rows with the batched contract (reference/contract.py), numpy out.

    Args:
        rule: a reference ``Rule``.
        draft_tokens: int [B, K, L].  draft_probs: float [B, K, L, V].
        target_probs: float [B, K, L+1, V] (numpy arrays, or tensors: read with ``to_numpy``).
            float64 rows are used as given; float32 (and bfloat16) rows are checked to sum to 1
            within 1e-2 and renormalised in float64, so the law is that of the renormalised rows.
        seeds: int [B]; row b draws from ``SamplingSource(seeds[b])``.  noise: (uniforms
            [B, K, L+1], exponentials [B, V]); row b replays ``MatchedSource`` of its slices.
            Neither: fresh seeds.
        validate: accepted for the contract; the reference always validates each row.
    Returns:
        BatchVerdict of numpy int64 arrays; ``modification`` a BatchModification (float64
        [B] joints, -inf and ``active`` False on rows with no window) when the rule modifies
        targets, else None.
    Raises:
        ValueError: malformed inputs, naming the argument (``check_iteration_inputs`` per row,
            with the row index), both seeds and noise, seeds or noise of the wrong shape.
    """
    del validate
    tokens = to_numpy(draft_tokens)
    if tokens.ndim != 3:
        raise ValueError(f"draft_tokens must have shape [B, K, L], got {list(tokens.shape)}")
    dp, tp = _rows(draft_probs, "draft_probs", 4), _rows(target_probs, "target_probs", 4)
    B, K, L = tokens.shape
    if B < 1:
        raise ValueError("draft_tokens: batch size B must be >= 1, got B = 0")
    if dp.shape[:3] != (B, K, L) or tp.shape[:3] != (B, K, L + 1) or dp.shape[3] != tp.shape[3]:
        raise ValueError(f"draft_probs {list(dp.shape)} and target_probs {list(tp.shape)} do not match "
                         f"draft_tokens [B, K, L] = {[B, K, L]} (need [B, K, L, V] and [B, K, L+1, V])")
    sources = _sources(B, K, L, dp.shape[3], seeds, noise)
    tau = np.zeros(B, dtype=np.int64)
    selected = np.full(B, -1, dtype=np.int64)
    out = np.full((B, L + 1), -1, dtype=np.int64)
    records: list = [None] * B
    blocks: dict = {}  # certification repeats few distinct rows: prepare each once
    for b in range(B):
        key = (tokens[b].tobytes(), dp[b].tobytes(), tp[b].tobytes())
        block = blocks.get(key)
        if block is None:
            try:
                block = blocks[key] = rule.prepare(tokens[b], dp[b], tp[b])
            except ValueError as err:
                raise ValueError(f"batch row {b}: {err}") from None
        v = rule.decide(block, sources[b])
        tau[b], selected[b] = v.tau, v.selected
        out[b, : len(v.tokens)] = v.tokens
        records[b] = v.modification
    return BatchVerdict(tau, selected, out, tau + 1, batch_modification(records))


def batch_modification(records: list) -> BatchModification | None:
    """The BatchModification (numpy) of B reference records (``Modification`` or None per
    row; one rule, so one kind); None when no row has one.  Joints become log joints."""
    live = [m for m in records if m is not None]
    if not live:
        return None
    B = len(records)
    rho = np.ones(B)
    lq = np.full(B, -np.inf)
    lp = np.full(B, -np.inf)
    active = np.zeros(B, dtype=bool)
    with np.errstate(divide="ignore"):
        for b, m in enumerate(records):
            if m is not None:
                rho[b], lq[b], lp[b], active[b] = m.rho, np.log(m.q_joint), np.log(m.p_joint), True
    return BatchModification(live[0].kind, live[0].K, rho, lq, lp, active)
