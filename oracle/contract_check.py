"""A certification's deterministic check: ``SeedCheck``, the type of every check of the batched
contract a certification report lists (its ``seed_checks``): the seed and batch checks of
oracle/seed_contract.py, the output and input checks of oracle/output_checks.py and the greedy
rows of oracle/mixed_batches.py (``oracle.harness.CONTRACT_CHECK_NAMES``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from spectr_gbv.oracle.outcome import verdict_word

__all__ = ["SeedCheck", "SEED_CONTRACT_NAMES"]

# every check about seeds and batches (the others are output and input checks: oracle/output_checks.py)
SEED_CONTRACT_NAMES = ("seed replay", "seed dependence", "seed narrowing", "batch independence", "single-request path")


@dataclass(frozen=True)
class SeedCheck:
    """One deterministic check of a certification: a seed-contract check (oracle/seed_contract.py:
    ``SEED_CHECK_NAMES``, ``BATCH_CHECK_NAMES``) or an output or input check of the batched
    contract (oracle/output_checks.py: ``OUTPUT_CHECK_NAMES``, "inputs not modified"; "greedy rows").

    Attributes:
        name: the check's name.  passed: its decision.
        subject: the verifier and case whose rows were used.  rows: B.
        changed: rows whose outcome differed from the first call's (replay: under the same
            seeds; dependence: under fresh seeds).
        false_alarm: the probability that a verifier keeping the contract fails this check:
            0 for replay; c^B for dependence (NaN where c is not known: oracle/seed_contract.py).
        detail: one line saying what was seen.
        reproducer: Python code that rebuilds a failing batch ("" when none: a pass, or rows too
            large to print); oracle.contract_suite.reproducer's form.
    """

    name: str
    passed: bool
    subject: str
    rows: int
    changed: int
    false_alarm: float
    detail: str
    reproducer: str = ""

    @property
    def verdict(self) -> str:
        return verdict_word(self.passed)

    def to_json(self) -> dict:
        d = asdict(self)
        d["check"] = d.pop("name")
        d["kind"] = "seed contract" if self.name in SEED_CONTRACT_NAMES else "batched contract"
        d["verdict"] = self.verdict
        return d
