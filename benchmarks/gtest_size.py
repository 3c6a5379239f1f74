"""The null size of the certification tests on the real plan's V = 4,096 cases, before and after
the null-mean correction of ``oracle.gtest.gtest`` (benchmarks/GTEST_SIZE.md).

    python benchmarks/gtest_size.py [--reps 20000] [--family-reps 3000] [--rules sd,spectr]
                                    [--json benchmarks/raw/gtest_size.json]

For each V = 4,096 case of ``spectr-gbv certify``'s full plan (``gpu_backend.certify.verifiers.plan``:
``suite.large_case`` of every rule without distinctive seeds, in float32 at N = 10^6 and in
bfloat16 at N = 2·10^6, and ``suite.distinctive_cases``' rows of kseq_bv, traversal and mdbv at
N = 10^6), samples are drawn from the case's EXACT law (``oracle.certify.exact_verdict_law``: the
null hypothesis holds exactly) and each test of ``oracle.certify._family`` is computed on them:

* the joint G-test (``--reps`` replicates, drawn directly on its pooled cells: the pooling
  depends on the law and N only): G − dof, Var G / (2 dof), and the false-alarm rate at
  α = 10^-2, 10^-3 of the χ² p-value of G (the code before the correction) and of G/s (after:
  s = ``oracle.gtest_cells.gtest_null_mean_scale``);
* the family (``--family-reps`` replicates of N outcomes): the law of τ, the token given
  (τ, prefix) (``conditional_gtests``: the key marginal and every eligible key), the mean of τ
  and the coarsened law, each test's false-alarm rate at α = 10^-2 and the family's at α = 10^-2
  (each test at α/n_tests, as ``certify_case``), before and after.

Replicas: the G statistics are computed here in vectorised form with the pooling of
``oracle.gtest_cells.pool_cells``; for each case the first replicates are checked against
``oracle.gtest.gtest`` itself (the p-values agree to 1e-9).  The conditional tests pool at
the key's expected count N·P(k) (the real test pools at the observed count, within ~0.1 % of
it; the check reports the largest p-value difference this makes).

Runs in the project's environment (torch for the cases); about 10-15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from scipy import stats

from spectr_gbv.oracle.certify import COARSE_BINS, outcome_tau, exact_verdict_law, family_size
from spectr_gbv.oracle.coarsen import equal_mass_bins
from spectr_gbv.oracle.conditional_gtest import conditional_gtests
from spectr_gbv.oracle.gtest import gtest, law_of
from spectr_gbv.oracle.gtest_cells import gtest_null_mean_ratio, gtest_null_mean_scale, pool_cells
from spectr_gbv.reference.rules import get_rule

ALPHAS = (1e-2, 1e-3)
FAMILY_ALPHA = 1e-2
MIN_EXPECTED = 5.0


# -- the cases -----------------------------------------------------------------------------------

def plan_cases(rules=None):
    """Yields (name, case, N) of the full plan's V = 4,096 rows (module doc)."""
    from spectr_gbv.certify import suite
    from spectr_gbv.certify.verifiers.run import FULL_N_ROWS
    from spectr_gbv.reference.rules import registry

    for spec in registry.specs():
        rule = spec.name
        if rules and rule not in rules:
            continue
        if spec.distinctive_seeds is not None:
            case = suite.distinctive_cases(rule)[1]
            yield case.name, case, FULL_N_ROWS["rows"]
            continue
        for dt, size in (("float32", "rows"), ("bfloat16", "rows_bf16")):
            case = suite.large_case(rule, dt)
            yield case.name, case, FULL_N_ROWS[size]


# -- a vectorised replica of gtest on fixed pooling -----------------------------------------------

