"""gpu_backend/certify/generate.py and engines/openai_endpoint.py without models: a loopback
HTTP server samples a synthetic chain (V = 30, a Dirichlet law per prefix) and answers
``/v1/completions`` with ``token_id:<id>`` entries; ``certify_generate`` passes the exact
sampler (N = 300 sequences of 6 tokens, α = 1e-3) and fails the one sampling at 1.3·T
(pooled probability-order p < 1e-6), in under 5 s."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from spectr_gbv.gpu_backend.certify.generate import certify_generate, softmax64, text_table
from spectr_gbv.gpu_backend.certify.engines.openai_endpoint import OpenAICompletionsEngine, parse_token_ids

V = 30


def law(prefix) -> np.ndarray:
    r = np.random.default_rng(abs(hash(tuple(prefix))) % (2**32))
    return r.dirichlet(np.full(V, 0.4))


def laws(prompt, tokens):
    return np.array([law(list(prompt) + list(tokens[:j])) for j in range(len(tokens))])


def serve(temp: float):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body["return_tokens_as_token_ids"] and body["logprobs"] == 1
            rng = np.random.default_rng(body["seed"])
            ids = list(body["prompt"])
            out = []
            for _ in range(body["max_tokens"]):
                q = law(ids) ** (1 / temp)
                t = int(rng.choice(V, p=q / q.sum()))
                out.append(t)
                ids.append(t)
            data = json.dumps({"choices": [{"text": "", "logprobs": {"tokens": [f"token_id:{t}" for t in out]}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("temp,ok", [(1.0, True), (1.3, False)])
def test_endpoint_exact_passes_and_tempered_fails(temp, ok):
    server = serve(temp)
    try:
        eng = OpenAICompletionsEngine(f"http://127.0.0.1:{server.server_port}", max_requests=300)
        cert = certify_generate(eng, laws, [[1, 2, 3]], 6, 300, alpha=1e-3, tolerance=0.0, name=f"T={temp}")
    finally:
        server.shutdown()
    assert cert.passed is ok and cert.test.n_tokens == 1800 and eng.requests == 300
    if not ok:
        assert cert.test.pooled("probability").pvalue < 1e-6
    assert 0.05 < cert.test.detectable < 0.12  # 1,800 PITs at α/6
    assert "T=" in text_table([cert])


def test_bad_inputs():
    with pytest.raises(ValueError, match="loopback"):
        OpenAICompletionsEngine("http://example.com:80")
    with pytest.raises(ValueError, match="returned 3 tokens"):
        certify_generate(lambda p, n, s: [0, 1, 2], laws, [[1]], 2, 1)
    with pytest.raises(ValueError, match="n_samples"):
        certify_generate(lambda p, n, s: [0], laws, [[1]], 2, 0)
    with pytest.raises(ValueError, match="shape"):
        certify_generate(lambda p, n, s: [0, 1], lambda p, t: np.ones((1, V)) / V, [[1]], 2, 1)
    with pytest.raises(ValueError, match="text, not token ids"):
        parse_token_ids({"choices": [{"text": "hi"}]})
    assert parse_token_ids({"choices": [{"text": "hi"}]}, lambda s: [7, 8]) == [7, 8]
    np.testing.assert_allclose(softmax64(np.array([[0.0, np.log(3.0)]]), 1.0), [[0.25, 0.75]], atol=1e-15)


def test_cli_engine_name_errors(capsys):
    pytest.importorskip("torch")
    from spectr_gbv.cli import main as cli_main

    assert cli_main.main(["certify", "--engine", "vllm-engine"]) == 2
    err = capsys.readouterr().err
    assert "unknown engine 'vllm-engine'" in err and "known: transformers, llama-cpp-python, vllm" in err
    assert cli_main.main(["certify", "--engine", "transformers", "--rules", "sd"]) == 2
    assert "--rules is not available with --engine transformers" in capsys.readouterr().err
    assert cli_main.main(["certify", "--modes", "x"]) == 2
    assert "--modes needs --engine NAME" in capsys.readouterr().err


def test_cli_temperature_needs_an_engine_name(capsys):
    pytest.importorskip("torch")
    from spectr_gbv.cli import main as cli_main

    assert cli_main.main(["certify", "--temperature", "0.7"]) == 2
    assert "--temperature needs --engine NAME" in capsys.readouterr().err
    assert cli_main.main(["certify", "--engine", "--temperature", "0.7"]) == 2
    assert "--temperature needs --engine NAME" in capsys.readouterr().err
    assert cli_main.main(["certify", "--engine", "vllm", "--temperature", "0"]) == 2


def test_cli_engine_endpoint_arguments(capsys):
    pytest.importorskip("torch")
    from spectr_gbv.cli import main as cli_main

    assert cli_main.main(["certify", "--engine-endpoint", "http://10.1.2.3:8000"]) == 2
    assert "not a loopback address" in capsys.readouterr().err
    assert cli_main.main(["certify", "--engine-endpoint", "ftp://127.0.0.1"]) == 2
    assert "must be an http(s) URL" in capsys.readouterr().err
    assert cli_main.main(["certify", "--engine", "vllm", "--engine-endpoint", "http://127.0.0.1:1"]) == 2
    assert "--engine-endpoint takes no --engine" in capsys.readouterr().err
    assert cli_main.main(["certify", "--endpoint-model", "m"]) == 2
    assert "need --engine-endpoint" in capsys.readouterr().err
    assert cli_main.main(["certify", "--engine", "endpoint"]) == 2
    assert "--engine-endpoint URL" in capsys.readouterr().err
