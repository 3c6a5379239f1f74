"""False alarms of a certificate continued over many looks (issue 58 item 4; oracle.look_spending).

``log`` (default): correct logs of the test chain (V = 64, top-20 lists as vLLM sends them, requests of mixed T,
top-p, top-k, min-p: ``tests/helpers/recorded_logs.py``), each grown by ``--lines-per-look`` lines
``--looks`` times; after each growth ``certify log`` runs on the grown file:

- **continued**: ``certify_log(path, resume=partial)``, the looks counted in the partial result
  (look j: KS rows and report tests at α/(j(j+1)), e-values at their whole share);
- **fresh each look** (no spending): a new certificate of the whole file at every look, each at α —
  what a user gets who re-runs the command without ``--resume``.

``endpoint``: ``certify endpoint``'s run (``certify_deployment``, the fake deployment in process,
reference ``self``'s top-20 lists, a fixed plan) continued with ``--resume`` ``--looks`` times,
``--samples-per-look`` more samples each time (continued); and a new run file of the same samples
at each look (fresh each look).

A replicate's false alarm: any look FAILs.  Prints the rate of each, with a 95 % Clopper–Pearson
interval, and the first look that failed.  Usage::

    .venv/bin/python benchmarks/repeated_looks.py log --replicates 40 --looks 100 --alpha 0.2 \
        --out benchmarks/raw/repeated_looks_alpha0.2.json
    .venv/bin/python benchmarks/repeated_looks.py endpoint --replicates 20 --looks 100 --alpha 0.2 \
        --out benchmarks/raw/repeated_looks_endpoint_alpha0.2.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from scipy import stats  # noqa: E402

from helpers.recorded_logs import make_log  # noqa: E402
from spectr_gbv.certify.log.run import LogPlan, certify_log  # noqa: E402


def _interval(k: int, n: int) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def replicate(r: int, looks: int, per_look: int, alpha: float, work: Path) -> dict:
    """One log grown ``looks`` times; the first failing look of each way (None: none failed)."""
    whole = work / f"whole{r}.jsonl"
    make_log(whole, looks * per_look, seed=10_000 + r)
    lines = whole.read_text().splitlines(keepends=True)
    grown, partial = work / f"log{r}.jsonl", str(work / f"part{r}.json")
    grown.write_text("")
    plan = LogPlan(alpha=alpha, vocab=64)
    first = {"continued": None, "fresh": None}
    for j in range(1, looks + 1):
        with open(grown, "a") as f:
            f.writelines(lines[(j - 1) * per_look:j * per_look])
        if first["continued"] is None:
            cert = certify_log(str(grown), plan, resume=partial if j > 1 else None, out=partial)
            assert cert.look == j, (cert.look, j)
            if cert.verdict == "FAIL":
                first["continued"] = j
        if first["fresh"] is None and certify_log(str(grown), plan).verdict == "FAIL":
            first["fresh"] = j
        if first["continued"] is not None and first["fresh"] is not None:
            break
    for p in (whole, grown):
        p.unlink()
    return first


def endpoint_replicate(r: int, looks: int, per_look: int, alpha: float, work: Path) -> dict:
    """One certify endpoint run file continued ``looks`` times (fixed plans of per_look·j samples,
    8 tokens each, seeds 1000·r + …); the first failing look of each way (None: none failed)."""
    from helpers.in_process_deployment import Engine, Reference
    from spectr_gbv.certify.endpoint.run import Plan, certify_deployment, plan_dict
    from spectr_gbv.certify.endpoint.store import RunFile

    prompts = [[1], [2], [3], [4]]
    engine = Engine()
    ref = Reference(engine.server)
    first = {"continued": None, "fresh": None}
    path = work / f"run{r}.jsonl"
    for j in range(1, looks + 1):
        plan = Plan(n_samples=per_look * j, n_new=8, replays=0, concurrency=1, alpha=alpha, seed=1000 * r)
        if first["continued"] is None:
            cert = certify_deployment(engine, ref, prompts, plan, RunFile(path, plan_dict(plan), resume=j > 1))
            assert cert.look == j, (cert.look, j)
            if cert.verdict == "FAIL":
                first["continued"] = j
        if first["fresh"] is None:
            # the same samples (the same seeds) read back into a new run file: look 1 of a new certificate
            fresh = work / f"fresh{r}.jsonl"
            lines = [x for x in path.read_text().splitlines() if '"kind":"look"' not in x]
            fresh.write_text("\n".join(lines) + "\n")
            cert = certify_deployment(engine, ref, prompts, plan, RunFile(fresh, plan_dict(plan), resume=True))
            fresh.unlink()
            if cert.verdict == "FAIL":
                first["fresh"] = j
        if first["continued"] is not None and first["fresh"] is not None:
            break
    path.unlink(missing_ok=True)
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("log", "endpoint"))
    ap.add_argument("--replicates", type=int, default=40)
    ap.add_argument("--first", type=int, default=0, help="the first replicate's number (its seeds): batches add up")
    ap.add_argument("--looks", type=int, default=100)
    ap.add_argument("--lines-per-look", type=int, default=4, help="log: lines added at each look")
    ap.add_argument("--samples-per-look", type=int, default=4, help="endpoint: samples added at each look")
    ap.add_argument("--alpha", type=float, default=0.2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.first, args.first + args.replicates):
            if args.what == "log":
                rows.append(replicate(r, args.looks, args.lines_per_look, args.alpha, Path(tmp)))
            else:
                rows.append(endpoint_replicate(r, args.looks, args.samples_per_look, args.alpha, Path(tmp)))
            done = len(rows)
            c = sum(x["continued"] is not None for x in rows)
            f = sum(x["fresh"] is not None for x in rows)
            print(f"replicate {done}/{args.replicates}: false alarms so far continued {c}, fresh each look {f} "
                  f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
            if args.out:  # what is measured so far survives a stop
                _write(args, rows, started)
    _write(args, rows, started)


def _write(args, rows, started) -> None:
    n = len(rows)
    out = {"what": args.what, "replicates": n, "first": args.first, "looks": args.looks, "alpha": args.alpha,
           "wall_s": time.perf_counter() - started}
    out.update({"lines_per_look": args.lines_per_look, "tokens_per_line": 16} if args.what == "log" else
               {"samples_per_look": args.samples_per_look, "tokens_per_sample": 8})
    for way in ("continued", "fresh"):
        k = sum(x[way] is not None for x in rows)
        out[way] = {"false_alarms": k, "rate": k / n if n else None, "ci95": _interval(k, n) if n else None,
                    "first_failing_looks": sorted(x[way] for x in rows if x[way] is not None)}
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
