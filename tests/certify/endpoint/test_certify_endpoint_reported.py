"""``--reference reported`` (the sampling answer's own top-k lists, audited by prefill) and
``--as-client`` (requests as the client sends them, tested against a declared law), on the
loopback fake server (tests/helpers/fake_deployment.py)."""

import json

import pytest

from spectr_gbv.certify.endpoint.endpoint import DeploymentInputError, EndpointRequest, certify_endpoint
from spectr_gbv.certify.endpoint.report import decided_by, text_report
from spectr_gbv.certify.endpoint.run import Plan, audit_power
from spectr_gbv.cli import main as cli_main
from tests.helpers.fake_deployment import serve


def _run(tmp_path, defect, reference="reported", n=80, audit_reference=None, **plan):
    with serve(defect) as (url, state):
        p = Plan(**{"n_samples": n, "sequential": False, "replays": 0, "reported": reference == "reported", **plan})
        cert = certify_endpoint(EndpointRequest(url, reference=reference, plan=p, record=str(tmp_path / "r.jsonl"),
                                                audit_reference=audit_reference))
        return cert, state.requests


def test_reported_passes_a_correct_server_with_one_request_a_sample_and_the_audit(tmp_path):
    cert, requests = _run(tmp_path, None)
    assert cert.verdict == "PASS" and cert.samples == 80
    # 80 sampling requests, 8 audit prefills (10 % of 80, at least 8), one probe, 8 prompts tokenized:
    # no second pass
    assert cert.audit.samples == 8 and requests == 80 + 8 + 1 + 8
    assert cert.audit.passed and cert.audit.logprobs.largest == 0.0 and cert.audit.lists[2] == 0
    assert cert.audit.unseen_fraction == pytest.approx(1 - 0.05 ** (1 / 8), abs=1e-12)
    assert audit_power(8) == pytest.approx(0.3123, abs=1e-4)
    text = text_report(cert)
    assert "misreporting on a fraction f of the samples goes unseen with probability <= (1 - f)^8" in text
    assert cert.to_json()["audit"]["samples"] == 8
    # the reported laws are self's: the same records as --reference self on the same samples
    self_cert, self_requests = _run(tmp_path / "s", None, reference="self") if (tmp_path / "s").mkdir() is None \
        else (None, 0)
    assert self_requests == 80 + 80 + 1 + 8
    assert [r.get("c") for s in cert.records for r in s] == [r.get("c") for s in self_cert.records for r in s]


def test_reported_fails_a_server_sampling_at_t_0_9_by_the_law_test(tmp_path):
    cert, _ = _run(tmp_path, "temperature-0.9", n=320)
    assert cert.verdict == "FAIL"
    assert not cert.family.passed and cert.audit.logprobs.largest == 0.0  # the reports are honest: the law test
    assert decided_by(cert)[0].startswith(("temperature", "omnibus"))


def test_the_audit_catches_a_server_reporting_the_law_it_wrongly_samples_from(tmp_path):
    cert, _ = _run(tmp_path, "temperature-0.9-reported")
    assert cert.family.passed  # against its own reports it is self-consistent
    assert cert.verdict == "FAIL" and not cert.audit.passed
    assert any(d.startswith("the audit") for d in decided_by(cert))
    unaudited, _ = _run(tmp_path / "n", "temperature-0.9-reported", audit=0.0) if (tmp_path / "n").mkdir() is None \
        else (None, 0)
    assert unaudited.verdict == "PASS" and unaudited.audit.samples == 0  # what the audit is for


def test_the_audit_catches_draft_tokens_reported_at_log_prob_zero(tmp_path):
    cert, _ = _run(tmp_path, "zero-logprobs")
    assert cert.verdict == "FAIL" and cert.audit.logprobs.over > 0


