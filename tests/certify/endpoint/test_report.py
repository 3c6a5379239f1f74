"""certify/endpoint/report.py: the text report's last lines and the JSON of a run that drew no
sample (stopped before its first answer, or every sample read back from the run file)."""

from __future__ import annotations

import json

from spectr_gbv.certify.endpoint.report import certificate_json, text_report
from spectr_gbv.certify.endpoint.run import DeploymentCertificate, Plan


def _cert(new_samples: int, samples: int, wall_s: float) -> DeploymentCertificate:
    cert = DeploymentCertificate(Plan(), "http://127.0.0.1:8000", "m", "self")
    cert.new_samples, cert.samples, cert.wall_s = new_samples, samples, wall_s
    return cert


def test_a_run_that_drew_no_sample_prints_no_rate():
    cert = _cert(0, 0, 694.9)
    cert.notes.append("stopped by the user after 0 of 80 samples")
    out = text_report(cert)
    assert "verdict: INCOMPLETE" in out
    assert "0 samples drawn in 694.9 s\n" in out
    assert "nan" not in out and "samples/s" not in out
    # the JSON says null, not NaN (which is not JSON)
    data = certificate_json(cert)
    assert data["samples_per_second"] is None
    json.dumps(data, allow_nan=False)


def test_a_resumed_run_that_drew_no_new_sample_prints_no_rate():
    out = text_report(_cert(0, 30, 0.4))
    assert "0 samples drawn in 0.4 s; 30 read back from the run file" in out and "samples/s" not in out


def test_a_run_that_drew_samples_prints_its_rate():
    cert = _cert(40, 50, 8.0)
    out = text_report(cert)
    assert "40 samples drawn in 8.0 s (5.00 samples/s); 10 read back from the run file" in out
    assert certificate_json(cert)["samples_per_second"] == 5.0
