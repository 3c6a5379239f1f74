"""Study of the multi-draft rules that leave later iterations untouched (docs/rules.md §2.8–§2.10).

Regenerates the tables of proofs_check/NON_MODIFYING_RULES.md:

1. Exact E[τ] of one iteration (reference.exact.expected_tau, the law of the rule's own code)
   for SpecTr, K-SEQ-BV, Traversal Verification and MDBV, against the no-modification LP and
   the global block OT (oracle.programs), on the toy of docs/toy.md and on fuzzed
   prefix-dependent instances: V ∈ {2, 3}, K ∈ {2, 3}, L ∈ {2, 3}, Dirichlet concentrations
   from peaked (0.1) to flat (30), and rows with zero-probability tokens (zero_prob 0.3).
   Win/loss counts of MDBV against each rule, and its gap to the LP in % (1 − E[τ]/LP).
2. Exact whole-generation tokens per target call, reference.exact.generation_law(...)
   .tokens_per_call for N = 2L..4L emitted tokens, on the toy, for every lossless rule
   (greedy ones with their Algorithm 2 windows), with the TV of the first N tokens to the
   target's law as a losslessness check.

Usage:
    python -m spectr_gbv.proofs_check.non_modifying_study [--quick] [--md PATH] [--json PATH]

``--single-position`` adds the one-position comparison of the node mechanisms (section 3 of
the note): α* (Hu et al.), K-SEQ, class-K-SEQ, count-priority and MDBV's node choice, on random
(p, q, K), seconds.

``--lp-structure`` adds the check of the characterisation of the no-modification LP by the
acceptance masses A(z) (section 2 of the note) against oracle.programs.no_modification_lp,
the optimal A on the toy, and the greedy bound G.

``--only-device-variant`` writes only the comparison of MDBV-KSEQ (MDBV with K-SEQ at every
node, the rule with a batched port: gpu_backend/verifiers/mdbv_kseq.py) with MDBV and the other
rules: exact E[τ] on the instances above, and whole-generation tokens per target call on the toy
and on fuzzed models for every lossless multi-draft rule (section 8 of the note).

``--quick`` leaves out the V = 3, K = 3, L = 3 instances (19683 draft configurations per
decode state, about a minute per rule each) and the N = 12 generations at L = 3.  The full run
takes about half an hour on one core.

LP solver: HiGHS (oracle default); when it does not return "optimal" (it reports some
instances with probabilities near 1e-25 as infeasible), CLARABEL is used and the table says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field

from spectr_gbv.oracle.programs import global_ot, no_modification_lp
from spectr_gbv.proofs_check.instances import Instance, random_instance, toy
from spectr_gbv.reference.exact import expected_tau, generation_law, target_law, total_variation
from spectr_gbv.reference.rules import RULES, registry
from spectr_gbv.reference.rules.kseq_bv import KSeqBV
from spectr_gbv.reference.rules.mdbv import MultiDraftBlockVerification
from spectr_gbv.reference.rules.traversal import TraversalVerification

NON_MODIFYING = {
    "spectr": RULES["spectr"],
    "kseq_bv": KSeqBV(),
    "traversal": TraversalVerification(),
    "mdbv": MultiDraftBlockVerification(),
}
# (concentration, zero_prob): peaked to flat, then zero-probability tokens
SETTINGS = ((0.1, 0.0), (0.3, 0.0), (1.0, 0.0), (3.0, 0.0), (30.0, 0.0), (1.0, 0.3))
TIE = 1e-9  # |difference| below this counts as a tie (exact values agree to ~1e-12)


def study_instances(quick: bool = False) -> list[Instance]:
    """The toy (K = 2, 3 at L = 2; K = 2 at L = 3) and the fuzzed grid, deterministic seeds."""
    out = [toy(2, 2), toy(3, 2), toy(2, 3)]
    seed = 0
    for V in (2, 3):
        for K in (2, 3):
            for L in (2, 3):
                big = V ** (K * L) > 729
                if big and quick:
                    continue
                settings = SETTINGS[2:4] if big else SETTINGS  # the slow cell gets two
                for conc, zero in settings:
                    out.append(random_instance(V, K, L, seed, conc, zero))
                    seed += 1
    return out


def solve(program, inst: Instance) -> tuple[float, str]:
    """Optimum of an oracle program, HiGHS first, CLARABEL if HiGHS fails."""
    p_block, q_block = inst.draft.block_law(inst.L), inst.target.block_law(inst.L)
    res = program(p_block, q_block, inst.K, return_coupling=False)
    if res.status == "optimal":
        return res.optimum, "HIGHS"
    highs_status = res.status
    res = program(p_block, q_block, inst.K, return_coupling=False, solver="CLARABEL")
    return res.optimum, f"CLARABEL ({res.status}; HiGHS: {highs_status})"


@dataclass
class Row:
    label: str
    V: int
    K: int
    L: int
    tau: dict = field(default_factory=dict)  # rule → exact E[τ]
    lp: float = float("nan")
    ot: float = float("nan")
    solver: str = ""
    seconds: float = 0.0

    @property
    def gap(self) -> float:
        """MDBV's gap to the no-modification LP, in % of the LP (0 when the LP is 0)."""
        return 100.0 * (1.0 - self.tau["mdbv"] / self.lp) if self.lp > 1e-12 else 0.0


