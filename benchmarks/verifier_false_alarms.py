"""False alarms of ``certify_verifier``'s defaults on correct verifiers: every registered rule,
its numpy reference (``reference.rules.RULES``) and its batched torch verifier
(``gpu_backend.verifiers.get_verifier``), each certified against its own rule's exact law.

Each run is ``certify_verifier(v, rule, seed=s)`` at the defaults (every family with a case for
the rule, N = 20,000 per case, α = 10^-6 per case, the contract checks of
``oracle.harness.CONTRACT_CHECK_NAMES`` and the input probes).  A correct verifier fails a run
only by a law test's false alarm (at most α per case, about 12 cases: ~10^-5 a run) or a seed
check's coincidence (≤ 10^-12 each, oracle/seed_contract.py); any other failure is a defect of
the certifier (or of the verifier).  Prints one line per run (seconds, verdict, the failed
checks and cases) and the count of failures; stopping it (Ctrl-C) prints the count so far::

    python benchmarks/verifier_false_alarms.py --seeds 0 1 --backends reference torch

Dated figures go in benchmarks/CERTIFY.md.
"""

from __future__ import annotations

import argparse
import sys
import time


def _verifier(rule: str, backend: str):
    if backend == "torch":
        from spectr_gbv.gpu_backend.verifiers import get_verifier
        return get_verifier(rule)
    from spectr_gbv.reference.rules import RULES
    return RULES[rule]


def main(argv=None) -> int:
    from spectr_gbv.reference.rules import RULES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", nargs="+", default=list(RULES), help="registered rules (default: all)")
    parser.add_argument("--backends", nargs="+", choices=("reference", "torch"), default=["reference", "torch"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = parser.parse_args(argv)
    unknown = sorted(set(args.rules) - set(RULES))
    if unknown:
        parser.error(f"--rules: unknown {unknown}; known: {sorted(RULES)}")
    if "torch" in args.backends:
        import torch
        torch.set_num_threads(1)
    from spectr_gbv.oracle.harness import certify_verifier

    runs = failures = 0
    try:
        for seed in args.seeds:
            for backend in args.backends:
                for rule in args.rules:
                    start = time.perf_counter()
                    report = certify_verifier(_verifier(rule, backend), rule, seed=seed)
                    runs += 1
                    failed = ([c.name for c in report.seed_checks if not c.passed]
                              + [r.name for r in report.results if not r.ok]
                              + [p.name for p in getattr(report, "probes", ()) if not p.passed])
                    failures += not report.ok
                    print(f"seed {seed} {backend:9s} {rule:17s} {time.perf_counter() - start:7.1f} s  "
                          f"{'PASS' if report.ok else 'FAIL'}  {len(report.results)} cases"
                          + (f"  failed: {failed}" if failed else ""), flush=True)
    except KeyboardInterrupt:
        print("stopped: the count covers the finished runs", flush=True)
    print(f"{failures} of {runs} runs of correct verifiers failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
