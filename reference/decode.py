"""The speculative-decoding loop on toy models, with Algorithm 2's stack of modified targets.

One iteration: K i.i.d. draft blocks of L tokens from the draft model, verified against the
*effective* target — the target model seen through every live modification window (docs/rules.md
§3).  A greedy rule's verdict opens a window: the positions of its block after the emitted
tokens are generated from ``q̃(x | s) ∝ w(s, x)``, w a function of the joints of the window's
own target (the effective target beneath it) and of the draft, counted from the window's start.
Windows stack: the newest one modifies what the older ones already modified.

``DecodeState`` is immutable; ``advance`` returns a new state.  ``generate`` samples a whole
generation; ``reference.exact`` computes exact laws over the same states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from spectr_gbv.reference.models import ToyModel
from spectr_gbv.reference.randomness import SamplingSource, Source
from spectr_gbv.reference.rules.base import Rule
from spectr_gbv.reference.validation import check_positive_int
from spectr_gbv.reference.verdict import Modification, Verdict


@dataclass(frozen=True)
class Window:
    """A live modification window.

    Attributes:
        start: index of the window's first position (number of tokens emitted before it).
        end: start + L; positions < end that are not yet emitted are modified.
        modification: the weight function (kind and parameters; its joints are those at
            creation and are not used after it).
        q_joint, p_joint: joints of the tokens emitted since ``start`` under the window's own
            target and under the draft.
    """

    start: int
    end: int
    modification: Modification
    q_joint: float
    p_joint: float

    def key(self) -> tuple:
        # The joints belong in the key: they depend on windows already dropped (the target
        # beneath this window may itself have been modified), not only on the tokens.
        m = self.modification
        return (self.start, self.end, m.kind, m.K, m.rho, float(self.q_joint), float(self.p_joint))


@dataclass(frozen=True)
class DecodeState:
    """Emitted tokens (from the start of generation) and the live windows, oldest first."""

    tokens: tuple[int, ...] = ()
    windows: tuple[Window, ...] = ()

    def key(self) -> tuple:
        """Hashable identity: two states with the same key behave identically."""
        return (self.tokens, tuple(w.key() for w in self.windows))


@dataclass
class Decoder:
    """Draft and target toy models with K drafts of L tokens per iteration.

    Args:
        draft, target: ToyModels on the same vocabulary.
        K: number of drafts ≥ 1.  L: block length ≥ 1.
    Raises:
        ValueError: on K < 1, L < 1 or a vocabulary mismatch.
    """

    draft: ToyModel
    target: ToyModel
    K: int
    L: int
    _rows: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.K = check_positive_int(self.K, "K")
        self.L = check_positive_int(self.L, "L")
        if self.draft.vocab_size != self.target.vocab_size:
            raise ValueError(
                f"vocabulary mismatch: draft has V = {self.draft.vocab_size}, "
                f"target has V = {self.target.vocab_size}"
            )

    @property
    def V(self) -> int:
        return self.target.vocab_size

    # -- the effective target -------------------------------------------------------------
    def _layers(self, windows, joints, context) -> tuple[np.ndarray, list[np.ndarray]]:
        """Effective target row after ``context`` and the row beneath each window."""
        row = self.target.conditional(context)
        p_row = self.draft.conditional(context)
        pos = len(context)
        bases = []
        for w, (qj, pj) in zip(windows, joints):
            bases.append(row)
            if pos < w.end:
                wts = w.modification.weights(qj * row, pj * p_row)
                total = wts.sum()
                # total = 0 only off the support of the window's law; keep the target there
                row = wts / total if total > 0 else row
        return row, bases

    def _entry(self, state: DecodeState, extension: tuple[int, ...]):
        """(p_row, q_row, window joints, rows beneath each window) after the extension."""
        key = (state.key(), extension)
        entry = self._rows.get(key)
        if entry is None:
            if extension:
                p_parent, _, joints_parent, bases_parent = self._entry(state, extension[:-1])
                x = extension[-1]
                joints = [(qj * base[x], pj * p_parent[x])
                          for (qj, pj), base in zip(joints_parent, bases_parent)]
            else:
                joints = [(w.q_joint, w.p_joint) for w in state.windows]
            context = state.tokens + extension
            q_row, bases = self._layers(state.windows, joints, context)
            entry = (self.draft.conditional(context), q_row, joints, bases)
            self._rows[key] = entry
        return entry

    def rows(self, state: DecodeState, extension: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Draft row and effective target row after ``state.tokens + extension``.

        Returns:
            (p_row, q_row), float64 [V] each (memoised per state key until ``clear_cache``).
        """
        entry = self._entry(state, tuple(extension))
        return entry[0], entry[1]

    def clear_cache(self) -> None:
        self._rows.clear()

    # -- one iteration --------------------------------------------------------------------
    def block_inputs(self, state: DecodeState, drafts: list[tuple[int, ...]]):
        """The verifier's inputs for the given draft blocks (docs/design.md §2 contract).

        Returns:
            draft_tokens int64 [K, L], draft_probs float64 [K, L, V], target_probs [K, L+1, V],
            L the drafts' common length (``self.L`` unless a stopping policy ended them early).
        """
        K, L, V = len(drafts), len(drafts[0]), self.V
        tokens = np.array(drafts, dtype=np.int64).reshape(K, L)
        dp = np.empty((K, L, V))
        tp = np.empty((K, L + 1, V))
        for k, block in enumerate(drafts):
            for i in range(L + 1):
                p_row, q_row = self.rows(state, tuple(block[:i]))
                tp[k, i] = q_row
                if i < L:
                    dp[k, i] = p_row
        return tokens, dp, tp

    def draft_blocks(self, state: DecodeState, source: Source) -> list[tuple[int, ...]]:
        """K independent blocks of L tokens drawn from the draft model."""
        drafts = []
        for _ in range(self.K):
            block: tuple[int, ...] = ()
            for _ in range(self.L):
                p_row, _ = self.rows(state, block)
                block = block + (source.draw(p_row),)
            drafts.append(block)
        return drafts

    def iterate(self, state: DecodeState, rule: Rule, source: Source) -> tuple[Verdict, DecodeState]:
        """Draft, verify, advance: one iteration (one target call)."""
        drafts = self.draft_blocks(state, source)
        verdict = rule.verify(*self.block_inputs(state, drafts), source)
        return verdict, self.advance(state, verdict)

    def advance(self, state: DecodeState, verdict: Verdict, L: int | None = None) -> DecodeState:
        """The state after emitting ``verdict.tokens``, with its modification window pushed.

        Older windows continue their joints over the emitted tokens under their own targets;
        windows whose positions are all emitted are dropped.  ``L``: the verified block's
        length (default ``self.L``; shorter when drafting stopped early), the new window's span.
        """
        L = self.L if L is None else L
        emitted = tuple(int(x) for x in verdict.tokens)
        joints = self._entry(state, emitted)[2]
        context = state.tokens + emitted
        n = len(context)
        kept = [
            Window(w.start, w.end, w.modification, qj, pj)
            for w, (qj, pj) in zip(state.windows, joints)
            if w.end > n
        ]
        mod = verdict.modification
        start = len(state.tokens)
        if mod is not None and start + L > n:
            kept.append(Window(start, start + L, mod, mod.q_joint, mod.p_joint))
        return DecodeState(context, tuple(kept))


@dataclass
class GenerationStats:
    """Counts of one sampled generation."""

    tokens: tuple[int, ...]
    target_calls: int
    taus: list[int]

    @property
    def tokens_per_call(self) -> float:
        return len(self.tokens) / self.target_calls


def generate(rule: Rule, draft: ToyModel, target: ToyModel, K: int, L: int, n_tokens: int,
             seed: int | np.random.Generator = 0) -> GenerationStats:
    """Sample a generation of at least ``n_tokens`` tokens (truncated to n_tokens).

    Args:
        rule: a reference Rule.
        draft, target: toy models.
        K, L: drafts and block length (≥ 1).
        n_tokens: tokens to emit (≥ 1).
        seed: int seed or numpy Generator.
    Returns:
        GenerationStats (tokens, number of target calls = iterations, τ per iteration).
    """
    n_tokens = check_positive_int(n_tokens, "n_tokens")
    decoder = Decoder(draft, target, K, L)
    source = SamplingSource(seed)
    state = DecodeState()
    taus = []
    while len(state.tokens) < n_tokens:
        verdict, state = decoder.iterate(state, rule, source)
        taus.append(verdict.tau)
        decoder.clear_cache()
    return GenerationStats(state.tokens[:n_tokens], len(taus), taus)
