"""Expected decode speed of a speculative configuration, from measured costs and acceptance.

Leviathan et al. 2023 (arXiv 2211.17192, §3.3-3.5): with a per-token acceptance rate α, γ draft
tokens per iteration and a draft step costing c target steps, an iteration emits
(1 − α^{γ+1}) / (1 − α) tokens in expected value and costs γ·c + 1 target steps.  This module
generalises that model in three ways, each because the simple form misled on real machines:

1. **Measured costs, not a ratio c.**  An iteration costs
       (L − 1)·D(K) + D(1 + r) + T(1 + r + K·L) + overhead(K, L)
   seconds, r = 0 except on the llama.cpp backend with K > 1, which feeds the τ accepted tokens
   of an iteration again to both models at the next one (``llamacpp.layout``): there r = E[τ]: D(n) and T(n) are measured forwards of the draft and target over n new tokens after
   a cached context (the packed layout feeds one depth of the draft tree, ≤ K nodes, per draft
   call, the pending token(s) first, then every tree node and the last context token to the
   target in one call; drafts sharing a prefix share nodes, so K per depth is an upper bound
   that errs towards fewer drafts); overhead is the verifier and the draft's sampling (tree
   and mask building and the cache cut-back, ~1 % of an iteration in benchmarks/PROFILE.md,
   are left out).  On a compute-bound
   CPU T(n) grows with n (benchmarks/MEASUREMENTS.md, "gpu_backend/tuning/speed_model.py"),
   which is what makes speculation lose there.
2. **Acceptance per position, measured on text.**  β_t is the acceptance probability at
   position t of a calibration text; P(τ ≥ i) is averaged over windows of consecutive
   positions, so that easy and hard stretches are not averaged into one α first.
3. **K drafts.**  With k live drafts at a position, acceptance is K-SEQ's
   1 − (1 − β(ρ*))^k = ρ*·β(ρ*) (SpecTr, Sun et al. 2023, Algorithm 3; docs/rules.md §2.2).
   After an acceptance the drafts that carry the accepted token stay live: the winner and each
   other live draft with probability p_t(x_t), the draft's probability of the text's token
   (the accepted token is modelled by the text's token).

4. **End to end, for the generation's length.**  Speculating also prefills the draft on the
   prompt, which plain sampling never does; on a machine where speculation gains little in
   decode, that prefill decides.  With the prompt's length n and the tokens asked for N,
   predicted seconds end to end are
       plain sampling:  P_target(n) + N / (plain tokens/s)
       speculating:     P_target(n) + P_draft(n) + N / (best shape's tokens/s),
   P(n) the measured prefill scaled linearly to n tokens (``Costs.prefill``).  ``choose``
   compares the parts that differ (the target's prefill is the same on both sides): speculate
   when N / (plain tokens/s) ≥ (1 + margin) · (P_draft(n) + N / (best tokens/s)).  The margin
   covers the error of the decode predictions.  N is the tokens asked for: an EOS before them
   leaves less decode to pay for the draft's prefill, which the choice cannot foresee.

The model is an estimate for choosing K, L and whether to speculate at all; the engine prints
the predicted and the measured speed side by side so that a wrong prediction is visible.  For
rules other than SpecTr it uses the same acceptance (token verification's for K = 1: block
verification accepts at least as much, so its estimate is low).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from math import comb

import numpy as np

# speculate only when predicted at least (1 + MARGIN) × plain sampling (item 4): where the
# measured costs chose to speculate on llama.cpp, the speculative-over-plain decode ratio was
# over-predicted by about this much (benchmarks/LLAMACPP.md, "How far the predictions were
# off"); a wrong "yes" makes the engine slower than the plain sampling it replaces, a wrong "no"
# only forgoes a small gain
MARGIN = 0.10
# the most tokens a prompt or a generation is taken to have (a bound on the lengths, so that
# every predicted time is a finite number)
MAX_TOKENS = 2**31 - 1


def is_count(value, minimum: int) -> bool:
    """An integer (Python or numpy, not bool) in minimum..MAX_TOKENS."""
    return (isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
            and minimum <= value <= MAX_TOKENS)


def _is_seconds(value) -> bool:
    """A real number (Python or numpy, not bool), finite and >= 0."""
    return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
            and bool(np.isfinite(value)) and value >= 0)


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance measured on a calibration text.

    Attributes:
        beta: float64 [T, K_max]; beta[t, k − 1] = probability that position t accepts one of
            k live drafts' tokens (k = 1: Σ_x min(p_t(x), q_t(x)); k ≥ 2: K-SEQ's ρ*·β(ρ*)).
        match: float64 [T]; p_t(x_t), the draft's probability of the token that the text has
            at position t.
        segments: int [S]; the lengths of the texts that were concatenated (windows do not
            cross a text boundary).
    """

    beta: np.ndarray
    match: np.ndarray
    segments: tuple[int, ...]

    def __post_init__(self):
        beta = np.asarray(self.beta, dtype=np.float64)
        match = np.asarray(self.match, dtype=np.float64)
        if beta.ndim != 2 or beta.shape[0] != match.shape[0] or beta.shape[1] < 1:
            raise ValueError(f"beta must be [T, K_max] and match [T], got {beta.shape} and {match.shape}")
        for name, a in (("beta", beta), ("match", match)):
            if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1 + 1e-9):
                raise ValueError(f"{name} must hold probabilities in [0, 1]")
        if beta.shape[0] < 1:
            raise ValueError("beta must hold at least one position (T >= 1)")
        if sum(self.segments) != beta.shape[0] or any(s < 1 for s in self.segments):
            raise ValueError(f"segments {self.segments} must be positive and sum to T = {beta.shape[0]}")
        beta, match = np.clip(beta, 0.0, 1.0), np.clip(match, 0.0, 1.0)
        beta.setflags(write=False)  # validated once: later writes would bypass the checks
        match.setflags(write=False)
        object.__setattr__(self, "beta", beta)
        object.__setattr__(self, "match", match)

    @property
    def K_max(self) -> int:
        return int(self.beta.shape[1])

    def to_json(self) -> dict:
        return {"beta": self.beta.tolist(), "match": self.match.tolist(), "segments": list(self.segments)}

    @classmethod
    def from_json(cls, data: dict) -> "Acceptance":
        return cls(np.array(data["beta"]), np.array(data["match"]), tuple(data["segments"]))


