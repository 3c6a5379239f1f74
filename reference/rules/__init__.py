"""The reference verification rules, one module each; ``RULES`` maps the names of
``registry`` (the one list of rules, with their properties) to reference Rule objects."""

from __future__ import annotations

from collections.abc import Mapping

from spectr_gbv.reference.rules.base import Block, Rule
from spectr_gbv.reference.rules.bv import BlockVerification
from spectr_gbv.reference.rules.gbv import GreedyBlockVerification
from spectr_gbv.reference.rules.kseq_bv import KSeqBV
from spectr_gbv.reference.rules.kseq_gbv import KSeqGBV
from spectr_gbv.reference.rules.mdbv import MultiDraftBlockVerification
from spectr_gbv.reference.rules.sd import TokenVerification
from spectr_gbv.reference.rules.spectr import SpecTr
from spectr_gbv.reference.rules.spectr_gbv import SpecTrGBV
from spectr_gbv.reference.rules.traversal import TraversalVerification
from spectr_gbv.reference.rules import registry


class _Rules(Mapping):
    """name → reference Rule, live over ``registry`` (a rule registered later appears; each
    Rule is built once per spec)."""

    def __init__(self):
        self._built: dict = {}

    def __getitem__(self, name: str) -> Rule:
        try:
            s = registry.spec(name)
        except ValueError:
            raise KeyError(name) from None
        hit = self._built.get(name)
        if hit is None or hit[0] is not s:
            hit = self._built[name] = (s, s.reference())
        return hit[1]

    def __iter__(self):
        return iter(registry.names())

    def __len__(self) -> int:
        return len(registry.names())


RULES: Mapping[str, Rule] = _Rules()


def get_rule(name: str) -> Rule:
    """The rule registered under ``name``.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    registry.spec(name)  # the ValueError naming the known rules
    return RULES[name]


__all__ = ["Block", "Rule", "RULES", "get_rule", "registry", "BlockVerification",
           "GreedyBlockVerification", "KSeqGBV", "KSeqBV", "MultiDraftBlockVerification",
           "TraversalVerification", "TokenVerification", "SpecTr", "SpecTrGBV"]
