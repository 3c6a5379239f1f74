"""Draft-side stopping (reference.draft_stopping): the policies, the exact law under a policy,
and the registry's ``draft_stopping`` flag against the exact check of
proofs_check/DRAFT_STOPPING.md.  Exact laws: comparisons at 1e-12."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from spectr_gbv.proofs_check.draft_stopping_study import LOSSLESS_TOL, QUICK_CASES, study
from spectr_gbv.proofs_check.instances import random_instance
from spectr_gbv.reference.decode import Decoder, DecodeState
from spectr_gbv.reference.draft_stopping import ConfidenceStop, StopAt, stopped_configurations
from spectr_gbv.reference.exact import generation_law, iteration_law, target_law, total_variation
from spectr_gbv.reference.rules import get_rule, registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kwargs,match", [
    (dict(threshold=float("nan")), "threshold"), (dict(threshold=1.5), "threshold"),
    (dict(threshold=-0.1), "threshold"), (dict(threshold=0.4, combine="most"), "combine"),
    (dict(threshold="0.5"), "threshold"), (dict(threshold=None), "threshold"),
    (dict(threshold=True), "threshold"), (dict(threshold=[0.5]), "threshold"),
])
def test_confidence_stop_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ConfidenceStop(**kwargs)


@pytest.mark.parametrize("position", [0, -1, 1.5, "1", None, True])
def test_stop_at_refuses_a_bad_position(position):
    with pytest.raises(ValueError, match="position must be an integer >= 1"):
        StopAt(position)


def test_a_threshold_is_not_a_policy_and_a_policy_must_answer_a_bool():
    inst = random_instance(3, 1, 2, seed=10, concentration=0.7)
    with pytest.raises(ValueError, match="stop must be a stopping policy"):
        generation_law(get_rule("sd"), inst.draft, inst.target, 1, 2, 3, stop=0.4)
    with pytest.raises(ValueError, match="must return a bool, got 'False'"):
        generation_law(get_rule("sd"), inst.draft, inst.target, 1, 2, 3, stop=lambda i, r, t: "False")
    assert ConfidenceStop(np.float32(0.25)).threshold == 0.25 and type(ConfidenceStop(1).threshold) is float


def test_confidence_stop_reads_the_drafted_tokens_probabilities():
    rows = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    # draft 0 drew token 0 (0.7), draft 1 token 1 (0.3)
    assert ConfidenceStop(0.5, "all")(1, rows, np.array([0, 1])) is False
    assert ConfidenceStop(0.5, "any")(1, rows, np.array([0, 1])) is True
    assert ConfidenceStop(0.8, "all")(1, rows, np.array([0, 1])) is True
    assert ConfidenceStop(0.3, "any")(1, rows, np.array([0, 1])) is False  # 0.3 is not below 0.3


def test_configurations_are_a_probability_law_with_every_length():
    inst = random_instance(3, 2, 3, seed=10, concentration=0.7)
    configs = stopped_configurations(Decoder(inst.draft, inst.target, 2, 3), DecodeState(), ConfidenceStop(0.5))
    assert math.fsum(pr for _, pr in configs) == pytest.approx(1.0, abs=1e-12)
    lengths = {len(blocks[0]) for blocks, _ in configs}
    assert lengths == {1, 2, 3}
    assert all(len({len(b) for b in blocks}) == 1 for blocks, _ in configs)  # lockstep drafts


@pytest.mark.parametrize("rule", ["spectr", "kseq_gbv"])
def test_threshold_zero_is_no_stopping_and_always_stopping_is_L_1(rule):
    inst = random_instance(3, 2, 2, seed=11, concentration=0.7)
    r = get_rule(rule)
    full = generation_law(r, inst.draft, inst.target, 2, 2, 4)
    never = generation_law(r, inst.draft, inst.target, 2, 2, 4, stop=ConfidenceStop(0.0))
    assert total_variation(full.token_law, never.token_law) <= 1e-12
    assert never.expected_target_calls == pytest.approx(full.expected_target_calls, abs=1e-12)
    one = generation_law(r, inst.draft, inst.target, 2, 1, 4)
    always = generation_law(r, inst.draft, inst.target, 2, 2, 4, stop=StopAt(1))
    assert total_variation(one.token_law, always.token_law) <= 1e-12
    assert always.expected_target_calls == pytest.approx(one.expected_target_calls, abs=1e-12)


def test_iteration_law_under_stopping_sums_to_one():
    inst = random_instance(3, 1, 3, seed=10, concentration=0.7)
    law = iteration_law(get_rule("bv"), Decoder(inst.draft, inst.target, 1, 3), stop=ConfidenceStop(0.6))
    assert math.fsum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert {v.tau for v in law} <= {0, 1, 2, 3}


def test_gbv_counterexample_value():
    """The smallest counterexample of the table: GBV with Algorithm 2 under confidence
    stopping at 0.3, V = 3, K = 1, L = 3, seed 10: TV 7.96e-02 (exact; recomputed here)."""
    inst = random_instance(3, 1, 3, seed=10, concentration=0.7)
    law = generation_law(get_rule("gbv"), inst.draft, inst.target, 1, 3, 5, stop=ConfidenceStop(0.3))
    assert total_variation(law.token_law, target_law(inst.target, 5)) == pytest.approx(7.96e-02, abs=5e-4)


@pytest.fixture(scope="module")
def quick_study():
    return study(QUICK_CASES)


def test_registry_flag_agrees_with_the_exact_check(quick_study):
    """Declared → lossless at 1e-12 under every policy; a lossless rule not declared → a
    counterexample (TV > 1e-3) among the quick cases, so that the flag is never withheld
    from a rule that has it, nor given to one that lacks it."""
    for name, row in quick_study["rules"].items():
        if row["declared"]:
            assert row["worst_tv"] <= LOSSLESS_TOL and row["worst_constant_tv"] <= LOSSLESS_TOL, name
        elif registry.spec(name).lossless:
            assert row["worst_tv"] > 1e-3, name
            assert row["worst_constant_tv"] <= LOSSLESS_TOL, name  # a constant length is fine


def test_declared_rules_are_exactly_the_documented_ones():
    assert set(registry.names(draft_stopping=True)) == {"sd", "spectr", "bv", "kseq_bv", "traversal", "mdbv", "mdbv_kseq"}
    assert set(registry.names(draft_stopping=False, lossless=True)) == {"gbv", "kseq_gbv"}


def test_documented_stopping_lists_are_the_registry_s():
    """docs/rules.md §4 and docs/findings.md name, in backticks, the rules that stay lossless under
    draft-side stopping and the lossless ones that do not: exactly the registry's
    ``draft_stopping`` split (a rule added to the registry must be added to both lists)."""
    safe = set(registry.names(draft_stopping=True))
    unsafe = set(registry.names(draft_stopping=False, lossless=True))
    rules_md = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    section = rules_md.split("## §4 Draft-side stopping", 1)[1].split("The registry records", 1)[0]
    bullets = [b for b in re.split(r"\n- ", section)[1:]]
    keep = set().union(*(re.findall(r"`(\w+)`", b) for b in bullets if " keep " in b))
    lose = set().union(*(re.findall(r"`(\w+)`", b) for b in bullets if " do not " in b))
    assert (keep, lose) == (safe, unsafe)
    findings = re.sub(r"\s+", " ", (ROOT / "docs" / "findings.md").read_text(encoding="utf-8"))
    m = re.search(r"argument\): (.*?) stay lossless .*?; (.*?) do not", findings)
    assert m, "findings.md's draft-side stopping bullet not found"
    assert set(re.findall(r"`(\w+)`", m.group(1))) == safe
    assert set(re.findall(r"`(\w+)`", m.group(2))) == unsafe


def test_committed_table_agrees_with_the_registry():
    text = (ROOT / "proofs_check" / "DRAFT_STOPPING.md").read_text(encoding="utf-8")
    rows = {m.group(1): (m.group(2) == "True", m.group(3)) for m in
            re.finditer(r"^\| (\w+) \| (True|False) \| \d+ \| ([0-9.e+-]+) \|", text, re.M)}
    assert set(rows) == set(registry.names())
    for name, (declared, worst) in rows.items():
        assert declared == registry.spec(name).draft_stopping, name
        assert (float(worst) <= LOSSLESS_TOL) == declared, name