def expected_tokens(acc: Acceptance, K: int, L: int) -> float:
    """Expected tokens per iteration, E[τ] + 1 = 1 + Σ_{i=1..L} P(τ ≥ i), K drafts of L tokens.

    Averaged over every window of L consecutive positions inside one calibration text (texts
    shorter than L contribute their own length's windows cut at the end).  With a constant
    β and K = 1 it is Leviathan et al.'s (1 − β^{L+1}) / (1 − β) (their eq. 1).

    Args:
        acc: the measured acceptance; K ≤ acc.K_max.
        K, L: drafts and block length, ≥ 1.
    Returns:
        float in [1, L + 1].
    Raises:
        ValueError: K or L < 1, K > acc.K_max.
    """
    if K < 1 or L < 1:
        raise ValueError(f"K and L must be >= 1, got K={K}, L={L}")
    if K > acc.K_max:
        raise ValueError(f"K={K} exceeds the calibrated K_max={acc.K_max}")
    total, windows = 0.0, 0
    start = 0
    for length in acc.segments:
        n_win = max(length - L + 1, 1)
        t0 = start + np.arange(n_win)
        live = np.zeros((n_win, K))  # live[w, k − 1]: P(k drafts live and τ ≥ depth)
        live[:, K - 1] = 1.0
        e = np.ones(n_win)
        for i in range(min(L, length)):
            t = t0 + i
            accepted = live * acc.beta[t, :K]  # [n_win, K]
            e += accepted.sum(axis=1)
            m = acc.match[t]
            nxt = np.zeros_like(live)
            for k in range(1, K + 1):  # k live drafts → 1 + Binomial(k − 1, m) live
                for j in range(1, k + 1):
                    nxt[:, j - 1] += accepted[:, k - 1] * comb(k - 1, j - 1) * m ** (j - 1) * (1 - m) ** (k - j)
            live = nxt
        total += float(e.sum())
        windows += n_win
        start += length
    return total / windows


