"""One timing of a plan's harness, for a before/after comparison at equal families and verifier
(benchmarks/DEFAULT_PLANS.md, "Harness overhead"): run once with the checkout under test, once
with PYTHONPATH pointing at an older tree (``git archive <commit> | tar -x -C OLD``), alternately.

    PYTHONPATH=OLD python benchmarks/default_plans_ab.py before cv-my_sd --examples OLD/examples
    python benchmarks/default_plans_ab.py after cv-my_sd --examples OLD/examples

Plans: "cv-my_sd" (certify_verifier, the row-at-a-time example SD, the eleven families before
"vocab"), "cv-torch" (the same with the torch SD, one thread), "cl-sm" (certify_lossless, the
example "sampler match", the pairs of V ≤ 64).  The same example files for both runs (``--examples``:
the older tree's), so only the harness differs.  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import runpy
import time

FAMILIES = ("toy", "prefix", "large", "zeros", "disjoint", "equal", "coverage", "distinctive", "onehot", "branches",
            "deep")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which")
    ap.add_argument("plan", choices=("cv-my_sd", "cv-torch", "cl-sm"))
    ap.add_argument("--examples", required=True)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from spectr_gbv.gpu_backend.verifiers import get_verifier
    from spectr_gbv.oracle import harness
    from spectr_gbv.oracle.lossless import default_pairs

    start = time.perf_counter()
    if args.plan == "cv-my_sd":
        my_sd = runpy.run_path(f"{args.examples}/certify_your_verifier.py")["my_sd"]
        harness.certify_verifier(my_sd, "sd", K=1, L=3, families=FAMILIES)
    elif args.plan == "cv-torch":
        harness.certify_verifier(get_verifier("sd"), "sd", K=1, L=3, families=FAMILIES)
    else:
        sm = runpy.run_path(f"{args.examples}/certify_lossless.py")["sampler_match"]
        harness.certify_lossless(sm, K=1, L=3, models=[p for p in default_pairs() if p.V <= 64])
    print(json.dumps({"which": args.which, "plan": args.plan, "s": time.perf_counter() - start,
                      "harness": harness.__file__}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
