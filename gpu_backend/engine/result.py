"""One generation's tokens and metrics (``GenerationResult``), as the engine, plain sampling and
transformers' assisted generation (``gpu_backend.bench.assisted``) report them; the definitions
(τ kept, block efficiency, acceptance rate) are docs/rules.md §1's."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GenerationResult:
    """One generation and its metrics.

    Attributes:
        method: "ar" or the verification rule's name.
        tokens: the new tokens (prompt excluded), truncated at the first EOS (kept) or at
            ``max_new_tokens``.
        prompt_tokens: prompt length in tokens.
        target_calls: target forward calls after the prompt (AR: one per token; speculative:
            one per iteration).
        taus: kept τ of each iteration: the draft tokens of that iteration that are in
            ``tokens`` (the verifier's τ, cut by the truncation at the first EOS or at
            ``max_new_tokens``: min(τ, tokens the iteration kept)); empty for AR.
        taus_raw: the verifier's τ of each iteration, before truncation (drafts accepted but
            possibly never returned); empty for AR.
        K, L: drafts and block length (AR: 1, 0).
        wall_time_s: seconds, prompt processing included.
        cpu_time_s: CPU seconds of the process over the same span (all threads): on a shared
            machine it is less disturbed by other jobs than wall time.
        peak_rss_bytes: peak resident memory of the process when the run ended (since the last
            ``memory.reset_peak_rss``).
        stop_reason: "eos" or "max_new_tokens".
        block_lengths: the length S ≤ L of each iteration's drafted block (L unless a
            draft-side stopping policy ended drafting early or the block was capped at the
            tokens still needed, ``cap_blocks``); empty for AR.
        time_to_first_token_s: seconds from the start until the first iteration's tokens (AR:
            the first token) were emitted: the prompt's prefill plus one iteration.
        seed: the seed the run used (the caller's, or the fresh one drawn for ``seed=None``):
            the same call with ``seed=result.seed`` gives the same tokens; None where the
            producer has no seed.
    """

    method: str
    tokens: list[int]
    prompt_tokens: int
    target_calls: int
    taus: list[int]
    K: int
    L: int
    wall_time_s: float
    peak_rss_bytes: int
    stop_reason: str
    cpu_time_s: float = float("nan")
    taus_raw: list[int] = field(default_factory=list)
    block_lengths: list[int] = field(default_factory=list)
    time_to_first_token_s: float = float("nan")
    seed: int | None = None

    @property
    def new_tokens(self) -> int:
        return len(self.tokens)

    @property
    def block_efficiency(self) -> float:
        """Emitted tokens per target call (docs/rules.md §1); 1 for AR."""
        return self.new_tokens / self.target_calls if self.target_calls else float("nan")

    @property
    def mean_accepted(self) -> float:
        """Mean kept τ over iterations (draft tokens returned per target call); block
        efficiency = mean τ + the fraction of iterations whose correction/bonus token was
        kept, i.e. mean τ + 1 without truncation."""
        return sum(self.taus) / len(self.taus) if self.taus else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """Kept τ over drafted positions: Σ τ / Σ S, the fraction of the drafted positions
        accepted and returned (= mean τ / L when every S = L); not
        accepted / (K·S): only one draft's tokens can be kept."""
        if not self.taus or not self.L:
            return float("nan")
        if self.block_lengths:
            return sum(self.taus) / sum(self.block_lengths)
        return self.mean_accepted / self.L

    @property
    def per_position_acceptance(self) -> list[float]:
        """Entry i-1 = fraction of the iterations that drafted at least i positions whose kept
        τ ≥ i, i = 1..L (NaN where none drafted i positions; when every iteration drafts L
        the entries sum to mean τ)."""
        if not self.taus:
            return []
        lengths = self.block_lengths or [self.L] * len(self.taus)
        out = []
        for i in range(1, self.L + 1):
            drafted = [t for t, S in zip(self.taus, lengths) if S >= i]
            out.append(sum(t >= i for t in drafted) / len(drafted) if drafted else float("nan"))
        return out

    @property
    def draft_positions_per_iteration(self) -> float:
        """Mean drafted block length S per iteration (L when no block was cut short)."""
        return sum(self.block_lengths) / len(self.block_lengths) if self.block_lengths else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens after the first emission over the time after it (serving benchmarks' decode
        rate: the prompt's prefill is in the time to first token, not here).  NaN when the
        first emission was the whole generation."""
        first = self.first_emission_tokens
        span = self.wall_time_s - self.time_to_first_token_s
        if not span > 0 or self.new_tokens <= first:
            return float("nan")
        return (self.new_tokens - first) / span

    @property
    def first_emission_tokens(self) -> int:
        """Tokens emitted by the first iteration (AR: 1)."""
        if not self.tokens:
            return 0
        return 1 if not self.taus else min(self.taus[0] + 1, self.new_tokens)

    def metrics(self) -> dict:
        """The metrics as a JSON-ready dict."""
        return {
            "method": self.method, "K": self.K, "L": self.L,
            "new_tokens": self.new_tokens, "prompt_tokens": self.prompt_tokens,
            "target_calls": self.target_calls, "block_efficiency": self.block_efficiency,
            "mean_accepted": self.mean_accepted, "acceptance_rate": self.acceptance_rate,
            "per_position_acceptance": self.per_position_acceptance,
            "wall_time_s": self.wall_time_s, "cpu_time_s": self.cpu_time_s,
            "tokens_per_second": self.tokens_per_second,
            "time_to_first_token_s": self.time_to_first_token_s,
            "decode_tokens_per_second": self.decode_tokens_per_second,
            "peak_rss_bytes": self.peak_rss_bytes, "stop_reason": self.stop_reason,
            "draft_positions_per_iteration": self.draft_positions_per_iteration,
            "seed": self.seed,
        }


def kept_tau(tau: int, kept: int) -> int:
    """Draft tokens an iteration returned: its first τ emitted tokens are draft tokens, so of
    ``kept`` returned tokens min(τ, kept) are (the correction/bonus token comes last)."""
    return min(tau, kept)
