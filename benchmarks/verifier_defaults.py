"""Wall time of ``certify_verifier(v, "sd")`` at its defaults, this tree beside another.

Issue 57 asks that the extended defaults (mixed batches, the contract checks inside the one
door) cost no more than 1.5x the run before them.  This script times the same call in child
processes, alternating the trees (A, B, A, B, ...) so that load on a shared machine falls on
both alike, and prints each run's seconds, the medians and their ratio::

    python benchmarks/verifier_defaults.py --baseline /tmp/base --runs 3

``--baseline`` is a checkout of the earlier tree (``git worktree add /tmp/base <commit>``); its
``spectr_gbv`` is imported by putting that checkout first on PYTHONPATH (the package's
``__init__`` then reads that checkout's folders).  ``--verifier`` picks the verifier:
"reference" (``reference.rules.RULES["sd"]``, numpy) or "torch"
(``gpu_backend.verifiers.get_verifier("sd")``, one torch thread).  Each child prints its
seconds and the report's verdict; a run that does not PASS is reported as such (a correct
verifier must pass).  Results are printed, not written: dated figures go in
benchmarks/CERTIFY.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import sys, time
verifier_kind = sys.argv[1]
if verifier_kind == "torch":
    import torch
    torch.set_num_threads(1)
    from spectr_gbv.gpu_backend.verifiers import get_verifier
    v = get_verifier("sd")
else:
    from spectr_gbv.reference.rules import RULES
    v = RULES["sd"]
from spectr_gbv.oracle.harness import certify_verifier
import spectr_gbv.oracle.harness as h
t0 = time.perf_counter()
report = certify_verifier(v, "sd")
print(f"RESULT {time.perf_counter() - t0:.2f} {'PASS' if report.ok else 'FAIL'} {h.__file__}")
"""


def _run(tree: str, verifier: str) -> tuple[float, str, str]:
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, verifier], cwd=tree, env=env,
                         capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            _, seconds, verdict, path = line.split(" ", 3)
            return float(seconds), verdict, path
    raise RuntimeError(f"the run in {tree} printed no result:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a checkout of the earlier tree")
    parser.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the tree to time (default: this checkout)")
    parser.add_argument("--runs", type=int, default=3, help="runs per tree (>= 1)")
    parser.add_argument("--verifier", choices=("reference", "torch"), default="reference")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    for tree in (args.baseline, args.tree):
        if not os.path.isfile(os.path.join(tree, "oracle", "harness.py")):
            parser.error(f"{tree!r} is not a spectr-gbv checkout (no oracle/harness.py)")
    times: dict[str, list[float]] = {"baseline": [], "tree": []}
    started = time.perf_counter()
    try:
        for i in range(args.runs):
            for label, tree in (("baseline", args.baseline), ("tree", args.tree)):
                seconds, verdict, path = _run(tree, args.verifier)
                times[label].append(seconds)
                print(f"run {i + 1} {label:8s} {seconds:8.1f} s  {verdict}  ({path})", flush=True)
    except KeyboardInterrupt:
        print("stopped: the medians below cover the finished runs", flush=True)
    for label, values in times.items():
        if values:
            print(f"{label:8s} median {statistics.median(values):8.1f} s over {len(values)} runs")
    if times["baseline"] and times["tree"]:
        ratio = statistics.median(times["tree"]) / statistics.median(times["baseline"])
        print(f"ratio tree / baseline: {ratio:.2f} (wall {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
