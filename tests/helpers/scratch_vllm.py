"""Samplers in vLLM's rejection-sampler layout (gpu_backend/adapters/vllm_layout.py, module doc)
written from scratch, as a user porting vLLM's sampler would write them, each with one serving
defect of a class docs/guarantees.md lists, and their correct twin (``layout_sd``).

    output_token_ids = fn(num_draft_tokens, draft_token_ids, draft_probs, target_logits,
                          temperatures, *, generators)

Inputs are checked as the contract says (``check_layout_rows``).  Token-level speculative sampling
(Leviathan et al. 2023, Alg. 1) per request: q = softmax(logits
/ T) (greedy at T = 0: accept while the draft is the argmax, then emit the argmax, ties to the
lowest id as torch.argmax); accept draft x when u < q(x)/p(x) with u = torch.rand from the
request's generator (p the one-hot of x when draft_probs is None); at the first rejection draw
from (q − p)_+ normalised (q where it is all 0), after n acceptances from the bonus row.

| sampler | defect (the class it writes from scratch) |
|---|---|
| ``extra_token`` | after n acceptances it writes the bonus token twice when the row has room: more than n + 1 tokens (vllm-project/vllm PR #35398's class) |
| ``abs_residual`` | the residual |q − p| instead of (q − p)_+: tokens of target probability 0 are emitted (flashinfer-ai/flashinfer#879's class) |
| ``neighbour_temperature`` | request i is tempered with temperatures[(i + 1) mod B] (vllm-project/vllm-ascend PR #6685's class) |
| ``one_generator`` | every request draws from the generator of the batch's first seeded request (one generator for the batch) |
"""

from __future__ import annotations

import torch


def check_layout_rows(draft_token_ids, draft_probs, target_logits) -> None:
    """The contract's refusals (reference/contract.py) in this layout: ValueError naming the
    argument for NaN target logits, and for draft_probs rows with a NaN, infinite or negative
    entry, a sum off 1 by more than 1e-5, or a drafted token of draft probability 0."""
    if torch.isnan(torch.as_tensor(target_logits)).any():
        raise ValueError("target_logits: contains NaN")
    if draft_probs is None:
        return
    dp = torch.as_tensor(draft_probs, dtype=torch.float64)
    if not torch.isfinite(dp).all() or (dp < 0).any() or ((dp.sum(-1) - 1).abs() > 1e-5).any():
        raise ValueError("draft_probs: a row is not a probability vector (NaN, inf, negative or unnormalised)")
    ids = torch.as_tensor(draft_token_ids, dtype=torch.int64)
    if len(ids) and (dp[torch.arange(len(ids)), ids] <= 0).any():
        raise ValueError("draft_token_ids: a drafted token has draft probability 0")


def _sampler(defect: str | None = None):
    def fn(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures, *, generators=None):
        counts = [int(n) for n in num_draft_tokens]
        B, V = len(counts), target_logits.shape[1]
        check_layout_rows(draft_token_ids, draft_probs, target_logits)
        T = (torch.ones(B, dtype=torch.float64) if temperatures is None
             else torch.as_tensor(temperatures, dtype=torch.float64))
        generators = generators or {}
        first = generators[min(generators)] if generators else None
        width = max(counts) + 1
        out = torch.full((B, width), -1, dtype=torch.int64)
        d = r = 0
        for i, n in enumerate(counts):
            rows = torch.as_tensor(target_logits[r:r + n + 1], dtype=torch.float64)
            ids = [int(x) for x in draft_token_ids[d:d + n]]
            Ti = float(T[(i + 1) % B] if defect == "neighbour_temperature" else T[i])
            g = first if defect == "one_generator" else generators.get(i)
            emitted = []
            if Ti == 0.0:
                top = rows.argmax(dim=1).tolist()
                for pos in range(n):
                    emitted.append(top[pos])
                    if ids[pos] != top[pos]:
                        break
                else:
                    emitted.append(top[n])
            else:
                q = torch.softmax(rows / Ti, dim=1)
                for pos, x in enumerate(ids):
                    p_row = (torch.nn.functional.one_hot(torch.tensor(x), V).to(torch.float64) if draft_probs is None
                             else torch.as_tensor(draft_probs[d + pos], dtype=torch.float64))
                    u = float(torch.rand((), dtype=torch.float64, generator=g))
                    if p_row[x] > 0 and u < float(q[pos, x] / p_row[x]):
                        emitted.append(x)
                        continue
                    diff = q[pos] - p_row
                    residual = diff.abs() if defect == "abs_residual" else diff.clamp(min=0.0)
                    if float(residual.sum()) <= 0.0:
                        residual = q[pos]
                    emitted.append(int(torch.multinomial(residual / residual.sum(), 1, generator=g)))
                    break
                else:
                    emitted.append(int(torch.multinomial(q[n], 1, generator=g)))
            if defect == "extra_token" and len(emitted) == n + 1 and len(emitted) < width:
                emitted.append(emitted[-1])
            out[i, :len(emitted)] = torch.tensor(emitted)
            d, r = d + n, r + n + 1
        return out

    fn.__name__ = f"layout_sd_{defect}" if defect else "layout_sd"
    return fn


layout_sd = _sampler()
extra_token = _sampler("extra_token")
abs_residual = _sampler("abs_residual")
neighbour_temperature = _sampler("neighbour_temperature")
one_generator = _sampler("one_generator")
