"""The benchmark: autoregressive sampling, every verification rule, and transformers' assisted
generation on real models, with the paper's ablations (K, L, temperature).

Methods: ``ar`` (plain sampling, the speedup reference), the rules ``sd``, ``spectr``, ``bv``,
``gbv``, ``spectr_gbv`` (as released), ``kseq_gbv``, the non-modifying multi-draft rules
``kseq_bv`` and ``traversal`` (and any other verifier name, e.g. ``mdbv``, left out of the
default list because its host-side plan costs seconds per iteration at V = 151,936), and
``hf_assisted``.  Single-draft rules, ``ar`` and ``hf_assisted`` run at K = 1 only.

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
  (= mean τ / L), and the largest peak RSS;
- the speedup ratio is also given in CPU time (tokens per CPU second of the process, all
  threads), which other jobs on a shared machine disturb less than wall time.

``hf_assisted`` is counted by the same definitions (``gpu_backend.assisted``: one target call
per iteration, kept τ per iteration), so every column has one meaning for every method.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import torch

from reference.rules import registry

from .engine import (DEFAULT_K, DEFAULT_L, GenerationResult,
                     SpeculativeEngine, autoregressive_generate, eos_token_ids)
from .memory import reset_peak_rss
from .sampling import SamplingConfig



def default_methods() -> tuple[str, ...]:
    """The benchmark's default methods: our AR, every registered rule marked ``bench`` (the
    registry, in its order), and transformers' assisted generation."""
    return ("ar",) + registry.names(bench=True) + ("hf_assisted",)


def runs_at_K1(method: str) -> bool:
    """Methods that run at K = 1 whatever the K asked for: AR, assisted generation and the
    single-draft rules."""
    return method in ("ar", "hf_assisted") or (method in registry.names() and registry.is_single_draft(method))


def _color(method: str) -> str:
    """A stable matplotlib colour per method (its place in the default set)."""
    methods = default_methods()
    return f"C{methods.index(method) % 10 if method in methods else 9}"
SWEEPS = ("none", "K", "L", "T")
SWEEP_VALUES = {"K": (1, 2, 3, 4, 5, 6, 7), "L": tuple(range(2, 13)), "T": (0.1, 0.4, 0.7)}


@dataclass
class BenchConfig:
    """What to run.  Defaults: the Qwen2.5-Coder pair in bfloat16, HumanEval, 64 new tokens,
    T = 0.7, the engine's default K and L.

    Raises (``check``):
        ValueError: unknown method or sweep, K/L/prompts/max_new_tokens < 1, bad sampling values.
    """

    methods: tuple = field(default_factory=default_methods)
    dataset: str = "humaneval"
    prompts: int = 10
    max_new_tokens: int = 64
    K: int = DEFAULT_K
    L: int = DEFAULT_L
    temperature: float = 0.7
    top_k: int | None = None
    top_p: float | None = None
    sweeps: tuple = ("none",)
    K_values: tuple = SWEEP_VALUES["K"]
    L_values: tuple = SWEEP_VALUES["L"]
    T_values: tuple = SWEEP_VALUES["T"]
    target: str = "target"
    draft: str = "draft"
    dtype: str = "bfloat16"
    seed: int = 0
    chat: bool = True
    warmup: bool = True
    # settings that only a sweep asks for run on the first ``sweep_prompts`` prompts (None:
    # all); the main point always runs on every prompt
    sweep_prompts: int | None = None

    def check(self) -> None:
        from .engine import check_positive

        for name in ("prompts", "max_new_tokens", "K", "L"):
            check_positive(getattr(self, name), name)
        if self.sweep_prompts is not None:
            check_positive(self.sweep_prompts, "sweep_prompts")
        for k in self.K_values:
            check_positive(k, "K")
        for v in self.L_values:
            check_positive(v, "L")
        for t in (self.temperature, *self.T_values):
            SamplingConfig(t, self.top_k, self.top_p)
        bad = [s for s in self.sweeps if s not in SWEEPS]
        if bad:
            raise ValueError(f"sweep must be among {SWEEPS}, got {bad}")
        if "ar" not in self.methods:
            raise ValueError("methods must include 'ar' (the speedup ratio's reference)")

    def sampling(self, temperature: float) -> SamplingConfig:
        return SamplingConfig(temperature, self.top_k, self.top_p)


