"""``spectr-gbv certify endpoint URL`` end to end against the loopback test server with planted
defects (tests/helpers/fake_deployment.py: an exact Markov chain, V = 64, vLLM's answers).

Sizes and power.  Reference ``self`` gives the top 20 of each law; N = 80 samples × 16 tokens
(the CLI's default), α = 1e-3 for the family.  On this chain the planted defects are caught far
beyond their thresholds: top-p 0.95 by the truncation e-value (log W ≈ 49 against the
log(1/2.5e-4) ≈ 8.3 its share needs; 0 tokens outside the 0.95 nucleus where 52 were expected), 10 % stale logits by the position-shift e-value (log W ≈ 268
against the log(1/2.5e-4) ≈ 8.3 it needs), wrong reported log-probabilities by the deterministic bound (1,145 of 1,280 tokens over
1 nat; log-probabilities reported as 0, as llama-server does for draft tokens: 675).  T = 0.9 is
weaker on this low-entropy chain (|Δβ| = 0.11 against a detectable 0.13 at N = 80): it is tested at
N = 400 (the temperature e-value's detectable |Δβ| < 0.08 there).  The false-alarm
rate of the family is measured in tests/oracle/test_sequence_family.py and
benchmarks/SEQUENCE_POWER.md.
"""

import json
import time

import pytest

from helpers.fake_deployment import serve
from spectr_gbv.cli import main as cli_main


def _run(capsys, url, tmp_path, *extra, name="run"):
    record = tmp_path / f"{name}.jsonl"
    out = tmp_path / f"{name}.json"
    argv = ["certify", "endpoint", url, "--json", str(out)] + list(extra)
    if not {"--samples", "--max-samples", "--max-time"} & set(extra):
        argv += ["--samples", "80"]  # the fixed plan these tests were sized for (the default is sequential)
    if "--resume" not in extra:
        argv += ["--record", str(record)]
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    cert = json.loads(out.read_text()) if out.exists() else None
    return code, captured.out, captured.err, cert, record


def _lines(record):
    return [json.loads(x) for x in record.read_text().splitlines()]


def test_a_lossless_server_passes_and_its_run_is_recorded(capsys, tmp_path):
    with serve() as (url, state):
        code, out, err, cert, record = _run(capsys, url, tmp_path)
    assert code == 0, out + err
    assert cert["verdict"] == "PASS" and cert["samples"] == 80 and cert["complete"]
    assert cert["family"]["n_tokens"] == 1280 and cert["family"]["coarsened_k"] == 20
    assert {d["name"].split(" (")[0] for d in cert["family"]["directional"]} == {
        "temperature", "truncation", "position shift"}
    assert cert["replays"] == {"asked": 3, "identical": 3}
    assert cert["logprobs"]["over"] == 0 and cert["logprobs"]["largest"] < 1e-9
    events = _lines(record)
    assert events[0]["kind"] == "header" and events[0]["plan"]["n_samples"] == 80
    assert sorted(e["i"] for e in events if e["kind"] == "sample") == list(range(80))
    assert "verdict: PASS" in out and "reference self" in out
    assert "Traceback" not in err


@pytest.mark.parametrize("defect,failing", [
    ("top-p-0.95", "truncation"),
    ("stale-0.1", "position shift"),
])
def test_planted_law_defects_fail(capsys, tmp_path, defect, failing):
    with serve(defect) as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path)
    assert code == 1 and cert["verdict"] == "FAIL", out + err
    bad = [d for d in cert["family"]["directional"] if not d["passed"]]
    assert any(d["name"].startswith(failing) for d in bad)
    assert min(d["pvalue"] for d in bad) < 1e-8
    # the report names each directional statistic: every directional test is an e-value (log W)
    assert "  temperature: log W " in out and "  position shift: log W " in out and "  truncation (" in out


