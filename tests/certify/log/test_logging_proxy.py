"""examples/logging_proxy.py in front of the fake deployment (tests/helpers/fake_deployment.py), both
on 127.0.0.1: the traffic it records is what ``certify log`` reads — a correct server's 60
completions (T 0.7, 0.8, 1, 1.2 and the default, half of them given ``logprobs`` by
``--add-logprobs``) PASS, a planted T 0.9 (0.9 × each request's T) FAILs on the temperature test;
a streamed completion is relayed as it comes and logged as the answer put together (the same as
the server's unstreamed answer to that request); error, non-JSON answers and other paths are
forwarded and counted, never logged; the script stops after ``--max-requests`` and on Ctrl-C with its summary.

N: 60 requests of 96 tokens each (≈ 3,900 tokens tested, the rest of the 5,760 skipped by the
lists' bound).  Measured over 20 seeds of the requests (their prompts and seeds), 4 client threads:
the correct server PASSed 20 of 20 (the temperature test's log W at most −0.2), the T 0.9 server
FAILed 20 of 20 on the temperature test (log W 18.2–44.3, median 27.7; its threshold ln(1/α_T) = 8.3
at α_T = 2.5e-4).  At 64 tokens 20 of 20 FAILed too (log W 11.7–31.8), at 32 tokens 12 of 20.  The
test itself is deterministic (the fake server samples from each request's seed)."""

from __future__ import annotations

