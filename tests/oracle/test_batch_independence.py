"""The seed contract's third check, "batch independence" (oracle/seed_contract.py): rows re-run
inside a permuted batch of another size and one position later must give, row for row, the same
outputs; and the public doors' "single-request path": every row re-run alone.

From-scratch verifiers (tests/helpers/scratch_verifiers.py) whose every row has SD's law but
whose row b depends on its batch — one generator seeded by seeds[0] for the whole batch, row b
reading its neighbour's seed — pass every statistical test and the two older seed checks, and
fail these two in every entry point: ``certify_verifier``, ``assert_lossless`` and
``certify_lossless``; the correct twin passes.  The checks are deterministic: a verifier that
keeps the contract fails them with probability 0; the defective ones here change a re-run row
unless its two outcomes coincide, which all B re-run rows do with probability ≤ Π c_b < 1e-12
(c_b the per-row coincidence of row b's case's exact law; the check batch of
``certify_verifier`` holds B ≥ 513 rows of its small cases).
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.scratch_verifiers import neighbour_seed_sd, one_stream_sd, sd
from spectr_gbv.oracle.harness import certify_lossless, certify_verifier
from spectr_gbv.oracle.lossless import ToyPair
from spectr_gbv.oracle.pytest_plugin import CertificationFailed, assert_lossless
from spectr_gbv.oracle.harness import CONTRACT_CHECK_NAMES
from spectr_gbv.oracle.mixed_batches import CHECK_ROWS
from spectr_gbv.oracle.seed_contract import check_seed_contract
from spectr_gbv.oracle.certify_cases import case_family
from spectr_gbv.reference.models import ContextFree

TOY = ToyPair("toy", ContextFree([2 / 3, 1 / 3]), ContextFree([1 / 3, 2 / 3]))
N = 4096


def _checks(report) -> dict:
    return {c.name: c for c in report.seed_checks}


def test_the_correct_twin_passes_all_the_checks():
    report = certify_verifier(sd, "sd", K=1, L=3, families=("toy", "zeros"), n_samples=N)
    assert report.ok, report.table()
    checks = _checks(report)
    assert tuple(checks) == CONTRACT_CHECK_NAMES
    bi, alone = checks["batch independence"], checks["single-request path"]
    assert bi.passed and bi.changed == 0 and bi.false_alarm == 0.0 and bi.rows >= CHECK_ROWS
    B = bi.rows
    assert f"inside a batch of {B + -(-B // 8)}" in bi.detail and f"inside a batch of {B + 1}" in bi.detail
    assert "identical outputs" in bi.detail
    assert alone.passed and alone.rows == B and f"each of the {B} rows re-run alone" in alone.detail


@pytest.mark.parametrize("verifier", [one_stream_sd, neighbour_seed_sd])
def test_batch_dependent_verifiers_fail_only_the_batch_checks(verifier):
    """Their law is SD's (every case passes at N = 4,096, α = 1e-6) and they replay, use their
    seeds and all their bits: only the two batch checks see them."""
    report = certify_verifier(verifier, "sd", K=1, L=3, families=("toy", "zeros"), n_samples=N)
    assert all(r.passed for r in report.results), report.table()
    checks = _checks(report)
    assert [c.name for c in report.seed_checks if not c.passed] == ["batch independence", "single-request path"]
    bi = checks["batch independence"]
    assert not report.ok
    # c ≤ 0.39 per row on "toy" and "zeros" (their exact laws' collision probabilities): most re-run
    # rows change (a verifier that keeps the contract changes none)
    assert bi.changed > 100 and bi.detail.startswith("depends on its batch")
    assert checks["single-request path"].changed > 100
    assert "batch independence" in report.table()


def test_assert_lossless_names_the_batch_dependence():
    with pytest.raises(CertificationFailed, match="batch independence: depends on its batch") as failed:
        assert_lossless(one_stream_sd, "sd", K=1, L=3, families=("toy",), n_samples=N)
    assert "cases fail" not in str(failed.value).splitlines()[0]  # no case's law is blamed


def test_certify_lossless_sees_it_too():
    ok = certify_lossless(sd, K=1, L=1, models=[TOY], n_samples=2_000)
    assert ok.ok, ok.table()
    bad = certify_lossless(one_stream_sd, K=1, L=1, models=[TOY], n_samples=2_000)
    assert all(r.passed for r in bad.results), bad.table()
    assert bad.failed == {"seed contract": ("batch independence", "single-request path")}


def test_the_check_replays_and_reports_a_raising_verifier_as_a_failure():
    """The permuted batch is a function of the seeds (the same call twice: the same verdicts);
    a verifier that raises on a re-run row fails the check with the error, it does not raise."""
    case = case_family("toy", "sd", 1, 3)
    rows = [np.broadcast_to(a, (64,) + a.shape) for a in (case.draft_tokens, case.draft_probs, case.target_probs)]
    seeds, fresh = np.arange(64, dtype=np.int64) * 7919, np.arange(64, dtype=np.int64) * 104729 + 1
    a = check_seed_contract(one_stream_sd, *rows, seeds, fresh)
    b = check_seed_contract(one_stream_sd, *rows, seeds, fresh)
    assert a == b and not a[2].passed

    def no_single_rows(draft_tokens, draft_probs, target_probs, *, seeds):
        if len(seeds) == 1:
            raise RuntimeError("batches of one row are not supported")
        return sd(draft_tokens, draft_probs, target_probs, seeds=seeds)

    replay, dep, bi = check_seed_contract(no_single_rows, *rows, seeds, fresh)
    assert replay.passed and dep.passed
    assert not bi.passed and bi.detail.endswith("RuntimeError: batches of one row are not supported")
