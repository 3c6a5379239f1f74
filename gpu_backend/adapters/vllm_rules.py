"""This project's single-draft torch verifiers run in vLLM v1's rejection-sampler layout
(``adapters.vllm_layout``): ``rules_in_vllm_layout(name)`` ("sd" is vLLM's rule, "bv"/"gbv"
block verification).  With ``noise=`` it maps vLLM's [0, 1) uniforms back, u = u' + 2^-53 (exact
on the grid of 53-bit uniforms; ``adapters.vllm_adapter``'s module doc), so that
``boundary_probes(from_vllm_layout(rules_in_vllm_layout("sd")), "sd", K=1)`` passes.
"""

from __future__ import annotations

import torch

from spectr_gbv.reference.contract import to_numpy

from spectr_gbv.gpu_backend.adapters.vllm_layout import (PLACEHOLDER_TOKEN_ID, ULP_HALF, check_layout, check_layout_noise,
                                                         per_request_seeds, target_probs_from_logits)


# -- our verifiers in vLLM's layout ----------------------------------------------------------------

class VLLMLayoutRules:
    """A single-draft verifier of the batched contract, called in vLLM's layout (module doc).

    Requests are grouped by draft length n ≥ 1; each group is one call of the verifier with
    K = 1, L = n and per-request seeds; a request with 0 drafts emits only its bonus token,
    drawn from its bonus row by an exponential race on its seed.  A request's outcome depends
    on its rows and its seed (or generator) alone, not on the other requests.  Every row of
    a request, its bonus row included, is tempered by its T (softmax(logits / T)); a greedy
    request (T = 0) gets the one-hot of each row's argmax as its target, so every rule
    accepts while the draft is the argmax and then emits the argmax (sd: min(1, q/p) ∈ {0, 1};
    bv/gbv: h ∈ {0, 1}), whatever the draft rows.  With ``noise=`` the verifier replays the
    given uniforms and races instead (module doc, noise).

    Rules that modify later targets (``gbv`` with Algorithm 2, docs/rules.md §3) return a
    record that this layout cannot carry: it is dropped (the block's law is the rule's; a
    serving loop would also need the modified targets).

    Args:
        verifier: a registered rule name (``gpu_backend.verifiers.get_verifier``) or an object
            with the batched contract taking K = 1.
        validate: passed to this project's torch verifiers (value checks of the rows).
    """

    def __init__(self, verifier, validate: bool = True):
        if isinstance(verifier, str):
            from spectr_gbv.gpu_backend.verifiers import get_verifier
            verifier = get_verifier(verifier)
        if not callable(verifier):
            raise ValueError(f"verifier must be a rule name or a callable verifier, got {type(verifier).__name__}")
        self.verifier = verifier
        self.validate = validate

    def __repr__(self) -> str:
        return f"rules_in_vllm_layout({self.verifier!r})"

    def __call__(self, num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures=None, *,
                 generators=None, seeds=None, noise=None) -> torch.Tensor:
        """Verify B requests in vLLM's layout.

        Args: as in the module doc; ``seeds`` int64 [B] instead of ``generators`` (not both).
            ``noise``: (uniforms float64 [num_tokens] in [0, 1), exponentials float64 [B, V]
            > 0) replaces the seeded randomness (seeds and generators are then not used): the
            verifier gets u = u' + 2^-53 ∈ (0, 1] as coin (0, i + 1) of draft position i
            (MatchedSource: the coin succeeds iff u ≤ h; exact for 53-bit uniforms u') and
            request b's exponential race from exponentials[b] (a 0-draft request draws its
            bonus token from it).
        Returns:
            int32 [B, max(num_draft_tokens) + 1] on ``target_logits``' device: request b's
            accepted drafts, then its correction or bonus token, then −1.
        Raises:
            ValueError: malformed layout (``check_layout``), seeds and generators both given or
                malformed, malformed noise (naming ``noise``), or the verifier's own ValueError
                (e.g. a drafted token of draft probability 0).
        """
        counts, ids, dp, logits, temps = check_layout(num_draft_tokens, draft_token_ids, draft_probs,
                                                      target_logits, temperatures)
        B, V, device = len(counts), logits.shape[1], logits.device
        if noise is None:
            request_seeds = per_request_seeds(B, device, generators, seeds)
        else:
            uniforms01, exponentials = check_layout_noise(noise, sum(counts), B, V, device)
        tp = target_probs_from_logits(logits, temps, counts)
        if dp is None:
            dp = torch.nn.functional.one_hot(ids, V).to(tp.dtype)
        dp = dp.to(tp.dtype)
        out = torch.full((B, max(counts) + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device)
        counts_t = torch.tensor(counts, device=device)
        draft_start = torch.cumsum(counts_t, 0) - counts_t
        row_start = torch.cumsum(counts_t + 1, 0) - (counts_t + 1)
        for n in sorted(set(counts)):
            req = torch.nonzero(counts_t == n).flatten()
            if n == 0:
                e = exponentials[req] if noise is not None else None
                s_ = request_seeds[req] if noise is None else None
                out[req, 0] = self._bonus_only(tp[row_start[req]], s_, e).to(torch.int32)
                continue
            pos = torch.arange(n, device=device)
            d_rows = draft_start[req].unsqueeze(1) + pos  # [G, n]
            t_rows = row_start[req].unsqueeze(1) + torch.arange(n + 1, device=device)  # [G, n+1]
            kwargs = {"validate": self.validate} if _is_project_verifier(self.verifier) else {}
            if noise is None:
                kwargs["seeds"] = request_seeds[req]
            else:  # coin (0, i + 1) ↔ draft position i; coin (0, 0) is used by no single-draft rule
                u = torch.ones((len(req), 1, n + 1), dtype=torch.float64, device=device)
                u[:, 0, 1:] = uniforms01[d_rows] + ULP_HALF
                kwargs["noise"] = (u, exponentials[req])
            verdict = self.verifier(ids[d_rows].unsqueeze(1), dp[d_rows].unsqueeze(1), tp[t_rows].unsqueeze(1),
                                    **kwargs)
            tokens = verdict.tokens
            if not isinstance(tokens, torch.Tensor):
                tokens = torch.as_tensor(to_numpy(tokens))
            out[req, : n + 1] = tokens.to(device=device, dtype=torch.int32)
        return out

    @staticmethod
    def _bonus_only(q: torch.Tensor, seeds: torch.Tensor | None, exponentials=None) -> torch.Tensor:
        """int64 [G]: one token ∝ q per row, argmax of log q − log E with E ~ Exp(1) from the
        row's seed (gpu_backend.verifiers.noise.seeded_exponentials), or E = ``exponentials``
        [G, V] when given (the MatchedSource race)."""
        from spectr_gbv.gpu_backend.verifiers.noise import seeded_exponentials
        e = exponentials if exponentials is not None else seeded_exponentials(seeds, q.shape[1]).to(q.device)
        score = torch.where(q > 0, torch.log(q.to(torch.float64)) - torch.log(e), torch.full_like(e, -torch.inf))
        return score.argmax(dim=1)


def _is_project_verifier(v) -> bool:
    try:
        from spectr_gbv.gpu_backend.verifiers import Verifier
    except ImportError:  # pragma: no cover
        return False
    return isinstance(v, Verifier)


def rules_in_vllm_layout(name_or_verifier, validate: bool = True) -> VLLMLayoutRules:
    """One of this project's single-draft verifiers ("sd", "bv", "gbv", or a Verifier / any
    object with the batched contract taking K = 1) as a function of vLLM's layout (module doc;
    ``VLLMLayoutRules``)."""
    return VLLMLayoutRules(name_or_verifier, validate)
