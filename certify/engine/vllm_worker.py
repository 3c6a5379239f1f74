"""Runs inside the vLLM environment (``python -m spectr_gbv.certify.engine.vllm_worker
REQUEST.json RESULT.json``): vLLM's own engine, ``LLM.generate``, on one batch of requests.

The request (JSON, written by ``vllm_engine.VllmGenerateEngine``):

    model               a model folder (safetensors + tokenizer)
    dtype               "float32" | "bfloat16"
    max_model_len       int
    speculative_config  null (no speculation) or vLLM's dict, e.g. {"method": "ngram",
                        "num_speculative_tokens": 4, "prompt_lookup_max": 2,
                        "prompt_lookup_min": 1} or {"model": FOLDER, "num_speculative_tokens": 4}
    prompts             list of token id lists, one per request
    seeds               one int per request (``SamplingParams.seed``)
    temperatures        one float per request (0 = greedy)
    n_new               tokens per request (``max_tokens``, ``ignore_eos``)
    memory_fraction     ``gpu_memory_utilization`` (on the CPU backend: the fraction of the NUMA
                        node's memory that must be free at start; default 0.3, vLLM's own 0.92
                        refuses to start beside other processes)
    kv_cache_bytes      ``kv_cache_memory_bytes`` (default 256 MiB: ~5,500 tokens of the tiny model)
    control             null, or "draft-kept" (negative control: vLLM's v1 rejection sampler
                        wrapped so that every draft token is kept and the bonus token follows;
                        wrapping only, the installed code is not edited)

The result (JSON): ``tokens`` (one list per request), ``metrics`` (vLLM's speculative decoding
counters after the batch: drafts, draft tokens, accepted tokens), ``drafts`` (n-gram mode only:
each request's drafts ``(start, ids)`` replayed from its emitted tokens with vLLM's own n-gram
proposer function, ``oracle.acceptance_test``'s input; ``replayed`` the totals of that replay, to
compare with ``metrics``), ``version``, ``seconds`` (init, generate).

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that the control's
wrapper reaches the sampler.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _keep_every_draft() -> None:
    """Negative control: wrap v1's random rejection step so that each request's output row becomes
    its draft tokens followed by its bonus token (every draft kept, whatever the target says)."""
    import vllm.v1.sample.rejection_sampler as rs

    original = rs._rejection_random_sample

    def keep_all(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                 bonus_token_ids, recovered_token_ids, uniform_probs, is_greedy, max_spec_len, *args, **kw):
        original(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                 bonus_token_ids, recovered_token_ids, uniform_probs, is_greedy, max_spec_len, *args, **kw)
        ends = cu_num_draft_tokens.tolist()
        start = 0
        for b, end in enumerate(ends):
            n = end - start
            if is_greedy is None or not bool(is_greedy[b]):
                output_token_ids[b, :n] = draft_token_ids[start:end].to(output_token_ids.dtype)
                output_token_ids[b, n] = bonus_token_ids.view(-1)[b].to(output_token_ids.dtype)
            start = end

    rs._rejection_random_sample = keep_all


PROPOSED: list = []  # (context token ids, draft ids) of every n-gram proposal vLLM made


def _record_ngram_proposals() -> None:
    """Wrap ``NgramProposer.propose`` (a reporting wrapper: same arguments, same result) to keep
    each batch row's context and draft in ``PROPOSED``."""
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    original = NgramProposer.propose

    def propose(self, num_speculative_tokens, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, *a, **k):
        drafts = original(self, num_speculative_tokens, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, *a, **k)
        for i, d in enumerate(drafts):
            if i < len(sampled_token_ids) and len(sampled_token_ids[i]):
                PROPOSED.append((token_ids_cpu[i, :int(num_tokens_no_spec[i])].tolist(), [int(t) for t in d]))
        return drafts

    NgramProposer.propose = propose


