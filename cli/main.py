"""The ``spectr-gbv`` command: one sub-command per job, each registered by its own package.

Each module listed in ``SUBCOMMANDS`` exposes ``register(subparsers)``, which adds its parser
and sets ``func`` (called with the parsed arguments, returning the exit status) and usually
``check`` (called first: cross-flag checks, input files, size estimates, before any model is
loaded).  The modules import their heavy dependencies (cvxpy, torch, transformers) inside
``func`` only, so that ``spectr-gbv exact`` works with numpy alone.

Bad arguments: one line on stderr, ``spectr-gbv SUB: message`` naming the flag (and the file),
exit status 2, no traceback (``cli.args``: argparse's own errors through
``CliParser.error``, ``UsageError`` from ``check`` or ``func``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from spectr_gbv.cli.args import CliParser, UsageError, one_line

# sub-command → module that registers it
SUBCOMMANDS = {
    "exact": "spectr_gbv.cli.exact",
    "oracle": "spectr_gbv.cli.oracle",
    "prove": "spectr_gbv.cli.prove",
    "certify": "spectr_gbv.cli.certify",
    "generate": "spectr_gbv.cli.generate",
    "bench": "spectr_gbv.cli.bench",
    "report": "spectr_gbv.cli.report",
}


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="spectr-gbv",
        description="Exact reference, oracles and torch verifiers for multi-draft block "
        "verification in speculative decoding.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # a sub-command whose module or optional dependency is missing stays listed,
            # and says what to install when it is called
            p = sub.add_parser(name, help=f"(unavailable: {exc.name} not installed)")
            p.set_defaults(func=_unavailable(name, exc))
            continue
        mod.register(sub)
    return parser


def _unavailable(name: str, exc: Exception):
    def run(_args) -> int:
        print(f"spectr-gbv {name}: unavailable ({exc}); install the project with its extras: "
              "pip install torch==2.13.0 -e '.[all]'", file=sys.stderr)
        return 2

    return run


def run_parsed(args: argparse.Namespace) -> int:
    """``args.check`` (when set) then ``args.func``; a ``UsageError`` from either is printed
    as one line ``spectr-gbv SUB: message`` (``spectr-gbv certify WHAT: message`` for a certify
    sub-command, as argparse names it) and gives exit status 2."""
    try:
        check = getattr(args, "check", None)
        if check is not None:
            check(args)
        return int(args.func(args) or 0)
    except UsageError as err:
        name = " ".join(filter(None, (args.command, getattr(args, "certify_what", None))))
        print(f"spectr-gbv {name}: {one_line(str(err))}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; returns its exit status (2 for bad arguments, printed as one line)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad argument (2, one line printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return run_parsed(args)


if __name__ == "__main__":
    sys.exit(main())