def test_a_silent_temperature_fails_at_a_larger_n(capsys, tmp_path):
    with serve("temperature-0.9") as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--samples", "400", "--concurrency", "16")
    assert code == 1, out + err
    temp = next(d for d in cert["family"]["directional"] if d["name"] == "temperature")
    assert not temp["passed"] and temp["statistic"] > 0 and temp["detectable"] < 0.08


@pytest.mark.parametrize("defect,over", [("wrong-logprobs", 800), ("zero-logprobs", 400)])
def test_wrong_reported_logprobs_fail_by_the_bound(capsys, tmp_path, defect, over):
    with serve(defect) as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path)
    assert code == 1 and cert["family"]["passed"] and not cert["logprobs"]["passed"]
    assert cert["logprobs"]["over"] > over and cert["logprobs"]["bound"] == 1.0 and "over the bound" in out


def test_an_ignored_seed_is_reported_and_a_response_cache_fails(capsys, tmp_path):
    with serve("seed-ignored") as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, name="ignored")
    assert code == 0 and cert["replays"] == {"asked": 3, "identical": 0}
    assert "does not reproduce a sample from its seed" in out
    with serve("cached") as (url, state):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, name="cached")
    assert code == 1 and cert["verdict"] == "FAIL" and "not independent" in out and "samples dependent" in out
    assert state.requests < 200  # stopped early, not after the whole plan


def test_an_out_of_vocabulary_token_fails_as_impossible(capsys, tmp_path):
    with serve("out-of-vocab") as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--samples", "10")
    assert code == 1 and len(cert["impossible"]) == 10
    assert "token id out of range" in cert["impossible"][0]["reason"] and "Traceback" not in err


def test_flaky_servers_are_retried_and_a_broken_one_stops_with_what_it_has(capsys, tmp_path):
    with serve("http-500") as (url, state):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--samples", "20", name="flaky")
    assert code == 0 and cert["samples"] == 20
    with serve("malformed") as (url, _):
        start = time.perf_counter()
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--retries", "0", name="broken")
    assert code == 2 and cert["verdict"] == "INCOMPLETE" and time.perf_counter() - start < 30
    assert "not JSON" in out and "stopped: more than 20 requests failed" in out


def test_fewer_alternatives_than_asked_are_coarsened_not_failed(capsys, tmp_path):
    with serve("fewer-top") as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path)
    assert code == 0 and cert["family"]["coarsened_k"] == 9 and cert["short"] == 1280


def test_resume_continues_without_losing_or_repeating_a_sample(capsys, tmp_path):
    with serve() as (url, state):
        code, *_, record = _run(capsys, url, tmp_path, "--samples", "30", name="first")
        first = _lines(record)
        assert code == 0 and sum(e["kind"] == "sample" for e in first) == 30
        before = state.requests
        # the same plan, more samples: only the 30 missing are asked (plus replays)
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--samples", "60", "--resume", str(record),
                                       name="second")
        asked = state.requests - before
    assert code == 0 and cert["samples"] == 60, out + err
    events = _lines(record)
    indices = [e["i"] for e in events if e["kind"] == "sample"]
    assert sorted(indices) == list(range(60)) and len(indices) == 60
    assert events[:len(first)] == first  # what the first run wrote is untouched
    # the probe, the 8 default prompts tokenized, each missing sample and its reference; the replays
    # were made by the first run and are not asked again
    assert asked == 1 + 8 + 30 * 2
    assert "resumed" in out


def test_a_run_cut_short_keeps_its_samples_and_resumes(capsys, tmp_path):
    # the server's budget ends mid-run: the run stops INCOMPLETE, keeps what it sampled
    with serve(max_requests=50) as (url, _):
        code, out, err, cert, record = _run(capsys, url, tmp_path, "--retries", "0", name="cut")
    kept = [e for e in _lines(record) if e["kind"] == "sample"]
    assert code == 2 and 0 < len(kept) < 80 and cert["samples"] == len(kept)
    # its tests on what it kept were shown: look 1, of the samples it had
    assert [(e["j"], e["n"], e["below"]) for e in _lines(record) if e["kind"] == "look"] == [(1, len(kept), 80)]
    with serve() as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--resume", str(record), name="cut2")
    assert code == 0 and cert["samples"] == 80 and cert["look"]["j"] == 2  # the certificate's next look
    indices = [e["i"] for e in _lines(record) if e["kind"] == "sample"]
    assert sorted(indices) == list(range(80))


