"""What a verifier returns: the Verdict, and the modification record of greedy rules.

A greedy rule (GBV, SpecTr-GBV, K-SEQ-GBV) leaves the window positions after its emitted
tokens with a modified target (SpecTr-GBV Algorithm 2; docs/rules.md §3):
``q̃(x | s_≤j) ∝ w(s_≤j, x)`` where ``w`` is a function of the joint probabilities of the
window's target and of the draft, counted from the window's start.  The record carries that
function (``kind`` and its parameters) and the joints of the emitted tokens, from which the
decode loop continues the joints token by token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spectr_gbv.reference.contract import MODIFICATION_KINDS, modification_weights

__all__ = ["MODIFICATION_KINDS", "Modification", "Verdict", "min_ratio"]


@dataclass(frozen=True)
class Modification:
    """Algorithm 2's record of one iteration, for the positions of its window after the emitted
    tokens.

    Attributes:
        kind: "excess" or "spectr_gbv" (see module doc).
        K: number of drafts (used by "spectr_gbv").
        rho: the scale ρ of "excess" (1 for GBV).
        q_joint: target joint probability of the emitted tokens (accepted prefix + correction),
            counted from the window's start, under the target the verifier was given.
        p_joint: draft joint probability of the same tokens.
    """

    kind: str
    K: int
    rho: float
    q_joint: float
    p_joint: float

    def weights(self, q_joint: np.ndarray, p_joint: np.ndarray) -> np.ndarray:
        """w(z) for arrays of joint probabilities (``reference.contract.modification_weights``).

        Args:
            q_joint, p_joint: float64 arrays of the same shape (e.g. [V]: the joints of z·x for
                every next token x), ≥ 0.
        Returns:
            float64 array of the same shape, non-negative, never NaN.
        Raises:
            ValueError: unknown ``kind``.
        """
        return modification_weights(self.kind, self.K, self.rho, np.asarray(q_joint, dtype=np.float64),
                                    np.asarray(p_joint, dtype=np.float64))


@dataclass(frozen=True)
class Verdict:
    """The outcome of one verification.

    Attributes:
        tau: τ, number of accepted draft tokens, 0 ≤ τ ≤ L.
        selected: index of the draft whose first τ tokens were emitted (the lowest such index
            for rules that keep several drafts alive); -1 when τ = 0.
        tokens: emitted tokens: the τ accepted draft tokens, then the correction (τ < L) or
            the bonus token (τ = L); length τ + 1.
        modification: Algorithm 2's record (greedy rules with the modification on and τ < L),
            else None.
    """

    tau: int
    selected: int
    tokens: tuple[int, ...]
    modification: Modification | None = None

    @property
    def accepted(self) -> tuple[int, ...]:
        return self.tokens[: self.tau]

    @property
    def last_token(self) -> int:
        """The correction or bonus token."""
        return self.tokens[-1]


def min_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """m = min(1, num/den), with m = 1 where den = 0 (docs/rules.md §1); float64, never NaN."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    safe = np.where(den > 0, den, 1.0)
    return np.where(den > 0, np.minimum(1.0, num / safe), 1.0)