@dataclass(frozen=True)
class Costs:
    """Measured seconds on this machine (``tuning.measure``, combined by ``autoconfig.configure``).

    Attributes:
        target_n, target_s: float [M] each; a target forward over n new tokens after a cached
            context costs target_s (linear interpolation between the measured n).
        draft_n, draft_s: the same for the draft.
        overhead: {(K, L): seconds} per iteration besides the forwards: the verifier on
            [K, L, V] rows and the draft's sampling.
        ar_overhead_s: per token of plain sampling besides the target forward.
        prefill_s: {"target": s, "draft": s}: one forward over the measured context
            (``context_tokens`` tokens) from an empty cache (``prefill`` scales it).
        context_tokens: the measured context's length, ≥ 1.
        refeed_accepted: the layout feeds an iteration's τ accepted tokens again at the next
            one when K > 1 (the llama.cpp backend: ``llamacpp.layout``); ``iteration_seconds``
            then charges E[τ] more tokens to the first draft call and to the target call.
    """

    target_n: tuple[int, ...]
    target_s: tuple[float, ...]
    draft_n: tuple[int, ...]
    draft_s: tuple[float, ...]
    overhead: dict
    ar_overhead_s: float
    prefill_s: dict
    context_tokens: int
    refeed_accepted: bool = False

    def __post_init__(self):
        for name, ns, secs in (("target", self.target_n, self.target_s), ("draft", self.draft_n, self.draft_s)):
            if len(ns) < 1 or len(ns) != len(secs):
                raise ValueError(f"{name}_n and {name}_s must be non-empty and of equal length")
            if not all(is_count(n, 1) for n in ns) or any(b <= a for a, b in zip(ns, ns[1:])):
                raise ValueError(f"{name}_n must be increasing token counts >= 1, got {ns}")
            if not all(_is_seconds(x) and x > 0 for x in secs):
                raise ValueError(f"{name}_s must be finite seconds > 0, got {secs}")
        if not isinstance(self.overhead, dict):
            raise ValueError(f"overhead must be a dict {{(K, L): seconds}}, got {self.overhead!r}")
        bad = {k: v for k, v in self.overhead.items() if not _is_seconds(v)}
        if bad:
            raise ValueError(f"overhead must hold finite seconds >= 0, got {bad}")
        if not _is_seconds(self.ar_overhead_s):
            raise ValueError(f"ar_overhead_s must be finite seconds >= 0, got {self.ar_overhead_s!r}")
        if not isinstance(self.prefill_s, dict) or not set(self.prefill_s) <= {"target", "draft"}:
            raise ValueError(f"prefill_s must be a dict with the keys 'target' and 'draft', got {self.prefill_s!r}")
        bad = {k: v for k, v in self.prefill_s.items() if not _is_seconds(v)}
        if bad:
            raise ValueError(f"prefill_s must hold finite seconds >= 0, got {bad}")
        if not is_count(self.context_tokens, 1):
            raise ValueError(f"context_tokens must be an integer >= 1, got {self.context_tokens!r}")

    def target(self, n: int) -> float:
        """Seconds of a target forward over n new tokens (linear between measured n).

        Raises:
            ValueError: n outside the measured range (no extrapolation).
        """
        return self._interp("target", n, self.target_n, self.target_s)

    def draft(self, n: int) -> float:
        """Seconds of a draft forward over n new tokens (as ``target``)."""
        return self._interp("draft", n, self.draft_n, self.draft_s)

    def prefill(self, model: str, n: int) -> float:
        """Seconds to prefill n prompt tokens into ``model``'s empty cache: the measured prefill
        scaled linearly, prefill_s[model] · n / context_tokens.  A prefill is one batched
        forward, whose cost grows about linearly in n for prompts of a few hundred tokens (the
        attention's n² term is small there).  The line through zero leaves out a call's fixed
        cost, which matters below a few tens of tokens (a chat-templated prompt has more).

        Args:
            model: "target" or "draft".
            n: tokens, an integer in 0..``MAX_TOKENS``.
        Raises:
            ValueError: another model or n, or no prefill was measured for ``model``.
        """
        if model not in ("target", "draft"):
            raise ValueError(f"model must be 'target' or 'draft', got {model!r}")
        if not is_count(n, 0):
            raise ValueError(f"n must be a token count in 0..{MAX_TOKENS}, got {n!r}")
        if model not in self.prefill_s:
            raise ValueError(f"no measured prefill for the {model} (prefill_s has {sorted(self.prefill_s)})")
        return float(self.prefill_s[model]) * int(n) / int(self.context_tokens)

    @staticmethod
    def _interp(name, n, ns, secs) -> float:
        if not ns[0] <= n <= ns[-1]:
            raise ValueError(f"n={n} {name} tokens is outside the measured range {ns[0]}..{ns[-1]}")
        return float(np.interp(n, ns, secs))

    def to_json(self) -> dict:
        return {"target_n": list(self.target_n), "target_s": list(self.target_s),
                "draft_n": list(self.draft_n), "draft_s": list(self.draft_s),
                "overhead": [[K, L, s] for (K, L), s in sorted(self.overhead.items())],
                "ar_overhead_s": self.ar_overhead_s, "prefill_s": dict(self.prefill_s),
                "context_tokens": self.context_tokens, "refeed_accepted": self.refeed_accepted}

    @classmethod
    def from_json(cls, d: dict) -> "Costs":
        return cls(tuple(d["target_n"]), tuple(d["target_s"]), tuple(d["draft_n"]), tuple(d["draft_s"]),
                   {(int(K), int(L)): float(s) for K, L, s in d["overhead"]}, float(d["ar_overhead_s"]),
                   dict(d["prefill_s"]), int(d["context_tokens"]), bool(d["refeed_accepted"]))


