"""Power against the number of sampled sequences: our black-box test family, Model Equality
Testing's MMD, the likelihood-ratio e-value that knows the defect, and the likelihood-ratio test
that knows the defect (the limit), on an exact synthetic model with planted samplers.

The model: an order-1 Markov chain (``oracle.sequence_simulation.MarkovChain``), V = 512, row
entropies uniform in 2–4 nats; sequences of n = 16 tokens after one fixed one-token prompt (as an
auditor samples one prompt many times: MMD compares the position-wise laws of the completions).
The planted samplers (``sequence_simulation.DEFECTS``): T = 0.9 when asked 1.0; top-p 0.95 left
on; a 1 % leak of a draft model's law (the draft: the chain's logits plus N(0, 3²) noise, mean
TV 0.76 from the target: the leak's per-token TV is 0.0076); 10 % of tokens from the law one
position earlier (stale logits).

The tests, each at α (``--alpha``, default 0.01):

* **ours** — ``oracle.sequence_family.family_test`` with the draft's law given (so the draft-leak
  e-value runs), Bonferroni over the family as shipped.  Computed here from per-row tables of the
  chain, vectorised (``FastFamily``: the PITs with the family's own uniforms, the exact KS rows of
  ``oracle.sequence_test.ks_uniform_test``, the four directional e-values); ``FastFamily.check``
  asserts that every row's and every directional test's statistic equals ``family_test`` on
  ``records_from_laws`` records (to 1e-9) and that the verdicts agree.  Also recorded from the same
  runs: the directional test aimed at the defect, alone at its family share 3α/16 ("ours: its test");
* **LR e-value** — the likelihood ratio of the planted alternative against the null,
  Λ = Σ_t log q_t(x_t)/p_t(x_t), used as an e-value: reject when Λ ≥ log(1/a), exact by Ville's
  inequality like ours, at a = α and at the family share a = 3α/16 (what an e-value test that knew
  the defect's law and size would need);
* **MMD** — Model Equality Testing (Gao, Liang & Guestrin, ICLR 2025), from its description: the
  unbiased MMD² between the N sampled sequences and N sequences from the reference model with the
  Hamming kernel k(x, y) = (1/n)·#{t: x_t = y_t}, p-value by B = 200 permutations of the pooled
  2N sequences (written here from the paper; no code of theirs);
* **oracle** — the Neyman–Pearson test of the null against the one alternative planted: Λ,
  rejecting above its null distribution's 1 − α quantile at each N, from ``ORACLE_NULL_RUNS`` sums
  of N per-sequence values of Λ drawn from a pool of ``ORACLE_POOL`` exact null sequences (the
  sequences are i.i.d., so Λ over N of them is a sum of N i.i.d. per-sequence values; the normal
  approximation is not used: a leak's ratio is heavy-tailed); for top-p, exact by Ville's inequality:
  reject when every token lies in its nucleus and Π_t M_t ≤ α.  No test of the null can beat it
  against that alternative; its sample count is the limit.

Also the false-alarm rate of each test on exact samples (the null), with a 95 % Clopper–Pearson
interval.

Run: ``python benchmarks/sequence_power.py [--alpha A] [--defects ...] [--only ...] [--merge RAW]``
(``--quick``: fewer runs, a shorter grid).  Writes benchmarks/raw/sequence_power.json
(sequence_power_alpha<A>.json for A ≠ 0.01) and benchmarks/plots/sequence_power.png (…_alpha<A>.png)
and prints the markdown tables of benchmarks/SEQUENCE_POWER.md.
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

from spectr_gbv.oracle.sequence_family import OMNIBUS_SHARE, family_test
from spectr_gbv.oracle.sequence_records import LAMBDAS, LOG_FLOOR, THETAS, nucleus_levels, records_from_laws
from spectr_gbv.oracle.sequence_scores import TRUNCATION_LAMBDAS, TRUNCATION_WEIGHTS, truncation_levels
from spectr_gbv.oracle.sequence_simulation import MarkovChain, defect_matrix, sample_many
from spectr_gbv.oracle.sequence_test import ORDERS, ks_uniform_test

HERE = Path(__file__).resolve().parent
DEFECTS = {"T 0.9": ("temperature", 0.9), "top-p 0.95": ("top_p", 0.95), "leak 1%": ("leak", 0.01),
           "stale 10%": ("stale", 0.1)}
# the directional test of the family aimed at each planted defect
AIMED = {"T 0.9": "temperature", "top-p 0.95": "truncation", "leak 1%": "draft leak", "stale 10%": "position shift"}
DIRECTIONAL = ("temperature", "truncation", "position shift", "draft leak")
N_TOKENS = 16
ALPHA = 0.01
PROMPT = 0  # the one-token prompt every sequence continues
DRAFT_NOISE = 3.0
GRID = {"T 0.9": [2, 3, 5, 7, 10, 15, 20, 30, 40, 50, 60, 75, 100, 150, 200, 300],
        "top-p 0.95": [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 20, 23, 26, 30, 35, 40, 50, 60],
        "leak 1%": [50, 100, 150, 200, 250, 300, 400, 500, 600, 750, 1000, 1250, 1500, 2000, 3000],
        "stale 10%": [1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30]}
MMD_GRID = [50, 100, 200, 500, 1000, 2000, 5000, 10000]
QUICK_GRID = {"T 0.9": [5, 20, 60], "top-p 0.95": [3, 10, 30], "leak 1%": [100, 400, 1000], "stale 10%": [2, 5, 10]}
ORACLE_NULL_RUNS = 20000
ORACLE_POOL = 400_000


class FastFamily:
    """``family_test`` (draft known, η = 0, per-position rows, nothing reserved) on the chain's
    sequences, vectorised over tokens from per-row tables (module doc).

    Tables: the PIT's ``lo`` (mass before the token in probability order, ties by id), ``li`` (in
    id order) and ``c``; the temperature's g = max(log p, LOG_FLOOR) and K(θ) per row; each
    truncation level's mass per row and membership per (row, token), from ``nucleus_levels`` as the records
    have them; the draft's ratio q/p per (row, token).  The position-shift ratio is read per token.
    """

    def __init__(self, chain: MarkovChain, draft: MarkovChain, alpha: float):
        p, V = chain.probs, chain.V
        self.P, self.V, self.alpha = p, V, alpha
        order = np.lexsort((np.tile(np.arange(V), (V, 1)), -p), axis=1)  # per row: probability desc, ties by id
        desc = np.take_along_axis(p, order, axis=1)
        before = np.cumsum(desc, axis=1) - desc
        self.lo = np.empty_like(p)
        np.put_along_axis(self.lo, order, before, axis=1)
        self.li = np.cumsum(p, axis=1) - p
        self.g = np.maximum(np.log(p), LOG_FLOOR)
        self.K = np.log(np.stack([(p * np.exp(th * self.g)).sum(axis=1) for th in THETAS], axis=1))  # [V, G]
        self.levels = truncation_levels([{"nu": [], "k": V}])
        rank = np.empty((V, V), dtype=np.int64)
        np.put_along_axis(rank, order, np.tile(np.arange(V), (V, 1)), axis=1)
        mass, size = np.empty((V, len(self.levels))), np.empty((V, len(self.levels)), dtype=np.int64)
        for i in range(V):  # a level's entry is [1 − M, rank ≥ size]: read M and size off nucleus_levels at two ranks
            full = nucleus_levels(desc[i], V, 1.0)
            for j, lv in enumerate(self.levels):
                mass[i, j] = 1.0 - full[lv][0]
                # size = the smallest rank outside: binary search on the out flag
                lo_r, hi_r = 0, V
                while lo_r < hi_r:
                    mid = (lo_r + hi_r) // 2
                    if nucleus_levels(desc[i], mid, 1.0)[lv][1]:
                        hi_r = mid
                    else:
                        lo_r = mid + 1
                size[i, j] = lo_r
        self.Mass = mass
        self.inside = rank[:, :, None] < size[:, None, :]  # [V, V, L]
        self.ratio_d = draft.probs / p
        lam = np.asarray(LAMBDAS)
        self.log_d = np.log((1 - lam) + lam * self.ratio_d[:, :, None])  # [V, V, Λ]
        self.a_dir = alpha * (1 - OMNIBUS_SHARE) / len(DIRECTIONAL)
        a_omni = alpha * OMNIBUS_SHARE
        self.a_pooled = a_omni / 2 / len(ORDERS)
        self.a_pos = a_omni / 2 / (N_TOKENS * len(ORDERS))
        self._crit = {}

    @staticmethod
    def _logmeanexp(x: np.ndarray) -> float:
        top = float(x.max())
        return -math.inf if top == -math.inf else top + math.log(float(np.exp(x - top).mean()))

    def directional(self, first: np.ndarray, X: np.ndarray) -> dict:
        """log W of each directional e-value (``DIRECTIONAL``) on one run's sequences."""
        prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
        th = np.asarray(THETAS)
        out = {"temperature": self._logmeanexp(th * self.g[prev, X].sum() - self.K[prev].sum(axis=(0, 1)))}
        M, ins = self.Mass[prev], self.inside[prev, X]  # [N, n, L]
        terms = []
        for lam, w in zip(TRUNCATION_LAMBDAS, TRUNCATION_WEIGHTS):
            with np.errstate(divide="ignore"):
                terms.append(math.log(w) + np.log(np.where(ins, (1 - lam) + lam / M, 1 - lam)).sum(axis=(0, 1)))
        stack = np.concatenate(terms)
        top = float(stack.max())
        out["truncation"] = (-math.inf if top == -math.inf else
                             top + math.log(float(np.exp(stack - top).sum())) - math.log(len(self.levels)))
        lam = np.asarray(LAMBDAS)
        r = self.P[prev[:, :-1], X[:, 1:]] / self.P[prev[:, 1:], X[:, 1:]]  # positions t ≥ 1: p_{t−1}(x)/p_t(x)
        out["position shift"] = self._logmeanexp(np.log((1 - lam) + lam * r[:, :, None]).sum(axis=(0, 1)))
        out["draft leak"] = self._logmeanexp(self.log_d[prev, X].sum(axis=(0, 1)))
        return out

    def pits(self, first: np.ndarray, X: np.ndarray, seed: int) -> dict:
        prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
        u = np.stack([np.random.default_rng([int(seed), i]).random(X.shape[1]) for i in range(X.shape[0])])
        c = self.P[prev, X]
        return {"probability": np.minimum(1.0, self.lo[prev, X] + u * c), "id": np.minimum(1.0, self.li[prev, X] + u * c)}

    def rows(self, first: np.ndarray, X: np.ndarray, seed: int) -> list:
        """(scope, order, p-value, α) of every KS row, in ``family_test``'s order."""
        pits = self.pits(first, X, seed)
        out = [("all", o, ks_uniform_test(pits[o].ravel(), self.a_pooled).pvalue, self.a_pooled) for o in ORDERS]
        for j in range(X.shape[1]):
            out += [(f"position {j}", o, ks_uniform_test(pits[o][:, j], self.a_pos).pvalue, self.a_pos) for o in ORDERS]
        return out

    def _critical(self, n: int, a: float) -> float:
        """The KS statistic above which ``ks_uniform_test`` at level a on n PITs rejects (η = 0)."""
        key = (n, a)
        if key not in self._crit:
            self._crit[key] = float(sps.kstwo.isf(a, n))
        return self._crit[key]

    def omnibus(self, first: np.ndarray, X: np.ndarray, seed: int) -> bool:
        """Whether any KS row rejects: D against its critical value, D from the sorted PITs (the
        decision of ``rows``' p-values, without computing them)."""
        pits = self.pits(first, X, seed)
        N, n = X.shape
        for o in ORDERS:
            for u, a in ((pits[o].reshape(-1, 1), self.a_pooled), (pits[o], self.a_pos)):
                u = np.sort(u, axis=0)
                k = u.shape[0]
                i = np.arange(1, k + 1)[:, None]
                D = np.maximum((i / k - u).max(axis=0), (u - (i - 1) / k).max(axis=0))
                if (D > self._critical(k, a)).any():
                    return True
        return False

    def __call__(self, first: np.ndarray, X: np.ndarray, seed: int) -> dict:
        """{"family": rejected, test name: rejected alone at its share} for one run."""
        d = self.directional(first, X)
        res = {name: bool(lw > 0 and math.exp(-lw) < self.a_dir) for name, lw in d.items()}
        omni = self.omnibus(first, X, seed)
        res["omnibus"] = omni
        res["family"] = omni or any(res[n] for n in DIRECTIONAL)
        return res

    def check(self, chain: MarkovChain, draft: MarkovChain, rng, defects, runs: int = 4, N: int = 12) -> float:
        """Asserts that this vectorised family equals ``family_test`` on ``records_from_laws``
        records (every directional statistic and KS p-value to 1e-9, the verdicts equal); returns
        the largest difference."""
        worst = 0.0
        for defect in defects:
            for run in range(runs):
                first = np.full(N, PROMPT)
                X = sample_many(chain, first, N_TOKENS, rng, defect, draft)
                prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
                samples = [records_from_laws(x, chain.probs[pv], draft.probs[pv]) for x, pv in zip(X, prev)]
                fam = family_test(samples, alpha=self.alpha, seed=run)
                d = self.directional(first, X)
                for name in DIRECTIONAL:
                    ref = fam.test(name).statistic
                    diff = 0.0 if ref == d[name] == -math.inf else abs(ref - d[name])
                    assert diff < 1e-9, (name, ref, d[name])
                    worst = max(worst, diff)
                mine = self.rows(first, X, run)
                assert len(mine) == len(fam.rows)
                for (scope, order, p, a), row in zip(mine, fam.rows):
                    assert (scope, order) == (row.scope, row.order) and abs(a - row.alpha) < 1e-15
                    assert abs(p - row.pvalue) < 1e-9, (scope, order, p, row.pvalue)
                    worst = max(worst, abs(p - row.pvalue))
                assert self(first, X, run)["family"] == (not fam.passed)
                assert self.omnibus(first, X, run) == any(not r.passed for r in fam.rows)
        return worst


