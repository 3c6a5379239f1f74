"""The benchmark's run loop: autoregressive sampling, every verification rule, and
transformers' assisted generation on real models, with the paper's ablations (K, L,
temperature).  The methods and settings: ``gpu_backend.bench.config``; the tables and plots:
``gpu_backend.bench.render``; the models: ``gpu_backend.models.pair``.

Measurement protocol (the machine is shared, so absolute times drift):
- a warm-up generation of every (method, K, L) before timing;
- per prompt, every setting runs once, in an order shuffled per prompt, so that load changes
  hit all methods alike;
- per prompt, the **speedup ratio** of a method is its tokens/s divided by the tokens/s of
  ``ar`` at the same temperature on the same prompt (= wall-time ratio AR / method when both
  emit the same number of tokens; the token counts can differ when a sampled EOS ends a run
  early);
- reported numbers are **medians over prompts**: block efficiency (tokens / target calls),
  speedup ratio, tokens/s, mean τ (draft tokens kept in the output per target call, after
  truncation at EOS / max_new_tokens: ``engine.GenerationResult.taus``), acceptance rate
  (Σ τ / Σ drafted positions: mean τ / L when no block was cut short, the last blocks being
  capped at the tokens still needed), and the largest peak RSS;
- the speedup ratio is also given in CPU time (tokens per CPU second of the process, all
  threads), which other jobs on a shared machine disturb less than wall time.

``hf_assisted`` is counted by the same definitions (``gpu_backend.bench.assisted``: one target call
per iteration, kept τ per iteration), so every column has one meaning for every method.
"""

from __future__ import annotations

import os
import random
import statistics
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import torch

from spectr_gbv.gpu_backend.bench.config import BenchConfig, Setting, settings
from spectr_gbv.gpu_backend.engine.result import GenerationResult
from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate
from spectr_gbv.gpu_backend.engine.memory import reset_peak_rss
from spectr_gbv.gpu_backend.models.pair import ModelPair


def run_one(pair: ModelPair, setting: Setting, prompt_ids, config: BenchConfig, seed: int,
            max_new_tokens: int | None = None) -> GenerationResult:
    """One generation of ``setting`` on one prompt."""
    n = max_new_tokens or config.max_new_tokens
    sampling = config.sampling(setting.temperature)
    if setting.method == "ar":
        return autoregressive_generate(pair.target, prompt_ids, n, sampling, seed, pair.eos,
                                       backend=pair.backend)
    if setting.method == "hf_assisted":
        from spectr_gbv.gpu_backend.bench.assisted import assisted_generate

        return assisted_generate(pair.target, pair.draft, prompt_ids, n, sampling, setting.L,
                                 seed, pair.eos)
    engine = SpeculativeEngine(pair.target, pair.draft, rule=setting.method, K=setting.K,
                               L=setting.L, sampling=sampling, eos_token_ids=pair.eos,
                               backend=pair.backend)
    return engine.generate(prompt_ids, n, seed=seed)


def machine_description() -> str:
    """CPU model, cores, memory, torch threads, library versions, and the CPU flags that decide
    bfloat16 and int8 speed (``machine.describe_flags``)."""
    from spectr_gbv.gpu_backend.tuning.machine import cpu_model, describe_flags

    cpu = cpu_model()
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    import transformers

    return (f"{cpu}, {os.cpu_count()} cores{mem}; torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), transformers {transformers.__version__}; "
            f"{describe_flags()}")


@dataclass
class BenchResult:
    """Per-run records, per-setting summary rows, and metadata (see ``summarize``)."""

    config: BenchConfig
    runs: list
    rows: list
    meta: dict


def _warm_up(pair: ModelPair, order: list[Setting], prompt_ids, config: BenchConfig,
             progress: bool) -> None:
    """One short generation per (method, K, L), before anything is timed."""
    from tqdm.auto import tqdm

    seen = set()
    for s in tqdm(order, desc="warm-up", disable=not progress):
        key = (s.method, s.K, s.L)
        if key not in seen:
            seen.add(key)
            # a short prompt: the point is to touch every code path and shape once,
            # not to pay a long prompt's prefill per setting
            run_one(pair, s, prompt_ids[0][:16], config, config.seed,
                    max_new_tokens=max(s.L, 1) + 2)