def _counters(llm) -> dict:
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}
    out = {}
    try:
        for m in llm.get_metrics():
            if m.name in names:
                out[names[m.name]] = out.get(names[m.name], 0) + int(getattr(m, "value", 0))
    except Exception as err:  # metrics are a report, not the verdict
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def replay_ngram_drafts(prompt, tokens, k: int, min_n: int, max_n: int, max_model_len: int):
    """The n-gram drafts vLLM proposes along one emitted sequence, replayed with its own proposer
    function (``vllm.v1.spec_decode.ngram_proposer._find_longest_matched_ngram_and_propose_tokens``):
    the first token comes from the prefill (no draft); then a draft is proposed from the context so
    far, its tokens kept while they equal the emitted ones, and the next draft starts after the
    first rejected position's token (or after the bonus token).

    Returns:
        list of ``(start, ids)``.
    """
    import numpy as np
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as find

    ctx = list(prompt)
    out, s = [], 1
    n = len(tokens)
    while s < n:
        d = find(np.asarray(ctx + list(tokens[:s]), dtype=np.int32), min_n, max_n, max_model_len, k).tolist()
        if not d:
            s += 1
            continue
        out.append((s, [int(t) for t in d]))
        a = 0
        while a < len(d) and s + a < n and int(tokens[s + a]) == int(d[a]):
            a += 1
        s += a + 1
    return out


def main(argv) -> int:
    req_path, res_path = argv
    with open(req_path) as fh:
        req = json.load(fh)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = req.get("speculative_config")
    llm = LLM(model=req["model"], dtype=req.get("dtype", "float32"), max_model_len=int(req.get("max_model_len", 512)),
              enforce_eager=True, seed=0, speculative_config=spec, disable_log_stats=False,
              gpu_memory_utilization=float(req.get("memory_fraction", 0.3)),
              kv_cache_memory_bytes=int(req.get("kv_cache_bytes", 256 << 20)))
    if req.get("control") == "draft-kept":  # after the start: its kernel warm-up needs the original
        _keep_every_draft()
    if spec and spec.get("method") == "ngram":
        # after the engine's start: importing the proposer (and numba) before it breaks vLLM's CPU
        # kernel registration (its scan of loaded modules trips on a numba object)
        _record_ngram_proposals()
    t1 = time.perf_counter()
    params = [SamplingParams(temperature=float(T), top_p=1.0, top_k=0, min_p=0.0, seed=int(s),
                             max_tokens=int(req["n_new"]), ignore_eos=True, repetition_penalty=1.0,
                             presence_penalty=0.0, frequency_penalty=0.0)
              for s, T in zip(req["seeds"], req["temperatures"])]
    prompts = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in req["prompts"]]
    outs = llm.generate(prompts, params, use_tqdm=True)  # its progress bar on stderr: the parent relays it
    t2 = time.perf_counter()
    tokens = [[int(t) for t in o.outputs[0].token_ids] for o in outs]
    result = {"tokens": tokens, "metrics": _counters(llm), "version": vllm.__version__,
              "seconds": {"init": t1 - t0, "generate": t2 - t1}}
    if spec and spec.get("method") == "ngram":
        k, lo, hi = spec["num_speculative_tokens"], spec.get("prompt_lookup_min", 1), spec.get("prompt_lookup_max", 1)
        drafts = [replay_ngram_drafts(p, t, k, lo, hi, int(req.get("max_model_len", 512)))
                  for p, t in zip(req["prompts"], tokens)]
        acc = 0
        for t, ds in zip(tokens, drafts):
            for s, d in ds:
                a = 0
                while a < len(d) and s + a < len(t) and t[s + a] == d[a]:
                    a += 1
                acc += a
        result["drafts"] = drafts
        result["replayed"] = {"drafts": sum(len(ds) for ds in drafts),
                              "draft_tokens": sum(len(d) for ds in drafts for _, d in ds), "accepted_tokens": acc}
    result["proposed"] = PROPOSED
    with open(res_path, "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
