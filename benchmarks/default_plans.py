"""Wall time of the public certifiers' default plans (benchmarks/DEFAULT_PLANS.md).

``certify_verifier(v, "sd", K=1, L=3)`` and ``certify_lossless(v, K=1, L=3)`` with every default
(N = 20,000 per case or pair, the real-vocabulary case and pairs at 5,000, the seed checks, the
input probes), and the same without the V ≥ 32,768 case and pairs (``families=`` / ``models=``
the others), for two verifiers of each: the API guide's numpy examples (examples/: a row-at-a-time
SD, and the vectorised "sampler match") and the batched torch SD (one thread).  R runs each,
interleaved; the median and the range are reported, with each case's or pair's median seconds,
the CPU's model name and vector flags from /proc/cpuinfo and the load average around the runs.

    python benchmarks/default_plans.py [--runs 3] [--out benchmarks/raw/default_plans.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16", "amx_tile",
         "amx_bf16", "amx_int8")


def cpu() -> dict:
    """The model name, the vector flags of ``FLAGS`` present, and the logical cores."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    return {"model": model, "flags": [f for f in FLAGS if f in flags], "cores": os.cpu_count(),
            "machine": platform.machine()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "raw" / "default_plans.json"))
    args = ap.parse_args(argv)

    import torch

    from spectr_gbv.gpu_backend.verifiers import get_verifier
    from spectr_gbv.oracle.certify_cases import FAMILIES
    from spectr_gbv.oracle.harness import certify_lossless, certify_verifier
    from spectr_gbv.oracle.lossless import VocabPair, default_pairs

    torch.set_num_threads(1)
    my_sd = runpy.run_path(str(ROOT / "examples" / "certify_your_verifier.py"))["my_sd"]
    sampler_match = runpy.run_path(str(ROOT / "examples" / "certify_lossless.py"))["sampler_match"]
    torch_sd = get_verifier("sd")
    small_families = tuple(f for f in FAMILIES if f != "vocab")
    small_pairs = [p for p in default_pairs() if not isinstance(p, VocabPair)]
    plans = {
        ("certify_verifier", "examples my_sd (numpy, row at a time)", "defaults"):
            lambda: certify_verifier(my_sd, "sd", K=1, L=3),
        ("certify_verifier", "examples my_sd (numpy, row at a time)", "without vocab"):
            lambda: certify_verifier(my_sd, "sd", K=1, L=3, families=small_families),
        ("certify_verifier", "torch sd (1 thread)", "defaults"): lambda: certify_verifier(torch_sd, "sd", K=1, L=3),
        ("certify_verifier", "torch sd (1 thread)", "without vocab"):
            lambda: certify_verifier(torch_sd, "sd", K=1, L=3, families=small_families),
        ("certify_lossless", "examples sampler_match (numpy, vectorised)", "defaults"):
            lambda: certify_lossless(sampler_match, K=1, L=3),
        ("certify_lossless", "examples sampler_match (numpy, vectorised)", "without vocab"):
            lambda: certify_lossless(sampler_match, K=1, L=3, models=small_pairs),
        ("certify_lossless", "torch sd (1 thread)", "defaults"): lambda: certify_lossless(torch_sd, K=1, L=3),
        ("certify_lossless", "torch sd (1 thread)", "without vocab"):
            lambda: certify_lossless(torch_sd, K=1, L=3, models=small_pairs),
    }
    times = {key: [] for key in plans}
    parts = {key: {} for key in plans}
    ok = {}
    load = [os.getloadavg()]
    for _ in range(args.runs):
        for key, run in plans.items():
            start = time.perf_counter()
            report = run()
            times[key].append(time.perf_counter() - start)
            ok[key] = report.ok
            for r in report.results:
                parts[key].setdefault(r.name, []).append(r.seconds)
            print(f"{key}: {times[key][-1]:.1f} s, ok {report.ok}", flush=True)
        load.append(os.getloadavg())
    rows = [{"entry point": k[0], "verifier": k[1], "plan": k[2], "median_s": statistics.median(v),
             "min_s": min(v), "max_s": max(v), "runs": len(v), "ok": ok[k],
             "parts_median_s": {name: statistics.median(s) for name, s in parts[k].items()}}
            for k, v in times.items()]
    out = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu(), "load_average_1_5_15": load, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