def run_bench(config: BenchConfig, pair: ModelPair | None = None, prompt_ids=None,
              progress: bool = True, log=None) -> BenchResult:
    """Run every setting on every prompt (interleaved) and summarise.

    Args:
        config: what to run.
        pair: loaded models (default: ``model_pair.load_pair`` of the config's names).
        prompt_ids: list of token-id lists (default: ``config.dataset`` encoded with the
            target's tokenizer, ``config.prompts`` of them).
        progress: show a tqdm progress bar on stderr.
        log: None, or called with one line per finished run (for logs, where a bar is not
            shown).
    Returns:
        BenchResult.
    Raises:
        ValueError: invalid config; draft and target that do not fit together
            (``model_pair.load_pair``, when ``pair`` is None).
        ModelLoadError: a model cannot be loaded (``model_pair.load_pair``).
    """
    from tqdm.auto import tqdm

    config.check()
    if pair is None:
        from spectr_gbv.gpu_backend.models.pair import load_pair

        pair = load_pair(config.target, config.draft, config.dtype)
    if prompt_ids is None:
        from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts

        texts = load_prompts(config.dataset, config.prompts)
        prompt_ids = [encode_prompt(pair.tokenizer, t, chat=config.chat) for t in texts]
    plan = settings(config)
    order = list(plan)
    started = datetime.now(timezone.utc)
    if config.warmup:
        if log is not None:
            log("warm-up")
        _warm_up(pair, order, prompt_ids, config, progress)

    def active(p_idx: int) -> list[Setting]:
        if config.sweep_prompts is None or p_idx < config.sweep_prompts:
            return order
        return [s for s in order if "none" in plan[s]]

    runs = []
    total = sum(len(active(i)) for i in range(len(prompt_ids)))
    bar = tqdm(total=total, desc="bench", disable=not progress)
    for p_idx, ids in enumerate(prompt_ids):
        random.Random(config.seed * 1_000_003 + p_idx).shuffle(order)
        for s in active(p_idx):
            bar.set_postfix_str(f"prompt {p_idx} {s.method} K={s.K} L={s.L} T={s.temperature}")
            reset_peak_rss()
            result = run_one(pair, s, ids, config, config.seed + p_idx)
            record = {"prompt": p_idx, **asdict(s), **result.metrics()}
            record["method"] = s.method
            runs.append(record)
            bar.update(1)
            if log is not None:
                log(f"{len(runs)}/{total} runs: prompt {p_idx} {s.method} K={s.K} L={s.L} "
                    f"T={s.temperature}")
    bar.close()
    meta = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": (datetime.now(timezone.utc) - started).total_seconds(),
        "machine": machine_description(),
        "models": pair.description,
        "prompts": len(prompt_ids),
    }
    return BenchResult(config, runs, summarize(runs, plan, config), meta)


def _quartile(values, q: float) -> float:
    """The q-th percentile (numpy's linear interpolation); NaN for no values."""
    import numpy as np

    values = [v for v in values if v == v]  # NaN-free, as _median
    return float(np.percentile(values, q)) if values else float("nan")


def _lossless(method: str) -> bool:
    """Whether the method keeps the target's law ("ar" and unknown names: True)."""
    from spectr_gbv.reference.rules import registry

    return registry.spec(method).lossless if method in registry.names() else True


def _median(values) -> float:
    values = [v for v in values if v == v]  # drop NaN
    return float(statistics.median(values)) if values else float("nan")


def summarize(runs: list[dict], plan: dict[Setting, set[str]], config: BenchConfig) -> list[dict]:
    """One row per (setting, sweep): medians over prompts.

    Returns:
        list of dicts with method, dataset, K, L, temperature, sweep, lossless (registry),
        block_efficiency and speedup_ratio (medians, with their first and third quartiles
        ``*_q1``/``*_q3``), tokens_per_second, time_to_first_token_s, decode_tokens_per_second,
        mean_accepted, acceptance_rate, peak_rss_gb, n_prompts, new_tokens (median),
        max_new_tokens, target/draft/dtype.
    """
    ar_tps = {(r["prompt"], r["temperature"]): r["tokens_per_second"]
              for r in runs if r["method"] == "ar"}
    ar_cpu = {(r["prompt"], r["temperature"]): r["new_tokens"] / r["cpu_time_s"]
              for r in runs if r["method"] == "ar"}
    rows = []
    for s, sweeps in plan.items():
        mine = [r for r in runs if (r["method"], r["K"], r["L"], r["temperature"]) ==
                (s.method, s.K, s.L, s.temperature)]
        if not mine:
            continue
        ratios = [r["tokens_per_second"] / ar_tps[(r["prompt"], r["temperature"])]
                  for r in mine if (r["prompt"], r["temperature"]) in ar_tps]
        cpu_ratios = [r["new_tokens"] / r["cpu_time_s"] / ar_cpu[(r["prompt"], r["temperature"])]
                      for r in mine if (r["prompt"], r["temperature"]) in ar_cpu]
        effs = [r["block_efficiency"] for r in mine]
        base = {
            "method": s.method, "dataset": config.dataset, "K": s.K, "L": s.L,
            "temperature": s.temperature, "lossless": _lossless(s.method),
            "block_efficiency": _median(effs),
            "block_efficiency_q1": _quartile(effs, 25), "block_efficiency_q3": _quartile(effs, 75),
            "speedup_ratio_q1": _quartile(ratios, 25), "speedup_ratio_q3": _quartile(ratios, 75),
            "time_to_first_token_s": _median(r.get("time_to_first_token_s", float("nan")) for r in mine),
            "decode_tokens_per_second": _median(r.get("decode_tokens_per_second", float("nan")) for r in mine),
            # all prompts' tokens over all their target calls: less noisy than the median
            "block_efficiency_pooled": (sum(r["new_tokens"] for r in mine)
                                        / sum(r["target_calls"] for r in mine)),
            "speedup_ratio": _median(ratios),
            "speedup_ratio_cpu_time": _median(cpu_ratios),
            "tokens_per_second": _median(r["tokens_per_second"] for r in mine),
            "mean_accepted": _median(r["mean_accepted"] for r in mine),
            "acceptance_rate": _median(r["acceptance_rate"] for r in mine),
            "peak_rss_gb": max(r["peak_rss_bytes"] for r in mine) / 1e9,
            "new_tokens": _median(r["new_tokens"] for r in mine),
            "n_prompts": len(mine), "max_new_tokens": config.max_new_tokens,
            "target": config.target, "draft": config.draft, "dtype": config.dtype,
        }
        for sweep in sorted(sweeps):
            rows.append({**base, "sweep": sweep})
    return rows
