"""proofs_check/information_lp.py: the no-modification LP with one decision per (drafts, rows
seen), lossless on perturbed copies of the instance.

- Without copies it is the no-modification LP of oracle.programs (1e-12).
- With the default copies (target and draft rows replaced at every prefix of length 1..L−1,
  one at a time and all at once) the LP's optimal decisions extend to every copy: the least
  total violation is 0 to solver precision (≤ 1e-9 on these well-conditioned instances), so a
  rule that sees only the drafted rows attains the LP (NON_MODIFYING_RULES.md §2).
- Non-vacuity: with decisions blind to the replaced rows, the same copies force the optimum to
  0 on the toy (the sharing of decisions does constrain the program).
- Every registered non-modifying rule's exact E[τ] is ≤ the LP found.
- Argument errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from spectr_gbv.proofs_check.information_lp import Perturbation, default_perturbations, information_bound
from spectr_gbv.proofs_check.instances import random_instance, toy
from spectr_gbv.proofs_check.quantities import program
from spectr_gbv.reference.exact import expected_tau
from spectr_gbv.reference.rules import get_rule

INSTANCES = [toy(2, 2), toy(2, 3), toy(3, 2), random_instance(2, 3, 2, 1, 1.0),
             random_instance(3, 2, 2, 6, 1.0), random_instance(2, 2, 3, 8, 1.0, 0.3)]


@pytest.mark.parametrize("inst", INSTANCES, ids=str)
def test_without_copies_it_is_the_no_modification_lp(inst):
    b = information_bound(inst, {}, [])
    assert abs(b.lp - program(inst, "no_modification")) <= 1e-12
    assert b.models == 1 and b.violation == 0.0


@pytest.mark.parametrize("inst", INSTANCES, ids=str)
def test_the_lp_optimum_extends_to_every_perturbed_copy(inst):
    b = information_bound(inst)
    rows, perts = default_perturbations(inst.V, inst.L)
    assert b.models == 1 + len(perts) > 1
    assert abs(b.lp - program(inst, "no_modification")) <= 1e-12
    assert abs(b.violation) <= 1e-9, b
    assert b.optimum == b.lp


def test_default_copies_count():
    rows, perts = default_perturbations(2, 3)
    # 6 prefixes of length 1..2; per side 2 near-vertices + 2 random rows each; 2 joint copies
    assert len(perts) == 2 * 6 * (2 + 2) + 2
    assert sum(bool(p.changed) and not p.changed_p for p in perts) == 24
    assert sum(bool(p.changed_p) and not p.changed for p in perts) == 24
    for r in rows.values():
        assert r.shape == (2,) and abs(r.sum() - 1) < 1e-12 and np.all(r > 0)
    assert default_perturbations(2, 1)[1] == []  # L = 1: no prefix to perturb


def test_blind_decisions_are_constrained():
    inst = toy(2, 2)
    assert information_bound(inst).lp > 1.6
    assert information_bound(inst, observed=False).optimum <= 1e-9


@pytest.mark.parametrize("inst", INSTANCES[:4], ids=str)
def test_no_non_modifying_rule_exceeds_it(inst):
    lp = information_bound(inst).lp
    for rule in ("spectr", "kseq_bv", "traversal", "mdbv", "mdbv_kseq"):
        assert expected_tau(get_rule(rule), inst.draft, inst.target, inst.K, inst.L) <= lp + 1e-9, rule


@pytest.mark.parametrize("pert,rows,match", [
    (Perturbation(((( ), "r"),)), {"r": np.array([0.5, 0.5])}, "not a prefix of length 1..L-1"),
    (Perturbation((((0, 1), "r"),)), {"r": np.array([0.5, 0.5])}, "not a prefix of length 1..L-1"),
    (Perturbation((((2,), "r"),)), {"r": np.array([0.5, 0.5])}, "not a prefix of length 1..L-1"),
    (Perturbation((((0,), "r"),)), {"r": np.array([0.5, 0.6])}, "row 'r' is not a probability vector"),
    (Perturbation((), (((0,), "r"),)), {"r": np.array([1.0])}, "row 'r' is not a probability vector"),
    (Perturbation((((0,), "missing"),)), {}, "row 'missing' is not a probability vector"),
    (Perturbation((((0.5,), "r"),)), {"r": np.array([0.5, 0.5])}, "not a prefix of length 1..L-1"),
    (Perturbation(((("0",), "r"),)), {"r": np.array([0.5, 0.5])}, "not a prefix of length 1..L-1"),
    (Perturbation(((([0],), "r"),)), {"r": np.array([0.5, 0.5])}, "not a prefix of length 1..L-1"),
    (Perturbation((((0,), ["r"]),)), {"r": np.array([0.5, 0.5])}, "is not a probability vector"),
    (Perturbation((((0,), "r"),)), {"r": np.array([0.5 + 0j, 0.5])}, "is not a probability vector"),
    (Perturbation((((0,), "r"),)), {"r": np.array(["0.5", "0.5"])}, "is not a probability vector"),
    (Perturbation(((0,),)), {}, "is not a \\(prefix, row id\\) pair"),
    (((((0,), "r"),),), {"r": np.array([0.5, 0.5])}, "is not a Perturbation"),
])
def test_bad_perturbations(pert, rows, match):
    with pytest.raises(ValueError, match=match):
        information_bound(toy(2, 2), rows, [pert])


def test_bad_K():
    inst = toy(2, 2).with_K(0)
    with pytest.raises(ValueError, match="K must be an integer >= 1"):
        information_bound(inst, {}, [])


def test_generators_are_read_once():
    rows = {"r": np.array([0.3, 0.7])}
    b = information_bound(toy(2, 2), rows, (p for p in [Perturbation((((0,), "r"),))]))
    assert b.models == 2 and abs(b.violation) <= 1e-9


def test_other_argument_errors():
    from spectr_gbv.reference.models import ContextFree
    from spectr_gbv.proofs_check.instances import Instance

    with pytest.raises(ValueError, match="vocabulary mismatch: draft has V = 2, target has V = 3"):
        information_bound(Instance(ContextFree([0.5, 0.5]), ContextFree([0.2, 0.3, 0.5]), 2, 2), {}, [])
    with pytest.raises(ValueError, match="observed must be True or False"):
        information_bound(toy(2, 2), {}, [], observed="no")
    with pytest.raises(ValueError, match="rows must map row ids"):
        information_bound(toy(2, 2), [1], [])
    blind = information_bound(toy(2, 2), observed=False)
    assert np.isnan(blind.lp) and blind.optimum <= 1e-9


@pytest.mark.parametrize("kwargs,match", [
    (dict(V=0, L=2), "V must be an integer >= 1"), (dict(V=2.5, L=2), "V must be an integer >= 1"),
    (dict(V=2, L=0), "L must be an integer >= 1"), (dict(V=2, L=2, random_rows=-1), "random_rows must be"),
    (dict(V=2, L=2, random_rows=2.5), "random_rows must be"), (dict(V=2, L=2, joint=-1), "joint must be"),
    (dict(V=2, L=2, seed=-1), "seed must be"), (dict(V=2, L=2, seed="x"), "seed must be"),
])
def test_default_perturbations_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        default_perturbations(**kwargs)
