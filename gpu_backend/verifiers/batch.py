"""Helpers shared by the torch verifiers' ``decide``: per-case evaluation of expanded batches,
row gathers, the emitted tokens, the BatchVerdict and Algorithm 2's record, chunked reductions
over the vocabulary and log-space pairs.  Inputs and their checks: inputs.py."""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import BatchModification, BatchVerdict

from spectr_gbv.gpu_backend.verifiers.inputs import PreparedBatch

def per_case(batch: PreparedBatch, fn):
    """``fn(batch)`` for a deterministic per-row computation returning [B, ...] tensor(s),
    evaluated on the first row only (and expanded) when the batch is one case expanded."""
    if not batch.shared:
        return fn(batch)
    out = fn(batch.head())
    if isinstance(out, tuple):
        return tuple(o.expand((batch.B,) + o.shape[1:]) for o in out)
    return out.expand((batch.B,) + out.shape[1:])


# -- helpers shared by the rules ---------------------------------------------------------------

def batch_index(batch: PreparedBatch) -> torch.Tensor:
    return torch.arange(batch.B, device=batch.device)


def gather_rows(rows: torch.Tensor, k: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    """rows[b, k[b], i[b], :] for every b ([B, K, N, V] → [B, V]); i is clamped to [0, N)."""
    b = torch.arange(rows.shape[0], device=rows.device)
    return rows[b, k, i.clamp(0, rows.shape[2] - 1)]


def emitted_tokens(batch: PreparedBatch, row: torch.Tensor, tau: torch.Tensor,
                   last: torch.Tensor) -> torch.Tensor:
    """[B, L+1]: the first τ tokens of draft ``row``, then ``last``, then -1 padding."""
    b = batch_index(batch)
    prefix = batch.tokens[b, row]  # [B, L]
    prefix = torch.cat([prefix, torch.zeros_like(prefix[:, :1])], dim=1)
    pos = torch.arange(batch.L + 1, device=batch.device).unsqueeze(0)
    tau = tau.unsqueeze(1)
    out = torch.where(pos < tau, prefix, torch.full_like(prefix, -1))
    return torch.where(pos == tau, last.unsqueeze(1), out)


def make_verdict(batch: PreparedBatch, tau: torch.Tensor, selected: torch.Tensor,
                 row: torch.Tensor, last: torch.Tensor,
                 modification: BatchModification | None = None) -> BatchVerdict:
    """Assemble the BatchVerdict (``row``: the draft whose prefix is emitted, ≥ 0)."""
    tokens = emitted_tokens(batch, row, tau, last)
    return BatchVerdict(tau, selected, tokens, tau + 1, modification)


def modification_record(batch: PreparedBatch, kind: str, rho: torch.Tensor, row: torch.Tensor,
                        tau: torch.Tensor, last: torch.Tensor, q_row: torch.Tensor,
                        p_row: torch.Tensor) -> BatchModification:
    """Joints of the emitted tokens: log q(X^(row)_≤τ) + log q(last | ·), and the same for p.

    ``q_row``/``p_row`` are the [B, V] rows at position τ of draft ``row`` (unscaled); rows with
    τ = L get -inf (not active).
    """
    b = batch_index(batch)
    active = tau < batch.L
    q_last = torch.gather(q_row, 1, last.unsqueeze(1)).squeeze(1).double()
    p_last = torch.gather(p_row, 1, last.unsqueeze(1)).squeeze(1).double()
    neg_inf = torch.full_like(q_last, float("-inf"))
    log_q = torch.where(active, batch.lq[b, row, tau] + torch.log(q_last), neg_inf)
    log_p = torch.where(active, batch.lp[b, row, tau] + torch.log(p_last), neg_inf)
    return BatchModification(kind, batch.K, rho.to(torch.float64), log_q, log_p, active)


# Elements per chunk of the vocabulary reductions: bounds the temporaries (B·K·L·V floats can
# be ~1 GB at V = 151,936) and keeps them near cache.
CHUNK_ELEMENTS = 1 << 20


def reduce_rows(fn, rows: tuple[torch.Tensor, ...], coeffs: tuple[torch.Tensor, ...],
                n_buffers: int = 1) -> torch.Tensor:
    """Σ over the vocabulary of ``fn`` applied to [B, K, N, V] row stacks, in chunks.

    Args:
        fn: (row_1, ..., coeff_1, ..., buffers) → [c, N] sums, with rows [c, N, V] in the work
            dtype, coefficients [c, N, 1] in the work dtype and ``buffers`` a list of
            ``n_buffers`` scratch tensors shaped like a row chunk, to be written with out= /
            in-place ops: fresh multi-MB temporaries cost more than the arithmetic on a CPU
            (page faults on every allocation; benchmarks/MEASUREMENTS.md).
        rows: tensors [B, K, N, V] (views allowed when B and K can be merged).
        coeffs: float64 tensors [B, K, N], per-row coefficients.
        n_buffers: scratch tensors ``fn`` needs.
    Returns:
        float64 [B, K, N].
    """
    B, K, N, V = rows[0].shape
    flat = [r.reshape(B * K, N, V) for r in rows]
    cf = [c.reshape(B * K, N, 1).to(rows[0].dtype) for c in coeffs]
    step = max(1, CHUNK_ELEMENTS // max(1, N * V))
    buffers = [torch.empty((min(step, B * K), N, V), dtype=rows[0].dtype, device=rows[0].device)
               for _ in range(n_buffers)]
    parts = []
    for s in range(0, B * K, step):
        c = min(step, B * K - s)
        parts.append(fn(*(r[s:s + c] for r in flat), *(x[s:s + c] for x in cf),
                        [buf[:c] for buf in buffers]).to(torch.float64))
    return torch.cat(parts, dim=0).reshape(B, K, N)


def scaled_pair(log_a: torch.Tensor, log_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a/s, b/s) with s = max(a, b), from logs: both in [0, 1], one of them 1 (0 if both −inf).

    Lets a weight a·q(x) − b·p(x) of two sub-block joints be formed without under/overflow; the
    draw is invariant to the common factor s.
    """
    s = torch.maximum(log_a, log_b)
    s = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
    return torch.exp(log_a - s), torch.exp(log_b - s)
