"""``spectr-gbv certify WHAT``: certification, one sub-command per thing certified.

    spectr-gbv certify verifiers [--rules R,…] [--quick] [--samples N] …   cli/certify_verifiers.py
    spectr-gbv certify samplers vllm [--samples N] [--families F,…] …      cli/certify_samplers.py
    spectr-gbv certify engine NAME [--modes M,…] [--quick] [--samples N] … cli/certify_engine.py
    spectr-gbv certify our-engine [--rules R,…] [--quick] [--backend B] …  cli/certify_our_engine.py
    spectr-gbv certify endpoint URL [--reference self|hf:…|gguf:…|endpoint:URL] …
                                                                            cli/certify_endpoint.py
    spectr-gbv certify log FILE [--lines A:B] [--out PARTIAL.json] | --merge PARTIAL.json …
                                                                            cli/certify_log.py

Each sub-command has its own module here (parsing and printing) and its own folder in certify/
(the library: ``certify/verifiers``, ``samplers``, ``engine``, ``our_engine``, ``endpoint``, ``log``), and
its own ``--help``.  ``certify endpoint`` and ``certify log`` run from the light install (numpy,
scipy, tqdm, msgspec: no torch); the others need the ``[torch]`` extra.  ``spectr-gbv certify`` alone prints this list (exit 2).
"""

from __future__ import annotations

import importlib
import sys

# sub-command → module that registers it (each imports nothing heavy at import time)
SUBCOMMANDS = {
    "verifiers": "spectr_gbv.cli.certify_verifiers",
    "samplers": "spectr_gbv.cli.certify_samplers",
    "engine": "spectr_gbv.cli.certify_engine",
    "our-engine": "spectr_gbv.cli.certify_our_engine",
    "endpoint": "spectr_gbv.cli.certify_endpoint",
    "log": "spectr_gbv.cli.certify_log",
}


def register(subparsers) -> None:
    """Add ``certify`` and its sub-commands (``subparsers``: the top parser's action)."""
    p = subparsers.add_parser(
        "certify",
        help="certify verifiers, vLLM's samplers, an engine's generate, our engine, a deployment, or recorded "
        "traffic (certify verifiers|samplers vllm|engine NAME|our-engine|endpoint URL|log FILE)",
        description="Certification, one sub-command per thing certified: verifiers (the torch "
        "verifiers against the reference's exact laws), samplers vllm (vLLM's own rejection "
        "samplers), engine NAME (another engine's generate, black box), our-engine (our engine, white "
        "box), endpoint URL (a deployment through its own API; needs no torch), log FILE (recorded traffic: "
        "requests and answers with their top-k log-probabilities; needs no torch).  Each has its own --help.",
    )

    def no_what(_args) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(func=no_what)
    sub = p.add_subparsers(dest="certify_what", metavar="WHAT")
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).register(sub)
