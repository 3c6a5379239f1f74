"""The reference verification rules, one module each, and the name → rule registry."""

from __future__ import annotations

from .base import Block, Rule
from .bv import BlockVerification
from .gbv import GreedyBlockVerification
from .kseq_bv import KSeqBV
from .kseq_gbv import KSeqGBV
from .mdbv import MultiDraftBlockVerification
from .sd import TokenVerification
from .spectr import SpecTr
from .spectr_gbv import SpecTrGBV
from .traversal import TraversalVerification


def _registry() -> dict[str, Rule]:
    return {
        "sd": TokenVerification(),
        "spectr": SpecTr(),
        "bv": BlockVerification(),
        "gbv": GreedyBlockVerification(algorithm2=True),
        "spectr_gbv": SpecTrGBV(residual="released", algorithm2=False),
        "spectr_gbv_fixed": SpecTrGBV(residual="consistent", algorithm2=True),
        "kseq_gbv": KSeqGBV(algorithm2=True),
        "kseq_bv": KSeqBV(),
        "traversal": TraversalVerification(),
        "mdbv": MultiDraftBlockVerification(),
    }


RULES: dict[str, Rule] = _registry()

# Rules that the project certifies as lossless (the released SpecTr-GBV variants are not).
LOSSLESS_RULES = ("sd", "spectr", "bv", "gbv", "kseq_gbv", "kseq_bv", "traversal", "mdbv")


def get_rule(name: str) -> Rule:
    """The rule registered under ``name``.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown rule {name!r}; known rules: {', '.join(RULES)}") from None


__all__ = ["Block", "Rule", "RULES", "LOSSLESS_RULES", "get_rule", "BlockVerification",
           "GreedyBlockVerification", "KSeqGBV", "KSeqBV", "MultiDraftBlockVerification",
           "TraversalVerification", "TokenVerification", "SpecTr", "SpecTrGBV"]
