"""``certify log --audit URL``: a server that reports the law it wrongly samples from (the chain
tempered to T 0.9, reported as the raw law) gives a log consistent with itself — the log alone
PASSes — and the audit, re-scoring a subsample by prefill against the correct server, FAILs it;
a correct server's log passes the audit.  Loopback test server only."""

from __future__ import annotations

import json

import pytest

from helpers.fake_deployment import serve
from helpers.recorded_logs import make_log
from spectr_gbv.certify.log.audit import audit_log, audited
from spectr_gbv.certify.log.run import LogPlan, certify_log
from spectr_gbv.cli import main as cli_main

PLAN = LogPlan(vocab=64)


def test_the_audit_catches_a_server_reporting_the_law_it_wrongly_samples_from(tmp_path, capsys):
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    make_log(bad, 300, seed=4, defect="reports-sampled-law")
    make_log(good, 300, seed=4)
    assert certify_log(str(bad), PLAN).verdict == "PASS"  # consistent with its own reports
    with serve(time_limit_s=120) as (url, state):
        a = audit_log(str(bad), PLAN, url, fraction=0.5, max_samples=64)
        ok = audit_log(str(good), PLAN, url, fraction=0.5, max_samples=64)
        code = cli_main.main(["certify", "log", str(bad), "--vocab", "64", "--audit", url, "--audit-fraction", "0.5",
                              "--json", str(tmp_path / "c.json"), "--out", str(tmp_path / "p.json")])
    assert a.samples == ok.samples == 64 and a.errors == ok.errors == 0
    # the samples against the prefill's law: colder than the requests asked (the reported gaps move
    # both ways, so the sign test of their median need not see it)
    assert a.failed and not a.family.test("temperature").passed and a.family.test("temperature").statistic > 9
    assert a.shift is not None and a.gaps[0] == 1024
    assert not ok.failed, ok
    out = capsys.readouterr().out
    assert code == 1 and out.splitlines()[0].startswith("verdict: FAIL — decided by audit:")
    assert json.load(open(tmp_path / "c.json"))["audit"]["failed"] is True
    # the look that the audit failed is recorded FAIL in the partial result, the rest of it kept: not continued
    part = json.load(open(tmp_path / "p.json"))
    assert [lk["verdict"] for lk in part["looks"]] == ["FAIL"] and part["digest"] and part["settings"]["vocab"] == 64
    with pytest.raises(ValueError, match="look 1 of the certificate .* FAILED and its verdict stands"):
        certify_log(str(bad), PLAN, resume=str(tmp_path / "p.json"))
    # the audited lines are a hash of (seed, line): the same whichever shard reads them
    import numpy as np
    lines = np.arange(1000)
    assert audited(0, lines, 0.5).mean() == pytest.approx(0.5, abs=0.05)
    assert (audited(0, lines, 0.5) == audited(0, lines, 0.5)).all()


def test_an_unreachable_audit_server_is_one_line(tmp_path, capsys):
    p = tmp_path / "log.jsonl"
    make_log(p, 20, seed=1)
    code = cli_main.main(["certify", "log", str(p), "--vocab", "64", "--audit", "http://127.0.0.1:9"])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "%|" not in line]  # less the bar
    assert code == 2 and len(err) == 1 and err[0].startswith("spectr-gbv certify log: --audit:"), err
