"""The published numbers do not move: they are read from the markdown as printed and recomputed.

* docs/toy.md: every value of the toy (bounds, ρ*, α*, programs, E[τ] of every rule, the
  Algorithm 2 defect, tokens per target call over a generation) is recomputed exactly
  (reference.exact, oracle.bounds) or by the oracle's programs, and compared with the number as
  printed: a fraction to 1e-12 (LP optima to solver tolerance, 1e-7), a decimal to its printed
  precision (half a unit of its last digit).
* proofs_check/VERDICTS.md and verdicts.json: every row of the verdict table (and every
  counterexample / witness) equals the JSON; the claims that cost little are re-run in full
  mode (derandomised search, exact measures) and must give the committed verdict, instance
  count, worst deviation and counterexample; for the others the deviation on the reported
  instance is recomputed exactly.  The reported tables' toy rows are recomputed.
* Certification tables (the markdown of `spectr-gbv certify` / `report`, wherever one is
  committed): each row's verdict agrees with its p-value, α, δ and expectation, and the summary
  line's counts and CERTIFIED / NOT CERTIFIED agree with the rows.

Deviations below 1e-9 are rounding or solver noise (the last bits of float64 sums, cvxpy's
tolerance): those are checked against the claim's tolerance, not digit by digit.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from spectr_gbv.oracle.bounds import alpha_star
from spectr_gbv.proofs_check import quantities as Q
from spectr_gbv.proofs_check.instances import Instance, random_instance, toy
from spectr_gbv.reference.decode import Decoder
from spectr_gbv.reference.exact import iteration_law, target_law, total_variation
from spectr_gbv.reference.kseq import rho_star
from spectr_gbv.reference.rules import GreedyBlockVerification, get_rule, registry

ROOT = Path(__file__).resolve().parents[2]
TOY_MD = ROOT / "docs" / "toy.md"
VERDICTS_MD = ROOT / "proofs_check" / "VERDICTS.md"
VERDICTS_JSON = ROOT / "proofs_check" / "verdicts.json"

EXACT_TOL = 1e-12  # fractions computed by exact enumeration (float64)
LP_TOL = 1e-7  # optima of the oracle's programs (solver tolerance)
NOISE = 1e-9  # deviations below this are rounding / solver noise


# -- markdown --------------------------------------------------------------------------------------

@dataclass
class Table:
    section: str  # the last heading above the table
    header: list[str]
    rows: list[list[str]]

    def column(self, name: str) -> int:
        return self.header.index(name)


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row.  A cell separator is a pipe with whitespace (or the
    line's end) on both sides, so "Σ_{|z|=i}" and escaped pipes stay inside their cell."""
    inner = " " + line.strip() + " "
    cells = re.split(r"(?<=\s)\|(?=\s)", inner)
    return [c.strip().replace("\\|", "|") for c in cells[1:-1]]


def md_tables(text: str) -> list[Table]:
    tables: list[Table] = []
    section = ""
    block: list[str] = []

    def flush():
        if len(block) >= 2 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", block[1].replace(" ", "")):
            header = split_row(block[0])
            rows = [split_row(line) for line in block[2:]]
            for r in rows:
                assert len(r) == len(header), f"ragged row in table under {section!r}: {r}"
            tables.append(Table(section, header, rows))
        block.clear()

    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            block.append(line)
            continue
        flush()
        if line.startswith("#"):
            section = line.lstrip("#").strip()
    flush()
    return tables


def table(tables: list[Table], first_header_cell: str) -> Table:
    found = [t for t in tables if t.header[0].startswith(first_header_cell)]
    assert len(found) == 1, f"expected one table headed {first_header_cell!r}, found {len(found)}"
    return found[0]


def unbold(cell: str) -> str:
    return cell.replace("**", "").strip()


@dataclass(frozen=True)
class Printed:
    text: str
    value: float
    decimals: int | None  # None: an exact fraction or integer

    def matches(self, computed: float, tol: float = EXACT_TOL) -> bool:
        if self.decimals is None:
            return abs(computed - self.value) <= tol
        return abs(computed - self.value) <= 0.5 * 10.0 ** -self.decimals + tol