def test_as_client_certifies_what_a_client_omitting_the_fields_gets(tmp_path):
    plain, _ = _run(tmp_path / "a", "generation-config", reference="self") if (tmp_path / "a").mkdir() is None \
        else (None, 0)
    assert plain.verdict == "PASS"  # every sampling field sent: the server's defaults never apply
    declared_one, _ = _run(tmp_path / "b", "generation-config", reference="self", as_client=True) \
        if (tmp_path / "b").mkdir() is None else (None, 0)
    assert declared_one.verdict == "FAIL"  # the client gets T 0.7 / top-p 0.8, not the OpenAI defaults
    for ref in ("self", "reported"):
        (tmp_path / ref).mkdir()
        ok, _ = _run(tmp_path / ref, "generation-config", reference=ref, as_client=True, temperature=0.7, top_p=0.8)
        assert ok.verdict == "PASS", (ref, decided_by(ok))
        tested = sum(1 for s in ok.records for r in s if "c" in r)
        assert tested >= 0.9 * 80 * 16  # the nucleus lies inside the top 20 at almost every position


def test_the_cli_as_client_with_a_request_template_and_its_errors(tmp_path, capsys):
    template = tmp_path / "body.json"
    template.write_text(json.dumps({"temperature": 0.7, "top_p": 0.8, "model": "fake-chain"}))
    with serve() as (url, _):
        code = cli_main.main(["certify", "endpoint", url, "--samples", "80", "--as-client", "--request-template",
                              str(template), "--record", str(tmp_path / "a.jsonl")])
        assert code == 1 and "verdict: FAIL" in capsys.readouterr().out  # the client's T 0.7 against T 1
        code = cli_main.main(["certify", "endpoint", url, "--samples", "80", "--as-client", "--request-template",
                              str(template), "--temperature", "0.7", "--top-p", "0.8", "--reference", "reported",
                              "--record", str(tmp_path / "b.jsonl")])
        out = capsys.readouterr().out
        assert code == 0 and "verdict: PASS" in out and "audit (10% of the samples" in out
        assert cli_main.main(["certify", "endpoint", url, "--request-template", str(template)]) == 2
        assert "add --as-client" in capsys.readouterr().err
        assert cli_main.main(["certify", "endpoint", url, "--audit-reference", "self"]) == 2
        assert "--audit-reference" in capsys.readouterr().err
        assert cli_main.main(["certify", "endpoint", url, "--audit", "0.2"]) == 2
        assert "add --reference reported" in capsys.readouterr().err


def test_reported_refuses_other_dialects_and_a_bad_audit_reference(tmp_path):
    with serve() as (url, _):
        with pytest.raises(DeploymentInputError, match="--server sglang"):
            certify_endpoint(EndpointRequest(url, reference="reported", server="sglang",
                                             plan=Plan(n_samples=4, reported=True)))
        with pytest.raises(DeploymentInputError, match="--audit-reference hf:tiny"):
            certify_endpoint(EndpointRequest(url, reference="reported", audit_reference="hf:tiny",
                                             plan=Plan(n_samples=4, reported=True), record=str(tmp_path / "x")))


def test_reported_under_the_default_sequential_plan(tmp_path):
    cert, _ = _run(tmp_path, None, sequential=True, max_samples=160)
    assert cert.verdict == "PASS" and cert.sequence["tested"] == [80, 160]
    # the audit grows with the samples: 10 % of 160 by the hash, at least the first look's 8
    assert 8 <= cert.audit.samples <= 40


def test_whole_laws_are_cut_exactly_and_a_resume_keeps_the_declared_law(tmp_path):
    import numpy as np

    from spectr_gbv.certify.endpoint.references import Declared, truncate
    from spectr_gbv.certify.endpoint.store import RunFile

    law = np.array([[0.5, 0.3, 0.15, 0.05]])
    np.testing.assert_allclose(truncate(law, Declared(top_p=0.8)), [[0.625, 0.375, 0.0, 0.0]], atol=1e-15)
    np.testing.assert_allclose(truncate(law, Declared(top_k=3)), [[0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]],
                               atol=1e-15)
    np.testing.assert_allclose(truncate(law, Declared(min_p=0.5)), [[0.625, 0.375, 0.0, 0.0]], atol=1e-15)
    assert truncate(law, Declared()) is law and Declared().plain and not Declared(temperature=0.7).plain
    path = tmp_path / "r.jsonl"
    base = {"model": "m", "temperature": 1.0, "n_new": 4, "k": 20, "prompts": [[1]], "seed": 0,
            "reference": "self", "server": "openai"}
    RunFile(path, base).close()
    RunFile(path, {**base, "top_p": 1.0, "as_client": False}, resume=True).close()  # the defaults: the same run
    with pytest.raises(ValueError, match=r"top_p = 1.0 \(--top-p\), this command asks 0.8"):
        RunFile(path, {**base, "top_p": 0.8}, resume=True)


