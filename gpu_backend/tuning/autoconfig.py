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

Timings are medians of ``TIMING_REPEATS`` interleaved rounds (``timed_interleaved``: a transient
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
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch

from spectr_gbv.gpu_backend.engine.backend import Backend
from spectr_gbv.gpu_backend.engine.sampling import SamplingConfig, finite_rows, sampleable
from spectr_gbv.gpu_backend.engine.torch_backend import TORCH
from spectr_gbv.gpu_backend.tuning.cache import read_cache, write_cache
from spectr_gbv.gpu_backend.tuning.speed_model import (MARGIN, MAX_TOKENS, Acceptance, Choice, Costs, choose,
                                                        for_lengths, is_count)

from spectr_gbv.gpu_backend.engine.defaults import K_CANDIDATES, L_CANDIDATES

CALIBRATION_SOURCES = (("humaneval", 0), ("gsm8k", 0))
CALIBRATION_TOKENS = 64
TIMING_REPEATS = 5
SLOW_CALL_S = 1.0
# the machine counts as busy during a timing when the repeats spread by more than this
# (median over the functions of (max − min) / median) or when the other processes used more
# cores than this process left free, by more than BUSY_SLACK_CORES (Linux /proc/stat)
NOISY_SPREAD = 0.25
BUSY_SLACK_CORES = 0.5
# a generation whose decode rate misses the prediction by more than this (relative, either
# direction) marks the cached costs stale (``tuning.recheck``)
RATE_TOLERANCE = 0.25


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


def machine_busy_seconds() -> float:
    """CPU seconds all processes have spent busy since boot, summed over cores (Linux
    /proc/stat: user + nice + system + irq + softirq + steal); NaN where unreadable."""
    import os

    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        return (user + nice + system + irq + softirq + steal) / ticks
    except (OSError, ValueError, IndexError):
        return float("nan")


@dataclass
class TimingQuality:
    """How quiet the machine was while ``timed_interleaved`` ran.

    Attributes:
        spread: median over the timed functions of (max − min) / median of their repeats
            (0 on a perfectly steady machine; a load that comes and goes widens it).
        other_cores: cores' worth of CPU time the OTHER processes used during the timing
            (machine busy seconds − this process's CPU seconds, over wall seconds); NaN where
            the machine's counters cannot be read.
        free_cores: cores not used by this process's torch threads (cores − threads).
        calls: timed calls (warm-ups excluded).
    A timing is quiet when spread ≤ ``NOISY_SPREAD`` and the other processes did not need more
    than the free cores (+ ``BUSY_SLACK_CORES``): otherwise some held a core this process wanted.
    """

    spread: float
    other_cores: float
    free_cores: float
    calls: int

    @property
    def quiet(self) -> bool:
        """spread ≤ ``NOISY_SPREAD`` and not other_cores > free_cores + ``BUSY_SLACK_CORES``."""
        return self.spread <= NOISY_SPREAD and not self.other_cores > self.free_cores + BUSY_SLACK_CORES

    def merged(self, other: "TimingQuality") -> "TimingQuality":
        """The worse of two timings' indicators (calls added)."""
        load = max((x for x in (self.other_cores, other.other_cores) if x == x), default=float("nan"))
        return TimingQuality(max(self.spread, other.spread), load, min(self.free_cores, other.free_cores),
                             self.calls + other.calls)

    def to_json(self) -> dict:
        return {"spread": self.spread, "other_cores": self.other_cores if self.other_cores == self.other_cores else None,
                "free_cores": self.free_cores, "calls": self.calls, "quiet": self.quiet}

    def line(self) -> str:
        """One line for the user when the machine was not quiet."""
        load = ("" if self.other_cores != self.other_cores else
                f", other processes used {self.other_cores:.1f} cores with {self.free_cores:g} free")
        return (f"auto-configuration: the machine was busy while timing (repeats spread "
                f"{100 * self.spread:.0f} %{load}); the costs are kept, and every generation's decode "
                f"rate is checked against them (a miss by more than {100 * RATE_TOLERANCE:.0f} % times them again)")


def timed_interleaved(fns, repeats: int = TIMING_REPEATS, device=None, threads: int | None = None,
                      clock=time.perf_counter, cpu_clock=time.process_time,
                      machine_clock=machine_busy_seconds, cores: int | None = None
                      ) -> tuple[list[float], TimingQuality]:
    """Median seconds of each function of ``fns``, the repeats interleaved: after one warm-up
    call of each (the first call of a shape builds kernels and allocates), ``repeats`` rounds
    each call every function once, so a load that comes and goes slows one round of every
    function rather than every repeat of one, and the median drops it.

    A function whose warm-up is slower than ``SLOW_CALL_S`` is timed once more, outside the
    rounds (a host-planned verifier such as mdbv's takes seconds per call at a large vocabulary).
    On a CUDA ``device`` each call is synchronised before the clock is read.

    Args:
        fns: callables with no arguments.
        repeats: rounds (≥ 1).
        threads: torch threads (default the current setting); cores: the machine's (default
            ``os.cpu_count()``): free cores = cores − threads.
        clock, cpu_clock, machine_clock: wall seconds, this process's CPU seconds, and every
            process's busy CPU seconds (``machine_busy_seconds``); tests pass fakes.
    Returns:
        ([median seconds per function], TimingQuality of the rounds).
    """
    import os

    cuda = device is not None and torch.device(device).type == "cuda"

    def once(fn) -> float:
        start = clock()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        return clock() - start

    fns = list(fns)
    warm = [once(fn) for fn in fns]
    slow = [w > SLOW_CALL_S for w in warm]
    samples = [[] for _ in fns]
    wall0, cpu0, busy0 = clock(), cpu_clock(), machine_clock()
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            if not slow[i]:
                samples[i].append(once(fn))
    wall, cpu, busy = clock() - wall0, cpu_clock() - cpu0, machine_clock() - busy0
    out = [once(fn) if slow[i] else statistics.median(samples[i]) for i, fn in enumerate(fns)]
    spreads = [(max(x) - min(x)) / statistics.median(x) for x in samples if len(x) > 1 and statistics.median(x) > 0]
    threads = threads or torch.get_num_threads()
    cores = cores or os.cpu_count() or threads
    others = max(busy - cpu, 0.0) / wall if wall > 0 and busy == busy else float("nan")
    return out, TimingQuality(statistics.median(spreads) if spreads else 0.0, others,
                              float(max(cores - threads, 0)), sum(len(x) for x in samples))


def median_seconds(fn, repeats: int = TIMING_REPEATS, device=None) -> float:
    """Median seconds of ``fn()`` (``timed_interleaved`` of one function)."""
    return timed_interleaved([fn], repeats, device)[0][0]


@torch.inference_mode()
def forward_costs(model, context_ids: list[int], ns, sampling: SamplingConfig,
                  repeats: int = TIMING_REPEATS, backend: Backend = TORCH) -> tuple[list[float], float, TimingQuality]:
    """Seconds of a forward over n new tokens after a cached context, with the probability
    processing of every row, for each n in ``ns``; and the context's prefill seconds.

    Args:
        model: a model of ``backend`` (default torch: a transformers causal LM).
        context_ids: the context (≥ 2 tokens); the new tokens are its last n tokens again.
        ns: token counts ≥ 1.
    Returns:
        (seconds per n: medians of ``repeats`` rounds, the n interleaved (``timed_interleaved``);
        the prefill's seconds: one call; how quiet the machine was).
    """
    return backend.forward_costs(model, context_ids, ns, sampling, timed_interleaved, repeats)


@torch.inference_mode()
def overhead_costs(verifier, p_rows: torch.Tensor, q_rows: torch.Tensor, Ks, Ls,
                   repeats: int = TIMING_REPEATS, backend: Backend = TORCH) -> tuple[dict, float, TimingQuality]:
    """Per-iteration seconds besides the forwards: the verifier on [1, K, L, V] rows built from
    measured rows, and L draws of K draft tokens (finite check + sampling); and plain
    sampling's per-token draw.  Every timed call is interleaved with the others
    (``timed_interleaved``).

    Args:
        verifier: a batched verifier (``engine.load_verifier``).
        p_rows, q_rows: float32 [≥ max(Ls) + 1, V] draft and target rows of consecutive
            positions (from the calibration text).
        backend: whose draws are timed (``Backend.draw``: the llama.cpp backend's inverse CDF,
            the torch backend's ``torch.multinomial``).
    Returns:
        ({(K, L): seconds}, seconds of one plain-sampling draw, how quiet the machine was).
    """
    gen = torch.Generator(device=p_rows.device).manual_seed(0)

    def draw(rows):
        backend.draw(sampleable(rows, finite_rows(rows)), gen)

    dev = p_rows.device
    seeds = torch.zeros(1, dtype=torch.int64, device=p_rows.device)
    fns = [lambda: draw(p_rows[:1])] + [lambda K=K: draw(p_rows[:1].expand(K, -1).contiguous()) for K in Ks]
    shapes = [(K, L) for K in Ks for L in Ls]
    for K, L in shapes:
        dp = p_rows[:L].unsqueeze(0).expand(K, -1, -1).contiguous()[None]
        tp = q_rows[: L + 1].unsqueeze(0).expand(K, -1, -1).contiguous()[None]
        tokens = dp[0].argmax(dim=-1)[None]
        fns.append(lambda tokens=tokens, dp=dp, tp=tp: verifier(tokens, dp, tp, seeds=seeds, validate=False))
    secs, quality = timed_interleaved(fns, repeats, dev)
    draw_s = dict(zip(Ks, secs[1:1 + len(Ks)]))
    out = {(K, L): v + L * draw_s[K] for (K, L), v in zip(shapes, secs[1 + len(Ks):])}
    return out, secs[0], quality


@torch.inference_mode()
def calibration_text(target, draft, prompt_ids: list[int], n_tokens: int = CALIBRATION_TOKENS,
                     seed: int = 0, eos_token_ids=(), backend: Backend = TORCH) -> list[int]:
    """The target's own continuation of ``prompt_ids``, up to ``n_tokens`` or its first EOS
    (kept), sampled at T = 0.7 whatever the user's setting (the text is cached per model pair;
    acceptance is then measured on it at the user's setting), with token verification K = 1,
    L = 4: lossless, so the text has the target's law at T = 0.7.  Returns the new tokens."""
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine

    engine = SpeculativeEngine(target, draft, rule="sd", K=1, L=4, sampling=SamplingConfig(0.7),
                               eos_token_ids=eos_token_ids, backend=backend)
    return engine.generate(prompt_ids, n_tokens, seed=seed).tokens


@torch.inference_mode()
def teacher_forced_rows(model, prompt_ids: list[int], continuation: list[int],
                        sampling: SamplingConfig, backend: Backend = TORCH) -> torch.Tensor:
    """float32 [n, V]: the model's processed row before each token of ``continuation``
    (``Backend.teacher_forced_rows``; default torch: a transformers causal LM)."""
    return backend.teacher_forced_rows(model, prompt_ids, continuation, sampling)


def acceptance_from_rows(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, K_max: int) -> tuple:
    """Per position: K-SEQ acceptance for k = 1..K_max drafts and p(x_t).

    Args:
        p, q: float [n, V] draft and target rows; tokens: int64 [n], the text's tokens.
    Returns:
        (beta float64 [n, K_max], match float64 [n]); beta[:, 0] = Σ min(p, q),
        beta[:, k − 1] = 1 − (1 − β(ρ*))^k with β(ρ) = Σ min(p, q/ρ) and ρ* K-SEQ's root for k
        candidates (docs/rules.md §2.2; = ρ*·β(ρ*) at the root).
    """
    from spectr_gbv.gpu_backend.verifiers.kseq import rho_star

    p64, q64 = p.double(), q.double()
    cols = [torch.minimum(p64, q64).sum(dim=1)]
    for k in range(2, K_max + 1):
        rho = rho_star(p, q, torch.full((p.shape[0],), k, dtype=torch.int64, device=p.device))
        # what K-SEQ accepts: some of k candidates, each accepted w.p. min(1, q/(ρ p))
        cols.append(1.0 - (1.0 - torch.minimum(p64, q64 / rho[:, None]).sum(dim=1)) ** k)
    beta = torch.stack(cols, dim=1).clamp(0.0, 1.0)
    match = p64.gather(1, tokens[:, None])[:, 0]
    return beta.cpu().numpy(), match.cpu().numpy()


def default_calibration_prompts(tokenizer, fallback: list[int]) -> list[list[int]]:
    """The built-in calibration prompts, chat-encoded; ``[fallback]`` when the prompt data
    package is not installed or there is no tokenizer."""
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts

    if tokenizer is None:
        return [list(fallback)]
    out = []
    for source, index in CALIBRATION_SOURCES:
        try:
            text = load_prompts(source, index + 1)[index]
        except (FileNotFoundError, IndexError, ValueError):
            continue
        out.append(encode_prompt(tokenizer, text))
    return out or [list(fallback)]


def configure(target, draft, tokenizer, spec: PairSpec, rule: str, sampling: SamplingConfig,
              Ks=K_CANDIDATES, Ls=L_CANDIDATES, fallback_prompt=(1, 2), margin: float = MARGIN,
              refresh: bool = False, threads: int | None = None, log=None, eos_token_ids=(),
              verifier=None, prompt_tokens: int | None = None, new_tokens: int | None = None,
              backend: Backend = TORCH) -> AutoConfig:
    """Measure (or read from the cache) what the choice needs, and choose K, L or plain sampling.

    Args:
        target, draft: the loaded models (same device); tokenizer: the target's.
        backend: the ``engine.backend.Backend`` running them (default torch; a pair's own is
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


__all__ = ["AutoConfig", "PairSpec", "configure", "forward_costs", "overhead_costs", "acceptance_from_rows",
           "teacher_forced_rows", "calibration_text",
           "K_CANDIDATES", "L_CANDIDATES"]
