"""The torch verifiers' inputs (reference/contract.py's contract on tensors): conversion of
numpy rows, shape and value checks, and the derived per-sub-block joints (``prepare``).

docs/design.md §2 "The verifier contract" with a leading batch axis B:

    draft_tokens  int   [B, K, L]
    draft_probs   float [B, K, L, V]     p(· | c, X^(k)_<i)
    target_probs  float [B, K, L+1, V]   q(· | c, X^(k)_<i); row L is the bonus row

Precision.  Inputs may be float64, float32 or bfloat16 (both tensors the same dtype).  Work
over the vocabulary axis is done in float64 for float64 inputs and in float32 otherwise;
everything per sub-block (joints, acceptance probabilities h, ρ) is float64, and the joints of
sub-blocks are kept as log-probabilities (``lp``, ``lq``) so that L = 16 blocks of tiny
probabilities do not underflow.

Normalisation tolerance (|Σ_x row − 1| allowed by validation), by input dtype:
    float64   1e-5   (the reference's NORMALISATION_ATOL)
    float32   1e-4   (a float32 softmax sums to 1 within ~1e-6; margin for models that
                      normalise in lower precision and cast)
    bfloat16  1e-2   (rounding to bfloat16 moves each entry by up to 2^-9 of itself, so a row
                      can sum to 1 ± 2e-3); bfloat16 rows are RENORMALISED in float32 (each
                      row divided by its float32 sum) before use, so the law is the exact law
                      of the renormalised rows.  float32/float64 rows are used as given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

ROW_SUM_ATOL = {torch.float64: 1e-5, torch.float32: 1e-4, torch.bfloat16: 1e-2}
SUPPORTED_DTYPES = tuple(ROW_SUM_ATOL)

@dataclass
class PreparedBatch:
    """One batch of validated inputs and the derived per-sub-block quantities.

    Attributes:
        tokens: int64 [B, K, L].
        dp: [B, K, L, V] draft rows in the work dtype (float64 or float32).
        tp: [B, K, L+1, V] target rows in the work dtype.
        p_step: float64 [B, K, L], p(X^(k)_i | c, X^(k)_<i) (0-based i).
        q_step: float64 [B, K, L], q of the same tokens.
        lp: float64 [B, K, L+1], log p(X^(k)_≤i) (lp[..., 0] = 0).
        lq: float64 [B, K, L+1], log q(X^(k)_≤i); -inf once a token has target probability 0.
        shared: the B rows are one case expanded (stride 0 along the batch in all three inputs,
            as Monte-Carlo and certification batches are): deterministic per-row work (h, ρ*)
            is then done once (``per_case``); the noise, hence the outcomes, stay per row.
    """

    tokens: torch.Tensor
    dp: torch.Tensor
    tp: torch.Tensor
    p_step: torch.Tensor
    q_step: torch.Tensor
    lp: torch.Tensor
    lq: torch.Tensor
    shared: bool = False

    def head(self) -> "PreparedBatch":
        """The first row as a batch of one."""
        return PreparedBatch(self.tokens[:1], self.dp[:1], self.tp[:1], self.p_step[:1],
                             self.q_step[:1], self.lp[:1], self.lq[:1])

    @property
    def B(self) -> int:
        return self.tokens.shape[0]

    @property
    def K(self) -> int:
        return self.tokens.shape[1]

    @property
    def L(self) -> int:
        return self.tokens.shape[2]

    @property
    def V(self) -> int:
        return self.dp.shape[3]

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    @property
    def dtype(self) -> torch.dtype:
        return self.dp.dtype


def as_tensor(x, name: str, device=None, dtype=None) -> torch.Tensor:
    """A tensor from a tensor (returned as is) or a numpy array (converted to ``device``, and to
    ``dtype`` when given), so that any caller of the contract may hand numpy arrays.

    A numpy array that is one row broadcast along its first axis (stride 0, as certification
    passes one case B times) becomes an expanded tensor: one row is converted, not B.

    Raises:
        ValueError: ``x`` is neither a tensor nor a numpy array (naming ``name``).
    """
    if isinstance(x, torch.Tensor):
        return x
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name} must be a torch.Tensor or a numpy array, got {type(x).__name__}")
    device = torch.device("cpu") if device is None else torch.device(device)
    if x.ndim > 0 and x.shape[0] > 1 and x.strides[0] == 0:
        return as_tensor(np.array(x[:1]), name, device, dtype).expand(x.shape)
    t = torch.from_numpy(np.ascontiguousarray(x))
    return t.to(device) if dtype is None else t.to(device=device, dtype=dtype)


def check_shapes(draft_tokens, draft_probs, target_probs) -> tuple[int, int, int, int]:
    """Shape, dtype and device checks (metadata only: no host synchronisation).

    Returns:
        (B, K, L, V).
    Raises:
        ValueError: naming the argument: not a tensor, wrong number of dimensions, K < 1,
            L < 1, B < 1, V < 1, shape or vocabulary mismatch, unsupported or mismatched
            dtypes, tensors on different devices.
    """
    for name, t in (("draft_tokens", draft_tokens), ("draft_probs", draft_probs),
                    ("target_probs", target_probs)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if draft_tokens.dim() != 3:
        raise ValueError(f"draft_tokens must have shape [B, K, L], got {tuple(draft_tokens.shape)}")
    if draft_tokens.dtype.is_floating_point or draft_tokens.dtype.is_complex or draft_tokens.dtype == torch.bool:
        raise ValueError(f"draft_tokens must hold integer token ids, got dtype {draft_tokens.dtype}")
    B, K, L = draft_tokens.shape
    if B < 1:
        raise ValueError(f"draft_tokens: batch size B must be >= 1, got B = {B}")
    if K < 1:
        raise ValueError(f"draft_tokens: K must be >= 1, got K = {K}")
    if L < 1:
        raise ValueError(f"draft_tokens: L must be >= 1, got L = {L}")
    if draft_probs.dim() != 4 or tuple(draft_probs.shape[:3]) != (B, K, L):
        raise ValueError(f"draft_probs must have shape [B, K, L, V] = [{B}, {K}, {L}, V], "
                         f"got {tuple(draft_probs.shape)}")
    if target_probs.dim() != 4 or tuple(target_probs.shape[:3]) != (B, K, L + 1):
        raise ValueError(f"target_probs must have shape [B, K, L+1, V] = [{B}, {K}, {L + 1}, V], "
                         f"got {tuple(target_probs.shape)}")
    V = draft_probs.shape[3]
    if V < 1:
        raise ValueError("draft_probs: empty vocabulary (V = 0)")
    if target_probs.shape[3] != V:
        raise ValueError(f"vocabulary mismatch: draft_probs has V = {V}, "
                         f"target_probs has V = {target_probs.shape[3]}")
    for name, t in (("draft_probs", draft_probs), ("target_probs", target_probs)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name}: dtype {t.dtype} not supported (float64, float32, bfloat16)")
    if draft_probs.dtype != target_probs.dtype:
        raise ValueError(f"draft_probs ({draft_probs.dtype}) and target_probs "
                         f"({target_probs.dtype}) must have the same dtype")
    for name, t in (("draft_probs", draft_probs), ("target_probs", target_probs)):
        if t.device != draft_tokens.device:
            raise ValueError(f"{name} is on {t.device}, draft_tokens on {draft_tokens.device}")
    return B, K, L, V


def _first_index(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


def check_rows(probs: torch.Tensor, name: str) -> None:
    """Value checks of probability rows (synchronises; outside the hot path).

    Raises:
        ValueError: naming ``name`` and the first offending row: NaN/inf, negative entries,
            an all-zero row, a row sum off 1 by more than ROW_SUM_ATOL[dtype].
    """
    finite = torch.isfinite(probs)
    if not bool(finite.all()):
        raise ValueError(f"{name}: contains NaN or infinite values "
                         f"(first at index {_first_index(~finite)})")
    negative = probs < 0
    if bool(negative.any()):
        raise ValueError(f"{name}: contains negative probabilities "
                         f"(first at index {_first_index(negative)})")
    sums = probs.sum(-1, dtype=torch.float64)
    zero = sums == 0
    if bool(zero.any()):
        raise ValueError(f"{name}: row {_first_index(zero)} is all zero (no probability mass)")
    atol = ROW_SUM_ATOL[probs.dtype]
    bad = (sums - 1.0).abs() > atol
    if bool(bad.any()):
        where = _first_index(bad)
        raise ValueError(f"{name}: probabilities are not normalised: row {where} sums to "
                         f"{float(sums[where]):.6g} (tolerance {atol:g} for {probs.dtype})")


def check_values(draft_tokens, draft_probs, target_probs) -> None:
    """Value checks: token ids in [0, V), rows valid, draft probability of each draft token > 0.

    Raises:
        ValueError: naming the argument (see ``check_rows``).
    """
    V = draft_probs.shape[3]
    ids = draft_tokens.long()  # compared in int64: V does not fit every integer dtype (uint8: 600 → 88)
    out = (ids < 0) | (ids >= V)
    if bool(out.any()):
        where = _first_index(out)
        raise ValueError(f"draft_tokens{list(where)} = {int(draft_tokens[where])} outside "
                         f"[0, V) with V = {V}")
    check_rows(draft_probs, "draft_probs")
    check_rows(target_probs, "target_probs")
    chosen = torch.gather(draft_probs, 3, draft_tokens.long().unsqueeze(-1)).squeeze(-1)
    zero = chosen <= 0
    if bool(zero.any()):
        where = _first_index(zero)
        raise ValueError(f"draft_tokens{list(where)} = {int(draft_tokens[where])} has draft "
                         "probability 0 in draft_probs: it cannot have been drawn from it")


def _work_rows(probs: torch.Tensor) -> torch.Tensor:
    if probs.dtype == torch.bfloat16:
        if probs.shape[0] > 1 and probs.stride(0) == 0:  # one case expanded over the batch
            return _work_rows(probs[:1]).expand(probs.shape)
        rows = probs.float()
        # bfloat16 rows miss 1 by up to ~2e-3; renormalise so the rules see distributions
        # (in place: a second full-size float32 copy costs more than the division).
        return rows.div_(rows.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny))
    return probs


def prepare(draft_tokens, draft_probs, target_probs, *, validate: bool = True,
            single_draft: bool = False, rule_name: str = "") -> PreparedBatch:
    """Validate (optionally) and compute the per-sub-block quantities of one batch.

    Args:
        draft_tokens: int [B, K, L].
        draft_probs: float64/float32/bfloat16 [B, K, L, V].
        target_probs: same dtype [B, K, L+1, V].
        validate: run the value checks (they synchronise); shape checks always run.
        single_draft: the rule needs K = 1.
        rule_name: for the K = 1 error message.
    Returns:
        PreparedBatch.
    Raises:
        ValueError: see ``check_shapes`` and ``check_values``; K ≠ 1 for a single-draft rule.
    """
    B, K, L, V = check_shapes(draft_tokens, draft_probs, target_probs)
    if single_draft and K != 1:
        raise ValueError(f"rule {rule_name!r} is single-draft: draft_tokens must have K = 1, got K = {K}")
    shared = B > 1 and all(t.stride(0) == 0 for t in (draft_tokens, draft_probs, target_probs))
    if validate:
        # one case expanded over the batch: its first row stands for all (no full-size reads)
        check_values(*((t[:1] for t in (draft_tokens, draft_probs, target_probs)) if shared
                       else (draft_tokens, draft_probs, target_probs)))
    tokens = draft_tokens.long()
    dp = _work_rows(draft_probs)
    tp = _work_rows(target_probs)
    idx = tokens.unsqueeze(-1)
    p_step = torch.gather(dp, 3, idx).squeeze(-1).double()
    q_step = torch.gather(tp[:, :, :L], 3, idx).squeeze(-1).double()
    zero = torch.zeros(B, K, 1, dtype=torch.float64, device=tokens.device)
    lp = torch.cat([zero, torch.cumsum(torch.log(p_step), dim=2)], dim=2)
    lq = torch.cat([zero, torch.cumsum(torch.log(q_step), dim=2)], dim=2)
    return PreparedBatch(tokens, dp, tp, p_step, q_step, lp, lq, shared)