def iteration_seconds(costs: Costs, K: int, L: int, accepted: float = 0.0) -> float:
    """Seconds of one iteration of K drafts of L tokens (item 1 of the module docstring).

    An upper bound on the forwards' cost: drafts that share a prefix share tree nodes in the
    engine's packed layout, so a depth feeds at most K nodes and the target at most 1 + K·L.

    Args:
        accepted: E[τ] of this (K, L) (``expected_tokens`` − 1); used only when
            ``costs.refeed_accepted`` and K > 1 (the re-fed tokens, linear interpolation).
    Raises:
        ValueError: (K, L) has no measured overhead, or a token count outside the measured range.
    """
    if (K, L) not in costs.overhead:
        raise ValueError(f"no measured overhead for K={K}, L={L}")
    r = accepted if costs.refeed_accepted and K > 1 else 0.0
    return ((L - 1) * costs.draft(K) + costs.draft(1 + r) + costs.target(1 + r + K * L)
            + costs.overhead[(K, L)])


def ar_seconds_per_token(costs: Costs) -> float:
    """Seconds per token of plain sampling: one target forward over one token plus sampling."""
    return costs.target(1) + costs.ar_overhead_s


@dataclass(frozen=True)
class Prediction:
    """One candidate: K drafts of L tokens, expected tokens per iteration (E[τ] + 1) and
    seconds per iteration; tokens_per_second is their ratio (decode, prefill excluded)."""

    K: int
    L: int
    tokens_per_iteration: float
    iteration_s: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_iteration / self.iteration_s