def expected_tau_table(instances: list[Instance], log=sys.stderr) -> list[Row]:
    rows = []
    for inst in instances:
        t0 = time.perf_counter()
        row = Row(str(inst), inst.V, inst.K, inst.L)
        for name, rule in NON_MODIFYING.items():
            row.tau[name] = expected_tau(rule, inst.draft, inst.target, inst.K, inst.L)
        row.lp, solver_lp = solve(no_modification_lp, inst)
        row.ot, solver_ot = solve(global_ot, inst)
        row.solver = solver_lp if solver_lp == solver_ot else f"{solver_lp} / {solver_ot}"
        row.seconds = time.perf_counter() - t0
        rows.append(row)
        print(f"  {row.label}: mdbv {row.tau['mdbv']:.6f} LP {row.lp:.6f} ({row.seconds:.1f}s)", file=log, flush=True)
    return rows


def win_loss(rows: list[Row]) -> dict[str, tuple[int, int, int]]:
    """For each other rule: (MDBV wins, ties, losses) over the rows."""
    out = {}
    for name in NON_MODIFYING:
        if name == "mdbv":
            continue
        diffs = [r.tau["mdbv"] - r.tau[name] for r in rows]
        out[name] = (sum(d > TIE for d in diffs), sum(abs(d) <= TIE for d in diffs), sum(d < -TIE for d in diffs))
    return out


# ---- whole generation ----------------------------------------------------------------------

LOSSLESS = {  # rule → the K it runs with on the toy (single-draft rules: K = 1)
    "sd": 1, "bv": 1, "gbv": 1,
    "spectr": None, "kseq_gbv": None, "kseq_bv": None, "traversal": None, "mdbv": None,
}


def generation_table(quick: bool = False, log=sys.stderr) -> list[dict]:
    """Tokens per target call on the toy, every lossless rule, N = 2L..4L."""
    rules = dict(RULES)
    rules.update(NON_MODIFYING)
    cases = [(2, 2, (4, 6, 8)), (3, 2, (4, 6, 8)), (2, 3, (6, 9) if quick else (6, 9, 12))]
    out = []
    for K_multi, L, Ns in cases:
        for name, K_fixed in LOSSLESS.items():
            K = K_fixed or K_multi
            if K_fixed and K_multi != 2:  # single-draft rules once per L
                continue
            inst = toy(K, L)
            for N in Ns:
                t0 = time.perf_counter()
                gen = generation_law(rules[name], inst.draft, inst.target, K, L, N)
                tv = total_variation(gen.token_law, target_law(inst.target, N))
                out.append({"rule": name, "K": K, "L": L, "N": N, "tokens_per_call": gen.tokens_per_call,
                            "tv": tv, "seconds": time.perf_counter() - t0})
                print(f"  {name} K={K} L={L} N={N}: {gen.tokens_per_call:.6f} tok/call, TV {tv:.1e}",
                      file=log, flush=True)
    return out


