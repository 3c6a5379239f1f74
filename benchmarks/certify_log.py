"""``spectr-gbv certify log``: throughput (sampled tokens a second) and peak memory, on logs written
by tests/helpers/recorded_logs.py (the test chain, V = 64, requests of T 0.7–1.2 with top-p, top-k
and min-p mixed; vLLM's response shape with float32 log-probabilities and ``"token_id:N"`` keys).

Parts:

- ``throughput``: a log of ``--lines`` lines × 16 tokens, top-20 lists (the sampled token appended
  when outside, as vLLM sends them: ~12 KB a line), and the same with top-5 lists; for each, one
  process's CPU time per token (``time.process_time``: what a core gives, whatever else runs on the
  machine; the process set up as a worker is, ``allocator.keep_freed_memory``) and the command's wall time with ``--workers 1`` and ``--workers 2`` (wall depends on the
  machine's load: the load average is printed beside it).
- ``memory``: a log of ``--big`` lines (default 10^6) × 4 tokens with top-5 lists (~1.2 KB a line,
  every line sampled afresh), certified by the command with ``--workers 2`` under
  ``/usr/bin/time -v``: its peak RSS (the largest process of the tree: the main process or a
  worker), wall time and the CPU time of all its processes.

Every figure is printed as a Markdown table row; the CPU is named from /proc/cpuinfo.

    .venv/bin/python benchmarks/certify_log.py [--parts throughput memory] [--lines 20000] [--big 1000000]

Progress on stderr; the last line is ``certify log benchmark: done``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def cpu_name() -> str:
    text = Path("/proc/cpuinfo").read_text()
    name = re.search(r"model name\s*:\s*(.*)", text)
    flags = re.search(r"flags\s*:\s*(.*)", text)
    f = set(flags.group(1).split()) if flags else set()
    return (f"{name.group(1).strip() if name else '?'}, {os.cpu_count()} cores, "
            + "/".join(x for x in ("avx2", "avx512f", "amx_bf16", "amx_tile") if x in f))


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cpu_throughput(path: str) -> tuple[int, float]:
    """(positions, positions per CPU second) of one process tallying the file."""
    from spectr_gbv.certify.log.allocator import keep_freed_memory
    from spectr_gbv.certify.log.run import CHUNK_LINES, LogPlan, tally_lines

    keep_freed_memory()  # as every process that runs chunks does
    plan = LogPlan(vocab=64)
    lines, positions = [], 0
    t0 = time.process_time()
    total = None
    with open(path, "rb") as f:
        for no, text in enumerate(f):
            lines.append((no, text))
            if len(lines) == CHUNK_LINES:
                t = tally_lines(lines, plan)
                total = t if total is None else total.merge(t)
                lines = []
    if lines:
        t = tally_lines(lines, plan)
        total = t if total is None else total.merge(t)
    cpu = time.process_time() - t0
    positions = total.counts["records"] + sum(total.skipped_positions.values())
    return positions, positions / cpu


def command(path: str, workers: int) -> tuple[float, str, int, float]:
    """(wall s, the report's first line, peak RSS KiB of the largest process (time's, and each
    worker's own: the JSON's ``peak_rss_kib``), CPU s of all its processes) of ``certify log`` on the file, under ``/usr/bin/time -v``: the main process's and
    the forkserver's user + system time (time's own account) plus the workers' (the JSON's
    ``chunk_cpu_s``: forkserver workers are not the command's waited-for children)."""
    js = path + ".cert.json"
    cmd = ["/usr/bin/time", "-v", str(ROOT / ".venv" / "bin" / "spectr-gbv"), "certify", "log", path, "--vocab", "64",
           "--workers", str(workers), "--json", js]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if not out.stdout:
        raise RuntimeError(f"certify log gave no report: {out.stderr[-2000:]}")

    def field(name):
        return float(re.search(name + r": ([\d.]+)", out.stderr).group(1))

    cpu = field(r"User time \(seconds\)") + field(r"System time \(seconds\)")
    rss = int(field(r"Maximum resident set size \(kbytes\)"))
    if workers > 1:
        import json

        with open(js) as f:
            cert = json.load(f)
        cpu += cert["chunk_cpu_s"]
        rss = max(rss, int(cert["peak_rss_kib"]))  # each worker's own peak, as it measured it
    return wall, out.stdout.splitlines()[0], rss, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["throughput", "memory"], choices=["throughput", "memory"])
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--big", type=int, default=1_000_000)
    args = ap.parse_args()
    from helpers.recorded_logs import make_log

    try:
        import msgspec

        decoder = f"msgspec {msgspec.__version__}"
    except ImportError:
        decoder = "json (msgspec not installed)"
    print(f"CPU: {cpu_name()}; load average at start {os.getloadavg()[0]:.1f}; JSON decoder: {decoder}")
    with tempfile.TemporaryDirectory() as d:
        if "throughput" in args.parts:
            print("\n| log | lines | positions | per CPU second (1 process, tally only) "
                  "| per CPU second of the command "
                  "(--workers 2, all processes) | wall, --workers 1 | wall, --workers 2 | load avg | verdict |"
                  "\n|---|---|---|---|---|---|---|---|---|")
            for k in (20, 5):
                p = os.path.join(d, f"top{k}.jsonl")
                say(f"writing {args.lines} lines, top-{k} ...")
                make_log(p, args.lines, k=k, seed=1)
                n, per_cpu = cpu_throughput(p)
                w1, v1, _, _ = command(p, 1)
                w2, v2, _, cpu2 = command(p, 2)
                size = os.path.getsize(p) / args.lines / 1024
                print(f"| 16 tokens, top-{k} ({size:.1f} KiB/line) | {args.lines} | {n} | {per_cpu:,.0f} tokens/s | "
                      f"{n / cpu2:,.0f} tokens/s | {n / w1:,.0f} tokens/s ({w1:.1f} s) | {n / w2:,.0f} tokens/s "
                      f"({w2:.1f} s) | {os.getloadavg()[0]:.1f} | {v2.split(' — ')[0].removeprefix('verdict: ')} |", flush=True)
        if "memory" in args.parts:
            big = os.path.join(d, "big.jsonl")
            say(f"writing {args.big} lines (about 2 min a million) ...")
            make_log(big, args.big, n_new=4, k=5, seed=2)
            size = os.path.getsize(big)
            say("certifying it (--workers 2, under /usr/bin/time -v) ...")
            wall, verdict, rss, cpu = command(big, 2)
            print("\n| log | size | wall, --workers 2 | tokens/s (wall) | tokens per CPU second (all processes) | "
                  "peak RSS (largest process) | load avg | verdict |\n|---|---|---|---|---|---|---|---|")
            print(f"| {args.big} lines × 4 tokens, top-5 | {size / 2**30:.2f} GiB | {wall:.0f} s | "
                  f"{4 * args.big / wall:,.0f} | {4 * args.big / cpu:,.0f} | {rss / 1024:.0f} MiB | "
                  f"{os.getloadavg()[0]:.1f} | {verdict.split(' — ')[0].removeprefix('verdict: ')} |", flush=True)
    say("certify log benchmark: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
