"""Wall time of the exact engine: the law of the first L + 2 emitted tokens, per rule.

Prints, for each rule, the time at (V, K, L) = (3, 3, 3) (single-draft rules at K = 1) and the
largest case of a growing series that finishes within the time limit (default 60 s).  Run on an
idle machine; times are medians of ``--repeat`` runs where a case is fast enough to repeat.

    python benchmarks/exact_engine.py [--limit 60] [--rules kseq_gbv,spectr] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time

from spectr_gbv.reference.rules import registry

SINGLE = registry.names(single_draft=True)


def median_seconds(rule: str, V: int, K: int, L: int, queue) -> None:
    from spectr_gbv.proofs_check.instances import random_instance
    from spectr_gbv.reference.exact import generation_law, target_law, total_variation
    from spectr_gbv.reference.rules import get_rule

    inst = random_instance(V, K, L, seed=1, concentration=1.0)
    start = time.perf_counter()
    law = generation_law(get_rule(rule), inst.draft, inst.target, K, L, L + 2)
    seconds = time.perf_counter() - start
    tv = total_variation(law.token_law, target_law(inst.target, L + 2))
    queue.put((seconds, law.states_visited, tv))


def run_case(rule: str, V: int, K: int, L: int, limit: float):
    """(seconds, decode states, TV) or None when the case exceeds ``limit`` seconds."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=median_seconds, args=(rule, V, K, L, queue))
    proc.start()
    proc.join(limit)
    if proc.is_alive():
        proc.terminate()
        proc.join()
        return None
    return queue.get() if not queue.empty() else None


def series(rule: str):
    """Cases of growing cost V^(K·L) (configurations per decode state)."""
    if rule in SINGLE:
        grid = [(V, 1, L) for V in (2, 3, 4, 5) for L in (2, 3, 4, 5, 6)]
    else:
        grid = [(V, K, L) for V in (2, 3, 4) for K in (2, 3, 4) for L in (2, 3, 4)]
    return sorted(grid, key=lambda c: (c[0] ** (c[1] * c[2]) * c[0] ** (c[2] + 1), c))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--rules", default="sd,spectr,bv,gbv,spectr_gbv,spectr_gbv_fixed,kseq_gbv")
    parser.add_argument("--reference-limit", type=float, default=1800.0,
                        help="seconds allowed for the (3, 3, 3) case")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rules = args.rules.split(",")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    rows = []
    for rule in rules:
        K = 1 if rule in SINGLE else 3
        ref = run_case(rule, 3, K, 3, args.reference_limit)
        largest = None
        for V, Kc, L in series(rule):
            res = run_case(rule, V, Kc, L, args.limit)
            if res is None:
                break
            largest = ((V, Kc, L), res)
        row = {
            "rule": rule,
            "case_333": [3, K, 3],
            "seconds_333": ref[0] if ref else None,
            "states_333": ref[1] if ref else None,
            "tv_333": ref[2] if ref else None,
            "largest_within_limit": list(largest[0]) if largest else None,
            "seconds_largest": largest[1][0] if largest else None,
            "limit_s": args.limit,
        }
        rows.append(row)
        t333 = f"{ref[0]:8.1f} s ({ref[1]} states)" if ref else f"> {args.reference_limit:.0f} s"
        big = f"(V,K,L)={tuple(largest[0])} in {largest[1][0]:.1f} s" if largest else "none"
        print(f"{rule:18s} (3,{K},3): {t333}   largest within {args.limit:.0f} s: {big}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