def number(cell: str) -> Printed:
    s = unbold(cell)
    if re.fullmatch(r"\d+/\d+", s):
        return Printed(s, float(Fraction(s)), None)
    if re.fullmatch(r"\d+", s):
        return Printed(s, float(s), None)
    if re.fullmatch(r"\d+\.\d+", s):
        return Printed(s, float(s), len(s.split(".")[1]))
    if re.fullmatch(r"\d+(\.\d+)?e-?\d+", s):
        return Printed(s, float(s), None)
    raise ValueError(f"not a number: {cell!r}")


def check(printed: Printed, computed: float, what: str, tol: float = EXACT_TOL) -> None:
    assert printed.matches(computed, tol), f"{what}: printed {printed.text}, computed {computed!r}"


def K_L(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"\b([KLN]) = (\d+)", text)}


def rule_of(cell: str) -> str:
    m = re.search(r"`([a-z_0-9]+)`", cell)
    assert m, f"no `rule` in {cell!r}"
    return m.group(1)


# -- docs/toy.md -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toy_text() -> str:
    return TOY_MD.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def toy_tables(toy_text) -> list[Table]:
    return md_tables(toy_text)


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def toy_tau(rule: str, K: int, L: int) -> float:
    return Q.e_tau(toy(K, L), rule)


def test_toy_md_has_the_tables_checked_here(toy_tables):
    """A new table in docs/toy.md must get a check here."""
    heads = sorted(t.header[0] for t in toy_tables)
    assert heads == sorted(["B(K, L) (docs/bounds.md §1)", "program (docs/bounds.md §4)", "E[τ]",
                            "K = 1, L = 2, N = 4", "K = 2, L = 2, N = 8"]), heads


def test_toy_bound_B(toy_tables):
    t = table(toy_tables, "B(K, L)")
    n = 0
    for row in t.rows:
        K = K_L(row[0])["K"]
        for col, cell in zip(t.header[1:], row[1:]):
            L = K_L(col)["L"]
            check(number(cell), Q.bound_B(toy(K, L)), f"B({K}, {L})")
            n += 1
    assert n == 9


def test_toy_rho_star_alpha_star_and_cic(toy_text):
    text = one_line(toy_text)
    m = re.search(r"ρ\*\(K = 2\) at the first position = \(5 \+ √13\)/6 ≈ (\d\.\d+)", text)
    assert m, "ρ* line not found"
    rho = rho_star(np.array([2 / 3, 1 / 3]), np.array([1 / 3, 2 / 3]), 2)
    assert rho == pytest.approx((5 + math.sqrt(13)) / 6, abs=1e-14)
    check(number(m.group(1)), rho, "ρ*(K = 2)")

    m = re.search(r"α\*: (\S+) at K = 1, (\S+) at K = 2 \(H = \{a\}: 1/3 \+ 1 − 4/9\), (\S+) at K = 3", text)
    assert m, "α* line not found"
    for K, cell in zip((1, 2, 3), m.groups()):
        check(number(cell.rstrip(",")), alpha_star(np.array([2 / 3, 1 / 3]), np.array([1 / 3, 2 / 3]), K),
              f"α*(K = {K})")
    assert Fraction(1, 3) + 1 - Fraction(4, 9) == Fraction(m.group(2))  # the decomposition as printed

    m = re.search(r"e\.g\. (\S+) at K = L = 2, (\S+) at K = 3, L = 2", text)
    assert m, "CIC line not found"
    check(number(m.group(1)), Q.program(toy(2, 2), "cic"), "CIC(2, 2)", LP_TOL)
    check(number(m.group(2)), Q.program(toy(3, 2), "cic"), "CIC(3, 2)", LP_TOL)
    assert "CIC program (prefix-conditioned) = B(K, L) for K, L ∈ {1, 2, 3}" in text
    for K in (1, 2, 3):
        for L in (1, 2, 3):
            assert abs(Q.program(toy(K, L), "cic") - Q.bound_B(toy(K, L))) <= 1e-6, (K, L)

    m = re.search(r"CIC program, block-conditioned, K = L = 2: \*\*(\S+)\*\* = (\S+) < (\S+)\.", text)
    assert m, "CIC-block line not found"
    block = Q.program(toy(2, 2), "cic_block")
    check(number(m.group(1)), block, "CIC-block(2, 2)", LP_TOL)
    check(number(m.group(2)), block, "CIC-block(2, 2) decimal", LP_TOL)
    check(number(m.group(3)), Q.bound_B(toy(2, 2)), "B(2, 2)")
    assert block < Q.bound_B(toy(2, 2)) - 0.01

    m = re.search(r"at K = 2, L = 1 the optimal lossless acceptance \(global OT = α\*\) is (\S+) > B\(2, 1\) = (\S+)\.",
                  text)
    assert m, "global OT > B line not found"
    check(number(m.group(1)), Q.program(toy(2, 1), "global_ot"), "global OT(2, 1)", LP_TOL)
    check(number(m.group(2)), Q.bound_B(toy(2, 1)), "B(2, 1)")


