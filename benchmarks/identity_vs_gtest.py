"""The whole law at V = 151,936: δ(N) of the joint G-test, the coarsened G-test and the identity
test (oracle/identity.py), against Valiant & Valiant's instance-optimal sample count.

For one Zipf(1.1) row, five branches of it, one Dirichlet(0.05) row and five branches of it
(oracle.coarsen.llm_row / branch_law), at N = 10^5, 3·10^5, 10^6, 3·10^6, 10^7 and α = 10^-6
over the six tests of a large certification case (1.67·10^-7 each):

* δ of the joint G-test on the whole law (``gtest_power(...).detectable_tv_law``: its bound on
  the pooled cells plus the pooled mass);
* δ of the coarsened test on the coarsened law (64 bins; not a bound on the whole law);
* δ of the identity test on the whole law (least favourable direction) and its worst-case bound;
* Valiant–Valiant: ε_VV(N), the ε at which ‖p_{-max}^{-ε}‖_{2/3}/ε² = N (constants 1), and the
  ratio N / n_VV(δ_identity) — how many times the instance-optimal count the test uses.

Then, at N = 10^6 per law, simulated from the exact law (multinomial counts): the identity test's
false-alarm rate at α = 10^-2 and at the certification's α, and its detection rate at the least
favourable deviation of TV = its stated δ (stated power 0.99).

Run: ``python benchmarks/identity_vs_gtest.py`` (about 5 min of CPU on one core; ``--quick``: fewer
replicates).  Writes benchmarks/raw/identity_vs_gtest.json and benchmarks/plots/identity_vs_gtest.png
and prints the markdown table of benchmarks/IDENTITY.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy import optimize

from spectr_gbv.oracle.coarsen import QWEN_V, branch_law, coarse_power, llm_row
from spectr_gbv.oracle.identity import (detection_rate, identity_power, identity_test,
                                        instance_optimal_samples, least_favourable)
from spectr_gbv.oracle.gtest_power import gtest_power

HERE = Path(__file__).resolve().parent
NS = (10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7)
ALPHA = 1e-6 / 6
LAWS = (("Zipf(1.1) row", "zipf", 1), ("five Zipf(1.1) branches", "zipf", 5),
        ("Dirichlet(0.05) row", "dirichlet", 1), ("five Dirichlet(0.05) branches", "dirichlet", 5))


def vv_eps(law, n: int) -> float:
    """ε with instance_optimal_samples(law, ε) = n (it decreases in ε)."""
    f = lambda e: math.log(instance_optimal_samples(law, e)) - math.log(n)  # noqa: E731
    return optimize.brentq(f, 1e-6, 0.999, xtol=1e-10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer replicates")
    args = ap.parse_args()
    reps_null, reps_power = (60, 30) if args.quick else (200, 100)
    rows, sims = [], []
    start = time.perf_counter()
    for label, shape, branches in LAWS:
        law, group = branch_law(llm_row(QWEN_V, shape), branches)
        for n in NS:
            g = gtest_power(law, n, ALPHA)
            c = coarse_power(law, n, ALPHA, group=group)
            i = identity_power(law, n, ALPHA)
            row = dict(law=label, N=n, support=int((law > 0).sum()),
                       gtest_delta=g.detectable_tv_law, gtest_pooled_mass=g.merged_mass,
                       coarse_delta=c.detectable_tv_law, identity_delta=i.detectable_tv,
                       identity_delta_worst_case=i.detectable_tv_worst_case,
                       identity_head_cells=i.head_cells, identity_tail_mass=i.tail_mass,
                       identity_tail_excess=i.tail_excess, vv_eps=vv_eps(law, n),
                       vv_samples_at_identity_delta=instance_optimal_samples(law, i.detectable_tv),
                       vv_samples_at_0_02=instance_optimal_samples(law, 0.02))
            row["ratio_to_instance_optimal"] = n / row["vv_samples_at_identity_delta"]
            rows.append(row)
            print(f"{label}, N = {n:.0e}: G {row['gtest_delta']:.4f}, coarse {row['coarse_delta']:.4f}, "
                  f"identity {row['identity_delta']:.4f} (worst case {row['identity_delta_worst_case']:.4f}), "
                  f"VV ε {row['vv_eps']:.4f}, N / n_VV(δ) = {row['ratio_to_instance_optimal']:.2f} "
                  f"[{time.perf_counter() - start:.0f} s]", flush=True)
        n = 10**6
        pw = identity_power(law, n, ALPHA)
        reps = reps_null if branches == 1 else reps_null // 2
        rng = np.random.default_rng(1)
        sampling = law / law.sum()  # as oracle.identity.detection_rate samples
        pvals = np.array([identity_test(rng.multinomial(n, sampling), law, ALPHA).pvalue for _ in range(reps)])
        fa_1e2, fa_alpha = float(np.mean(pvals < 1e-2)), float(np.mean(pvals < ALPHA))
        lf = least_favourable(law, pw.detectable_tv, n, ALPHA, seed=2)
        preps = reps_power if branches == 1 else reps_power // 2
        det = detection_rate(lf, law, n, ALPHA, preps, seed=3)
        sims.append(dict(law=label, N=n, null_reps=reps, false_alarm_at_0_01=fa_1e2,
                         false_alarm_at_alpha=fa_alpha, alpha=ALPHA, delta=pw.detectable_tv,
                         power_reps=preps, detection_at_delta=det))
        print(f"{label}, N = 10^6: false alarms {fa_1e2 * reps:.0f} / {reps} at α = 0.01, "
              f"{fa_alpha * reps:.0f} / {reps} at α = {ALPHA:.3g}; least favourable deviation at "
              f"δ = {pw.detectable_tv:.4f} detected {det * preps:.0f} / {preps} "
              f"[{time.perf_counter() - start:.0f} s]", flush=True)
    out = dict(generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), V=QWEN_V,
               alpha_per_test=ALPHA, rows=rows, simulations=sims, seconds=time.perf_counter() - start)
    raw = HERE / "raw" / "identity_vs_gtest.json"
    raw.write_text(json.dumps(out, indent=1) + "\n")
    plot(rows, HERE / "plots" / "identity_vs_gtest.png")
    print(table(rows, sims))


def table(rows, sims) -> str:
    lines = ["| law (V = 151,936 per row) | N | G-test δ (whole law) | coarsened δ (64 bins) | "
             "identity δ (whole law) | identity δ, worst case | VV ε at N | N / n_VV(identity δ) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['law']} | {r['N']:.0e} | {r['gtest_delta']:.4f} | {r['coarse_delta']:.4f} | "
                     f"{r['identity_delta']:.4f} | {r['identity_delta_worst_case']:.4f} | {r['vv_eps']:.4f} | "
                     f"{r['ratio_to_instance_optimal']:.2f} |")
    lines += ["", "| law, N = 10^6 | false alarms at α = 0.01 | at α = 1.67·10^-7 | detected at the "
              "least favourable deviation, TV = δ |", "|---|---|---|---|"]
    for s in sims:
        lines.append(f"| {s['law']} | {s['false_alarm_at_0_01'] * s['null_reps']:.0f} / {s['null_reps']} | "
                     f"{s['false_alarm_at_alpha'] * s['null_reps']:.0f} / {s['null_reps']} | "
                     f"{s['detection_at_delta'] * s['power_reps']:.0f} / {s['power_reps']} "
                     f"(δ = {s['delta']:.4f}) |")
    return "\n".join(lines)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LAWS), figsize=(4.2 * len(LAWS), 3.8), sharey=True)
    for ax, (label, _, _) in zip(axes, LAWS):
        rs = [r for r in rows if r["law"] == label]
        ns = [r["N"] for r in rs]
        ax.loglog(ns, [r["gtest_delta"] for r in rs], "o-", label="joint G-test (whole law)")
        ax.loglog(ns, [r["coarse_delta"] for r in rs], "s--", label="coarsened, 64 bins (binned law only)")
        ax.loglog(ns, [r["identity_delta"] for r in rs], "^-", label="identity test (whole law)")
        ax.loglog(ns, [r["identity_delta_worst_case"] for r in rs], "^:", label="identity, worst-case bound")
        ax.loglog(ns, [r["vv_eps"] for r in rs], "k-", lw=0.8, label="Valiant–Valiant ε (constant 1)")
        ax.axhline(0.02, color="grey", lw=0.5)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("N")
    axes[0].set_ylabel("δ detected with power 0.99 (α = 10^-6 over 6 tests)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