# ---- MDBV-KSEQ, the variant with a batched port ---------------------------------------------

VARIANT_RULES = ("spectr", "kseq_bv", "traversal", "mdbv_kseq", "mdbv")
# fuzzed generation models: (V, K, L, seed, concentration, zero_prob), N = 2L..4L while
# V^N ≤ GENERATION_MAX_OUTCOMES (the largest, V = 3 and N = 8, dominates the run time)
GENERATION_MODELS = ((2, 2, 2, 101, 1.0, 0.0), (2, 2, 2, 102, 3.0, 0.0), (2, 2, 2, 104, 0.3, 0.0),
                     (2, 2, 2, 107, 1.0, 0.3), (3, 2, 2, 103, 1.0, 0.0), (2, 3, 2, 105, 1.0, 0.0),
                     (2, 2, 3, 106, 1.0, 0.0))
GENERATION_MAX_OUTCOMES = 5000


def device_variant_tables(quick: bool = False, log=sys.stderr) -> str:
    """Markdown: MDBV-KSEQ beside MDBV, SpecTr, K-SEQ-BV and Traversal (exact E[τ] per
    iteration on ``study_instances``; wins/ties/losses; its loss against MDBV) and tokens per
    target call over whole generations (toy and GENERATION_MODELS) for every lossless
    multi-draft rule (greedy ones with Algorithm 2)."""
    lines = ["#### MDBV-KSEQ: exact E[τ] per iteration", "",
             "| instance | " + " | ".join(VARIANT_RULES) + " | MDBV-KSEQ below MDBV |",
             "|---|" + "---|" * (len(VARIANT_RULES) + 1)]
    taus = []
    for inst in study_instances(quick):
        t = {n: expected_tau(RULES[n], inst.draft, inst.target, inst.K, inst.L) for n in VARIANT_RULES}
        taus.append(t)
        below = 100.0 * (1.0 - t["mdbv_kseq"] / t["mdbv"]) if t["mdbv"] > 1e-12 else 0.0
        lines.append(f"| {inst} | " + " | ".join(f"{t[n]:.6f}" for n in VARIANT_RULES) + f" | {below:.2f} % |")
        print(f"  {inst}: mdbv_kseq {t['mdbv_kseq']:.6f} mdbv {t['mdbv']:.6f}", file=log, flush=True)
    lines.append("")
    lines.append(f"Instances: {len(taus)}.  MDBV-KSEQ against each rule (wins / ties / losses, ties within {TIE:g}):")
    lines.append("")
    for other in ("spectr", "kseq_bv", "traversal", "mdbv"):
        d = [t["mdbv_kseq"] - t[other] for t in taus]
        lines.append(f"- {other}: {sum(x > TIE for x in d)} / {sum(abs(x) <= TIE for x in d)} / {sum(x < -TIE for x in d)}")
    gaps = [100.0 * (1.0 - t["mdbv_kseq"] / t["mdbv"]) for t in taus if t["mdbv"] > 1e-12]
    lines += ["", f"MDBV-KSEQ below MDBV: mean {sum(gaps) / len(gaps):.2f} %, worst {max(gaps):.2f} %.", ""]
    multi = registry.names(lossless=True, single_draft=False)
    lines += ["#### Whole generation: tokens per target call (exact), lossless multi-draft rules", "",
              "| model | K | L | N | " + " | ".join(multi) + " | max TV |", "|---|---|---|---|" + "---|" * (len(multi) + 1)]
    models = [("toy", toy(K, L), K, L) for K, L in ((2, 2), (3, 2), (2, 3))]
    models += [(f"random V={V} seed={seed} conc={conc}", random_instance(V, K, L, seed, conc, zero), K, L)
               for V, K, L, seed, conc, zero in GENERATION_MODELS]
    for label, inst, K, L in models:
        Ns = (2 * L, 3 * L) if quick else (2 * L, 3 * L, 4 * L)
        for N in (N for N in Ns if inst.V ** N <= GENERATION_MAX_OUTCOMES):
            vals, tv = [], 0.0
            for name in multi:
                gen = generation_law(RULES[name], inst.draft, inst.target, K, L, N)
                tv = max(tv, total_variation(gen.token_law, target_law(inst.target, N)))
                vals.append(gen.tokens_per_call)
            best = max(vals)
            cells = [f"**{v:.4f}**" if v >= best - 1e-12 else f"{v:.4f}" for v in vals]
            lines.append(f"| {label} | {K} | {L} | {N} | " + " | ".join(cells) + f" | {tv:.0e} |")
            print(f"  {label} K={K} L={L} N={N} done", file=log, flush=True)
    return "\n".join(lines) + "\n"


