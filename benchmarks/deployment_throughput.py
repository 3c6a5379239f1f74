"""The deployment certifier's cost against the server's own: certification wall time divided by the
time the same server needs to generate the same samples alone.

Against a running server (``URL``), alternately ``--reps`` times:

* **generate alone**: the N sampling requests ``certify endpoint`` sends (same prompts, seeds,
  lengths; ``--concurrency`` C in flight), nothing else;
* **reference alone**: then only the reference requests for those samples (the server's prompt
  log-probabilities along each: the extra server work ``--reference self`` asks for);
* **certify**: ``certify endpoint URL --reference self`` at the same N and C (samples, the
  reference's prompt log-probabilities, replays, the tests), into a fresh run file.

Prints each pair's seconds, the medians and their ratio (the goal: ≤ 1.3), with the CPU's flags.

Run: ``python benchmarks/deployment_throughput.py http://127.0.0.1:8011 [--samples 60]
[--concurrency 8] [--reps 3]``; the numbers are recorded in benchmarks/DEPLOYMENT.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spectr_gbv.certify.endpoint.endpoint import EndpointRequest, certify_endpoint, prepare
from spectr_gbv.certify.endpoint.run import Plan, sample_seed


def cpu_flags() -> str:
    from spectr_gbv.gpu_backend.tuning.machine import describe_flags

    return describe_flags()


def generate_alone(url: str, plan: Plan) -> tuple[float, float]:
    """(seconds to sample the plan's N requests alone, seconds to then ask the reference — the
    server's prompt log-probabilities — for those samples alone), each with C in flight."""
    with tempfile.TemporaryDirectory() as tmp:
        prep = prepare(EndpointRequest(url=url, plan=plan, record=str(Path(tmp) / "x.jsonl")))
        prep.run_file.close()
    engine, prompts, reference = prep.engine, prep.prompts, prep.reference
    start = time.perf_counter()
    with ThreadPoolExecutor(plan.concurrency) as pool:
        samples = list(pool.map(lambda i: engine.sample(prompts[i % len(prompts)], plan.n_new,
                                                        sample_seed(plan.seed, i)), range(plan.n_samples)))
    alone = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(plan.concurrency) as pool:
        list(pool.map(lambda i: reference.rows(prompts[i % len(prompts)], samples[i].tokens), range(plan.n_samples)))
    return alone, time.perf_counter() - start


def certify(url: str, plan: Plan) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cert = certify_endpoint(EndpointRequest(url=url, plan=plan, record=str(Path(tmp) / "run.jsonl")))
        return time.perf_counter() - start, cert.verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print(cpu_flags())
    alone, refs, cert = [], [], []
    for rep in range(args.reps):
        plan = Plan(n_samples=args.samples, concurrency=args.concurrency, seed=100 + rep)
        a, r = generate_alone(args.url, plan)
        c, verdict = certify(args.url, plan)
        alone.append(a)
        refs.append(r)
        cert.append(c)
        print(f"rep {rep}: generate alone {a:.1f} s, its reference requests alone {r:.1f} s, certify {c:.1f} s "
              f"({verdict}), ratio {c / a:.2f}", flush=True)
    ma, mr, mc = statistics.median(alone), statistics.median(refs), statistics.median(cert)
    print(f"median: generate alone {ma:.1f} s, reference alone {mr:.1f} s, certify {mc:.1f} s, ratio {mc / ma:.2f}, "
          f"(generate + reference) / generate {(ma + mr) / ma:.2f} (N = {args.samples}, C = {args.concurrency})")


if __name__ == "__main__":
    main()
