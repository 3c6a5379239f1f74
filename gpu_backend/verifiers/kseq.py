"""Batched ρ* of K-SEQ (SpecTr, Sun et al. 2023, arXiv 2310.15141; docs/rules.md §2.2).

One position, k i.i.d. candidates from the draft p, target q, β(ρ) = Σ_x min(p(x), q(x)/ρ).
ρ* ∈ [1, k] is the root of 1 − (1 − β)^k = ρβ, taken on the valid side 1 − (1 − β)^k ≤ ρβ, as
reference/kseq.py does.  With

    g(ρ) = E(ρ) − D(ρ)^k,   E(ρ) = Σ_x (q − ρp)_+ = 1 − ρβ,   D(ρ) = Σ_x (p − q/ρ)_+ = 1 − β

(E is the residual mass, D^k the probability that all k candidates are rejected), valid ⇔ g ≤ 0,
evaluated without cancellation in either regime (``_valid``).  The reference evaluates
1 − (1 − β)^k − ρβ, whose absolute rounding error (~1e-16) exceeds g when D^k ≪ 1e-16 (p ≈ q)
or when β is tiny (supports nearly disjoint).  In the first regime the root itself is
ill-conditioned — changing the rows by 1e-16 (e.g. how their sums round) moves it by up to ~1%
— but the law moves by < 1e-16; in the second the reference's ρ* is off by up to ~6e-6
(relative) where this solver agrees with 60-digit arithmetic to 1e-11.  Elsewhere the two agree
to ~1e-10.

Solver: a fixed number of histogram refinements, no data-dependent iteration count, no host
synchronisation.  At ρ inside a window [lo, hi] every token is either "above" (t = q/p ≥ ρ,
contributing q − ρp to E) or "below" (contributing p − q/ρ to D); one pass bins the tokens by
t into ``bins`` equal cells of the window (scatter_add of p and q), after which E and D, hence
g, are exact at all bins + 1 cell edges.  At V ≥ LARGE_V, tokens outside the window go to
DUMP_CELLS cells on each side, chosen by token id, and are summed after the pass: one cell per
side made every scatter-add on a CPU wait for the previous one (a solve at V = 151,936 took
1.5x as long).
The first valid edge and its left neighbour become the next window.  3 passes of 4096 cells
(6 of 64, or 12 of 8, at smaller V) resolve ρ* to (k − 1)·2^-36 ≈ 1.5e-11·(k − 1) (absolute),
always on the valid side (the returned ρ is an edge where g ≤ 0).  A bisection to 1 ulp, like
the reference's, would take ~53 passes over the vocabulary per solve.  On a CPU at V ≥ LARGE_V
only, rows with one candidate (k ≤ 1, whose answer is the window's start) are picked out by reading k, which
waits for no device there, and take one pass instead (``_solve_some``): SpecTr's rows after
the drafts diverge, MDBV-KSEQ's single-draft nodes.

Conventions of the reference kept: k = 1 → ρ = 1; g(1) ≤ 0 (e.g. p = q) → ρ = 1; disjoint
supports (β(1) = 0, where every ρ is a root) → ρ = 1.
"""

from __future__ import annotations

import torch

# (bins, levels) by vocabulary size: all resolve ρ* to (k − 1)·2^-36.  Many bins suit a large
# vocabulary (the passes over V dominate); at small V the [N, bins] edge arithmetic would cost
# more than the passes, so fewer bins and more passes.
GRIDS = ((65536, (4096, 3)), (512, (64, 6)), (0, (8, 12)))  # (smallest V, (bins, levels))
# On CPU the rows are solved in chunks of about this many elements: the float64 scratch of a
# chunk then stays in cache (faster per row than many rows at once: benchmarks/MEASUREMENTS.md).
# On CUDA all rows go in one launch sequence.
ROW_CHUNK_ELEMENTS = 1 << 18
# At V >= LARGE_V, tokens outside the solver's window are binned into DUMP_CELLS cells per side
# instead of one (``_solve``), and on a CPU single-candidate rows skip the passes
# (``_solve_some``).  Below it the passes are cheap and both would cost more than they save
# (the toy's many rows of V = 2: 2-3x slower).
LARGE_V = 512
DUMP_CELLS = 64
_DUMP_BOUNDS: dict = {}


def _dump_cells(V: int) -> int:
    return DUMP_CELLS if V >= LARGE_V else 1