class Pooled:
    """gtest's cells for a law (float [cells] > 0, Σ = 1) at n: the groups of ``pool_cells``
    as a column map, the rare cells, and the scale s."""

    def __init__(self, probs: np.ndarray, n: int):
        groups, rare = pool_cells(probs, n, MIN_EXPECTED)
        self.n_cells = len(groups)
        self.dof = self.n_cells - 1
        self.column = np.full(probs.size, self.n_cells, dtype=np.int64)  # rare → last column
        for j, g in enumerate(groups):
            self.column[g] = j
        self.rare = bool(rare)
        self.P = np.array([math.fsum(probs[g]) for g in groups])
        self.rare_mass = math.fsum(probs[rare]) if rare else 0.0
        e = n * self.P / self.P.sum()
        n_g = n - int(round(n * self.rare_mass))
        self.scale = gtest_null_mean_scale(e, n_g)
        self.ratio = gtest_null_mean_ratio(e, n_g)  # the exact mean alone (G·dof/E₀[G])
        self.n = n

    def group_probs(self) -> np.ndarray:
        return np.append(self.P, self.rare_mass) if self.rare else self.P

    def pool(self, counts: np.ndarray) -> np.ndarray:
        """[R, cells] → [R, n_cells (+1 rare)] counts."""
        out = np.zeros((counts.shape[0], self.n_cells + 1))
        np.add.at(out.T, self.column, counts.T)
        return out if self.rare else out[:, :-1]

    def pvalues(self, pooled: np.ndarray, mean_only: bool = False):
        """(G, p before, p after) for [R, n_cells (+1)] pooled counts; with rare cells the
        p-value is min(1, 2·min(p_G, binomial tail)), as gtest's.  ``mean_only``: "after" with
        the exact-mean scale E₀[G]/dof instead of gtest's."""
        O = pooled[:, :self.n_cells]
        n_g = O.sum(1, keepdims=True)
        E = n_g * self.P / self.P.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            G = np.maximum(2.0 * np.where(O > 0, O * np.log(O / E), 0.0).sum(1), 0.0)
        if self.dof < 1:
            one = np.ones(len(G))
            return G, one, one
        before = stats.chi2.sf(G, self.dof)
        after = stats.chi2.sf(G / (max(1.0, self.ratio) if mean_only else self.scale), self.dof)
        if self.rare:
            r = pooled[:, -1]
            tail = np.where(r > 0, stats.binom.sf(r - 1, self.n, self.rare_mass), 1.0)
            before = np.minimum(1.0, 2 * np.minimum(before, tail))
            after = np.minimum(1.0, 2 * np.minimum(after, tail))
        return G, before, after


def joint_null(law: dict, N: int, reps: int, seed: int) -> dict:
    """The joint G-test's null: moments of G and its size at ALPHAS, before and after."""
    outcomes = [o for o, p in law.items() if p > 0]
    probs = np.array([law[o] for o in outcomes])
    pooled = Pooled(probs, N)
    rng = np.random.default_rng(seed)
    gs, before, after = [], [], []
    gp = pooled.group_probs()
    gp = gp / gp.sum()
    mean_only = []
    for start in range(0, reps, 2000):
        counts = rng.multinomial(N, gp, size=min(2000, reps - start)).astype(np.float64)
        g, b, a = pooled.pvalues(counts)
        gs.append(g), before.append(b), after.append(a)
        mean_only.append(pooled.pvalues(counts, mean_only=True)[2])
    G, before, after, mean_only = map(np.concatenate, (gs, before, after, mean_only))
    # check the replica against oracle.gtest.gtest on a few full samples
    check = []
    for _ in range(3):
        full = rng.multinomial(N, probs)
        real = gtest(dict(zip(outcomes, full.tolist())), law, 0.01)
        _, _, a = pooled.pvalues(pooled.pool(full[None].astype(np.float64)))
        check.append(abs(real.pvalue - float(a[0])))
        assert abs(real.null_mean_scale - pooled.scale) < 1e-9 * pooled.scale
    e = N * pooled.P
    nu = pooled.dof
    Gs = G / pooled.scale
    out = {"dof": nu, "cells_expected_below_10": int((e < 10).sum()), "sum_inv_expected": float((1 / e).sum()),
           "pooled_mass_rare": pooled.rare_mass, "scale": pooled.scale, "mean_ratio": pooled.ratio, "reps": reps,
           "replica_check_max_dp": max(check)}
    for tag, s, p in (("before", G, before), ("mean_only", G / max(1.0, pooled.ratio), mean_only),
                      ("after", Gs, after)):
        out[tag] = {"mean_minus_dof": float(s.mean() - nu), "mean_se": float(s.std() / math.sqrt(reps)),
                    "var_over_2dof": float(s.var() / (2 * nu)),
                    "third_central_over_8dof": float(((s - s.mean()) ** 3).mean() / (8 * nu)),
                    "size": {f"{a:g}": float(np.mean(p < a)) for a in ALPHAS + (1e-4,)}}
    return out


# -- the family ---------------------------------------------------------------------------------

