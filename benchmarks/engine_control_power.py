"""Power of a ``certify engine`` mode's certificate over many independent runs.

``sample``: draw a pool of continuations from one mode of ``spectr-gbv certify engine NAME``
(the mode whose name contains ``--mode``; the models, prompt, T and 16 tokens of the command's
defaults), one JSON line per sample (its seed and tokens) appended to ``--out`` as it is drawn:
a stopped run keeps what it drew and a rerun resumes after the last seed.  An engine that draws a
batch per call (vLLM's ``sample_many``: one engine start per call) draws ``--batch`` samples a
call, by default the command's own N, so that one call is one run of the command; each call's
speculation counters (the engine's ``stats()``) go to ``--out`` + ``.stats.jsonl``.  The seeds start at
``--seed`` (default 1,000,000: disjoint from the command's own seeds 0, 1, …).

``test``: the pool's records against the mode's reference (and the draft's law where the mode
gives one: the draft-leak test), then, for each N of ``--plan-samples`` (the command's default N
for the engine unless given), ``--runs`` disjoint plans of N (default: as many as the pool holds)
and, with ``--subsets``, that many plans of N drawn at random from the pool (overlapping: a finer estimate of the same power, not an independent
one), each tested by ``oracle.sequence_family.family_test`` at the mode's α (α/2 where the
engine's own drafts are tested too: the token family's share, so the power printed is a lower
bound on the certificate's).  Prints one JSON line per N and kind of plan: plans, plans failed, the power's 95 %
Clopper–Pearson interval, the tests that fired, and each directional statistic per plan.

Run: ``python benchmarks/engine_control_power.py sample ours --mode shared --samples 2000 --out
FILE`` then ``python benchmarks/engine_control_power.py test ours --mode shared --from FILE``.
Results: benchmarks/ENGINE_CONTROL_POWER.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deployment_power import test as plan_power  # noqa: E402

from spectr_gbv.certify.engine.modes import (  # noqa: E402
    DEFAULT_NEW_TOKENS, DEFAULT_SAMPLES, Models, modes)
from spectr_gbv.oracle.sequence_records import records_from_laws  # noqa: E402


def the_mode(engine: str, part: str):
    """The one mode of ``engine`` whose name contains ``part``.  Raises ValueError otherwise."""
    found = [m for m in modes(engine) if part in m.name]
    if len(found) != 1:
        raise ValueError(f"--mode {part!r} matches {[m.name for m in found]} of {engine}: name one mode")
    return found[0]


def sample(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    mode = the_mode(args.engine, args.mode)
    done = set()
    if os.path.exists(args.out):
        with open(args.out) as fh:
            done = {json.loads(line)["seed"] for line in fh if line.strip()}
    models = Models(threads=args.threads)
    engine, _, _ = mode.build(models)
    prompt = models.prompt_ids()
    todo = [args.seed + i for i in range(args.samples) if args.seed + i not in done]
    print(f"{mode.name}: {len(done)} samples in {args.out}, {len(todo)} to draw", flush=True)
    # an engine with ``sample_many`` (vLLM: one engine start per call) draws ``--batch`` samples a
    # call, the command's own N by default: one call is then one run of the command
    many = hasattr(engine, "sample_many")
    batch = args.batch or (DEFAULT_SAMPLES[args.engine] if many else 1)
    started = time.time()
    with open(args.out, "a") as fh:
        for j in range(0, len(todo), batch):
            seeds = todo[j:j + batch]
            if many:
                drawn = engine.sample_many([prompt] * len(seeds), DEFAULT_NEW_TOKENS, seeds)
                if callable(getattr(engine, "stats", None)):  # the call's counters, beside the pool
                    with open(args.out + ".stats.jsonl", "a") as sh:
                        sh.write(json.dumps({"seeds": [seeds[0], seeds[-1]], "stats": engine.stats()}) + "\n")
            else:
                drawn = [engine(prompt, DEFAULT_NEW_TOKENS, s) for s in seeds]
            for s, tokens in zip(seeds, drawn):
                fh.write(json.dumps({"seed": s, "tokens": [int(t) for t in tokens]}) + "\n")
            fh.flush()
            k = j + len(seeds)
            if k % 20 < len(seeds) or k == len(todo):
                rate = (time.time() - started) / k
                print(f"{time.strftime('%H:%M:%S')} {k}/{len(todo)} ({rate:.2f} s/sample, "
                      f"{rate * (len(todo) - k) / 60:.0f} min left)", flush=True)


def records(args) -> tuple:
    """(the pool's records in seed order, the mode, whether its engine gives its drafts)."""
    mode = the_mode(args.engine, args.mode)
    models = Models(threads=args.threads)
    engine, laws, _ = mode.build(models)
    prompt = models.prompt_ids()
    with open(args.source) as fh:
        pool = [json.loads(line) for line in fh if line.strip()]
    pool.sort(key=lambda e: e["seed"])
    draft_laws = getattr(engine, "draft_laws", None)
    def along(reference, chunk):  # the references batch their forwards where they can
        items = [(prompt, e["tokens"]) for e in chunk]
        return reference.many(items) if hasattr(reference, "many") else [reference(*it) for it in items]

    out = []
    for start in range(0, len(pool), 40):
        chunk = pool[start:start + 40]
        rows = along(laws, chunk)
        drafts = along(draft_laws, chunk) if draft_laws else [None] * len(chunk)
        out += [records_from_laws(e["tokens"], law, d) for e, law, d in zip(chunk, rows, drafts)]
        print(f"{time.strftime('%H:%M:%S')} records {len(out)}/{len(pool)}", file=sys.stderr, flush=True)
    gives_drafts = getattr(engine, "gives_drafts", False)
    return out, mode, gives_drafts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("sample", "test"):
        p = sub.add_parser(name)
        p.add_argument("engine")
        p.add_argument("--mode", required=True, help="a substring naming one mode of the engine")
        p.add_argument("--threads", type=int, default=2)
        if name == "sample":
            p.add_argument("--samples", type=int, required=True)
            p.add_argument("--seed", type=int, default=1_000_000)
            p.add_argument("--out", required=True)
            p.add_argument("--batch", type=int, default=0,
                           help="samples per sample_many call (default: the command's N where the engine batches, else 1)")
        else:
            p.add_argument("--from", dest="source", required=True)
            p.add_argument("--plan-samples", default="", help="N of a plan, or several comma-separated (default: the command's)")
            p.add_argument("--runs", type=int, default=10**9, help="disjoint plans (default: as many as the pool holds)")
            p.add_argument("--subsets", type=int, default=0)
            p.add_argument("--alpha", type=float, default=1e-3)
    args = ap.parse_args()
    try:
        the_mode(args.engine, args.mode)
    except ValueError as err:  # an unknown engine or a --mode naming no mode, or several
        ap.error(str(err))
    if args.what == "sample":
        if args.samples < 1 or args.batch < 0:
            ap.error(f"--samples must be >= 1 and --batch >= 0, got {args.samples} and {args.batch}")
        sample(args)
        return
    started = time.time()
    recs, mode, gives_drafts = records(args)
    alpha = args.alpha / 2 if gives_drafts else args.alpha
    sizes = [int(n) for n in args.plan_samples.split(",")] if args.plan_samples else [DEFAULT_SAMPLES[args.engine]]
    for n_plan in sizes:
        for subsets in sorted({0, args.subsets}):
            result = plan_power(recs, min(args.runs, len(recs) // n_plan), subsets, n_plan, alpha=alpha)
            result.update({"mode": mode.name, "pool": len(recs), "plan_samples": n_plan, "subsets": subsets,
                           "alpha_tokens": alpha, "seconds": time.time() - started})
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