def _dump_bounds(V: int, bins: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 [V] clamp bounds of ``_solve``'s cell coordinate, D = ``_dump_cells(V)``: token
    j's lowest value is j mod D (a cell below the window), its highest D + bins + 1 + j mod D
    (a cell above it)."""
    key = (V, bins, str(device))
    if key not in _DUMP_BOUNDS:
        D = _dump_cells(V)
        spread = (torch.arange(V, device=device) % D).to(torch.float64)
        _DUMP_BOUNDS[key] = (spread, spread + (D + bins + 1))
    return _DUMP_BOUNDS[key]


def default_grid(V: int) -> tuple[int, int]:
    """(bins, levels) used by ``rho_star`` for a vocabulary of V tokens."""
    return next(grid for smallest, grid in GRIDS if V >= smallest)


def _valid(rho: torch.Tensor, above: torch.Tensor, below: torch.Tensor,
           k: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
    """g(ρ) ≤ 0 at the edges ρ [N, M], from the masses above/below each edge [N, 2, M] (p, q).

    Two exact rewritings of g, each free of cancellation in its own regime:
      β ≥ 1/2:  g = E − D^k with E = Σ_above (q − ρp), D = Σ_below (p − q/ρ) formed from the
                masses on each side of the edge, not as 1 − ρβ and 1 − β (p ≈ q: E and D small);
      β < 1/2:  g = [1 − (1 − β)^k] − ρβ with 1 − (1 − β)^k = −expm1(k·log1p(−β))
                (resolves g ≈ (k − ρ)β when β is tiny, i.e. nearly disjoint supports).
    With a budget w [N, 1] (``threshold_scaled``) the right side is w·ρβ and the first form
    becomes (1 − w) + w·E − D^k.
    """
    beta = above[:, 0] + below[:, 1] / rho
    E = above[:, 1] - rho * above[:, 0]
    D = (below[:, 0] - below[:, 1] / rho).clamp_min(0)
    g_close = E - D.pow(k) if w is None else (1.0 - w) + w * E - D.pow(k)
    small = beta < 0.5
    b = torch.where(small, beta, torch.zeros_like(beta))
    g_far = -torch.expm1(k * torch.log1p(-b)) - (rho * b if w is None else w * rho * b)
    return torch.where(small, g_far, g_close) <= 0


def rho_star(p: torch.Tensor, q: torch.Tensor, k, *, bins: int | None = None,
             levels: int | None = None) -> torch.Tensor:
    """ρ* of K-SEQ for N independent positions.

    Args:
        p: [N, V] draft probabilities (float32 or float64), non-negative.
        q: [N, V] target probabilities, same dtype.
        k: int64 [N] or a Python int, number of candidates (values < 1 are treated as 1).
        bins: cells per refinement pass (default: ``default_grid(V)``).
        levels: refinement passes (default: ``default_grid(V)``).
    Returns:
        float64 [N], ρ* ∈ [1, k], on the valid side, within (k − 1)·bins^-levels of the root.
        When p and q are the same row repeated (stride 0 along N, e.g. expanded Monte-Carlo
        inputs) and k is an int, the row is solved once (metadata check, no synchronisation).
    Source: SpecTr (Sun et al., NeurIPS 2023), K-SEQ, 1 − (1 − β)^k = ρβ; docs/rules.md §2.2;
        reference/kseq.py rho_star.
    """
    N, V = p.shape
    if isinstance(k, int):
        if N > 1 and p.stride(0) == 0 and q.stride(0) == 0:
            return rho_star(p[:1], q[:1], k, bins=bins, levels=levels).expand(N)
        k = torch.full((N,), k, dtype=torch.int64, device=p.device)
    if bins is None or levels is None:
        bins, levels = default_grid(V)
    # each chunk's float64 copies are made inside the chunk, so they stay in cache
    return torch.cat([_solve(*ratios(p[c], q[c]), k[c], bins, levels)[0] for c in _row_chunks(N, V, p.device)])


def _row_chunks(N: int, V: int, device: torch.device) -> list[slice]:
    """Row slices of about ROW_CHUNK_ELEMENTS elements on CPU; all rows at once on CUDA."""
    rows = max(1, ROW_CHUNK_ELEMENTS // V) if device.type == "cpu" else N
    return [slice(s, s + rows) for s in range(0, N, rows)]


def ratios(p: torch.Tensor, q: torch.Tensor,
           out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p, q, t = q/p) in float64, the solver's inputs; p = 0 is read as the smallest normal, so
    0/0 → 0 (no mass either way) and x/0 → huge (above every window).  Computing them once lets
    several solves on one row (``threshold_scaled`` at several budgets) share them.  ``out``:
    three float64 tensors of p's shape to write into (the same values; reused buffers spare a
    CPU the page faults of fresh ones)."""
    if out is not None:
        p64, q64, t = out
        p64.copy_(p)
        q64.copy_(q)
        torch.div(q64, torch.clamp_min(p64, torch.finfo(torch.float64).tiny, out=t), out=t)
        t.nan_to_num_(nan=0.0)
        return p64, q64, t
    p64 = p.to(torch.float64)
    q64 = q.to(torch.float64)
    t = q64 / p64.clamp_min(torch.finfo(torch.float64).tiny)
    t.nan_to_num_(nan=0.0)  # only unvalidated NaN inputs get here; a NaN would index out of range
    return p64, q64, t


def threshold_scaled(p64: torch.Tensor, q64: torch.Tensor, t: torch.Tensor, k: torch.Tensor,
                     w: torch.Tensor, *, bins: int | None = None,
                     levels: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """K-SEQ's ρ* against a scaled target w·q (MDBV's node selection at budget w, one class).

    K-SEQ marks a candidate x with probability e(x) = min(1, w·q(x)/(κ·p(x))); κ is the smallest
    value with 1 − (1 − s)^k ≤ κ·s, s = Σ_x p(x)e(x) (reference/rules/mdbv.py, class-K-SEQ with
    the cut j = 0; docs/rules.md §2.10).  In θ = κ/w, the threshold on q/p, s = β(θ) =
    Σ_x min(p(x), q(x)/θ) and the condition reads 1 − (1 − β(θ))^k ≤ w·θ·β(θ): the ρ* equation
    with its right side scaled by w, solved by the same histogram refinements over the window
    θ ∈ [1/w, k/w] (κ ∈ [1, k] since κ ≥ (1 − (1 − s)^k)/s ≥ 1).  w = 1 is ``rho_star``.

    Args:
        p64, q64, t: float64 [N, V] from ``ratios`` (views with stride 0 along N are read in
            place, e.g. one row solved at several budgets); q sums to 1.
        k: int64 [N], drafts through the node (values < 1 are treated as 1).
        w: float64 [N], budgets in [0, 1] (values ≤ 1e-300 are treated as 1e-300; the caller
            masks them: a budget 0 accepts nothing).
        bins, levels: as ``rho_star``.
    Returns:
        (θ, s), float64 [N] each: θ* = κ*/w on the valid side, within (k − 1)/w·bins^-levels of
        the root (1/w where k ≤ 1, where θ = 1/w is already valid, or where β(1/w) = 0: every θ
        accepts nothing); s = β(θ) from the masses on each side of θ (no further pass).
    Source: SpecTr (Sun et al., NeurIPS 2023), K-SEQ's ρ*, applied to the sub-probability
        target w·q; reference/rules/mdbv.py _rest_class at j = 0.
    """
    N, V = t.shape
    if bins is None or levels is None:
        bins, levels = default_grid(V)
    w = w.to(torch.float64).clamp_min(1e-300)
    parts = [_solve(p64[c], q64[c], t[c], k[c], bins, levels, w[c]) for c in _row_chunks(N, V, t.device)]
    return torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts])


