"""Samplers in vLLM's layout written from scratch (tests/helpers/scratch_vllm.py), each with one
serving defect, through ``from_vllm_layout`` and the public certifier: each is rejected WITH A
VERDICT — a failed row or check carrying its reason, never an exception — and the correct twin
``layout_sd`` passes.

Statistics: certify_verifier at N = 2,000 per case, α = 1e-6 per case (δ ≈ 0.09 on these V ≤ 5
families); the seed checks and the adapter's filler checks are deterministic (a sampler keeping
the contract never fails them).
"""

from __future__ import annotations

import pytest

import re

from helpers.scratch_vllm import abs_residual, extra_token, layout_sd, neighbour_temperature, one_generator
from helpers.verifier_cases import one_torch_thread  # noqa: F401  (autouse fixture)
from spectr_gbv.gpu_backend.adapters.vllm_adapter import from_vllm_layout
from spectr_gbv.gpu_backend.adapters.vllm_rules import rules_in_vllm_layout
from spectr_gbv.certify.samplers.vllm import layout_batch_checks
from spectr_gbv.oracle.harness import certify_verifier

N = 2_000
FAMILIES = ("toy", "zeros", "equal")


def _certify(fn, families=FAMILIES, n=N):
    return certify_verifier(from_vllm_layout(fn), "sd", K=1, L=3, families=families, n_samples=n, alpha=1e-6)


def test_the_correct_twin_passes():
    report = _certify(layout_sd)
    assert report.ok, report.table()


def test_one_generator_for_every_request_fails_batch_independence_only():
    report = _certify(one_generator)
    assert all(r.passed for r in report.results), report.table()
    checks = {c.name: c for c in report.seed_checks}
    assert checks["seed replay"].passed and checks["seed dependence"].passed
    assert not checks["batch independence"].passed and checks["batch independence"].changed > 50
    assert not report.ok


def test_the_layout_batch_checks_of_the_vllm_certificate():
    """certify/samplers/vllm.py's own deterministic rows, on samplers we can run here."""
    assert layout_batch_checks(layout_sd) == (20, 20)
    assert layout_batch_checks(rules_in_vllm_layout("sd")) == (20, 20)
    same, independent = layout_batch_checks(one_generator)
    assert same == 20 and independent == 0


@pytest.mark.parametrize("fn, reason", [
    (extra_token, r"(emitted \d+ tokens, more than its \d+ drafts \+ 1|has tokens past its 4 entries)"),
    (abs_residual, r"of target probability 0"),
    (neighbour_temperature, r"not the exact greedy outcome"),
])
def test_a_filler_catch_is_a_verdict_not_an_exception(fn, reason):
    """The adapter's filler checks stop such a sampler (a ContractViolation from inside the
    verifier); the certification goes on and returns its report, which rejects the sampler: a
    case's "verifier output" check, or a seed check, fails with the filler's reason.  Which calls
    trip a filler depends on their random filler rows (the |q − p| residual reaches a q = 0 token
    only after a rejection); a case the fillers did not stop fails its law tests or, where the
    defect cannot act ("equal": p = q, no rejection), passes."""
    report = _certify(fn)  # no exception
    assert not report.ok
    details = [d for r in report.results for _, d in r.failed_checks] + [c.detail for c in report.seed_checks]
    assert any(d.startswith("the verifier") and re.search(reason, d) for d in details), report.table()
    for r in report.results:
        assert r.failed_tests in ([], ["verifier output"]) or "joint outcome" in r.failed_tests, report.table()
    assert sum(not r.passed for r in report.results) >= 2
