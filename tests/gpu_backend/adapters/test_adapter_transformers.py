"""transformers' assisted-generation verifier (``_speculative_sampling``) certified by the public
harness through gpu_backend.adapters.transformers_sd.

N = 20,000 per case at α = 1e-6 (the adapter calls transformers once per row): detectable δ
(power 0.99) ≤ 0.034 on the small-vocabulary families, 0.14 on the V = 4,096 rows.  At its defaults it is token-level speculative
sampling and must pass against the exact law of "sd"; with ``assistant_ensemble_weight`` = 0.5
it is lossy by design and must fail, with a measured TV far above the detectable δ.  A
deterministic probe shows its boundary defect: its coin is ``u <= ratio`` with u ∈ [0, 1), so
at u = 0 it accepts a drafted token whose target probability is 0.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.adapters.transformers_sd import TransformersSpeculativeSampling  # noqa: E402
from spectr_gbv.oracle.certify_cases import FAMILIES, case_family  # noqa: E402
from spectr_gbv.oracle.harness import certify_verifier  # noqa: E402
from helpers.verifier_cases import one_torch_thread  # noqa: F401,E402  (autouse fixture)

N = 20_000
ALPHA = 1e-6


@pytest.mark.long  # deselected by default: `pytest -m long` (benchmarks/CI_TIMES.md)
def test_defaults_certified_as_sd():
    # input_checks=False: transformers takes logits from a model (gpu_backend.adapters.third_party)
    report = certify_verifier(TransformersSpeculativeSampling(), "sd", K=1, L=3, n_samples=N, alpha=ALPHA,
                              input_checks=False)
    assert report.ok, report.table()
    assert len(report.results) == len(FAMILIES) - 2  # "branches" (multi-draft) and "distinctive": no case for sd
    for r in report.results:
        assert r.verdict == "PASS"
        # V = 151,936 ("vocab", 5,000 rows): resolved by the coarsened test; the others by the joint one
        assert (r.detectable_tv_coarse < 0.08) if r.V == 151_936 else r.detectable_tv < (0.15 if r.V == 4096 else 0.034)


def test_ensemble_weight_is_caught_with_its_measured_tv():
    report = certify_verifier(TransformersSpeculativeSampling(0.5), "sd", K=1, L=3, families=("toy",),
                              n_samples=N, alpha=ALPHA)
    (r,) = report.results
    assert r.verdict == "FAIL" and not report.ok
    assert r.empirical_tv > 3 * r.detectable_tv
    assert r.mean_tau > r.mean_ci[0] and not r.mean_ci[0] <= r.exact_mean_tau <= r.mean_ci[1]


def test_u_zero_accepts_a_token_of_target_probability_zero():
    case = case_family("zeros", "sd", 1, 3)
    assert case.target_probs[0, 2, case.draft_tokens[0, 2]] == 0.0  # the last depth's drafted token
    verifier = TransformersSpeculativeSampling()
    rows = (case.draft_tokens[None], case.draft_probs[None], case.target_probs[None])
    with verifier.force_uniform(0.0):
        out = verifier(*rows, seeds=np.array([0]))
    assert out.tau[0] == 3  # the defect: accepted although q = 0
    with verifier.force_uniform(1e-7):
        assert verifier(*rows, seeds=np.array([0])).tau[0] == 2


def test_report_part_table():
    """The report's third-party table: transformers' defaults CERTIFIED, its ensemble weight
    CAUGHT, our bv through vLLM's layout CERTIFIED (N = 5,000 on one family here; the report
    runs N = 20,000 on all six; zeros is where the ensemble weight is plainest: it accepts
    tokens of target probability 0)."""
    from spectr_gbv.gpu_backend.adapters.third_party import THIRD_PARTY, certify_all, markdown, ok, verdict

    results = certify_all(n_samples=5_000, families=("zeros",))
    assert [verdict(e, r) for e, r in results] == ["CERTIFIED", "CAUGHT", "CERTIFIED"]
    assert len(results) == len(THIRD_PARTY) and ok(results)
    text = markdown(results)
    assert text.count("\n| transformers") == 2 and text.count("| 1/1 |") == 2 and "| 0/1 |" in text
    assert "N = 5,000 per case" in text