# ---- structure of the no-modification LP ---------------------------------------------------


def _prefixes(V: int, L: int) -> list[tuple[int, ...]]:
    import itertools

    return [z for i in range(1, L + 1) for z in itertools.product(range(V), repeat=i)]


def _antichains(V: int, L: int, prefix: tuple[int, ...] = ()) -> list[list[tuple[int, ...]]]:
    """Every antichain (no element a prefix of another) of non-empty prefixes below ``prefix``,
    the empty one included.  Exponential: V = 2, L ≤ 3 or V = 3, L ≤ 2 only."""
    import itertools

    if len(prefix) == L:
        return [[]]
    per_child = [[[prefix + (x,)]] + _antichains(V, L, prefix + (x,)) for x in range(V)]
    return [[z for part in combo for z in part] for combo in itertools.product(*per_child)]


def acceptance_lp(inst: Instance) -> tuple[float, dict]:
    """max Σ_z A(z) over A(z) = P(τ ≥ |z|, accepted prefix = z) subject to
        A(zx) ≤ A(z)·q(x | z)                      (the correction at z has mass ≥ 0)
        Σ_{z∈S} A(z) ≤ 1 − (1 − p(S))^K              (every antichain S: the accepted prefix
                                                      must be carried by some draft)
    Returns (optimum, A).  The note's claim: this equals the no-modification LP."""
    import numpy as np
    from scipy.optimize import linprog

    V, K, L = inst.V, inst.K, inst.L
    nodes = _prefixes(V, L)
    idx = {z: j for j, z in enumerate(nodes)}
    rows, rhs = [], []
    for z in nodes:
        row = np.zeros(len(nodes))
        row[idx[z]] = 1.0
        qx = float(inst.target.conditional(z[:-1])[z[-1]])
        if len(z) > 1:
            row[idx[z[:-1]]] -= qx
            rhs.append(0.0)
        else:
            rhs.append(qx)
        rows.append(row)
    p_joint = {z: inst.draft.joint(z) for z in nodes}
    for S in _antichains(V, L):
        if S:
            row = np.zeros(len(nodes))
            row[[idx[z] for z in S]] = 1.0
            rows.append(row)
            rhs.append(1.0 - (1.0 - sum(p_joint[z] for z in S)) ** K)
    res = linprog(-np.ones(len(nodes)), A_ub=np.array(rows), b_ub=np.array(rhs), bounds=(0, None),
                  method="highs")
    return -res.fun, {z: float(res.x[idx[z]]) for z in nodes}


def greedy_bound(inst: Instance) -> float:
    """Σ_z G(z), G(zx) = min(G(z)·q(x|z), 1 − (1 − p(zx))^K): the relaxation keeping only the
    one-element antichains; ≥ the LP, equal when no larger antichain binds."""
    G = {(): 1.0}
    total = 0.0
    for z in _prefixes(inst.V, inst.L):
        G[z] = min(G[z[:-1]] * float(inst.target.conditional(z[:-1])[z[-1]]),
                   1.0 - (1.0 - inst.draft.joint(z)) ** inst.K)
        total += G[z]
    return total