def test_the_report_states_the_declared_law_and_its_skipped_positions(tmp_path):
    cert, _ = _run(tmp_path, "generation-config", reference="self", as_client=True, temperature=0.7, top_p=0.8)
    skipped = sum(1 for rs in cert.records for r in rs if r.get("skip"))
    line = next(x for x in text_report(cert).splitlines() if x.startswith("declared law:"))
    assert line.startswith("declared law: T 0.7, top-p 0.8, top-k none, min-p 0 (requests as the client sends them)")
    assert (f"; {skipped} positions skipped" in line) == (skipped > 0)
    assert skipped < 0.1 * 80 * 16


def test_the_audit_against_a_second_deployment(tmp_path):
    with serve() as (ref_url, ref_state):
        cert, requests = _run(tmp_path, "temperature-0.9-reported", audit_reference=f"endpoint:{ref_url}", audit=0.2)
        assert cert.verdict == "FAIL" and not cert.audit.passed and cert.audit.samples == 14  # 20 % by the hash
        # the prefills went to the second deployment: one probe and one prefill per audited sample
        assert ref_state.requests == 1 + cert.audit.samples
        assert requests == 80 + 1 + 8  # the server under test: its samples, the probe, the prompts


def test_a_declared_law_no_position_of_which_can_be_tested_is_refused_not_passed(tmp_path):
    # log-probabilities rounded to 2 decimals: every transformed cell is known only within
    # e^{±2βδ} (1.3 %), beyond the 1e-3 bound, so every position is skipped
    cert, _ = _run(tmp_path, "rounded-logprobs", as_client=True, temperature=0.8, top_p=0.9)
    assert cert.verdict == "REFUSED" and cert.family is None
    assert "no token could be tested against the declared law (1280 positions skipped" in cert.refused
    assert text_report(cert).splitlines()[0].startswith("verdict: REFUSED — no token could be tested")
    seq, _ = _run(tmp_path / "q", "rounded-logprobs", as_client=True, temperature=0.8, top_p=0.9,
                  sequential=True) if (tmp_path / "q").mkdir() is None else (None, 0)
    assert seq.verdict == "REFUSED" and seq.sequence["tested"] == [80]  # no second look


def test_a_declared_temperature_above_one_needs_the_vocabulary(tmp_path):
    kw = dict(reference="self", as_client=True, template={"temperature": 1.3}, temperature=1.3)
    cert, _ = _run(tmp_path, None, **kw)
    assert cert.verdict == "REFUSED" and "1280: temperature > 1 and the list leaves mass: needs --vocab" in cert.refused
    (tmp_path / "v").mkdir()
    cert, _ = _run(tmp_path / "v", None, vocab=64, **kw)
    tested = [r for rs in cert.records for r in rs if "c" in r]
    assert cert.verdict == "PASS" and 100 <= len(tested) < 1280  # bounded: the rest beyond the 1e-3 bound
    assert max(r["pe"] for r in tested) <= 1e-3 + 1e-9


def test_a_whole_law_reference_gives_the_declared_law_exactly():
    import numpy as np

    from spectr_gbv.certify.endpoint.references import Declared, _whole_rows
    from spectr_gbv.oracle.sequence_simulation import top_p

    z = np.log(np.array([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]]))
    rows = _whole_rows(z, [0, 3], 0.7, Declared(0.7, top_p=0.8))
    for zr, law in zip(z, rows.laws):
        tempered = np.exp(zr / 0.7) / np.exp(zr / 0.7).sum()
        np.testing.assert_allclose(law, top_p(tempered, 0.8), atol=1e-15)
    assert rows.laws[0, 2] == 0.0 and rows.raw == pytest.approx([np.log(0.5), np.log(0.4)], abs=1e-15)
