"""Power of ``certify endpoint``'s default plan on the embedded tiny model, against planted servers.

The plan: N = 60 samples × 16 tokens (``--plan-samples``: the default of ``certify endpoint`` was
60 when this was written and is 80 since) over the 8 shipped prompts, α = 10^-3 for the family, η = 10^-3, the reference's top 20 per position (what ``--reference self`` gives).  Each
planted server is run ``--runs`` times (50: disjoint samples, fresh seeds), each run's 60 samples
tested by ``oracle.sequence_family.family_test``; the table gives the runs failed, the power with
its 95 % Clopper–Pearson interval, and which test fired.

Samples come from two sources:

* ``--from FILE`` (a JSON written by a run against a real server: prompts, and per sample its
  tokens and the server's top-20 log-probabilities along it, as ``collect`` makes it): vLLM's
  OpenAI server sampling exactly, at T = 0.9 when asked 1.0 (``temperature`` in the request), or
  with top-p 0.95 (``top_p``), its own prompt log-probabilities as the reference;
* ``--planted NAME``: transformers' ``generate`` on the tiny model (float32, batches of 30, KV
  cache) with a logits processor that plants the defect: "stale" (with probability 0.1 a token is
  drawn from the previous step's logits), "leak" (the law (1 − 0.01)·p + 0.01·q, q the tiny model's
  bfloat16 copy with its logits divided by 1.5, the transformers assistant of ``certify engine``),
  "exact"; the reference is the tiny model's whole law, coarsened to its top 20 as a server's
  would be;
* ``--gguf NAME``: llama-cpp-python sampling the tiny model's GGUF (``gguf_samples``): the
  embedded Q4_1 file itself, or requantised to Q4_0 or Q8_0 and served as if it were the original;
  the reference the whole float32 law of ``hf:tiny`` (dequantised from the Q4_1 file); with
  ``--plant stale`` the sampler gets the previous step's logits with probability 0.1.

Run (the vLLM server as in docs/engines.md, on 127.0.0.1:8011):
``python benchmarks/deployment_power.py collect --mode exact|t09|topp --samples 3000 --out FILE``,
then ``python benchmarks/deployment_power.py test --from FILE`` or ``test --planted stale``.
Results: benchmarks/DEPLOYMENT.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.sequence_family import family_test
from spectr_gbv.oracle.sequence_records import records_from_laws, records_from_top
from spectr_gbv.oracle.sequence_test import ORDERS

N_PLAN, N_NEW, K, ALPHA, ETA = 60, 16, 20, 1e-3, 1e-3


def collect(url: str, mode: str, samples: int, out: str, seed: int) -> None:
    """Samples and the server's top-20 along them, from a running vLLM server (module doc)."""
    from spectr_gbv.certify.endpoint.client import Endpoint
    from spectr_gbv.certify.endpoint.prompts import DEFAULT_PROMPTS
    from spectr_gbv.certify.endpoint.references import ServerReference
    from spectr_gbv.certify.endpoint.run import sample_seed
    from spectr_gbv.certify.endpoint.servers import dialect

    ep, d = Endpoint(url), dialect("openai")
    model = ep.get("/v1/models")["data"][0]["id"]
    prompts = [d.parse_tokens(ep.post(*d.tokenize_request(model, p))) for p in DEFAULT_PROMPTS]
    ref = ServerReference(ep, d, model, K)

    def one(i):
        p = prompts[i % len(prompts)]
        path, body = d.sample_request(model, p, N_NEW, sample_seed(seed, i), 1.0)
        body.update({"t09": {"temperature": 0.9}, "topp": {"top_p": 0.95}}.get(mode, {}))
        s = d.parse_sample(ep.post(path, body), N_NEW)
        top = ref.rows(p, s.tokens).top
        return {"tokens": s.tokens, "ids": top.top_ids, "lps": top.top_logprobs, "own": top.token_logprobs}

    with ThreadPoolExecutor(8) as pool:
        data = list(pool.map(one, range(samples)))
    with open(out, "w") as fh:
        json.dump({"mode": mode, "prompts": prompts, "samples": data}, fh)


