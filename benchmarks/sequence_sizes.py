"""Measured false-alarm rates of the sequence tests changed by issue 56, at N = 5, 20, 80 sequences
× 16 tokens and α = 1e-3, 1e-2, each test alone at α (both tails where it has two), and the
endpoint's default plan as a whole at its α.

Model (as benchmarks/sequence_power.py and the issue's re-simulation): the order-1 Markov chain
``MarkovChain(512, seed=0)`` (row entropies 2–4 nats), whole laws, each sequence after a uniformly
drawn one-token prompt, exact sampling (the null), η = 0 (the exact tests; η > 0 only lowers them).

- **temperature**: the e-value ``temperature_test`` (the family's since issue 56) beside the normal
  approximation of the score it replaced (``score_test``), split by tail (the e-value's tail: the
  sign of its deciding θ; the score's: the sign of z);
- **truncation**: the e-value ``truncation_test`` beside the normal approximation of the counts it
  replaced (tokens outside each level against Σ m_t, variance Σ m_t(1 − m_t), one-sided, Bonferroni
  over the levels: the pre-issue-56 ``nucleus_test`` over the same 9 levels);
- **reported log-probs: shift** (the sign test) at the null's boundary: gaps τ + N(0, 0.15²), n = 16N;
- **reported top-k: other cell** at the null's boundary: n = 16N flagged tokens, o_t log-uniform in
  [1e-6, 1e-3], each outside with probability exactly o_t;
- **the endpoint's default plan** (``--family``): 80 samples × 16 tokens from the fake server's chain
  (``tests/helpers/fake_deployment.default_chain``: V = 64, row entropies 1–2.5) over 8 one-token
  prompts (sample i on prompt i mod 8, as the endpoint spreads them), records from its top 20
  (float64 log-probabilities, as reference ``self`` gets them), reported log-probabilities equal
  to the reference's, α = 1e-3, η = 10^-3: ``family_test`` with the report tests' share reserved
  plus ``report_tests`` (other cell, log-prob shift, shared prefixes), as ``certify.endpoint.run``
  runs them.  A run fails when any fails.

The temperature and truncation statistics are computed here from per-row tables of the chain (g,
K(θ), the levels' masses and memberships), vectorised over runs; ``check`` asserts they equal the
records-based tests (``records_from_laws`` + the test functions) on 20 runs to 1e-9.

Also (``--parts power``) the power of the changed tests alone at 2.5e-4 (a directional test's share at
α = 1e-3) against T 0.9, T 1.1, top-p 0.95, top-k 50 and min-p 0.05 on the same chain, 400 runs a
point, beside the normal approximations they replaced.

Run: ``python benchmarks/sequence_sizes.py [--runs-scale S] [--family RUNS] [--parts ...]`` (S scales
the run counts, default 1: 200,000 runs at N = 5, 100,000 at 20, 40,000 at 80).  Writes
benchmarks/raw/sequence_sizes.json and prints the tables of benchmarks/SEQUENCE_SIZES.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.sequence_records import LOG_FLOOR, THETAS, nucleus_levels, records_from_laws
from spectr_gbv.oracle.sequence_reports import logprob_shift_test, other_cell_test
from spectr_gbv.oracle.sequence_scores import (LEVELS, TRUNCATION_LAMBDAS, TRUNCATION_WEIGHTS, score_test,
                                               temperature_test, truncation_levels, truncation_test)
from spectr_gbv.oracle.sequence_simulation import MarkovChain

HERE = Path(__file__).resolve().parent
NS = (5, 20, 80)
ALPHAS = (1e-3, 1e-2)
RUNS = {5: 200_000, 20: 100_000, 80: 40_000}
N_TOKENS = 16


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(sps.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(sps.beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


class Tables:
    """Per-row tables of a chain (whole laws): the temperature's g, K(θ), mean and variance, and
    each truncation level's mass M and membership in[row, token]."""

    def __init__(self, chain: MarkovChain):
        p = chain.probs
        self.V = chain.V
        self.cdf = (np.cumsum(p, axis=1) + np.arange(chain.V)[:, None]).ravel()
        g = np.maximum(np.log(p), LOG_FLOOR)
        self.g = g
        self.K = np.log(np.stack([(p * np.exp(th * g)).sum(axis=1) for th in THETAS], axis=1))  # [V, G]
        self.m = (p * g).sum(axis=1)
        self.v = (p * (g - self.m[:, None]) ** 2).sum(axis=1)
        # truncation levels: a record's ``nu`` depends on its row and its token's rank (ties by id)
        self.levels = truncation_levels([{"nu": [], "k": chain.V}])
        nu = np.empty((chain.V, chain.V, len(LEVELS), 2))
        for i in range(chain.V):
            order = np.lexsort((np.arange(chain.V), -p[i]))
            desc = p[i][order]
            for rank, y in enumerate(order):
                nu[i, y] = nucleus_levels(desc, rank, 1.0)
        nu = nu[:, :, self.levels, :]
        self.Mass = 1.0 - nu[:, 0, :, 0]  # [V, L]: the level's mass (the same for every token of a row)
        self.inside = nu[:, :, :, 1] < 0.5  # [V, V, L]

    def sample(self, first: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """int64 [len(first), N_TOKENS]: exact sampling by one search in the rows' stacked CDFs."""
        out = np.empty((first.size, N_TOKENS), dtype=np.int64)
        prev = first
        for t in range(N_TOKENS):
            idx = np.searchsorted(self.cdf, prev + rng.random(first.size), side="left")
            x = np.minimum(idx - prev * self.V, self.V - 1)
            out[:, t] = x
            prev = x
        return out


def temperature_stats(tab: Tables, prev: np.ndarray, X: np.ndarray):
    """Per run (axis 0): log W of the e-value and its deciding θ's sign, and the score's z.
    prev, X: int [runs, N·16]."""
    Sg = tab.g[prev, X].sum(axis=1)
    SK = tab.K[prev].sum(axis=1)  # [runs, G]
    th = np.asarray(THETAS)
    lw = th[None, :] * Sg[:, None] - SK
    top = lw.max(axis=1)
    log_w = top + np.log(np.exp(lw - top[:, None]).mean(axis=1))
    side = np.sign(th[np.argmax(lw, axis=1)])
    z = (Sg - tab.m[prev].sum(axis=1)) / np.sqrt(tab.v[prev].sum(axis=1))
    return log_w, side, z


def truncation_stats(tab: Tables, prev: np.ndarray, X: np.ndarray):
    """Per run: log W of the truncation e-value, and the normal approximation's p-value (the
    smallest one-sided p over the levels times their number)."""
    M = tab.Mass[prev]  # [runs, n, L]
    ins = tab.inside[prev, X]  # [runs, n, L]
    per_level = []
    for lam, w in zip(TRUNCATION_LAMBDAS, TRUNCATION_WEIGHTS):
        with np.errstate(divide="ignore"):
            f = np.log(np.where(ins, (1 - lam) + lam / M, 1 - lam)).sum(axis=1)  # [runs, L]
        per_level.append(math.log(w) + f)
    stack = np.stack(per_level, axis=0)  # [Λ, runs, L]
    top = stack.max(axis=(0, 2))
    with np.errstate(invalid="ignore"):
        log_w = top + np.log(np.exp(stack - top[None, :, None]).sum(axis=(0, 2)) / len(tab.levels))
    m = 1.0 - M
    out = (~ins).sum(axis=1)
    mean, var = m.sum(axis=1), (m * (1 - m)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(var > 0, sps.norm.cdf((out - mean) / np.sqrt(var)), 1.0)
    return log_w, np.minimum(1.0, p.min(axis=1) * len(tab.levels))


def check(tab: Tables, chain: MarkovChain, rng) -> None:
    """The vectorised statistics equal the records-based tests (module doc)."""
    for _ in range(20):
        first = rng.integers(chain.V, size=5)
        X = tab.sample(first, rng)
        prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
        flat = [r for f, x, pv in zip(first, X, prev) for r in records_from_laws(x, chain.probs[pv])]
        lw, side, z = temperature_stats(tab, prev.reshape(1, -1), X.reshape(1, -1))
        e = temperature_test(flat, 1e-3)
        s = score_test(flat, "temperature", 1e-3)
        assert abs(lw[0] - e.statistic) < 1e-9 and side[0] == e.sided and abs(z[0] - s.statistic) < 1e-9
        tw, _ = truncation_stats(tab, prev.reshape(1, -1), X.reshape(1, -1))
        t = truncation_test(flat, 1e-3)
        assert (tw[0] == t.statistic == -math.inf) or abs(tw[0] - t.statistic) < 1e-9, (tw[0], t.statistic)


def measure_chain_tests(tab: Tables, rng, scale: float) -> dict:
    out = {}
    for N in NS:
        runs = max(1000, int(RUNS[N] * scale))
        counts = {}
        done, t0 = 0, time.time()
        while done < runs:
            R = min(runs - done, max(1, 400_000 // N))
            first = rng.integers(tab.V, size=R * N)
            X = tab.sample(first, rng)
            prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
            X, prev = X.reshape(R, -1), prev.reshape(R, -1)
            lw, side, z = temperature_stats(tab, prev, X)
            tw, tp = truncation_stats(tab, prev, X)
            for a in ALPHAS:
                rej_e = lw >= math.log(1 / a)
                zc = float(sps.norm.isf(a / 2))
                for tail, s in (("lower", -1), ("upper", 1)):
                    counts[f"temperature e-value, a={a:g}, {tail}"] = counts.get(
                        f"temperature e-value, a={a:g}, {tail}", 0) + int((rej_e & (side == s)).sum())
                    counts[f"temperature score z, a={a:g}, {tail}"] = counts.get(
                        f"temperature score z, a={a:g}, {tail}", 0) + int(((s * z) > zc).sum())
                counts[f"truncation e-value, a={a:g}"] = counts.get(f"truncation e-value, a={a:g}", 0) + int(
                    (tw >= math.log(1 / a)).sum())
                counts[f"truncation normal count, a={a:g}"] = counts.get(f"truncation normal count, a={a:g}", 0) + int(
                    (tp < a).sum())
            done += R
        out[N] = {"runs": runs, "counts": counts, "seconds": round(time.time() - t0, 1)}
        print(f"N = {N}: {runs} runs, {time.time() - t0:.0f} s", flush=True)
    return out


POWER_DEFECTS = {"T 0.9": ("temperature", 0.9), "T 1.1": ("temperature", 1.1), "top-p 0.95": ("top_p", 0.95),
                 "top-k 50": ("top_k", 50), "min-p 0.05": ("min_p", 0.05)}
POWER_NS = (5, 10, 15, 20, 30, 40, 60, 80, 120)
POWER_ALPHA = 2.5e-4  # a directional test's share of the family at α = 1e-3 (3α/4 over 3 tests)


def measure_power(tab: Tables, chain: MarkovChain, rng, runs: int = 400) -> dict:
    """Power of the changed tests alone at ``POWER_ALPHA`` against planted samplers (the chain's
    ``defect_matrix``), the new e-values beside the normal approximations they replaced."""
    from spectr_gbv.oracle.sequence_simulation import defect_matrix

    null_cdf = tab.cdf
    out = {}
    zc = float(sps.norm.isf(POWER_ALPHA / 2))
    try:
        for name, defect in POWER_DEFECTS.items():
            tab.cdf = (np.cumsum(defect_matrix(chain, defect), axis=1) + np.arange(chain.V)[:, None]).ravel()
            rows = {}
            for N in POWER_NS:
                first = rng.integers(chain.V, size=runs * N)
                X = tab.sample(first, rng)
                prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
                X, prev = X.reshape(runs, -1), prev.reshape(runs, -1)
                lw, _, z = temperature_stats(tab, prev, X)
                tw, tp = truncation_stats(tab, prev, X)
                rows[N] = {"temperature e-value": float((lw >= math.log(1 / POWER_ALPHA)).mean()),
                           "temperature score z": float((np.abs(z) > zc).mean()),
                           "truncation e-value": float((tw >= math.log(1 / POWER_ALPHA)).mean()),
                           "truncation normal count": float((tp < POWER_ALPHA).mean())}
            out[name] = {"runs": runs, "points": rows}
            print(f"power {name}: done", flush=True)
    finally:
        tab.cdf = null_cdf
    return out


def n_at_power(points: dict, test: str, level: float = 0.9):
    """The N at which ``test``'s power reaches ``level`` (log-linear interpolation), or None."""
    Ns = sorted(int(n) for n in points)
    prev = None
    for N in Ns:
        pw = points[str(N)][test] if str(N) in points else points[N][test]
        if pw >= level:
            if prev is None or prev[1] >= level:
                return float(N)
            (n0, p0) = prev
            return float(math.exp(math.log(n0) + (level - p0) / (pw - p0) * (math.log(N) - math.log(n0))))
        prev = (N, pw)
    return None


def measure_report_tests(rng, scale: float) -> dict:
    out = {}
    for N in NS:
        n = N * N_TOKENS
        runs = max(1000, int({5: 20_000, 20: 10_000, 80: 4_000}[N] * scale))
        counts = {}
        for _ in range(runs):
            gaps = 0.1 + rng.normal(0, 0.15, n)
            o = 10 ** rng.uniform(-6, -3, n)
            outside = rng.random(n) < o
            recs = [{"o": float(a), "ox": int(b)} for a, b in zip(o, outside)]
            for a in ALPHAS:
                s = logprob_shift_test(gaps, a)
                tail = "upper" if s.statistic > 0 else "lower"
                k = f"log-prob shift (sign test), a={a:g}, {tail}"
                counts[k] = counts.get(k, 0) + (not s.passed)
                k = f"other cell, a={a:g}"
                counts[k] = counts.get(k, 0) + (not other_cell_test(recs, a).passed)
        out[N] = {"runs": runs, "counts": counts}
        print(f"report tests N = {N}: {runs} runs", flush=True)
    return out


def measure_family(runs: int, rng) -> dict:
    """The endpoint's default plan (module doc), ``runs`` runs."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from helpers.fake_deployment import default_chain

    from spectr_gbv.oracle.sequence_family import family_test
    from spectr_gbv.oracle.sequence_records import records_from_top
    from spectr_gbv.oracle.sequence_reports import planned_share, report_tests

    chain = default_chain()
    failed, which, t0 = 0, {}, time.time()
    for run in range(runs):
        prompts = rng.integers(chain.V, size=8)  # 8 one-token prompts, sample i on prompt i mod 8
        groups = [i % 8 for i in range(80)]
        samples = []
        for g in groups:
            f = prompts[g]
            toks = chain.sample([int(f)], N_TOKENS, rng)
            laws = chain.laws([int(f)], toks)
            ids = np.lexsort((np.broadcast_to(np.arange(chain.V), laws.shape), -laws), axis=1)[:, :20]
            samples.append(records_from_top(toks, ids, np.log(np.take_along_axis(laws, ids, 1)),
                                            [float(v) for v in np.log(laws[np.arange(N_TOKENS), toks])]))
        flat = [r for s in samples for r in s]
        gaps = [0.0] * len(flat)
        reserved = planned_share(flat, 1e-3, gaps, groups)
        reports = report_tests(flat, reserved, gaps, samples=samples, groups=groups, tolerance=1e-3)
        fam = family_test(samples, 1e-3, 1e-3, seed=run, reserved=reserved)
        bad = [d.name for d in fam.directional if not d.passed] + [r.scope for r in fam.rows if not r.passed]
        bad += [r.name for r in reports if not r.passed] + (["impossible"] if fam.impossible else [])
        if bad:
            failed += 1
            for b in bad:
                which[b] = which.get(b, 0) + 1
        if (run + 1) % 500 == 0:
            print(f"family: {run + 1} runs, {failed} failed, {time.time() - t0:.0f} s", flush=True)
    return {"runs": runs, "failed": failed, "ci95": clopper_pearson(failed, runs), "which": which,
            "seconds": round(time.time() - t0, 1)}


def tables(res: dict) -> str:
    lines = ["| test | α | tail | N = 5 | N = 20 | N = 80 |", "|---|---|---|---|---|---|"]
    keys = sorted({k for N in NS for k in res["chain"][str(N)]["counts"]} |
                  {k for N in NS for k in res["reports"][str(N)]["counts"]})
    for key in keys:
        parts = [p.strip() for p in key.split(",")]
        name, a = parts[0], parts[1].split("=")[1]
        tail = parts[2] if len(parts) > 2 else "—"
        cells = []
        for N in NS:
            block = res["chain"][str(N)] if key in res["chain"][str(N)]["counts"] else res["reports"][str(N)]
            k, n = block["counts"].get(key, 0), block["runs"]
            lo, hi = clopper_pearson(k, n)
            cells.append(f"{k / n:.2g} [{lo:.2g}, {hi:.2g}] ({k}/{n})")
        lines.append(f"| {name} | {a} | {tail} | " + " | ".join(cells) + " |")
    pw = res.get("power")
    if pw:
        tests = ("temperature e-value", "temperature score z", "truncation e-value", "truncation normal count")
        lines += ["", f"N (sequences × 16 tokens) at power 0.9, each test alone at α = {POWER_ALPHA:g}:", "",
                  "| planted sampler | " + " | ".join(tests) + " |", "|---|" + "---|" * len(tests)]
        for name, block in pw.items():
            cells = []
            for t in tests:
                n = n_at_power(block["points"], t)
                cells.append("—" if n is None else f"{n:.0f}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    fam = res.get("family")
    if fam:
        lo, hi = fam["ci95"]
        lines += ["", "| endpoint default plan (80 × 16, top-20, α = 1e-3) | runs | failed | rate | 95 % interval |",
                  "|---|---|---|---|---|",
                  f"| family + report tests | {fam['runs']} | {fam['failed']} | {fam['failed'] / fam['runs']:.2g} | "
                  f"[{lo:.2g}, {hi:.2g}] |"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-scale", type=float, default=1.0)
    ap.add_argument("--family", type=int, default=0, help="runs of the endpoint's default plan (0: skip)")
    ap.add_argument("--seed", type=int, default=56)
    ap.add_argument("--parts", default="chain,reports,family",
                    help="comma-separated parts to run (chain, reports, family, power); the others are kept from --out")
    ap.add_argument("--out", default=str(HERE / "raw" / "sequence_sizes.json"))
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    bits = {"chain": 1, "reports": 2, "family": 4, "power": 8}
    rng = np.random.default_rng([args.seed, sum(b for name, b in bits.items() if name in parts)])
    out = Path(args.out)
    res = {}
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if "chain" in parts:
        chain = MarkovChain(512, seed=0)
        t0 = time.time()
        tab = Tables(chain)
        check(tab, chain, rng)
        print(f"tables and check: {time.time() - t0:.0f} s", flush=True)
        res["chain"] = {str(k): v for k, v in measure_chain_tests(tab, rng, args.runs_scale).items()}
        res["chain_date"] = stamp
    if "power" in parts:
        chain = MarkovChain(512, seed=0)
        res["power"] = measure_power(Tables(chain), chain, rng)
        res["power_date"] = stamp
    if "reports" in parts:
        res["reports"] = {str(k): v for k, v in measure_report_tests(rng, args.runs_scale).items()}
        res["reports_date"] = stamp
    if "family" in parts and args.family:
        res["family"] = measure_family(args.family, rng)
        res["family_date"] = stamp
    res["seed"] = args.seed
    out.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(out.read_text()) if out.exists() else {}  # the parts another run wrote meanwhile
    merged.update(res)
    out.write_text(json.dumps(merged, indent=1))
    res = merged
    if all(k in res for k in ("chain", "reports")):
        print(tables(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
