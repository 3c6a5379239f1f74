"""A claim of the papers as a numerical check: the record proofs_check/claims.py builds and
proofs_check/runner.py runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from spectr_gbv.proofs_check.instances import Instance

__all__ = ["Claim"]


@dataclass
class Claim:
    """One claim of the papers as a numerical check.

    Attributes:
        id: the claim's number (sub-claims "5a", "5b", …).
        claim: the statement checked; ``{instances}`` in it is replaced by the number of
            instances the run tried (``run_claim``), so that a claim worded "on the N instances
            searched" states the N of its own run.
        source: paper and theorem/lemma/algorithm number.
        measure: instance → deviation ≥ 0 (0 when the claim holds exactly on it).
        tol: the claim holds on an instance iff deviation ≤ tol.
        fixed: mode ("quick"/"full") → instances always tried first (e.g. the toy).
        space: keyword arguments of ``instances`` for the hypothesis search, or None for none.
        examples: hypothesis examples (full run); quick runs use ``quick_examples``.
        existential: the claim asserts that an instance with deviation > tol exists.
        note: printed beside the verdict (e.g. what a counterexample means).
    """

    id: str
    claim: str
    source: str
    measure: Callable[[Instance], float]
    tol: float
    fixed: Callable[[str], list[Instance]]
    space: dict | None = None
    examples: int = 40
    quick_examples: int = 6
    existential: bool = False
    note: str = ""
