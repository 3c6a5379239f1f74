"""``spectr-gbv certify verifiers``: the registered torch verifiers against the reference rules' exact laws.

    spectr-gbv certify verifiers [--rules R,…] [--quick] [--json FILE] [--markdown FILE]
                                 [--samples N] [--alpha A] [--seed S] [--device D] [--threads T]

The library is certify/verifiers/run.py (``certify_rules``); this module parses and prints.

Every rule of the registry (``reference.rules.registry``; or the ``--rules`` subset) is run by
oracle.certify (batched samples with the verifier's own seeded randomness, a G-test of the
joint outcome (τ, accepted prefix, emitted token), of the law of τ, of the emitted token given
(τ, prefix), and the mean of τ against the exact E[τ], each at α/4; on the V = 4,096 rows a
fifth, the coarsened G-test of oracle.coarsen, a sixth, the identity test of oracle.identity,
and each of the six at α/6) on the cases of
certify/suite.py.  Three kinds of row:

* ``lossless`` — a rule registered as lossless (``reference.rules.registry``): fixed-draft cases against the
  reference rule's exact law given the drafts (toy V = 3 float32 and V = 4 bfloat16; random rows
  at V = 4,096 in float32, and in the full run also in bfloat16; the non-modifying rules kseq_bv,
  traversal and mdbv take their own distinctive toy and V = 4,096 cases instead of the generic
  V = 4,096 ones, as in the tests: MDBV's reference law costs 10-50 s per case there), plus the
  law-level check (fresh toy drafts every sample, the first emitted token against the target's
  law, K = L = 2; K = 1 for single-draft rules).  Must pass.  The greedy rules with Algorithm 2
  (gbv, spectr_gbv_fixed, kseq_gbv) are checked on one iteration's (τ, prefix, token), as the
  reference computes it; their modification record is not part of the outcome.
* ``conformance`` — a registered rule the reference does not list as lossless (spectr_gbv, the
  released SpecTr-GBV, and spectr_gbv_fixed: docs/rules.md §2.5, lossy for K ≥ 2 with either
  residual): the same fixed-draft cases against its OWN exact law.  Must pass.
* ``planted`` — wrong rules that must be caught: every rule's planted defects (its spec's
  ``planted``, certify/planted.py: e.g. a shared uniform in SD and BV, first-failure
  stopping in BV and GBV, ρ = 1 in K-SEQ, K-SEQ-GBV and K-SEQ-BV at K = 2, reused coins across
  the drafts in SpecTr-GBV, Traversal and MDBV) against the rule's own exact law, and each lossy
  rule (spectr_gbv, spectr_gbv_fixed) against the target's first-token law at K = L = 2.
  A planted row runs when its base rule is selected.

Each row reports N, α, the smallest total-variation deviation of the whole outcome law detected
with power 0.99 (``detectable δ``: the joint G-test's bound on its pooled cells plus the pooled
mass, oracle.gtest.GTestResult.detectable_tv_law), the deciding test and the case's p-value
(Bonferroni: the number of tests × the smallest of its p-values, the single first-token test's
own p-value), mean τ with its confidence interval against the exact E[τ], and the verdict
(``--json`` adds the pooled mass and the coarsened test's δ on its 64 bins).
Exit status 0 only when every lossless and conformance row passes and every planted row is
caught; 1 otherwise; 2 for bad arguments (e.g. an unknown rule).

Sizes: full run N = 2·10^5 per case at α = 1e-6, except the V = 4,096 rows: 10^6 in float32
and 2·10^6 in bfloat16 (``verifiers.FULL_N_ROWS``), where every lossless rule's case states
δ ≤ 0.02 (at 2·10^5: 0.025-0.082).  ``--quick``: N = 5·10^4 per case (10^5 for
the law-level planted ones), no bfloat16 rows at V = 4,096; every registered rule and every
planted defect is still covered.  ``--samples`` sets N for every case (a law-level planted case
needs N ≳ 3·10^4 to be caught: its first-token TV is 0.024).
"""

from __future__ import annotations

import argparse
import sys

# certify.verifiers.run's defaults, repeated so that --help imports no torch
# (tests/cli/test_certify_cli.py checks they agree)
DEFAULT_ALPHA = 1e-6
FULL_N = 200_000
FULL_N_ROWS = {"rows": 1_000_000, "rows_bf16": 2_000_000}


