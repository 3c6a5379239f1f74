"""Each blind spot of the public defaults before the coverage, onehot, branches and deep families
(docs/guarantees.md, "What each certification can and cannot see"), planted in a verifier written from the
batched contract (tests/oracle/public_planted.py), FAILS oracle.harness.certify_verifier with
its default families, and the report names the family that caught it; lossless reference
verifiers still pass the new families.

Exact effects (TV between the planted verifier's law and the claimed rule's, enumerated;
0 on every other default family; only the top-k defect was visible to the six families the
public defaults ran before, through "large" — and it is invisible to every pair of V ≤ 5):

| planted | claims | caught by | TV there | of which on outcomes of probability 0 |
|---|---|---|---|---|
| BV residual (q − p)_+ | bv | coverage | 0.0822 | 0.0448 |
| top-20 correction/bonus | sd | large | 0.7675 | 0 |
| accepts q = 0 (floor 0.05) | sd | zeros | 0.1467 | 0.1467 |
| one-hot rows: correction from q | sd | onehot | 0.2257 | 0.2257 |
| depth ≥ 3: correction from q | sd | deep | 0.2125 | 0.1858 |
| traversal, drafts not merged (w/o replacement) | traversal (K = 2) | branches | 0.3156 | 0.0337 |

(the zero-acceptance defect also moves "large" by 0.90 and "disjoint" by 0.32: their rows have
no exact zeros but the floor lifts tiny q; the unmerged traversal moves the K = 3 "distinctive"
case by 0.0666, where two of its three drafts share a first token; the top-k defect moves the
V = 151,936 "vocab" case by 0.555; measured with ``exact_effects`` below.)
"""

from __future__ import annotations

import pytest

from public_planted import (DeepTargetRowSD, OneHotBugSD, TopKSD, UnmergedTraversal, UnweightedResidualBV,
                            ZeroAcceptSD)
from spectr_gbv.oracle.certify import exact_verdict_law
from spectr_gbv.oracle.certify_cases import FAMILIES, FamilyNotApplicable, case_family
from spectr_gbv.oracle.harness import certify_verifier
from spectr_gbv.oracle.pytest_plugin import CertificationFailed, assert_lossless
from spectr_gbv.reference.exact import total_variation
from spectr_gbv.reference.rules import RULES, get_rule

ALPHA = 1e-6
# (planted verifier, claimed rule, K, the family that must catch it, its exact TV there, N)
SLOW = pytest.mark.slow  # 24-36 s each on 2 cores (10 cases; N = 10,000 / the numpy traversal)
PLANTED = [
    pytest.param(UnweightedResidualBV, "bv", 1, "coverage", 0.0822, 10_000, marks=SLOW, id="UnweightedResidualBV"),
    pytest.param(TopKSD, "sd", 1, "large", 0.7675, 2_000, id="TopKSD"),
    pytest.param(ZeroAcceptSD, "sd", 1, "zeros", 0.1467, 2_000, id="ZeroAcceptSD"),
    pytest.param(OneHotBugSD, "sd", 1, "onehot", 0.2257, 2_000, id="OneHotBugSD"),
    pytest.param(DeepTargetRowSD, "sd", 1, "deep", 0.2125, 2_000, id="DeepTargetRowSD"),
    pytest.param(UnmergedTraversal, "traversal", 2, "branches", 0.3156, 2_000, marks=SLOW, id="UnmergedTraversal"),
]


def exact_effects(verifier, rule: str, K: int, L: int = 3) -> dict[str, float]:
    """Exact TV between ``verifier``'s law and ``rule``'s on every default family's case."""
    out = {}
    for family in FAMILIES:
        try:
            case = case_family(family, rule, K, L)
        except FamilyNotApplicable:
            continue
        rows = (case.draft_tokens, case.draft_probs, case.target_probs)
        out[family] = total_variation(exact_verdict_law(get_rule(rule), *rows), exact_verdict_law(verifier, *rows))
    return out


@pytest.mark.slow  # 38 s in all: exact laws of every family, V = 4,096 included
@pytest.mark.parametrize("make,rule,K,family,tv,n", PLANTED)
def test_the_defect_is_confined_to_one_family(make, rule, K, family, tv, n):
    """Exact: the planted defect moves the law of the family that must catch it by ``tv`` and
    no other family's (but those named in the module doc)."""
    effects = exact_effects(make(), rule, K)
    assert effects[family] == pytest.approx(tv, abs=5e-5)
    also = {ZeroAcceptSD: ("large", "disjoint"), UnmergedTraversal: ("distinctive",), TopKSD: ("vocab",)}.get(make, ())
    others = {f: e for f, e in effects.items() if f != family and f not in also}
    assert all(e < 1e-12 for e in others.values()), effects


@pytest.mark.parametrize("make,rule,K,family,tv,n", PLANTED)
def test_planted_defect_fails_the_public_defaults(make, rule, K, family, tv, n):
    """certify_verifier with its default families at N = ``n`` per case (10,000 for the BV
    residual, 2,000 for the others), α = 1e-6 per case: the family that sees the defect fails
    and the message names it.  Power: at N = 10,000 the coverage case states δ = 0.043 (TV 0.082
    there); at N = 2,000 the small-V cases state δ ≈ 0.10 and the V = 4,096 case δ ≈ 0.45, each
    below the defect's TV in its family (0.15–0.77), and the zero-acceptance and one-hot defects
    put mass on outcomes of probability 0, which fail the joint test outright."""
    with pytest.raises(CertificationFailed) as failed:
        assert_lossless(make(), rule, K=K, L=3, n_samples=n, alpha=ALPHA)
    report = failed.value.report
    bad = {r.name.split()[1]: r for r in report.results if not r.passed}
    assert family in bad, (family, sorted(bad))
    message = str(failed.value)
    assert f"case '{bad[family].name}': FAIL" in message
    assert family in message.splitlines()[0]
    assert bad[family].detectable_tv < tv


@pytest.mark.slow  # 57 s in all
@pytest.mark.parametrize("rule,K", [("sd", 1), ("bv", 1), ("gbv", 1), ("spectr", 2), ("kseq_gbv", 2),
                                    ("kseq_bv", 2), ("traversal", 2), ("mdbv_kseq", 2)])
def test_lossless_reference_verifiers_pass_the_new_families(rule, K):
    """The numpy reference of each lossless rule (the batched contract, seeded per row) passes
    the families added then (coverage, onehot, branches, deep, zeros) at N = 4,000, α = 1e-6 (false-alarm rate ≤ 1e-6 per case;
    δ about 0.07 on these V ≤ 5 cases)."""
    families = ("coverage", "onehot", "branches", "deep", "zeros")
    families = tuple(f for f in families if not (f == "branches" and K == 1))
    report = certify_verifier(RULES[rule], rule, K=K, L=3, families=families, n_samples=4_000, alpha=ALPHA)
    assert report.ok, report.table()
    assert [r.name.split()[1] for r in report.results] == list(families)