LEAK_GRIDS = ((0.5, 0.1, 0.02, 0.004), (0.5, 0.1, 0.02, 0.01, 0.004), (0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002),
              (0.01,), (0.004,))


def leak_grid_need(chain, draft, lams, a: float, level: float = 0.9, draws: int = 4000) -> int | None:
    """N at which the draft-leak e-value with the λ grid ``lams`` (equal weights) reaches power
    ``level`` at level a against the 1 % leak, by the normal approximation of its per-λ sums: each
    token's log factors have the mean and covariance of the leaked rows, rows weighted by their
    occupation over the 16 positions from the prompt (``--leak-grids``; a grid-design aid)."""
    P, Q = chain.probs, draft.probs
    eps = DEFECTS["leak 1%"][1]
    M = (1 - eps) * P + eps * Q
    pi, occ = np.zeros(chain.V), np.zeros(chain.V)
    pi[PROMPT] = 1.0
    for _ in range(N_TOKENS):
        occ += pi / N_TOKENS
        pi = pi @ M
    F = np.log((1 - np.asarray(lams))[:, None, None] + np.asarray(lams)[:, None, None] * (Q / P)[None])
    mu = np.einsum("v,vx,gvx->g", occ, M, F)
    rowm = np.einsum("vx,gvx->gv", M, F)
    cov = np.einsum("v,vx,gvx,hvx->gh", occ, M, F, F) - np.einsum("v,gv,hv->gh", occ, rowm, rowm)
    L = np.linalg.cholesky(cov + 1e-12 * np.eye(len(lams)))
    z = np.random.default_rng(0).standard_normal((draws, len(lams)))
    for N in np.exp(np.arange(math.log(20), math.log(20000), 0.01)):
        S = N_TOKENS * N * mu + math.sqrt(N_TOKENS * N) * z @ L.T
        top = S.max(axis=1, keepdims=True)
        lw = top[:, 0] + np.log(np.exp(S - top).mean(axis=1))
        if (lw >= math.log(1 / a)).mean() >= level:
            return int(round(N))
    return None


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


