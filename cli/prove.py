"""``spectr-gbv prove``: every claim as a numerical check, with a verdict table."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    from spectr_gbv.cli.args import add_json_flag, output_file

    p = subparsers.add_parser(
        "prove",
        help="check every claim of the papers numerically and print the verdict table",
        description="Each claim is measured on fixed instances and a hypothesis search (shrinking "
        "failures to small counterexamples); the table says what holds and what does not.",
    )
    p.add_argument("--quick", action="store_true", help="few instances (under 2 minutes)")
    p.add_argument("--claims", default=None, help="comma-separated claim ids (default: all)")
    add_json_flag(p, "the results")
    p.add_argument("--markdown", type=output_file, default=None, help="write the verdict table as markdown to FILE")
    p.add_argument("--no-tables", action="store_true", help="skip the reported E[tau] and generation tables")
    p.set_defaults(func=run, check=check)


def check(args: argparse.Namespace) -> None:
    """Unknown claim ids are refused, listing the valid ones."""
    from spectr_gbv.cli.args import claim_ids

    from spectr_gbv.proofs_check.claims import build_claims

    if args.claims is not None:
        args.claim_ids = claim_ids(args.claims, [c.id for c in build_claims()])


def run(args: argparse.Namespace) -> int:
    from spectr_gbv.cli.args import text_stream, write_json

    mode = "quick" if args.quick else "full"
    if args.claims is not None and getattr(args, "claim_ids", None) is None:  # check() not run
        check(args)
    ids = args.claim_ids if args.claims is not None else None

    out = text_stream(args)

    def progress(r):
        print(f"{r.id:>4}  {r.verdict:5s}  dev {r.worst_deviation:9.3g}  n={r.instances:3d}  "
              f"{r.seconds:6.1f}s  {r.claim}", flush=True, file=out)

    from spectr_gbv.proofs_check import runner

    verdicts = runner.prove(mode, ids, tables=not args.no_tables, progress=progress)
    for title, table in verdicts.tables.items():
        print(f"\n{title}\n{table}", file=out)
    print(f"\n{len(verdicts.results)} claims checked in {verdicts.seconds:.0f} s "
          f"({sum(r.verdict == 'holds' for r in verdicts.results)} hold, "
          f"{sum(r.verdict == 'fails' for r in verdicts.results)} fail)", file=out)
    command = "spectr-gbv prove" + (" --quick" if args.quick else "")
    write_json(args.json_file, [r.to_json() for r in verdicts.results])
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(runner.markdown(verdicts, command))
    return 0