def family_null(law: dict, N: int, reps: int, seed: int) -> dict:
    """Each test of ``_family`` and the family: size at FAMILY_ALPHA (per test at α/n_tests and
    alone at α), before and after."""
    outcomes = [o for o, p in law.items() if p > 0]
    probs = np.array([law[o] for o in outcomes])
    index = {o: i for i, o in enumerate(outcomes)}
    n_tests = family_size(law)
    a_each = FAMILY_ALPHA / n_tests

    joint = Pooled(probs, N)
    taus = np.array([o[0] for o in outcomes])
    tau_law = law_of(law, outcome_tau)
    tau_vals = sorted(k for k, p in tau_law.items() if p > 0)
    tau_pool = Pooled(np.array([tau_law[t] for t in tau_vals]), N)
    tau_col = np.searchsorted(tau_vals, taus)
    mean_tau = float(probs @ taus)
    var_tau = max(float(probs @ (taus - mean_tau) ** 2), 1e-18)
    bins = equal_mass_bins(law, COARSE_BINS, group=outcome_tau) if n_tests == 5 else None
    if bins is not None:
        pos = {o: i for i, o in enumerate(bins.outcomes)}
        bin_of = np.array([bins.bin_index[pos[o]] for o in outcomes])
        coarse_pool = Pooled(bins.masses / bins.masses.sum(), N)
    # conditional: the key marginal and the eligible keys (law and N only), pooled at N·P(k)
    keys = [(o[0], o[1]) for o in outcomes]
    key_law = law_of(law, lambda o: (o[0], o[1]))
    key_list = sorted((k for k, p in key_law.items() if p > 0), key=repr)  # law_of keeps 0-mass keys
    key_index = {k: i for i, k in enumerate(key_list)}
    key_col = np.array([key_index[k] for k in keys])
    key_pool = Pooled(np.array([key_law[k] for k in key_list]), N)
    eligible = []
    for k in key_list:
        members = np.array([i for i, kk in enumerate(keys) if kk == k])
        if N * key_law[k] >= 10 * MIN_EXPECTED and members.size >= 2:
            eligible.append((k, members, Pooled(probs[members] / probs[members].sum(), int(round(N * key_law[k])))))
    n_cond = 1 + len(eligible)

    rng = np.random.default_rng(seed)
    names = ("joint", "tau", "conditional", "mean", "coarse")[:n_tests]
    rej = {t: {"before": np.zeros(reps, bool), "after": np.zeros(reps, bool),
               "before_alone": np.zeros(reps, bool), "after_alone": np.zeros(reps, bool)} for t in names}
    cond_dev = []
    done = 0
    check_dp = 0.0
    while done < reps:
        R = min(500, reps - done)
        C = rng.multinomial(N, probs, size=R).astype(np.float64)
        sl = slice(done, done + R)
        res = {}
        _, b, a = joint.pvalues(joint.pool(C))
        res["joint"] = (b, a)
        tc = np.zeros((R, len(tau_vals)))
        np.add.at(tc.T, tau_col, C.T)
        _, b, a = tau_pool.pvalues(tau_pool.pool(tc))
        res["tau"] = (b, a)
        z = (tc @ np.array(tau_vals, float) / N - mean_tau) / math.sqrt(var_tau / N)
        pm = 2 * stats.norm.sf(np.abs(z))
        res["mean"] = (pm, pm)
        if bins is not None:
            bc = np.zeros((R, bins.n_bins))
            np.add.at(bc.T, bin_of, C.T)
            _, b, a = coarse_pool.pvalues(coarse_pool.pool(bc))
            res["coarse"] = (b, a)
        kc = np.zeros((R, len(key_list)))
        np.add.at(kc.T, key_col, C.T)
        _, mb, ma = key_pool.pvalues(key_pool.pool(kc))  # keys of N·P < 5 pooled, rare ones apart
        minb, mina = mb.copy(), ma.copy()
        for k, members, pool in eligible:
            sub = C[:, members]
            G, b, a = pool.pvalues(pool.pool(sub))
            minb, mina = np.minimum(minb, b), np.minimum(mina, a)
            cond_dev.append((G - pool.dof, pool.dof, pool.scale))
        res["conditional"] = (np.minimum(1, n_cond * minb), np.minimum(1, n_cond * mina))
        if done == 0:  # check the conditional replica against oracle.conditional_gtest on one sample
            counts = {o: int(c) for o, c in zip(outcomes, C[0]) if c}
            real = conditional_gtests(counts, law, lambda o: (o[0], o[1]), 0.01)
            check_dp = abs(real.pvalue - float(res["conditional"][1][0]))
        for t in names:
            b, a = res[t]
            rej[t]["before"][sl], rej[t]["after"][sl] = b < a_each, a < a_each
            rej[t]["before_alone"][sl], rej[t]["after_alone"][sl] = b < FAMILY_ALPHA, a < FAMILY_ALPHA
        done += R
    out = {"n_tests": n_tests, "alpha": FAMILY_ALPHA, "alpha_each": a_each, "reps": reps,
           "eligible_keys": len(eligible), "conditional_replica_check_dp": check_dp, "tests": {}}
    for t in names:
        out["tests"][t] = {k: float(v.mean()) for k, v in rej[t].items()}
    for tag in ("before", "after"):
        out[f"family_{tag}"] = float(np.mean(np.any([rej[t][tag] for t in names], axis=0)))
    if cond_dev:
        by_key = {}
        for dev, dof, scale in cond_dev:
            by_key.setdefault(dof, []).append((dev, scale))
        out["conditional_keys"] = [
            {"dof": dof, "mean_G_minus_dof": float(np.mean(np.concatenate([d for d, _ in v]))),
             "scale": float(v[0][1])} for dof, v in sorted(by_key.items())]
    return out


