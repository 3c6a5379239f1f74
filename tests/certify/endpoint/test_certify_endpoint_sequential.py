"""The default plan of ``certify endpoint``: sequential, sized by what it must resolve
(certify/endpoint/sequential.py), against the loopback test servers.

The broad-law server (``fake_deployment.broad_chain``: V = 128, row entropies 3.5–4.5 nats, its top
20 holding 44–79 % of each law) at a silent T 0.9 (|Δβ| = 0.11): the fixed plan of 80 × 16 tokens PASSES
it at seed 1 (temperature log W 2.1; the report itself says that plan resolves only |Δβ| >= 0.25),
the default plan FAILs it at its second look (160 samples; log W 10.2 > log(1/2.5e-4) = 8.3).  The
correct broad server PASSES the default plan, which runs to its budget (1,280 samples) and says
what it did not resolve (temperature |Δβ| ~0.06 > 0.05; top-p 0.99 not reachable through a top-20
reference).  Measured over 40 runs a server (benchmarks/SEQUENTIAL_PLAN.md): correct servers 0 of 40
FAIL on each chain (the bound by design: alpha = 1e-3); the broad chain at T 0.9 40 of 40 FAIL (the
fixed plan of 80: 24 of 40).
"""

import json

import pytest

from helpers.fake_deployment import broad_chain, serve
from helpers.in_process_deployment import Engine, Reference
from spectr_gbv.certify.endpoint.sequential import TARGETS, looks
from spectr_gbv.oracle.look_spending import look_alpha
from spectr_gbv.cli import main as cli_main


def _run(capsys, url, tmp_path, *extra, name="run"):
    out = tmp_path / f"{name}.json"
    argv = ["certify", "endpoint", url, "--json", str(out), "--record", str(tmp_path / f"{name}.jsonl")] + list(extra)
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err, json.loads(out.read_text()) if out.exists() else None


def _temperature(cert):
    return next(d for d in cert["family"]["directional"] if d["name"] == "temperature")


def test_the_looks_and_their_alpha_are_fixed_before_any_sample():
    assert looks(80, 1280) == [80, 160, 320, 640, 1280]
    assert looks(80, 1000) == [80, 160, 320, 640, 1000]
    assert looks(80, 80) == [80]
    # the fixed-sample tests' share at look j: alpha/(j(j+1)), 100 looks spend 100/101 of alpha
    assert [look_alpha(1e-3, j) for j in (1, 2, 5)] == pytest.approx([5e-4, 1e-3 / 6, 1e-3 / 30], rel=1e-12)
    assert sum(look_alpha(1e-3, j) for j in range(1, 101)) == pytest.approx(1e-3 * 100 / 101, rel=1e-12)
    assert TARGETS == {"temperature": 0.05, "truncation": 0.01, "omnibus": 0.05}


def test_a_broad_law_model_at_a_silent_t_0_9_fails_the_default_plan(capsys, tmp_path):
    with serve("temperature-0.9", model=broad_chain()) as (url, _):
        code80, out80, err80, fixed = _run(capsys, url, tmp_path, "--samples", "80", "--seed", "1", name="fixed")
        code, out, err, cert = _run(capsys, url, tmp_path, "--seed", "1", name="default")
    # the fixed plan of 80 misses it, and says it resolves only |Δβ| >= 0.25
    assert code80 == 0 and fixed["verdict"] == "PASS", out80 + err80
    t80 = _temperature(fixed)
    assert t80["detectable"] > 0.2 and t80["statistic"] < 8.29 and fixed["sequence"] is None
    # the default plan fails it at its second look, by the temperature e-value at its whole share
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    seq = cert["sequence"]
    assert seq["looks"] == [80, 160, 320, 640, 1280] and seq["tested"] == [80, 160] and seq["stopped"] == "fail"
    assert cert["samples"] == 160 and cert["family"]["n_tokens"] == 160 * 16
    t = _temperature(cert)
    assert not t["passed"] and t["alpha"] == pytest.approx(2.5e-4) and t["pvalue"] < 2.5e-4 and t["statistic"] > 8.29
    assert cert["family"]["alpha"] == pytest.approx(1e-3 / 6)  # the omnibus rows at look 2: alpha/(2·3)
    assert seq["numbers"] == [1, 2] and cert["look"] == {"j": 2, "alpha_j": pytest.approx(1e-3 / 6),
                                                          "spent": pytest.approx(2e-3 / 3)}
    assert out.splitlines()[0].startswith("verdict: FAIL — decided by ")
    assert any(x.strip().startswith("temperature: log W") and x.endswith("<- FAIL") for x in out.splitlines())
    assert "look 1 of 5 (80 samples): pass" in err and "look 2 of 5 (160 samples): FAIL" in err


