"""Draft-side stopping: the block length chosen while drafting, from draft-side information only.

A stopping policy looks, after each drafted position i = 1..L−1, at the draft's rows and the
drafted tokens of that position (all K drafts, drafted in lockstep as the engine does) and
decides whether to stop drafting there; the block then has S = i positions (S = L if it never
stops) and the verifier runs on [K, S].  The decision never reads the target, so it costs no
target call; it is what transformers' assisted generation does with
``assistant_confidence_threshold`` (its ``ConfidenceCriteria`` stops the assistant once the
probability of the token it just drafted falls below the threshold).

Whether a rule stays lossless when L is such a stopping time is a property of the rule, not a
given: a rule whose decision at position i reads only the drafts' tokens up to i (token
verification, K-SEQ) keeps the target's law, because given the emitted prefix the next token is
either the bonus (drawn from the target) or verified against fresh draft tokens; a rule that
decides a prefix jointly with the tokens after it (block verification and its relatives) was
proved lossless for a fixed L only.  ``reference.exact`` computes the exact law under a policy
(``generation_law(..., stop=policy)``); proofs_check/draft_stopping_study.py (table in
proofs_check/DRAFT_STOPPING.md) and tests/reference/test_draft_stopping.py check every
registered rule, and the registry's ``draft_stopping`` flag records the verdict.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class StoppingPolicy(Protocol):
    """Decides, from draft-side information only, whether to stop drafting after a position."""

    def __call__(self, position: int, draft_rows: np.ndarray, tokens: np.ndarray) -> bool:
        """Stop after drafted position ``position``?

        Args:
            position: 1-based index of the position just drafted (1 ≤ position < L).
            draft_rows: float64 [K, V], the draft's row each draft sampled that position from.
            tokens: int64 [K], the tokens drafted there.
        Returns:
            True to end the block here (S = position).
        """


@dataclass(frozen=True)
class ConfidenceStop:
    """Stop when the drafted tokens' own draft probabilities fall below ``threshold``.

    With K = 1 this is transformers' ``ConfidenceCriteria`` (``assistant_confidence_threshold``,
    default 0.4 there): stop after a token whose draft probability is < threshold.  With K ≥ 2
    drafts drafted in lockstep, ``combine`` says whose confidence counts: "all" stops when every
    draft is unsure (the block goes on while one draft is confident), "any" when one is.

    Raises:
        ValueError: threshold not a real number in [0, 1] (NaN, a bool or a string included),
            or combine not "all"/"any".
    """

    threshold: float
    combine: str = "all"

    def __post_init__(self):
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0.0 <= float(t) <= 1.0:
            raise ValueError(f"threshold must be a number in [0, 1], got {t!r}")  # NaN fails too
        object.__setattr__(self, "threshold", float(t))
        if self.combine not in ("all", "any"):
            raise ValueError(f"combine must be 'all' or 'any', got {self.combine!r}")

    def __call__(self, position: int, draft_rows: np.ndarray, tokens: np.ndarray) -> bool:
        conf = np.take_along_axis(np.asarray(draft_rows), np.asarray(tokens)[:, None], axis=1)[:, 0]
        return self.decide(conf)

    def decide(self, confidences) -> bool:
        """The decision from the K drafted tokens' draft probabilities (a sequence of floats);
        the engine computes them on its device and reads only these K numbers."""
        unsure = [float(c) < self.threshold for c in confidences]
        return all(unsure) if self.combine == "all" else any(unsure)


def stopped_configurations(decoder, state, stop: StoppingPolicy) -> list[tuple[list[tuple[int, ...]], float]]:
    """Every configuration of the K lockstep drafts under ``stop``, with its probability.

    Args:
        decoder: ``reference.decode.Decoder`` (models, K, L).
        state: the decode state drafted from.
        stop: the policy; consulted after positions 1..L−1.
    Returns:
        list of (K blocks of a common length S ∈ [1, L], probability); probabilities sum to 1.
    """
    out = []
    K, L = decoder.K, decoder.L

    def walk(blocks: list[tuple[int, ...]], prob: float) -> None:
        i = len(blocks[0])
        if i == L:
            out.append((blocks, prob))
            return
        rows = [decoder.rows(state, b)[0] for b in blocks]
        supports = [np.flatnonzero(r > 0) for r in rows]
        for combo in np.array(np.meshgrid(*supports, indexing="ij")).reshape(K, -1).T:
            pr = prob * float(np.prod([rows[k][x] for k, x in enumerate(combo)]))
            nxt = [b + (int(x),) for b, x in zip(blocks, combo)]
            if i + 1 < L and decision(stop, stop(i + 1, np.stack(rows), np.asarray(combo, dtype=np.int64))):
                out.append((nxt, pr))
            else:
                walk(nxt, pr)

    walk([()] * K, 1.0)
    return out


@dataclass(frozen=True)
class StopAt:
    """Always stop after position ``position`` (a fixed shorter block: a sanity case, since a
    constant length is a stopping time that every rule lossless at that length survives).

    Raises:
        ValueError: position not an int ≥ 1 (bools refused).  A position ≥ L never stops.
    """

    position: int

    def __post_init__(self):
        if isinstance(self.position, bool) or not isinstance(self.position, numbers.Integral) or self.position < 1:
            raise ValueError(f"position must be an integer >= 1, got {self.position!r}")

    def __call__(self, position: int, draft_rows: np.ndarray, tokens: np.ndarray) -> bool:
        return position == self.position


def block_cap(emitted: int, n_tokens: int, L: int) -> int:
    """The most positions worth drafting when ``emitted`` of ``n_tokens`` tokens are out.

    An iteration emits at most S + 1 tokens (τ ≤ S accepted, then a correction or the bonus
    token), so S = n_tokens − emitted − 1 positions reach the limit; at least one position is
    drafted (the verifier takes S ≥ 1).  The cap reads only the number of tokens emitted, never
    a draft or target row, so for a rule lossless under draft-side stopping it is one more
    stopping time; proofs_check/BLOCK_CAP.md checks every rule under it exactly.

    Args:
        emitted: tokens emitted so far (int ≥ 0).  n_tokens: the generation's limit (≥ 1).
        L: the block length (≥ 1).
    Returns:
        int S_max ∈ [1, L].
    """
    return max(1, min(L, n_tokens - emitted - 1))


@dataclass(frozen=True)
class Capped:
    """``stop`` with drafting also ended after position ``cap`` (reference.draft_stopping.block_cap).

    Args:
        cap: int ≥ 1; a cap ≥ L never stops.  stop: a policy, or None for none.
    Raises:
        ValueError: cap not an integer ≥ 1 (bools refused), or stop neither None nor callable.
    """

    cap: int
    stop: StoppingPolicy | None = None

    def __post_init__(self):
        if isinstance(self.cap, bool) or not isinstance(self.cap, numbers.Integral) or self.cap < 1:
            raise ValueError(f"cap must be an integer >= 1, got {self.cap!r}")
        check_policy(self.stop)

    def __call__(self, position: int, draft_rows: np.ndarray, tokens: np.ndarray) -> bool:
        if position >= self.cap:
            return True
        return self.stop is not None and decision(self.stop, self.stop(position, draft_rows, tokens))


def check_policy(stop, name: str = "stop"):
    """``stop`` itself if it is None or callable.

    Raises:
        ValueError: anything else (e.g. a bare threshold: pass ``ConfidenceStop(0.4)``),
            naming ``name``.
    """
    if stop is not None and not callable(stop):
        raise ValueError(f"{name} must be a stopping policy (e.g. ConfidenceStop(0.4)) or None, got {stop!r}")
    return stop


def decision(stop, value) -> bool:
    """A policy's answer as a bool.

    Raises:
        ValueError: the policy returned something other than a bool (numpy bools accepted),
            naming the policy and the value.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"stopping policy {stop!r} must return a bool, got {value!r}")