def delta_before_after(law: dict, N: int, alpha: float = 1e-6) -> dict:
    """The case's stated δ (``oracle.certify.case_power``'s joint δ on the whole law, at
    α/n_tests) with the plain χ² critical value (before) and with gtest's scale (after)."""
    from spectr_gbv.oracle.gtest_power import pooled_detectable_tv, gtest_power

    a = alpha / family_size(law)
    after = gtest_power(law, N, a)
    before = pooled_detectable_tv(N, a, after.n_cells, after.rare_mass > 0, 1.0)
    return {"alpha_per_test": a, "scale": after.null_mean_scale, "merged_mass": after.merged_mass,
            "delta_pooled_before": before, "delta_pooled_after": after.detectable_tv,
            "delta_before": min(1.0, before + after.merged_mass), "delta_after": after.detectable_tv_law}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20_000)
    ap.add_argument("--family-reps", type=int, default=3_000)
    ap.add_argument("--rules", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--delta", action="store_true",
                    help="only the stated δ of each case before and after the correction (no simulation)")
    args = ap.parse_args(argv)
    rules = args.rules.split(",") if args.rules else None
    if args.delta:
        out = []
        print(f"{'case':50s} {'N':>8s} {'s':>7s} {'pooled mass':>11s} | δ before -> after (pooled part)")
        for name, case, N in plan_cases(rules):
            law = exact_verdict_law(get_rule(case.reference_rule), case.draft_tokens, case.draft_probs,
                                    case.target_probs)
            d = delta_before_after(law, N)
            print(f"{name[:50]:50s} {N:8d} {d['scale']:7.4f} {d['merged_mass']:11.4f} | "
                  f"{d['delta_before']:.4f} -> {d['delta_after']:.4f} "
                  f"({d['delta_pooled_before']:.4f} -> {d['delta_pooled_after']:.4f})", flush=True)
            out.append({"case": name, "N": N, **d})
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"date": time.strftime("%Y-%m-%d"), "alpha": 1e-6, "rows": out}, f, indent=1)
        return 0
    rows = []
    print("G − dof, Var/(2 dof) and the size at α = 1e-2, 1e-3, 1e-4 (÷ α) of: the χ² p-value of G (before), "
          "of G·dof/E₀[G] (exact mean only), of G/s (after, gtest's); family@1e-2 before -> after")
    print(f"{'case':50s} {'N':>8s} {'dof':>5s} {'s':>7s} | {'G − dof':>19s} | {'Var/(2 dof)':>17s} | "
          f"{'before':>17s} | {'mean only':>17s} | {'after':>17s} | family")
    for j, (name, case, N) in enumerate(plan_cases(rules)):
        t0 = time.perf_counter()
        law = exact_verdict_law(get_rule(case.reference_rule), case.draft_tokens, case.draft_probs,
                                case.target_probs)
        jn = joint_null(law, N, args.reps, 1000 + j)
        fam = family_null(law, N, args.family_reps, 2000 + j) if args.family_reps else None
        b, m, a = jn["before"], jn["mean_only"], jn["after"]

        def sizes(x):
            return " ".join(f"{x['size'][k] / float(k):.2f}x" for k in ("0.01", "0.001", "0.0001"))

        line = (f"{name[:50]:50s} {N:8d} {jn['dof']:5d} {jn['scale']:7.4f} | "
                f"{b['mean_minus_dof']:+6.1f} {m['mean_minus_dof']:+5.1f} {a['mean_minus_dof']:+6.1f} | "
                f"{b['var_over_2dof']:.3f} {m['var_over_2dof']:.3f} {a['var_over_2dof']:.3f} | "
                f"{sizes(b)} | {sizes(m)} | {sizes(a)}")
        if fam:
            line += f" | {fam['family_before']:.4f} -> {fam['family_after']:.4f}"
        print(line + f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
        rows.append({"case": name, "rule": case.rule, "dtype": case.backend_dtype, "N": N,
                     "joint": jn, "family": fam})
        if args.json:  # after every case: a long run stopped early keeps what it measured
            os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
            with open(args.json, "w") as f:
                json.dump({"date": time.strftime("%Y-%m-%d"), "reps": args.reps,
                           "family_reps": args.family_reps, "alphas": ALPHAS + (1e-4,),
                           "family_alpha": FAMILY_ALPHA, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