def test_toy_programs(toy_tables):
    t = table(toy_tables, "program")
    from spectr_gbv.oracle.prefix_match import prefix_match_bound

    names = {"global block OT": "global_ot", "no-modification LP": "no_modification",
             "prefix-match ceiling U (docs/bounds.md §6)": "prefix_match"}
    n = 0
    for row in t.rows:
        program = names[row[0]]
        for col, cell in zip(t.header[1:], row[1:]):
            K, L = map(int, re.findall(r"\d+", col))
            if not cell:
                continue
            if program == "prefix_match":  # a closed form: exact
                check(number(cell), float(prefix_match_bound(*Q.blocks(toy(K, L)), K).sum()), f"U({K}, {L})")
            else:
                check(number(cell), Q.program(toy(K, L), program), f"{program}({K}, {L})", LP_TOL)
            n += 1
    assert n == 23


def test_toy_oracle_cli_line(toy_text):
    """`spectr-gbv oracle --K 2 --L 2` as printed (ten decimals; the CIC programs' last digits are
    cvxpy's tolerance, compared to 1e-8)."""
    from spectr_gbv.oracle.prefix_match import prefix_match_bound

    m = re.search(r"prints B = (\S+), the prefix-match ceiling (\S+), CIC (\S+), CIC-block (\S+), "
                  r"global OT (\S+), no-modification (\S+?)\.?\s", one_line(toy_text) + " ")
    assert m, "oracle CLI line not found"
    inst = toy(2, 2)
    check(number(m.group(1)), Q.bound_B(inst), "B")
    check(number(m.group(2)), float(prefix_match_bound(*Q.blocks(inst), 2).sum()), "prefix-match ceiling")
    check(number(m.group(3)), Q.program(inst, "cic"), "CIC", 1e-8)
    check(number(m.group(4)), Q.program(inst, "cic_block"), "CIC-block", 1e-8)
    check(number(m.group(5)), Q.program(inst, "global_ot"), "global OT", 1e-11)  # LPs: exact to ~1e-12
    check(number(m.group(6)), Q.program(inst, "no_modification"), "no-modification", 1e-11)


def test_toy_one_iteration(toy_tables, toy_text):
    t = table(toy_tables, "E[τ]")
    n = 0
    for row in t.rows:
        rule = rule_of(row[0])
        K = K_L(row[0]).get("K", 1)
        assert K == 1 or not registry.is_single_draft(rule)
        for col, cell in zip(t.header[1:], row[1:]):
            if cell:
                check(number(cell), toy_tau(rule, K, K_L(col)["L"]), f"{rule} K={K} {col}")
                n += 1
    assert n == 25
    # "At K = 3: K-SEQ-BV 1.605405 (L = 2); Traversal 23/27 (L = 1), 1136/729 (L = 2); MDBV 1 (L = 1), ..."
    m = re.search(r"At K = 3: (.*?)\.\s*\n", toy_text, re.S)
    assert m, "K = 3 sentence not found"
    names = {"K-SEQ-BV": "kseq_bv", "Traversal": "traversal", "MDBV": "mdbv"}
    k3 = 0
    for part in one_line(m.group(1)).split(";"):
        name, values = part.strip().split(" ", 1)
        for value, L in re.findall(r"(\S+) \(L = (\d)\)", values):
            check(number(value), toy_tau(names[name], 3, int(L)), f"{name} K=3 L={L}")
            k3 += 1
    assert k3 == 5


