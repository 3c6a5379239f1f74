"""Detection of the draw defects of a real vocabulary by the "large" and "vocab" families
(benchmarks/VOCAB_POWER.md): for each defect, the exact law of SD with that draw on the family's
case, then R multinomial samples of N outcomes from it, each tested by the two tests that resolve
a large law — the coarsened G-test (oracle.coarsen) and the identity test (oracle.identity) — at
the case's α/6 (α = 1e-6); "detected" when either rejects.  The defects: a float16 CDF, a 10^-4
floor on the correction, the top-20 truncation (tests/oracle/test_vocab_family.py computes the same
exact laws).  With no defect the rejections count the false alarms.

    python benchmarks/vocab_power.py [--reps R] [--out benchmarks/raw/vocab_power.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from spectr_gbv.oracle.certify import exact_verdict_law, family_size, outcome_tau
from spectr_gbv.oracle.certify_cases import VOCAB_SAMPLES, case_family, vocab_case
from spectr_gbv.oracle.coarsen import coarse_gtest
from spectr_gbv.oracle.identity import identity_test
from spectr_gbv.reference.exact import total_variation
from spectr_gbv.reference.rules import get_rule

FLOOR = 1e-4


def _normalised(row):
    return row / row.sum()


def float16_draw_law(row):
    """The law of an inverse-CDF draw whose CDF is accumulated in float16 and compared with a
    float64 uniform on [0, 1) (the index #{j: cdf16[j] ≤ u}, clipped to V − 1)."""
    cdf = np.cumsum(_normalised(row).astype(np.float16), dtype=np.float16).astype(np.float64)
    law = np.diff(np.concatenate([[0.0], np.minimum(cdf, 1.0)]))
    law[-1] += max(0.0, 1.0 - min(cdf[-1], 1.0))
    return np.clip(law, 0.0, None)


def floored(row):
    r = _normalised(row)
    cut = np.where(r >= FLOOR, r, 0.0)
    return cut / cut.sum() if cut.sum() > 0 else r


def top20(row):
    kth = np.sort(row)[-20] if row.size > 20 else 0.0
    return _normalised(np.where(row >= kth, row, 0.0))


def sd_law(case, correction=_normalised, bonus=_normalised) -> dict:
    """Exact law of SD on draft 0 of ``case`` with the given correction and bonus draws."""
    x, p, q = case.draft_tokens[0], case.draft_probs[0], case.target_probs[0]
    L = len(x)
    law, reach = {}, 1.0
    for i in range(L):
        a = min(1.0, q[i, x[i]] / p[i, x[i]])
        residual = np.maximum(q[i] - p[i], 0.0)
        w = correction(residual if residual.sum() > 0 else q[i])
        for t in np.flatnonzero(w > 0):
            law[(i, tuple(int(v) for v in x[:i]), int(t))] = reach * (1 - a) * w[t]
        reach *= a
    w = bonus(q[L])
    for t in np.flatnonzero(w > 0):
        law[(L, tuple(int(v) for v in x), int(t))] = reach * w[t]
    return law


DEFECTS = {"none": {}, "float16 CDF": dict(correction=float16_draw_law, bonus=float16_draw_law),
           "floor 1e-4": dict(correction=floored), "top-20": dict(correction=top20, bonus=top20)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", default="benchmarks/raw/vocab_power.json")
    args = ap.parse_args(argv)
    rows = []
    for family, make, N in (("large", lambda: case_family("large", "sd", 1, 3), 20_000),
                            ("vocab", lambda: vocab_case("sd", 1), VOCAB_SAMPLES)):
        case = make()
        exact = exact_verdict_law(get_rule("sd"), case.draft_tokens, case.draft_probs, case.target_probs)
        a = 1e-6 / family_size(exact)
        for name, kw in DEFECTS.items():
            law = sd_law(case, **kw) if kw else exact
            keys = list(law)
            probs = np.array([law[k] for k in keys])
            probs /= probs.sum()
            rng = np.random.default_rng(1)
            start = time.perf_counter()
            hits = 0
            for _ in range(args.reps):
                counts = rng.multinomial(N, probs)
                c = {keys[i]: int(counts[i]) for i in np.flatnonzero(counts)}
                hits += (not coarse_gtest(c, exact, a, group=outcome_tau).passed) or (not identity_test(c, exact, a).passed)
            row = dict(family=family, V=case.V, L=case.L, N=N, alpha_per_test=a, defect=name,
                       tv=total_variation(exact, law), detected=hits, reps=args.reps,
                       seconds=time.perf_counter() - start)
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.out, "w") as fh:
        json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
