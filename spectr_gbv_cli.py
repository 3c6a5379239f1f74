"""The ``spectr-gbv`` command: one sub-command per job, each registered by its own package.

Each module listed in ``SUBCOMMANDS`` exposes ``register(subparsers)``, which adds its parser
and sets ``func`` (called with the parsed arguments, returning the exit status).  The modules
import their heavy dependencies (cvxpy, torch, transformers) inside ``func`` only, so that
``spectr-gbv exact`` works with numpy alone.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# sub-command → module that registers it
SUBCOMMANDS = {
    "exact": "reference.cli",
    "oracle": "oracle.cli",
    "prove": "proofs_check.cli",
    "certify": "gpu_backend.certify_cli",
    "generate": "gpu_backend.generate_cli",
    "bench": "gpu_backend.bench_cli",
    "report": "gpu_backend.report_cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