def lp_structure_table() -> str:
    from fractions import Fraction

    cases = [toy(2, 2), toy(3, 2), toy(2, 3), random_instance(3, 2, 2, 0, 0.3),
             random_instance(3, 3, 2, 1, 1.0, 0.3), random_instance(2, 3, 3, 4, 0.3),
             random_instance(2, 2, 3, 5, 3.0)]
    lines = ["### The no-modification LP in acceptance masses A(z)", "",
             "| instance | oracle LP | LP over A(z) | difference | greedy bound G |", "|---|---|---|---|---|"]
    for inst in cases:
        lp, _ = solve(no_modification_lp, inst)
        alp, _ = acceptance_lp(inst)
        lines.append(f"| {inst} | {lp:.9f} | {alp:.9f} | {alp - lp:.1e} | {greedy_bound(inst):.6f} |")
    _, A = acceptance_lp(toy(2, 2))
    lines += ["", "Optimal A on the toy, K = L = 2 (a = 0, b = 1), with the two caps:", "",
              "| z | A(z) | A(parent)·q(last token ∣ parent) | 1 − (1 − p(z))^K |", "|---|---|---|---|"]
    inst = toy(2, 2)
    for z, a in A.items():
        parent = A.get(z[:-1], 1.0)
        cap_res = parent * float(inst.target.conditional(z[:-1])[z[-1]])
        cover = 1.0 - (1.0 - inst.draft.joint(z)) ** 2
        name = "".join("ab"[t] for t in z)
        lines.append(f"| {name} | {Fraction(a).limit_denominator(1000)} | {Fraction(cap_res).limit_denominator(1000)} "
                     f"| {Fraction(cover).limit_denominator(1000)} |")
    return "\n".join(lines) + "\n"


# ---- one position -------------------------------------------------------------------------


def single_position_table(n: int = 1000, seed: int = 0) -> str:
    """Node mechanisms at one position (L = 1, budget w = 1) against α* on random (p, q, K).

    V ∈ {2..6}, K ∈ {2..4}, Dirichlet concentrations 0.1..30.  Reports the worst and mean gap
    to α* (Hu et al., ICLR 2025; oracle.bounds.alpha_star) and how often each family beats
    the other.
    """
    import numpy as np

    from spectr_gbv.oracle.bounds import alpha_star
    from spectr_gbv.reference.kseq import rho_star
    from spectr_gbv.reference.rules import mdbv

    rng = np.random.default_rng(seed)
    gaps = {"K-SEQ": [], "class-K-SEQ (best cut)": [], "count-priority": [], "MDBV node (better of the two)": []}
    count_better = class_better = 0
    for _ in range(n):
        V = int(rng.integers(2, 7))
        K = int(rng.integers(2, 5))
        conc = float(rng.choice([0.1, 0.3, 1.0, 3.0, 30.0]))
        p = rng.dirichlet(np.full(V, conc))
        q = rng.dirichlet(np.full(V, conc))
        a = alpha_star(p, q, K)
        if a <= 1e-9:
            continue
        kseq = float(np.minimum(rho_star(p, q, K) * p, q).sum())
        counts = mdbv.node_mechanism(p, q, 1.0, K, families=("counts",)).total
        classes = mdbv.node_mechanism(p, q, 1.0, K, families=("classes",)).total
        node = mdbv.node_mechanism(p, q, 1.0, K).total
        count_better += counts > classes + 1e-9
        class_better += classes > counts + 1e-9
        for name, v in zip(gaps, (kseq, classes, counts, node)):
            gaps[name].append(100.0 * (1.0 - v / a))
    lines = ["### One position: node mechanisms against α* (gap in % of α*)", "",
             f"{len(gaps['K-SEQ'])} random (p, q, K), V ∈ 2..6, K ∈ 2..4, concentrations 0.1..30.  "
             f"Count-priority beats class-K-SEQ on {count_better}, class-K-SEQ beats count-priority on "
             f"{class_better}.", "", "| mechanism | worst gap | mean gap |", "|---|---|---|"]
    for name, g in gaps.items():
        lines.append(f"| {name} | {max(g):.2f} % | {sum(g) / len(g):.3f} % |")
    return "\n".join(lines) + "\n"


# ---- report --------------------------------------------------------------------------------