import json
import runpy
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.fake_deployment import serve
from spectr_gbv.cli import main as cli_main

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "logging_proxy.py"
PROXY = runpy.run_path(str(SCRIPT))
N, NEW, K = 60, 96, 20
TEMPERATURES = (0.7, 0.8, 1.0, 1.2, None)  # None: the field omitted (T 1)
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _call(url, body=None, timeout=30):
    """(status, raw answer) of a GET (body None) or a JSON POST."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with DIRECT.open(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _request(i: int) -> dict:
    T = TEMPERATURES[i % len(TEMPERATURES)]
    body = {"model": "fake-chain", "prompt": [(7 * i) % 63 + 1, (13 * i) % 63 + 1], "max_tokens": NEW, "seed": i}
    if T is not None:
        body["temperature"] = T
    if i % 2:
        body["logprobs"] = K  # the other half get it from --add-logprobs
    return body


def _record(log: Path, defect=None):
    """Run the fake deployment and the proxy, send the N completions (4 client threads) and a few
    requests that are not logged, stop both; returns (the proxy's stats, the answers by kind)."""
    extra = 5
    with serve(defect=defect, max_requests=N + extra + 5, time_limit_s=120) as (upstream, _state):
        srv = PROXY["make_server"](upstream, str(log), port=0, add_logprobs=K, token_ids=True,
                                   max_requests=N + extra, timeout=30)
        thread = threading.Thread(target=srv.serve_forever, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{srv.server_port}"
        try:
            with ThreadPoolExecutor(4) as ex:
                answers = list(ex.map(lambda i: _call(base + "/v1/completions", _request(i)), range(N)))
            other = {"models": _call(base + "/v1/models"),
                     "tokenize": _call(base + "/tokenize", {"model": "fake-chain", "prompt": "hi"}),
                     "stream": _call(base + "/v1/completions", {**_request(N), "stream": True}),
                     "error": _call(base + "/v1/completions", {**_request(0), "prompt": [999]}),
                     "not json": _call(base + "/v1/completions", b"{not json")}
            thread.join(30)  # --max-requests: the proxy stops itself after the last one
            assert not thread.is_alive()
            # the streamed request as the proxy sent it upstream, unstreamed, straight to the server
            other["unstreamed"] = _call(upstream + "/v1/completions",
                                        {**_request(N), "logprobs": K, "return_tokens_as_token_ids": True})
        finally:
            if thread.is_alive():
                srv.shutdown()
            srv.server_close()
    return srv.stats, answers, other


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("proxy")
    out = {}
    for defect in (None, "temperature-0.9"):
        log = d / f"traffic-{defect or 'correct'}.jsonl"
        out[defect] = (log, *_record(log, defect))
    return out


def _certify(capsys, log: Path, tmp_path):
    js = tmp_path / "cert.json"
    code = cli_main.main(["certify", "log", str(log), "--vocab", "64", "--json", str(js)])
    return code, capsys.readouterr().out, json.loads(js.read_text())


def test_recorded_traffic_of_a_correct_server_passes(recorded, capsys, tmp_path):
    log, stats, answers, other = recorded[None]
    assert all(code == 200 for code, _ in answers)
    assert stats == {"requests": N + 5, "logged": N + 1, "streamed": 1, "errors": 2, "not_json": 0,
                     "passed_through": 2, "unreachable": 0}
    lines = [json.loads(x) for x in log.read_text().splitlines()]  # 4 client threads: every line whole
    assert len(lines) == N + 1 and sorted(x["request"]["seed"] for x in lines) == list(range(N + 1))
    assert all(x["request"]["logprobs"] == K and x["request"]["return_tokens_as_token_ids"] for x in lines)
    # the client gets the server's answer as sent, with the log-probabilities it asked for or was given
    assert all(json.loads(a)["choices"][0]["logprobs"]["tokens"][0].startswith("token_id:") for _, a in answers)
    assert other["models"][0] == 200 and json.loads(other["models"][1])["data"][0]["id"] == "fake-chain"
    assert other["tokenize"][0] == 200 and json.loads(other["tokenize"][1])["count"] == 2
    # the stream relayed as sent (one event a token, then [DONE]); logged as the unstreamed answer
    status, raw = other["stream"]
    events = [x for x in raw.split(b"\r\n\r\n") if x]
    assert status == 200 and len(events) == NEW + 1 and events[-1] == b"data: [DONE]"
    streamed = next(x for x in lines if x["request"].get("stream"))
    assert streamed["request"]["seed"] == N and streamed["request"]["logprobs"] == K  # --add-logprobs
    got, want = streamed["response"]["choices"][0], json.loads(other["unstreamed"][1])["choices"][0]
    assert got["finish_reason"] == want["finish_reason"] == "length" and len(got["logprobs"]["tokens"]) == NEW
    for key in ("tokens", "token_logprobs", "top_logprobs"):
        assert got["logprobs"][key] == want["logprobs"][key], key
    assert other["error"][0] == 400 and other["not json"][0] == 400

    code, out, cert = _certify(capsys, log, tmp_path)
    assert code == 0 and out.startswith("verdict: PASS"), out
    assert cert["lines"] == N + 1 and cert["samples"] == N + 1
    assert "T 0.7: 13, T 0.8: 12, T 1: 24, T 1.2: 12" in out
    assert cert["family"]["n_tokens"] > 3000  # of N × 96 = 5,760 positions


def test_recorded_traffic_of_a_planted_temperature_fails(recorded, capsys, tmp_path):
    log, stats, _, _ = recorded["temperature-0.9"]
    assert stats["logged"] == N + 1
    code, out, cert = _certify(capsys, log, tmp_path)
    assert code == 1 and out.startswith("verdict: FAIL — decided by temperature"), out
    assert cert["verdict"] == "FAIL" and cert["lines"] == N + 1


def test_non_json_answers_are_forwarded_not_logged(tmp_path):
    log = tmp_path / "t.jsonl"
    with serve(defect="malformed", max_requests=5, time_limit_s=60) as (upstream, _state):
        srv = PROXY["make_server"](upstream, str(log), port=0, add_logprobs=K, max_requests=2, timeout=30)
        thread = threading.Thread(target=srv.serve_forever, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{srv.server_port}/v1/completions"
        try:
            assert [_call(base, _request(i)) for i in range(2)] == [(200, b"{not json")] * 2
            thread.join(30)
            assert not thread.is_alive()
        finally:
            srv.server_close()
    assert srv.stats["not_json"] == 2 and srv.stats["logged"] == 0 and log.read_text() == ""


def test_the_script_stops_on_ctrl_c_with_its_summary(tmp_path):
    """``python examples/logging_proxy.py``: an unreachable upstream answers 502, Ctrl-C (SIGINT)
    stops the proxy with exit 0 and its counts on stderr."""
    with serve(max_requests=1, time_limit_s=60) as (upstream, _state):
        pass  # a port that nothing listens on any more
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--upstream", upstream, "--log", str(tmp_path / "t.jsonl"),
                             "--port", "0", "--timeout", "5"], stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
        assert first.startswith("logging proxy: http://127.0.0.1:"), first
        port = int(first.split("http://127.0.0.1:")[1].split()[0])
        code, answer = _call(f"http://127.0.0.1:{port}/v1/completions", _request(1), timeout=20)
        assert code == 502 and b"unreachable" in answer
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=20)[1]  # bounded: a proxy that ignored Ctrl-C fails here
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "1 requests answered; 0 completions logged" in rest and "1 upstream unreachable" in rest, rest


def test_a_stream_is_put_together_whatever_its_chunking_and_only_when_whole():
    Answer = PROXY["StreamedAnswer"]
    events = [{"id": "c", "object": "text_completion", "model": "m",
               "choices": [{"index": i, "text": f"{t}{i}", "finish_reason": "length" if t == 2 else None,
                            "logprobs": {"tokens": [f"token_id:{t + i}"], "token_logprobs": [-0.5 * t],
                                         "top_logprobs": [{f"token_id:{t + i}": -0.5 * t}], "text_offset": [t]}}]}
              for t in range(3) for i in (1, 0)]  # two choices, interleaved
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\r\n\r\n" for e in events) + b"data: [DONE]\r\n\r\n"
    whole = Answer()
    whole.feed(raw)
    one_by_one = Answer()
    for b in range(len(raw)):  # "\r" and "\n" split across chunks too
        one_by_one.feed(raw[b:b + 1])
    got = whole.answer()
    assert got == one_by_one.answer() and [c["index"] for c in got["choices"]] == [0, 1]
    c1 = got["choices"][1]
    assert c1["text"] == "011121" and c1["finish_reason"] == "length"
    assert c1["logprobs"]["tokens"] == ["token_id:1", "token_id:2", "token_id:3"]
    assert c1["logprobs"]["token_logprobs"] == [0.0, -0.5, -1.0] and c1["logprobs"]["text_offset"] == [0, 1, 2]
    cut = Answer()
    cut.feed(raw[: raw.index(b"data: [DONE]")])  # no [DONE]: a stream cut short is not logged
    assert cut.answer() is None
    bad = Answer()
    bad.feed(b"data: {not json\n\n" + raw)
    assert bad.answer() is None