def test_toy_mdbv_lp_and_released_rule(toy_text):
    text = one_line(toy_text)
    m = re.search(r"MDBV reaches the no-modification LP at K = L = 2 \((\S+)\) and α\* at L = 1 \((\S+) at K = 2, "
                  r"(\S+) at K = 3\); at K = 2, L = 3 it is (\S+) below the LP \((\S+) against (\S+)\)", text)
    assert m, "MDBV bullet not found"
    lp22, a2, a3, gap, mdbv23, lp23 = (number(g) for g in m.groups())
    check(lp22, Q.program(toy(2, 2), "no_modification"), "LP(2, 2)", LP_TOL)
    check(lp22, toy_tau("mdbv", 2, 2), "MDBV(2, 2)")
    check(a2, toy_tau("mdbv", 2, 1), "MDBV(2, 1)")
    check(a3, toy_tau("mdbv", 3, 1), "MDBV(3, 1)")
    check(mdbv23, toy_tau("mdbv", 2, 3), "MDBV(2, 3)")
    check(lp23, Q.program(toy(2, 3), "no_modification"), "LP(2, 3)", LP_TOL)
    check(gap, Q.program(toy(2, 3), "no_modification") - toy_tau("mdbv", 2, 3), "LP − MDBV at (2, 3)", LP_TOL)

    m = re.search(r"first emitted token is a with probability \*\*(\S+) ≈ (\S+)\*\*, not 1/3, and its E\[τ\] = (\S+) "
                  r"is below the claimed B\(2, 2\) = (\S+) ≈ (\S+)\.", text)
    assert m, "released SpecTr-GBV bullet not found"
    law = iteration_law(get_rule("spectr_gbv"), Decoder(toy(2, 2).draft, toy(2, 2).target, 2, 2))
    p_a = sum(pr for v, pr in law.items() if v.tokens[0] == 0)
    check(number(m.group(1)), p_a, "P(first = a)")
    check(number(m.group(2)), p_a, "P(first = a) decimal")
    check(number(m.group(3)), toy_tau("spectr_gbv", 2, 2), "E[τ] released")
    check(number(m.group(4)), Q.bound_B(toy(2, 2)), "B(2, 2)")
    check(number(m.group(5)), Q.bound_B(toy(2, 2)), "B(2, 2) decimal")


def test_toy_algorithm2_defect(toy_text):
    m = re.search(r"with Algorithm 2, P\(b, a\) = (\S+) = q\(b\)·q\(a\); without it, P\(b, a\) = (\S+?)\.",
                  one_line(toy_text))
    assert m, "Algorithm 2 sentence not found"
    inst = toy(1, 2)
    right = Q.gen(inst, "gbv", 2).token_law[(1, 0)]
    wrong = Q.gen(inst, GreedyBlockVerification(algorithm2=False), 2).token_law[(1, 0)]
    check(number(m.group(1)), right, "P(b, a) with Algorithm 2")
    check(number(m.group(2)), wrong, "P(b, a) without Algorithm 2")


def generation_inst(rule: str, K: int, L: int) -> Instance:
    """The instance proofs_check's generation table uses (label "toy K=2 L=2", K = 1 for the
    single-draft rules), so that its cells and docs/toy.md §4 share one computation."""
    inst = toy(2, L)
    return inst.with_K(1) if registry.is_single_draft(rule) else inst.with_K(K)