def planted(name: str, samples: int, seed: int) -> list:
    """Records of ``samples`` continuations of the tiny model with a planted defect (module doc)."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    from spectr_gbv.certify.endpoint.prompts import DEFAULT_PROMPTS
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    torch.manual_seed(seed)
    model, tok = load_causal_lm("tiny", dtype="float32")
    draft = None
    if name == "leak":
        draft = load_causal_lm("tiny", dtype="bfloat16")[0]

    class Plant(LogitsProcessor):
        def __init__(self):
            self.previous = None

        def __call__(self, input_ids, scores):
            logp = torch.log_softmax(scores.double(), -1)
            out = logp
            if name == "stale" and self.previous is not None:
                use = torch.rand(scores.shape[0]) < 0.1
                out = torch.where(use[:, None], self.previous, logp)
            if name == "leak":
                with torch.inference_mode():
                    q = torch.log_softmax(draft(input_ids).logits[:, -1].double() / 1.5, -1)
                out = torch.logsumexp(torch.stack([logp + math.log(0.99), q + math.log(0.01)]), 0)
            self.previous = logp
            return out.float()

    records = []
    prompts = [tok(p).input_ids for p in DEFAULT_PROMPTS]
    for start in range(0, samples, 30):
        p = prompts[(start // 30) % len(prompts)]
        ids = torch.tensor([p] * min(30, samples - start))
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, max_new_tokens=N_NEW, min_new_tokens=N_NEW,
                                 logits_processor=LogitsProcessorList([Plant()]), pad_token_id=0)
            logits = model(out).logits.double()
        for r in range(out.shape[0]):
            toks = out[r, len(p):].tolist()
            z = torch.log_softmax(logits[r, len(p) - 1:len(p) - 1 + N_NEW], -1)
            top = torch.topk(z, K, dim=-1)
            records.append(records_from_top(toks, top.indices.tolist(), top.values.tolist(),
                                            [float(z[t, x]) for t, x in enumerate(toks)]))
    return records


GGUF_TYPES = {"q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def gguf_samples(kind: str, samples: int, seed: int, folder: str, plant: str | None = None) -> dict:
    """``samples`` continuations (T = 1, no truncation, 16 tokens, the 8 shipped prompts in turn)
    drawn by llama-cpp-python from a GGUF of the tiny model: ``original`` (the embedded Q4_1 file
    the float32 weights of ``hf:tiny`` are dequantised from: the same weights, llama.cpp's
    kernels) or that file requantised to ``q4_0`` / ``q8_0`` with llama.cpp's own quantizer (a
    quantized copy served as if it were the original).  Returns ``{"prompts", "samples"}`` as
    ``whole_law_records`` takes them."""
    import ctypes

    import llama_cpp

    from spectr_gbv.certify.endpoint.prompts import DEFAULT_PROMPTS
    from spectr_gbv.certify.engine.llama_cpp_python import LlamaCppPythonEngine, load_llama
    from spectr_gbv.gpu_backend.llamacpp.pair import gguf_path

    path = str(gguf_path("tiny"))
    if kind != "original":
        out = os.path.join(folder, f"tiny-{kind}.gguf")
        if not os.path.exists(out):
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype, params.allow_requantize = getattr(llama_cpp, GGUF_TYPES[kind]), True
            if llama_cpp.llama_model_quantize(path.encode(), out.encode(), ctypes.byref(params)) != 0:
                raise RuntimeError(f"llama_model_quantize to {kind} failed")
        path = out
    llama = load_llama(path, threads=2)
    engine = LlamaCppPythonEngine(llama, 1.0)
    stale = None
    if plant == "stale":
        from llama_cpp import LogitsProcessorList

        class Stale:
            def __init__(self):
                self.previous, self.coin = None, None

            def __call__(self, input_ids, scores):
                out = self.previous if self.previous is not None and self.coin.random() < 0.1 else scores
                self.previous = scores.copy()
                return out
        stale = Stale()
        engine.kw["logits_processor"] = LogitsProcessorList([stale])
    elif plant is not None:
        raise ValueError(f"plant must be None or 'stale', got {plant!r}")
    prompts = [[int(t) for t in llama.tokenize(p.encode(), add_bos=False)] for p in DEFAULT_PROMPTS]
    data = []
    for i in range(samples):
        if stale is not None:
            stale.previous, stale.coin = None, np.random.default_rng(seed + i)
        data.append({"prompt": i % len(prompts), "tokens": engine(prompts[i % len(prompts)], N_NEW, seed + i)})
        if (i + 1) % 500 == 0:
            print(f"{time.strftime('%H:%M:%S')} {kind}: {i + 1}/{samples} samples", file=sys.stderr, flush=True)
    return {"mode": f"gguf {kind}" + (f", planted {plant}" if plant else ""), "prompts": prompts, "samples": data}


def whole_law_records(data: dict) -> list:
    """Records of the collected samples against the tiny model's whole float32 law (what
    ``--reference hf:tiny`` gives) instead of the server's top 20."""
    import torch

    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    model, _ = load_causal_lm("tiny", dtype="float32")
    prompts, samples = data["prompts"], data["samples"]
    records = []
    for start in range(0, len(samples), 30):
        chunk = samples[start:start + 30]
        rows = [prompts[e["prompt"]] + list(e["tokens"]) for e in chunk]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        with torch.inference_mode():
            logits = model(ids, attention_mask=(torch.arange(width)[None, :] < torch.tensor(
                [len(r) for r in rows])[:, None]).long()).logits.double()
        for r, e in enumerate(chunk):
            n0, toks = len(prompts[e["prompt"]]), list(e["tokens"])
            law = torch.softmax(logits[r, n0 - 1:n0 - 1 + len(toks)], -1).numpy()
            records.append(records_from_laws(toks, law))
        if (start // 30 + 1) % 20 == 0:
            print(f"{time.strftime('%H:%M:%S')} records {len(records)}/{len(samples)}", file=sys.stderr, flush=True)
    return records


def test(records: list, runs: int, subsets: int = 0, n_plan: int = N_PLAN, alpha: float = ALPHA,
         eta: float = ETA) -> dict:
    """``runs`` disjoint plans of ``n_plan`` samples, or (``subsets`` > 0) that many plans drawn at
    random without replacement from the whole pool (overlapping: the pool stands for the server's
    law; a finer power estimate than the disjoint runs allow, not an independent one), each tested
    by ``family_test`` at family level ``alpha`` and tolerance ``eta``.  Returns the plans, the
    plans failed, the 95 % Clopper–Pearson interval of the power, the count per test fired,
    each directional test's statistic per plan (z, or log W for the e-values) and each plan's
    pooled PIT p-value per order (``ORDERS``)."""
    fired: dict = {}
    statistics: dict = {}
    pooled: dict = {}
    failed = 0
    pick = np.random.default_rng(11)
    plans = ([pick.choice(len(records), n_plan, replace=False) for _ in range(subsets)] if subsets
             else [np.arange(r * n_plan, (r + 1) * n_plan) for r in range(runs)])
    runs = len(plans)
    for r, idx in enumerate(plans):
        part = [records[i] for i in idx]
        res = family_test(part, alpha, eta, seed=r, indices=[int(i) for i in idx])
        failed += not res.passed
        for d in res.directional:
            statistics.setdefault(d.name, []).append(round(float(d.statistic), 3))
            if not d.passed:
                fired[d.name] = fired.get(d.name, 0) + 1
        if not all(x.passed for x in res.rows):
            fired["omnibus"] = fired.get("omnibus", 0) + 1
        for order in ORDERS:
            pooled.setdefault(order, []).append(float(f"{res.pooled(order).pvalue:.3g}"))
    lo = sps.beta.ppf(0.025, failed, runs - failed + 1) if failed else 0.0
    hi = sps.beta.ppf(0.975, failed + 1, runs - failed) if failed < runs else 1.0
    return {"runs": runs, "failed": failed, "ci95": [float(lo), float(hi)], "fired": fired,
            "statistics": statistics, "pooled_p": pooled}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--url", default="http://127.0.0.1:8011")
    c.add_argument("--mode", choices=("exact", "t09", "topp"), required=True)
    c.add_argument("--samples", type=int, default=3000)
    c.add_argument("--seed", type=int, default=5000)
    c.add_argument("--out", required=True)
    t = sub.add_parser("test")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="source")
    src.add_argument("--planted", choices=("exact", "stale", "leak"))
    src.add_argument("--gguf", choices=("original", "q4_0", "q8_0"),
                     help="samples from llama-cpp-python on this GGUF, the tiny model's whole float32 law as the reference")
    t.add_argument("--plant", choices=("stale",), help="--gguf: plant this defect in llama-cpp-python's sampling")
    t.add_argument("--runs", type=int, default=50)
    t.add_argument("--subsets", type=int, default=0, help="random plans drawn from the pool instead (test())")
    t.add_argument("--plan-samples", type=int, default=N_PLAN, help="N of each plan (default 60, the shipped default when written; 80 since 2a181a6)")
    t.add_argument("--pool", type=int, default=0, help="--from: use the first POOL samples only")
    t.add_argument("--seed", type=int, default=None,
                   help="--gguf / --planted: the first sample's seed (default 9000 / 7); the runs of a later call "
                        "with seed + runs x plan-samples are disjoint from an earlier call's")
    t.add_argument("--whole-law", action="store_true",
                   help="--from: the tiny model's whole law as the reference (hf:tiny) instead of the server's top 20")
    args = ap.parse_args()
    if args.what == "test" and args.plant and not args.gguf:
        ap.error("--plant: plants into llama-cpp-python's sampling; give --gguf too")
    if args.what == "test" and args.seed is not None and args.source:
        ap.error("--seed: the samples of --from were drawn already; it applies to --gguf and --planted")
    if args.what == "collect":
        collect(args.url, args.mode, args.samples, args.out, args.seed)
        return
    started = time.time()
    if args.source:
        data = json.load(open(args.source))
        if args.pool:
            data["samples"] = data["samples"][:args.pool]
        if args.whole_law:
            records = whole_law_records(data)
        else:
            records = [records_from_top(e["tokens"], e["ids"], e["lps"], e["own"]) for e in data["samples"]]
        name = data.get("mode", args.source) + (" (reference: whole law)" if args.whole_law else "")
    elif args.gguf:
        data = gguf_samples(args.gguf, args.runs * args.plan_samples,
                            9000 if args.seed is None else args.seed, tempfile.gettempdir(), args.plant)
        records = whole_law_records(data)
        name = data["mode"] + " (reference: whole law of hf:tiny)"
    else:
        records = planted(args.planted, args.runs * args.plan_samples, seed=7 if args.seed is None else args.seed)
        name = f"planted {args.planted}"
    result = test(records, min(args.runs, len(records) // args.plan_samples), args.subsets, args.plan_samples)
    result["subsets"], result["plan_samples"] = args.subsets, args.plan_samples
    result["name"], result["seconds"] = name, time.time() - started
    if args.seed is not None:
        result["seed"] = args.seed
    print(json.dumps(result))


if __name__ == "__main__":
    main()
