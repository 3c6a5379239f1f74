"""Requests and wall time of ``certify endpoint --reference reported`` (with its audit) against
``--reference self`` and against the same samples generated alone, on the loopback fake server
(tests/helpers/fake_deployment.py; issue 58 item 1).

    .venv/bin/python benchmarks/reported_requests.py [--repeats 3] [--serial-s 0.01] [--out FILE]
    .venv/bin/python benchmarks/reported_requests.py --verdicts 20 [--out FILE]

Two servers: ``serial_s = 0`` (every request answered at once: the wall time is this client's and
the tests' own cost) and ``serial_s > 0`` (one request computed at a time, each taking
``serial_s`` seconds, prefill and sampling alike: a server whose accelerator is the bottleneck;
a real prefill of n tokens costs less than decoding them, so this overstates ``self``'s second
pass).  For each: ``self``, ``reported`` (audit 0.1, at least 8), ``reported --audit 0`` and
"alone" (the 80 sampling requests of ``reported`` sent by a bare thread pool at the same
concurrency, nothing tested), fixed plans of 80 samples × 16 tokens, every run on a fresh server.
vLLM is not measured here (no vLLM environment on this machine).  ``--verdicts R``: instead,
R runs (seeds 0..R−1, fixed 80 samples, audit 0.1) of ``reported`` against the correct server, the
tempered-as-raw one and the one reporting draft tokens at log-prob 0: how often each FAILs and by
which member.  Prints progress lines and a
markdown table; ``--out`` also writes the raw numbers as JSON.  Ends with a verdict line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spectr_gbv.certify.endpoint.endpoint import EndpointRequest, certify_endpoint  # noqa: E402
from spectr_gbv.certify.endpoint.prompts import DEFAULT_PROMPTS  # noqa: E402
from spectr_gbv.certify.endpoint.run import Plan, sample_seed  # noqa: E402
from spectr_gbv.certify.endpoint.servers import dialect  # noqa: E402
from tests.helpers.fake_deployment import serve  # noqa: E402

N, N_NEW, C = 80, 16, 8


def certify(mode: str, serial_s: float) -> dict:
    ref = "self" if mode == "self" else "reported"
    plan = Plan(n_samples=N, n_new=N_NEW, sequential=False, replays=0, concurrency=C, reported=ref == "reported",
                audit=0.0 if mode == "reported-no-audit" else 0.1)
    with tempfile.TemporaryDirectory() as d, serve(serial_s=serial_s) as (url, state):
        t = time.perf_counter()
        cert = certify_endpoint(EndpointRequest(url, reference=ref, plan=plan, record=f"{d}/r.jsonl"))
        wall = time.perf_counter() - t
        return {"mode": mode, "verdict": cert.verdict, "requests": state.requests, "wall_s": wall,
                "audited": cert.audit.samples if cert.audit else 0}


def alone(serial_s: float) -> dict:
    """The same 80 sampling requests (logprobs 20, as ``reported`` sends them), nothing else."""
    dia = dialect("openai")
    with serve(serial_s=serial_s) as (url, state):
        prompts = []
        for p in DEFAULT_PROMPTS:
            path, body = dia.tokenize_request("fake-chain", p)
            prompts.append(_post(url + path, body)["tokens"])
        before = state.requests

        def one(i):
            _, body = dia.sample_request("fake-chain", prompts[i % len(prompts)], N_NEW, sample_seed(0, i), 1.0,
                                         20, 1.0, 0, 0.0)
            return _post(url + "/v1/completions", body)

        t = time.perf_counter()
        with ThreadPoolExecutor(C) as pool:
            list(pool.map(one, range(N)))
        return {"mode": "alone", "verdict": "-", "requests": state.requests - before,
                "wall_s": time.perf_counter() - t, "audited": 0}


def _post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def run_verdicts(runs: int, out: str | None) -> int:
    from spectr_gbv.certify.endpoint.report import decided_by

    rows = []
    for defect in (None, "temperature-0.9-reported", "zero-logprobs"):
        for seed in range(runs):
            plan = Plan(n_samples=N, n_new=N_NEW, sequential=False, replays=0, concurrency=C, reported=True,
                        seed=seed)
            with tempfile.TemporaryDirectory() as d, serve(defect) as (url, _):
                cert = certify_endpoint(EndpointRequest(url, reference="reported", plan=plan, record=f"{d}/r.jsonl"))
            first = (decided_by(cert) or ["-"])[0]
            rows.append({"defect": defect, "seed": seed, "verdict": cert.verdict, "audited": cert.audit.samples,
                         "decided_by": first})
            print(f"reported_requests: {defect or 'correct'} seed {seed}: {cert.verdict} ({first})", file=sys.stderr,
                  flush=True)
    print("| server | runs | FAIL | audited (median) | first deciding member (counts) |")
    print("|---|---|---|---|---|")
    ok = True
    for defect in (None, "temperature-0.9-reported", "zero-logprobs"):
        rs = [r for r in rows if r["defect"] == defect]
        fails = sum(r["verdict"] == "FAIL" for r in rs)
        ok &= (fails == 0) if defect is None else True
        kinds: dict = {}
        for r in rs:
            key = r["decided_by"].split(":")[1].split("(")[0].strip() if r["decided_by"] != "-" else "-"
            kinds[key] = kinds.get(key, 0) + 1
        print(f"| {defect or 'correct'} | {len(rs)} | {fails} | {statistics.median(r['audited'] for r in rs):g} | "
              + "; ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])) + " |")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))
    print("verdict: PASS — no correct server failed" if ok else "verdict: FAIL — a correct server failed")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--serial-s", type=float, default=0.01)
    ap.add_argument("--verdicts", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.verdicts:
        return run_verdicts(args.verdicts, args.out)
    rows = []
    for serial in (0.0, args.serial_s):
        for rep in range(args.repeats):
            for mode in ("self", "reported", "reported-no-audit", "alone"):
                r = alone(serial) if mode == "alone" else certify(mode, serial)
                r.update(serial_s=serial, repeat=rep)
                rows.append(r)
                print(f"reported_requests: serial {serial:g} s, repeat {rep + 1}/{args.repeats}, {mode}: "
                      f"{r['verdict']}, {r['requests']} requests, {r['wall_s']:.2f} s", file=sys.stderr, flush=True)
    print("| server | mode | verdict | requests | audited | wall s (median) | wall / self | wall / alone |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for serial in (0.0, args.serial_s):
        med = {m: statistics.median(r["wall_s"] for r in rows if r["serial_s"] == serial and r["mode"] == m)
               for m in ("self", "reported", "reported-no-audit", "alone")}
        for m in ("self", "reported", "reported-no-audit", "alone"):
            rs = [r for r in rows if r["serial_s"] == serial and r["mode"] == m]
            verdicts = sorted({r["verdict"] for r in rs})
            ok &= verdicts in (["PASS"], ["-"])
            print(f"| serial_s {serial:g} | {m} | {'/'.join(verdicts)} | {rs[0]['requests']} | {rs[0]['audited']} | "
                  f"{med[m]:.2f} | {med[m] / med['self']:.2f} | {med[m] / med['alone']:.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"verdict: {'PASS' if ok else 'FAIL'} — every certification of the correct server passed"
          if ok else "verdict: FAIL — a certification of the correct server did not pass")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