@pytest.mark.parametrize("head", ["K = 1, L = 2, N = 4", "K = 2, L = 2, N = 8"])
def test_toy_generation(toy_tables, toy_text, head):
    t = table(toy_tables, head)
    dims = K_L(head)
    i_tau, i_calls = t.column("E[τ] per iteration"), t.column("tokens per target call")
    for row in t.rows:
        rule = rule_of(row[0])
        inst = generation_inst(rule, dims["K"], dims["L"])
        assert inst.K == dims["K"], (rule, head)
        check(number(row[i_tau]), Q.e_tau(inst, rule), f"{rule} E[τ]")
        gen = Q.gen(inst, rule, dims["N"])
        check(number(row[i_calls]), gen.tokens_per_call, f"{rule} tokens per call, {head}")
        tv = total_variation(gen.token_law, target_law(inst.target, dims["N"]))
        m = re.search(r"TV (\S+) from the target", row[0])
        if m:  # the lossy row says how far it is
            assert not registry.spec(rule).lossless
            check(number(m.group(1)), tv, f"{rule} TV of the first {dims['N']} tokens")
        elif registry.spec(rule).lossless:
            bound = re.search(r"Every lossless row has TV ≤ (\S+) from the target", toy_text)
            assert bound, "the TV bound sentence is gone"
            assert tv <= float(bound.group(1)), (rule, tv)


# -- proofs_check/VERDICTS.md and verdicts.json -----------------------------------------------------

