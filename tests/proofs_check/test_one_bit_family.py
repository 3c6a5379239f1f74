"""The optimum of MDBV's family (one-bit compositional rules) at L = 2, bracketed
(proofs_check/one_bit_family.py; NON_MODIFYING_RULES.md §7b).

- The efficiency of a depth-1 node is 1 + α*/b: at b = 1 it is oracle.bounds.alpha_star to 1e-12,
  non-increasing in b, with the stated limit at b = 0.
- The bracket is sound where the answer is known: at K = 1 the family's optimum is BV's E[τ],
  which is the LP's; the lower bound never exceeds the LP (it is attained by a lossless rule); the
  upper bound is above every member computed (MDBV, MDBV-KSEQ, SpecTr) and tightens with rounds.
- The finding: on claim 12h's counterexample the upper bound is below 98 % of the LP (no rule of
  the family is within 2 %), and MDBV is within 0.2 % of the family's optimum there.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spectr_gbv.oracle.bounds import alpha_star
from spectr_gbv.proofs_check import quantities as Q
from spectr_gbv.proofs_check.instances import random_instance, toy
from spectr_gbv.proofs_check.one_bit_family import configurations, efficiency, family_bracket


def test_efficiency_is_one_plus_alpha_star_over_b():
    rng = np.random.default_rng(3)
    for _ in range(20):
        V, m = int(rng.integers(2, 5)), int(rng.integers(1, 4))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        g = efficiency(q, p, m)
        assert abs(g(np.array([1.0]))[0] - 1.0 - alpha_star(p, q, m)) <= 1e-12
        b = np.linspace(0.0, 1.0, 201)
        vals = g(b)
        assert np.all(np.diff(vals) <= 1e-12)  # non-increasing
        assert vals[0] == 1.0 + q.sum()  # q(supp p) = 1 when p > 0 everywhere
        assert abs(g(np.array([1e-12]))[0] - vals[0]) <= 1e-9
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.2, 0.3, 0.5])
    assert abs(efficiency(q, p, 2)(np.array([0.0]))[0] - 1.5) <= 1e-15  # only q on supp p counts


def test_configurations_are_the_multisets_of_first_tokens():
    p = np.array([0.2, 0.3, 0.5])
    confs = list(configurations(p, 3))
    assert len(confs) == math.comb(3 + 2, 2)
    assert abs(sum(prob for _, prob in confs) - 1.0) <= 1e-12
    assert dict(confs)[(1, 1, 1)] == pytest.approx(6 * 0.2 * 0.3 * 0.5, abs=1e-15)
    assert len(list(configurations(np.array([0.0, 1.0]), 2))) == 1  # zero-probability tokens drop out


@pytest.mark.parametrize("inst", [toy(1, 2), random_instance(3, 1, 2, 4, 1.0)], ids=str)
def test_k1_bracket_closes_on_bv(inst):
    """One draft: BV is the family's best and the LP's optimum (Sun et al., Theorem 2)."""
    bv, lp = Q.e_tau(inst, "bv"), Q.program(inst, "no_modification")
    assert abs(bv - lp) <= 1e-7
    br = family_bracket(inst, rounds=12)
    assert br.lower <= bv + 1e-9 <= br.upper + 2e-9
    assert br.upper - br.lower <= 1e-5


MEMBERS = [toy(2, 2), toy(3, 2), random_instance(2, 3, 2, 15, 1.0), random_instance(3, 2, 2, 25, 1.0)]


@pytest.mark.parametrize("inst", MEMBERS, ids=str)
def test_bracket_holds_the_members_and_stays_under_the_lp(inst):
    lp = Q.program(inst, "no_modification")
    coarse, fine = family_bracket(inst, rounds=2), family_bracket(inst, rounds=5)
    for rule in ("mdbv", "mdbv_kseq", "spectr"):
        assert Q.e_tau(inst, rule) <= fine.upper + 1e-9, rule
    assert fine.lower <= lp + 1e-8  # every lower-bound column is a lossless rule
    assert coarse.upper >= fine.upper - 1e-9 and fine.lower >= coarse.lower - 1e-9  # refinement tightens
    assert fine.upper < coarse.upper  # and does so strictly on these (the test has teeth)


def test_claim_12h_counterexample_is_beyond_the_family():
    """random V=2 K=2 L=2 seed=0 conc=0.3: MDBV is 2.18 % below the LP; the family's optimum is at
    least 2 % below it too (upper bound < 0.98·LP), and MDBV is within 0.2 % of that optimum."""
    inst = random_instance(2, 2, 2, 0, 0.3)
    lp, mdbv = Q.program(inst, "no_modification"), Q.e_tau(inst, "mdbv")
    assert abs(lp - 1.931098264) <= 1e-8 and abs(mdbv - 1.889034057) <= 1e-8
    br = family_bracket(inst, rounds=16, decide_at=0.98 * lp)
    assert br.upper < 0.98 * lp
    assert br.lower >= mdbv - 1e-9
    assert (br.upper - mdbv) / br.upper <= 0.002


@pytest.mark.parametrize("kwargs,match", [
    (dict(rounds=0), "rounds"), (dict(parts=1), "parts"), (dict(tol=0.0), "tol"),
    (dict(tol=float("nan")), "tol"), (dict(decide_at=float("inf")), "decide_at")])
def test_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        family_bracket(toy(2, 2), **kwargs)


def test_other_block_lengths_and_bad_k_are_refused():
    with pytest.raises(ValueError, match="L = 2"):
        family_bracket(toy(2, 3))
    for K in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="inst.K"):
            family_bracket(toy(K, 2))
    with pytest.raises(ValueError, match="tol"):
        family_bracket(toy(2, 2), tol=True)
    with pytest.raises(ValueError, match="decide_at"):
        family_bracket(toy(2, 2), decide_at=True)
    assert family_bracket(toy(2, 2), rounds=1, tol=np.float32(1e-3)).rounds == 1  # numpy reals are reals


@pytest.mark.parametrize("q,p,m,match", [
    ([np.nan, 0.5], [0.5, 0.5], 1, "q"), ([0.5, 0.5], [1.5, -0.5], 1, "p"), ([2.0, 2.0], [0.5, 0.5], 1, "q"),
    ([0.2, 0.3, 0.5], [0.5, 0.5], 1, "shapes"), ([0.5, 0.5], [0.5, 0.5], 0, "m"), ([0.5, 0.5], [0.5, 0.5], 1.5, "m")])
def test_efficiency_refuses_bad_rows(q, p, m, match):
    with pytest.raises(ValueError, match=match):
        efficiency(np.array(q), np.array(p), m)


def test_efficiency_budgets():
    g = efficiency(np.array([0.5, 0.5]), np.array([0.5, 0.5]), 1)
    assert g(0.5).shape == (1,) and g(0.5)[0] == 2.0  # p = q: every budget verifies fully
    for bad in (np.nan, -0.1, 1.5):
        with pytest.raises(ValueError, match="b:"):
            g(np.array([0.5, bad]))


def test_configurations_refuse_bad_input():
    for p, K, match in (([np.nan, 0.5], 1, "p"), ([1.5, -0.5], 2, "p"), ([0.5, 0.5], 0, "K"), ([0.5, 0.5], 1.5, "K")):
        with pytest.raises(ValueError, match=match):
            list(configurations(np.array(p), K))


def test_study_cli_writes_the_table(tmp_path, capsys):
    from spectr_gbv.proofs_check.one_bit_family import main, study_instances

    out = tmp_path / "family.md"
    assert main(["--quick", "--rounds", "3", "--md", str(out)]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| random") or line.startswith("| toy")]
    assert len(rows) == len(study_instances(quick=True)) == 15
    assert "Instances: 15." in text and "**no**" in text  # claim 12h's counterexample is decided
    capsys.readouterr()
    for bad in (["--rounds", "0"], ["--rounds", "-1"], ["--md", str(tmp_path / "no" / "such" / "dir.md")]):
        with pytest.raises(SystemExit) as exc:  # refused before any study is run
            main(["--quick", *bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and bad[0] in err, err  # one line naming the flag
