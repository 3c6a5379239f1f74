"""Recorded traffic for ``certify log``: JSONL lines ``{"request", "response"}`` in vLLM's
completions shape, sampled exactly from a known chain's law as each request asks for it.

The chain is ``fake_deployment.default_chain()`` (V = 64) unless given.  Each line's request draws
its sampling fields from ``mix`` (temperature, top_p, top_k, min_p; mixed in one file), the sample
is drawn from that law (vLLM v1's order: temperature, min-p, top-k, top-p), with a planted defect
when asked, and the response reports the raw (T = 1) top-k log-probabilities of every position as
float32 values with ``"token_id:N"`` keys, the sampled token appended when outside the top k (as
vLLM does).  Defects: "temperature-0.9" (samples at 0.9 × the requested T), "top-p-0.95" (a top-p
0.95 applied after the request's own truncations, silently), "reports-sampled-law" (samples from
the chain tempered to T 0.9 before the request's own fields, and reports that tempered law as the
raw one: the log is consistent with itself, only a prefill audit sees it).
"""

from __future__ import annotations

import json

import numpy as np

DEFECTS = ("temperature-0.9", "top-p-0.95", "reports-sampled-law")
# (temperature, top_p, top_k, min_p) per request, drawn uniformly
DEFAULT_MIX = ((1.0, 1.0, -1, 0.0), (0.7, 1.0, -1, 0.0), (0.8, 0.9, -1, 0.0), (1.0, 1.0, 10, 0.0),
               (1.2, 1.0, -1, 0.0), (1.0, 0.8, 20, 0.0), (0.9, 1.0, -1, 0.1))


def request_law(p: np.ndarray, T: float, top_p: float, top_k: int, min_p: float) -> np.ndarray:
    """The law a request asks for from the raw law ``p`` [V] (module doc's order)."""
    q = p ** (1.0 / T)
    q = q / q.sum()
    if min_p > 0:
        q = np.where(q >= min_p * q.max(), q, 0.0)
        q = q / q.sum()
    order = np.lexsort((np.arange(q.size), -q))
    if top_k > 0:
        keep = np.zeros(q.size, dtype=bool)
        keep[order[:top_k]] = True
        q = np.where(keep, q, 0.0)
        q = q / q.sum()
    if top_p < 1:
        cum = np.cumsum(q[order])
        size = int(np.searchsorted(cum, top_p - 1e-12)) + 1
        keep = np.zeros(q.size, dtype=bool)
        keep[order[:size]] = True
        q = np.where(keep, q, 0.0)
        q = q / q.sum()
    return q


def make_log(path, lines: int, n_new: int = 16, k: int = 20, seed: int = 0, defect: str | None = None,
             mix=DEFAULT_MIX, chain=None, extra: list | None = None) -> None:
    """Write ``lines`` lines (module doc) to ``path``; ``extra``: raw lines appended (skips)."""
    from helpers.fake_deployment import default_chain

    if defect is not None and defect not in DEFECTS:
        raise ValueError(f"defect must be one of {DEFECTS}, got {defect!r}")
    chain = chain or default_chain()
    P = chain.probs
    if defect == "reports-sampled-law":
        P = P ** (1 / 0.9)
        P = P / P.sum(axis=1, keepdims=True)
    V = P.shape[0]
    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore"):
        LP = np.log(P).astype(np.float32).astype(np.float64)
    tops = np.argsort(-P, axis=1, kind="stable")[:, :k]
    with open(path, "w") as f:
        for i in range(lines):
            T, top_p, top_k, min_p = mix[int(rng.integers(len(mix)))]
            prompt = [int(rng.integers(V))]
            req = {"model": "chain", "prompt": prompt, "max_tokens": n_new, "logprobs": k, "seed": i,
                   "return_tokens_as_token_ids": True}
            if T != 1.0 or i % 2:
                req["temperature"] = T
            if top_p < 1:
                req["top_p"] = top_p
            if top_k > 0:
                req["top_k"] = top_k
            if min_p > 0:
                req["min_p"] = min_p
            prev, toks, own, top_lists = prompt[-1], [], [], []
            for _ in range(n_new):
                p = P[prev]
                Ts = T * 0.9 if defect == "temperature-0.9" else T
                q = request_law(p, Ts, top_p, top_k, min_p)
                if defect == "top-p-0.95":
                    q = request_law(q, 1.0, 0.95, -1, 0.0)
                x = int(rng.choice(V, p=q))
                d = {f"token_id:{int(j)}": float(LP[prev, j]) for j in tops[prev]}
                if f"token_id:{x}" not in d:
                    d[f"token_id:{x}"] = float(LP[prev, x])
                toks.append(f"token_id:{x}")
                own.append(float(LP[prev, x]))
                top_lists.append(d)
                prev = x
            resp = {"id": f"cmpl-{i}", "object": "text_completion", "model": "chain",
                    "choices": [{"index": 0, "text": "", "finish_reason": "length",
                                 "logprobs": {"tokens": toks, "token_logprobs": own, "top_logprobs": top_lists,
                                              "text_offset": list(range(n_new))}}]}
            f.write(json.dumps({"request": req, "response": resp}) + "\n")
        for raw in extra or []:
            f.write(raw + "\n")