@pytest.fixture(scope="module")
def verdicts_json() -> list[dict]:
    return json.loads(VERDICTS_JSON.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def verdicts_text() -> str:
    return VERDICTS_MD.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def verdict_tables(verdicts_text) -> list[Table]:
    return md_tables(verdicts_text)


def deviation_text(x: float) -> str:
    return f"{x:.3g}"  # as `spectr-gbv prove --markdown` prints it


def test_verdict_table_equals_json(verdict_tables, verdicts_json):
    t = table(verdict_tables, "id")
    assert t.header == ["id", "claim", "source", "instances", "verdict", "worst deviation",
                        "counterexample / witness"]
    assert [r[0] for r in t.rows] == [c["id"] for c in verdicts_json]
    for row, c in zip(t.rows, verdicts_json):
        assert row[1] == c["claim"] and row[2] == c["source"], c["id"]
        assert int(row[3]) == c["instances"], c["id"]
        assert row[4] == f"**{c['verdict']}**" and c["verdict"] in ("holds", "fails"), c["id"]
        assert row[5] == deviation_text(c["worst_deviation"]), (c["id"], row[5], c["worst_deviation"])
        example = c["counterexample"] or c["witness"]
        assert row[6] == (c["instance_label"] if example else ""), c["id"]


def test_verdicts_are_consistent_with_their_deviations(verdicts_json):
    """holds / fails follows from the worst deviation and the tolerance (universal claims hold
    when nothing exceeds it; existential ones when a witness does)."""
    for c in verdicts_json:
        exceeded = c["worst_deviation"] > c["tolerance"]
        existential = c["witness"] is not None or c["note"].startswith("existential")
        if existential:
            assert c["verdict"] == ("holds" if exceeded else "fails"), c["id"]
            assert (c["witness"] is not None) == (c["verdict"] == "holds"), c["id"]
        else:
            assert c["verdict"] == ("fails" if exceeded else "holds"), c["id"]
            assert (c["counterexample"] is not None) == (c["verdict"] == "fails"), c["id"]


def test_counterexample_blocks_equal_json(verdicts_text, verdicts_json):
    blocks = re.findall(r"<details><summary>(\S+): (counterexample|witness) — (.*?)</summary>\s*```json\n(.*?)\n```",
                        verdicts_text, re.S)
    want = [(c["id"], "counterexample" if c["counterexample"] else "witness", c["instance_label"],
             c["counterexample"] or c["witness"]) for c in verdicts_json if c["counterexample"] or c["witness"]]
    assert len(blocks) == len(want)
    for (id_, kind, label, body), (wid, wkind, wlabel, wexample) in zip(blocks, want):
        assert (id_, kind, label) == (wid, wkind, wlabel)
        assert json.loads(body) == wexample, id_


def instance_of(label: str) -> Instance:
    """The instance a verdict's label names (proofs_check.instances labels)."""
    m = re.fullmatch(r"toy K=(\d+) L=(\d+)", label)
    if m:
        return toy(int(m[1]), int(m[2]))
    m = re.fullmatch(r"(random|equal|disjoint) V=(\d+) K=(\d+) L=(\d+) seed=(\d+) conc=([\d.]+) zero=([\d.]+)", label)
    assert m, f"unparsed instance label {label!r}"
    inst = random_instance(int(m[2]), int(m[3]), int(m[4]), int(m[5]), float(m[6]), float(m[7]), m[1])
    assert inst.label == label
    return inst


def claims_by_id() -> dict:
    from spectr_gbv.proofs_check.claims import build_claims

    return {c.id: c for c in build_claims()}


def same_deviation(recomputed: float, committed: float, tol: float) -> bool:
    if committed < NOISE and recomputed < NOISE:
        return recomputed <= tol and committed <= tol
    return deviation_text(recomputed) == deviation_text(committed)


def _committed() -> list[dict]:
    return json.loads(VERDICTS_JSON.read_text(encoding="utf-8"))


# The full run's own timing (verdicts.json "seconds") picks the claims re-run here: well under a
# second each there (beside other jobs), a few seconds in all.
RERUN = [c["id"] for c in _committed() if c["seconds"] <= 1.0]


@pytest.mark.parametrize("claim_id", RERUN)
def test_cheap_claims_rerun_to_the_committed_verdict(claim_id):
    from spectr_gbv.proofs_check.runner import run_claim

    committed = next(c for c in _committed() if c["id"] == claim_id)
    got = run_claim(claims_by_id()[claim_id], "full").to_json()
    assert got["verdict"] == committed["verdict"]
    assert got["instances"] == committed["instances"]
    if committed["worst_deviation"] >= NOISE or committed["counterexample"] or committed["witness"]:
        # (the worst of rounding-level deviations is a matter of the last bits: its instance too)
        assert got["instance_label"] == committed["instance_label"]
    assert got["counterexample"] == committed["counterexample"] and got["witness"] == committed["witness"]
    assert same_deviation(got["worst_deviation"], committed["worst_deviation"], committed["tolerance"]), \
        (got["worst_deviation"], committed["worst_deviation"])


MEASURED = [c["id"] for c in _committed() if c["instance_label"] and c["id"] not in RERUN]


@pytest.mark.parametrize("claim_id", MEASURED)
def test_deviation_on_the_reported_instance(claim_id):
    """A universal claim that holds reports its worst instance: the deviation there is the
    worst deviation.  A counterexample (or witness) exceeds the tolerance and is at most the
    worst deviation (the search may have met a worse instance before shrinking)."""
    committed = next(c for c in _committed() if c["id"] == claim_id)
    claim = claims_by_id()[claim_id]
    d = float(claim.measure(instance_of(committed["instance_label"])))
    worst, tol = committed["worst_deviation"], committed["tolerance"]
    if committed["counterexample"] is None and committed["witness"] is None:
        assert same_deviation(d, worst, tol), (d, worst)
    else:
        assert tol < d <= worst * (1 + 1e-12), (d, tol, worst)
        if d != worst:
            assert float(deviation_text(d)) <= float(deviation_text(worst))


def test_one_iteration_table(verdict_tables):
    """Every cell of the reported E[τ] table (toy and seeded instances)."""
    found = [tt for tt in verdict_tables if tt.header[0] == "instance" and "SD (K=1)" in tt.header]
    assert len(found) == 1
    t = found[0]
    for row in t.rows:
        inst = instance_of(row[0])
        for col, cell in zip(t.header[1:], row[1:]):
            if col.endswith("(K=1)"):
                got, tol = Q.e_tau(inst.with_K(1), col.split()[0].lower()), EXACT_TOL
            elif col == "B(K,L)":
                got, tol = Q.bound_B(inst), EXACT_TOL
            elif col == "no-mod LP":
                got, tol = Q.program(inst, "no_modification"), LP_TOL
            elif col == "global OT":
                got, tol = Q.program(inst, "global_ot"), LP_TOL
            else:
                got, tol = Q.e_tau(inst, col), EXACT_TOL
            check(number(cell), got, f"{row[0]} {col}", tol)
    assert len(t.rows) == 8 and len(t.header) == 1 + len(registry.names()) + 3


def test_generation_table_toy_rows(verdict_tables):
    """The toy K=2 L=2 rows of the whole-generation table, every cell (the other instances'
    rows need N up to 12 tokens: minutes).  docs/toy.md §4 prints some of the same numbers
    (test_toy_generation): both documents agree with one recomputation."""
    gens = [tt for tt in verdict_tables if tt.header[:3] == ["instance", "rule", "K"]]
    assert len(gens) == 1
    t = gens[0]
    rows = [row for row in t.rows if row[0] == "toy K=2 L=2"]
    assert sorted(row[1].split()[0] for row in rows) == sorted(registry.names())
    for row in rows:
        rule, K = row[1].split()[0], int(row[2])
        assert row[1].endswith("(lossy)") == (not registry.spec(rule).lossless)
        inst = generation_inst(rule, K, 2)
        assert inst.K == K
        check(number(row[3]), Q.e_tau(inst, rule) + 1, f"{rule} E[τ]+1")
        for m in (2, 3, 4):
            check(number(row[t.column(f"N={m}L")]), Q.gen(inst, rule, 2 * m).tokens_per_call, f"{rule} N={m}L")


# -- certification tables ---------------------------------------------------------------------------

SUMMARY = re.compile(r"\*\*(\d+) cases in \d+ s \((\w+)\): lossless (\d+)/(\d+) passed, conformance (\d+)/(\d+) passed, "
                     r"planted (\d+)/(\d+) caught — (CERTIFIED|NOT CERTIFIED)\*\*")
CERTIFY_HEADERS = ["kind", "rule", "case", "dtype", "N", "α", "detectable δ", "statistic", "p-value",
                   "mean τ [CI]", "exact E[τ]", "expected", "verdict", "caught"]


def certify_problems(text: str) -> list[str]:
    """Why a markdown certification report is inconsistent (empty: consistent)."""
    problems = []
    summaries = list(SUMMARY.finditer(text))
    tables = [t for t in md_tables(text) if t.header == CERTIFY_HEADERS]
    if len(summaries) != len(tables):
        return [f"{len(summaries)} summary lines for {len(tables)} certification tables"]
    for m, t in zip(summaries, tables):
        col = {h: i for i, h in enumerate(t.header)}
        ok = {"lossless": [0, 0], "conformance": [0, 0], "planted": [0, 0]}
        all_ok = True
        for row in t.rows:
            kind, verdict = row[col["kind"]], unbold(row[col["verdict"]])
            expect_pass = row[col["expected"]] == "pass"
            try:
                alpha = float(row[col["α"]])
                p = float(row[col["p-value"]]) if row[col["p-value"]] != "—" else math.nan
                delta = float(row[col["detectable δ"]]) if row[col["detectable δ"]] != "—" else math.nan
            except ValueError as err:
                problems.append(f"{row}: {err}")
                continue
            if verdict != "ERROR" and math.isfinite(p):
                passed = p >= alpha * (1 - 5e-3)  # the p-value is printed to 3 significant digits
                if expect_pass:
                    want = ("PASS" if delta < 1.0 else "VACUOUS") if passed else "FAIL"
                else:
                    want = "MISSED" if passed else "CAUGHT"
                if abs(p - alpha) > 5e-3 * alpha and verdict != want:
                    problems.append(f"{row[col['rule']]} {row[col['case']]}: verdict {verdict}, "
                                    f"p-value {p:g} against α {alpha:g} and δ {delta:g} say {want}")
            good = verdict == ("PASS" if expect_pass else "CAUGHT")
            caught = row[col["caught"]]
            if expect_pass != (caught == "") or (not expect_pass and caught != ("yes" if good else "NO")):
                problems.append(f"{row[col['rule']]} {row[col['case']]}: caught {caught!r} with verdict {verdict}")
            if (row[col["verdict"]].startswith("**")) == good:
                problems.append(f"{row[col['rule']]} {row[col['case']]}: bold marks a row that is "
                                f"{'' if good else 'not '}ok")
            ok[kind][0] += good
            ok[kind][1] += 1
            all_ok &= good
        n, _, lp, ln, cp, cn, pc, pn, word = m.groups()
        counts = (int(n), int(lp), int(ln), int(cp), int(cn), int(pc), int(pn))
        want_counts = (len(t.rows), *ok["lossless"], *ok["conformance"], *ok["planted"])
        if counts != want_counts:
            problems.append(f"summary counts {counts} != rows {want_counts}")
        if word != ("CERTIFIED" if all_ok and t.rows else "NOT CERTIFIED"):
            problems.append(f"summary says {word} for rows that are {'all' if all_ok else 'not all'} ok")
    return problems


def committed_markdown() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / p for p in out.stdout.split()]


