"""Algorithm 2's stack of modified targets, carried across iterations on real-model rows.

A greedy rule (GBV, SpecTr-GBV, K-SEQ-GBV) leaves the positions of its window after the
emitted tokens with a modified target q̃(x | s) ∝ w(s, x) (docs/rules.md §3).  Windows stack: each
holds the log joints, from its start, of the tokens emitted since then under its own target
(the effective target beneath it) and under the draft.  At a new iteration the target rows
handed to the verifier are, for positions still inside a live window, the layered modified
rows (oldest window first) computed from that iteration's raw target and draft rows.  This is
``reference/decode.py`` (``Decoder._layers``, ``Decoder.advance``) in float64 log space on
torch tensors, restricted to the rows that can lie in a window: a window opened at emitted
length s by a block of S ≤ L positions ends at s + S and the next iteration starts at n ≥ s + 1,
so only rows i < S − 1 of a later block are modified (never the bonus row; a block capped at the
tokens still needed keeps at least those rows, reference.draft_stopping.block_cap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class Window:
    """A live modification window.

    Attributes:
        start: emitted length when the window opened (its first position).
        end: start + S (S ≤ L the verified block's length); positions < end not yet emitted are
            modified.
        modification: the verdict's modification record; only ``weights`` is used.
        log_q: log joint of the tokens emitted since ``start`` under the window's own target.
        log_p: log joint of the same tokens under the draft.
    """

    start: int
    end: int
    modification: object
    log_q: float
    log_p: float


@dataclass
class StackTrace:
    """What ``ModificationStack.modify`` computed for one iteration, kept for ``advance``.

    Attributes:
        n: emitted length at the start of the iteration.
        bases: per live window (oldest first), float64 [K, r_W, V]: the rows beneath the window
            at block rows i < r_W = end − n.
        log_q_steps: per window, float64 [K, r_W]: log base row at the draft token of row i.
        log_p_steps: float64 [K, R]: log draft row at the draft token of row i, R = max r_W.
        draft_rows: float64 [K, R, V]: the draft rows of the block's first R positions.
    """

    n: int
    bases: list
    log_q_steps: list
    log_p_steps: torch.Tensor
    draft_rows: torch.Tensor


def _exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    """[K, r] → [K, r], entry i = Σ_{j<i} x[:, j] (not cumsum − x: −inf − (−inf) is NaN)."""
    return torch.cat([torch.zeros_like(x[:, :1]), torch.cumsum(x[:, :-1], dim=1)], dim=1)


class ModificationStack:
    """The live windows of one generation, oldest first.

    Args:
        L: block length of the generation (the window length of a block of L positions; a
            shorter block's window spans its own length, ``advance(span=)``).
    """

    def __init__(self, L: int):
        self.L = int(L)
        self.windows: list[Window] = []

    def rows_modified(self, n: int) -> int:
        """How many leading rows of the block starting at emitted length n lie in a window."""
        return max((w.end - n for w in self.windows), default=0)

    def modify(self, n: int, draft_tokens: torch.Tensor, draft_probs: torch.Tensor,
               target_probs: torch.Tensor) -> tuple[torch.Tensor, StackTrace | None]:
        """The target rows to hand to the verifier.

        Args:
            n: tokens emitted so far (the block's row i predicts emitted position n + i).
            draft_tokens: int64 [K, S].  draft_probs: float [K, S, V] (the draft rows the
                tokens were drawn from).  target_probs: float [K, S+1, V], the raw target rows
                (S ≤ L the block's drafted positions).
        Returns:
            (target rows, trace): ``target_probs`` itself when no window is live, else a copy
            (same dtype) whose first R rows are the layered modified rows; the trace is what
            ``advance`` needs (None when no window is live).
        Raises:
            ValueError: a live window covers more rows than the block has drafted positions.
        Source: docs/rules.md §3; reference/decode.py ``Decoder._layers``.
        """
        R = self.rows_modified(n)
        if R <= 0:
            return target_probs, None
        if R > draft_tokens.shape[1]:
            # a window reaching past this block would need its bonus row and a draft row it
            # lacks; block_cap never shortens a block that far (BLOCK_CAP.md)
            raise ValueError(f"a live modification window covers {R} rows but the block has "
                             f"{draft_tokens.shape[1]} drafted positions")
        p_rows = draft_probs[:, :R].double()
        log_p_rows = torch.log(p_rows)
        x = draft_tokens[:, :R].unsqueeze(-1)
        log_p_steps = torch.gather(log_p_rows, 2, x).squeeze(-1)
        cum_lp = _exclusive_cumsum(log_p_steps)
        rows = target_probs[:, :R].double()
        bases, log_q_steps = [], []
        for w in self.windows:
            r = w.end - n
            base = rows[:, :r]
            log_base = torch.log(base)
            lq_step = torch.gather(log_base, 2, x[:, :r]).squeeze(-1)
            log_qj = w.log_q + _exclusive_cumsum(lq_step)
            log_pj = w.log_p + cum_lp[:, :r]
            # w is homogeneous of degree 1 in (q, p): a common shift keeps exp() in range
            shift = torch.maximum(log_qj, log_pj)
            shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
            weights = w.modification.weights((log_qj - shift).unsqueeze(-1) + log_base,
                                             (log_pj - shift).unsqueeze(-1) + log_p_rows[:, :r])
            total = weights.sum(-1, keepdim=True)
            # total = 0 only off the support of the window's law: keep the row beneath there
            layered = torch.where(total > 0, weights / torch.where(total > 0, total, 1.0), base)
            rows = torch.cat([layered, rows[:, r:]], dim=1) if r < R else layered
            bases.append(base)
            log_q_steps.append(lq_step)
        out = target_probs.clone()
        out[:, :R] = rows.to(target_probs.dtype)
        return out, StackTrace(n, bases, log_q_steps, log_p_steps, p_rows)

    def advance(self, n: int, emitted: list[int], selected: int, trace: StackTrace | None,
                modification=None, active: bool = False, span: int | None = None) -> None:
        """Move past an iteration's emitted tokens (in place).

        Older windows continue their joints over the emitted tokens under the row beneath
        them; windows whose positions are all emitted are dropped; the verdict's window is
        pushed when ``active`` and some of its positions remain.

        Args:
            n: emitted length at the start of the iteration.
            emitted: the iteration's emitted tokens (τ draft tokens + correction/bonus),
                before any truncation.
            selected: the draft row the accepted tokens came from (any row when τ = 0).
            trace: ``modify``'s trace of this iteration.
            modification: the verdict's modification record (batch of one).
            active: whether it opened a window; its log joints are read from
                ``modification.log_q_joint[0]`` and ``.log_p_joint[0]``.
            span: the verified block's length S, the new window's span (default L; shorter
                when the block was capped at the tokens still needed, as reference/decode.py's
                ``Decoder.advance`` does).
        Source: docs/rules.md §3; reference/decode.py ``Decoder.advance``.
        """
        n_new = n + len(emitted)
        tau = len(emitted) - 1
        kept = []
        for idx, w in enumerate(self.windows):
            if w.end <= n_new:
                continue
            # w survives only if every emitted row lies inside it: τ + 1 < end − n = r_W
            y = emitted[-1]
            base = trace.bases[idx]
            lq = float(trace.log_q_steps[idx][selected, :tau].sum()) + _log(
                float(base[selected, tau, y]))
            lp = float(trace.log_p_steps[selected, :tau].sum()) + _log(
                float(trace.draft_rows[selected, tau, y]))
            kept.append(Window(w.start, w.end, w.modification, w.log_q + lq, w.log_p + lp))
        self.windows = kept
        span = self.L if span is None else int(span)
        if modification is not None and active and n + span > n_new:
            self.windows.append(Window(n, n + span, modification,
                                       float(modification.log_q_joint[0]),
                                       float(modification.log_p_joint[0])))


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf
