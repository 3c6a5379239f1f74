"""A PASS names what it did not see (``HarnessReport.not_seen``, ``LosslessReport.not_seen``;
oracle.harness.not_seen_by): the families the caller left out, per-request temperatures, how the
Algorithm 2 record was checked, the drafter, the coin extremes, the input probes when off."""

from __future__ import annotations

import pytest

from helpers.scratch_verifiers import own_stream_drafter, sd
from helpers.scratch_vllm import layout_sd
from spectr_gbv.gpu_backend.adapters.vllm_adapter import from_vllm_layout
from spectr_gbv.oracle.certify_cases import FAMILIES
from spectr_gbv.oracle.harness import certify_lossless, certify_verifier
from spectr_gbv.oracle.lossless import default_pairs
from spectr_gbv.reference.rules import RULES


def _has(lines, text):
    return any(text in line for line in lines)


def test_certify_verifier_names_what_it_skipped():
    report = certify_verifier(sd, "sd", K=1, L=3, families=("toy",), n_samples=500)
    assert report.ok
    left = next(line for line in report.not_seen if line.startswith("families left out"))
    assert all(f"{f} (" in left for f in FAMILIES if f != "toy")  # each with what it sees
    assert _has(report.not_seen, "per-request temperatures") and _has(report.not_seen, "the drafter")
    assert _has(report.not_seen, "u = 2^-53") and not any(line.startswith("Algorithm 2 record")
                                                          for line in report.not_seen)
    assert not _has(report.not_seen, "input_checks=False")
    assert "not seen: per-request temperatures" in report.table()
    defaults = certify_verifier(sd, "sd", K=1, L=3, families=None, cases=(), n_samples=200,
                                input_checks=False)
    assert not _has(defaults.not_seen, "families left out") and _has(defaults.not_seen, "input_checks=False")


def test_the_record_line_and_the_adapter_s_temperatures():
    gbv = certify_verifier(RULES["gbv"], "gbv", K=1, L=3, families=("toy",), n_samples=500)
    assert _has(gbv.not_seen, "Algorithm 2 record: checked on every sampled row")
    through = certify_verifier(from_vllm_layout(layout_sd), "sd", K=1, L=3, families=("toy",), n_samples=500)
    assert through.ok and not _has(through.not_seen, "per-request temperatures")
    plain = certify_verifier(from_vllm_layout(layout_sd, realistic=False), "sd", K=1, L=3, families=("toy",),
                             n_samples=500)
    assert _has(plain.not_seen, "per-request temperatures")


@pytest.mark.slow  # about 50 s: the defaults at K = 1 include the two V ≥ 32,768 pairs
def test_certify_lossless_names_what_it_skipped():
    small = [p for p in default_pairs() if p.V <= 64]
    report = certify_lossless(sd, K=1, L=3, models=small, n_samples=500)
    assert _has(report.not_seen, "the default pairs") and _has(report.not_seen, "the drafter")
    assert _has(report.not_seen, "Algorithm 2 record: none returned")
    assert _has(report.not_seen, "blocks of the L = 3 asked on every pair: zeros at L = 2, wide at L = 1")
    assert "not seen: " in report.table()
    with_drafter = certify_lossless(sd, K=1, L=2, models=small[:1], n_samples=500, drafter=own_stream_drafter)
    assert not _has(with_drafter.not_seen, "the drafter")
    defaults_at_k1 = certify_lossless(sd, K=1, L=1, models=None, n_samples=300)
    assert _has(defaults_at_k1.not_seen, "pairs not run at this K: multi (needs K ≥ 2)")
    records = certify_lossless(RULES["gbv"], K=1, L=2, models=small[:1], n_samples=500)
    assert not any(line.startswith("Algorithm 2 record") for line in records.not_seen)
