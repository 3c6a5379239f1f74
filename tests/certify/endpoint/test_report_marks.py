"""certify/endpoint/report.py: every failing line of the text report is marked "<- FAIL" (omnibus
pooled rows, per-position rows, directional and report tests, impossible tokens), and the first
line names the member that decided the verdict (the smallest p / α among the failed tests, after
what fails without a p-value)."""

from __future__ import annotations

import math

from spectr_gbv.certify.endpoint.report import FAIL, decided_by, deciding_lines, text_report
from spectr_gbv.certify.endpoint.run import DeploymentCertificate, Plan
from spectr_gbv.oracle.sequence_family import FamilyResult
from spectr_gbv.oracle.sequence_scores import DirectionalResult
from spectr_gbv.oracle.sequence_test import SequenceRow


def _row(scope, order, p, alpha):
    return SequenceRow(scope, order, "KS", 0.1, p, 80, alpha, 0.1, p >= alpha)


def _dir(name, p, alpha=2.5e-4, unit="|Δβ| (≈ |ΔT|/T)"):
    return DirectionalResult(name, 3.0, p, 1280, 1.0, 0.0, 1.0, 0.0, alpha, 0, 0.1, unit, p >= alpha)


def _cert(rows, dirs, impossible=0, reports=()):
    fam = FamilyResult(tuple(rows), tuple(dirs), 1e-3, 1e-3, 80, 1280, 0, impossible, 20,
                       all(r.passed for r in rows) and all(d.passed for d in dirs) and not impossible, 0.1)
    cert = DeploymentCertificate(Plan(), "http://127.0.0.1:8000", "m", "self", family=fam, reports=tuple(reports))
    cert.samples = cert.new_samples = 80
    cert.complete, cert.wall_s = True, 1.0
    return cert


def _fail_lines(out):
    return [x for x in out.splitlines() if x.endswith(FAIL)]


def test_every_failing_row_is_marked_and_the_decider_named_first():
    a_pool, a_pos = 1e-3 / 16, 1e-3 / 8 / 32
    rows = [_row("all", "id", 0.5, a_pool), _row("all", "probability", 1e-6, a_pool)]
    rows += [_row(f"position {j}", o, 1e-9 if (j, o) in ((3, "id"), (7, "probability")) else 0.4, a_pos)
             for j in range(16) for o in ("id", "probability")]
    dirs = [_dir("temperature", 0.3), _dir("truncation (top-p 0.95)", 1e-4), _dir("position shift", 0.9)]
    cert = _cert(rows, dirs)
    out = text_report(cert)
    first = out.splitlines()[0]
    # p/α: position rows 1e-9/3.9e-6 = 2.6e-4 < pooled 1e-6/6.25e-5 = 0.016 < truncation 0.4
    assert first.startswith("verdict: FAIL — decided by omnibus PIT KS (position 3, id order; p 1e-09 < alpha 3.9e-06)")
    assert "3 more failing lines marked <- FAIL below" in first
    marked = _fail_lines(out)
    assert any(x.startswith("  omnibus PIT KS, probability order: p 1e-06") for x in marked)
    assert not any(x.startswith("  omnibus PIT KS, id order") for x in marked)  # p 0.5 passes: no mark
    assert any(x.startswith("  per position: smallest p 1e-09") and "2 of 32 rows below their alpha" in x
               for x in marked)
    assert any(x.strip().startswith("position 3, id order") for x in marked)
    assert any(x.strip().startswith("position 7, probability order") for x in marked)
    assert any(x.startswith("  truncation (top-p 0.95)") for x in marked)
    assert len(marked) == 5  # the pooled row, the per-position summary and its 2 rows, truncation
    assert decided_by(cert)[1:] == [
        "omnibus PIT KS (position 7, probability order; p 1e-09 < alpha 3.9e-06)",
        "omnibus PIT KS (pooled, probability order; p 1e-06 < alpha 6.3e-05)",
        "truncation (top-p 0.95) (log W 3, p 0.0001 < alpha 0.00025)"]


def test_impossible_tokens_and_report_tests_are_marked_and_decide_first():
    rows = [_row("all", "id", 0.5, 1e-4), _row("all", "probability", 0.5, 1e-4)]
    other = DirectionalResult("reported top-k: other cell", math.inf, 0.0, 50, 3.0, 1e-3, 1e-3, 0.0, 6.25e-5, 1,
                              1.0, "tokens outside (caught: 1)", False)
    cert = _cert(rows, [_dir("temperature", 0.3)], impossible=2, reports=[other])
    out = text_report(cert)
    assert out.splitlines()[0].startswith("verdict: FAIL — decided by 2 tokens of probability 0 under the reference")
    marked = _fail_lines(out)
    assert any("2 tokens the reference gives probability 0" in x for x in marked)
    assert any(x.startswith("reported top-k: other cell: 3 sampled tokens outside") for x in marked)
    assert any(x.startswith("reported top-k: other cell test failed") for x in deciding_lines(cert))


def test_a_pass_names_no_decider_and_marks_nothing():
    rows = [_row("all", "id", 0.5, 1e-4), _row("all", "probability", 0.5, 1e-4)]
    cert = _cert(rows, [_dir("temperature", 0.3)])
    out = text_report(cert)
    assert out.splitlines()[0] == "verdict: PASS" and not _fail_lines(out) and decided_by(cert) == []
