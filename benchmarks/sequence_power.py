"""Power against the number of sampled sequences: our black-box test family, Model Equality
Testing's MMD, and the likelihood-ratio test that knows the defect (the limit), on an exact
synthetic model with planted samplers.

The model: an order-1 Markov chain (``oracle.sequence_simulation.MarkovChain``), V = 512, row
entropies uniform in 2–4 nats; sequences of n = 16 tokens after one fixed one-token prompt (as an
auditor samples one prompt many times: MMD compares the position-wise laws of the completions).
The planted samplers (``sequence_simulation.DEFECTS``): T = 0.9 when asked 1.0; top-p 0.95 left
on; a 1 % leak of a draft model's law (the draft: the chain's logits plus N(0, 3²) noise, mean
TV 0.76 from the target: the leak's per-token TV is 0.0076); 10 % of tokens from the law one
position earlier (stale logits).

The three tests, each at α = 0.01:

* **ours** — ``oracle.sequence_family.family_test`` on whole-law records (the draft's law given,
  so the draft-leak score runs), Bonferroni over the family as shipped;
* **MMD** — Model Equality Testing (Gao, Liang & Guestrin, ICLR 2025), from its description: the
  unbiased MMD² between the N sampled sequences and N sequences from the reference model with the
  Hamming kernel k(x, y) = (1/n)·#{t: x_t = y_t}, p-value by B = 200 permutations of the pooled
  2N sequences (written here from the paper; no code of theirs);
* **oracle** — the Neyman–Pearson test of the null against the one alternative planted: the
  log-likelihood ratio Λ = Σ_t log q_t(x_t)/p_t(x_t), rejecting above its null distribution's
  1 − α quantile, simulated from the exact chain at each N (``ORACLE_NULL_RUNS`` runs; the normal
  approximation is not used: a leak's ratio is heavy-tailed); for top-p, exact by Ville's
  inequality: reject when every token lies in its nucleus and Π_t M_t ≤ α.  No test of the null
  can beat it against that alternative; its sample count is the limit.

Also the false-alarm rate of each test on exact samples (the null), with a 95 % Clopper–Pearson
interval.

Run: ``python benchmarks/sequence_power.py`` (about 40 min on one core; ``--quick``: 12 runs a
point, a shorter grid, a few minutes).  Writes benchmarks/raw/sequence_power.json and
benchmarks/plots/sequence_power.png and prints the markdown tables of benchmarks/SEQUENCE_POWER.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy import stats as sps

from spectr_gbv.oracle.sequence_family import family_test
from spectr_gbv.oracle.sequence_records import records_from_laws
from spectr_gbv.oracle.sequence_simulation import MarkovChain, defect_matrix, sample_many

HERE = Path(__file__).resolve().parent
DEFECTS = {"T 0.9": ("temperature", 0.9), "top-p 0.95": ("top_p", 0.95), "leak 1%": ("leak", 0.01),
           "stale 10%": ("stale", 0.1)}
N_TOKENS = 16
ALPHA = 0.01
PROMPT = 0  # the one-token prompt every sequence continues
DRAFT_NOISE = 3.0
GRID = {"ours": [5, 10, 20, 30, 50, 75, 100, 200, 300, 500, 750, 1000, 1500],
        "oracle": [2, 5, 10, 20, 30, 50, 75, 100, 200, 300, 500, 750, 1000],
        "MMD": [50, 100, 200, 500, 1000, 2000, 5000, 10000]}
QUICK_GRID = {"ours": [10, 30, 100, 300], "oracle": [5, 20, 100], "MMD": [100, 1000]}
ORACLE_NULL_RUNS = 2000


def ours(chain, draft, first, X, rng, run) -> bool:
    samples = []
    for f, toks in zip(first, X):
        prev = np.concatenate(([f], toks[:-1]))
        samples.append(records_from_laws(toks, chain.probs[prev], draft.probs[prev]))
    return not family_test(samples, alpha=ALPHA, seed=run).passed


def mmd_pvalue(X, Y, V, rng, B: int = 200) -> float:
    """Permutation p-value of the unbiased MMD² with the Hamming kernel (module doc)."""
    Z = np.concatenate([X, Y])
    N, n = X.shape
    flat = Z + (np.arange(n) * V)[None, :]

    def stat(idx_x):
        mask = np.zeros(len(Z), bool)
        mask[idx_x] = True
        cx = np.bincount(flat[mask].ravel(), minlength=n * V).astype(np.float64)
        cy = np.bincount(flat[~mask].ravel(), minlength=n * V).astype(np.float64)
        sxx = ((cx * cx).sum() / n - N) / (N * (N - 1))
        syy = ((cy * cy).sum() / n - N) / (N * (N - 1))
        sxy = (cx * cy).sum() / n / (N * N)
        return sxx + syy - 2 * sxy

    observed = stat(np.arange(N))
    exceed = sum(stat(rng.permutation(2 * N)[:N]) >= observed for _ in range(B))
    return (1 + exceed) / (B + 1)


def mmd(chain, draft, first, X, rng, run) -> bool:
    Y = sample_many(chain, first, N_TOKENS, rng)
    return mmd_pvalue(X, Y, chain.V, rng) <= ALPHA


class Oracle:
    """The likelihood-ratio test of the null against one planted alternative (module doc)."""

    def __init__(self, chain, draft, defect, null_runs: int = ORACLE_NULL_RUNS):
        self.chain, self.kind, self.size = chain, defect[0], defect[1]
        self.null_runs, self.critical = null_runs, {}
        P = chain.probs
        if self.kind == "top_p":
            Q = defect_matrix(chain, defect)
            self.inside = Q > 0
            self.log_mass = np.log(np.where(self.inside, P, 0.0).sum(axis=1))
        elif self.kind != "stale":
            self.L = np.log(defect_matrix(chain, defect, draft)) - np.log(P)

    def statistic(self, first, X) -> float:
        """Λ of the N sequences (one-token prompts ``first``, tokens ``X``)."""
        prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
        if self.kind == "stale":
            P, eps = self.chain.probs, self.size
            p_t = P[prev[:, 1:], X[:, 1:]]
            q_t = (1 - eps) * p_t + eps * P[prev[:, :-1], X[:, 1:]]
            return float(np.log(q_t / p_t).sum())
        return float(self.L[prev, X].sum())

    def threshold(self, N, rng) -> float:
        if N not in self.critical:
            null = [self.statistic(np.full(N, PROMPT), sample_many(self.chain, np.full(N, PROMPT), N_TOKENS, rng))
                    for _ in range(self.null_runs)]
            self.critical[N] = float(np.quantile(null, 1 - ALPHA))
        return self.critical[N]

    def __call__(self, chain, draft, first, X, rng, run) -> bool:
        if self.kind == "top_p":
            prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
            if not self.inside[prev, X].all():
                return False
            return float(self.log_mass[prev].sum()) <= math.log(ALPHA)
        return self.statistic(first, X) > self.threshold(len(first), rng)


def power(test, chain, draft, defect, N, runs, rng) -> float:
    hits = 0
    for run in range(runs):
        first = np.full(N, PROMPT)
        X = sample_many(chain, first, N_TOKENS, rng, defect, draft)
        hits += bool(test(chain, draft, first, X, rng, run))
    return hits / runs


def crossing(points, level=0.9):
    """The smallest N whose power reaches ``level`` (log-linear interpolation), or None."""
    for (n0, p0), (n1, p1) in zip(points, points[1:]):
        if p0 < level <= p1:
            return round(math.exp(math.log(n0) + (level - p0) / (p1 - p0) * (math.log(n1) - math.log(n0))))
    return points[0][0] if points and points[0][1] >= level else None


def clopper_pearson(k, n, conf=0.95):
    lo = sps.beta.ppf((1 - conf) / 2, k, n - k + 1) if k else 0.0
    hi = sps.beta.ppf(1 - (1 - conf) / 2, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--null-runs", type=int, default=500)
    ap.add_argument("--only", default="ours,oracle,MMD,null",
                    help="comma-separated parts to (re)compute ('null' with a method: that method's false-alarm "
                         "runs); the others are read from --merge")
    ap.add_argument("--merge", default=None, help="a raw JSON of an earlier run whose other parts are kept")
    args = ap.parse_args()
    only = set(args.only.split(","))
    runs, grid = (12, QUICK_GRID) if args.quick else (args.runs, GRID)
    null_runs = 60 if args.quick else args.null_runs
    chain = MarkovChain(512, seed=0)
    draft = chain.draft(noise=DRAFT_NOISE)
    rng = np.random.default_rng(2026)
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "V": 512, "n": N_TOKENS,
           "alpha": ALPHA, "runs": runs, "curves": {}, "null": {}}
    if args.merge:
        old = json.loads(Path(args.merge).read_text())
        out["curves"], out["null"] = old.get("curves", {}), old.get("null", {})
    started = time.time()
    for name, defect in DEFECTS.items():
        oracle = Oracle(chain, draft, defect)
        for method, test in (("ours", ours), ("oracle", oracle), ("MMD", mmd)):
            if method not in only:
                continue
            pts = []
            for N in grid[method]:
                p = power(test, chain, draft, defect, N, runs, rng)
                pts.append((N, p))
                print(f"{time.time() - started:7.0f}s {name:11s} {method:6s} N={N:6d} power {p:.2f}", flush=True)
                if p >= 0.99 and len(pts) >= 2 and pts[-2][1] >= 0.99:
                    break
                if method == "MMD" and N >= 2000 and p < 0.2 and name == "leak 1%":
                    break  # MMD sees per-position marginals only: the leak stays invisible
            out["curves"].setdefault(name, {})[method] = pts
    nulls = (("ours", ours, 60, null_runs), ("ours", ours, 300, null_runs // 5), ("MMD", mmd, 500, 100))
    for method, test, N, n_runs in (nulls if "null" in only else ()):
        if method not in only:
            continue  # kept from --merge
        k = sum(bool(test(chain, draft, np.full(N, PROMPT), sample_many(chain, np.full(N, PROMPT), N_TOKENS, rng),
                          rng, r)) for r in range(n_runs))
        out["null"][f"{method} N={N}"] = {"runs": n_runs, "rejected": k, "ci95": clopper_pearson(k, n_runs)}
        print(f"null {method} N={N}: {k}/{n_runs}", flush=True)
    out["seconds"] = time.time() - started
    (HERE / "raw").mkdir(exist_ok=True)
    (HERE / "raw" / "sequence_power.json").write_text(json.dumps(out, indent=1))
    plot(out)
    print(markdown(out))


def plot(out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8), sharey=True)
    for ax, (name, curves) in zip(axes, out["curves"].items()):
        for method, style in (("oracle", "k--"), ("ours", "C0-o"), ("MMD", "C3-s")):
            pts = curves.get(method, [])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=method, ms=4)
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("sequences N (16 tokens each)")
        ax.axhline(0.9, color="grey", lw=0.5)
    axes[0].set_ylabel(f"power at α = {out['alpha']}")
    axes[0].legend()
    fig.suptitle(f"Markov chain V = {out['V']}, {out['runs']} runs a point ({out['date'][:10]})")
    fig.tight_layout()
    (HERE / "plots").mkdir(exist_ok=True)
    fig.savefig(HERE / "plots" / "sequence_power.png", dpi=110)


def markdown(out) -> str:
    lines = ["| planted defect | oracle LR: N at power 0.9 | ours | ratio | MMD |", "|---|---|---|---|---|"]
    for name, curves in out["curves"].items():
        o, u, m = (crossing(curves.get(k, [])) for k in ("oracle", "ours", "MMD"))
        ratio = f"{u / o:.1f}" if o and u else "-"
        mmd_txt = str(m) if m else f"> {curves['MMD'][-1][0]} (power {curves['MMD'][-1][1]:.2f})"
        lines.append(f"| {name} | {o} | {u} | {ratio} | {mmd_txt} |")
    lines.append("")
    lines.append("| test (null) | runs | rejected | 95 % interval |")
    lines.append("|---|---|---|---|")
    for key, v in out["null"].items():
        lines.append(f"| {key} | {v['runs']} | {v['rejected']} | [{v['ci95'][0]:.4f}, {v['ci95'][1]:.4f}] |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
