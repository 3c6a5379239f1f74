"""A loopback test server speaking vLLM's OpenAI completions dialect, with planted defects.

Standard library HTTP (``ThreadingHTTPServer`` on 127.0.0.1, an OS-chosen port), bounded in
requests (``max_requests``: then it answers 503) and in time (``time_limit_s``: then it shuts
itself down), and stopped by the ``serve`` context manager.  Its model is an exact Markov chain
(``oracle.sequence_simulation.MarkovChain``) or any ``model`` object with ``.V``, ``.laws(prompt,
tokens)`` and ``.sample(prompt, n, rng, defect)``.

Endpoints: ``GET /v1/models``; ``POST /tokenize`` (text → ids: each UTF-8 byte b → 1 + b mod
(V − 1)); ``POST /v1/completions`` (sampling with ``seed``, ``logprobs``, ``return_tokens_as_token_ids``;
``stream: true``: server-sent events of one token each, as vLLM streams; or ``echo: true`` with
``logprobs: k``: the prompt's top-k log-probabilities, as vLLM returns them).

Defects (``defect=``): "temperature-0.9" (samples at 0.9·T), "top-p-0.95", "top-k-50", "min-p-0.05"
(truncations left on: ``oracle.sequence_simulation.TRUNCATIONS``), "stale-0.1" (10 % of
tokens from the previous position's law), "wrong-logprobs" (reported log-probabilities of the
previous position's law), "zero-logprobs" (every token's log-probability but the first reported
as 0, as llama-server reports its draft-model speculation's tokens: docs/upstream/), "seed-ignored" (one shared generator: every request differs, the same
seed included), "cached" (the first sample of a prompt returned for every seed), "shared-prefix"
(every request of an odd seed copies the first 8 tokens of its prompt's first sample and samples
the rest exactly: each sample's own law is the chain's, half the samples share a prefix), "malformed-once"
(every request's first answer is not JSON), "malformed" (no answer is JSON), "out-of-vocab" (the
last token of every sample is V), "fewer-top" (the echo returns half the top-k asked), "http-500"
(every third request fails with 500 once).

Defects of what a client gets (``--reference reported``, ``--as-client``): "generation-config" (a
request that omits ``temperature`` / ``top_p`` is sampled at T 0.7 / top-p 0.8, as vLLM's
``--override-generation-config '{"temperature": 0.7, "top_p": 0.8}'`` does; the reports stay raw);
"temperature-0.9-reported" (samples at 0.9·T and reports that tempered law — the sampled tokens'
log-probabilities and the top-k lists of the sampling answer — as if raw; the echo stays raw).
The sampling answer carries ``top_logprobs`` (the reported law's top ``logprobs`` entries, plus
the sampled token when it is not among them, as vLLM) and honours ``top_p``, ``top_k`` and
``min_p`` (min-p, top-k, top-p on the tempered law).

Not defects (the law and the reports are right, to the precision sent): "rounded-logprobs" (every
log-probability, sampled and echoed, rounded to 2 decimals, as some servers serialise them: a
top-k list then sums above 1 by up to ~0.5 %), "float32-logprobs" (every log-probability a float32
value, as vLLM sends them: a top-k list covering all but ~1e-7 of the law sums to ≥ 1 in many rows).
And defects of the reports alone: "renormalised-top" (the echo's top-k log-probabilities
renormalised over the top k, as a server reporting them after a top-k truncation would: every list
claims the whole law while the samples, from the whole law, leave it); "logprobs-plus-0.3" (every
sampled token's reported log-probability 0.3 nats too high, capped at 0); "one-wrong-logprob" (the
first sample's last reported log-probability 3 nats off, every other one right).  And numerics
noise that is no defect: "bf16-logprob-noise" (each sampled token's reported log-probability plus
N(0, 0.15²) nats, capped at 0: bfloat16 decode against a float32 prefill, docs/engines.md).

Not defects of the law, but of the deployment as a client meets it: ``api_key`` (every request
without ``Authorization: Bearer KEY`` answers 401, the model list included), ``html_page`` (every
path answers a web page, as a dashboard or a proxy's login does), ``serial_s`` (one request
computed at a time, each taking ``serial_s`` seconds, a request whose client gave up still
computed: a server that slows down under load, its latency growing with the requests queued).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from spectr_gbv.oracle.sequence_simulation import MarkovChain

DEFECTS = ("temperature-0.9", "top-p-0.95", "top-k-50", "min-p-0.05", "stale-0.1", "wrong-logprobs", "zero-logprobs",
           "seed-ignored", "cached", "malformed-once", "malformed", "out-of-vocab", "fewer-top", "http-500",
           "rounded-logprobs", "float32-logprobs", "renormalised-top", "logprobs-plus-0.3", "one-wrong-logprob",
           "bf16-logprob-noise", "shared-prefix", "generation-config", "temperature-0.9-reported")


def default_chain() -> MarkovChain:
    """V = 64, row entropies 1–2.5 nats: the top 20 of a row hold most of its mass."""
    return MarkovChain(64, seed=7, entropy=(1.0, 2.5))


def broad_chain() -> MarkovChain:
    """V = 128, row entropies 3.5–4.5 nats (ln 128 = 4.85): broad laws, whose top 20 hold 44–79 % of
    each (the default chain's: 92–100 %) — a model whose tokens carry little temperature information
    through a top-20 reference (80 × 16 tokens resolve only |Δβ| >= 0.25 at power 0.99; the default
    chain's: 0.15)."""
    return MarkovChain(128, seed=7, entropy=(3.5, 4.5))


class TinyModel:
    """The embedded tiny SmolLM2 (transformers, float32) as the server's model: exact laws by an
    uncached forward, sampling token by token from them (``temperature`` defects only)."""

    def __init__(self):
        import torch

        from spectr_gbv.gpu_backend.models.weights import load_causal_lm, vocab_size

        self.torch = torch
        self.model, self.tokenizer = load_causal_lm("tiny", dtype="float32")
        self.V = vocab_size(self.model)

    def tokenize(self, text: str) -> list:
        return [int(t) for t in self.tokenizer(text).input_ids]

    def _logits(self, ids):
        with self.torch.inference_mode():
            return self.model(self.torch.tensor([ids])).logits[0].double().numpy()

    def laws(self, prompt, tokens):
        z = self._logits(list(prompt) + list(tokens))[len(prompt) - 1:len(prompt) - 1 + len(tokens)]
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def sample(self, prompt, n, rng, defect=None):
        """n tokens after ``prompt``, token by token with the model's key-value cache (float32: its
        laws agree with ``laws``' uncached forward to ~1e-6), at a temperature defect's T or with a
        truncation defect (``sequence_simulation.TRUNCATIONS``) applied to each law."""
        from spectr_gbv.oracle.sequence_simulation import TRUNCATIONS

        T = defect[1] if defect and defect[0] == "temperature" else 1.0
        cut = TRUNCATIONS.get(defect[0]) if defect else None
        out, past, ids = [], None, list(prompt)
        with self.torch.inference_mode():
            for _ in range(n):
                res = self.model(self.torch.tensor([ids]), past_key_values=past, use_cache=True)
                past = res.past_key_values
                z = res.logits[0, -1].double().numpy() / T
                p = np.exp(z - z.max())
                p = p / p.sum()
                if cut is not None:
                    p = cut(p, defect[1])
                x = int(rng.choice(self.V, p=p))
                out.append(x)
                ids = [x]
        return out


class FakeDeployment:
    """The server's state (module doc)."""

    def __init__(self, model=None, defect: str | None = None, max_requests: int = 20_000,
                 time_limit_s: float = 300.0, name: str = "fake-chain", api_key: str | None = None,
                 html_page: bool = False, serial_s: float = 0.0):
        if defect is not None and defect not in DEFECTS:
            raise ValueError(f"defect must be one of {DEFECTS}, got {defect!r}")
        self.model = model or default_chain()
        self.defect, self.name, self.api_key = defect, name, api_key
        self.max_requests, self.time_limit_s = max_requests, time_limit_s
        self.html_page, self.serial_s = html_page, float(serial_s)
        self.compute = threading.Lock()  # the one "accelerator" of a serial server
        self.computed = 0
        self.requests = 0
        self.seen_keys: list = []
        self.lock = threading.Lock()
        self.shared_rng = np.random.default_rng(12345)
        self.cache: dict = {}
        self.failed_once: set = set()
        self.wrong_done = False

    # -- the model ---------------------------------------------------------------------------
    def _defect_tuple(self):
        return {"temperature-0.9": ("temperature", 0.9), "temperature-0.9-reported": ("temperature", 0.9),
                "top-p-0.95": ("top_p", 0.95), "top-k-50": ("top_k", 50),
                "min-p-0.05": ("min_p", 0.05), "stale-0.1": ("stale", 0.1)}.get(self.defect)

    def sample(self, prompt, n, seed, temperature, cuts=None):
        """n tokens; ``cuts``: (top_p, top_k, min_p) of the request (None or no cut: the model's
        own sampler path)."""
        if cuts is not None and (cuts[0] < 1 or cuts[1] > 0 or cuts[2] > 0) and self.defect in (None, "generation-config"):
            return self._cut_sample(prompt, n, np.random.default_rng(seed), temperature, cuts)
        if self.defect == "cached" and tuple(prompt) in self.cache:
            return self.cache[tuple(prompt)]
        if self.defect == "seed-ignored":
            with self.lock:
                rng = np.random.default_rng(int(self.shared_rng.integers(2**62)))
        else:
            rng = np.random.default_rng(seed)
        defect = self._defect_tuple()
        if temperature != 1.0:
            defect = ("temperature", temperature * (defect[1] if defect and defect[0] == "temperature" else 1.0))
        first = self.cache.get(tuple(prompt))
        if self.defect == "shared-prefix" and first is not None and seed % 2 == 1:
            head = list(first[:min(8, n)])
            toks = head + self.model.sample(list(prompt) + head, n - len(head), rng, defect)
        else:
            toks = self.model.sample(prompt, n, rng, defect)
        if self.defect == "out-of-vocab":
            toks = toks[:-1] + [self.model.V]
        self.cache.setdefault(tuple(prompt), toks)
        return toks

    def _cut_sample(self, prompt, n, rng, T, cuts):
        """Token by token from the law at T cut by min-p, top-k, top-p (vLLM v1's order)."""
        from spectr_gbv.oracle.sequence_simulation import min_p, top_k, top_p

        out = []
        for _ in range(n):
            p = self.model.laws(list(prompt), out + [0])[-1]
            with np.errstate(divide="ignore"):
                z = np.log(p) / T
            p = np.exp(z - z.max())
            p = p / p.sum()
            if cuts[2] > 0:
                p = min_p(p, cuts[2])
            if cuts[1] > 0:
                p = top_k(p, cuts[1])
            if cuts[0] < 1:
                p = top_p(p, cuts[0])
            out.append(int(rng.choice(self.model.V, p=p)))
        return out

    def reported_rows(self, prompt, tokens):
        """The log-probability rows the sampling answer reports: raw, or, for
        "temperature-0.9-reported", the law at T 0.9 (the law it samples from)."""
        rows = self.logprob_rows(prompt, tokens)
        if self.defect == "temperature-0.9-reported":
            z = rows / 0.9
            rows = z - np.logaddexp.reduce(z, axis=1, keepdims=True)
        return rows

    def logprob_rows(self, prompt, tokens):
        """log-probabilities [n, V] of each token's law (T = 1, raw)."""
        with np.errstate(divide="ignore"):
            rows = np.log(self.model.laws(prompt, tokens))
        if self.defect == "rounded-logprobs":
            return np.round(rows, 2)
        if self.defect == "float32-logprobs":  # a float32 log-softmax of the (float32) logits
            z = rows.astype(np.float32)
            with np.errstate(invalid="ignore"):
                return (z - np.log(np.exp(z).sum(axis=-1, dtype=np.float32))[..., None]).astype(np.float64)
        return rows


def _handler(state: FakeDeployment):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, obj=None, raw=None):
            data = raw if raw is not None else json.dumps(obj).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout): the answer was computed all the same

        def _count(self) -> bool:
            with state.lock:
                state.requests += 1
                over = state.requests > state.max_requests
                state.seen_keys.append(self.headers.get("Authorization"))
            if over:
                self._send(503, {"error": {"message": "request budget of the test server spent"}})
                return False
            if state.html_page:
                page = b"<!DOCTYPE html><html><head><title>Dashboard</title></head><body>Sign in</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return False
            if state.api_key and self.headers.get("Authorization") != f"Bearer {state.api_key}":
                self._send(401, {"error": {"message": "invalid API key"}})
                return False
            return True

        def do_GET(self):
            if not self._count():
                return
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": state.name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            if not self._count():
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            except ValueError:
                return self._send(400, {"error": {"message": "the request body is not JSON"}})
            if state.serial_s > 0:
                with state.compute:  # queued behind every request before it, abandoned ones too
                    time.sleep(state.serial_s)
                    state.computed += 1
            if self.path == "/tokenize":
                V = state.model.V
                text = str(body.get("prompt", ""))
                if hasattr(state.model, "tokenize"):
                    ids = state.model.tokenize(text)
                else:
                    ids = [1 + b % (V - 1) for b in text.encode()][:48]
                return self._send(200, {"tokens": ids, "count": len(ids)})
            if self.path != "/v1/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            key = json.dumps(body, sort_keys=True)
            if state.defect == "malformed" or (state.defect == "malformed-once" and key not in state.failed_once):
                state.failed_once.add(key)
                return self._send(200, raw=b"{not json")
            if state.defect == "http-500" and state.requests % 3 == 0 and key not in state.failed_once:
                state.failed_once.add(key)
                return self._send(500, {"error": {"message": "planted failure"}})
            prompt = [int(t) for t in body["prompt"]]
            V = state.model.V
            if any(not 0 <= t < V for t in prompt):
                return self._send(400, {"error": {"message": f"token id out of range [0, {V})"}})
            if body.get("echo"):
                return self._send(200, self._echo(prompt, int(body.get("logprobs") or 0)))
            config = state.defect == "generation-config"
            T = float(body["temperature"]) if body.get("temperature") is not None else (0.7 if config else 1.0)
            rho = float(body["top_p"]) if body.get("top_p") is not None else (0.8 if config else 1.0)
            cuts = (rho, max(0, int(body.get("top_k") or 0)), float(body.get("min_p") or 0.0))
            toks = state.sample(prompt, int(body["max_tokens"]), int(body.get("seed", 0)), T,
                                cuts if config or cuts != (1.0, 0, 0.0) else None)
            rows = state.reported_rows(prompt, [t if t < V else 0 for t in toks])
            if state.defect == "wrong-logprobs":
                reported = [float(rows[t - 1, x]) if t >= 1 and x < V else float(rows[t, x]) + 0.5
                            for t, x in enumerate(toks)]
            else:
                reported = [float(rows[t, x]) if x < V else 0.0 for t, x in enumerate(toks)]
            if state.defect == "zero-logprobs":
                reported = reported[:1] + [0.0] * (len(reported) - 1)
            elif state.defect == "logprobs-plus-0.3":
                reported = [min(0.0, v + 0.3) for v in reported]
            elif state.defect == "bf16-logprob-noise":
                noise = np.random.default_rng([int(body.get("seed", 0)), 77]).normal(0.0, 0.15, len(reported))
                reported = [min(0.0, v + float(e)) for v, e in zip(reported, noise)]
            elif state.defect == "one-wrong-logprob":
                with state.lock:
                    first, state.wrong_done = not state.wrong_done, True
                if first:
                    reported = reported[:-1] + [reported[-1] - 3.0]
            want = int(body.get("logprobs") or 0)
            tops = None
            if want > 1:  # vLLM: the top `logprobs` entries, plus the sampled token when it is not among them
                tops = []
                for t, x in enumerate(toks):
                    order = np.lexsort((np.arange(V), -rows[t]))[:want]
                    top = {f"token_id:{int(i)}": float(rows[t, i]) for i in order}
                    if x < V:
                        top.setdefault(f"token_id:{x}", float(rows[t, x]))
                    tops.append(top)
            answer = {"id": "cmpl-test", "object": "text_completion", "model": state.name,
                      "choices": [{"index": 0, "text": "", "finish_reason": "length",
                                   "logprobs": {"tokens": [f"token_id:{t}" for t in toks], "token_logprobs": reported,
                                                "top_logprobs": tops, "text_offset": None}}]}
            if body.get("stream"):
                return self._send_events(answer)
            return self._send(200, answer)

        def _send_events(self, answer):
            """``answer`` streamed as vLLM streams a completion: server-sent events of one token each
            (its log-probabilities beside it), the last with the finish reason, then ``[DONE]``."""
            lp = answer["choices"][0]["logprobs"]
            n = len(lp["tokens"])
            events = []
            for t in range(n):
                piece = {"tokens": lp["tokens"][t:t + 1], "token_logprobs": lp["token_logprobs"][t:t + 1],
                         "top_logprobs": None if lp["top_logprobs"] is None else lp["top_logprobs"][t:t + 1],
                         "text_offset": None}
                events.append({"id": answer["id"], "object": "text_completion", "model": answer["model"],
                               "choices": [{"index": 0, "text": "", "logprobs": piece,
                                            "finish_reason": "length" if t == n - 1 else None}]})
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for e in events:
                    self.wfile.write(b"data: " + json.dumps(e).encode() + b"\r\n\r\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _echo(self, ids, k):
            V = state.model.V
            rows = state.logprob_rows(ids[:1], ids[1:]) if len(ids) > 1 else np.zeros((0, V))
            want = max(1, k // 2) if state.defect == "fewer-top" else k
            tops, own = [None], [None]
            for j in range(1, len(ids)):
                row = rows[j - 1]
                order = np.lexsort((np.arange(V), -row))[:want]
                top = {f"token_id:{int(i)}": float(row[i]) for i in order}
                if state.defect == "renormalised-top":
                    z = float(np.logaddexp.reduce(row[order]))
                    top = {f"token_id:{int(i)}": float(row[i] - z) for i in order}
                top.setdefault(f"token_id:{ids[j]}", float(row[ids[j]]))
                tops.append(top)
                own.append(float(row[ids[j]]) if math.isfinite(row[ids[j]]) else -9999.0)
            return {"id": "cmpl-echo", "object": "text_completion", "model": state.name,
                    "choices": [{"index": 0, "text": "", "finish_reason": "length",
                                 "logprobs": {"tokens": [f"token_id:{t}" for t in ids] + ["token_id:0"],
                                              "token_logprobs": own + [0.0], "top_logprobs": tops + [{}]}}]}

    return Handler


@contextlib.contextmanager
def serve(defect: str | None = None, **kwargs):
    """Run a ``FakeDeployment`` on 127.0.0.1 for the ``with`` block; yields ``(url, state)``."""
    state = FakeDeployment(defect=defect, **kwargs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    timer = threading.Timer(state.time_limit_s, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", state
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()
