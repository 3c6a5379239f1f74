"""Configuration from measured costs: K, L, and whether to speculate at all, for this machine.

What is measured (once per machine and model pair, cached in ``$SPECTR_GBV_CACHE/autoconfig.json``,
or the file ``$SPECTR_GBV_AUTOCONFIG`` names: ``tuning.cache``):
- **costs**: the target's and the draft's forward (with the probability processing) over n new
  tokens after a cached context, for the n an iteration can feed; the verifier on [K, L, V]
  rows and the draft's sampling for every candidate (K, L); the prefill of the context.
- **a calibration text**: the target's own continuation of two built-in prompts (a HumanEval
  stub and a GSM8K question), sampled losslessly with token verification, so that acceptance is
  measured where the target actually goes;
- **acceptance** (per sampling setting): both models teacher-forced over that text give, per
  position, the draft row p and the target row q; from them K-SEQ's acceptance for k = 1..K_max
  drafts and p(x_t) (``speed_model.Acceptance``).

``speed_model.choose`` then predicts decode tokens per second for every candidate and plain
sampling, and decides for the generation's prompt and length, the draft's prefill counted,
when ``configure`` is given them.  Choosing K and L from information gathered before
the generation keeps every rule lossless: the output law of a lossless rule does not depend on
K or L.

Timings are medians of ``timing.TIMING_REPEATS`` interleaved rounds (``timing.timed_interleaved``: a transient
load slows one round of every candidate, not every repeat of one); when the repeats spread
widely or other processes used cores this one wanted (/proc/stat), the machine is said to be
busy (one line).  The costs are then checked by every generation: ``tuning.recheck`` compares its measured
decode rate with the prediction and marks the cached costs stale when they differ by more than
``RATE_TOLERANCE``; the next ``configure`` times them again (one line says why).

The cache key holds the CPU model, its bf16/int8 flags, cores, torch threads and version (on
llama.cpp also the build: version, CPU features, weight buffers), the
model specs (names, folders or hub ids: a folder whose weights change needs ``refresh=True``),
dtype and draft quantisation, the rule and the candidates (and, for acceptance, the sampling).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

import torch

from spectr_gbv.gpu_backend.decoding.backend import Backend
from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
from spectr_gbv.gpu_backend.torch_backend.backend import TORCH
from spectr_gbv.gpu_backend.tuning.cache import read_cache, write_cache
from spectr_gbv.gpu_backend.tuning.measure import (CALIBRATION_TOKENS, acceptance_from_rows, calibration_text,
                                                   default_calibration_prompts, forward_costs, overhead_costs,
                                                   teacher_forced_rows)
from spectr_gbv.gpu_backend.tuning.speed_model import (MARGIN, MAX_TOKENS, Acceptance, Choice, Costs, choose,
                                                        for_lengths, is_count)

from spectr_gbv.gpu_backend.engine.defaults import K_CANDIDATES, L_CANDIDATES

@dataclass
class PairSpec:
    """What identifies the loaded pair in the cache (the specs the user gave)."""

    target: str
    draft: str
    dtype: str
    draft_quant: str = "none"

    def key(self) -> list:
        return [self.target, self.draft, self.dtype, self.draft_quant]


@dataclass
class AutoConfig:
    """The outcome of ``configure``.

    Attributes:
        choice: ``speed_model.Choice`` (``choice.speculate`` False: plain sampling pays most).
        costs, acceptance: what the choice was made from.
        cached: which of "costs", "text", "acceptance" came from the cache.
        seconds: time spent measuring in this call (0 when everything was cached).
        costs_key: the cache key of the costs (``tuning.recheck`` marks that entry stale when a
            generation's decode rate misses the prediction), or None when they are not cached.
    """

    choice: Choice
    costs: Costs
    acceptance: Acceptance
    cached: list = field(default_factory=list)
    seconds: float = 0.0
    costs_key: str | None = None

    def for_generation(self, prompt_tokens: int, new_tokens: int) -> "AutoConfig":
        """This configuration decided again for a generation of ``new_tokens`` after a prompt of
        ``prompt_tokens`` (``speed_model.for_lengths``: the draft's prefill counted), with the same
        candidates and margin; nothing is measured or predicted again.

        Raises:
            ValueError: a length that is not an integer in 1..``speed_model.MAX_TOKENS`` (None
                included: use ``choice`` for the decode-only decision).
        """
        choice = for_lengths(self.choice, self.costs, prompt_tokens, new_tokens)
        return AutoConfig(choice, self.costs, self.acceptance, self.cached, self.seconds, self.costs_key)

    def summary(self) -> str:
        """Lines for the user: the choice, its predicted speed and plain sampling's (and, when
        the lengths are known, both predicted end to end, the draft's prefill included)."""
        c = self.choice
        b = c.best
        head = (f"auto-configuration ({'cached' if len(self.cached) == 3 else f'measured in {self.seconds:.1f} s'}): "
                f"best K={b.K} L={b.L}: predicted {b.tokens_per_iteration:.2f} tokens per target call, "
                f"{b.tokens_per_second:.2f} tokens/s decode; plain sampling {c.ar_tokens_per_second:.2f} tokens/s")
        if c.ar_seconds is not None:
            head += (f"; for {c.prompt_tokens} prompt tokens and {c.new_tokens} new: {c.speculative_seconds:.2f} s "
                     f"speculating (the draft's prefill {c.draft_prefill_s:.2f} s included) against "
                     f"{c.ar_seconds:.2f} s plain sampling end to end")
        what = "in decode, the draft's prefill included" if c.ar_seconds is not None else "in decode"
        verdict = (f"→ speculating with K={b.K}, L={b.L} (predicted speedup {c.predicted_speedup:.2f}× {what})"
                   if c.speculate else
                   f"→ not speculating: the best shape is predicted at {c.predicted_speedup:.2f}× plain "
                   f"sampling {what}, below the {1 + c.margin:.2f}× needed")
        return head + "\n" + verdict


def configure(target, draft, tokenizer, spec: PairSpec, rule: str, sampling: SamplingConfig,
              Ks=K_CANDIDATES, Ls=L_CANDIDATES, fallback_prompt=(1, 2), margin: float = MARGIN,
              refresh: bool = False, threads: int | None = None, log=None, eos_token_ids=(),
              verifier=None, prompt_tokens: int | None = None, new_tokens: int | None = None,
              backend: Backend = TORCH) -> AutoConfig:
    """Measure (or read from the cache) what the choice needs, and choose K, L or plain sampling.

    Args:
        target, draft: the loaded models (same device); tokenizer: the target's.
        backend: the ``decoding.backend.Backend`` running them (default torch; a pair's own is
            ``ModelPair.backend``).
        spec: the specs the user gave (cache key).
        rule: the verification rule (its verifier's cost is measured).
        sampling: the target's sampling (acceptance depends on it; the draft uses the same).
        Ks, Ls: candidates (≥ 1 each; K = 1 only for single-draft rules: the caller's job).
        fallback_prompt: token ids to calibrate on when the prompt data package is missing.
        margin: see ``speed_model.choose``.
        refresh: measure again even when the cache holds an entry.
        threads: torch threads (cache key; default the current setting).
        log: callable receiving progress lines (default: stderr).
        eos_token_ids: where the calibration text ends (the generation's EOS ids).
        verifier: ``load_verifier(rule)`` already loaded (the generation's engine then uses the
            same one); default: loaded here.
        prompt_tokens, new_tokens: the generation's prompt length and ``max_new_tokens``: the
            choice then counts the draft's prefill of the prompt (``speed_model.choose``);
            None (both): on decode speed alone (``AutoConfig.for_generation`` decides later).
    Returns:
        AutoConfig.
    Raises:
        ValueError: empty or invalid candidates, an unknown rule, a bad margin or bad lengths
            (before any measurement), or a calibration text that is empty (the target ended every
            calibration prompt at once).
    An unreadable cache, or an entry that does not parse, is measured again; a cache that
    cannot be written is reported through ``log`` and skipped.
    """
    from spectr_gbv.gpu_backend.engine.speculative import load_verifier
    from spectr_gbv.gpu_backend.tuning.machine import fingerprint

    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    Ks, Ls = tuple(Ks), tuple(Ls)
    if (not Ks or not Ls or any(isinstance(v, bool) or int(v) != v or v < 1 for v in Ks + Ls)):
        raise ValueError(f"candidates must be non-empty integers >= 1, got Ks={Ks}, Ls={Ls}")
    Ks, Ls = tuple(sorted(set(int(k) for k in Ks))), tuple(sorted(set(int(x) for x in Ls)))
    if not margin >= 0 or margin == float("inf"):
        raise ValueError(f"margin must be a finite number >= 0, got {margin}")
    from spectr_gbv.reference.rules import registry

    registry.spec(rule)  # an unknown rule fails here, before anything is measured
    if (prompt_tokens is None) != (new_tokens is None) or any(
            not is_count(v, 1) for v in (prompt_tokens, new_tokens) if v is not None):
        raise ValueError(f"prompt_tokens and new_tokens (the prompt's length and max_new_tokens) must both be "
                         f"integers in 1..{MAX_TOKENS} or both None, got {prompt_tokens!r} and {new_tokens!r}")
    verifier = verifier if verifier is not None else load_verifier(rule)
    threads = threads or torch.get_num_threads()
    data = read_cache()
    entries = data.setdefault("entries", {})
    key_text = json.dumps(["text", spec.target, spec.draft, CALIBRATION_TOKENS])
    key_acc = json.dumps(["acceptance", spec.key(), sampling.temperature, sampling.top_k, sampling.top_p,
                          max(Ks), CALIBRATION_TOKENS])
    # costs: top-k / top-p change the probability processing of every row (a sort over V)
    device = backend.device_label(target)
    key_costs = json.dumps(["costs", fingerprint(threads), device, spec.key(), rule, Ks, Ls,
                            sampling.top_k, sampling.top_p])
    cached, start = [], time.perf_counter()

    texts = None if refresh else _parsed(_texts_from_json, entries.get(key_text))
    if texts is not None:
        cached.append("text")
    else:
        log(f"auto-configuration: sampling a calibration text with the target ({CALIBRATION_TOKENS} "
            f"tokens per prompt; once per model pair)")
        prompts = default_calibration_prompts(tokenizer, list(fallback_prompt))
        texts = [[p, calibration_text(target, draft, p, eos_token_ids=eos_token_ids, backend=backend)] for p in prompts]
        entries[key_text] = texts
    texts = [(list(p), list(c)) for p, c in texts if len(c) >= 1]
    if not texts:
        raise ValueError("the calibration text is empty: the target ended every calibration prompt at once")

    rows = None
    acceptance = None if refresh else _parsed(Acceptance.from_json, entries.get(key_acc))
    if acceptance is not None:
        cached.append("acceptance")
    else:
        log("auto-configuration: measuring acceptance on the calibration text")
        betas, matches, segments, rows = [], [], [], []
        for prompt, cont in texts:
            q = teacher_forced_rows(target, prompt, cont, sampling, backend=backend)
            p = teacher_forced_rows(draft, prompt, cont, sampling, backend=backend)
            dev = q.device
            b, m = acceptance_from_rows(p.to(dev), q, torch.tensor(cont, device=dev), max(Ks))
            betas.append(b), matches.append(m), segments.append(len(cont)), rows.append((p, q))
        import numpy as np

        acceptance = Acceptance(np.concatenate(betas), np.concatenate(matches), tuple(segments))
        entries[key_acc] = acceptance.to_json()

    entry = entries.get(key_costs)
    stale = entry.get("stale") if isinstance(entry, dict) else None
    costs = None if refresh or stale else _parsed(Costs.from_json, entry)
    if costs is not None:
        cached.append("costs")
    else:
        log(f"auto-configuration: timing the models and the verifier again: the cached costs were "
            f"marked stale ({stale})" if stale and not refresh else
            f"auto-configuration: timing the models and the verifier on this machine "
            f"(K in {list(Ks)}, L in {list(Ls)}; once per machine and model pair)")
        prompt, cont = max(texts, key=lambda t: len(t[0]) + len(t[1]))
        context = prompt + cont
        # a backend that re-feeds accepted tokens (llama.cpp at K > 1): up to L more per call
        # (speed_model.Costs)
        refeed = backend.refeeds_accepted and max(Ks) > 1
        most = max(Ks) * max(Ls) + 1 + (max(Ls) if refeed else 0)
        target_n = sorted({n for n in (1, 2, 4, 8, 12, 16, 24, 32) if n < most} | {most})
        draft_n = list(range(1, max(max(Ks), max(Ls) + 1 if refeed else 1) + 1))
        t_s, t_pre, t_q = forward_costs(target, context, target_n, sampling, backend=backend)
        d_s, d_pre, d_q = forward_costs(draft, context, draft_n, sampling, backend=backend)
        if rows is None:
            q = teacher_forced_rows(target, prompt, cont, sampling, backend=backend)
            rows = [(teacher_forced_rows(draft, prompt, cont, sampling, backend=backend).to(q.device), q)]
        p_rows, q_rows = _rows_for_overhead(rows, max(Ls) + 1)
        overhead, ar_draw, o_q = overhead_costs(verifier, p_rows, q_rows, Ks, Ls,
                                                backend=backend)
        costs = Costs(tuple(target_n), tuple(t_s), tuple(draft_n), tuple(d_s), overhead, ar_draw,
                      {"target": t_pre, "draft": d_pre}, len(context), refeed)
        quality = t_q.merged(d_q).merged(o_q)
        if not quality.quiet:
            log(quality.line())
        entries[key_costs] = {**costs.to_json(), "timing": quality.to_json()}
    if len(cached) < 3:
        write_cache(data, log)
    choice = choose(costs, acceptance, Ks, Ls, margin, prompt_tokens=prompt_tokens, new_tokens=new_tokens)
    return AutoConfig(choice, costs, acceptance, cached, time.perf_counter() - start if len(cached) < 3 else 0.0,
                      costs_key=key_costs)


def _texts_from_json(entry) -> list:
    """[[prompt ids, continuation ids], ...] as stored; ValueError when malformed."""
    if not isinstance(entry, list) or not entry:
        raise ValueError("not a list of texts")
    for text in entry:
        if (not isinstance(text, list) or len(text) != 2
                or not all(isinstance(t, int) for part in text for t in part)):
            raise ValueError("a text is not [prompt ids, continuation ids]")
    return entry


def _parsed(parse, entry):
    """``parse(entry)``, or None when there is no entry or it does not parse (measured again)."""
    if entry is None:
        return None
    try:
        return parse(entry)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def _rows_for_overhead(rows, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n consecutive draft and target rows (repeating the last ones when the text is shorter)."""
    p, q = max(rows, key=lambda r: r[0].shape[0])
    if p.shape[0] < n:
        reps = -(-n // p.shape[0])
        p, q = p.repeat(reps, 1), q.repeat(reps, 1)
    return p[:n].contiguous(), q[:n].contiguous()


__all__ = ["AutoConfig", "PairSpec", "configure", "K_CANDIDATES", "L_CANDIDATES"]
