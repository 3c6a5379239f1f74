"""The endpoint's default (sequential) plan measured: its false-alarm rate on correct servers, and
where it stops, on the test servers' chains (``tests/helpers/fake_deployment``), with no HTTP.

Each run is ``certify.endpoint.run.certify_deployment`` itself, with the CLI's default plan
(``Plan(sequential=True)``: a pilot of 80 samples × 16 tokens, doubling to 1,280, α = 1e-3,
η = 1e-3), fed by an in-process engine and reference that give what the loopback server and
reference ``self`` give: exact samples of the chain (after 8 one-token prompts drawn per run, sample
i on prompt i mod 8, engine seed ``sample_seed``), the top 20 of each law as float64
log-probabilities, reported log-probabilities equal to the reference's.  Servers:

- ``default``: the default chain (V = 64, row entropies 1–2.5), correct;
- ``broad``: ``broad_chain`` (V = 128, row entropies 3.5–4.5), correct;
- ``broad-T0.9``: ``broad_chain`` sampled at a silent T 0.9 (the fixed plan of 80 is run beside it).

A run fails when the certificate's verdict is FAIL.  Prints a Markdown table (false alarms with a
Clopper–Pearson 95 % interval, looks made, why the runs stopped) and writes
benchmarks/raw/sequential_plan.json.

Run: ``python benchmarks/sequential_plan.py [--runs R] [--servers default,broad,broad-T0.9]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from helpers.fake_deployment import broad_chain, default_chain  # noqa: E402

from spectr_gbv.certify.endpoint.references import ReferenceRows  # noqa: E402
from spectr_gbv.certify.endpoint.run import Plan, certify_deployment  # noqa: E402
from spectr_gbv.certify.endpoint.servers import Sample, TopLaws  # noqa: E402
from spectr_gbv.certify.endpoint.store import RunFile  # noqa: E402


class Engine:
    def __init__(self, chain, T: float = 1.0):
        self.chain, self.T = chain, T

    def sample(self, prompt, n, seed):
        rng = np.random.default_rng(seed)
        defect = None if self.T == 1.0 else ("temperature", self.T)
        toks = self.chain.sample(list(prompt), n, rng, defect)
        laws = self.chain.laws(prompt, toks)
        return Sample(toks, [float(v) for v in np.log(laws[np.arange(n), toks])])


class Reference:
    remote = True

    def __init__(self, chain, k: int = 20):
        self.chain, self.k = chain, k

    def rows(self, prompt, tokens, texts=None):
        laws = self.chain.laws(prompt, tokens)
        V = self.chain.V
        ids = np.lexsort((np.broadcast_to(np.arange(V), laws.shape), -laws), axis=1)[:, :self.k]
        own = [float(v) for v in np.log(laws[np.arange(len(tokens)), tokens])]
        top = TopLaws([list(map(int, r)) for r in ids], [list(map(float, r)) for r in
                                                          np.log(np.take_along_axis(laws, ids, 1))], own)
        return ReferenceRows(top=top, raw=own)


def one_run(chain, T: float, seed: int, plan: Plan) -> dict:
    rng = np.random.default_rng([seed, 8])
    prompts = [[int(t)] for t in rng.integers(chain.V, size=8)]
    with tempfile.TemporaryDirectory() as d:
        run_file = RunFile(Path(d) / "r.jsonl", {"plan": "bench"})
        cert = certify_deployment(Engine(chain, T), Reference(chain), prompts, plan, run_file)
    seq = cert.sequence or {}
    res = seq.get("resolution") or {}
    return {"verdict": cert.verdict, "samples": cert.samples, "tested": seq.get("tested"),
            "stopped": seq.get("stopped"), "resolution": {k: [v, ok] for k, (v, ok) in res.items()},
            "needed": seq.get("needed"), "decided": [d.name for d in cert.family.directional if not d.passed]
            + [r.scope for r in cert.family.rows if not r.passed] + [r.name for r in cert.reports if not r.passed]}


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from scipy import stats

    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


SERVERS = {"default": (default_chain, 1.0), "broad": (broad_chain, 1.0), "broad-T0.9": (broad_chain, 0.9)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--servers", default="default,broad,broad-T0.9")
    ap.add_argument("--out", default=str(HERE / "raw" / "sequential_plan.json"))
    args = ap.parse_args(argv)
    out = {"date": time.strftime("%Y-%m-%d"), "runs": args.runs, "servers": {}}
    for name in args.servers.split(","):
        make, T = SERVERS[name]
        chain = make()
        rows, t0 = [], time.time()
        for run in range(args.runs):
            r = one_run(chain, T, run, Plan(sequential=True, seed=run, concurrency=1, replays=0))
            if T != 1.0:
                r["fixed80"] = one_run(chain, T, run, Plan(n_samples=80, seed=run, concurrency=1, replays=0))["verdict"]
            rows.append(r)
            print(f"{name} run {run}: {r['verdict']} tested {r['tested']} stopped {r['stopped']} "
                  f"{r.get('fixed80', '')} ({time.time() - t0:.0f} s)", flush=True)
        fails = sum(r["verdict"] == "FAIL" for r in rows)
        out["servers"][name] = {"T": T, "fails": fails, "ci95": clopper_pearson(fails, len(rows)),
                                "stopped": dict(Counter(r["stopped"] for r in rows)),
                                "last_look": dict(Counter(str(r["tested"][-1]) for r in rows)),
                                "fixed80_fails": sum(r.get("fixed80") == "FAIL" for r in rows) if T != 1.0 else None,
                                "seconds": round(time.time() - t0, 1), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("| server | runs | FAIL | 95 % interval | stopped | last look (samples) | fixed 80: FAIL |")
    print("|---|---|---|---|---|---|---|")
    for name, s in out["servers"].items():
        lo, hi = s["ci95"]
        print(f"| {name} | {args.runs} | {s['fails']} | [{lo:.3g}, {hi:.3g}] | {s['stopped']} | {s['last_look']} | "
              f"{'-' if s['fixed80_fails'] is None else s['fixed80_fails']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
