"""The verifier contract of docs/design.md §2.1, shared by every reference rule.

A rule is split in two so that one implementation serves both sampling and exact enumeration:
``prepare`` validates one iteration's inputs and computes everything deterministic (joint
probabilities, acceptance probabilities); ``decide`` asks the source for coins and draws and
returns the Verdict.  ``verify`` = ``decide(prepare(...))``.  The enumerator replays only
``decide``, once per branch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from spectr_gbv.reference.contract import BatchVerdict
from spectr_gbv.reference.randomness import Source
from spectr_gbv.reference.validation import check_iteration_inputs
from spectr_gbv.reference.verdict import Verdict


@dataclass
class Block:
    """One iteration's validated inputs and derived joint probabilities.

    Attributes:
        tokens: int64 [K, L] draft tokens X^(k)_i (0-based i).
        dp: float64 [K, L, V]; row i is the draft's law of the next token after the first i
            tokens of draft k, p(· | c, X^(k)_1..X^(k)_i).
        tp: float64 [K, L+1, V], same for the target; row L is the bonus row.
        pj: float64 [K, L+1], pj[k, i] = p(X^(k)_≤i), the draft joint of the first i tokens
            (pj[k, 0] = 1).
        qj: float64 [K, L+1], the target joint of the same sub-blocks.
        log_pj, log_qj: float64 [K, L+1], their logarithms (−inf where 0), summed from the
            rows so that long blocks keep ratios q(z)/p(z) where the joints underflow.
        plan: rule-specific deterministic quantities (filled by the rule's ``plan``).
    """

    tokens: np.ndarray
    dp: np.ndarray
    tp: np.ndarray
    pj: np.ndarray
    qj: np.ndarray
    log_pj: np.ndarray
    log_qj: np.ndarray
    plan: dict = field(default_factory=dict)

    @property
    def K(self) -> int:
        return self.tokens.shape[0]

    @property
    def L(self) -> int:
        return self.tokens.shape[1]

    @property
    def V(self) -> int:
        return self.dp.shape[2]

    def prefix(self, k: int, i: int) -> tuple[int, ...]:
        """The first i tokens of draft k as a tuple."""
        return tuple(int(t) for t in self.tokens[k, :i])


def make_block(draft_tokens, draft_probs, target_probs) -> Block:
    """Validate the inputs (see ``check_iteration_inputs``) and compute the sub-block joints."""
    tokens, dp, tp = check_iteration_inputs(draft_tokens, draft_probs, target_probs)
    K, L = tokens.shape
    p_step = np.take_along_axis(dp, tokens[:, :, None], axis=2)[:, :, 0]
    q_step = np.take_along_axis(tp[:, :L], tokens[:, :, None], axis=2)[:, :, 0]
    pj = np.concatenate([np.ones((K, 1)), np.cumprod(p_step, axis=1)], axis=1)
    qj = np.concatenate([np.ones((K, 1)), np.cumprod(q_step, axis=1)], axis=1)
    with np.errstate(divide="ignore"):
        log_pj = np.concatenate([np.zeros((K, 1)), np.cumsum(np.log(p_step), axis=1)], axis=1)
        log_qj = np.concatenate([np.zeros((K, 1)), np.cumsum(np.log(q_step), axis=1)], axis=1)
    return Block(tokens, dp, tp, pj, qj, log_pj, log_qj)


def draw_residual(source: Source, weights: np.ndarray, fallback: np.ndarray) -> int:
    """Draw the correction ∝ ``weights``; if they have no mass, from ``fallback``.

    The rules only reach a residual with mass 0 on branches of probability 0 (they are
    reachable by sampling only through rounding), where any token of the target row keeps the
    output well-defined.
    """
    weights = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    if weights.sum() > 0:
        return source.draw(weights)
    return source.draw(fallback)


class Rule(ABC):
    """Base class of the reference verifiers (the contract of docs/design.md §2.1).

    Subclasses set ``name`` and ``single_draft`` and implement ``plan`` and ``decide``.
    ``modifies_targets`` says whether the rule (with its parameters) returns Algorithm 2
    records that the decode loop must carry into later iterations.
    """

    name: str = ""
    single_draft: bool = False
    modifies_targets: bool = False

    def prepare(self, draft_tokens, draft_probs, target_probs) -> Block:
        """Validate one iteration's inputs and compute the deterministic part of the rule.

        Args:
            draft_tokens: int [K, L].
            draft_probs: float [K, L, V], p(· | c, X^(k)_<i).
            target_probs: float [K, L+1, V], q(· | c, X^(k)_<i); row L is the bonus row.
        Returns:
            Block with ``plan`` filled.
        Raises:
            ValueError: malformed inputs (see ``check_iteration_inputs``), or K ≠ 1 for a
                single-draft rule.
        """
        block = make_block(draft_tokens, draft_probs, target_probs)
        self.check_draft_count(block.K)
        self.plan(block)
        return block

    def check_draft_count(self, K: int) -> None:
        """Raise ValueError if the rule cannot take K drafts (single-draft rules need K = 1)."""
        if self.single_draft and K != 1:
            raise ValueError(f"rule {self.name!r} is single-draft: K must be 1, got K = {K}")

    def plan(self, block: Block) -> None:
        """Fill ``block.plan`` with deterministic quantities (default: nothing)."""

    @abstractmethod
    def decide(self, block: Block, source: Source) -> Verdict:
        """The random part of the rule: coins and draws from ``source``."""

    def verify(self, draft_tokens, draft_probs, target_probs, source: Source) -> Verdict:
        """One verification (docs/design.md §2.1 contract): ``decide(prepare(inputs), source)``."""
        return self.decide(self.prepare(draft_tokens, draft_probs, target_probs), source)

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None,
                 validate: bool = True) -> BatchVerdict:
        """B verifications with the batched contract (reference/contract.py; numpy out):
        ``reference.batched.verify_batch`` of this rule.  Shapes [B, K, L], [B, K, L, V],
        [B, K, L+1, V]; seeds int [B] or noise (uniforms [B, K, L+1], exponentials [B, V]).

        Raises:
            ValueError: malformed inputs, naming the argument and the batch row.
        """
        from spectr_gbv.reference.batched import verify_batch

        return verify_batch(self, draft_tokens, draft_probs, target_probs, seeds=seeds,
                            noise=noise, validate=validate)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