@dataclass(frozen=True)
class Choice:
    """The configuration picked by ``choose``.

    Attributes:
        best: the fastest candidate in decode (also when not speculating, for the record);
            the draft's prefill is the same for every candidate, so it is also the fastest end
            to end.
        ar_tokens_per_second: predicted plain-sampling decode speed.
        candidates: every Prediction, fastest first.
        margin: the relative gain required to speculate.
        prompt_tokens, new_tokens: the generation's prompt length and the tokens it asks for,
            or None when the choice ignores the prefill (a long generation).
        target_prefill_s, draft_prefill_s: the predicted prefills of the prompt (seconds), or
            None without the lengths (``ar_seconds``, ``speculative_seconds`` add the decode).
    ``speculate`` (a property): whether to speculate, the decision (``choose``).
    """

    best: Prediction
    ar_tokens_per_second: float
    candidates: tuple[Prediction, ...]
    margin: float
    prompt_tokens: int | None = None
    new_tokens: int | None = None
    target_prefill_s: float | None = None
    draft_prefill_s: float | None = None

    @property
    def speculate(self) -> bool:
        """The decision: speculate when plain sampling's predicted seconds are at least
        (1 + margin) × the best candidate's, counting what differs between them — with the
        lengths, the decode of ``new_tokens`` and the draft's prefill of the prompt; without
        them, the decode alone (tokens per second).  Ties speculate.  ``predicted_speedup`` is
        the same comparison as a ratio."""
        if self.new_tokens is None:
            return bool(self.best.tokens_per_second >= (1.0 + self.margin) * self.ar_tokens_per_second)
        return bool(self.new_tokens / self.ar_tokens_per_second
                    >= (1.0 + self.margin) * (self.draft_prefill_s + self.new_tokens / self.best.tokens_per_second))

    @property
    def decode_speedup(self) -> float:
        """The best candidate's predicted decode tokens/s over plain sampling's."""
        return self.best.tokens_per_second / self.ar_tokens_per_second

    @property
    def ar_seconds(self) -> float | None:
        """Plain sampling's predicted seconds end to end (the target's prefill and the decode of
        ``new_tokens``), or None without the lengths."""
        if self.new_tokens is None:
            return None
        return self.target_prefill_s + self.new_tokens / self.ar_tokens_per_second

    @property
    def speculative_seconds(self) -> float | None:
        """The best candidate's predicted seconds end to end (both prefills and the decode), or
        None without the lengths."""
        if self.new_tokens is None:
            return None
        return self.target_prefill_s + self.draft_prefill_s + self.new_tokens / self.best.tokens_per_second

    @property
    def predicted_speedup(self) -> float:
        """``speculate``'s comparison as a ratio (speculate iff ≥ 1 + margin): with the lengths, plain
        sampling's predicted decode seconds over the best candidate's decode seconds plus the
        draft's prefill (the parts that differ); without them ``decode_speedup``."""
        if self.new_tokens is None:
            return self.decode_speedup
        return ((self.new_tokens / self.ar_tokens_per_second)
                / (self.draft_prefill_s + self.new_tokens / self.best.tokens_per_second))

    @property
    def end_to_end_speedup(self) -> float | None:
        """Plain sampling's predicted seconds end to end over the best candidate's (the target's
        prefill on both sides), or None without the lengths."""
        return None if self.new_tokens is None else self.ar_seconds / self.speculative_seconds


