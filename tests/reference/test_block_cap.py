"""The block cap at the tokens still needed (reference.draft_stopping.block_cap, Capped) and
the exact check that every lossless rule keeps its law under it (proofs_check/BLOCK_CAP.md).
Exact laws: comparisons at 1e-12."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from spectr_gbv.proofs_check.block_cap_study import study, verdict
from spectr_gbv.proofs_check.draft_stopping_study import LOSSLESS_TOL, QUICK_CASES
from spectr_gbv.proofs_check.instances import random_instance
from spectr_gbv.reference.draft_stopping import Capped, ConfidenceStop, block_cap
from spectr_gbv.reference.exact import generation_law
from spectr_gbv.reference.rules import get_rule, registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("emitted,n_tokens,L,expected", [
    (0, 10, 4, 4), (5, 10, 4, 4), (6, 10, 4, 3), (7, 10, 4, 2), (8, 10, 4, 1), (9, 10, 4, 1),
    (0, 1, 4, 1), (0, 3, 100, 2), (0, 100, 1, 1)])
def test_block_cap_is_the_tokens_still_needed_less_the_bonus(emitted, n_tokens, L, expected):
    assert block_cap(emitted, n_tokens, L) == expected


def test_capped_stops_at_the_cap_or_when_the_inner_policy_does():
    rows, tokens = np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0, 1])
    assert [Capped(2)(i, rows, tokens) for i in (1, 2, 3)] == [False, True, True]
    assert Capped(3, ConfidenceStop(0.95))(1, rows, tokens) is True   # both drafts below 0.95
    assert Capped(3, ConfidenceStop(0.5))(1, rows, tokens) is False
    with pytest.raises(ValueError, match="must return a bool"):
        Capped(3, lambda i, r, t: 1)(1, rows, tokens)


@pytest.fixture(scope="module")
def quick_study():
    return study(QUICK_CASES)


def test_every_lossless_rule_keeps_its_law_under_the_cap(quick_study):
    """Every registered lossless rule: TV ≤ 1e-12 against the target's law with the cap (and
    with the cap plus confidence stopping where the rule declares draft-side stopping)."""
    for name, row in quick_study["rules"].items():
        if registry.spec(name).lossless:
            assert verdict(row) == "keeps its law", (name, row["worst_tv_cap"], row["worst_case"])
            assert row["checks"] >= 2, name


def test_the_cap_leaves_the_expected_target_calls_of_a_lossless_rule(quick_study):
    """What BLOCK_CAP.md reads: E[target calls to reach N] is the same with and without the cap
    for every lossless rule on every quick instance (to 1e-12); it moves for the lossy ones."""
    for name, row in quick_study["rules"].items():
        moved = max(abs(a - b) for a, b in zip(row["calls_full"], row["calls_cap"]))
        if registry.spec(name).lossless:
            assert moved <= 1e-12, (name, moved)
        else:
            assert moved > 1e-3, (name, moved)


def test_the_cap_changes_what_is_drafted():
    """Not vacuous: the cap moves the lossy released rule's law (TV to the uncapped law
    > 1e-6), so generation_law's capped branch is taken and changes what is verified."""
    inst = random_instance(3, 2, 2, seed=10, concentration=0.7)
    released = get_rule("spectr_gbv")
    full = generation_law(released, inst.draft, inst.target, 2, 2, 3)
    capped = generation_law(released, inst.draft, inst.target, 2, 2, 3, cap=True)
    keys = set(full.token_law) | set(capped.token_law)
    assert max(abs(full.token_law.get(k, 0) - capped.token_law.get(k, 0)) for k in keys) > 1e-6


def test_committed_table_agrees_with_the_registry():
    text = (ROOT / "proofs_check" / "BLOCK_CAP.md").read_text(encoding="utf-8")
    rows = {m.group(1): (float(m.group(2)), m.group(3)) for m in
            re.finditer(r"^\| (\w+) \| \d+ \| ([0-9.e+-]+) \| .*? \| (keeps its law|lossy \(also without the cap\)|"
                         r"\*\*the cap breaks it\*\*) \|", text, re.M)}
    assert set(rows) == set(registry.names())
    for name, (worst, said) in rows.items():
        if registry.spec(name).lossless:
            assert said == "keeps its law" and worst <= LOSSLESS_TOL, name
        else:
            assert said == "lossy (also without the cap)", name


@pytest.mark.parametrize("cap,stop,match", [(0, None, "cap must be"), (True, None, "cap must be"),
                                            (1.5, None, "cap must be"), (2, 0.4, "stop must be a stopping policy")])
def test_capped_refuses_bad_arguments(cap, stop, match):
    with pytest.raises(ValueError, match=match):
        Capped(cap, stop)
