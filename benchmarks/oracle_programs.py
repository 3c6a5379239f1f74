"""Solve times of the oracle programs (oracle.programs) on growing (V, K, L).

For each program and each size series, solves seeded random full-support instances
(reference.models.RandomModel, concentration 1) of growing size, each in a child process
killed after ``--limit`` seconds (default 60), and stops the series at the first solve that
does not finish in time.  Prints one line per solve and, per program, the largest instance
(by number of variables) solved within the limit.

Times are wall seconds in the child: ``total`` = building the arrays + cvxpy canonicalisation
+ solving; ``solver`` = the time the solver reports.

Usage:  python benchmarks/oracle_programs.py [--limit 60] [--programs global_ot ...]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import platform
import sys
import time

import numpy as np

from spectr_gbv.oracle import programs
from spectr_gbv.oracle.bounds import bound_B
from spectr_gbv.reference.models import RandomModel

# Size series per program, each a list of (V, K, L) in increasing size.  A series stops at
# its first solve over the limit; a size whose variable count exceeds MAX_VARIABLES is not
# attempted (memory: cvxpy's canonicalisation holds several copies of the sparse rows).
SERIES = {
    "cic_program": [
        [(V, 2, 2) for V in (2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64)],
        [(V, 3, 2) for V in (2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64)],
        [(2, 2, L) for L in (1, 2, 4, 6, 8, 9, 10, 11, 12)],
        [(3, 2, L) for L in (1, 2, 3, 4, 5, 6, 7)],
    ],
    "cic_block_program": [
        [(V, 2, 2) for V in (2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64)],
        [(2, 2, L) for L in (1, 2, 4, 6, 8, 9, 10, 11, 12)],
        [(3, 2, L) for L in (1, 2, 3, 4, 5, 6, 7)],
    ],
    "global_ot": [
        [(V, 2, 2) for V in (2, 3, 4, 5, 6, 8, 10, 12, 14)],
        [(V, 3, 2) for V in (2, 3, 4, 5, 6, 7, 8)],
        [(2, K, 2) for K in (1, 2, 3, 4, 6, 8, 10, 12)],
        [(2, 2, L) for L in (1, 2, 3, 4, 5, 6, 7)],
        [(2, 3, L) for L in (1, 2, 3, 4, 5)],
        [(3, 2, L) for L in (1, 2, 3, 4)],
    ],
    "global_ot[POT]": [
        [(V, 2, 2) for V in (2, 4, 8, 10, 12, 14, 16, 18, 20)],
        [(V, 3, 2) for V in (2, 4, 6, 7, 8, 9, 10)],
        [(2, K, 2) for K in (1, 2, 4, 8, 12, 16, 24, 32)],
        [(2, 2, L) for L in (1, 2, 4, 6, 7, 8, 9)],
        [(2, 3, L) for L in (1, 2, 4, 5, 6, 7)],
        [(3, 2, L) for L in (1, 2, 3, 4, 5)],
    ],
    "no_modification_lp": [
        [(V, 2, 2) for V in (2, 3, 4, 5, 6, 8, 10, 12, 14)],
        [(V, 3, 2) for V in (2, 3, 4, 5, 6, 7, 8)],
        [(2, K, 2) for K in (1, 2, 3, 4, 6, 8, 10, 12)],
        [(2, 2, L) for L in (1, 2, 3, 4, 5, 6, 7)],
        [(2, 3, L) for L in (1, 2, 3, 4, 5)],
        [(3, 2, L) for L in (1, 2, 3, 4)],
    ],
}
MAX_VARIABLES = 3e7
# "name[SOLVER]" runs the program with solver=SOLVER


def estimated_variables(program: str, V: int, K: int, L: int) -> float:
    """Variables of a full-support instance (an upper bound for no_modification_lp)."""
    N = V**L
    program = program.split("[")[0]
    if program.startswith("cic"):
        return float(N * N)
    draft_sets = math.comb(N + K - 1, K)  # symmetric=True: multisets of K draft blocks
    return float(draft_sets * N * (2 if program == "no_modification_lp" else 1))


def _child(program: str, V: int, K: int, L: int, conn) -> None:
    # HiGHS prints a banner from C++ on its first use in a process; keep the table clean.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    p = RandomModel(V, 1, 1.0).block_law(L)
    q = RandomModel(V, 2, 1.0).block_law(L)
    name, _, solver = program.partition("[")
    kwargs = {"solver": solver.rstrip("]")} if solver else {}
    res = getattr(programs, name)(p, q, K, return_coupling=False, **kwargs)
    conn.send(
        dict(
            status=res.status,
            optimum=res.optimum,
            B=bound_B(p, q, K),
            seconds=res.seconds,
            solve_seconds=res.solve_seconds,
            n_variables=res.n_variables,
            n_constraints=res.n_constraints,
        )
    )
    conn.close()


def run_one(program: str, V: int, K: int, L: int, limit: float) -> dict:
    """Solve one instance in a child process; status 'timeout' if it runs past ``limit``."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(program, V, K, L, child))
    start = time.perf_counter()
    proc.start()
    child.close()
    out = None
    if parent.poll(limit):
        try:
            out = parent.recv()
        except EOFError:  # the child died without sending (e.g. out of memory)
            out = None
    wall = time.perf_counter() - start
    if proc.is_alive():
        proc.kill()  # only the child started above, by its own handle
    proc.join()
    if out is None:
        status = "timeout" if wall >= limit else f"crashed (exit code {proc.exitcode})"
        return dict(status=status, wall=wall)
    out["wall"] = wall
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=60.0, help="per-solve time limit, seconds")
    ap.add_argument("--programs", nargs="*", default=list(SERIES), choices=list(SERIES))
    args = ap.parse_args(argv)

    import cvxpy

    if any(name.endswith("[POT]") for name in args.programs):
        import ot  # noqa: F401  imported once here so that the forked solves do not time it

    print(
        f"# oracle programs benchmark: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {sys.version.split()[0]}, cvxpy {cvxpy.__version__}, numpy {np.__version__}"
    )
    print(f"# instances RandomModel(V, seed 1 / 2, concentration 1); limit {args.limit:.0f} s per solve")
    ok = ("optimal", "optimal_inaccurate")
    for program in args.programs:
        print(f"\n## {program}")
        print(
            f"{'V':>3} {'K':>2} {'L':>2} {'variables':>10} {'rows':>8} {'total s':>8} {'solver s':>8}  "
            f"{'optimum':>10} {'B(K,L)':>9}  status"
        )
        largest = None
        for series in SERIES[program]:
            for V, K, L in series:
                est = estimated_variables(program, V, K, L)
                if est > MAX_VARIABLES:
                    print(f"{V:>3} {K:>2} {L:>2} {est:>10.3g}  not attempted (> {MAX_VARIABLES:.0e} variables)")
                    break
                r = run_one(program, V, K, L, args.limit)
                if r["status"] in ok:
                    solver_s = f"{r['solve_seconds']:8.2f}" if r["solve_seconds"] is not None else f"{'-':>8}"
                    print(
                        f"{V:>3} {K:>2} {L:>2} {r['n_variables']:>10d} {r['n_constraints']:>8d} "
                        f"{r['seconds']:>8.2f} {solver_s}  {r['optimum']:>10.6f} {r['B']:>9.6f}  {r['status']}"
                    )
                    if largest is None or r["n_variables"] > largest[3]:
                        largest = (V, K, L, r["n_variables"], r["seconds"])
                else:
                    print(f"{V:>3} {K:>2} {L:>2} {est:>10.3g} {'':>8} {r['wall']:>8.1f}  {r['status']}")
                sys.stdout.flush()
                if r["status"] not in ok:
                    break
        if largest:
            V, K, L, nv, sec = largest
            print(f"largest solved within {args.limit:.0f} s: V={V} K={K} L={L}, {nv} variables, {sec:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