def register(sub) -> None:
    from spectr_gbv.cli.args import (add_json_flag, int_at_least, output_file, positive_int, seed_int,
                                    unit_interval_open)

    q = sub.add_parser("verifiers", help="the torch verifiers against the reference's exact laws",
                       description="Runs every registered torch verifier on fixed-draft and law-level cases, compares "
                       "its outcomes with the reference's exact law (G-tests and the mean of tau), and checks that "
                       "planted wrong rules are caught.  Exit 0 only when every lossless rule passes and every "
                       "planted rule is caught.")
    q.add_argument("--rules", default=None, help="comma-separated registered rules (default: all); planted wrong "
                   "rules run with their base rule")
    q.add_argument("--quick", action="store_true", help="smaller N and fewer cases (every rule and planted "
                   "defect still covered; under 5 minutes on 2 CPU cores)")
    q.add_argument("--samples", type=int_at_least(2, " (the mean test needs 2 samples)"), default=None,
                   help=f"N for every case (default {FULL_N}; V = 4,096 rows {FULL_N_ROWS['rows']} and "
                   f"{FULL_N_ROWS['rows_bf16']} in bfloat16)")
    q.add_argument("--alpha", type=unit_interval_open, default=None, help=f"false-alarm rate per case "
                   f"(default {DEFAULT_ALPHA:g})")
    q.add_argument("--seed", type=seed_int, default=0, help="base seed of the verifiers' noise")
    q.add_argument("--device", default="cpu", help="torch device of the verifiers (default cpu)")
    q.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1: small "
                   "batched ops are faster on one)")
    add_json_flag(q, "the rows")
    q.add_argument("--markdown", type=output_file, default=None, help="write the report as markdown to FILE")
    q.set_defaults(func=run, check=check)


def check(args: argparse.Namespace) -> None:
    """Threads, the rule names against the registry, the device (ranges: the parser)."""
    from spectr_gbv.certify.verifiers.run import parse_rules
    from spectr_gbv.cli.args import UsageError
    from spectr_gbv.cli.torch_device import set_threads, torch_device
    from spectr_gbv.reference.rules import registry

    set_threads(args.threads)
    args.alpha = DEFAULT_ALPHA if args.alpha is None else args.alpha
    try:
        args.rule_list = parse_rules(args.rules, registry.names())
    except ValueError as err:
        raise UsageError(str(err)) from None
    args.torch_device = torch_device(args.device)


def run(args: argparse.Namespace) -> int:
    """The table and the summary; exit 0 only when every lossless and conformance row passes and
    every planted row is caught."""
    from spectr_gbv.certify.verifiers.run import certify_rules, markdown, power_text, summary, text_table
    from spectr_gbv.cli.args import text_stream, write_json

    def progress(row):
        extra = f"  {row.error}" if row.error else ""
        if row.power == row.power:  # a planted row: its effect and the power at its N
            extra += f"  effect TV {row.effect_tv:.4f}, power {power_text(row.power)} ({row.power_test})"
        print(f"certify verifiers: {row.verdict:6s} {row.case}  N={row.n}  p={row.pvalue:.3g}  "
              f"δ={row.detectable_delta:.4f}  {row.seconds:.1f}s{extra}", file=sys.stderr, flush=True)

    cert = certify_rules(args.rule_list, args.quick, args.samples, args.alpha, args.seed, str(args.torch_device),
                         progress)
    out = text_stream(args)
    print(text_table(cert.rows), file=out)
    print(file=out)
    print(summary(cert), file=out)
    write_json(args.json_file, [r.to_json() for r in cert.rows])
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(markdown(cert, command(args)))
    return 0 if cert.ok else 1


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (for the markdown report)."""
    parts = ["spectr-gbv certify verifiers"]
    if args.rules:
        parts.append(f"--rules {args.rules}")
    if args.quick:
        parts.append("--quick")
    if args.samples is not None:
        parts.append(f"--samples {args.samples}")
    if args.alpha != DEFAULT_ALPHA:
        parts.append(f"--alpha {args.alpha:g}")
    if args.seed:
        parts.append(f"--seed {args.seed}")
    if args.device != "cpu":
        parts.append(f"--device {args.device}")
    return " ".join(parts)
