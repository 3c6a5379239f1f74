"""An OpenAI-compatible ``/v1/completions`` endpoint as a black-box engine.

The request sends the prompt as token ids and asks for the sampled tokens back as ids:
``logprobs: 1`` with ``return_tokens_as_token_ids: true`` (vLLM's extension: each entry of
``choices[0].logprobs.tokens`` reads ``"token_id:<id>"``), ``ignore_eos: true`` (fixed length
where the server honours it), ``temperature``, ``top_p = 1``, ``top_k = -1`` / ``0`` off, and a
``seed`` per sample.  A server that returns text only is accepted when ``tokenize`` is given and
the text tokenizes unambiguously (``tokenize(text)`` detokenizes back to the same text: checked by
the caller's tokenizer pair); otherwise the sample is refused with a ValueError.

Requests are bounded: ``timeout_s`` each, ``max_requests`` in all; the URL must be a loopback
address unless ``allow_remote`` (tests use loopback only).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class OpenAICompletionsEngine:
    """``sample(prompt_ids, n_new, seed)`` through ``POST {base_url}/v1/completions``.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``.
        model: the ``model`` field.
        temperature: T > 0.
        timeout_s: seconds per request; max_requests: requests in all.
        tokenize: optional ``text -> list[int]`` for servers that return text only.
        allow_remote: permit a non-loopback host.
    Raises:
        ValueError: a non-loopback host without ``allow_remote``, a bad URL.
    """

    def __init__(self, base_url: str, model: str = "model", temperature: float = 1.0, timeout_s: float = 60.0,
                 max_requests: int = 10_000, tokenize=None, allow_remote: bool = False):
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if parsed.hostname not in LOOPBACK and not allow_remote:
            raise ValueError(f"base_url: {parsed.hostname!r} is not a loopback address (allow_remote=True to use it)")
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.model, self.T, self.timeout_s = model, float(temperature), float(timeout_s)
        self.max_requests, self.requests = int(max_requests), 0
        self.tokenize = tokenize

    def request_body(self, prompt_ids, n_new: int, seed: int) -> dict:
        return {"model": self.model, "prompt": [int(t) for t in prompt_ids], "max_tokens": int(n_new),
                "temperature": self.T, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
                "repetition_penalty": 1.0, "seed": int(seed), "logprobs": 1,
                "return_tokens_as_token_ids": True, "ignore_eos": True}

    def __call__(self, prompt_ids, n_new: int, seed: int) -> list[int]:
        if self.requests >= self.max_requests:
            raise ValueError(f"max_requests = {self.max_requests} reached")
        self.requests += 1
        data = json.dumps(self.request_body(prompt_ids, n_new, seed)).encode()
        req = urllib.request.Request(self.url, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            body = json.loads(resp.read())
        return parse_token_ids(body, self.tokenize)


def parse_token_ids(body: dict, tokenize=None) -> list[int]:
    """The sampled ids of a completions response (module doc).

    Raises:
        ValueError: no ``choices``, or no ids and no ``tokenize`` for the text.
    """
    try:
        choice = body["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ValueError("the response has no choices[0]") from None
    if "token_ids" in choice and choice["token_ids"] is not None:
        return [int(t) for t in choice["token_ids"]]
    tokens = ((choice.get("logprobs") or {}).get("tokens")) or []
    if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens]
    if tokenize is None:
        raise ValueError("the server returned text, not token ids (no return_tokens_as_token_ids); "
                         "pass tokenize= for text that tokenizes unambiguously")
    return [int(t) for t in tokenize(choice.get("text", ""))]