class Oracle:
    """The likelihood ratio Λ of the null against one planted alternative (module doc): the
    Neyman–Pearson test at α, and Λ as an e-value at a given level."""

    def __init__(self, chain, draft, defect, alpha: float, rng, null_runs: int = ORACLE_NULL_RUNS,
                 pool: int = ORACLE_POOL):
        self.chain, self.kind, self.size, self.alpha = chain, defect[0], defect[1], alpha
        P = chain.probs
        if self.kind == "top_p":
            Q = defect_matrix(chain, defect)
            self.inside = Q > 0
            self.log_mass = np.log(np.where(self.inside, P, 0.0).sum(axis=1))
        elif self.kind != "stale":
            self.L = np.log(defect_matrix(chain, defect, draft)) - np.log(P)
        self.null_runs, self.critical, self.rng = null_runs, {}, rng
        self.pool = None
        if self.kind != "top_p":
            parts = []
            for _ in range(max(1, pool // 20_000)):
                first = np.full(min(pool, 20_000), PROMPT)
                parts.append(self.per_sequence(first, sample_many(chain, first, N_TOKENS, rng)))
            self.pool = np.concatenate(parts)

    def per_sequence(self, first, X) -> np.ndarray:
        """Λ of each sequence (one-token prompts ``first``, tokens ``X``); −inf for top-p outside."""
        prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
        if self.kind == "top_p":
            ok = self.inside[prev, X].all(axis=1)
            return np.where(ok, -self.log_mass[prev].sum(axis=1), -np.inf)
        if self.kind == "stale":
            P, eps = self.chain.probs, self.size
            p_t = P[prev[:, 1:], X[:, 1:]]
            q_t = (1 - eps) * p_t + eps * P[prev[:, :-1], X[:, 1:]]
            return np.log(q_t / p_t).sum(axis=1)
        return self.L[prev, X].sum(axis=1)

    def threshold(self, N: int) -> float:
        """The 1 − α quantile of Λ over N null sequences (sums of N pool values)."""
        if N not in self.critical:
            sums = np.empty(self.null_runs)
            step = max(1, 2_000_000 // N)
            for i in range(0, self.null_runs, step):
                k = min(step, self.null_runs - i)
                sums[i:i + k] = self.pool[self.rng.integers(self.pool.size, size=(k, N))].sum(axis=1)
            self.critical[N] = float(np.quantile(sums, 1 - self.alpha))
        return self.critical[N]

    def __call__(self, first, X) -> dict:
        lam = float(self.per_sequence(first, X).sum())
        out = {"LR e-value (a = α)": lam >= math.log(1 / self.alpha),
               "LR e-value (a = 3α/16)": lam >= math.log(16 / (3 * self.alpha))}
        if self.kind == "top_p":  # exact: every token inside and Π M ≤ α
            out["oracle"] = lam >= math.log(1 / self.alpha)
        else:
            out["oracle"] = lam > self.threshold(len(first))
        return out


def crossing(points, level=0.9):
    """The smallest N whose power reaches ``level`` (log-linear interpolation), or None."""
    for (n0, p0), (n1, p1) in zip(points, points[1:]):
        if p0 < level <= p1:
            return round(math.exp(math.log(n0) + (level - p0) / (p1 - p0) * (math.log(n1) - math.log(n0))), 1)
    return points[0][0] if points and points[0][1] >= level else None


def clopper_pearson(k, n, conf=0.95):
    lo = sps.beta.ppf((1 - conf) / 2, k, n - k + 1) if k else 0.0
    hi = sps.beta.ppf(1 - (1 - conf) / 2, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--alpha", type=float, default=ALPHA)
    ap.add_argument("--runs", type=int, default=200, help="runs a point (ours and the LR tests)")
    ap.add_argument("--mmd-runs", type=int, default=50)
    ap.add_argument("--null-runs", type=int, default=1000, help="exact runs of the family at N = 60 (the null)")
    ap.add_argument("--defects", default=",".join(DEFECTS), help="comma-separated planted defects to run")
    ap.add_argument("--only", default="ours,oracle,null",
                    help="comma-separated parts to (re)compute: ours (the family), oracle (the LR tests), MMD, "
                         "null (the family's false alarms); the others are read from --merge")
    ap.add_argument("--merge", default=None, help="a raw JSON of an earlier run whose other parts are kept")
    ap.add_argument("--check", type=int, default=4, help="runs per defect of FastFamily.check (0: skip)")
    ap.add_argument("--leak-grids", action="store_true",
                    help="print leak_grid_need for LEAK_GRIDS at 3α/16 and α, and stop")
    args = ap.parse_args()
    alpha = float(args.alpha)
    if args.leak_grids:
        chain = MarkovChain(512, seed=0)
        draft = chain.draft(noise=DRAFT_NOISE)
        for lams in LEAK_GRIDS:
            print(f"λ grid {lams}: N at power 0.9 {leak_grid_need(chain, draft, lams, 3 * alpha / 16)} at 3α/16, "
                  f"{leak_grid_need(chain, draft, lams, alpha)} at α", flush=True)
        return
    only = set(args.only.split(","))
    defects = [d for d in args.defects.split(",") if d]
    runs = 24 if args.quick else args.runs
    chain = MarkovChain(512, seed=0)
    draft = chain.draft(noise=DRAFT_NOISE)
    rng = np.random.default_rng(2026)
    started = time.time()
    tag = "" if alpha == ALPHA else f"_alpha{alpha:g}"
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "V": 512, "n": N_TOKENS,
           "alpha": alpha, "runs": runs, "curves": {}, "null": {}}
    if args.merge:
        old = json.loads(Path(args.merge).read_text())
        out["curves"], out["null"] = old.get("curves", {}), old.get("null", {})
        out["merged_from"] = {"file": args.merge, "date": old.get("date"), "kept": sorted(
            {"ours", "oracle", "MMD", "null"} - only)}
    fam = FastFamily(chain, draft, alpha)
    print(f"{time.time() - started:7.0f}s tables built", flush=True)
    if args.check:
        worst = fam.check(chain, draft, rng, [None] + [DEFECTS[d] for d in defects], runs=args.check)
        out["check_max_abs_diff"] = worst
        print(f"{time.time() - started:7.0f}s check: FastFamily = family_test (largest difference {worst:.2e})",
              flush=True)
    grid = QUICK_GRID if args.quick else GRID
    for name in defects:
        defect = DEFECTS[name]
        curves = out["curves"].setdefault(name, {})
        oracle = Oracle(chain, draft, defect, alpha, rng) if "oracle" in only else None
        if "ours" in only or "oracle" in only:
            keys = (["ours", f"ours: {AIMED[name]} alone"] if "ours" in only else []) + (
                ["oracle", "LR e-value (a = α)", "LR e-value (a = 3α/16)"] if "oracle" in only else [])
            for k in keys:
                curves[k] = []
            done = {k: 0 for k in keys}
            for N in grid[name]:
                hits = {k: 0 for k in keys}
                for run in range(runs):
                    first = np.full(N, PROMPT)
                    X = sample_many(chain, first, N_TOKENS, rng, defect, draft)
                    if "ours" in only:
                        r = fam(first, X, run)
                        hits["ours"] += r["family"]
                        hits[f"ours: {AIMED[name]} alone"] += r[AIMED[name]]
                    if oracle is not None:
                        for k, v in oracle(first, X).items():
                            hits[k] += v
                for k in keys:
                    curves[k].append((N, hits[k] / runs))
                    if hits[k] / runs >= 0.999:
                        done[k] += 1
                print(f"{time.time() - started:7.0f}s {name:11s} N={N:5d} " +
                      " ".join(f"{k} {hits[k] / runs:.3f}" for k in keys), flush=True)
                if all(v >= 2 for v in done.values()):
                    break
        if "MMD" in only:
            pts = []
            for N in MMD_GRID:
                hits = 0
                for run in range(args.mmd_runs):
                    first = np.full(N, PROMPT)
                    X = sample_many(chain, first, N_TOKENS, rng, defect, draft)
                    Y = sample_many(chain, first, N_TOKENS, rng)
                    hits += mmd_pvalue(X, Y, chain.V, rng) <= alpha
                pts.append((N, hits / args.mmd_runs))
                print(f"{time.time() - started:7.0f}s {name:11s} MMD N={N} power {pts[-1][1]:.2f}", flush=True)
                if pts[-1][1] >= 0.99 or (N >= 2000 and pts[-1][1] < 0.2 and name == "leak 1%"):
                    break
            curves["MMD"] = pts
        save(out, tag)  # after every defect: an interrupted run keeps what it measured
    if "null" in only:
        for N, n_runs in ((60, args.null_runs), (300, max(1, args.null_runs // 5))):
            k = sum(fam(np.full(N, PROMPT), sample_many(chain, np.full(N, PROMPT), N_TOKENS, rng), r)["family"]
                    for r in range(n_runs))
            out["null"][f"ours N={N}"] = {"runs": n_runs, "rejected": int(k), "ci95": clopper_pearson(k, n_runs)}
            print(f"null ours N={N}: {k}/{n_runs}", flush=True)
    out["seconds"] = time.time() - started
    save(out, tag)
    plot(out, tag)
    print(markdown(out))


def save(out, tag: str) -> None:
    (HERE / "raw").mkdir(exist_ok=True)
    (HERE / "raw" / f"sequence_power{tag}.json").write_text(json.dumps(out, indent=1))


STYLES = (("oracle", "k--", "oracle (Neyman–Pearson, knows the defect)"),
          ("LR e-value (a = α)", "k:", "LR e-value at α (Ville)"),
          ("LR e-value (a = 3α/16)", "C7:", "LR e-value at 3α/16"),
          ("ours", "C0-o", "ours (the family)"),
          ("MMD", "C3-s", "MMD"))


def plot(out, tag: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = [n for n in DEFECTS if n in out["curves"]]
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.8), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        curves = out["curves"][name]
        for method, style, label in STYLES:
            pts = curves.get(method, [])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, ms=4)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(name)
        ax.set_xlabel("sequences N (16 tokens each)")
        ax.axhline(0.9, color="grey", lw=0.5)
    axes[0][0].set_ylabel(f"power at α = {out['alpha']:g}")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Markov chain V = {out['V']}, {out['runs']} runs a point ({out['date'][:10]})")
    fig.tight_layout()
    (HERE / "plots").mkdir(exist_ok=True)
    fig.savefig(HERE / "plots" / f"sequence_power{tag}.png", dpi=110)


def markdown(out) -> str:
    cols = ["oracle", "LR e-value (a = α)", "LR e-value (a = 3α/16)", "ours"]
    lines = ["| planted defect | oracle LR (NP) | LR e-value at α | LR e-value at 3α/16 | ours: its test alone at 3α/16 "
             "| ours (the family) | ours / oracle | MMD |", "|---|---|---|---|---|---|---|---|"]
    for name, curves in out["curves"].items():
        n = {k: crossing(curves.get(k, [])) for k in cols}
        alone = next((k for k in curves if k.startswith("ours: ")), None)
        n_alone = crossing(curves[alone]) if alone else None
        m = crossing(curves.get("MMD", []))
        ratio = f"{n['ours'] / n['oracle']:.2f}" if n["ours"] and n["oracle"] else "-"
        if m:
            mmd_txt = str(m)
        elif curves.get("MMD"):
            mmd_txt = f"> {curves['MMD'][-1][0]} (power {curves['MMD'][-1][1]:.2f})"
        else:
            mmd_txt = "-"
        lines.append(f"| {name} | {n['oracle']} | {n['LR e-value (a = α)']} | {n['LR e-value (a = 3α/16)']} | "
                     f"{n_alone} | {n['ours']} | {ratio} | {mmd_txt} |")
    lines.append("")
    lines.append("| test (null) | runs | rejected | 95 % interval |")
    lines.append("|---|---|---|---|")
    for key, v in out["null"].items():
        lines.append(f"| {key} | {v['runs']} | {v['rejected']} | [{v['ci95'][0]:.4f}, {v['ci95'][1]:.4f}] |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
