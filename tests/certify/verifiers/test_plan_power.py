"""The power the full `spectr-gbv certify` plan states on its V = 4,096 rows, from the plan alone.

For every rule's V = 4,096 cases of the full plan (certify/verifiers/run.py: N =
``planned_n``, 10^6 in float32 and 2·10^6 in bfloat16), the δ that ``certify_case`` will state
is computed from the case's exact law and N by ``oracle.certify.case_power`` (the same family
size, α per test, pooling and bins as ``certify_case``; no verifier runs): every lossless rule's
case — and every conformance rule's — states δ ≤ 0.02 on the whole outcome law at α = 10^-6
(at N = 2·10^5 they stated 0.025-0.082).  ``case_power`` assumes no count on the rare cells
(expected count < 5 in all): ``certify_case``'s δ uses the samples outside them, a factor
√(N/(N − a few)) ≈ 1 + 10^-5 larger.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from spectr_gbv.certify.verifiers import run as certification  # noqa: E402
from spectr_gbv.oracle.certify import case_power  # noqa: E402
from spectr_gbv.reference.rules import registry  # noqa: E402

MAX_DELTA = 0.02
ROW_SIZES = ("rows", "rows_bf16")


def test_full_plan_rows_take_more_samples_than_the_rest():
    assert certification.planned_n("rows", quick=False) == 1_000_000
    assert certification.planned_n("rows_bf16", quick=False) == 2_000_000
    assert certification.planned_n("toy", quick=False) == certification.FULL_N == 200_000
    # --quick is unchanged (benchmarks/CERTIFY_QUICK.md)
    assert all(certification.planned_n(s, quick=True) == certification.QUICK_N[s] for s in ROW_SIZES)
    entries = certification.plan(list(registry.names()), quick=False)
    rows = [e for e in entries if e.size in ROW_SIZES]
    assert {e.size for e in rows} == set(ROW_SIZES)


@pytest.mark.slow
@pytest.mark.parametrize("rule", registry.names())
def test_full_plan_states_delta_at_most_0_02_on_v4096_rows(rule):
    """Every V = 4,096 case of ``rule`` in the full plan: six tests, δ ≤ 0.02 at α = 10^-6
    (lossless and conformance rules alike; mdbv's exact law costs ~20 s)."""
    entries = [e for e in certification.plan([rule], quick=False)
               if e.rule == rule and e.size in ROW_SIZES]
    assert entries, rule
    for entry in entries:
        n = certification.planned_n(entry.size, quick=False)
        for case in entry.build():
            assert case.V == 4096, case.name
            p = case_power(case, n, certification.DEFAULT_ALPHA)
            print(f"{case.name}: N = {n}, {p.joint.n_large} of {p.joint.support} outcomes with expected "
                  f"count ≥ 5, {p.joint.n_cells} cells, pooled mass {p.joint.merged_mass:.4f}, "
                  f"δ = {p.joint.detectable_tv:.4f} + {p.joint.merged_mass:.4f} = {p.detectable_tv:.4f}; "
                  f"coarsened δ {p.coarse.detectable_tv_law:.4f}")
            assert p.n_tests == 6 and p.alpha_per_test == certification.DEFAULT_ALPHA / 6
            assert p.detectable_tv <= MAX_DELTA, (case.name, n, p)
