"""vLLM's own engine (``LLM.generate``) as a black box, run in the vLLM environment.

vLLM pins its own transformers, so it lives in a second environment (``scripts/install.sh
--vllm``: ``.venv-vllm``, or ``$SPECTR_GBV_VLLM_PYTHON``); ``VllmGenerateEngine`` writes one batch
of requests to a file, runs ``engines/vllm_worker.py`` there (one engine start per batch: 20-45 s
on 2 cores), and reads the sampled token ids back.  The reference law is computed here, by
transformers on the same weights (``references.TransformersReference``).

Speculation: vLLM's ``speculative_config`` as given (n-gram: ``{"method": "ngram",
"num_speculative_tokens": k, "prompt_lookup_max": n, "prompt_lookup_min": m}``; a draft model:
``{"model": FOLDER, "num_speculative_tokens": k}``), or None for plain sampling.  Sampling: T as
given, top_k 0 / top_p 1 / min_p 0 (off), no penalties, ``ignore_eos``, one ``seed`` per request.

With n-gram speculation the worker also returns the drafts vLLM proposed (recorded by wrapping
its proposer) and vLLM's speculative counters; ``drafts()`` gives, per sample, the proposals
whose context is a prefix of that sample, in order (``oracle.acceptance_test`` tests them), and
``stats()`` compares vLLM's accepted-token counter with the count recomputed from its own
proposals and its own output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile


def vllm_python() -> str:
    """The vLLM environment's interpreter.

    Raises:
        RuntimeError: none found (the message names the install command).
    """
    from spectr_gbv.certify.samplers.vllm import locate_python

    python = locate_python()
    if python is None:
        raise RuntimeError("vLLM's engine runs in the vLLM environment: make it with `bash scripts/install.sh "
                           "--vllm` (.venv-vllm) or set SPECTR_GBV_VLLM_PYTHON")
    return python


def samples_from_proposals(prompt, tokens, proposed):
    """One sample's drafts ``(start, ids)`` from vLLM's recorded proposals.

    Args:
        prompt: the prompt's ids; tokens: the sample's emitted ids.
        proposed: ``(context ids, draft ids)`` of every proposal of the batch.
    Returns:
        (drafts, overlapping): the non-empty proposals whose context is prompt + tokens[:start]
        (0 < start < len(tokens)), one per start, in order, each kept only when it starts after
        the positions the previous kept draft visited; and how many were dropped for starting
        inside them (0 in a correct engine: a new draft starts after the first rejected position
        or after the bonus token).
    """
    P, n = len(prompt), len(tokens)
    full = list(prompt) + list(tokens)
    by_start = {}
    for ctx, d in proposed:
        s = len(ctx) - P
        if d and 0 < s < n and s not in by_start and ctx == full[:len(ctx)]:
            by_start[s] = [int(t) for t in d]
    kept, dropped, next_free = [], 0, 0
    for s in sorted(by_start):
        if s < next_free:
            dropped += 1
            continue
        d = by_start[s]
        kept.append((s, d))
        a = 0
        while a < len(d) and s + a < n and tokens[s + a] == d[a]:
            a += 1
        next_free = min(n, s + a + 1)
    return kept, dropped


class VllmGenerateEngine:
    """``sample_many(prompts, n_new, seeds)``: one ``LLM.generate`` batch in the vLLM environment.

    Args:
        model: the model folder (safetensors and tokenizer).
        temperature: T > 0 for every request.
        speculative_config: vLLM's dict, or None (plain sampling).
        control: None, or "draft-kept" (``vllm_worker``'s negative control).
        dtype: the engine's weights ("float32" by default, as the reference).
        python: the vLLM interpreter (default ``vllm_python()``).
        timeout_s: seconds for the whole batch, engine start included.
        threads: CPU threads of the worker (``OMP_NUM_THREADS``; vLLM's CPU backend also binds
            its OpenMP threads to the first ``threads`` cores, ``VLLM_CPU_OMP_THREADS_BIND``).
        log: optional line callback: the worker's progress (vLLM's own bar), relayed every ~10 s.
    Raises:
        RuntimeError: no vLLM environment; the worker failing (its last output lines).
        ValueError: T ≤ 0, an unknown control.
    """

    def __init__(self, model, temperature: float = 1.0, speculative_config: dict | None = None,
                 control: str | None = None, dtype: str = "float32", python: str | None = None,
                 timeout_s: float = 3600.0, threads: int | None = None, log=None):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if control not in (None, "draft-kept"):
            raise ValueError(f"control must be None or 'draft-kept', got {control!r}")
        self.model, self.T, self.spec, self.control = str(model), float(temperature), speculative_config, control
        self.dtype, self.timeout_s = dtype, float(timeout_s)
        self.threads, self.log = threads, log
        self.python = python or vllm_python()
        self.gives_drafts = bool(speculative_config) and speculative_config.get("method") == "ngram"
        self.last: dict = {}
        self._drafts: list = []

    def request(self, prompts, n_new: int, seeds) -> dict:
        """The worker's request (``vllm_worker`` module doc)."""
        return {"model": self.model, "dtype": self.dtype, "max_model_len": 512, "speculative_config": self.spec,
                "prompts": [[int(t) for t in p] for p in prompts], "seeds": [int(s) for s in seeds],
                "temperatures": [self.T] * len(prompts), "n_new": int(n_new), "control": self.control}

    def sample_many(self, prompts, n_new: int, seeds) -> list[list[int]]:
        with tempfile.TemporaryDirectory(prefix="spectr-gbv-vllm-") as tmp:
            req, res = os.path.join(tmp, "request.json"), os.path.join(tmp, "result.json")
            with open(req, "w") as fh:
                json.dump(self.request(prompts, n_new, seeds), fh)
            env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
            if self.threads:
                env["OMP_NUM_THREADS"] = str(self.threads)
                env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{self.threads - 1}"
            from spectr_gbv.certify.samplers.vllm import checkout_root

            root = checkout_root()
            if root:
                env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            code, tail = _run_relaying([self.python, "-m", "spectr_gbv.certify.engine.vllm_worker",
                                        req, res], env, self.timeout_s, self.log)
            if code != 0 or not os.path.exists(res):
                raise RuntimeError(f"vLLM's worker failed (exit {code}): {tail}")
            with open(res) as fh:
                self.last = json.load(fh)
        tokens = self.last["tokens"]
        if self.gives_drafts:
            proposed = self.last.get("proposed", [])
            pairs = [samples_from_proposals(p, t, proposed) for p, t in zip(prompts, tokens)]
            self._drafts = [d for d, _ in pairs]
            self.last["overlapping_proposals"] = sum(k for _, k in pairs)
        return tokens

    def __call__(self, prompt_ids, n_new: int, seed: int) -> list[int]:
        return self.sample_many([prompt_ids], n_new, [seed])[0]

    def drafts(self) -> list:
        """Per sample of the last batch, vLLM's own n-gram drafts ``(start, ids)``."""
        return list(self._drafts)

    def stats(self) -> dict:
        """The last batch's totals: vLLM's counters (drafts, draft tokens, accepted tokens), and
        with n-gram drafts the accepted tokens recomputed from vLLM's own proposals and output
        (equal to the counter in a correct engine) and the proposals dropped for overlapping."""
        m = self.last.get("metrics", {})
        out = {f"vllm {k}": float(v) for k, v in m.items() if isinstance(v, (int, float))}
        if self.gives_drafts:
            acc = 0
            for t, ds in zip(self.last.get("tokens", []), self._drafts):
                for s, d in ds:
                    a = 0
                    while a < len(d) and s + a < len(t) and t[s + a] == d[a]:
                        a += 1
                    acc += a
            out["accepted recomputed"] = float(acc)
            out["overlapping proposals"] = float(self.last.get("overlapping_proposals", 0))
        return out


def _run_relaying(argv, env, timeout_s: float, log) -> tuple[int, str]:
    """Run the worker; relay its progress lines (vLLM's bar: "Processed prompts") to ``log`` at
    most every 10 s; return (exit code, its last five output lines)."""
    import threading
    import time

    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    tail: list = []
    last = [0.0]

    def read():
        buf = ""
        while True:
            chunk = proc.stdout.read(256)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.replace("\r", "\n").split("\n")
            for line in lines:
                line = line.strip()
                if not line:
                    continue
                tail.append(line)
                del tail[:-5]
                if log is not None and "Processed prompts" in line and time.monotonic() - last[0] >= 10:
                    last[0] = time.monotonic()
                    log(f"vLLM worker: {line[:160]}")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
        tail.append(f"timed out after {timeout_s:.0f} s")
    reader.join(timeout=5)
    return code, "\n".join(tail)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run through spectr-gbv certify engine vllm")