def markdown(rows: list[Row], gens: list[dict]) -> str:
    lines = ["### Exact E[τ] per iteration (accepted tokens; block efficiency = E[τ] + 1)", "",
             "| instance | SpecTr | K-SEQ-BV | Traversal | MDBV | no-mod LP | global OT | MDBV gap to LP |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best = max(r.tau[n] for n in ("spectr", "kseq_bv", "traversal"))
        mark = "" if r.tau["mdbv"] >= best - TIE else " ✗"
        solver = "" if r.solver == "HIGHS" else " ‡"
        lines.append(f"| {r.label} | {r.tau['spectr']:.6f} | {r.tau['kseq_bv']:.6f} | {r.tau['traversal']:.6f} "
                     f"| {r.tau['mdbv']:.6f}{mark} | {r.lp:.6f}{solver} | {r.ot:.6f} | {r.gap:.2f} % |")
    fuzz = [r for r in rows if not r.label.startswith("toy")]
    wl = win_loss(fuzz)
    gaps = sorted(fuzz, key=lambda r: -r.gap)
    lines += ["", "✗: MDBV below the best of the three other rules.  ‡: LP solved by CLARABEL (HiGHS failed).", "",
              f"Fuzzed instances: {len(fuzz)}.  MDBV against each rule (wins / ties / losses, ties within {TIE:g}):", ""]
    for name, (w, t, l) in wl.items():
        lines.append(f"- {name}: {w} / {t} / {l}")
    lines += ["", f"Gap of MDBV to the no-modification LP: worst {gaps[0].gap:.2f} % ({gaps[0].label}), "
              f"mean {sum(r.gap for r in fuzz) / len(fuzz):.2f} %, "
              f"{sum(r.gap > 2.0 for r in fuzz)} of {len(fuzz)} above 2 %.", "",
              "### Whole generation on the toy: tokens per target call (exact)", "",
              "| rule | K | L | " + " | ".join(f"N = {n}" for n in sorted({g['N'] for g in gens})) + " | max TV |",
              "|---|---|---|" + "---|" * len({g['N'] for g in gens}) + "---|"]
    Ns = sorted({g["N"] for g in gens})
    keys = []
    for g in gens:
        if (g["rule"], g["K"], g["L"]) not in keys:
            keys.append((g["rule"], g["K"], g["L"]))
    for rule, K, L in keys:
        cells = {g["N"]: g for g in gens if (g["rule"], g["K"], g["L"]) == (rule, K, L)}
        tv = max(c["tv"] for c in cells.values())
        lines.append(f"| {rule} | {K} | {L} | " + " | ".join(
            f"{cells[n]['tokens_per_call']:.4f}" if n in cells else "" for n in Ns) + f" | {tv:.0e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip V=3,K=3,L=3 and N=12 at L=3")
    ap.add_argument("--md", help="write the Markdown tables here (default: stdout)")
    ap.add_argument("--json", help="also write the raw numbers as JSON")
    ap.add_argument("--single-position", action="store_true", help="add the one-position table")
    ap.add_argument("--only-single-position", action="store_true", help="only the one-position table")
    ap.add_argument("--lp-structure", action="store_true", help="add the A(z) characterisation check")
    ap.add_argument("--only-lp-structure", action="store_true", help="only the A(z) characterisation check")
    ap.add_argument("--only-device-variant", action="store_true",
                    help="only the MDBV-KSEQ comparison (E[tau] and whole generations)")
    args = ap.parse_args(argv)
    if args.only_device_variant:
        text = device_variant_tables(args.quick)
        if args.md:
            with open(args.md, "w") as fh:
                fh.write(text)
        else:
            print(text)
        return 0
    if args.only_single_position or args.only_lp_structure:
        print(single_position_table() if args.only_single_position else lp_structure_table())
        return 0
    print("E[tau] table", file=sys.stderr)
    rows = expected_tau_table(study_instances(args.quick))
    print("whole generation", file=sys.stderr)
    gens = generation_table(args.quick)
    text = markdown(rows, gens)
    if args.single_position:
        text += "\n" + single_position_table()
    if args.lp_structure:
        text += "\n" + lp_structure_table()
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text)
    else:
        print(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": [asdict(r) | {"gap": r.gap} for r in rows], "generation": gens}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