def single_candidate(p64: torch.Tensor, q64: torch.Tensor, w: torch.Tensor | None = None,
                     out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(θ, s) of rows with one candidate (k ≤ 1), whose answer is the window's start: θ = 1/w
    (ρ = 1 without a budget) and s = β(θ) = Σ_x min(p(x), w·q(x)), in one pass and without
    q/p — what ``threshold_scaled`` returns for such rows (it calls this).  w·q rather than
    q/θ: a product costs a CPU a fraction of a division, and differs by at most an ulp.

    Args:
        p64, q64: [N, V] rows, float64 or a work dtype (promoted to float64: the same values);
        w: float64 [N] budgets, or None (w = 1); out: optional float64 [N, V] buffers
            (p_buffer, scratch); the values do not depend on them.  Work-dtype rows are converted
            into them: a mixed-dtype operation would make a fresh float64 copy of its float32
            operand, which costs a CPU page faults (a quarter of the pass at V = 151,936).
    Returns:
        (θ, s), float64 [N] each.
    Source: K-SEQ's ρ* at k = 1 (1 − (1 − β) = ρβ holds at ρ = 1); docs/rules.md §2.2.
    """
    ones = torch.ones(p64.shape[0], dtype=torch.float64, device=p64.device)
    if w is None:
        theta, scale = ones, ones
    else:
        scale = w.to(torch.float64).clamp_min(1e-300)
        theta = ones / scale
    if out is None:
        return theta, torch.minimum(p64, q64 * scale.unsqueeze(1)).sum(dim=1)
    p_buf, scratch = out
    if p64.dtype != torch.float64:
        p64 = p_buf.copy_(p64)
    scratch.copy_(q64).mul_(scale.unsqueeze(1))
    torch.minimum(p64, scratch, out=scratch)
    return theta, scratch.sum(dim=1)


def _solve_some(p64, q64, t, k, bins, levels, w):
    """``_solve`` for CPU rows of which some have k ≤ 1: those in one pass, the others solved."""
    theta, s = single_candidate(p64, q64, w)
    multi = torch.nonzero(k > 1)[:, 0]
    if len(multi):
        theta_m, s_m = _solve(p64[multi], q64[multi], t[multi], k[multi], bins, levels,
                              None if w is None else w[multi])
        theta, s = theta.index_put((multi,), theta_m), s.index_put((multi,), s_m)
    return theta, s


def _solve(p64: torch.Tensor, q64: torch.Tensor, t: torch.Tensor, k: torch.Tensor, bins: int,
           levels: int, w: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if t.device.type == "cpu" and t.shape[1] >= LARGE_V and not bool((k > 1).all()):
        # A row with one candidate has its answer at the window's start (θ = 1/w, ρ = 1): on a
        # CPU, reading k costs nothing (no device to wait for), so such rows skip the passes
        # and get β(1/w) = Σ min(p, w·q) in one; elsewhere every row takes the fixed passes.
        return _solve_some(p64, q64, t, k, bins, levels, w)
    N, V = t.shape
    device = t.device
    kf = k.clamp_min(1).to(torch.float64)
    lo = torch.ones(N, dtype=torch.float64, device=device)
    hi = torch.where(kf > 1, kf, torch.full_like(kf, 2.0))
    wcol = None
    if w is not None:  # the window [1, k] in κ is [1/w, k/w] in θ = κ/w
        lo, hi = lo / w, hi / w
        wcol = w.unsqueeze(1)
    start = lo
    cells = torch.arange(bins + 1, dtype=torch.float64, device=device)  # edge numbers
    one_at_start = torch.zeros(N, dtype=torch.bool, device=device)
    kcol = kf.unsqueeze(1)
    u = torch.empty((N, V), dtype=torch.float64, device=device)  # scratch reused by every level (fresh big temporaries are slow)
    idx32 = torch.empty((N, V), dtype=torch.int32, device=device)
    idx = torch.empty((N, V), dtype=torch.int64, device=device)
    D = _dump_cells(V)
    floor_at, ceil_at = _dump_bounds(V, bins, device)
    for level in range(levels):
        width = (hi - lo).clamp_min(1e-300)
        scale = (bins / width).unsqueeze(1)
        # cell D + c, c = floor((t − lo)·scale) + 1 ∈ 1..bins inside the window.  Tokens outside
        # (all but ~V/bins after the first level) are clamped to token-dependent bounds, so that
        # they land in D cells per side (by token id mod D) instead of one: adding them all into
        # one cell makes each scatter-add wait for the previous one on a CPU (6x slower at
        # V = 151,936).  Cells 0..D hold t < lo, D + bins + 1 .. bins + 2D hold t ≥ hi.
        # float64 → int32 → int64: the direct float64 → int64 cast is ~20x slower on CPU.
        torch.sub(t, (lo - width / bins - D / scale[:, 0]).unsqueeze(1), out=u).mul_(scale)
        torch.clamp(u, min=floor_at, max=ceil_at, out=u)
        idx.copy_(idx32.copy_(u))
        cells_p = torch.zeros(N, bins + 2 * D + 1, dtype=torch.float64, device=device).scatter_add_(1, idx, p64)
        cells_q = torch.zeros_like(cells_p).scatter_add_(1, idx, q64)
        binned = torch.stack([cells_p, cells_q], dim=1)  # [N, 2, bins + 2D + 1], small
        sums = torch.cat([binned[:, :, :D + 1].sum(dim=2, keepdim=True), binned[:, :, D + 1:D + bins + 1],
                          binned[:, :, D + bins + 1:].sum(dim=2, keepdim=True)], dim=2)  # [N, 2, bins+2]
        below = torch.cumsum(sums, dim=2)[:, :, : bins + 1]  # cells 0..e: t < edge e
        above = torch.flip(torch.cumsum(torch.flip(sums, [2]), dim=2), [2])[:, :, 1:]  # t ≥ edge e
        edges = lo.unsqueeze(1) + width.unsqueeze(1) * (cells / bins)  # [N, bins+1]
        valid = _valid(edges, above, below, kcol, wcol)
        if level == 0:
            # β at the window's start is P(t ≥ start) + Q(t < start)/start: 0 iff this sum is
            beta1 = above[:, 0, 0] + below[:, 1, 0]
            one_at_start = valid[:, 0] | (beta1 <= 0)
            beta_start = above[:, 0, 0] + below[:, 1, 0] / lo
        valid[:, bins] = True  # hi is valid by construction (g(k) ≤ 0 by Bernoulli)
        first = valid.to(torch.int8).argmax(dim=1)  # first valid edge
        new_hi = torch.gather(edges, 1, first.unsqueeze(1)).squeeze(1)
        new_lo = torch.gather(edges, 1, (first - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
        beta_hi = torch.gather(above[:, 0] + below[:, 1] / edges, 1, first.unsqueeze(1)).squeeze(1)
        lo, hi = new_lo, new_hi
    at_start = one_at_start | (kf <= 1)
    return torch.where(at_start, start, hi), torch.where(at_start, beta_start, beta_hi)
