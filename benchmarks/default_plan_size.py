"""False-alarm rate of ``certify endpoint``'s default plan on exact samples, at its default α.

The deployment certificate's default plan (N = 80 samples × 16 tokens, α = 10^-3 for the family,
η = 10^-3, the reference's top 20 per position with an "other" cell, as ``--reference self``
gives) run on samples drawn exactly from a synthetic model: the order-1 Markov chain of
``oracle.sequence_simulation`` (V = 512, row entropies 2–4 nats; prompts: 8 one-token prompts,
sample i continues prompt i mod 8).  Each run draws fresh samples, builds the top-20 records
(``records_from_top``) and runs ``oracle.sequence_family.family_test``; the output is the runs
rejected, with a 95 % Clopper–Pearson interval, and which tests fired.

Run: ``python benchmarks/default_plan_size.py [--runs 2000]`` (about 0.25 s a run on one core);
appends one JSON line to benchmarks/raw/default_plan_size.jsonl and prints it.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.sequence_family import family_test
from spectr_gbv.oracle.sequence_records import records_from_top
from spectr_gbv.oracle.sequence_simulation import MarkovChain, sample_many

N, N_NEW, K, ALPHA, ETA, PROMPTS = 80, 16, 20, 1e-3, 1e-3, 8


def one_run(chain: MarkovChain, rng: np.random.Generator, run: int) -> tuple[bool, list[str]]:
    first = np.arange(N) % PROMPTS
    X = sample_many(chain, first, N_NEW, rng)
    logp = np.log(chain.probs)
    samples = []
    for f, toks in zip(first, X):
        prev = np.concatenate(([f], toks[:-1]))
        top = np.argsort(-chain.probs[prev], axis=1, kind="stable")[:, :K]
        samples.append(records_from_top(toks, top.tolist(), np.take_along_axis(logp[prev], top, 1).tolist(),
                                        logp[prev, toks].tolist()))
    res = family_test(samples, ALPHA, ETA, seed=run)
    fired = [d.name for d in res.directional if not d.passed] + (
        ["omnibus"] if not all(r.passed for r in res.rows) else [])
    return not res.passed, fired


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    args = ap.parse_args()
    chain, rng = MarkovChain(512, seed=0), np.random.default_rng(31)
    started, rejected, fired = time.time(), 0, {}
    for run in range(args.runs):
        bad, names = one_run(chain, rng, run)
        rejected += bad
        for n in names:
            fired[n] = fired.get(n, 0) + 1
        if (run + 1) % 200 == 0:
            print(f"{time.time() - started:6.0f}s {run + 1}/{args.runs} runs, {rejected} rejected", flush=True)
    lo = sps.beta.ppf(0.025, rejected, args.runs - rejected + 1) if rejected else 0.0
    hi = sps.beta.ppf(0.975, rejected + 1, args.runs - rejected) if rejected < args.runs else 1.0
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "plan": f"{N} x {N_NEW}", "k": K,
           "alpha": ALPHA, "eta": ETA, "runs": args.runs, "rejected": rejected, "ci95": [float(lo), float(hi)],
           "fired": fired, "seconds": round(time.time() - started, 1)}
    raw = Path(__file__).resolve().parent / "raw" / "default_plan_size.jsonl"
    with raw.open("a") as fh:
        fh.write(json.dumps(out) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