def test_the_api_key_is_sent_and_written_nowhere(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYMENT_KEY", "sk-do-not-print")
    with serve(api_key="sk-do-not-print") as (url, state):
        code, out, err, cert, record = _run(capsys, url, tmp_path, "--samples", "8", "--api-key-env",
                                            "DEPLOYMENT_KEY")
        assert code == 0
        assert set(state.seen_keys) == {"Bearer sk-do-not-print"}
        monkeypatch.setenv("DEPLOYMENT_KEY", "wrong")
        code, out2, err2, _, _ = _run(capsys, url, tmp_path, "--samples", "8", "--api-key-env", "DEPLOYMENT_KEY",
                                      name="bad")
    assert code == 2 and "invalid API key" in err2
    for text in (out, err, out2, err2, record.read_text(), json.dumps(cert)):
        assert "sk-do-not-print" not in text


def test_an_openai_base_url_is_taken_with_a_note(capsys, tmp_path):
    with serve() as (url, _):
        code, out, err, cert, _ = _run(capsys, url + "/v1", tmp_path, "--samples", "8")
    assert code == 0 and "OpenAI base URL" in out


def _one_line_error(capsys, argv):
    start = time.perf_counter()
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    lines = [x for x in captured.err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert time.perf_counter() - start < 10
    return lines[0]


def test_bad_inputs_are_one_line_exit_2(capsys, tmp_path):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    assert "cannot be reached" in _one_line_error(capsys, ["certify", "endpoint", dead])
    assert "must look like http://HOST:PORT" in _one_line_error(capsys, ["certify", "endpoint", "ftp://127.0.0.1:1"])
    bad_prompts = tmp_path / "p.jsonl"
    bad_prompts.write_text('{"text": "ok"}\n{oops\n')
    with serve() as (url, _):
        assert "line 2 is not JSON" in _one_line_error(capsys, ["certify", "endpoint", url, "--prompts", str(bad_prompts)])
        assert "--reference must be" in _one_line_error(capsys, ["certify", "endpoint", url, "--reference", "hf"])
        assert "needs a whole-law reference" in _one_line_error(
            capsys, ["certify", "endpoint", url, "--temperature", "0.8"])
        record = tmp_path / "r.jsonl"
        assert cli_main.main(["certify", "endpoint", url, "--samples", "4", "--record", str(record)]) == 0
        capsys.readouterr()
        assert "exists" in _one_line_error(capsys, ["certify", "endpoint", url, "--record", str(record)])
        assert "n_new = 16" in _one_line_error(
            capsys, ["certify", "endpoint", url, "--resume", str(record), "--max-new-tokens", "8"])
        assert "--record and --resume" in _one_line_error(
            capsys, ["certify", "endpoint", url, "--resume", str(record), "--record", str(tmp_path / "x.jsonl")])


def test_prompts_file_with_text_and_ids(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"text": "hello there"}\n\n{"ids": [3, 4, 5]}\n{"instruction": "write a poem"}\n')
    with serve() as (url, _):
        code, out, err, cert, record = _run(capsys, url, tmp_path, "--prompts", str(prompts), "--samples", "12")
    assert code == 0
    header = _lines(record)[0]["plan"]
    assert len(header["prompts"]) == 3 and header["prompts"][1] == [3, 4, 5]
    assert {e["prompt"] for e in _lines(record) if e["kind"] == "sample"} == {0, 1, 2}


@pytest.mark.models
def test_a_local_whole_law_reference_against_a_server_of_the_tiny_model(capsys, tmp_path):
    """The server samples the embedded tiny SmolLM2 exactly (transformers, float32); the reference
    hf:tiny computes its whole law locally: PASS at T = 1 and at T = 0.8 (which a top-k reference
    refuses), N = 12 × 8 tokens (a smoke test of the local path; its power is the family's)."""
    pytest.importorskip("transformers")
    from helpers.fake_deployment import TinyModel

    model = TinyModel()
    with serve(model=model) as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--reference", "hf:tiny", "--samples", "12",
                                       "--max-new-tokens", "8", name="t1")
        assert code == 0, out + err
        assert cert["family"]["coarsened_k"] == model.V and "agrees with the server" in out
        assert cert["logprobs"]["largest"] < 1e-3
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--reference", "hf:tiny", "--samples", "12",
                                       "--max-new-tokens", "8", "--temperature", "0.8", name="t08")
        assert code == 0 and cert["plan"]["temperature"] == 0.8, out + err