@dataclass(frozen=True)
class Setting:
    """One point to measure: a method with its K, L and temperature (AR: K = 1, L = 0)."""

    method: str
    K: int
    L: int
    temperature: float


def settings(config: BenchConfig) -> dict[Setting, set[str]]:
    """Every setting to run, with the sweeps it belongs to (shared points run once)."""
    out: dict[Setting, set[str]] = {}

    def add(method, K, L, T, sweep):
        if method == "ar":
            K, L = 1, 0
        elif runs_at_K1(method):
            K = 1
        out.setdefault(Setting(method, K, L, T), set()).add(sweep)

    for sweep in config.sweeps:
        if sweep == "none":
            for m in config.methods:
                add(m, config.K, config.L, config.temperature, sweep)
        elif sweep == "K":
            for k in config.K_values:
                for m in config.methods:
                    add(m, k, config.L, config.temperature, sweep)
        elif sweep == "L":
            for v in config.L_values:
                for m in config.methods:
                    add(m, config.K, v, config.temperature, sweep)
        elif sweep == "T":
            for t in config.T_values:
                for m in config.methods:
                    add(m, config.K, config.L, t, sweep)
    return out


@dataclass
class ModelPair:
    """Loaded target, draft, tokenizer, and the EOS ids (``engine.eos_token_ids``)."""

    target: object
    draft: object
    tokenizer: object
    eos: frozenset = field(default_factory=frozenset)
    description: str = ""


def load_pair(target: str = "target", draft: str = "draft", dtype: str = "bfloat16") -> ModelPair:
    """Load draft and target (``weights.load_causal_lm``) and check their vocabularies.

    Raises:
        ValueError: vocabulary mismatch (``weights.check_same_vocabulary``).
    """
    from .weights import MODEL_ALIASES, check_same_vocabulary, load_causal_lm

    t_model, tokenizer = load_causal_lm(target, dtype)
    d_model, _ = load_causal_lm(draft, dtype)
    check_same_vocabulary(d_model, t_model)
    return ModelPair(t_model, d_model, tokenizer, eos_token_ids(t_model, tokenizer),
                     f"target {MODEL_ALIASES.get(target, target)}, "
                     f"draft {MODEL_ALIASES.get(draft, draft)}, {dtype}")


def run_one(pair: ModelPair, setting: Setting, prompt_ids, config: BenchConfig, seed: int,
            max_new_tokens: int | None = None) -> GenerationResult:
    """One generation of ``setting`` on one prompt."""
    n = max_new_tokens or config.max_new_tokens
    sampling = config.sampling(setting.temperature)
    if setting.method == "ar":
        return autoregressive_generate(pair.target, prompt_ids, n, sampling, seed, pair.eos)
    if setting.method == "hf_assisted":
        from .assisted import assisted_generate

        return assisted_generate(pair.target, pair.draft, prompt_ids, n, sampling, setting.L,
                                 seed, pair.eos)
    engine = SpeculativeEngine(pair.target, pair.draft, rule=setting.method, K=setting.K,
                               L=setting.L, sampling=sampling, eos_token_ids=pair.eos)
    return engine.generate(prompt_ids, n, seed=seed)


