"""Running a claim: fixed instances first, then a hypothesis search with shrinking.

A claim measures, on one instance, its *deviation*: how far the instance is from satisfying
the claim (0 when it holds exactly).  A universal claim ("on every instance …") holds when
every instance tried has deviation ≤ tol; the search looks for a violation and hypothesis
shrinks the first one it finds to a small counterexample.  An existential claim ("there is an
instance where …", e.g. "without Algorithm 2 GBV is not lossless") holds when a witness with
deviation > tol is found; the search shrinks the witness.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample, Unsatisfiable

from spectr_gbv.proofs_check.instances import Instance, instances


@dataclass
class Claim:
    """One claim of the papers as a numerical check.

    Attributes:
        id: the claim's number (sub-claims "5a", "5b", …).
        claim: the statement checked.
        source: paper and theorem/lemma/algorithm number.
        measure: instance → deviation ≥ 0 (0 when the claim holds exactly on it).
        tol: the claim holds on an instance iff deviation ≤ tol.
        fixed: mode ("quick"/"full") → instances always tried first (e.g. the toy).
        space: keyword arguments of ``instances`` for the hypothesis search, or None for none.
        examples: hypothesis examples (full run); quick runs use ``quick_examples``.
        existential: the claim asserts that an instance with deviation > tol exists.
        tokens: N, the emitted tokens over which laws are compared (None if not applicable).
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


@dataclass
class ClaimResult:
    """The verdict table's row (its JSON keys)."""

    id: str
    claim: str
    source: str
    instances: int
    verdict: str  # "holds" | "fails"
    worst_deviation: float
    counterexample: dict | None
    witness: dict | None = None
    tolerance: float = 0.0
    seconds: float = 0.0
    note: str = ""
    instance_label: str = ""

    def to_json(self) -> dict:
        return {
            "id": self.id, "claim": self.claim, "source": self.source, "instances": self.instances,
            "verdict": self.verdict, "worst_deviation": self.worst_deviation,
            "counterexample": self.counterexample, "witness": self.witness, "tolerance": self.tolerance,
            "seconds": round(self.seconds, 3), "note": self.note, "instance_label": self.instance_label,
        }


def _export(inst: Instance) -> dict:
    # model files tabulate prefixes up to the tokens the laws were computed over
    return inst.to_json(depth=inst.L + 2)


def run_claim(claim: Claim, mode: str = "quick", seed: int = 0) -> ClaimResult:
    """Evaluate ``claim`` on its fixed instances and a hypothesis search.

    Args:
        claim: the Claim.
        mode: "quick" (few examples) or "full".
        seed: not used by hypothesis (derandomised); kept for API stability.
    Returns:
        ClaimResult.
    """
    start = time.perf_counter()
    tried = 0
    worst = 0.0
    worst_label = ""

    def deviation(inst: Instance) -> float:
        nonlocal tried, worst, worst_label
        d = float(claim.measure(inst))
        if math.isnan(d):
            d = math.inf
        tried += 1
        if d > worst:
            worst, worst_label = d, str(inst)
        return d

    # universal claims search for a violation, existential ones for a witness: both are an
    # instance whose deviation exceeds the tolerance
    def violates(inst: Instance) -> bool:
        return deviation(inst) > claim.tol

    found: Instance | None = None
    for inst in claim.fixed(mode):
        if violates(inst):
            found = inst
            break
    if found is None and claim.space is not None:
        n = claim.quick_examples if mode == "quick" else claim.examples
        try:
            found = find(
                instances(**claim.space),
                violates,
                settings=settings(max_examples=n, database=None, derandomize=True, deadline=None,
                                  suppress_health_check=list(HealthCheck),
                                  phases=[Phase.generate, Phase.shrink]),
            )
        except (NoSuchExample, Unsatisfiable):
            found = None
    elif found is not None and claim.space is not None and not claim.existential:
        # a fixed instance violates: still let hypothesis look for a smaller one
        n = claim.quick_examples if mode == "quick" else claim.examples
        try:
            smaller = find(instances(**claim.space), violates,
                           settings=settings(max_examples=n, database=None, derandomize=True, deadline=None,
                                             suppress_health_check=list(HealthCheck),
                                             phases=[Phase.generate, Phase.shrink]))
            if _size(smaller) < _size(found):
                found = smaller
        except (NoSuchExample, Unsatisfiable):
            pass
    seconds = time.perf_counter() - start
    if claim.existential:
        verdict = "holds" if found is not None else "fails"
        return ClaimResult(claim.id, claim.claim, claim.source, tried, verdict, worst, None,
                           _export(found) if found is not None else None, claim.tol, seconds, claim.note,
                           str(found) if found is not None else worst_label)
    verdict = "fails" if found is not None else "holds"
    return ClaimResult(claim.id, claim.claim, claim.source, tried, verdict, worst,
                       _export(found) if found is not None else None, None, claim.tol, seconds, claim.note,
                       str(found) if found is not None else worst_label)


def _size(inst: Instance) -> tuple:
    return (inst.V ** (inst.K * inst.L), inst.V, inst.K, inst.L)


@dataclass
class Verdicts:
    results: list[ClaimResult] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    mode: str = "quick"