@pytest.mark.models
def test_a_reference_of_another_model_is_refused_in_one_line(capsys, tmp_path):
    pytest.importorskip("transformers")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"ids": [1, 2, 3, 4, 5, 6, 7, 8]}\n')
    with serve() as (url, _):  # the V = 64 chain, against the tiny model's laws
        code = cli_main.main(["certify", "endpoint", url, "--reference", "hf:tiny", "--prompts", str(prompts),
                              "--record", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("spectr-gbv certify endpoint:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err  # (loading lines before it)
    assert "disagrees with the server" in errors[0] and "not the same model or vocabulary" in errors[0]
    assert not (tmp_path / "r.jsonl").exists()  # refused before the run file is made


def test_power_prints_the_plan_and_keeps_its_pilot(capsys, tmp_path):
    with serve() as (url, _):
        record = tmp_path / "p.jsonl"
        code = cli_main.main(["certify", "endpoint", url, "--power", "--record", str(record)])
        out = capsys.readouterr().out
        assert code == 0 and "detected with power 0.99" in out and "temperature: |ΔT| >=" in out
        assert "omnibus per-token TV <= 0.02: --samples" in out
        assert sum(e["kind"] == "sample" for e in _lines(record)) == 16
        assert not any(e["kind"] == "look" for e in _lines(record))  # its tests are not shown: no look
        # the pilot is the run's start: resuming asks the 64 others, at the certificate's first look
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--resume", str(record), name="after")
    assert code == 0 and cert["samples"] == 80 and cert["look"]["j"] == 1


def test_tolerance_auto_measures_the_drift_and_separates_it(capsys, tmp_path):
    with serve() as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--tolerance", "auto", "--samples", "20")
    assert code == 0 and cert["numerics"]["eta"] == 0.0 and cert["family"]["tolerance"] == 0.0
    assert "--tolerance auto" in out
    assert "must be a number in [0, 1) or 'auto'" in _one_line_error(
        capsys, ["certify", "endpoint", "http://127.0.0.1:1", "--tolerance", "loose"])


# -- errors that name their cause; remote hosts ------------------------------------------------

def _error_line(capsys, argv):
    code = cli_main.main(argv)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("spectr-gbv certify endpoint:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_refused_api_key_is_named_as_such(capsys, tmp_path, monkeypatch):
    """HTTP 401 on the model list: the key, not "the server lists no model"."""
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with serve(api_key="sk-right") as (url, _):
        line = _error_line(capsys, ["certify", "endpoint", url, "--api-key-env", "NO_SUCH_KEY_VAR",
                                    "--record", str(tmp_path / "r.jsonl")])
    assert "HTTP 401: the server asks for an API key and none was sent ($NO_SUCH_KEY_VAR is not set" in line
    assert "--api-key-env" in line and "lists no model" not in line


def test_a_web_page_is_named_as_such(capsys, tmp_path):
    with serve(html_page=True) as (url, state):
        line = _error_line(capsys, ["certify", "endpoint", url, "--record", str(tmp_path / "r.jsonl")])
    assert "answered text/html, not JSON" in line and "the API's base" in line
    assert state.requests == 1  # one probe, no retry of a web page


def test_no_api_at_the_url_is_named_as_such(capsys, tmp_path):
    """Every probe path of the dialect answers 404 (here: TGI's /info and /health on a vLLM-style
    server)."""
    with serve() as (url, _):
        line = _error_line(capsys, ["certify", "endpoint", url, "--server", "tgi", "--record",
                                    str(tmp_path / "r.jsonl")])
    assert "no tgi API at" in line and "GET /info and GET /health answered HTTP 404" in line


def test_a_remote_host_needs_no_flag_but_a_key_needs_https(capsys, tmp_path, monkeypatch):
    """No request leaves this machine: the key check refuses before any request, and the remote
    host without a key reaches the probe, stubbed here to say it cannot be reached."""
    from spectr_gbv.certify.endpoint import client

    def unreachable(self, path, timeout_s=5.0):
        raise client.EndpointUnreachable(f"{self.root} cannot be reached: (stub: no request sent)")

    monkeypatch.setattr(client.Endpoint, "probe", unreachable)
    monkeypatch.setenv("REMOTE_KEY", "sk-remote-secret")
    line = _error_line(capsys, ["certify", "endpoint", "http://192.0.2.7:8000", "--api-key-env", "REMOTE_KEY",
                                "--record", str(tmp_path / "r.jsonl")])
    assert "clear text over http to 192.0.2.7" in line and "--insecure" in line and "sk-remote" not in line
    line = _error_line(capsys, ["certify", "endpoint", "http://192.0.2.7:8000", "--api-key-env", "REMOTE_KEY",
                                "--insecure", "--record", str(tmp_path / "r.jsonl")])
    assert "stub: no request sent" in line
    monkeypatch.delenv("REMOTE_KEY")
    line = _error_line(capsys, ["certify", "endpoint", "http://192.0.2.7:8000", "--api-key-env", "REMOTE_KEY",
                                "--record", str(tmp_path / "r.jsonl")])
    assert "stub: no request sent" in line and "loopback" not in line


def test_a_local_reference_without_torch_names_the_extra(capsys, tmp_path, monkeypatch):
    """The light install (no torch) asked for --reference hf:…: one line naming the extra."""
    from spectr_gbv.certify.endpoint import endpoint

    class NoTorch:
        def __init__(self, *a, **k):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(endpoint, "HFReference", NoTorch)
    with serve() as (url, _):
        line = _error_line(capsys, ["certify", "endpoint", url, "--reference", "hf:tiny", "--record",
                                    str(tmp_path / "r.jsonl")])
    assert "--reference hf:tiny needs torch" in line and "pip install 'spectr-gbv[torch]'" in line


def test_a_stop_before_the_run_began_ends_in_a_verdict_line(capsys, monkeypatch):
    """Ctrl-C while the command still imports or checks (before its own handler): one line with
    the verdict, exit 130, no traceback."""
    from spectr_gbv.cli import certify_endpoint

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(certify_endpoint, "check", interrupted)
    code = cli_main.main(["certify", "endpoint", "http://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err
    assert err.strip() == ("spectr-gbv certify endpoint: stopped by the user before anything was measured; "
                           "verdict: INCOMPLETE (no sample taken)")


def test_an_unset_key_variable_that_was_named_is_said(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("MY_UNSET_KEY", raising=False)
    with serve() as (url, _):
        code, out, err, cert, _ = _run(capsys, url, tmp_path, "--samples", "8", "--api-key-env", "MY_UNSET_KEY")
    assert code == 0 and "--api-key-env MY_UNSET_KEY: that variable is not set here; no API key was sent" in out