def test_the_correct_broad_server_passes_the_default_plan_and_says_what_it_did_not_resolve(capsys, tmp_path):
    with serve(model=broad_chain()) as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path)
    assert code == 0 and cert["verdict"] == "PASS" and cert["complete"], out + err
    seq = cert["sequence"]
    assert seq["tested"] == [80, 160, 320, 640, 1280] and seq["stopped"] == "max-samples"
    res = seq["resolution"]
    assert 0.05 < res["temperature"]["figure"] < 0.08 and not res["temperature"]["resolved"]
    assert res["omnibus"]["figure"] < 0.05 and res["omnibus"]["resolved"]
    assert not res["truncation"]["resolved"]
    first = out.splitlines()[0]
    assert first.startswith("verdict: PASS — resolved at power 0.99: ") and "NOT resolved: temperature" in first
    assert "the sample budget (--max-samples) ended it after 1280 samples" in first


def test_a_budget_ends_the_default_plan_with_what_it_resolved(capsys, tmp_path):
    with serve() as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path, "--max-samples", "320")
    assert code == 0 and cert["verdict"] == "PASS", out + err
    seq = cert["sequence"]
    assert seq["looks"] == [80, 160, 320] and seq["tested"] == [80, 160, 320] and seq["stopped"] == "max-samples"
    assert cert["family"]["alpha"] == pytest.approx(1e-3 / 12)  # look 3: alpha/(3·4)
    res = seq["resolution"]
    assert 0.05 < res["temperature"]["figure"] < 0.1 and res["truncation"]["resolved"]  # V = 64: top 20 reach 0.99
    assert seq["needed"] == 1280  # the pilot's information per sample: every target at 1,280 samples
    assert "NOT resolved: temperature" in out.splitlines()[0]


def test_a_time_budget_tests_the_samples_collected(capsys, tmp_path):
    with serve(serial_s=0.01) as (url, _):
        code, out, err, cert = _run(capsys, url, tmp_path, "--max-time", "1.5", "--concurrency", "2")
    assert code == 0 and cert["verdict"] == "PASS", out + err
    seq = cert["sequence"]
    assert seq["stopped"] == "max-time" and len(seq["tested"]) == 1 and 0 < seq["tested"][0] < 80
    assert cert["samples"] == seq["tested"][0]
    assert "the time budget (--max-time) ended it" in out.splitlines()[0]


def test_a_fixed_plan_and_a_budget_are_not_both_given(capsys):
    code = cli_main.main(["certify", "endpoint", "http://127.0.0.1:1", "--samples", "80", "--max-samples", "640"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--samples N fixes the plan" in err


def test_a_stop_inside_a_look_tests_the_prefix_and_ends_in_a_verdict_line(tmp_path):
    import signal

    from spectr_gbv.certify.endpoint.report import text_report
    from spectr_gbv.certify.endpoint.run import Plan, certify_deployment
    from spectr_gbv.certify.endpoint.store import RunFile

    # _thread.interrupt_main does nothing where SIGINT is ignored or handled elsewhere (a test
    # worker's state, or an earlier test's); Ctrl-C's own handler for this test
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        engine = Engine(stop_at=120)
        plan = Plan(sequential=True, concurrency=1, replays=0)
        cert = certify_deployment(engine, Reference(engine.server), [[1], [2], [3]], plan,
                                  RunFile(tmp_path / "r.jsonl", {"plan": "test"}))
    finally:
        signal.signal(signal.SIGINT, saved)
    seq = cert.sequence
    assert engine.calls >= 120, engine.calls
    assert seq["stopped"] == "user" and seq["tested"][0] == 80 and len(seq["tested"]) == 2
    assert seq["numbers"] == [1, 2] and cert.look == 2  # the prefix's test is a look too
    # the prefix tested is every sample recorded when the stop came (concurrency 1: indices in order),
    # between look 1's 80 and the 120th call (how far the recording had got depends on the scheduler)
    import json

    recorded = sorted(e["i"] for e in map(json.loads, open(tmp_path / "r.jsonl")) if e.get("kind") == "sample")
    # (a sample being recorded when the stop came may be in the file and not in the test: the file is
    # written first, and a resumed run reads it back)
    n = seq["tested"][1]
    assert 80 < n <= 121 and recorded[:n] == list(range(n)) and len(recorded) - n <= 1
    assert cert.samples == seq["tested"][1]
    assert cert.verdict == "INCOMPLETE" and not cert.complete
    assert seq["resolution"]["temperature"][0] > 0.05  # the prefix's own figure (0.15 at 80 on this chain)
    first = text_report(cert).splitlines()[0]
    assert first.startswith("verdict: INCOMPLETE — resolved at power 0.99: ")
    assert f"stopped by the user after {cert.samples} samples" in first
