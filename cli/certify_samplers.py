"""``spectr-gbv certify samplers vllm``: vLLM's own rejection samplers on the built-in case families.

    spectr-gbv certify samplers vllm [--samples N] [--alpha A] [--seed S] [--families F,…]
                                     [--workers W] [--json FILE] [--markdown FILE]

What is certified (certify/samplers/vllm.py): vLLM's installed samplers (Model Runner V2
standard, block verification and synthetic; the v1 RejectionSampler; with draft logits and with
one-hot n-gram drafts) on the built-in case families against the rule each claims.  Where vLLM is
not importable here, the command re-runs itself in the vLLM environment of ``scripts/install.sh
--vllm`` (``.venv-vllm``, or ``$SPECTR_GBV_VLLM_PYTHON``); without one it says so and exits 2.
N = 2,000 per case on a CPU (Triton's interpreter), 2·10^4 on a CUDA GPU, unless ``--samples``.
Exit 0 only when every row is as expected; 1 otherwise; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    from spectr_gbv.cli.args import add_json_flag, output_file, positive_int, seed_int, unit_interval_open

    q = sub.add_parser("samplers", help="a library's own rejection samplers (vllm) on the case families",
                       description="Certifies vLLM's installed rejection samplers (Model Runner V2 and v1) on the "
                       "built-in case families against the rule each claims; runs in the vLLM environment of "
                       "scripts/install.sh --vllm when vLLM is not importable here.")
    q.add_argument("library", metavar="LIBRARY", choices=["vllm"], help="vllm")
    q.add_argument("--samples", type=positive_int, default=None, help="N per case (default 2,000 on a CPU)")
    q.add_argument("--alpha", type=unit_interval_open, default=None, help="false-alarm rate per case")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed")
    q.add_argument("--families", default=None, help="comma-separated case families (default: all; toy, prefix, "
                   "large, zeros, disjoint, equal)")
    q.add_argument("--workers", type=positive_int, default=2, help="processes running cases (default 2)")
    add_json_flag(q, "the rows")
    q.add_argument("--markdown", type=output_file, default=None, help="write the report as markdown to FILE")
    q.set_defaults(func=run, check=check)


def check(args: argparse.Namespace) -> None:
    """The families against the known ones, and a vLLM to run (here or in its environment)."""
    from spectr_gbv.certify.samplers import vllm as vc
    from spectr_gbv.cli.args import UsageError
    from spectr_gbv.oracle.certify_cases import FAMILIES

    args.alpha = vc.DEFAULT_ALPHA if args.alpha is None else args.alpha
    args.family_list = None
    if args.families:
        args.family_list = tuple(f.strip() for f in args.families.split(",") if f.strip())
        bad = [f for f in args.family_list if f not in FAMILIES]
        if bad or not args.family_list:
            raise UsageError(f"--families: unknown family {bad[0] if bad else args.families!r} "
                             f"(known: {', '.join(FAMILIES)})")
    if not vc.importable_here() and vc.locate_python() is None:
        raise UsageError("vLLM is not installed here and no vLLM environment was "
                         "found (make one with `scripts/install.sh --vllm`, or set SPECTR_GBV_VLLM_PYTHON)")


def run(args: argparse.Namespace) -> int:
    """certify.samplers.vllm here, or in the vLLM environment (re-running this command there)."""
    from spectr_gbv.certify.samplers import vllm as vc
    from spectr_gbv.cli.args import text_stream, write_json

    if not vc.importable_here():
        return vc.run_elsewhere(vc.locate_python(), sys.argv[1:])
    from spectr_gbv.gpu_backend.adapters import vllm_shims

    n = args.samples or (vc.CPU_N if vllm_shims.needs_interpreter() else vc.GPU_N)

    def progress(row):
        extra = f"  {row.detail}" if row.detail else ""
        print(f"certify samplers vllm: {row.verdict:6s} {row.sampler} / {row.family}  N={row.n}  "
              f"{row.seconds:.0f}s{extra}", file=sys.stderr, flush=True)

    cert = vc.certify_vllm(n, args.alpha, args.seed, args.workers, families=args.family_list, progress=progress,
                           native_n=args.samples or vc.NATIVE_N)
    command = ("spectr-gbv certify samplers vllm" + (f" --samples {args.samples}" if args.samples else "")
               + (f" --families {','.join(args.family_list)}" if args.family_list else ""))
    out = text_stream(args)
    print(vc.markdown(cert, command), file=out)
    write_json(args.json_file, {"version": cert.version, "device": cert.device,
                                "rows": [r.to_json() for r in cert.rows]})
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(vc.markdown(cert, command) + "\n")
    return 0 if cert.ok else 1