def machine_description() -> str:
    """CPU model, cores, memory, torch threads, library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    import transformers

    return (f"{cpu}, {os.cpu_count()} cores{mem}; torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), transformers {transformers.__version__}")


@dataclass
class BenchResult:
    """Per-run records, per-setting summary rows, and metadata (see ``summarize``)."""

    config: BenchConfig
    runs: list
    rows: list
    meta: dict


def run_bench(config: BenchConfig, pair: ModelPair | None = None, prompt_ids=None,
              progress: bool = True) -> BenchResult:
    """Run every setting on every prompt (interleaved) and summarise.

    Args:
        config: what to run.
        pair: loaded models (default: ``load_pair`` of the config's names).
        prompt_ids: list of token-id lists (default: ``config.dataset`` encoded with the
            target's tokenizer, ``config.prompts`` of them).
        progress: show a tqdm progress bar on stderr.
    Returns:
        BenchResult.
    Raises:
        ValueError: invalid config.
    """
    from tqdm.auto import tqdm

    config.check()
    if pair is None:
        pair = load_pair(config.target, config.draft, config.dtype)
    if prompt_ids is None:
        from .prompts import encode_prompt, load_prompts

        texts = load_prompts(config.dataset, config.prompts)
        prompt_ids = [encode_prompt(pair.tokenizer, t, chat=config.chat) for t in texts]
    plan = settings(config)
    order = list(plan)
    started = datetime.now(timezone.utc)
    if config.warmup:
        seen = set()
        for s in tqdm(order, desc="warm-up", disable=not progress):
            key = (s.method, s.K, s.L)
            if key not in seen:
                seen.add(key)
                # a short prompt: the point is to touch every code path and shape once,
                # not to pay a long prompt's prefill per setting
                run_one(pair, s, prompt_ids[0][:16], config, config.seed,
                        max_new_tokens=max(s.L, 1) + 2)
    def active(p_idx: int) -> list[Setting]:
        if config.sweep_prompts is None or p_idx < config.sweep_prompts:
            return order
        return [s for s in order if "none" in plan[s]]

    runs = []
    bar = tqdm(total=sum(len(active(i)) for i in range(len(prompt_ids))), desc="bench",
               disable=not progress)
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
    bar.close()
    meta = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": (datetime.now(timezone.utc) - started).total_seconds(),
        "machine": machine_description(),
        "models": pair.description,
        "prompts": len(prompt_ids),
    }
    return BenchResult(config, runs, summarize(runs, plan, config), meta)


def _median(values) -> float:
    values = [v for v in values if v == v]  # drop NaN
    return float(statistics.median(values)) if values else float("nan")


def summarize(runs: list[dict], plan: dict[Setting, set[str]], config: BenchConfig) -> list[dict]:
    """One row per (setting, sweep): medians over prompts.

    Returns:
        list of dicts with method, dataset, K, L, temperature, sweep, block_efficiency,
        speedup_ratio, tokens_per_second, mean_accepted, acceptance_rate, peak_rss_gb,
        n_prompts, new_tokens (median), max_new_tokens, target/draft/dtype.
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
        base = {
            "method": s.method, "dataset": config.dataset, "K": s.K, "L": s.L,
            "temperature": s.temperature,
            "block_efficiency": _median(r["block_efficiency"] for r in mine),
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


# -- output ----------------------------------------------------------------------------------

def _fmt(x, digits=2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def markdown_table(rows: list[dict]) -> str:
    """The per-method table (one row per entry of ``rows``, in that order)."""
    lines = ["| method | K | L | T | block efficiency | speedup ratio vs AR | "
             "speedup ratio (CPU time) | tokens/s | mean τ | acceptance rate | peak RSS (GB) | "
             "prompts |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['K']} | {r['L'] if r['method'] != 'ar' else '–'} | "
            f"{r['temperature']} | {_fmt(r['block_efficiency'])} | {_fmt(r['speedup_ratio'])} | "
            f"{_fmt(r.get('speedup_ratio_cpu_time', float('nan')))} | "
            f"{_fmt(r['tokens_per_second'])} | {_fmt(r['mean_accepted'])} | "
            f"{_fmt(r['acceptance_rate'])} | {_fmt(r['peak_rss_gb'])} | {r['n_prompts']} |")
    return "\n".join(lines)


def _sweep_table(rows: list[dict], sweep: str) -> str:
    key = {"K": "K", "L": "L", "T": "temperature"}[sweep]
    mine = [r for r in rows if r["sweep"] == sweep and r["method"] != "ar"]  # AR: SR = 1
    xs = sorted({r[key] for r in mine})
    methods = [m for m in dict.fromkeys(r["method"] for r in mine)]
    head = f"| method | " + " | ".join(f"{key}={x}" for x in xs) + " |"
    lines = [head, "|---|" + "---|" * len(xs)]
    for m in methods:
        cells = []
        for x in xs:
            hit = [r for r in mine if r["method"] == m and r[key] == x]
            cells.append(f"{_fmt(hit[0]['block_efficiency'])} / {_fmt(hit[0]['speedup_ratio'])}"
                         if hit else "·")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_markdown(result: BenchResult, command: str = "") -> str:
    """Markdown report: settings, machine, the main table and one table per sweep."""
    c, meta = result.config, result.meta
    parts = [
        f"Command: `{command}`" if command else "",
        f"Date: {meta['date']} ({meta['seconds'] / 60:.0f} min).  Machine: {meta['machine']}.",
        f"Models: {meta['models']}.  Dataset: {c.dataset}, {meta['prompts']} prompts, "
        f"{c.max_new_tokens} new tokens, top-k {c.top_k or 'off'}, top-p {c.top_p or 'off'}.",
        "Medians over prompts; speedup ratio = tokens/s of the method / tokens/s of AR on the "
        "same prompt and temperature (the CPU-time variant divides by the process's CPU "
        "seconds instead of wall seconds); acceptance rate = mean τ / L.",
    ]
    main = [r for r in result.rows if r["sweep"] == "none"]
    if main:
        parts += ["", f"### K = {c.K}, L = {c.L}, T = {c.temperature}", "", markdown_table(main)]
    for sweep in ("K", "L", "T"):
        if any(r["sweep"] == sweep for r in result.rows):
            parts += ["", f"### Sweep over {sweep} (block efficiency / speedup ratio)", "",
                      _sweep_table(result.rows, sweep)]
    return "\n".join(p for p in parts if p is not None) + "\n"


def write_plots(rows: list[dict], folder: str) -> list[str]:
    """PNG plots of block efficiency and speedup ratio against K, L and temperature (one file
    per sweep present in ``rows``; matplotlib, Agg backend).

    Returns:
        the paths written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    written = []
    for sweep, key, label in (("K", "K", "K (drafts)"), ("L", "L", "L (block length)"),
                              ("T", "temperature", "temperature")):
        mine = [r for r in rows if r["sweep"] == sweep and r["method"] != "ar"]
        if not mine:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        xs_all = sorted({r[key] for r in mine})
        for m in dict.fromkeys(r["method"] for r in mine):
            pts = sorted((r[key], r["block_efficiency"], r["speedup_ratio"])
                         for r in mine if r["method"] == m)
            for ax, idx in ((axes[0], 1), (axes[1], 2)):
                if len(pts) == 1 and sweep == "K":  # a K = 1 method: a reference line
                    ax.axhline(pts[0][idx], linestyle="--", linewidth=1, label=m,
                               color=_color(m))
                else:
                    ax.plot([p[0] for p in pts], [p[idx] for p in pts], marker="o", label=m,
                            color=_color(m))
        axes[0].set_ylabel("block efficiency (tokens / target call)")
        axes[1].set_ylabel("speedup ratio vs autoregressive")
        axes[1].axhline(1.0, color="black", linewidth=0.8)
        for ax in axes:
            ax.set_xlabel(label)
            ax.set_xticks(xs_all)
            ax.grid(alpha=0.3)
        axes[1].legend(fontsize=8, loc="best")
        r0 = mine[0]
        fig.suptitle(f"{r0['dataset']}, {r0['max_new_tokens']} new tokens, medians over "
                     f"{r0['n_prompts']} prompts")
        fig.tight_layout()
        path = os.path.join(folder, f"sweep_{sweep}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def write_bar_plot(rows: list[dict], folder: str) -> str:
    """Bar chart of block efficiency and speedup ratio per method at the main point (rows of
    sweep "none"); returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    main = [r for r in rows if r["sweep"] == "none"]
    names = [f"{r['method']}\nK={r['K']}" if r["method"] != "ar" else "ar" for r in main]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "block_efficiency", "block efficiency (tokens / target call)"),
                           (axes[1], "speedup_ratio", "speedup ratio vs autoregressive")):
        colors = [_color(r["method"]) for r in main]
        ax.bar(range(len(main)), [r[key] for r in main], color=colors)
        ax.set_xticks(range(len(main)), names, fontsize=8, rotation=30, ha="right")
        ax.set_ylabel(label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.grid(axis="y", alpha=0.3)
    if main:
        r0 = main[0]
        fig.suptitle(f"{r0['dataset']}, L = {max(r['L'] for r in main)}, T = {r0['temperature']}, "
                     f"{r0['max_new_tokens']} new tokens, medians over {r0['n_prompts']} prompts")
    fig.tight_layout()
    path = os.path.join(folder, "methods.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
