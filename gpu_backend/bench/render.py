"""The benchmark's output: markdown tables and matplotlib plots of ``bench_run.BenchResult``
rows (``bench_run.summarize``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from spectr_gbv.gpu_backend.bench.config import default_methods

if TYPE_CHECKING:
    from spectr_gbv.gpu_backend.bench.run import BenchResult


def _color(method: str) -> str:
    """A stable matplotlib colour per method (its place in the default set)."""
    methods = default_methods()
    return f"C{methods.index(method) % 10 if method in methods else 9}"


def _fmt(x, digits=2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def _name(row: dict) -> str:
    """The method's name, marked when the rule does not keep the target's law."""
    return row["method"] if row.get("lossless", True) else f"{row['method']} (lossy)"


def _prompt_counts(rows: list[dict]) -> str:
    """"8 prompts" or "3-8 prompts per point": the real counts behind the medians."""
    counts = sorted({r["n_prompts"] for r in rows})
    if not counts:
        return "0 prompts"
    return f"{counts[0]} prompts" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} prompts per point"


def _iqr(rows: list[dict], key: str):
    """Asymmetric error bars [2, n] (median − Q1, Q3 − median); None when no quartiles."""
    lo = [r[key] - r.get(f"{key}_q1", r[key]) for r in rows]
    hi = [r.get(f"{key}_q3", r[key]) - r[key] for r in rows]
    if all(v != v or v == 0 for v in lo + hi):
        return None
    return [[max(v, 0.0) if v == v else 0.0 for v in lo], [max(v, 0.0) if v == v else 0.0 for v in hi]]


def markdown_table(rows: list[dict]) -> str:
    """The per-method table (one row per entry of ``rows``, in that order)."""
    nan = float("nan")
    lines = ["| method | K | L | T | block efficiency | speedup ratio vs AR (Q1-Q3) | "
             "speedup ratio (CPU time) | tokens/s | time to first token s | decode tokens/s | "
             "mean τ | acceptance rate | peak RSS (GB) | prompts |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spread = (f" ({_fmt(r['speedup_ratio_q1'])}-{_fmt(r['speedup_ratio_q3'])})"
                  if "speedup_ratio_q1" in r else "")
        lines.append(
            f"| {_name(r)} | {r['K']} | {r['L'] if r['method'] != 'ar' else '–'} | "
            f"{r['temperature']} | {_fmt(r['block_efficiency'])} | {_fmt(r['speedup_ratio'])}{spread} | "
            f"{_fmt(r.get('speedup_ratio_cpu_time', nan))} | "
            f"{_fmt(r['tokens_per_second'])} | {_fmt(r.get('time_to_first_token_s', nan))} | "
            f"{_fmt(r.get('decode_tokens_per_second', nan))} | {_fmt(r['mean_accepted'])} | "
            f"{_fmt(r['acceptance_rate'])} | {_fmt(r['peak_rss_gb'])} | {r['n_prompts']} |")
    return "\n".join(lines)


def _sweep_table(rows: list[dict], sweep: str) -> str:
    key = {"K": "K", "L": "L", "T": "temperature"}[sweep]
    mine = [r for r in rows if r["sweep"] == sweep and r["method"] != "ar"]  # AR: SR = 1
    xs = sorted({r[key] for r in mine})
    methods = [m for m in dict.fromkeys(r["method"] for r in mine)]
    head = "| method | " + " | ".join(f"{key}={x}" for x in xs) + " |"
    lines = [head, "|---|" + "---|" * len(xs)]
    for m in methods:
        cells = []
        for x in xs:
            hit = [r for r in mine if r["method"] == m and r[key] == x]
            cells.append(f"{_fmt(hit[0]['block_efficiency'])} / {_fmt(hit[0]['speedup_ratio'])}"
                         if hit else "·")
        lossy = any(not r.get("lossless", True) for r in mine if r["method"] == m)
        lines.append(f"| {m}{' (lossy)' if lossy else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_markdown(result: BenchResult, command: str = "") -> str:
    """Markdown report: settings, machine, the main table and one table per sweep."""
    c, meta = result.config, result.meta
    parts = [
        f"Command: `{command}`" if command else "",
        f"Date: {meta['date']} ({meta['seconds'] / 60:.0f} min).  Machine: {meta['machine']}.",
        f"Models: {meta['models']}.  Dataset: {c.dataset}, {meta['prompts']} prompts, "
        f"{c.max_new_tokens} new tokens, top-k {c.top_k or 'off'}, top-p {c.top_p or 'off'}.",
        "Medians over prompts (Q1-Q3: the quartiles over prompts); speedup ratio = tokens/s of "
        "the method / tokens/s of AR on the same prompt and temperature (the CPU-time variant "
        "divides by the process's CPU seconds instead of wall seconds); acceptance rate = Σ τ / Σ drafted positions; "
        "decode tokens/s counts the tokens after the first iteration over the time after it; "
        "(lossy): a rule that does not keep the target's law, shown for reference only.",
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
            pts = sorted((r for r in mine if r["method"] == m), key=lambda r: r[key])
            lossy = not pts[0].get("lossless", True)
            style = {"label": _name(pts[0]), "color": _color(m)}
            for ax, metric in ((axes[0], "block_efficiency"), (axes[1], "speedup_ratio")):
                if len(pts) == 1 and sweep == "K":  # a K = 1 method: a reference line
                    ax.axhline(pts[0][metric], linestyle=":" if lossy else "--", linewidth=1, **style)
                else:
                    ax.errorbar([r[key] for r in pts], [r[metric] for r in pts], yerr=_iqr(pts, metric),
                                marker="x" if lossy else "o", linestyle=":" if lossy else "-", capsize=3,
                                **style)
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
                     f"{_prompt_counts(mine)} (bars: quartiles); dotted: lossy rules")
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
    names = [f"{_name(r)}\nK={r['K']}" if r["method"] != "ar" else "ar" for r in main]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "block_efficiency", "block efficiency (tokens / target call)"),
                           (axes[1], "speedup_ratio", "speedup ratio vs autoregressive")):
        colors = [_color(r["method"]) for r in main]
        bars = ax.bar(range(len(main)), [r[key] for r in main], color=colors, yerr=_iqr(main, key), capsize=3)
        for bar, r in zip(bars, main):
            if not r.get("lossless", True):
                bar.set_hatch("//")
        ax.set_xticks(range(len(main)), names, fontsize=8, rotation=30, ha="right")
        ax.set_ylabel(label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.grid(axis="y", alpha=0.3)
    if main:
        r0 = main[0]
        fig.suptitle(f"{r0['dataset']}, L = {max(r['L'] for r in main)}, T = {r0['temperature']}, "
                     f"{r0['max_new_tokens']} new tokens, medians over {_prompt_counts(main)} "
                     f"(bars: quartiles); hatched: lossy rules")
    fig.tight_layout()
    path = os.path.join(folder, "methods.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