def choose(costs: Costs, acc: Acceptance, Ks, Ls, margin: float = MARGIN, *,
           prompt_tokens: int | None = None, new_tokens: int | None = None) -> Choice:
    """The (K, L) with the most predicted decode tokens per second, and whether to speculate
    with it or to sample plainly.

    With the generation's lengths the decision counts the draft's prefill (item 4 of the module
    docstring): speculate when plain sampling's predicted decode seconds are at least
    (1 + margin) × the best candidate's decode seconds plus the draft's prefill of the prompt
    (the target's prefill is the same either way).  Without them it is on decode speed alone,
    the limit of a long generation (prefill amortised).  Ties speculate.

    Args:
        costs: measured costs; ``costs.overhead`` must hold every (K, L) of Ks × Ls, and
            ``costs.prefill_s`` the draft and the target when the lengths are given.
        acc: measured acceptance with K_max ≥ max(Ks).
        Ks, Ls: candidate drafts and block lengths (integers ≥ 1).
        margin: the relative gain required, a finite number ≥ 0 (``MARGIN``: the prediction is
            an estimate, and a wrong "yes" costs more than a wrong "no" on a machine where
            speculation does not pay).
        prompt_tokens: the prompt's length in tokens, with ``new_tokens``, or neither.
        new_tokens: the tokens the generation asks for (``max_new_tokens``); both in
            1..``MAX_TOKENS``.
    Returns:
        Choice.
    Raises:
        ValueError: empty or non-integer candidates, a (K, L) without a measured overhead, K
            above the calibrated K_max, a forward outside the measured token range; a margin
            that is not a finite number ≥ 0; only one of the lengths, or a length that is not
            an integer in 1..``MAX_TOKENS``; no measured prefill with the lengths.
    """
    if not _is_seconds(margin):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    _check_lengths(prompt_tokens, new_tokens)
    Ks, Ls = tuple(Ks), tuple(Ls)
    for name, values in (("Ks", Ks), ("Ls", Ls)):
        if not all(is_count(v, 1) for v in values):
            raise ValueError(f"{name} must hold integers >= 1, got {values}")
    preds = []
    for K in Ks:
        for L in Ls:
            if (K, L) not in costs.overhead:
                raise ValueError(f"no measured overhead for K={K}, L={L}")
            e = expected_tokens(acc, int(K), int(L))
            preds.append(Prediction(int(K), int(L), e, iteration_seconds(costs, K, L, accepted=e - 1)))
    if not preds:
        raise ValueError("Ks and Ls must not be empty")
    # fastest first; ties to the smaller K, then the smaller L (cheaper memory, same speed)
    preds.sort(key=lambda p: (-p.tokens_per_second, p.K, p.L))
    choice = Choice(preds[0], 1.0 / ar_seconds_per_token(costs), tuple(preds), float(margin))
    return choice if prompt_tokens is None else for_lengths(choice, costs, prompt_tokens, new_tokens)


def _check_lengths(prompt_tokens, new_tokens) -> None:
    if (prompt_tokens is None) != (new_tokens is None):
        raise ValueError(f"give both prompt_tokens and new_tokens or neither, got {prompt_tokens!r} and {new_tokens!r}")
    for name, value in (("prompt_tokens", prompt_tokens), ("new_tokens", new_tokens)):
        if value is not None and not is_count(value, 1):
            raise ValueError(f"{name} must be an integer in 1..{MAX_TOKENS}, got {value!r}")


def for_lengths(choice: Choice, costs: Costs, prompt_tokens: int, new_tokens: int) -> Choice:
    """``choice`` (of ``choose`` on ``costs``, with or without lengths) for a generation of
    ``new_tokens`` after a prompt of ``prompt_tokens``: the same candidates, the prefills
    predicted from ``costs``, the decision (``Choice.speculate``) then counting the draft's
    prefill.  Nothing is re-predicted.

    Raises:
        ValueError: a length that is not an integer in 1..``MAX_TOKENS`` (None included), no
            measured prefill, or predicted seconds that overflow.
    """
    if prompt_tokens is None or new_tokens is None:
        raise ValueError(f"prompt_tokens and new_tokens must be integers >= 1, got {prompt_tokens!r} "
                         f"and {new_tokens!r}")
    _check_lengths(prompt_tokens, new_tokens)
    n, N = int(prompt_tokens), int(new_tokens)
    target_prefill, draft_prefill = costs.prefill("target", n), costs.prefill("draft", n)
    if not np.isfinite(target_prefill + draft_prefill + N / choice.ar_tokens_per_second
                       + N / choice.best.tokens_per_second):
        raise ValueError(f"the predicted seconds for prompt_tokens={n}, new_tokens={N} overflow: the lengths "
                         "or the measured prefill are too large")
    return dataclasses.replace(choice, prompt_tokens=n, new_tokens=N, target_prefill_s=target_prefill,
                               draft_prefill_s=draft_prefill)