def certify_reports() -> list[Path]:
    return [p for p in committed_markdown() if p.exists() and "CERTIFIED" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("path", certify_reports() or [None], ids=lambda p: "none-committed" if p is None else
                         str(p.relative_to(ROOT)))
def test_committed_certification_tables_are_consistent(path):
    if path is None:
        pytest.skip("no certification report is committed (no *.md with a CERTIFIED summary)")
    text = path.read_text(encoding="utf-8")
    assert SUMMARY.search(text), f"{path}: CERTIFIED without a summary line of `spectr-gbv certify`"
    assert certify_problems(text) == []


SAMPLE_REPORT = """\
**4 cases in 12 s (quick): lossless 1/2 passed, conformance 1/1 passed, planted 1/1 caught — NOT CERTIFIED**

| kind | rule | case | dtype | N | α | detectable δ | statistic | p-value | mean τ [CI] | exact E[τ] | expected | verdict | caught |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| lossless | mdbv | toy V=3 K=3 L=3 | float32 | 50000 | 1e-06 | 0.0108 | joint | 0.412 | 1.2345 [1.2200, 1.2490] | 1.2351 | pass | PASS |  |
| lossless | sd | toy V=3 K=1 L=3 | float32 | 50000 | 1e-06 | 0.0101 | tau | 3.1e-08 | 0.9000 [0.8800, 0.9200] | 0.9500 | pass | **FAIL** |  |
| conformance | spectr_gbv | toy V=3 K=3 L=3 | float32 | 50000 | 1e-06 | 0.0112 | joint | 0.0571 | 1.1000 [1.0900, 1.1100] | 1.1003 | pass | PASS |  |
| planted | planted_bv_shared_uniform | toy V=3 K=1 L=3 | float32 | 50000 | 1e-06 | 0.0099 | joint \\| first | 1.2e-30 | 0.8000 [0.7900, 0.8100] | 0.9000 | fail | CAUGHT | yes |
"""


def test_certification_check_catches_inconsistencies():
    """The checker on a report in `spectr-gbv certify --markdown`'s format: consistent as
    written, and each kind of edit is caught."""
    assert certify_problems(SAMPLE_REPORT) == []
    edits = [
        ("lossless 1/2 passed", "lossless 2/2 passed"),  # count
        ("**4 cases", "**5 cases"),  # total
        ("NOT CERTIFIED", "CERTIFIED"),  # verdict of the whole
        ("| 0.412 |", "| 4.1e-07 |"),  # a p-value below α under a PASS
        ("| CAUGHT | yes |", "| CAUGHT | NO |"),  # caught column
        ("| **FAIL** |", "| FAIL |"),  # not-ok rows are bold
    ]
    for old, new in edits:
        assert old in SAMPLE_REPORT, old
        assert certify_problems(SAMPLE_REPORT.replace(old, new)) != [], (old, new)
